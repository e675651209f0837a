//! ContainerStatus and ListContainers: copies of records, filtered, plus the verbose info.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;

use crate::container::{ContainerError, ContainerRecord, Containers, Phase};
use crate::model::cri_json::{self, PodNamespaces};

/// ListContainers' filter; every field set must match.
#[derive(Debug, Default, Clone)]
pub struct ContainerFilter {
    /// A full id or an id prefix.
    pub id: Option<String>,
    /// A pod id or pod id prefix.
    pub pod_id: Option<String>,
    pub state: Option<Phase>,
    pub labels: BTreeMap<String, String>,
}

impl ContainerFilter {
    /// Nothing to match: every object is listed.
    pub fn is_empty(&self) -> bool {
        let Self {
            id,
            pod_id,
            state,
            labels,
        } = self;
        id.is_none() && pod_id.is_none() && state.is_none() && labels.is_empty()
    }

    fn matches(&self, r: &ContainerRecord) -> bool {
        self.id
            .as_ref()
            .is_none_or(|id| r.id.starts_with(id.as_str()))
            && self
                .pod_id
                .as_ref()
                .is_none_or(|p| r.pod_id.starts_with(p.as_str()))
            && self.state.is_none_or(|s| r.phase == s)
            && self
                .labels
                .iter()
                .all(|(k, v)| r.spec.labels.get(k) == Some(v))
    }
}

/// A container as status and list report it.
pub type ContainerView = Arc<ContainerRecord>;

impl Containers {
    /// The record of container `id`; one still being created is not there yet.
    pub fn status(&self, id: &str) -> Result<ContainerView, ContainerError> {
        let record = self.get(id)?;
        if record.phase == Phase::Creating {
            return Err(ContainerError::NotFound(id.to_owned()));
        }
        Ok(record)
    }

    /// Containers matching `filter`, oldest first.
    pub fn list(&self, filter: &ContainerFilter) -> Vec<ContainerView> {
        let entries: Vec<_> = self.table().by_id.values().cloned().collect();
        let mut out: Vec<ContainerView> = entries
            .iter()
            .map(|e| e.snapshot())
            .filter(|r| r.phase != Phase::Creating && filter.matches(r))
            .collect();
        out.sort_by_key(|r| r.created_at);
        out
    }

    /// The `verbose` info: where the container's pieces live and its OCI spec, for an
    /// operator debugging it, beside the keys node agents read in containerd's
    /// (`ContainerInfo`, `internal/cri/server/container_status.go`): `sandboxID`, `pid` (0 when
    /// it does not run), `config` (the CRI ContainerConfig, `crate::model::cri_json`) and
    /// `runtimeSpec`, and CRI-O's `privileged`. crust's own record of the request is
    /// `crustSpec`.
    pub fn info(&self, record: &ContainerRecord) -> serde_json::Value {
        let dir = self.ctx.container_dir(&record.id);
        let spec: serde_json::Value = std::fs::read(dir.join("bundle/config.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let pod = self
            .sandboxes
            .get(&record.pod_id)
            .map(|p| PodNamespaces {
                network: p.spec.namespaces.network,
                ipc: p.spec.namespaces.ipc,
            })
            .unwrap_or_default();
        json!({
            "sandboxID": record.pod_id,
            "pid": record.pid.unwrap_or(0),
            "privileged": record.spec.security.privileged,
            "phase": record.phase,
            "cgroup": record.cgroup,
            "stateDir": dir,
            "rootfs": crate::container::rootfs::layout(&self.ctx, &record.id).rootfs,
            "logPath": record.log_path,
            "image": record.image,
            "user": record.user,
            "stopSignal": record.stop_signal,
            "exit": record.exit,
            "cdiDevices": record.cdi_devices,
            // The OCI runtime binary that runs it (`null`: libcontainer in the pod's monitor).
            "runtime": record.runtime,
            "runtimeSpec": spec,
            "config": cri_json::container_config(&record.spec, pod),
            "crustSpec": record.spec,
        })
    }
}
