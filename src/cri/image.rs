//! ImageService: thin adapters over `image::Images`. Requests are decoded into plain strings
//! and `Credentials`; records come back as `ImageView`s and are encoded here.

use std::pin::Pin;
use std::sync::Arc;

use tokio_stream::Stream;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::blocking;
use super::pb::{self, image_service_server::ImageService};
use super::status::invalid;
use crate::image::{Credentials, FsUsage, ImageView, Images};

pub struct ImageServer {
    pub images: Arc<Images>,
    /// Runtime handlers a request may name.
    pub handlers: Vec<String>,
}

/// ListImages answers in one message; StreamImages sends images in batches this size.
const STREAM_BATCH: usize = 500;

impl ImageServer {
    fn spec(&self, spec: Option<pb::ImageSpec>) -> Result<String, Status> {
        let spec = spec.ok_or_else(|| invalid("image spec is required"))?;
        if !spec.runtime_handler.is_empty() && !self.handlers.contains(&spec.runtime_handler) {
            let shown: String = spec.runtime_handler.chars().take(64).collect();
            return Err(invalid(format!(
                "unknown runtime handler {shown:?} (this crust has: {})",
                self.handlers.join(", ")
            )));
        }
        if spec.image.trim().is_empty() {
            return Err(invalid("image spec names no image"));
        }
        Ok(spec.image)
    }

    /// Images, read off the async threads (a changed store reloads its records from disk).
    async fn list(&self, filter: Option<pb::ImageFilter>) -> Result<Vec<pb::Image>, Status> {
        let filter = filter.and_then(|f| f.image).map(|s| s.image);
        let images = self.images.clone();
        blocking(move || Ok(images.list(filter.as_deref())?.iter().map(image).collect())).await
    }
}

fn image(v: &ImageView) -> pb::Image {
    pb::Image {
        id: v.id(),
        repo_tags: v.record.repo_tags.clone(),
        repo_digests: v.record.repo_digests.clone(),
        size: v.record.size.max(1),
        uid: v.uid.map(|value| pb::Int64Value { value }),
        username: v.username.clone(),
        spec: Some(pb::ImageSpec {
            image: v.id(),
            ..Default::default()
        }),
        pinned: v.pinned,
    }
}

/// An ImageStatus answer: empty when the image is not stored (not an error, per CRI).
fn image_status(view: Option<&ImageView>, info: Option<String>) -> pb::ImageStatusResponse {
    let Some(view) = view else {
        return pb::ImageStatusResponse::default();
    };
    pb::ImageStatusResponse {
        image: Some(image(view)),
        info: info.map(|i| ("info".to_owned(), i)).into_iter().collect(),
    }
}

fn credentials(a: Option<pb::AuthConfig>) -> Credentials {
    let a = a.unwrap_or_default();
    Credentials {
        username: a.username,
        password: a.password,
        auth: a.auth,
        identity_token: a.identity_token,
        registry_token: a.registry_token,
        server_address: a.server_address,
    }
}

fn usage(u: FsUsage, timestamp: i64) -> pb::FilesystemUsage {
    pb::FilesystemUsage {
        timestamp,
        fs_id: Some(pb::FilesystemIdentifier {
            mountpoint: u.mountpoint.display().to_string(),
        }),
        used_bytes: Some(pb::UInt64Value { value: u.bytes }),
        inodes_used: Some(pb::UInt64Value { value: u.inodes }),
    }
}

fn log_err(e: &Status) {
    tracing::warn!(code = ?e.code(), error = %e.message(), "image request failed");
}

#[tonic::async_trait]
impl ImageService for ImageServer {
    type StreamImagesStream =
        Pin<Box<dyn Stream<Item = Result<pb::StreamImagesResponse, Status>> + Send + 'static>>;

    async fn list_images(
        &self,
        req: Request<pb::ListImagesRequest>,
    ) -> Result<Response<pb::ListImagesResponse>, Status> {
        let images = self.list(req.into_inner().filter).await?;
        Ok(Response::new(pb::ListImagesResponse { images }))
    }

    async fn stream_images(
        &self,
        req: Request<pb::StreamImagesRequest>,
    ) -> Result<Response<Self::StreamImagesStream>, Status> {
        let images = self.list(req.into_inner().filter).await?;
        let batches: Vec<Result<pb::StreamImagesResponse, Status>> = images
            .chunks(STREAM_BATCH)
            .map(|c| Ok(pb::StreamImagesResponse { images: c.to_vec() }))
            .collect();
        Ok(Response::new(Box::pin(tokio_stream::iter(batches))))
    }

    async fn image_status(
        &self,
        req: Request<pb::ImageStatusRequest>,
    ) -> Result<Response<pb::ImageStatusResponse>, Status> {
        let req = req.into_inner();
        let spec = self.spec(req.image)?;
        let images = self.images.clone();
        // kubelet asks before every container it creates. The records in memory are nearly
        // always current: answered here, the call skips the hop to the blocking pool that a
        // reload from disk, or the verbose info, needs.
        if !req.verbose
            && let Some(found) = images.status_if_current(&spec)
        {
            return Ok(Response::new(image_status(found?.as_ref(), None)));
        }
        blocking(move || {
            let view = images.status(&spec)?;
            let info = req
                .verbose
                .then(|| view.as_ref().map(|v| v.info(&images).to_string()))
                .flatten();
            Ok(Response::new(image_status(view.as_ref(), info)))
        })
        .await
    }

    async fn pull_image(
        &self,
        req: Request<pb::PullImageRequest>,
    ) -> Result<Response<pb::PullImageResponse>, Status> {
        let req = req.into_inner();
        let spec = self.spec(req.image)?;
        let creds = credentials(req.auth);
        let images = self.images.clone();
        let image = spec.clone();
        let span =
            tracing::info_span!("PullImage", image = %spec, authenticated = !creds.is_anonymous());
        async move {
            // The pull runs in a task of its own: when the client gives up (kubelet's pull
            // deadline, a ^C'd crictl), the download still finishes and lands in the store, and
            // a retry finds it there (or joins it) instead of starting over.
            let slot = images.pull_slot(&image).await.map_err(Status::from)?;
            let pulled = tokio::spawn(
                async move {
                    let _slot = slot;
                    let started = std::time::Instant::now();
                    let pulled = images.pull(&image, &creds).await.map_err(Status::from);
                    let failure = pulled.as_ref().err().map(|s| s.code() as i32);
                    crate::metrics::image_pull_finished(started.elapsed(), failure);
                    pulled
                }
                .in_current_span(),
            );
            let record = pulled
                .await
                .map_err(super::status::task_failed)?
                .inspect_err(log_err)?;
            Ok(Response::new(pb::PullImageResponse {
                image_ref: record.id.to_string(),
            }))
        }
        .instrument(span)
        .await
    }

    async fn remove_image(
        &self,
        req: Request<pb::RemoveImageRequest>,
    ) -> Result<Response<pb::RemoveImageResponse>, Status> {
        let spec = self.spec(req.into_inner().image)?;
        let images = self.images.clone();
        let span = tracing::info_span!("RemoveImage", image = %spec);
        blocking(move || {
            let _span = span.entered();
            images
                .remove(&spec)
                .map_err(Status::from)
                .inspect_err(log_err)?;
            Ok(Response::new(pb::RemoveImageResponse {}))
        })
        .await
    }

    async fn image_fs_info(
        &self,
        _: Request<pb::ImageFsInfoRequest>,
    ) -> Result<Response<pb::ImageFsInfoResponse>, Status> {
        let images = self.images.clone();
        let (img, ctr) = blocking(move || images.fs_usage().map_err(Status::from)).await?;
        let ts = super::runtime::now_nanos();
        Ok(Response::new(pb::ImageFsInfoResponse {
            image_filesystems: vec![usage(img, ts)],
            container_filesystems: vec![usage(ctr, ts)],
        }))
    }
}
