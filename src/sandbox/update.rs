//! UpdatePodSandboxResources: kubelet's figures for a whole pod after an in-place resize (the
//! sum of its containers' resources, plus the runtime class's overhead) applied to the live
//! pod cgroup, which holds the monitor and every container of the pod.
//!
//! With the systemd driver crust has no cgroup of its own around the pod: the pod's cgroup is
//! the slice kubelet made and sizes itself (crust's scopes sit in it side by side), so there
//! is nothing of crust's to change and the request only checks the pod.

use std::sync::Arc;

use super::{SandboxError, Sandboxes};
use crate::config::CgroupDriver;
use crate::model::Resources;

impl Sandboxes {
    pub async fn update_resources(
        self: &Arc<Self>,
        id: &str,
        resources: Resources,
        overhead: Resources,
    ) -> Result<(), SandboxError> {
        let (me, id) = (self.clone(), id.to_owned());
        super::detached(async move {
            let Some(held) = me.hold(&id).await? else {
                return Err(SandboxError::NotFound(id));
            };
            let record = held.entry.snapshot();
            if !record.phase.is_ready() {
                return Err(SandboxError::NotRunning(held.id.clone()));
            }
            let cgroups = me.ctx.cgroups.clone();
            let linux = crate::oci::pod_resources(&resources, &overhead, cgroups.unified)
                .map_err(|e| SandboxError::Invalid(e.to_string()))?;
            if cgroups.driver == CgroupDriver::Systemd {
                tracing::info!("pod resources are kubelet's slice's with the systemd driver");
                return Ok(());
            }
            let path = record.cgroup.clone();
            tokio::task::spawn_blocking(move || cgroups.apply(&path, &linux))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()))
                .map_err(|error| SandboxError::Resources {
                    id: held.id.clone(),
                    error,
                })?;
            tracing::info!("pod resources updated");
            Ok(())
        })
        .await
    }
}
