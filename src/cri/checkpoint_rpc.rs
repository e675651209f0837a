//! The pod checkpoint RPCs of RuntimeService (CheckpointPod, RestorePod: cri-api v0.37):
//! decode, delegate to `container::Containers`, encode. CheckpointContainer is with the other
//! container RPCs.

use tonic::Status;
use tracing::Instrument;

use super::convert;
use super::pb;
use super::runtime::{RuntimeServer, log_err};
use crate::container::{PodCheckpoint, PodRestore};

impl RuntimeServer {
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
