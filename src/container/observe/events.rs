//! Lifecycle events for GetContainerEvents: every change of a pod sandbox or a container
//! (created, started, stopped, deleted) becomes one event carrying the pod's record and all
//! its containers' records as they are after the change (what kubelet's evented PLEG reads).
//! A pod's own events carry the pod's id as container id, as kubelet expects.

use std::sync::Arc;

use crate::container::{ContainerFilter, ContainerRecord, Containers, now_nanos};
use crate::sandbox::{SandboxRecord, SandboxSpec};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Created,
    Started,
    Stopped,
    Deleted,
}

/// One lifecycle change.
#[derive(Debug)]
pub struct ContainerEvent {
    /// The container's id, or the pod's for an event of the pod itself.
    pub id: String,
    pub kind: EventKind,
    /// Nanoseconds since the epoch.
    pub created_at: i64,
    pub pod: Arc<SandboxRecord>,
    pub containers: Vec<Arc<ContainerRecord>>,
}

impl Containers {
    /// The stream of every event from now on (plus, for the first subscriber, those of
    /// start-up); it ends if the subscriber stops reading for too long.
    pub fn subscribe(&self) -> tokio::sync::mpsc::Receiver<Arc<ContainerEvent>> {
        self.events.subscribe()
    }

    /// Subscribers now, and subscribers cut off since start.
    pub fn event_subscribers(&self) -> (usize, u64) {
        (self.events.subscribers(), self.events.dropped())
    }

    /// Publishes a change of `id` in pod `pod_id` (skipped if the pod is gone).
    pub(in crate::container) fn publish(&self, id: &str, kind: EventKind, pod_id: &str) {
        if let Ok(pod) = self.sandboxes.get(pod_id) {
            self.publish_for(id, kind, pod);
        }
    }

    /// Publishes a change with the pod record given (a removed pod's last record).
    pub(in crate::container) fn publish_for(
        &self,
        id: &str,
        kind: EventKind,
        pod: Arc<SandboxRecord>,
    ) {
        let containers = self.list(&ContainerFilter {
            pod_id: Some(pod.id.clone()),
            ..Default::default()
        });
        self.events.publish(ContainerEvent {
            id: id.to_owned(),
            kind,
            created_at: now_nanos(),
            pod,
            containers,
        });
    }

    /// RunPodSandbox, announced: the pod is created and started.
    pub async fn run_pod(
        self: &Arc<Self>,
        spec: SandboxSpec,
    ) -> Result<String, crate::sandbox::SandboxError> {
        // Status told kubelet so already; a client that did not ask learns why here.
        if let (Some(_), Some(why)) = (spec.id_maps(), &self.ctx.host.no_user_namespaces) {
            return Err(crate::sandbox::SandboxError::HostLacks(format!(
                "namespace_options.userns_options: pods with user namespaces cannot run on this \
                 node: {why}"
            )));
        }
        // A handler's binary without user namespaces (as its Status entry says).
        let handler = match spec.runtime_handler.as_str() {
            "" => self.sandboxes.context().default_handler.clone(),
            named => named.to_owned(),
        };
        let binary = self.ctx.runtimes.get(&handler);
        if let (Some(_), Some(runtime)) = (spec.id_maps(), binary) {
            if !self.ctx.handler_features(&handler).user_namespaces {
                return Err(crate::sandbox::SandboxError::HostLacks(format!(
                    "namespace_options.userns_options: runtime handler {handler:?} ({}) does not \
                     support user namespaces (its `features` report no id-mapped mounts)",
                    runtime.path.display()
                )));
            }
        }
        let id = self.sandboxes.run(spec).await?;
        self.publish(&id, EventKind::Created, &id);
        self.publish(&id, EventKind::Started, &id);
        Ok(id)
    }
}
