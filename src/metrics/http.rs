//! The metrics endpoint: HTTP/1.1 on a TCP address, `GET /metrics` answers the registry in the
//! OpenMetrics text format (what Prometheus asks for first); anything else is 404. Scrapes read
//! counters and the daemon's in-memory tables only, so they are answered on the async threads.

use std::convert::Infallible;
use std::sync::Arc;

use hyper::{Method, Request, Response, StatusCode, header};
use hyper_util::rt::TokioIo;
use prometheus_client::registry::Registry;

const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Serves `registry` on `listener` until the task is dropped; a connection's error ends only
/// that connection.
pub async fn serve(listener: tokio::net::TcpListener, registry: Registry) {
    let registry = Arc::new(registry);
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
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let answer = respond(&registry, &req);
                async move { Ok::<_, Infallible>(answer) }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(e) = served {
                tracing::debug!(error = %e, "metrics endpoint: connection ended");
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
