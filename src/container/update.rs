//! UpdateContainerResources: new limits applied to the live cgroup, then recorded.
//!
//! The request is what changes: its zero fields leave the cgroup's figures alone, and the record
//! keeps them too (`Resources::updated_by`), as containerd and CRI-O merge an update into the
//! container's spec. NRI plugins get the request itself, as containerd hands it to them, with
//! the container's current limits beside it; what they change of it is what applies, and what
//! the record keeps.

use std::sync::Arc;

use super::{ContainerError, Containers, Phase, detached};
use crate::model::Resources;

impl Containers {
    pub async fn update_resources(
        self: &Arc<Self>,
        id: &str,
        resources: Resources,
    ) -> Result<(), ContainerError> {
        let (me, id) = (self.clone(), id.to_owned());
        detached(async move {
            let held = me.hold_existing(&id).await?;
            let record = held.entry.snapshot();
            if !matches!(record.phase, Phase::Created | Phase::Running) {
                return Err(ContainerError::State {
                    id: held.id.clone(),
                    state: record.state_name(),
                    what: "update its resources",
                });
            }
            let requested = crate::oci::container_resources(&resources, &me.ctx.host)?;
            // NRI plugins may change the limits before they apply (or refuse them).
            let nri = me.sandboxes.context().nri.clone();
            let linux = nri.update_container(&held.id, &requested).await?;
            // The record keeps what applies: what plugins changed, over the request.
            let figures = if linux == requested {
                resources
            } else {
                resources.updated_by(&crate::oci::cri_resources(&linux))
            };
            let (ctx, cgroup) = (me.ctx.clone(), record.cgroup.clone());
            super::blocking(move || ctx.cgroups.apply(&cgroup, &linux)).await?;
            held.entry.commit(&me.ctx, |r| {
                r.spec.resources = r.spec.resources.updated_by(&figures)
            })?;
            nri.post_update(&held.id).await;
            tracing::info!("container resources updated");
            Ok(())
        })
        .await
    }
}
