//! ImageService. Every RPC answers `Unimplemented` until the image store lands.

use std::pin::Pin;

use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::pb::{self, image_service_server::ImageService};
use super::status::unimplemented;

pub struct ImageServer {}

#[tonic::async_trait]
impl ImageService for ImageServer {
    type StreamImagesStream =
        Pin<Box<dyn Stream<Item = Result<pb::StreamImagesResponse, Status>> + Send + 'static>>;

    async fn list_images(
        &self,
        _: Request<pb::ListImagesRequest>,
    ) -> Result<Response<pb::ListImagesResponse>, Status> {
        Err(unimplemented("ListImages"))
    }
    async fn stream_images(
        &self,
        _: Request<pb::StreamImagesRequest>,
    ) -> Result<Response<Self::StreamImagesStream>, Status> {
        Err(unimplemented("StreamImages"))
    }
    async fn image_status(
        &self,
        _: Request<pb::ImageStatusRequest>,
    ) -> Result<Response<pb::ImageStatusResponse>, Status> {
        Err(unimplemented("ImageStatus"))
    }
    async fn pull_image(
        &self,
        _: Request<pb::PullImageRequest>,
    ) -> Result<Response<pb::PullImageResponse>, Status> {
        Err(unimplemented("PullImage"))
    }
    async fn remove_image(
        &self,
        _: Request<pb::RemoveImageRequest>,
    ) -> Result<Response<pb::RemoveImageResponse>, Status> {
        Err(unimplemented("RemoveImage"))
    }
    async fn image_fs_info(
        &self,
        _: Request<pb::ImageFsInfoRequest>,
    ) -> Result<Response<pb::ImageFsInfoResponse>, Status> {
        Err(unimplemented("ImageFsInfo"))
    }
}
