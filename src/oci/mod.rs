//! CRI container config -> OCI runtime spec: pure functions, table-tested. Nothing here touches
//! the filesystem or the kernel: the container module gathers what the spec needs from the
//! host (the image's passwd and group files, host paths and devices, a localhost seccomp
//! profile, host features) into [`SpecInput`] first, so every rule here is a plain function of
//! its input.

mod seccomp;
mod seccomp_default;
mod security;
mod user;

use std::collections::BTreeMap;
use std::path::PathBuf;

use oci_spec::runtime::Spec;

use crate::container::{ContainerSpec, ResolvedUser};
use crate::image::RuntimeConfig;
use crate::sandbox::NamespaceMode;

pub use seccomp::{SeccompProfile, parse_seccomp_profile};
pub use user::{AccountFiles, resolve_user};

/// Why a spec could not be built: always the request's fault (InvalidArgument) or a feature
/// this host lacks (FailedPrecondition); see `SpecError::is_host_limit`.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    HostLacks(String),
}

impl SpecError {
    /// The host lacks what the request needs (AppArmor off, no mount_setattr, ...).
    pub fn is_host_limit(&self) -> bool {
        matches!(self, SpecError::HostLacks(_))
    }
}

/// What a container takes from its pod.
#[derive(Debug, Clone, Default)]
pub struct PodView {
    pub id: String,
    pub hostname: String,
    /// Namespace pins of the pod; `None` means the host's namespace of that kind.
    pub net_ns: Option<PathBuf>,
    pub ipc_ns: Option<PathBuf>,
    pub uts_ns: Option<PathBuf>,
    /// The pod's PID namespace pin, when the pod shares one (`NamespaceMode::Pod`).
    pub pid_ns: Option<PathBuf>,
    /// The pod's `/dev/shm` (a tmpfs the pod owns); `None` with host IPC (the host's /dev/shm).
    pub shm: Option<PathBuf>,
    /// `resolv.conf`, `hostname` and `hosts` written for the pod.
    pub resolv_conf: PathBuf,
    pub hostname_file: PathBuf,
    pub hosts_file: PathBuf,
    pub host_network: bool,
    /// The pod's sysctls (already applied to its namespaces).
    pub sysctls: BTreeMap<String, String>,
    /// For a `Target` PID mode container: `/proc/<pid>/ns/pid` of the target's process.
    pub target_pid_ns: Option<PathBuf>,
}

/// A host device node resolved for the container (from a request device, or from the host's
/// /dev for a privileged container).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceNode {
    pub container_path: String,
    pub host_path: String,
    /// 'c' or 'b'.
    pub kind: char,
    pub major: i64,
    pub minor: i64,
    /// File mode bits (permissions only).
    pub file_mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// cgroup permissions `rwm` subset.
    pub permissions: String,
}

/// What this host offers, detected once by the container module.
#[derive(Debug, Clone, Default)]
pub struct HostFeatures {
    pub cgroup_v2: bool,
    pub apparmor_enabled: bool,
    pub selinux_enabled: bool,
    /// The kernel has mount_setattr (recursive read-only mounts).
    pub mount_setattr: bool,
    /// The lowest oom_score_adj crust itself may give a process (crust without
    /// CAP_SYS_RESOURCE cannot go below its own value).
    pub min_oom_score_adj: i64,
    /// Whether each request mount's host path sits on a shared / slave mount, by host path
    /// (needed for Bidirectional / HostToContainer propagation).
    pub mount_propagation: BTreeMap<String, HostPropagation>,
    /// The memory controller can limit swap (cgroup v1 `memory.memsw.*`, v2
    /// `memory.swap.max`); without it no swap limit is written.
    pub swap_limit: bool,
    /// The AppArmor profile `RuntimeDefault` (and an unset profile) means, once the container
    /// module has loaded it; `None` leaves such containers without a profile.
    pub apparmor_default_profile: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostPropagation {
    Private,
    Shared,
    Slave,
}

/// Everything `build` needs.
pub struct SpecInput<'a> {
    pub container_id: &'a str,
    pub spec: &'a ContainerSpec,
    /// The image's runtime config (Env, Entrypoint, Cmd, WorkingDir, User, Volumes, StopSignal).
    pub image: &'a RuntimeConfig,
    /// The image reference and id, for annotations.
    pub image_name: &'a str,
    pub user: &'a ResolvedUser,
    pub pod: &'a PodView,
    /// The mounted root filesystem (absolute).
    pub rootfs: &'a std::path::Path,
    /// The container's cgroup, as libcontainer/libcgroups name it (`/parent/child` for
    /// cgroupfs, `slice:prefix:name` for systemd).
    pub cgroups_path: &'a str,
    /// The request's mounts with host paths resolved (symlinks followed), in request order.
    pub mounts: &'a [crate::container::MountSpec],
    /// Request devices resolved from the host, plus all host devices when privileged.
    pub devices: &'a [DeviceNode],
    /// The parsed `Localhost` seccomp profile (see [`parse_seccomp_profile`]), when the
    /// request names one.
    pub seccomp_localhost: Option<&'a SeccompProfile>,
    pub host: &'a HostFeatures,
}

/// Builds the OCI runtime spec for a container.
pub fn build(input: &SpecInput<'_>) -> Result<Spec, SpecError> {
    let _ = (input, NamespaceMode::Pod);
    Err(SpecError::Invalid(
        "the OCI spec builder is not written yet".into(),
    ))
}
