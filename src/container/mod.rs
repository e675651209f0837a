//! Containers: their lifecycle, one file per verb: creation, start, resource updates and
//! recovery at start here; how a container ends (exits, stop, removal and its background
//! reclaim, the release of what it held, a pod's stop reaching its containers) in `ending/`;
//! what a container is made of in `bundle/` (rootfs, volumes, OCI spec); its processes and
//! streams in `io/` (ExecSync, exec and attach, log reopening); what clients read in
//! `observe/` (events, statistics, status). This file holds
//! the table of containers and what the verbs share.
//!
//! A container lives in its pod's monitor, which creates it through libcontainer, is its
//! parent, relays its output and records its exit. The daemon keeps the container's record,
//! its root filesystem (an overlay of the image's layers under a writable layer in
//! `<root>/containers/<id>`), its OCI bundle (`<state>/containers/<id>/bundle`), and learns of
//! exits from the monitor's event stream (`events.rs`).
//!
//! Invariants:
//! - a container's record is saved (phase `Creating`) before any resource is made for it, so a
//!   crash at any point leaves enough on disk for recovery to undo it;
//! - a record changes on disk first, then in memory (`Entry::commit`);
//! - lifecycle verbs on one container are serialized by its `op` lock; reads never wait;
//! - a name (pod, name, attempt) belongs to at most one container, reserved before creation
//!   and released when the container is removed or its creation fails;
//! - a removed container leaves the table once its tombstone is on disk; what it held is
//!   reclaimed in the background, and its pod's Stop and Remove wait for that (`ending/remove.rs`).

mod bundle;
mod checkpoint;
mod create;
mod ending;
mod io;
pub mod model;
mod observe;
mod plugins;
mod ready;
mod recover;
mod start;
mod update;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use bundle::apparmor;
pub use bundle::idmap::probe as probe_user_namespaces;
use bundle::{accounts, declared, host, idmap, poststop, prepare, rootfs, volumes};
pub use checkpoint::{CheckpointError, PodCheckpoint, PodRestore};
#[cfg(any(test, fuzzing))]
pub(crate) use create::validate;
use ending::{remove, teardown};
pub use io::interactive;
use observe::{events, stats, status};

pub use events::{ContainerEvent, EventKind};
pub use model::*;
pub use plugins::PluginExecutor;
pub use recover::RecoverySummary;
pub use stats::{ContainerStats, LayerUsage, PodMetrics, PodUsage};
pub use status::{ContainerFilter, ContainerView};

use crate::image::Images;
use crate::model::ContainerMetadata;
use crate::monitor::{MonitorError, MonitorHandle};
use crate::sandbox::{CgroupSettings, SandboxError, SandboxRecord, Sandboxes};

#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    #[error("{0}")]
    Invalid(String),
    #[error("container {0:?} not found")]
    NotFound(String),
    #[error("container id prefix {0:?} matches more than one container")]
    Ambiguous(String),
    #[error("container {name:?} (attempt {attempt}) already exists in pod sandbox {pod} as {id}")]
    NameTaken {
        name: String,
        attempt: u32,
        pod: String,
        id: String,
    },
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error("pod sandbox {0} is not ready")]
    PodNotReady(String),
    #[error(transparent)]
    Image(#[from] crate::image::ImageError),
    #[error(transparent)]
    Spec(#[from] crate::oci::SpecError),
    #[error(transparent)]
    Cdi(#[from] crate::cdi::CdiError),
    /// The container's state does not allow the request.
    #[error("container {id} is {state}: cannot {what}")]
    State {
        id: String,
        state: &'static str,
        what: &'static str,
    },
    #[error("failed to {step}: {source}{}", cleanup_note(.cleanup))]
    Create {
        step: &'static str,
        source: Box<ContainerError>,
        cleanup: Option<String>,
    },
    /// The pod's monitor refused or could not be reached.
    #[error("container {id}: {step}: {source}")]
    Monitor {
        id: String,
        step: &'static str,
        source: MonitorError,
    },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Cgroup(#[from] crate::sandbox::host::cgroup::CgroupError),
    #[error("mounting the root filesystem: {0}")]
    Rootfs(#[from] crate::snapshot::OverlayError),
    #[error("command {cmd:?} in container {id} timed out after {timeout:?}")]
    ExecTimeout {
        id: String,
        cmd: String,
        timeout: Duration,
    },
    #[error(
        "command {cmd:?} in container {id} wrote more than {limit} bytes to stdout or stderr, \
         the ExecSync limit (use a streaming Exec for more)"
    )]
    ExecOutputTooLarge {
        id: String,
        cmd: String,
        limit: usize,
    },
    #[error(
        "container {id} did not exit within {timeout:?} of SIGKILL (a process stuck in the kernel?)"
    )]
    Unkillable { id: String, timeout: Duration },
    #[error("removing container {id}: {errors}")]
    Teardown { id: String, errors: String },
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    AppArmor(#[from] apparmor::AppArmorError),
    #[error(transparent)]
    Nri(#[from] crate::nri::NriError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
}

fn cleanup_note(cleanup: &Option<String>) -> String {
    cleanup
        .as_ref()
        .map(|c| format!(" (and undoing it failed too: {c})"))
        .unwrap_or_default()
}

impl ContainerError {
    fn monitor(id: &str, step: &'static str) -> impl FnOnce(MonitorError) -> ContainerError {
        let id = id.to_owned();
        move |source| ContainerError::Monitor { id, step, source }
    }
}

/// What one runtime handler's containers can have (Status's RuntimeHandlerFeatures).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HandlerFeatures {
    pub recursive_read_only_mounts: bool,
    pub user_namespaces: bool,
}

/// A container's record, in its record directory.
pub const RECORD: &str = "container.json";
/// The same record as it was planned, kept beside it (see `ContainerContext::planned_path`).
pub const PLANNED: &str = "planned.json";

/// What the container verbs need from the rest of the daemon.
pub struct ContainerContext {
    /// `<state>/containers`: bundles, exit records, runtime logs (dies with the machine).
    pub state_dir: PathBuf,
    /// `<root>/records/containers`: each container's record (or tombstone), which outlives
    /// the machine, so that after a reboot kubelet still finds it exited.
    pub records_dir: PathBuf,
    /// `<state>/runtime`: libcontainer's state root.
    pub runtime_root: PathBuf,
    /// `<root>/containers`: writable layers and root filesystem mount points.
    pub layers_dir: PathBuf,
    /// `<root>/images`: the image store, whose filesystem the writable layers' is compared with
    /// (ImageFsInfo's and a container's writable layer name the same one).
    pub image_root: PathBuf,
    pub cgroups: CgroupSettings,
    pub host: crate::oci::HostFeatures,
    /// AppArmor, where the kernel enforces it.
    pub apparmor: Option<apparmor::AppArmor>,
    /// How long a monitor may take to answer a lifecycle request.
    pub monitor_timeout: Duration,
    /// Bytes of stdout and of stderr an ExecSync returns.
    pub max_exec_output: usize,
    /// Where CDI specs are read from, later directories winning (`cdi_spec_dirs`).
    pub cdi_spec_dirs: Vec<PathBuf>,
    /// Request devices belong to the container's run_as_user/run_as_group, where not root
    /// (`device_ownership_from_security_context`).
    pub device_ownership_from_security_context: bool,
    /// Directories of OCI hook files (`hooks_dir`).
    pub hooks_dirs: Vec<PathBuf>,
    /// What becomes of the volumes an image declares (`image_volumes`).
    pub image_volumes: crate::config::ImageVolumes,
    /// The handlers an OCI runtime binary runs (`runtimes`), by name; any other handler is
    /// libcontainer's.
    pub runtimes: BTreeMap<String, crate::model::OciRuntime>,
    /// What each of those binaries supports, asked once at start (`<runtime> features`).
    pub runtime_features: BTreeMap<String, crate::monitor::oci_cli::RuntimeFeatures>,
    /// The CRIU binary checkpoints use (`criu_path`); `None`: the `criu` on PATH.
    pub criu_path: Option<PathBuf>,
    /// Whether checkpoints and restores are allowed (`[checkpoint] restore`).
    pub restore_policy: crate::config::RestorePolicy,
    /// That binary once it passed its checks (`ContainerContext::criu`).
    criu: tokio::sync::OnceCell<crate::criu::Criu>,
}

impl ContainerContext {
    pub fn new(
        state: &std::path::Path,
        root: &std::path::Path,
        cgroups: CgroupSettings,
    ) -> ContainerContext {
        ContainerContext {
            state_dir: state.join("containers"),
            records_dir: crate::store::records_dir(root).join("containers"),
            runtime_root: state.join("runtime"),
            layers_dir: root.join("containers"),
            image_root: crate::image::StorePaths::new(root).root().to_owned(),
            host: host::detect(cgroups.unified, &root.join("containers"), state),
            apparmor: apparmor::AppArmor::detect(state),
            cgroups,
            monitor_timeout: Duration::from_secs(30),
            max_exec_output: 16 << 20,
            cdi_spec_dirs: crate::config::Config::default().cdi_spec_dirs,
            device_ownership_from_security_context: false,
            hooks_dirs: Vec::new(),
            image_volumes: crate::config::ImageVolumes::Bind,
            runtimes: BTreeMap::new(),
            runtime_features: BTreeMap::new(),
            criu_path: None,
            restore_policy: Default::default(),
            criu: tokio::sync::OnceCell::new(),
        }
    }

    /// What a handler's containers can have, for Status: libcontainer's handlers what this
    /// host offers; a runtime binary's what it reported too (`<runtime> features`).
    pub fn handler_features(&self, handler: &str) -> HandlerFeatures {
        let rro = self.host.mount_setattr;
        let userns = self.host.no_user_namespaces.is_none();
        match self.runtime_features.get(handler) {
            Some(f) => HandlerFeatures {
                recursive_read_only_mounts: rro && f.recursive_read_only_mounts,
                user_namespaces: userns && f.user_namespaces,
            },
            None if self.runtimes.contains_key(handler) => HandlerFeatures::default(),
            None => HandlerFeatures {
                recursive_read_only_mounts: rro,
                user_namespaces: userns,
            },
        }
    }

    pub fn container_dir(&self, id: &str) -> PathBuf {
        self.state_dir.join(id)
    }

    /// The directory of container `id`'s record (and of its tombstone once removed).
    pub fn record_dir(&self, id: &str) -> PathBuf {
        self.records_dir.join(id)
    }

    fn record_path(&self, id: &str) -> PathBuf {
        self.record_dir(id).join(RECORD)
    }

    /// The record as CreateContainer planned it, before anything was made
    /// (`store::save_with_copy`): what recovery releases when the record cannot be read.
    fn planned_path(&self, id: &str) -> PathBuf {
        self.record_dir(id).join(PLANNED)
    }

    /// Creates the directories the verbs rely on.
    pub fn prepare_dirs(&self) -> std::io::Result<()> {
        for dir in [
            &self.state_dir,
            &self.records_dir,
            &self.runtime_root,
            &self.layers_dir,
        ] {
            crate::durable::create_dir_all(dir)?;
        }
        for runtime in self.runtimes.values() {
            crate::durable::create_dir_all(&runtime.root)?;
        }
        Ok(())
    }
}

/// One container in the table.
struct Entry {
    /// Serializes lifecycle verbs on this container.
    op: Arc<tokio::sync::Mutex<()>>,
    /// The current record, shared with readers; replaced whole on change (copy on write).
    record: Mutex<Arc<ContainerRecord>>,
    /// Serializes changes to the record (`commit`), apart from `record`, so that readers never
    /// wait for a change's flush to disk.
    writer: Mutex<()>,
    /// Becomes true once the container's exit is recorded.
    exited: tokio::sync::watch::Sender<bool>,
    /// The exec process template (from the bundle), read once.
    exec_template: Mutex<Option<Arc<oci_spec::runtime::Process>>>,
    /// An exit that came while StartContainer was between the monitor's start and its record:
    /// applied once the start is recorded, so events keep the order things happened in.
    pending_exit: Mutex<Option<ExitInfo>>,
    /// True while a StartContainer waits on the monitor: only then does an exit of a started
    /// container wait in `pending_exit`. A container whose start the daemon died before
    /// recording (still Created on disk, started in its monitor) has its exit applied at once.
    starting: std::sync::atomic::AtomicBool,
    /// The table's count of changes (`Containers::changes`), moved by each commit.
    changes: Arc<AtomicU64>,
}

impl Entry {
    fn new(record: ContainerRecord, changes: Arc<AtomicU64>) -> Arc<Entry> {
        let (exited, _) = tokio::sync::watch::channel(record.phase == Phase::Exited);
        Arc::new(Entry {
            op: Arc::new(tokio::sync::Mutex::new(())),
            record: Mutex::new(Arc::new(record)),
            writer: Mutex::new(()),
            exited,
            exec_template: Mutex::new(None),
            pending_exit: Mutex::new(None),
            starting: std::sync::atomic::AtomicBool::new(false),
            changes,
        })
    }

    fn snapshot(&self) -> Arc<ContainerRecord> {
        self.record
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Changes the record: on disk first, then in memory. A failed save changes nothing.
    fn commit(
        &self,
        ctx: &ContainerContext,
        f: impl FnOnce(&mut ContainerRecord),
    ) -> Result<Arc<ContainerRecord>, ContainerError> {
        let _writing = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = (*self.snapshot()).clone();
        f(&mut next);
        crate::store::save(&ctx.record_path(&next.id), &next)?;
        let exited = next.phase == Phase::Exited;
        let next = Arc::new(next);
        *self.record.lock().unwrap_or_else(|e| e.into_inner()) = next.clone();
        // After the new record is in place: whoever reads the count first lists it.
        self.changes.fetch_add(1, Ordering::Release);
        if exited {
            self.exited.send_replace(true);
        }
        Ok(next)
    }
}

#[derive(Default)]
struct Table {
    by_id: HashMap<String, Arc<Entry>>,
    /// (pod, name, attempt) -> id, including names reserved by creations under way.
    names: HashMap<(String, ContainerMetadata), String>,
}

/// A container taken for a lifecycle verb: its op lock is held and it is still in the table.
struct Held {
    id: String,
    entry: Arc<Entry>,
    _op: tokio::sync::OwnedMutexGuard<()>,
}

/// All containers of this daemon.
pub struct Containers {
    ctx: Arc<ContainerContext>,
    sandboxes: Arc<Sandboxes>,
    images: Arc<Images>,
    table: Mutex<Table>,
    /// The task following each pod monitor's events, by pod id.
    watchers: Mutex<HashMap<String, tokio::task::JoinHandle<()>>>,
    /// Lifecycle events for GetContainerEvents.
    events: crate::events::Hub<ContainerEvent>,
    /// What statistics remember between calls (CPU readings, writable layer usage).
    stats: stats::StatsState,
    /// Removed containers whose resources are still being reclaimed (`ending/remove.rs`).
    reclaims: remove::Reclaims,
    /// Moves whenever a record is added, replaced or removed (see `changes`).
    changes: Arc<AtomicU64>,
}

impl Containers {
    pub fn new(
        ctx: ContainerContext,
        sandboxes: Arc<Sandboxes>,
        images: Arc<Images>,
    ) -> Arc<Containers> {
        Arc::new(Containers {
            ctx: Arc::new(ctx),
            sandboxes,
            images,
            table: Mutex::new(Table::default()),
            watchers: Mutex::new(HashMap::new()),
            events: crate::events::Hub::default(),
            stats: Default::default(),
            reclaims: Default::default(),
            changes: Arc::default(),
        })
    }

    /// A count that moves after every change to the listed records: a list made after reading
    /// it holds every change made before, so an answer kept with the count it was made at is
    /// current while the count stays.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    pub fn context(&self) -> &ContainerContext {
        &self.ctx
    }

    /// Notes `fact` in the history of pod `pod_id` (a pod already gone has no history to add
    /// to: its removal was the last fact).
    fn note(&self, pod_id: &str, fact: crate::history::Fact) {
        if let Ok(pod) = self.sandboxes.get(pod_id) {
            self.sandboxes.context().note(&pod, fact);
        }
    }

    pub fn sandboxes(&self) -> &Arc<Sandboxes> {
        &self.sandboxes
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Finds a container by id or by a unique id prefix.
    fn entry(&self, id: &str) -> Result<(String, Arc<Entry>), ContainerError> {
        if id.is_empty() {
            return Err(ContainerError::Invalid("container id is required".into()));
        }
        let table = self.table();
        if let Some(e) = table.by_id.get(id) {
            return Ok((id.to_owned(), e.clone()));
        }
        let mut found = table.by_id.iter().filter(|(k, _)| k.starts_with(id));
        match (found.next(), found.next()) {
            (Some((k, e)), None) => Ok((k.clone(), e.clone())),
            (Some(_), Some(_)) => Err(ContainerError::Ambiguous(id.to_owned())),
            _ => Err(ContainerError::NotFound(id.to_owned())),
        }
    }

    /// Takes container `id` for a lifecycle verb. None when there is no such container, or it
    /// was removed while this call waited for it.
    async fn hold(&self, id: &str) -> Result<Option<Held>, ContainerError> {
        let (id, entry) = match self.entry(id) {
            Ok(found) => found,
            Err(ContainerError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        let op = entry.op.clone().lock_owned().await;
        if !self.table().by_id.contains_key(&id) {
            return Ok(None);
        }
        Ok(Some(Held { id, entry, _op: op }))
    }

    /// Like `hold`, but an unknown container is an error.
    async fn hold_existing(&self, id: &str) -> Result<Held, ContainerError> {
        self.hold(id)
            .await?
            .ok_or_else(|| ContainerError::NotFound(id.to_owned()))
    }

    /// A copy of the record of container `id` (full id or unique prefix).
    pub fn get(&self, id: &str) -> Result<Arc<ContainerRecord>, ContainerError> {
        self.entry(id).map(|(_, e)| e.snapshot())
    }

    fn reserve(&self, pod: &str, meta: &ContainerMetadata, id: &str) -> Result<(), ContainerError> {
        let mut table = self.table();
        let key = (pod.to_owned(), meta.clone());
        if let Some(owner) = table.names.get(&key) {
            return Err(ContainerError::NameTaken {
                name: meta.name.clone(),
                attempt: meta.attempt,
                pod: pod.to_owned(),
                id: owner.clone(),
            });
        }
        table.names.insert(key, id.to_owned());
        Ok(())
    }

    fn release_name(&self, pod: &str, meta: &ContainerMetadata, id: &str) {
        let mut table = self.table();
        let key = (pod.to_owned(), meta.clone());
        if table.names.get(&key).is_some_and(|owner| owner == id) {
            table.names.remove(&key);
        }
    }

    fn insert(&self, record: ContainerRecord) -> Arc<Entry> {
        let entry = Entry::new(record.clone(), self.changes.clone());
        let mut table = self.table();
        table.names.insert(
            (record.pod_id.clone(), record.spec.metadata.clone()),
            record.id.clone(),
        );
        table.by_id.insert(record.id, entry.clone());
        self.changes.fetch_add(1, Ordering::Release);
        entry
    }

    /// The ids of the containers of pod `pod`.
    fn of_pod(&self, pod: &str) -> Vec<String> {
        self.table()
            .by_id
            .iter()
            .filter(|(_, e)| e.snapshot().pod_id == pod)
            .map(|(id, _)| id.clone())
            .collect()
    }
}

/// Runs a lifecycle verb to its end even if the caller goes away (see `sandbox::detached`).
async fn detached<T: Send + 'static>(
    work: impl Future<Output = Result<T, ContainerError>> + Send + 'static,
) -> Result<T, ContainerError> {
    tokio::spawn(tracing::Instrument::in_current_span(work))
        .await
        .unwrap_or_else(|e| {
            Err(ContainerError::Teardown {
                id: String::new(),
                errors: format!("the request's task failed: {e}"),
            })
        })
}

fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or_default()
}

/// The monitor of a ready pod, which every verb on its containers talks to.
fn monitor_of(pod: &SandboxRecord) -> Result<MonitorHandle, ContainerError> {
    match pod.monitor {
        Some(identity) if pod.phase.is_ready() => Ok(MonitorHandle {
            identity,
            dir: pod.dir.clone(),
        }),
        _ => Err(ContainerError::PodNotReady(pod.id.clone())),
    }
}

/// Runs blocking work (fsyncs, mounts) off the async threads.
async fn blocking<T: Send + 'static, E: Send + 'static>(
    f: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, ContainerError>
where
    ContainerError: From<E>,
{
    let span = tracing::Span::current();
    tokio::task::spawn_blocking(move || {
        let _in = span.enter();
        f()
    })
    .await
    .map_err(|e| ContainerError::Teardown {
        id: String::new(),
        errors: format!("a blocking task failed: {e}"),
    })?
    .map_err(ContainerError::from)
}
