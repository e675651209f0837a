//! The metrics endpoint: HTTP/1.1 on a TCP address, `GET /metrics` answers the registry in the
//! OpenMetrics text format (what Prometheus asks for first); anything else is 404. Scrapes read
//! counters and the daemon's in-memory tables only, so they are answered on the async threads.
//!
//! Bounds: a request head must arrive within `HEAD_TIMEOUT` (also between the requests of a
//! kept-alive connection), and at most `MAX_CONNECTIONS` are open at once; a new one past that
//! closes the oldest (`crate::accept`).

use std::convert::Infallible;
use std::sync::Arc;

use hyper::{Method, Request, Response, StatusCode, header};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::registry::Registry;

/// A scraper sends its request at once; a connection saying nothing is closed after this.
const HEAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// Prometheus keeps one connection per target; a few more for people with curl.
pub const MAX_CONNECTIONS: usize = 16;

const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Serves `registry` on `listener` until the task is dropped; a connection's error ends only
/// that connection.
pub async fn serve(listener: tokio::net::TcpListener, registry: Registry) {
    let registry = Arc::new(registry);
    let admitted = crate::accept::Admitted::new(MAX_CONNECTIONS);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, most likely: wait rather than spin.
                tracing::warn!(error = %e, "metrics endpoint: accepting a connection");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let registry = registry.clone();
        let mut ticket = admitted.admit();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let answer = respond(&registry, &req);
                async move { Ok::<_, Infallible>(answer) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                served = conn => if let Err(e) = served {
                    tracing::debug!(error = %e, "metrics endpoint: connection ended");
                },
                () = ticket.pushed_out() => {
                    tracing::debug!("metrics endpoint: connection closed to make room for a newer one");
                }
            }
        });
    }
}

fn respond<B>(registry: &Registry, req: &Request<B>) -> Response<String> {
    let (status, content_type, body) = match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => (StatusCode::OK, CONTENT_TYPE, super::encode(registry)),
        (&Method::GET, _) => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "crust serves its metrics on /metrics\n".to_owned(),
        ),
        _ => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET /metrics\n".to_owned(),
        ),
    };
    let mut answer = Response::new(body);
    *answer.status_mut() = status;
    answer.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    answer
}
