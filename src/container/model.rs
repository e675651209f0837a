//! The persisted record of one container (`ContainerRecord`) with its lifecycle phase and, once
//! it has exited, how it ended (`ExitInfo`). What CreateContainer asked for (`ContainerSpec`)
//! is in `crate::model`, which the rooms below this one share.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::{ContainerSpec, ResolvedUser};
pub use crate::monitor::ExitInfo;

/// Where a container is in its life (CRI's CREATED / RUNNING / EXITED).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// CreateContainer is under way (or crashed half way: recovery rolls it back).
    Creating,
    /// Its process exists and waits to be started.
    Created,
    Running,
    Exited,
}

/// The image a container was created from, as the ImageService names it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageInfo {
    /// The image id (config digest), as PullImage and ImageStatus answer it.
    pub id: String,
    /// What ContainerStatus.image shows: the tag the request resolved to.
    pub name: String,
    /// A digested reference (`repo@sha256:...`) when the image has one, else the id.
    pub reference: String,
}

/// One container as persisted in `<state>/containers/<id>/container.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContainerRecord {
    pub id: String,
    pub pod_id: String,
    pub spec: ContainerSpec,
    /// Nanoseconds since the epoch; 0 when not reached.
    pub created_at: i64,
    pub started_at: i64,
    pub phase: Phase,
    pub exit: Option<ExitInfo>,
    /// The container's main process on the host, while it runs.
    pub pid: Option<i32>,
    pub image: ImageInfo,
    pub user: ResolvedUser,
    /// The signal StopContainer sends first.
    pub stop_signal: i32,
    /// The CRI log file (the pod's log directory joined with the request's log path).
    pub log_path: Option<std::path::PathBuf>,
    /// The container's cgroup, as libcgroups names it.
    pub cgroup: String,
    /// The container has a PID namespace of its own (its processes die with its main one).
    pub own_pid_namespace: bool,
    /// The image id each image volume mounts, by container path.
    #[serde(default)]
    pub image_volumes: BTreeMap<String, String>,
    /// The CDI devices it got, each with the spec file it came from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cdi_devices: Vec<crate::cdi::InjectedDevice>,
    /// The OCI runtime binary of its pod's handler, as configured when it was created;
    /// `None`: libcontainer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<crate::model::OciRuntime>,
}

impl crate::store::Record for ContainerRecord {
    const VERSION: u32 = 1;
}

impl ContainerRecord {
    /// The lifecycle state in CRI's words, for messages.
    pub fn state_name(&self) -> &'static str {
        match self.phase {
            Phase::Creating => "being created",
            Phase::Created => "created",
            Phase::Running => "running",
            Phase::Exited => "exited",
        }
    }
}
