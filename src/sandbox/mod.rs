//! Pod sandboxes: their lifecycle, one file per verb: RunPodSandbox, resource updates and
//! recovery at start here; stop, removal and the release of what a pod holds in `ending/`;
//! status, listing, statistics and readiness in `observe/`; the node's side of a pod (cgroups,
//! files it mounts) in `host/`. This file holds the table of sandboxes and what the verbs
//! share.
//!
//! Invariants:
//! - a sandbox's record is saved before any resource is created for it (phase `Creating`), so a
//!   crash at any point leaves enough on disk for recovery to undo it;
//! - lifecycle verbs on one sandbox are serialized by its `op` lock; reads never wait for them;
//! - a name (name, uid, namespace, attempt) belongs to at most one sandbox, reserved before
//!   creation starts and released when the sandbox is removed or its creation fails.

mod death;
mod ending;
pub mod host;
pub mod model;
mod observe;
pub(crate) mod plugins;
mod recover;
mod run;
mod update;
use ending::teardown;
pub(crate) use observe::ready;
use observe::{stats, status};
pub(crate) use teardown::Timed;
#[cfg(any(test, fuzzing))]
pub(crate) use validate::spec as validate_spec;
mod validate;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use death::{MonitorDeath, monitor_death};
pub use host::cgroup::CgroupSettings;
pub use model::*;
pub use ready::NotReady;
pub use recover::RecoverySummary;
pub use stats::PodStats;
pub use status::{SandboxFilter, SandboxView};

use crate::network::Cni;

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("{0}")]
    Invalid(String),
    #[error(
        "pod sandbox {name:?} (namespace {namespace:?}, uid {uid:?}, attempt {attempt}) already exists as {id}"
    )]
    NameTaken {
        name: String,
        namespace: String,
        uid: String,
        attempt: u32,
        id: String,
    },
    #[error("pod sandbox {0:?} not found")]
    NotFound(String),
    #[error("pod sandbox id prefix {0:?} matches more than one sandbox")]
    Ambiguous(String),
    #[error("unknown runtime handler {handler:?}; configured handlers: {known:?}")]
    UnknownHandler { handler: String, known: Vec<String> },
    #[error("pod network is not ready: {0}")]
    NetworkNotReady(String),
    /// The pod asks for something this node cannot give (a user namespace where crust's probe
    /// at start failed).
    #[error("{0}")]
    HostLacks(String),
    #[error("pod sandbox {0} is not ready: it has no running processes to measure")]
    NotReady(String),
    #[error("pod sandbox {0} is not ready: its resources cannot change")]
    NotRunning(String),
    #[error("applying resources to pod sandbox {id}: {error}")]
    Resources { id: String, error: String },
    /// An NRI plugin refused the pod's new resources.
    #[error("updating the resources of pod sandbox {id}: {source}")]
    Nri {
        id: String,
        source: crate::nri::NriError,
    },
    #[error("reading the statistics of pod sandbox {id}: {error}")]
    Stats { id: String, error: String },
    #[error("failed to {step}: {cause}{}", cleanup_note(.cleanup))]
    Run {
        step: &'static str,
        /// Boxed: a CNI or monitor error is large, and container errors carry sandbox errors.
        cause: Box<RunFailure>,
        cleanup: Option<String>,
    },
    #[error("stopping pod sandbox {id}: {errors}")]
    Teardown { id: String, errors: String },
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

/// Why a step of RunPodSandbox failed, kept typed so the status table can tell a CNI plugin's
/// refusal from a full disk from a bug.
#[derive(Debug, thiserror::Error)]
pub enum RunFailure {
    #[error(transparent)]
    Cni(#[from] crate::network::CniError),
    #[error(transparent)]
    Monitor(#[from] crate::monitor::MonitorError),
    #[error(transparent)]
    Cgroup(#[from] host::cgroup::CgroupError),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Nri(#[from] crate::nri::NriError),
    /// The task running the request failed (a panic, or the runtime shutting down).
    #[error("{0}")]
    Task(String),
}

impl RunFailure {
    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RunFailure + '_ {
        move |source| RunFailure::Io {
            path: path.to_owned(),
            source,
        }
    }
}

fn cleanup_note(cleanup: &Option<String>) -> String {
    cleanup
        .as_ref()
        .map(|c| format!(" (and undoing it failed too: {c})"))
        .unwrap_or_default()
}

/// A sandbox's record, in its record directory.
pub const RECORD: &str = "sandbox.json";
/// The same record as it was planned, kept beside it (see `SandboxContext::planned_path`).
pub const PLANNED: &str = "planned.json";

/// What the sandbox verbs need from the rest of the daemon.
pub struct SandboxContext {
    /// The daemon's state directory (`--state`): what dies with the machine (the pods'
    /// directories with their monitors' sockets, namespace pins, `/dev/shm`).
    pub state_dir: PathBuf,
    /// `<root>/records/sandboxes`: each pod's record, which outlives the machine, so that
    /// after a reboot the pod is still listed (NotReady) and its network can be released.
    pub records_dir: PathBuf,
    /// The crust binary, for spawning monitors.
    pub exe: PathBuf,
    pub cni: Arc<Cni>,
    pub cgroups: CgroupSettings,
    pub default_handler: String,
    pub handlers: Vec<String>,
    /// The handlers an OCI runtime binary runs (`runtimes`); the others are libcontainer's.
    pub runtimes: std::collections::BTreeMap<String, crate::model::OciRuntime>,
    /// How long a monitor may take to start or to stop.
    pub monitor_timeout: Duration,
    /// The NRI plugins, told of each pod's life.
    pub nri: Arc<crate::nri::Nri>,
    /// The sysctls a pod with a network namespace of its own gets unless it sets them itself.
    pub pod_sysctls: PodSysctlDefaults,
    /// Each pod's history, for `crust diagnose`.
    pub history: Arc<crate::history::History>,
}

/// containerd 2.x's `enable_unprivileged_ports` and `enable_unprivileged_icmp`: defaults for
/// the pod's own network namespace (the node's is never touched).
#[derive(Debug, Clone, Copy, Default)]
pub struct PodSysctlDefaults {
    /// `net.ipv4.ip_unprivileged_port_start = 0`: any user may bind a port below 1024.
    pub unprivileged_ports: bool,
    /// `net.ipv4.ping_group_range = 0 2147483647`: any group may open ICMP echo sockets.
    pub unprivileged_icmp: bool,
}

impl SandboxContext {
    pub fn sandboxes_dir(&self) -> PathBuf {
        self.state_dir.join("sandboxes")
    }
    pub fn sandbox_dir(&self, id: &str) -> PathBuf {
        self.sandboxes_dir().join(id)
    }
    pub fn ns_dir(&self) -> PathBuf {
        self.state_dir.join("ns")
    }
    /// The directory of sandbox `id`'s record.
    pub fn record_dir(&self, id: &str) -> PathBuf {
        self.records_dir.join(id)
    }
    fn record_path(&self, id: &str) -> PathBuf {
        self.record_dir(id).join(RECORD)
    }
    /// The record as RunPodSandbox planned it, before anything was made (`store::save_with_copy`).
    fn planned_path(&self, id: &str) -> PathBuf {
        self.record_dir(id).join(PLANNED)
    }
    /// Where unreadable records are set aside (`store::set_aside`).
    pub fn damaged_dir(&self) -> PathBuf {
        self.records_dir
            .parent()
            .unwrap_or(&self.records_dir)
            .join(crate::store::DAMAGED_DIR)
    }

    /// Notes `fact` in the history of the pod `record` is.
    pub fn note(&self, record: &SandboxRecord, fact: crate::history::Fact) {
        let m = &record.spec.metadata;
        self.history.note(&m.namespace, &m.name, &record.id, fact);
    }
}

/// One sandbox in the table.
struct Entry {
    /// Serializes lifecycle verbs on this sandbox.
    op: Arc<tokio::sync::Mutex<()>>,
    /// The current record, shared with readers: an update replaces it (copy on write), so a
    /// list of many pods copies pointers, not records.
    record: Mutex<Arc<SandboxRecord>>,
    /// The task that notices the monitor dying.
    watcher: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Entry {
    fn new(record: SandboxRecord) -> Arc<Entry> {
        Arc::new(Entry {
            op: Arc::new(tokio::sync::Mutex::new(())),
            record: Mutex::new(Arc::new(record)),
            watcher: Mutex::new(None),
        })
    }
    fn snapshot(&self) -> Arc<SandboxRecord> {
        self.record
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
    /// Stops watching the monitor: a verb is about to stop it on purpose.
    fn stop_watching(&self) {
        if let Some(w) = self
            .watcher
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            w.abort();
        }
    }
}

#[derive(Default)]
struct Table {
    by_id: HashMap<String, Arc<Entry>>,
    /// Name -> id, including names reserved by creations under way.
    names: HashMap<PodMetadata, String>,
}

/// A sandbox taken for a lifecycle verb: its op lock is held and it is still in the table.
struct Held {
    id: String,
    entry: Arc<Entry>,
    _op: tokio::sync::OwnedMutexGuard<()>,
}

/// All pod sandboxes of this daemon.
pub struct Sandboxes {
    ctx: Arc<SandboxContext>,
    table: Mutex<Table>,
    /// The previous CPU reading per pod, for PodSandboxStats' rate.
    cpu_rates: crate::stats::CpuRates,
    /// Moves whenever a record is added, replaced or removed (see `changes`).
    changes: AtomicU64,
    /// Pods whose records a newer crust wrote: not listed, and nothing of theirs touched.
    left_alone: Mutex<std::collections::HashSet<String>>,
}

impl Sandboxes {
    pub fn new(ctx: SandboxContext) -> Arc<Sandboxes> {
        Arc::new(Sandboxes {
            ctx: Arc::new(ctx),
            table: Mutex::new(Table::default()),
            cpu_rates: crate::stats::CpuRates::default(),
            changes: AtomicU64::new(0),
            left_alone: Mutex::default(),
        })
    }

    /// The pods recovery left alone (records of a newer crust): their containers are left
    /// alone too.
    pub fn left_alone(&self) -> std::collections::HashSet<String> {
        self.left_alone_ids().clone()
    }

    fn left_alone_ids(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.left_alone.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A count that moves after every change to the listed records: a list made after reading
    /// it holds every change made before, so an answer kept with the count it was made at is
    /// current while the count stays.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    pub fn context(&self) -> &SandboxContext {
        &self.ctx
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Finds a sandbox by id or by a unique id prefix.
    fn entry(&self, id: &str) -> Result<(String, Arc<Entry>), SandboxError> {
        if id.is_empty() {
            return Err(SandboxError::Invalid("pod sandbox id is required".into()));
        }
        let table = self.table();
        if let Some(e) = table.by_id.get(id) {
            return Ok((id.to_owned(), e.clone()));
        }
        let mut found = table.by_id.iter().filter(|(k, _)| k.starts_with(id));
        match (found.next(), found.next()) {
            (Some((k, e)), None) => Ok((k.clone(), e.clone())),
            (Some(_), Some(_)) => Err(SandboxError::Ambiguous(id.to_owned())),
            _ => Err(SandboxError::NotFound(id.to_owned())),
        }
    }

    /// Takes sandbox `id` for a lifecycle verb. None when there is no such sandbox, or it was
    /// removed while this call waited for it: Stop and Remove then have nothing to do.
    async fn hold(&self, id: &str) -> Result<Option<Held>, SandboxError> {
        let (id, entry) = match self.entry(id) {
            Ok(found) => found,
            Err(SandboxError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        let op = entry.op.clone().lock_owned().await;
        if !self.table().by_id.contains_key(&id) {
            return Ok(None);
        }
        Ok(Some(Held { id, entry, _op: op }))
    }

    /// A copy of the record of sandbox `id` (full id or unique prefix).
    pub fn get(&self, id: &str) -> Result<Arc<SandboxRecord>, SandboxError> {
        self.entry(id).map(|(_, e)| e.snapshot())
    }

    fn reserve(&self, meta: &PodMetadata, id: &str) -> Result<(), SandboxError> {
        let mut table = self.table();
        if let Some(owner) = table.names.get(meta) {
            return Err(SandboxError::NameTaken {
                name: meta.name.clone(),
                namespace: meta.namespace.clone(),
                uid: meta.uid.clone(),
                attempt: meta.attempt,
                id: owner.clone(),
            });
        }
        table.names.insert(meta.clone(), id.to_owned());
        Ok(())
    }

    fn release(&self, meta: &PodMetadata, id: &str) {
        let mut table = self.table();
        if table.names.get(meta).is_some_and(|owner| owner == id) {
            table.names.remove(meta);
        }
    }

    fn insert(&self, record: SandboxRecord) -> Arc<Entry> {
        let entry = Entry::new(record.clone());
        let mut table = self.table();
        table
            .names
            .insert(record.spec.metadata.clone(), record.id.clone());
        table.by_id.insert(record.id, entry.clone());
        self.changes.fetch_add(1, Ordering::Release);
        entry
    }

    fn save(&self, record: &SandboxRecord) -> Result<(), SandboxError> {
        crate::store::save(&self.ctx.record_path(&record.id), record)?;
        Ok(())
    }

    /// Changes the record of a sandbox whose op lock the caller holds: the changed record is
    /// saved first and replaces the one in memory only once it is on disk, so a failed save
    /// leaves memory and disk as they were and returns the error.
    fn commit(
        &self,
        entry: &Entry,
        f: impl FnOnce(&mut SandboxRecord),
    ) -> Result<Arc<SandboxRecord>, SandboxError> {
        let mut next = SandboxRecord::clone(&entry.snapshot());
        f(&mut next);
        self.save(&next)?;
        let next = Arc::new(next);
        *entry.record.lock().unwrap_or_else(|e| e.into_inner()) = next.clone();
        // After the new record is in place: whoever reads the count first lists it.
        self.changes.fetch_add(1, Ordering::Release);
        Ok(next)
    }
}

/// Runs a lifecycle verb to its end even if the caller goes away. A gRPC handler's future is
/// dropped when its client cancels (a kubelet timeout, a ^C'd crictl); dropping a verb half way
/// would leave a monitor, a CNI attachment or a reserved name behind, so verbs run in a task
/// of their own and the caller only waits for the outcome.
async fn detached<T: Send + 'static>(
    work: impl Future<Output = Result<T, SandboxError>> + Send + 'static,
) -> Result<T, SandboxError> {
    // The task keeps the caller's span, so its logs still name the pod.
    tokio::spawn(tracing::Instrument::in_current_span(work))
        .await
        .unwrap_or_else(|e| {
            Err(SandboxError::Run {
                step: "finish the request",
                cause: Box::new(RunFailure::Task(e.to_string())),
                cleanup: None,
            })
        })
}

fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or_default()
}
