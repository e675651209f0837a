//! What a container is made of: the CreateContainer request as plain Rust types
//! (`ContainerSpec`), and the persisted record of one container (`ContainerRecord`) with its
//! lifecycle phase and, once it has exited, how it ended (`ExitInfo`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::monitor::ExitInfo;
use crate::sandbox::NamespaceMode;

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ContainerMetadata {
    pub name: String,
    pub attempt: u32,
}

/// How a host mount propagates (CRI `MountPropagation`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Propagation {
    /// No propagation either way (`rprivate`).
    #[default]
    Private,
    /// Host mounts appear in the container (`rslave`).
    HostToContainer,
    /// Both ways (`rshared`); the host path must be on a shared mount.
    Bidirectional,
}

/// One mount of the request: a host path bind-mounted into the container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountSpec {
    pub container_path: String,
    pub host_path: String,
    pub readonly: bool,
    /// Read-only all the way down (`rro`, needs mount_setattr); implies `readonly`.
    pub recursive_readonly: bool,
    /// Ignored while SELinux is off on the host.
    pub selinux_relabel: bool,
    pub propagation: Propagation,
    /// An image volume: this image's content, read-only, instead of a host path (which crust
    /// fills in with where it mounted the image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The directory of the image to mount, relative to its root; empty: all of it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image_sub_path: String,
}

/// A host device made available in the container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSpec {
    pub container_path: String,
    pub host_path: String,
    /// cgroup device permissions: a combination of `r`, `w` and `m`.
    pub permissions: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HugepageLimit {
    /// e.g. `2MB`, `1GB`.
    pub page_size: String,
    pub limit: u64,
}

/// CRI `LinuxContainerResources`; zero means "not set", as in the protobuf.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    pub cpu_period: i64,
    pub cpu_quota: i64,
    pub cpu_shares: i64,
    pub memory_limit: i64,
    /// memory + swap, as CRI's `memory_swap_limit_in_bytes` (-1: unlimited swap).
    pub memory_swap_limit: i64,
    pub oom_score_adj: i64,
    pub cpuset_cpus: String,
    pub cpuset_mems: String,
    pub hugepage_limits: Vec<HugepageLimit>,
    /// cgroup v2 files and values, applied verbatim.
    pub unified: BTreeMap<String, String>,
}

/// A seccomp or AppArmor profile choice (CRI `SecurityProfile`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    Unconfined,
    RuntimeDefault,
    /// A profile on the node: for seccomp a JSON file path, for AppArmor a profile name.
    Localhost(String),
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// Capability names as CRI sends them (`NET_ADMIN`, `CAP_NET_ADMIN`, or `ALL`).
    pub add: Vec<String>,
    pub drop: Vec<String>,
    pub add_ambient: Vec<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SupplementalGroupsPolicy {
    /// The image's groups for the user, plus the request's.
    #[default]
    Merge,
    /// Only the primary group and the request's.
    Strict,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelinuxOptions {
    pub user: String,
    pub role: String,
    pub kind: String,
    pub level: String,
}

/// CRI `LinuxContainerSecurityContext`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecurityContext {
    pub capabilities: Capabilities,
    pub privileged: bool,
    /// The container's PID namespace: its own (`Container`, the default), the pod's (`Pod`),
    /// the host's (`Node`), or another container's (`Target`, see `pid_target`).
    pub pid_mode: NamespaceMode,
    /// The container whose PID namespace a `Target` container joins.
    pub pid_target: String,
    pub selinux: Option<SelinuxOptions>,
    pub run_as_user: Option<i64>,
    pub run_as_group: Option<i64>,
    pub run_as_username: String,
    pub readonly_rootfs: bool,
    pub supplemental_groups: Vec<i64>,
    pub supplemental_groups_policy: SupplementalGroupsPolicy,
    pub no_new_privs: bool,
    /// Empty means the runtime's defaults (unless privileged: none).
    pub masked_paths: Vec<String>,
    pub readonly_paths: Vec<String>,
    pub seccomp: Option<Profile>,
    pub apparmor: Option<Profile>,
}

/// Everything CreateContainer was asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerSpec {
    pub metadata: ContainerMetadata,
    /// The image as the request names it (id, tag or digest reference).
    pub image: String,
    pub command: Vec<String>,
    pub args: Vec<String>,
    pub working_dir: String,
    /// In request order; a later entry with the same key wins.
    pub envs: Vec<(String, String)>,
    pub mounts: Vec<MountSpec>,
    pub devices: Vec<DeviceSpec>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Relative to the pod's log directory; empty: no log file.
    pub log_path: String,
    pub stdin: bool,
    pub stdin_once: bool,
    pub tty: bool,
    pub resources: Resources,
    pub security: SecurityContext,
    /// The signal StopContainer sends first (`SIGTERM` style name); empty: the image's, else
    /// SIGTERM.
    pub stop_signal: String,
}

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

/// The user a container's process runs as, resolved against the image's /etc/passwd and
/// /etc/group: reported back in ContainerStatus.user.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedUser {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, as the OCI spec's `additionalGids` (what `setgroups` receives).
    pub additional_gids: Vec<u32>,
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
