//! NRI, the Node Resource Interface (github.com/containerd/nri): crust hosts NRI plugins as
//! containerd 2.x and CRI-O do. Plugins connect to a unix socket (or are started by crust from
//! the plugin directory on a socket pair), register, are configured with the events they want,
//! and are synchronized with every pod and container crust has; from then on they hear of each
//! pod and container event, may adjust a container being created (its OCI spec), update the
//! resources of running containers, and evict them.
//!
//! The room stands below `container/` and `sandbox/`, which call its hooks with plain models
//! (`PodInfo`, `ContainerInfo`, OCI specs and resources) and never see NRI's protobuf types:
//! those (`api`, generated from proto/nri/api.proto at the NRI version containerd 2.4.2 pins)
//! stay in this room. What is where:
//!
//! - `ttrpc/`: the protocol: NRI's multiplexer and ttrpc, pure codecs and the socket driver;
//! - `plugin.rs`: one plugin: registration, configuration, chunked synchronization, calls;
//! - `hub.rs`: the plugins in index order, the socket they connect to, pre-installed plugins,
//!   and crust's pods and containers as NRI sees them (what a late plugin is synchronized
//!   with);
//! - `hooks.rs`: the events, at the points of a pod's and a container's life containerd calls
//!   them at;
//! - `merge.rs`: NRI's ownership rules: two plugins setting the same field is an error naming
//!   both;
//! - `spec.rs`: a container as NRI describes it, from its OCI spec; adjustments applied to it;
//! - `validate.rs`: ValidateContainerAdjustment, the validating plugins' say on CreateContainer.
//!
//! Invariants:
//! - each event reaches each plugin at most once per pod or container, in the order things
//!   happened (an object's events go out one at a time);
//! - a plugin synchronizing holds back every event until it is in the list, so that each pod
//!   and container reaches it either in its synchronization or as an event, never neither;
//! - no lock of a pod or container of `sandbox/` or `container/` is held by this room: their
//!   verbs call the hooks, and reads never wait for a plugin;
//! - a plugin that times out or whose connection breaks is dropped and the call goes on; any
//!   other error of a plugin fails the call that needed its answer, naming the plugin.

mod hooks;
mod hub;
mod merge;
mod plugin;
mod spec;
pub mod ttrpc;
mod validate;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub use hub::Nri;

/// NRI's messages, generated from proto/nri/api.proto (package `nri.pkg.api.v1alpha1`).
#[allow(clippy::all, unused_qualifications, dead_code)]
pub(crate) mod api {
    include!(concat!(env!("OUT_DIR"), "/nri.pkg.api.v1alpha1.rs"));
}

/// The NRI version crust speaks (the module version containerd 2.4.2 requires), told to
/// plugins in Configure.
pub const NRI_VERSION: &str = "v0.12.3";

#[derive(Debug, Clone)]
pub struct NriSettings {
    pub enable: bool,
    /// Where external plugins connect.
    pub socket_path: PathBuf,
    /// Pre-installed plugins (`NN-name` executables), started by crust.
    pub plugin_path: PathBuf,
    /// Their configuration: `NN-name.conf`, else `name.conf`.
    pub plugin_config_path: PathBuf,
    pub registration_timeout: Duration,
    pub request_timeout: Duration,
    /// Told to plugins in Configure.
    pub runtime_version: String,
}

impl NriSettings {
    pub fn from_config(c: &crate::config::NriConfig) -> NriSettings {
        NriSettings {
            enable: c.enable,
            socket_path: c.socket_path.clone(),
            plugin_path: c.plugin_path.clone(),
            plugin_config_path: c.plugin_config_path.clone(),
            registration_timeout: c.registration_timeout.0,
            request_timeout: c.request_timeout.0,
            runtime_version: env!("CARGO_PKG_VERSION").into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum NriError {
    /// A plugin answered an event with an error: the call that needed it fails.
    #[error("NRI plugin {plugin} failed {event}: {message}")]
    Plugin {
        plugin: String,
        event: &'static str,
        message: String,
    },
    /// Two plugins claimed the same field of a container (NRI's ownership rules).
    #[error("NRI {event}: {message}")]
    Conflict {
        event: &'static str,
        message: String,
    },
    /// A plugin asked for something crust cannot do to the container.
    #[error("NRI plugin {plugin} adjusted the container: {message}")]
    Adjustment { plugin: String, message: String },
    #[error("NRI socket {path}: {message}")]
    Socket { path: PathBuf, message: String },
}

/// A pod as NRI plugins see it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodInfo {
    pub id: String,
    pub name: String,
    pub uid: String,
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub runtime_handler: String,
    pub cgroup_parent: String,
    pub cgroups_path: String,
    /// The pod's monitor, which holds its namespaces.
    pub pid: u32,
    pub ips: Vec<String>,
    /// (type, path) of each namespace the pod has of its own.
    pub namespaces: Vec<(String, String)>,
    /// The sum of its containers' limits and the runtime class's overhead, as kubelet last
    /// gave them (RunPodSandbox, UpdatePodSandboxResources); `None`: not given.
    pub resources: Option<oci_spec::runtime::LinuxResources>,
    pub overhead: Option<oci_spec::runtime::LinuxResources>,
}

/// What NRI needs of a container beyond its OCI spec.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerInfo {
    pub id: String,
    pub pod_id: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub created_at: i64,
    /// The image as the request named it, its manifest digest and its config digest.
    pub image: (String, String, String),
}

/// How a container stands, for the events after its creation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum State {
    #[default]
    Created,
    Running,
    Stopped,
}

/// Where a container is at an event: its state, main process and times.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    pub state: State,
    pub pid: u32,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    pub reason: String,
    pub message: String,
}

/// Limits a plugin set for a container other than the one an event is about (or for any
/// container, in an unsolicited UpdateContainers): only the fields given are set.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceUpdate {
    pub container_id: String,
    pub resources: oci_spec::runtime::LinuxResources,
    /// The plugin asked that failing to apply it be no error.
    pub ignore_failure: bool,
}

/// A container a plugin wants stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    pub container_id: String,
    pub reason: String,
}

/// What CreateContainer's plugins decided beyond the spec they adjusted in place. (Their
/// updates and evictions of other containers are applied in the background.)
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Created {
    /// The cgroup a plugin moved the container to, if one did.
    pub cgroups_path: Option<String>,
    /// The CDI devices plugins asked for (the device's name, the plugin's), in their order:
    /// the container room resolves and injects them after every plugin adjusted the spec, as
    /// containerd does (NRI itself knows no CDI registry).
    pub cdi_devices: Vec<(String, String)>,
}

/// What the container room does for plugins: apply their updates and evictions to live
/// containers. Set once, when the daemon has built it (`Nri::set_executor`).
pub trait Executor: Send + Sync {
    /// Applies each update; returns the ids of the containers it could not update.
    fn update(
        &self,
        updates: Vec<ResourceUpdate>,
    ) -> futures_util::future::BoxFuture<'_, Vec<String>>;
    /// Stops a container a plugin evicted.
    fn evict(&self, eviction: Eviction) -> futures_util::future::BoxFuture<'_, Result<(), String>>;
}
