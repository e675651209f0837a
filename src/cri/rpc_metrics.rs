//! Counts every RPC and times it, by method and gRPC code, into `crate::metrics`.
//!
//! The code of a gRPC answer is in its headers when the answer is an error (a "trailers-only"
//! response) and otherwise in the trailers after the last message, so the response body is
//! wrapped and the RPC is recorded when its trailers pass, or when the body ends or is dropped
//! without them (a client gone mid-stream: `Canceled`). The time runs from the request's arrival
//! to that moment, the whole of a streamed answer included. This layer sits outside the
//! deadline layer, so a DEADLINE_EXCEEDED that layer answers is counted too.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use http_body::{Body, Frame};
use tonic::codegen::http;

/// Adds [`RpcMetrics`] to a service.
#[derive(Clone, Copy, Debug, Default)]
pub struct RpcMetricsLayer;

impl<S> tower::Layer<S> for RpcMetricsLayer {
    type Service = RpcMetrics<S>;

    fn layer(&self, inner: S) -> RpcMetrics<S> {
        RpcMetrics { inner }
    }
}

#[derive(Clone, Debug)]
pub struct RpcMetrics<S> {
    inner: S,
}

type Response = http::Response<tonic::body::Body>;

impl<S, B> tower::Service<http::Request<B>> for RpcMetrics<S>
where
    S: tower::Service<http::Request<B>, Response = Response>,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let record = Record {
            method: method(req.uri().path()),
            started: Instant::now(),
            code: None,
            done: false,
        };
        #[cfg(debug_assertions)]
        crate::failpoint::rpc_started(&record.method);
        let answer = self.inner.call(req);
        Box::pin(async move {
            let mut record = record;
            let response = answer.await?;
            record.code = grpc_status(response.headers());
            let (parts, body) = response.into_parts();
            let body = tonic::body::Body::new(Recorded {
                inner: body,
                record,
            });
            Ok(http::Response::from_parts(parts, body))
        })
    }
}

/// The method's name (`RunPodSandbox`) from the request path; anything that is not a plain
/// name is `other`, so a client cannot make up label values without bound.
fn method(path: &str) -> String {
    let name = path.rsplit('/').next().unwrap_or_default();
    let plain =
        !name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_alphanumeric());
    if plain {
        name.to_owned()
    } else {
        "other".to_owned()
    }
}

fn grpc_status(headers: &http::HeaderMap) -> Option<i32> {
    headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// One RPC, recorded once: when its code is known and its answer has ended.
struct Record {
    method: String,
    started: Instant,
    code: Option<i32>,
    done: bool,
}

impl Record {
    fn finish(&mut self, code: Option<i32>) {
        if self.done {
            return;
        }
        self.done = true;
        // No status at all: the client went away before the answer ended.
        const CANCELED: i32 = 1;
        let code = self.code.or(code).unwrap_or(CANCELED);
        crate::metrics::rpc_finished(&self.method, code, self.started.elapsed());
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        self.finish(None);
    }
}

/// A response body that records its RPC when it ends.
struct Recorded<B> {
    inner: B,
    record: Record,
}

impl<B> Body for Recorded<B>
where
    B: Body + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(trailers) = frame.trailers_ref() {
                    let code = grpc_status(trailers);
                    self.record.finish(code);
                }
            }
            Poll::Ready(None) => self.record.finish(None),
            // A broken body: the client sees an error status of the transport's making.
            Poll::Ready(Some(Err(_))) => self.record.finish(Some(2)),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_names_are_bounded() {
        assert_eq!(
            method("/runtime.v1.RuntimeService/RunPodSandbox"),
            "RunPodSandbox"
        );
        assert_eq!(method("/x/"), "other");
        assert_eq!(method(&format!("/a/{}", "x".repeat(65))), "other");
        assert_eq!(method("/a/b%20c"), "other");
    }
}
