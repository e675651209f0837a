//! The container RPCs of RuntimeService, with the pod checkpoint ones (CheckpointPod,
//! RestorePod): decode, delegate to `container::Containers`, encode.
//! `runtime.rs` routes each trait method here.

use std::time::Duration;

use tonic::Status;
use tracing::Instrument;

use super::convert;
use super::pb;
use super::runtime::{RuntimeServer, log_err};
use crate::container::{PodCheckpoint, PodRestore};

impl RuntimeServer {
    pub(super) async fn create_container_rpc(
        &self,
        req: pb::CreateContainerRequest,
    ) -> Result<pb::CreateContainerResponse, Status> {
        let spec = convert::container_spec(req.config)?;
        let span = tracing::info_span!("CreateContainer", pod_id = %req.pod_sandbox_id,
            container = %spec.metadata.name, container_id = tracing::field::Empty);
        async {
            let id = self
                .containers
                .create(&req.pod_sandbox_id, spec)
                .await
                .inspect_err(log_err)?;
            Ok(pb::CreateContainerResponse { container_id: id })
        }
        .instrument(span)
        .await
    }

    pub(super) async fn start_container_rpc(
        &self,
        req: pb::StartContainerRequest,
    ) -> Result<pb::StartContainerResponse, Status> {
        let id = req.container_id;
        async {
            self.containers.start(&id).await.inspect_err(log_err)?;
            Ok(pb::StartContainerResponse {})
        }
        .instrument(tracing::info_span!("StartContainer", container_id = %id))
        .await
    }

    pub(super) async fn stop_container_rpc(
        &self,
        req: pb::StopContainerRequest,
    ) -> Result<pb::StopContainerResponse, Status> {
        let id = req.container_id;
        let timeout = Duration::from_secs(req.timeout.max(0) as u64);
        async {
            self.containers
                .stop(&id, timeout)
                .await
                .inspect_err(log_err)?;
            tracing::info!("container stopped");
            Ok(pb::StopContainerResponse {})
        }
        .instrument(tracing::info_span!("StopContainer", container_id = %id))
        .await
    }

    pub(super) async fn remove_container_rpc(
        &self,
        req: pb::RemoveContainerRequest,
    ) -> Result<pb::RemoveContainerResponse, Status> {
        let id = req.container_id;
        async {
            self.containers.remove(&id).await.inspect_err(log_err)?;
            Ok(pb::RemoveContainerResponse {})
        }
        .instrument(tracing::info_span!("RemoveContainer", container_id = %id))
        .await
    }

    pub(super) fn list_containers_rpc(
        &self,
        req: pb::ListContainersRequest,
    ) -> pb::ListContainersResponse {
        let filter = convert::container_filter(req.filter);
        let memo = &self.listed.containers;
        type Record = std::sync::Arc<crate::container::ContainerRecord>;
        fn id(r: &Record) -> (&str, &Record) {
            (r.id.as_str(), r)
        }
        let convert = |r: &Record| convert::container(r);
        pb::ListContainersResponse::encoded(if filter.is_empty() {
            let changes = self.containers.changes();
            memo.unfiltered(changes, || self.containers.list(&filter), id, convert)
        } else {
            memo.encode(&self.containers.list(&filter), id, convert)
        })
    }

    pub(super) fn container_status_rpc(
        &self,
        req: pb::ContainerStatusRequest,
    ) -> Result<pb::ContainerStatusResponse, Status> {
        let record = self.containers.status(&req.container_id)?;
        let mut info = std::collections::HashMap::new();
        if req.verbose {
            info.insert("info".to_owned(), self.containers.info(&record).to_string());
        }
        Ok(pb::ContainerStatusResponse {
            status: Some(convert::container_status(&record)),
            info,
        })
    }

    pub(super) async fn update_container_resources_rpc(
        &self,
        req: pb::UpdateContainerResourcesRequest,
    ) -> Result<pb::UpdateContainerResourcesResponse, Status> {
        let id = req.container_id;
        let resources = convert::resources(req.linux.unwrap_or_default());
        async {
            self.containers
                .update_resources(&id, resources)
                .await
                .inspect_err(log_err)?;
            Ok(pb::UpdateContainerResourcesResponse {})
        }
        .instrument(tracing::info_span!("UpdateContainerResources", container_id = %id))
        .await
    }

    pub(super) async fn checkpoint_container_rpc(
        &self,
        req: pb::CheckpointContainerRequest,
    ) -> Result<pb::CheckpointContainerResponse, Status> {
        let id = req.container_id;
        async {
            self.containers
                .checkpoint(&id, &req.location)
                .await
                .inspect_err(log_err)?;
            Ok(pb::CheckpointContainerResponse {})
        }
        .instrument(tracing::info_span!("CheckpointContainer", container_id = %id))
        .await
    }

    pub(super) async fn reopen_container_log_rpc(
        &self,
        req: pb::ReopenContainerLogRequest,
    ) -> Result<pb::ReopenContainerLogResponse, Status> {
        self.containers.reopen_log(&req.container_id).await?;
        Ok(pb::ReopenContainerLogResponse {})
    }

    pub(super) async fn exec_sync_rpc(
        &self,
        req: pb::ExecSyncRequest,
    ) -> Result<pb::ExecSyncResponse, Status> {
        let timeout = (req.timeout > 0).then(|| Duration::from_secs(req.timeout as u64));
        let id = req.container_id;
        let out = self
            .containers
            .exec_sync(&id, req.cmd, timeout)
            .instrument(tracing::debug_span!("ExecSync", container_id = %id))
            .await?;
        Ok(pb::ExecSyncResponse {
            stdout: out.stdout,
            stderr: out.stderr,
            exit_code: out.exit_code,
        })
    }

    pub(super) async fn checkpoint_pod_rpc(
        &self,
        req: pb::CheckpointPodRequest,
    ) -> Result<pb::CheckpointPodResponse, Status> {
        let span = tracing::info_span!("CheckpointPod", pod_id = %req.pod_sandbox_id);
        let req = PodCheckpoint {
            pod_id: req.pod_sandbox_id,
            output: req.output_path,
            container_ids: req.container_ids,
            options: req.options.into_iter().collect(),
        };
        async {
            self.containers
                .checkpoint_pod(req)
                .await
                .inspect_err(log_err)?;
            Ok(pb::CheckpointPodResponse {})
        }
        .instrument(span)
        .await
    }

    pub(super) async fn restore_pod_rpc(
        &self,
        req: pb::RestorePodRequest,
    ) -> Result<pb::RestorePodResponse, Status> {
        let sandbox = convert::sandbox_spec(req.config, req.runtime_handler)?;
        let span = tracing::info_span!("RestorePod", pod = %sandbox.metadata.name,
            checkpoint = %req.checkpoint_path);
        let containers = req
            .container_configs
            .into_iter()
            .map(|c| convert::container_spec(Some(c)))
            .collect::<Result<Vec<_>, _>>()?;
        let req = PodRestore {
            checkpoint: req.checkpoint_path,
            sandbox,
            containers,
            options: req.options.into_iter().collect(),
        };
        async {
            let (pod_sandbox_id, restored) = self
                .containers
                .restore_pod(req)
                .await
                .inspect_err(log_err)?;
            Ok(pb::RestorePodResponse {
                pod_sandbox_id,
                restored_containers: restored
                    .into_iter()
                    .map(|(name, container_id)| pb::RestoredContainer { name, container_id })
                    .collect(),
            })
        }
        .instrument(span)
        .await
    }
}
