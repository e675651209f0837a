//! The CRI v1 gRPC adapters. Each RPC decodes its request, validates it, calls the domain
//! (`sandbox`, `image`, ...) with plain Rust types and encodes the answer. Protobuf types never
//! leave this module (and `stream`); `status.rs` is the one table from domain errors to codes.

pub mod client;
mod container_rpc;
mod convert;
mod deadline;
#[cfg(any(test, fuzzing))]
pub mod fuzz;
pub mod image;
mod listed;
mod rpc_metrics;
pub mod runtime;
mod stats;
pub mod status;
mod stream;

/// Generated CRI v1 protobuf and gRPC types (package `runtime.v1`).
#[allow(clippy::all, unused_qualifications)]
pub mod pb {
    tonic::include_proto!("runtime.v1");
    pub use super::listed::{ListContainersResponse, ListPodSandboxResponse};
}

/// Runs blocking work (store removal, disk usage, cgroup statistics) off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, tonic::Status> + Send + 'static,
) -> Result<T, tonic::Status> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(status::task_failed)?
}

pub use image::ImageServer;
pub use runtime::RuntimeServer;

/// Serves both CRI services on `incoming` until `shutdown` resolves; in-flight RPCs finish.
/// The largest CRI message either way: kubelet's own limit (16 MiB). A bigger request is
/// refused before it is decoded (ResourceExhausted); a bigger answer would be refused by kubelet.
pub const MAX_MESSAGE: usize = 16 << 20;

pub async fn serve(
    runtime: RuntimeServer,
    images: ImageServer,
    incoming: tokio_stream::wrappers::UnixListenerStream,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    tonic::transport::Server::builder()
        // Every RPC runs in a span naming it (debug level: visible with `crust=debug`); the
        // lifecycle verbs add an info span of their own carrying the pod and image ids.
        .trace_fn(|req| {
            let rpc = req.uri().path().rsplit('/').next().unwrap_or_default();
            tracing::debug_span!("rpc", name = %rpc)
        })
        // Outermost, so the deadline layer's own answers are counted too.
        .layer(rpc_metrics::RpcMetricsLayer)
        .layer(deadline::DeadlineLayer)
        .add_service(
            pb::runtime_service_server::RuntimeServiceServer::new(runtime)
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
        )
        .add_service(
            pb::image_service_server::ImageServiceServer::new(images)
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
        )
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}
