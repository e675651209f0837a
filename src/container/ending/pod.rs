//! StopPodSandbox and RemovePodSandbox reach the pod's containers first: they are stopped
//! (killed at once, their exits recorded) before the pod's monitor goes, and removed before
//! the pod is; and the reclaims of its removed containers end before the pod's teardown.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;

use super::exits::Gone;
use crate::container::{ContainerError, Containers};
use crate::sandbox::SandboxError;

impl Containers {
    pub async fn stop_pod(self: &Arc<Self>, pod_id: &str) -> Result<(), ContainerError> {
        let pod = match self.sandboxes.get(pod_id) {
            Ok(p) => p,
            Err(SandboxError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let ids = self.of_pod(&pod.id);
        let stopped = join_all(ids.iter().map(|id| self.stop(id, Duration::ZERO))).await;
        // The pod's monitor kills whatever a failed stop left; its teardown decides.
        for e in stopped.into_iter().filter_map(|r| r.err()) {
            tracing::warn!(error = %e, "stopping a container of the pod; the pod's teardown kills it");
        }
        let was_ready = pod.phase.is_ready();
        // The reclaims of containers removed before remove cgroups under the pod's, which the
        // pod's teardown removes: they end first.
        self.reclaimed(&pod.id).await;
        self.sandboxes.stop(&pod.id).await?;
        // What a failed stop left, now that the monitor is gone.
        self.monitor_gone(&pod.id, Gone::PodStopped).await;
        if was_ready {
            self.publish(&pod.id, crate::container::EventKind::Stopped, &pod.id);
        }
        Ok(())
    }

    pub async fn remove_pod(self: &Arc<Self>, pod_id: &str) -> Result<(), ContainerError> {
        let pod = match self.sandboxes.get(pod_id) {
            Ok(p) => p,
            Err(SandboxError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        self.stop_pod(&pod.id).await?;
        let ids = self.of_pod(&pod.id);
        for removed in join_all(ids.iter().map(|id| self.remove(id))).await {
            removed?;
        }
        // Nothing of its containers is left once the pod is gone.
        self.settle_reclaims(&pod.id).await?;
        self.watchers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&pod.id);
        let last = self.sandboxes.get(&pod.id)?;
        self.sandboxes.remove(&pod.id).await?;
        self.publish_for(&pod.id, crate::container::EventKind::Deleted, last);
        Ok(())
    }
}
