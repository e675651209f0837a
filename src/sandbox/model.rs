//! What a pod sandbox is made of: the request as plain Rust types (`SandboxSpec`), and the
//! persisted record of one sandbox (`SandboxRecord`) with its lifecycle phase.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::model::{IdMaps, NamespaceMode, Resources, UserNsRequest};
use crate::monitor::{Identity, NamespacePins};
use crate::network::{Attachment, CniResult, NetworkList};

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PodMetadata {
    pub name: String,
    pub uid: String,
    pub namespace: String,
    pub attempt: u32,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceModes {
    pub network: NamespaceMode,
    pub pid: NamespaceMode,
    pub ipc: NamespaceMode,
}

impl NamespaceModes {
    pub fn host_network(&self) -> bool {
        self.network == NamespaceMode::Node
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DnsConfig {
    pub servers: Vec<String>,
    pub searches: Vec<String>,
    pub options: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortMapping {
    pub protocol: Protocol,
    pub container_port: i32,
    pub host_port: i32,
    pub host_ip: String,
}

/// Everything RunPodSandbox was asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxSpec {
    pub metadata: PodMetadata,
    pub hostname: String,
    pub log_directory: String,
    pub dns: Option<DnsConfig>,
    pub port_mappings: Vec<PortMapping>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub cgroup_parent: String,
    pub namespaces: NamespaceModes,
    /// The user namespace asked for (`None`: not stated, the node's).
    #[serde(default)]
    pub userns: Option<UserNsRequest>,
    pub sysctls: BTreeMap<String, String>,
    pub runtime_handler: String,
    /// The sum of the pod's containers' limits and the runtime class's overhead, as kubelet
    /// gave them at RunPodSandbox and last at UpdatePodSandboxResources: kubelet sizes the pod
    /// cgroup itself; NRI plugins are told them.
    #[serde(default)]
    pub resources: Resources,
    #[serde(default)]
    pub overhead: Resources,
    /// The pod's security context asks for privileged containers. crust does not act on it
    /// (there is no pause container to run privileged); it is kept for the verbose status.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub privileged: bool,
}

impl SandboxSpec {
    /// The pod's user namespace maps, when it has a user namespace of its own.
    pub fn id_maps(&self) -> Option<IdMaps> {
        self.userns.as_ref().and_then(UserNsRequest::id_maps)
    }
}

/// Where a sandbox is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// RunPodSandbox is under way (or crashed half way: recovery rolls it back).
    Creating,
    /// Everything is set up and the monitor runs.
    Ready,
    /// The monitor died on its own; namespaces, network and cgroup may still be held.
    Exited,
    /// Stopped: everything but the record has been released.
    Stopped,
}

impl Phase {
    pub fn is_ready(self) -> bool {
        self == Phase::Ready
    }
    /// Whether resources may still be held, so Stop has work to do.
    pub fn holds_resources(self) -> bool {
        self != Phase::Stopped
    }
}

/// The CNI state of a pod: the list and attachment ADD used (DEL needs the same) and its result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetworkState {
    /// Shared by every pod attached while this configuration was in use.
    pub list: std::sync::Arc<NetworkList>,
    pub attachment: Attachment,
    pub result: Option<CniResult>,
}

/// One sandbox as persisted in `<state>/sandboxes/<id>/sandbox.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxRecord {
    pub id: String,
    pub spec: SandboxSpec,
    /// Nanoseconds since the epoch.
    pub created_at: i64,
    pub phase: Phase,
    /// The resolved runtime handler.
    pub runtime_handler: String,
    /// The OCI runtime binary that handler named when the pod was made (`runtimes`): its
    /// containers all run under it, whatever the configuration says later. `None`:
    /// libcontainer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<crate::model::OciRuntime>,
    pub monitor: Option<Identity>,
    pub pins: NamespacePins,
    /// The pod cgroup, as the cgroup library names it.
    pub cgroup: String,
    /// The monitor's cgroup, outside the pod's (`CgroupSettings::monitor_path`); none in a
    /// record of a crust that kept the monitor in the pod cgroup's leaf `monitor`, which goes
    /// with the pod cgroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monitor_cgroup: Option<String>,
    pub network: Option<NetworkState>,
    pub dir: PathBuf,
    /// Why the sandbox is not ready although it should be: what its last teardown or rollback
    /// could not release (Stop and Remove retry it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

impl crate::store::Record for SandboxRecord {
    const VERSION: u32 = 1;
}

impl SandboxRecord {
    /// The cgroup the monitor lives in (see `monitor_cgroup`).
    pub fn monitor_cgroup(&self) -> &str {
        self.monitor_cgroup.as_deref().unwrap_or(&self.cgroup)
    }

    /// The pod's addresses, while it still has its network.
    pub fn ips(&self) -> &[IpAddr] {
        match (&self.network, self.phase) {
            (
                Some(NetworkState {
                    result: Some(r), ..
                }),
                Phase::Ready | Phase::Exited,
            ) => &r.ips,
            _ => &[],
        }
    }
}
