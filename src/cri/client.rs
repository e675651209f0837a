//! Connecting a CRI client to a unix socket: used by `crust-bench`, the image CLI and tests.

use std::path::PathBuf;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

use super::pb::image_service_client::ImageServiceClient;
use super::pb::runtime_service_client::RuntimeServiceClient;

/// Opens a channel to the CRI endpoint `endpoint` (`unix:///path` or `/path`).
pub async fn channel(endpoint: &str) -> Result<Channel, tonic::transport::Error> {
    let path = PathBuf::from(endpoint.strip_prefix("unix://").unwrap_or(endpoint));
    // The URI is required by the API but unused: every connection goes to the socket.
    Endpoint::from_static("http://[::1]:0")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?))
            }
        }))
        .await
}

pub async fn runtime(
    endpoint: &str,
) -> Result<RuntimeServiceClient<Channel>, tonic::transport::Error> {
    Ok(RuntimeServiceClient::new(channel(endpoint).await?))
}

pub async fn image(endpoint: &str) -> Result<ImageServiceClient<Channel>, tonic::transport::Error> {
    Ok(ImageServiceClient::new(channel(endpoint).await?))
}
