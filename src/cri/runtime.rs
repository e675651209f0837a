//! RuntimeService: version, status and runtime config here; pod sandbox RPCs delegate to
//! `sandbox::Sandboxes`, container RPCs to `container_rpc.rs`, statistics and metrics to
//! `stats.rs`. RPCs not built yet answer `Unimplemented` with a sentence saying so.

use std::pin::Pin;
use std::sync::Arc;

use tokio_stream::Stream;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::convert;
use super::pb::{self, runtime_service_server::RuntimeService};
use super::status;
use crate::config::CgroupDriver;
use crate::container::Containers;
use crate::network::Cni;
use crate::sandbox::Sandboxes;

pub struct RuntimeServer {
    pub sandboxes: Arc<Sandboxes>,
    pub containers: Arc<Containers>,
    pub cni: Arc<Cni>,
    pub cgroup_driver: CgroupDriver,
    pub handlers: Vec<String>,
    /// The configuration in use as JSON (a reload replaces it).
    pub config_info: Arc<std::sync::Mutex<String>>,
    /// Exec, Attach and PortForward URLs.
    pub streams: Arc<crate::stream::Streams>,
    /// The relist's objects, kept encoded between their changes.
    pub listed: Listed,
}

/// Pod sandboxes and containers as their list answers carry them (`listed.rs`).
#[derive(Default)]
pub struct Listed {
    pub(super) sandboxes: super::listed::Memo<crate::sandbox::SandboxRecord>,
    pub(super) containers: super::listed::Memo<crate::container::ContainerRecord>,
}

type Stream_<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// Kubelet's limit on ListPodSandbox responses is the gRPC message size; streams send pods in
/// batches this size.
const STREAM_BATCH: usize = 500;

/// A stream answer: `items` in batches of `STREAM_BATCH`, each wrapped by `wrap`.
fn batched<T: Clone, R: Send + 'static>(
    items: Vec<T>,
    wrap: impl Fn(Vec<T>) -> R,
) -> Response<Stream_<R>> {
    let batches: Vec<Result<R, Status>> = items
        .chunks(STREAM_BATCH)
        .map(|c| Ok(wrap(c.to_vec())))
        .collect();
    Response::new(Box::pin(tokio_stream::iter(batches)))
}

#[tonic::async_trait]
impl RuntimeService for RuntimeServer {
    type StreamPodSandboxesStream = Stream_<pb::StreamPodSandboxesResponse>;
    type StreamContainersStream = Stream_<pb::StreamContainersResponse>;
    type StreamContainerStatsStream = Stream_<pb::StreamContainerStatsResponse>;
    type StreamPodSandboxStatsStream = Stream_<pb::StreamPodSandboxStatsResponse>;
    type GetContainerEventsStream = Stream_<pb::ContainerEventResponse>;
    type StreamPodSandboxMetricsStream = Stream_<pb::StreamPodSandboxMetricsResponse>;

    async fn version(
        &self,
        _: Request<pb::VersionRequest>,
    ) -> Result<Response<pb::VersionResponse>, Status> {
        Ok(Response::new(pb::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "crust".into(),
            runtime_version: env!("CARGO_PKG_VERSION").into(),
            runtime_api_version: "v1".into(),
        }))
    }

    async fn run_pod_sandbox(
        &self,
        req: Request<pb::RunPodSandboxRequest>,
    ) -> Result<Response<pb::RunPodSandboxResponse>, Status> {
        let req = req.into_inner();
        let spec = convert::sandbox_spec(req.config, req.runtime_handler)?;
        let span = tracing::info_span!("RunPodSandbox", pod = %spec.metadata.name,
            namespace = %spec.metadata.namespace, pod_id = tracing::field::Empty);
        async {
            // `run` records the new id in this span (pod_id) as soon as it has one.
            let id = self.containers.run_pod(spec).await.inspect_err(log_err)?;
            tracing::info!("pod sandbox ready");
            Ok(Response::new(pb::RunPodSandboxResponse {
                pod_sandbox_id: id,
            }))
        }
        .instrument(span)
        .await
    }

    async fn stop_pod_sandbox(
        &self,
        req: Request<pb::StopPodSandboxRequest>,
    ) -> Result<Response<pb::StopPodSandboxResponse>, Status> {
        let id = req.into_inner().pod_sandbox_id;
        async {
            self.containers.stop_pod(&id).await.inspect_err(log_err)?;
            tracing::info!("pod sandbox stopped");
            Ok(Response::new(pb::StopPodSandboxResponse {}))
        }
        .instrument(tracing::info_span!("StopPodSandbox", pod_id = %id))
        .await
    }

    async fn remove_pod_sandbox(
        &self,
        req: Request<pb::RemovePodSandboxRequest>,
    ) -> Result<Response<pb::RemovePodSandboxResponse>, Status> {
        let id = req.into_inner().pod_sandbox_id;
        async {
            self.containers.remove_pod(&id).await.inspect_err(log_err)?;
            tracing::info!("pod sandbox removed");
            Ok(Response::new(pb::RemovePodSandboxResponse {}))
        }
        .instrument(tracing::info_span!("RemovePodSandbox", pod_id = %id))
        .await
    }

    async fn pod_sandbox_status(
        &self,
        req: Request<pb::PodSandboxStatusRequest>,
    ) -> Result<Response<pb::PodSandboxStatusResponse>, Status> {
        let req = req.into_inner();
        let _span =
            tracing::debug_span!("PodSandboxStatus", pod_id = %req.pod_sandbox_id).entered();
        let view = self.sandboxes.status(&req.pod_sandbox_id)?;
        let mut info = std::collections::HashMap::new();
        if req.verbose {
            info.insert("info".to_owned(), view.info().to_string());
        }
        let containers = self.containers.list(&crate::container::ContainerFilter {
            pod_id: Some(view.record.id.clone()),
            ..Default::default()
        });
        Ok(Response::new(pb::PodSandboxStatusResponse {
            status: Some(convert::sandbox_status(&view)),
            info,
            containers_statuses: containers
                .iter()
                .map(|r| convert::container_status(r))
                .collect(),
            // Left 0, as containerd leaves it: when it is set, kubelet 1.37 with EventedPLEG
            // takes the pod's container statuses from this answer and never marks them
            // active, so a finished init container is started again and again. At 0 kubelet
            // lists the containers itself; the statuses above serve crictl and older kubelets.
            timestamp: 0,
        }))
    }

    async fn list_pod_sandbox(
        &self,
        req: Request<pb::ListPodSandboxRequest>,
    ) -> Result<Response<pb::ListPodSandboxResponse>, Status> {
        let filter = convert::sandbox_filter(req.into_inner().filter);
        let memo = &self.listed.sandboxes;
        fn id(v: &crate::sandbox::SandboxView) -> (&str, &Arc<crate::sandbox::SandboxRecord>) {
            (v.record.id.as_str(), &v.record)
        }
        let items = if filter.is_empty() {
            let changes = self.sandboxes.changes();
            let list = || self.sandboxes.list(&filter);
            memo.unfiltered(changes, list, id, convert::sandbox)
        } else {
            memo.encode(&self.sandboxes.list(&filter), id, convert::sandbox)
        };
        Ok(Response::new(pb::ListPodSandboxResponse::encoded(items)))
    }

    async fn stream_pod_sandboxes(
        &self,
        req: Request<pb::StreamPodSandboxesRequest>,
    ) -> Result<Response<Self::StreamPodSandboxesStream>, Status> {
        let filter = convert::sandbox_filter(req.into_inner().filter);
        let all: Vec<pb::PodSandbox> = self
            .sandboxes
            .list(&filter)
            .iter()
            .map(convert::sandbox)
            .collect();
        Ok(batched(all, |pod_sandboxes| {
            pb::StreamPodSandboxesResponse { pod_sandboxes }
        }))
    }

    async fn status(
        &self,
        req: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        let network = match self.cni.ready().await {
            Ok(()) => condition("NetworkReady", None),
            Err(e) => condition(
                "NetworkReady",
                Some(("NetworkPluginNotReady", e.to_string())),
            ),
        };
        let runtime = match self
            .sandboxes
            .ready()
            .and_then(|()| self.containers.ready())
        {
            Ok(()) => condition("RuntimeReady", None),
            Err(e) => condition("RuntimeReady", Some((e.reason, e.message))),
        };
        let mut info = std::collections::HashMap::new();
        if req.into_inner().verbose {
            info.insert(
                "config".to_owned(),
                self.config_info
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone(),
            );
            let cni = match self.cni.network() {
                Ok(list) => serde_json::json!({"network": list.name, "config": list.source,
                    "plugins": list.plugins.iter().map(|p| &p.kind).collect::<Vec<_>>()}),
                Err(e) => serde_json::json!({"error": e.to_string()}),
            };
            info.insert("cni".to_owned(), cni.to_string());
            info.insert("podCIDR".to_owned(), self.cni.pod_cidr());
        }
        Ok(Response::new(pb::StatusResponse {
            status: Some(pb::RuntimeStatus {
                conditions: vec![runtime, network],
            }),
            info,
            // The default handler is listed under "" too, as containerd does: kubelet and
            // critest look up a pod without a RuntimeClass there.
            runtime_handlers: std::iter::once(String::new())
                .chain(self.handlers.iter().cloned())
                .map(|name| {
                    let default = &self.sandboxes.context().default_handler;
                    let of = if name.is_empty() { default } else { &name };
                    let f = self.containers.context().handler_features(of);
                    pb::RuntimeHandler {
                        name,
                        features: Some(pb::RuntimeHandlerFeatures {
                            recursive_read_only_mounts: f.recursive_read_only_mounts,
                            user_namespaces: f.user_namespaces,
                        }),
                    }
                })
                .collect(),
            features: Some(pb::RuntimeFeatures {
                supplemental_groups_policy: true,
                // Mount.mount_options: noexec, nosuid, nodev (and ro) are applied; any other
                // option fails CreateContainer.
                mount_options: true,
                // A pod with a user namespace may use the node's network (see
                // `sandbox::validate`); kubelet asks for it behind UserNamespacesHostNetworkSupport.
                user_namespaces_host_network: true,
            }),
        }))
    }

    async fn runtime_config(
        &self,
        _: Request<pb::RuntimeConfigRequest>,
    ) -> Result<Response<pb::RuntimeConfigResponse>, Status> {
        let driver = match self.cgroup_driver {
            CgroupDriver::Cgroupfs => pb::CgroupDriver::Cgroupfs,
            CgroupDriver::Systemd => pb::CgroupDriver::Systemd,
        };
        Ok(Response::new(pb::RuntimeConfigResponse {
            linux: Some(pb::LinuxRuntimeConfiguration {
                cgroup_driver: driver as i32,
            }),
        }))
    }

    async fn update_runtime_config(
        &self,
        req: Request<pb::UpdateRuntimeConfigRequest>,
    ) -> Result<Response<pb::UpdateRuntimeConfigResponse>, Status> {
        let cidr = req
            .into_inner()
            .runtime_config
            .and_then(|c| c.network_config)
            .map(|n| n.pod_cidr)
            .unwrap_or_default();
        let written = self
            .cni
            .set_pod_cidr(&cidr)
            .map_err(|e| status::pod_cidr(&cidr, &e))?;
        if let Some(path) = written {
            tracing::info!(pod_cidr = %cidr, config = %path.display(), "CNI config written from the template");
        }
        tracing::info!(pod_cidr = %cidr, "runtime config updated");
        Ok(Response::new(pb::UpdateRuntimeConfigResponse {}))
    }

    async fn create_container(
        &self,
        req: Request<pb::CreateContainerRequest>,
    ) -> Result<Response<pb::CreateContainerResponse>, Status> {
        Ok(Response::new(
            self.create_container_rpc(req.into_inner()).await?,
        ))
    }

    async fn start_container(
        &self,
        req: Request<pb::StartContainerRequest>,
    ) -> Result<Response<pb::StartContainerResponse>, Status> {
        Ok(Response::new(
            self.start_container_rpc(req.into_inner()).await?,
        ))
    }

    async fn stop_container(
        &self,
        req: Request<pb::StopContainerRequest>,
    ) -> Result<Response<pb::StopContainerResponse>, Status> {
        Ok(Response::new(
            self.stop_container_rpc(req.into_inner()).await?,
        ))
    }

    async fn remove_container(
        &self,
        req: Request<pb::RemoveContainerRequest>,
    ) -> Result<Response<pb::RemoveContainerResponse>, Status> {
        Ok(Response::new(
            self.remove_container_rpc(req.into_inner()).await?,
        ))
    }

    async fn list_containers(
        &self,
        req: Request<pb::ListContainersRequest>,
    ) -> Result<Response<pb::ListContainersResponse>, Status> {
        Ok(Response::new(self.list_containers_rpc(req.into_inner())))
    }

    async fn container_status(
        &self,
        req: Request<pb::ContainerStatusRequest>,
    ) -> Result<Response<pb::ContainerStatusResponse>, Status> {
        Ok(Response::new(self.container_status_rpc(req.into_inner())?))
    }

    async fn update_container_resources(
        &self,
        req: Request<pb::UpdateContainerResourcesRequest>,
    ) -> Result<Response<pb::UpdateContainerResourcesResponse>, Status> {
        Ok(Response::new(
            self.update_container_resources_rpc(req.into_inner())
                .await?,
        ))
    }

    async fn reopen_container_log(
        &self,
        req: Request<pb::ReopenContainerLogRequest>,
    ) -> Result<Response<pb::ReopenContainerLogResponse>, Status> {
        Ok(Response::new(
            self.reopen_container_log_rpc(req.into_inner()).await?,
        ))
    }

    async fn exec_sync(
        &self,
        req: Request<pb::ExecSyncRequest>,
    ) -> Result<Response<pb::ExecSyncResponse>, Status> {
        Ok(Response::new(self.exec_sync_rpc(req.into_inner()).await?))
    }

    async fn exec(
        &self,
        req: Request<pb::ExecRequest>,
    ) -> Result<Response<pb::ExecResponse>, Status> {
        super::stream::exec(&self.streams, req.into_inner()).map(Response::new)
    }

    async fn attach(
        &self,
        req: Request<pb::AttachRequest>,
    ) -> Result<Response<pb::AttachResponse>, Status> {
        super::stream::attach(&self.streams, req.into_inner()).map(Response::new)
    }

    async fn port_forward(
        &self,
        req: Request<pb::PortForwardRequest>,
    ) -> Result<Response<pb::PortForwardResponse>, Status> {
        let req = req.into_inner();
        super::stream::port_forward(&self.streams, &self.sandboxes, req).map(Response::new)
    }

    async fn container_stats(
        &self,
        req: Request<pb::ContainerStatsRequest>,
    ) -> Result<Response<pb::ContainerStatsResponse>, Status> {
        Ok(Response::new(
            self.container_stats_rpc(req.into_inner()).await?,
        ))
    }

    async fn list_container_stats(
        &self,
        req: Request<pb::ListContainerStatsRequest>,
    ) -> Result<Response<pb::ListContainerStatsResponse>, Status> {
        let stats = self
            .list_container_stats_rpc(req.into_inner().filter)
            .await?;
        Ok(Response::new(pb::ListContainerStatsResponse { stats }))
    }

    async fn pod_sandbox_stats(
        &self,
        req: Request<pb::PodSandboxStatsRequest>,
    ) -> Result<Response<pb::PodSandboxStatsResponse>, Status> {
        Ok(Response::new(
            self.pod_sandbox_stats_rpc(req.into_inner()).await?,
        ))
    }

    async fn list_pod_sandbox_stats(
        &self,
        req: Request<pb::ListPodSandboxStatsRequest>,
    ) -> Result<Response<pb::ListPodSandboxStatsResponse>, Status> {
        let stats = self.list_pod_stats_rpc(req.into_inner().filter).await?;
        Ok(Response::new(pb::ListPodSandboxStatsResponse { stats }))
    }

    async fn checkpoint_container(
        &self,
        req: Request<pb::CheckpointContainerRequest>,
    ) -> Result<Response<pb::CheckpointContainerResponse>, Status> {
        Ok(Response::new(
            self.checkpoint_container_rpc(req.into_inner()).await?,
        ))
    }

    async fn checkpoint_pod(
        &self,
        req: Request<pb::CheckpointPodRequest>,
    ) -> Result<Response<pb::CheckpointPodResponse>, Status> {
        Ok(Response::new(
            self.checkpoint_pod_rpc(req.into_inner()).await?,
        ))
    }

    async fn restore_pod(
        &self,
        req: Request<pb::RestorePodRequest>,
    ) -> Result<Response<pb::RestorePodResponse>, Status> {
        Ok(Response::new(self.restore_pod_rpc(req.into_inner()).await?))
    }

    async fn list_metric_descriptors(
        &self,
        _: Request<pb::ListMetricDescriptorsRequest>,
    ) -> Result<Response<pb::ListMetricDescriptorsResponse>, Status> {
        Ok(Response::new(convert::metric_descriptors()))
    }

    async fn list_pod_sandbox_metrics(
        &self,
        _: Request<pb::ListPodSandboxMetricsRequest>,
    ) -> Result<Response<pb::ListPodSandboxMetricsResponse>, Status> {
        let pod_metrics = self.pod_metrics_rpc().await?;
        Ok(Response::new(pb::ListPodSandboxMetricsResponse {
            pod_metrics,
        }))
    }

    async fn update_pod_sandbox_resources(
        &self,
        req: Request<pb::UpdatePodSandboxResourcesRequest>,
    ) -> Result<Response<pb::UpdatePodSandboxResourcesResponse>, Status> {
        let req = req.into_inner();
        let id = req.pod_sandbox_id;
        let resources = req.resources.map(convert::resources);
        let overhead = req.overhead.map(convert::resources);
        async {
            self.sandboxes
                .update_resources(
                    &id,
                    resources.unwrap_or_default(),
                    overhead.unwrap_or_default(),
                )
                .await
                .inspect_err(log_err)?;
            Ok(Response::new(pb::UpdatePodSandboxResourcesResponse {}))
        }
        .instrument(tracing::info_span!("UpdatePodSandboxResources", pod_id = %id))
        .await
    }

    async fn stream_containers(
        &self,
        req: Request<pb::StreamContainersRequest>,
    ) -> Result<Response<Self::StreamContainersStream>, Status> {
        let filter = req.into_inner().filter;
        let all = self
            .list_containers_rpc(pb::ListContainersRequest { filter })
            .containers;
        Ok(batched(all, |containers| pb::StreamContainersResponse {
            containers,
        }))
    }

    async fn stream_container_stats(
        &self,
        req: Request<pb::StreamContainerStatsRequest>,
    ) -> Result<Response<Self::StreamContainerStatsStream>, Status> {
        let all = self
            .list_container_stats_rpc(req.into_inner().filter)
            .await?;
        Ok(batched(all, |container_stats| {
            pb::StreamContainerStatsResponse { container_stats }
        }))
    }

    async fn stream_pod_sandbox_stats(
        &self,
        req: Request<pb::StreamPodSandboxStatsRequest>,
    ) -> Result<Response<Self::StreamPodSandboxStatsStream>, Status> {
        let all = self.list_pod_stats_rpc(req.into_inner().filter).await?;
        Ok(batched(all, |pod_sandbox_stats| {
            pb::StreamPodSandboxStatsResponse { pod_sandbox_stats }
        }))
    }

    async fn get_container_events(
        &self,
        _: Request<pb::GetEventsRequest>,
    ) -> Result<Response<Self::GetContainerEventsStream>, Status> {
        use tokio_stream::StreamExt;
        let events = tokio_stream::wrappers::ReceiverStream::new(self.containers.subscribe());
        Ok(Response::new(Box::pin(
            events.map(|e| Ok(convert::event(&e))),
        )))
    }

    async fn stream_pod_sandbox_metrics(
        &self,
        _: Request<pb::StreamPodSandboxMetricsRequest>,
    ) -> Result<Response<Self::StreamPodSandboxMetricsStream>, Status> {
        let all = self.pod_metrics_rpc().await?;
        Ok(batched(all, |pod_sandbox_metrics| {
            pb::StreamPodSandboxMetricsResponse {
                pod_sandbox_metrics,
            }
        }))
    }
}

fn condition(kind: &str, failure: Option<(&str, String)>) -> pb::RuntimeCondition {
    let (reason, message) = failure.clone().unwrap_or_default();
    pb::RuntimeCondition {
        r#type: kind.into(),
        status: failure.is_none(),
        reason: reason.into(),
        message,
    }
}

pub(super) fn log_err<E: std::fmt::Display>(e: &E) {
    tracing::warn!(error = %e, "request failed");
}

pub(super) fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or_default()
}
