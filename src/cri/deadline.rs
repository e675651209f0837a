//! Client deadlines (`grpc-timeout`) answered with DEADLINE_EXCEEDED, as the gRPC protocol and
//! critest ("public image should timeout if requested") expect. tonic's server enforces the
//! header too, but answers CANCELLED; a Go client then sees whichever status arrives before its
//! own timer fires, so the code a caller gets would depend on scheduling.
//!
//! This layer sits inside tonic's (layers added with `Server::layer` wrap the routes, tonic's
//! deadline wraps them) and arms its timer in `call`, before tonic arms its own, so its deadline
//! is never later; tonic polls the inner future first, so when both have passed this answer wins.
//! The work behind the RPC is not cancelled by a deadline: lifecycle verbs and pulls run
//! detached, so a retry finds them finished or joins them.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tonic::codegen::http;

/// Adds [`Deadline`] to a service.
#[derive(Clone, Copy, Debug, Default)]
pub struct DeadlineLayer;

impl<S> tower::Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;

    fn layer(&self, inner: S) -> Deadline<S> {
        Deadline { inner }
    }
}

/// Answers DEADLINE_EXCEEDED once the client's `grpc-timeout` has passed.
#[derive(Clone, Debug)]
pub struct Deadline<S> {
    inner: S,
}

type Response = http::Response<tonic::body::Body>;

impl<S, B> tower::Service<http::Request<B>> for Deadline<S>
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
        let timeout = req
            .headers()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_grpc_timeout);
        let Some(timeout) = timeout else {
            return Box::pin(self.inner.call(req));
        };
        let rpc = req.uri().path().rsplit('/').next().unwrap_or("").to_owned();
        // Armed here, before the inner call and before tonic's own timer.
        let expired = tokio::time::sleep(timeout);
        let answer = self.inner.call(req);
        Box::pin(async move {
            tokio::select! {
                biased;
                r = answer => r,
                () = expired => Ok(exceeded(&rpc, timeout)),
            }
        })
    }
}

fn exceeded(rpc: &str, timeout: Duration) -> Response {
    tonic::Status::deadline_exceeded(format!(
        "{rpc}: the client's deadline of {timeout:?} passed before crust finished; \
         the operation goes on in the background and a retry joins it"
    ))
    .into_http()
}

/// Parses a `grpc-timeout` value: at most 8 digits and a unit (H, M, S, m, u, n).
fn parse_grpc_timeout(v: &str) -> Option<Duration> {
    if v.len() < 2 || v.len() > 9 {
        return None;
    }
    let (digits, unit) = v.split_at(v.len() - 1);
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit_and_rejects_malformed_values() {
        assert_eq!(parse_grpc_timeout("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_grpc_timeout("3M"), Some(Duration::from_secs(180)));
        assert_eq!(parse_grpc_timeout("10S"), Some(Duration::from_secs(10)));
        assert_eq!(parse_grpc_timeout("999m"), Some(Duration::from_millis(999)));
        assert_eq!(parse_grpc_timeout("987u"), Some(Duration::from_micros(987)));
        assert_eq!(
            parse_grpc_timeout("99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        for bad in ["", "S", "10", "10s", "-1S", "1.5S", "123456789S", "1 S"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
        }
    }
}
