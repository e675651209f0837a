//! A container's security context (CRI `LinuxContainerSecurityContext`): capabilities, users
//! and groups, profiles, masked paths.

use serde::{Deserialize, Serialize};

use super::{NamespaceMode, UserNsRequest};

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
    /// The user namespace the request states; it must be its pod's (`None`: not stated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub userns: Option<UserNsRequest>,
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
