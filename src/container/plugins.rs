//! What NRI plugins (`crate::nri`) are told about containers, and what they may do to live
//! ones: update their limits and evict them (`Executor`).

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::{ContainerRecord, Containers, Phase};
use crate::nri::{ContainerInfo, Eviction, ResourceUpdate, State, Status};

pub fn info(record: &ContainerRecord) -> ContainerInfo {
    ContainerInfo {
        id: record.id.clone(),
        pod_id: record.pod_id.clone(),
        name: record.spec.metadata.name.clone(),
        labels: record.spec.labels.clone(),
        created_at: record.created_at,
        image: (
            record.spec.image.clone(),
            record
                .image
                .reference
                .split_once('@')
                .map(|(_, d)| d.to_owned())
                .unwrap_or_default(),
            record.image.id.clone(),
        ),
    }
}

pub fn status(record: &ContainerRecord) -> Status {
    let state = match record.phase {
        Phase::Creating | Phase::Created => State::Created,
        Phase::Running => State::Running,
        Phase::Exited => State::Stopped,
    };
    let exit = record.exit.as_ref();
    Status {
        state,
        pid: record.pid.unwrap_or_default() as u32,
        started_at: record.started_at,
        finished_at: exit.map(|e| e.finished_at).unwrap_or_default(),
        exit_code: exit.map(|e| e.code).unwrap_or_default(),
        reason: exit.map(|e| e.reason().to_owned()).unwrap_or_default(),
        message: exit.map(|e| e.message.clone()).unwrap_or_default(),
    }
}

impl Containers {
    fn nri(&self) -> &Arc<crate::nri::Nri> {
        &self.sandboxes.context().nri
    }

    /// Tells plugins a container's exit was recorded (in the background: the exit is applied
    /// by the pod's event stream, which must not wait on a plugin).
    pub(super) fn announce_exit(&self, record: &ContainerRecord) {
        let (nri, id, status) = (self.nri().clone(), record.id.clone(), status(record));
        if nri.enabled() {
            tokio::spawn(async move { nri.stop_container(&id, &status).await });
        }
    }

    /// Tells plugins about a container found at start.
    pub(super) fn adopt_for_plugins(&self, record: &ContainerRecord) {
        if !self.nri().enabled() {
            return;
        }
        let path = self
            .ctx
            .container_dir(&record.id)
            .join("bundle/config.json");
        match oci_spec::runtime::Spec::load(&path) {
            Ok(spec) => {
                let nri = self.nri();
                nri.adopt_container(&info(record), &spec, &status(record));
                // The bundle has the limits the container was created with; the record has
                // those it runs with since (UpdateContainerResources, plugins' updates).
                match crate::oci::container_resources(&record.spec.resources, &self.ctx.host) {
                    Ok(now) => nri.updated(&record.id, &now),
                    Err(e) => {
                        tracing::warn!(container_id = %record.id, error = %e, "NRI plugins will see the limits the container was created with")
                    }
                }
            }
            Err(e) => {
                tracing::warn!(container_id = %record.id, error = %e, "NRI plugins will not know this container")
            }
        }
    }

    async fn apply_update(&self, u: &ResourceUpdate) -> Result<(), String> {
        let held = self
            .hold_existing(&u.container_id)
            .await
            .map_err(|e| e.to_string())?;
        let record = held.entry.snapshot();
        if !matches!(record.phase, Phase::Created | Phase::Running) {
            return Err(format!("container {} is {}", held.id, record.state_name()));
        }
        let (ctx, cgroup, linux) = (self.ctx.clone(), record.cgroup.clone(), u.resources.clone());
        super::blocking(move || ctx.cgroups.apply(&cgroup, &linux))
            .await
            .map_err(|e| e.to_string())?;
        self.nri().updated(&held.id, &u.resources);
        // The record keeps them, as it keeps UpdateContainerResources': ContainerStatus and
        // `crictl inspect` show what the container runs with.
        let figures = crate::oci::cri_resources(&u.resources);
        held.entry
            .commit(&self.ctx, |r| {
                r.spec.resources = r.spec.resources.updated_by(&figures);
            })
            .map_err(|e| e.to_string())?;
        tracing::info!(container_id = %held.id, "NRI plugin updated the container's resources");
        Ok(())
    }
}

/// The container service, as plugins reach it.
pub struct PluginExecutor(pub std::sync::Weak<Containers>);

impl crate::nri::Executor for PluginExecutor {
    fn update(&self, updates: Vec<ResourceUpdate>) -> BoxFuture<'_, Vec<String>> {
        Box::pin(async move {
            let Some(c) = self.0.upgrade() else {
                return updates.into_iter().map(|u| u.container_id).collect();
            };
            let mut failed = Vec::new();
            for u in &updates {
                if let Err(e) = c.apply_update(u).await {
                    tracing::warn!(container_id = %u.container_id, error = %e, "NRI update failed");
                    if !u.ignore_failure {
                        failed.push(u.container_id.clone());
                    }
                }
            }
            failed
        })
    }

    fn evict(&self, eviction: Eviction) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let c = self.0.upgrade().ok_or("the daemon is stopping")?;
            tracing::info!(container_id = %eviction.container_id, reason = %eviction.reason, "NRI plugin evicts a container");
            c.stop(&eviction.container_id, Duration::ZERO)
                .await
                .map_err(|e| e.to_string())
        })
    }
}
