//! A container as CreateContainer asks for it (`ContainerSpec`): its command, mounts, devices,
//! resources and security context, and the user it resolved to (`ResolvedUser`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Resources, SecurityContext, UserNsRequest};

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

/// A flag CRI's `Mount.mount_options` may ask for on a bind mount (kubelet's
/// `bindMountOptions`, which the API limits to these three; `ro` is `MountSpec::readonly`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BindOption {
    NoExec,
    NoSuid,
    NoDev,
}

impl BindOption {
    /// The option as a mount option string, and as CRI names it.
    pub fn name(self) -> &'static str {
        match self {
            BindOption::NoExec => "noexec",
            BindOption::NoSuid => "nosuid",
            BindOption::NoDev => "nodev",
        }
    }
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
    /// An id-mapped mount through the pod's user namespace: these ranges, which must be the
    /// pod's (`uid_mappings` / `gid_mappings`; kubelet sends them on every mount of such a pod).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_maps: Option<UserNsRequest>,
    /// Flags applied to the bind mount besides read-only (`mount_options`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<BindOption>,
}

/// A host device made available in the container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSpec {
    pub container_path: String,
    pub host_path: String,
    /// cgroup device permissions: a combination of `r`, `w` and `m`.
    pub permissions: String,
}

/// Everything CreateContainer was asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerSpec {
    pub metadata: ContainerMetadata,
    /// The image as the request names it (id, tag or digest reference).
    pub image: String,
    /// The image as the pod spec names it (`ImageSpec.user_specified_image`): kubelet sends the
    /// resolved reference in `image` and this beside it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub user_specified_image: String,
    pub command: Vec<String>,
    pub args: Vec<String>,
    pub working_dir: String,
    /// In request order; a later entry with the same key wins.
    pub envs: Vec<(String, String)>,
    pub mounts: Vec<MountSpec>,
    pub devices: Vec<DeviceSpec>,
    /// CDI devices by qualified name (`vendor.com/class=name`), as `CDI_devices` lists them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cdi_devices: Vec<String>,
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

/// The user a container's process runs as, resolved against the image's /etc/passwd and
/// /etc/group: reported back in ContainerStatus.user.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedUser {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, as the OCI spec's `additionalGids` (what `setgroups` receives).
    pub additional_gids: Vec<u32>,
    /// The home directory of the uid's first passwd entry, if the image has one: the process's
    /// `HOME` unless its environment sets one (else `/`, as runc does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<String>,
}
