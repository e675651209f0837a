//! UpdatePodSandboxResources: kubelet's figures for a whole pod after an in-place resize (the
//! sum of its containers' resources, plus the runtime class's overhead) applied to the live
//! pod cgroup, which holds the monitor and every container of the pod.
//!
//! With the systemd driver crust has no cgroup of its own around the pod: the pod's cgroup is
//! the slice kubelet made and sizes itself (crust's scopes sit in it side by side), so there
//! is nothing of crust's to change there. With cgroupfs, when the pod's cgroup parent is the
//! cgroup kubelet made for this pod (`.../pod<uid>`), kubelet sizes that one with the same
//! figures, and crust leaves its own inside it unlimited, as containerd and CRI-O leave theirs
//! (they only tell NRI): a second copy of the CPU quota there refuses kubelet's resizes on
//! cgroup v1, where a child's quota may exceed neither its parent's nor be below a child's,
//! and kubelet changes the containers, its pod cgroup and this call one after the other. A
//! pod in another parent (crictl's) gets the limits on crust's cgroup, the only one it has.
//!
//! NRI plugins hear UpdatePodSandbox before the cgroup changes (an error fails the request, as
//! in containerd 2.3) and PostUpdatePodSandbox after; the record keeps the new figures, which
//! plugins see in the pod from then on.

use std::sync::Arc;

use super::model::SandboxRecord;
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
            let mut updated = SandboxRecord::clone(&record);
            updated.spec.resources = resources.clone();
            updated.spec.overhead = overhead.clone();
            let nri = me.ctx.nri.clone();
            nri.update_pod(&super::plugins::pod_info(&updated))
                .await
                .map_err(|source| SandboxError::Nri {
                    id: held.id.clone(),
                    source,
                })?;
            if cgroups.driver == CgroupDriver::Systemd {
                tracing::info!("pod resources are kubelet's slice's with the systemd driver");
            } else if sized_by_kubelet(&record) {
                tracing::info!("pod resources are kubelet's pod cgroup's");
            } else {
                let path = record.cgroup.clone();
                tokio::task::spawn_blocking(move || cgroups.apply(&path, &linux))
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|r| r.map_err(|e| e.to_string()))
                    .map_err(|error| SandboxError::Resources {
                        id: held.id.clone(),
                        error,
                    })?;
            }
            me.commit(&held.entry, |r| {
                r.spec.resources = resources;
                r.spec.overhead = overhead;
            })?;
            nri.post_update_pod(&held.id).await;
            tracing::info!("pod resources updated");
            Ok(())
        })
        .await
    }
}

/// Whether the pod's cgroup parent is the one kubelet made for this pod (`pod<uid>`, under
/// kubepods or a QoS class), which kubelet sizes itself.
fn sized_by_kubelet(record: &SandboxRecord) -> bool {
    let uid = &record.spec.metadata.uid;
    let last = record
        .spec
        .cgroup_parent
        .trim_end_matches('/')
        .rsplit('/')
        .next();
    !uid.is_empty() && last.and_then(|l| l.strip_prefix("pod")) == Some(uid.as_str())
}
