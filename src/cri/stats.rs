//! Statistics and metrics RPCs: PodSandboxStats, ContainerStats and their List and Stream
//! forms, and ListPodSandboxMetrics / StreamPodSandboxMetrics (conversions in
//! `convert/stats.rs`). Statistics are file reads: each RPC runs them off the async threads.

use tonic::Status;
use tracing::Instrument;

use super::convert::{
    container_stats, container_stats_filter, pod_metrics, pod_stats, pod_stats_filter,
};
use super::pb;
use super::runtime::RuntimeServer;

impl RuntimeServer {
    pub(super) async fn pod_sandbox_stats_rpc(
        &self,
        req: pb::PodSandboxStatsRequest,
    ) -> Result<pb::PodSandboxStatsResponse, Status> {
        let id = req.pod_sandbox_id;
        let span = tracing::debug_span!("PodSandboxStats", pod_id = %id);
        let containers = self.containers.clone();
        let s = super::blocking(move || Ok(containers.pod_stats(&id)?))
            .instrument(span)
            .await?;
        Ok(pb::PodSandboxStatsResponse {
            stats: Some(pod_stats(&s)),
        })
    }

    /// Stats of the ready pods `filter` selects, with their containers'.
    pub(super) async fn list_pod_stats_rpc(
        &self,
        filter: Option<pb::PodSandboxStatsFilter>,
    ) -> Result<Vec<pb::PodSandboxStats>, Status> {
        let filter = pod_stats_filter(filter);
        let containers = self.containers.clone();
        super::blocking(move || {
            Ok(containers
                .list_pod_stats(&filter)
                .iter()
                .map(pod_stats)
                .collect())
        })
        .await
    }

    pub(super) async fn container_stats_rpc(
        &self,
        req: pb::ContainerStatsRequest,
    ) -> Result<pb::ContainerStatsResponse, Status> {
        let id = req.container_id;
        let span = tracing::debug_span!("ContainerStats", container_id = %id);
        let containers = self.containers.clone();
        let s = super::blocking(move || Ok(containers.stats(&id)?))
            .instrument(span)
            .await?;
        Ok(pb::ContainerStatsResponse {
            stats: Some(container_stats(&s)),
        })
    }

    /// Stats of the created and running containers `filter` selects.
    pub(super) async fn list_container_stats_rpc(
        &self,
        filter: Option<pb::ContainerStatsFilter>,
    ) -> Result<Vec<pb::ContainerStats>, Status> {
        let filter = container_stats_filter(filter);
        let containers = self.containers.clone();
        super::blocking(move || {
            Ok(containers
                .list_stats(&filter)
                .iter()
                .map(container_stats)
                .collect())
        })
        .await
    }

    /// The cAdvisor-named series of every ready pod and its containers.
    pub(super) async fn pod_metrics_rpc(&self) -> Result<Vec<pb::PodSandboxMetrics>, Status> {
        let containers = self.containers.clone();
        super::blocking(move || Ok(containers.pod_metrics().iter().map(pod_metrics).collect()))
            .await
    }
}
