//! Images: pulling from OCI registries, the content store, unpacked layers, image records, and
//! what the container module needs to build a root filesystem. One file per verb (`pull.rs`,
//! `remove.rs`, `status.rs`, `import.rs`, `fsinfo.rs`, `rootfs.rs`); this file holds the
//! `Images` service and what the verbs share. Registry access is `registry.rs` (endpoints,
//! credentials, oci-client sessions) and `http.rs` (size-capped manifest requests, one-line
//! transport errors); `fetch.rs` gets content into the store for pulls and imports alike;
//! `idle.rs` gives memory back when pulls go quiet.
//!
//! Ownership: `Images` owns `<root>/images` (layout in `content.rs`). Container writable layers
//! live in `<root>/containers`, which only `fsinfo.rs` reads here.
//!
//! Invariants:
//! - a blob is in `blobs/` only after its digest was verified, and a layer directory exists only
//!   after its tar matched the diff id, so nothing partial is ever read as complete;
//! - an image record is saved only after all its blobs and layers exist; the record is the
//!   commit point of a pull or an import;
//! - content is deleted only when no record, no hold (a container using the image) and no pull
//!   in progress refers to it; that decision and the pins pulls add are serialized by `pins`.
//!
//! Protocol with other processes (`crust image import` while the daemon runs): both change
//! records and delete content only under the exclusive flock on `images/lock`, and rewrite
//! `images/generation` after each change. The daemon stats that file before answering a read
//! and reloads the records when it changed. Downloads and unpacks need no lock: they write under
//! random temporary names and rename into content-addressed places, which is idempotent.

mod content;
mod digest;
mod extract;
#[cfg(test)]
mod extract_tests;
mod fetch;
mod fsinfo;
mod http;
mod idle;
mod import;
mod lower;
mod manifest;
mod pull;
mod records;
pub mod reference;
mod registry;
mod remove;
mod rootfs;
mod space;
mod sparse;
mod status;
mod tar_bounds;
mod token;
mod unpack;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

pub use content::StorePaths;
pub use digest::Digest;
pub use fsinfo::FsUsage;
pub use import::ImportError;
pub use manifest::{ImageConfig, Platform, RuntimeConfig};
pub use records::{ImageRecord, LayerRef};
pub use reference::{ImageRef, ReferenceError};
pub use registry::Credentials;
pub use rootfs::ImageUse;
pub use space::{NoSpace, Reserve};
pub use status::ImageView;
pub use unpack::UnpackError;

use crate::config::RegistryConfig;
use crate::store::StoreError;
use content::Generation;
use records::Table;

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error(transparent)]
    Reference(#[from] ReferenceError),
    #[error("image {0:?} not found")]
    NotFound(String),
    #[error("image id prefix {0:?} matches more than one image")]
    Ambiguous(String),
    #[error("pulling {reference}: {error}{}", also_tried(.also))]
    Pull {
        reference: String,
        /// The failure that says most (see `pull.rs`).
        error: Box<PullError>,
        /// What the other endpoints answered, one short line each.
        also: Vec<String>,
    },
    #[error("importing {path}: {error}")]
    Import {
        path: String,
        error: Box<ImportError>,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Why a pull failed. Messages name the registry, the blob or the entry that was wrong.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error("{what} not found on {registry}")]
    NotFound { registry: String, what: String },
    #[error("{registry} {detail}")]
    Unauthenticated { registry: String, detail: String },
    #[error("{registry} denied access: {detail}")]
    Denied { registry: String, detail: String },
    #[error("credentials in the request are malformed: {0}")]
    BadCredentials(String),
    #[error("{what}: content digest is {actual}, expected {expected}")]
    DigestMismatch {
        what: String,
        expected: String,
        actual: String,
    },
    #[error("{what}: registry sent {actual} bytes, the descriptor says {expected}")]
    SizeMismatch {
        what: String,
        expected: u64,
        actual: u64,
    },
    #[error("layer {blob}: {error}")]
    Layer { blob: Digest, error: UnpackError },
    #[error("no progress for {secs}s while {what}; aborted")]
    Stalled { what: String, secs: u64 },
    #[error("cannot reach {registry}: {detail}")]
    Unreachable { registry: String, detail: String },
    /// `detail` continues the sentence after the endpoint ("answered HTTP 500 for ...").
    #[error("{registry} {detail}")]
    Registry { registry: String, detail: String },
    #[error("{0}")]
    Unsupported(String),
    /// The image as published cannot be used (malformed or oversized documents, bad layer
    /// lists): pulling it again will not help.
    #[error("invalid image: {0}")]
    Invalid(String),
    /// A failure of crust itself (a task that panicked, a record gone from under the lock).
    #[error("internal error while {0}")]
    Internal(String),
    #[error("crust is shutting down")]
    ShuttingDown,
    #[error("{what} {path}: {source}")]
    Local {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("not enough disk space: {0}")]
    NoSpace(#[from] NoSpace),
}

fn also_tried(also: &[String]) -> String {
    if also.is_empty() {
        String::new()
    } else {
        format!("; also tried: {}", also.join("; "))
    }
}

impl PullError {
    /// Whether another endpoint (the next mirror, or the upstream) may do better.
    fn try_next_endpoint(&self) -> bool {
        !matches!(
            self,
            PullError::Local { .. }
                | PullError::Store(_)
                | PullError::BadCredentials(_)
                | PullError::NoSpace(_)
                | PullError::Internal(_)
                | PullError::ShuttingDown
                | PullError::Layer {
                    error: UnpackError::NoSpace(_) | UnpackError::Fs { .. },
                    ..
                }
        )
    }
}

/// A blocking task that panicked or was cancelled: crust's own fault.
#[derive(Debug)]
pub struct TaskFailed(String);

impl From<TaskFailed> for PullError {
    fn from(e: TaskFailed) -> PullError {
        PullError::Internal(e.0)
    }
}

impl From<TaskFailed> for ImportError {
    fn from(e: TaskFailed) -> ImportError {
        ImportError::Internal(e.0)
    }
}

/// The image service's one way into blocking file work (downloads written to disk, fsyncs,
/// reads, unpacking) from async code: the blocking pool, never an async worker thread, so a
/// slow disk does not stall every RPC.
async fn off_thread<T, E>(
    what: &str,
    f: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, E>
where
    T: Send + 'static,
    E: From<TaskFailed> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(e) => Err(TaskFailed(format!("{what}: {e}")).into()),
    }
}

fn local<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> PullError + 'a {
    move |source| PullError::Local {
        what,
        path: path.to_owned(),
        source,
    }
}

/// What the image service is built from.
#[derive(Debug, Clone)]
pub struct ImageSettings {
    /// crust's root directory; images live in `<root>/images`, container layers in
    /// `<root>/containers`.
    pub root: PathBuf,
    pub registry: RegistryConfig,
    /// Layer downloads running at once, across all pulls.
    pub max_concurrent_downloads: usize,
    /// A pull that receives nothing for this long fails.
    pub progress_timeout: Duration,
    pub platform: Platform,
    /// The share of the image filesystem pulls leave free.
    pub reserve: Reserve,
}

impl ImageSettings {
    pub fn from_config(config: &crate::config::Config) -> ImageSettings {
        ImageSettings {
            root: config.root.clone(),
            registry: config.registry.clone(),
            max_concurrent_downloads: config.image.max_concurrent_downloads,
            progress_timeout: Duration::from_secs(config.image.pull_progress_timeout_secs),
            platform: Platform::current(),
            reserve: Reserve::new(config.image.min_free_percent),
        }
    }
}

/// The image service. Cheap to share behind an `Arc`; every method is safe to call concurrently.
pub struct Images {
    paths: StorePaths,
    containers_dir: PathBuf,
    settings: ImageSettings,
    registries: registry::Registries,
    state: RwLock<State>,
    /// Serializes record commits inside this process (the flock serializes processes).
    commit_lock: Mutex<()>,
    /// Set by `crust image import`, which holds the store flock for its whole run.
    held_lock: Mutex<Option<nix::fcntl::Flock<std::fs::File>>>,
    pins: Arc<Mutex<Pins>>,
    blob_locks: KeyedLocks,
    layer_locks: KeyedLocks,
    downloads: tokio::sync::Semaphore,
    unpacks: tokio::sync::Semaphore,
    layer_usage: Mutex<HashMap<Digest, unpack::LayerMeta>>,
    pulls: idle::PullActivity,
    /// Pulls running in tasks of their own (see `pull_slot`).
    pull_tasks: Arc<tokio::sync::Semaphore>,
}

/// Pulls that may run at once, each in its own task. A pull outlives the request that
/// started it, so clients that retry and give up again and again would otherwise pile up
/// tasks without limit; requests past this wait for a slot instead.
pub const MAX_PULL_TASKS: usize = 32;

/// A slot for one pull task; the slot frees when this drops.
pub struct PullSlot {
    _permit: tokio::sync::OwnedSemaphorePermit,
}

#[derive(Clone)]
struct State {
    table: Arc<Table>,
    generation: Generation,
}

/// Content that must not be deleted: pinned by pulls in progress (counted) and held by
/// containers (by holder).
#[derive(Default)]
struct Pins {
    in_flight: HashMap<Digest, usize>,
    holds: HashMap<String, rootfs::Hold>,
}

/// Removes its pins when dropped.
struct PinGuard {
    pins: Arc<Mutex<Pins>>,
    keys: Vec<Digest>,
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        let mut p = lock(&self.pins);
        for k in &self.keys {
            if let Some(n) = p.in_flight.get_mut(k) {
                *n -= 1;
                if *n == 0 {
                    p.in_flight.remove(k);
                }
            }
        }
    }
}

/// Deletes the file at `path`; one already gone is fine.
fn remove_file(path: PathBuf) -> Result<(), ImageError> {
    match std::fs::remove_file(&path) {
        Err(source) if source.kind() != std::io::ErrorKind::NotFound => Err(ImageError::Io {
            what: "removing",
            path,
            source,
        }),
        _ => Ok(()),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One async mutex per key, so concurrent pulls of the same blob or layer do the work once:
/// the second waits for the first and then finds the result in the store.
#[derive(Default)]
struct KeyedLocks(Mutex<HashMap<Digest, Weak<tokio::sync::Mutex<()>>>>);

impl KeyedLocks {
    async fn lock(&self, key: &Digest) -> tokio::sync::OwnedMutexGuard<()> {
        let m = {
            let mut map = lock(&self.0);
            map.retain(|_, w| w.strong_count() > 0);
            match map.get(key).and_then(Weak::upgrade) {
                Some(m) => m,
                None => {
                    let m = Arc::new(tokio::sync::Mutex::new(()));
                    map.insert(key.clone(), Arc::downgrade(&m));
                    m
                }
            }
        };
        m.lock_owned().await
    }
}

impl Images {
    /// Opens (creating if needed) the image store and loads its records. With `recover`, also
    /// removes what interrupted pulls left and content no record uses (the daemon does this at
    /// start; the CLI does not, as a daemon may be pulling).
    pub fn open(settings: ImageSettings, recover: bool) -> Result<Images, ImageError> {
        let paths = StorePaths::new(&settings.root);
        let io = |what, path: &Path| {
            let path = path.to_owned();
            move |source| ImageError::Io { what, path, source }
        };
        paths.create_dirs().map_err(io("creating", paths.root()))?;
        let images = Images {
            containers_dir: settings.root.join("containers"),
            registries: registry::Registries::new(&settings),
            downloads: tokio::sync::Semaphore::new(settings.max_concurrent_downloads.max(1)),
            unpacks: tokio::sync::Semaphore::new(
                std::thread::available_parallelism()
                    .map_or(2, |n| n.get())
                    .max(2),
            ),
            settings,
            paths,
            state: RwLock::new(State {
                table: Arc::new(Table::default()),
                generation: Generation::default(),
            }),
            commit_lock: Mutex::new(()),
            held_lock: Mutex::new(None),
            pins: Arc::default(),
            blob_locks: KeyedLocks::default(),
            layer_locks: KeyedLocks::default(),
            layer_usage: Mutex::new(HashMap::new()),
            pulls: idle::PullActivity::default(),
            pull_tasks: Arc::new(tokio::sync::Semaphore::new(MAX_PULL_TASKS)),
        };
        images.reload(true)?;
        images.load_holds()?;
        if recover {
            images.recover()?;
        }
        Ok(images)
    }

    pub fn paths(&self) -> &StorePaths {
        &self.paths
    }

    /// Waits for a free slot to pull `reference`; move it into the task that runs the pull.
    pub async fn pull_slot(&self, reference: &str) -> Result<PullSlot, ImageError> {
        match self.pull_tasks.clone().acquire_owned().await {
            Ok(permit) => Ok(PullSlot { _permit: permit }),
            Err(_) => Err(ImageError::Pull {
                reference: reference.to_owned(),
                error: Box::new(PullError::ShuttingDown),
                also: vec![],
            }),
        }
    }

    /// An image service on `root` for unit tests.
    #[cfg(test)]
    pub(crate) fn open_for_test(root: &Path) -> Images {
        let settings = ImageSettings {
            root: root.to_owned(),
            registry: Default::default(),
            max_concurrent_downloads: 1,
            progress_timeout: Duration::from_secs(1),
            platform: Platform::current(),
            reserve: Reserve::new(0),
        };
        Images::open(settings, true).unwrap()
    }

    fn recover(&self) -> Result<(), ImageError> {
        let Some(_flock) = self.paths.try_lock(true).map_err(|source| ImageError::Io {
            what: "locking",
            path: self.paths.root().to_owned(),
            source,
        })?
        else {
            tracing::info!(
                "image store is locked by another process (an import?); skipping cleanup"
            );
            return Ok(());
        };
        let held = lock(&self.pins).holds.len();
        let partials = content::remove_partials(&self.paths).map_err(|source| ImageError::Io {
            what: "cleaning",
            path: self.paths.root().to_owned(),
            source,
        })?;
        let gc = self.collect_garbage_locked()?;
        tracing::info!(
            images = self.table().len(),
            held,
            partials,
            blobs_removed = gc.blobs,
            layers_removed = gc.layers,
            "image store recovered"
        );
        Ok(())
    }

    /// The current table, reloaded first if another process changed the records.
    fn table(&self) -> Arc<Table> {
        let current = self.paths.generation();
        let state = self.state.read().unwrap_or_else(|e| e.into_inner()).clone();
        if state.generation == current {
            return state.table;
        }
        if let Err(e) = self.reload(false) {
            tracing::warn!(error = %e, "reloading image records");
        }
        self.state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .table
            .clone()
    }

    /// Reads every record from disk. Without `wait`, gives up (keeping the old table) when
    /// another process holds the store lock: it bumps the generation again when done.
    fn reload(&self, wait: bool) -> Result<(), ImageError> {
        let _guard = if self.holds_store_lock() {
            None
        } else if wait {
            Some(self.paths.lock(false))
        } else {
            match self.paths.try_lock(false) {
                Ok(Some(l)) => Some(Ok(l)),
                _ => return Ok(()),
            }
        };
        let current = self.paths.generation();
        let table = Table::from_records(load_records(&self.paths)?);
        *self.state.write().unwrap_or_else(|e| e.into_inner()) = State {
            table: Arc::new(table),
            generation: current,
        };
        Ok(())
    }

    fn holds_store_lock(&self) -> bool {
        lock(&self.held_lock).is_some()
    }

    /// Takes the store lock for this process's remaining life (for `crust image import`).
    pub fn hold_store_lock(&self) -> Result<(), ImageError> {
        let l = self.paths.lock(true).map_err(|source| ImageError::Io {
            what: "locking",
            path: self.paths.root().to_owned(),
            source,
        })?;
        *lock(&self.held_lock) = Some(l);
        self.reload(true)
    }

    /// Runs `f` with the store lock held exclusively and the table current. Blocking.
    fn with_store_lock<T>(
        &self,
        f: impl FnOnce(&Table) -> Result<T, ImageError>,
    ) -> Result<T, ImageError> {
        let _inner = lock(&self.commit_lock);
        let _flock = if self.holds_store_lock() {
            None
        } else {
            Some(self.paths.lock(true).map_err(|source| ImageError::Io {
                what: "locking",
                path: self.paths.root().to_owned(),
                source,
            })?)
        };
        if self.paths.generation()
            != self
                .state
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .generation
        {
            let table = Table::from_records(load_records(&self.paths)?);
            let mut s = self.state.write().unwrap_or_else(|e| e.into_inner());
            s.table = Arc::new(table);
            s.generation = self.paths.generation();
        }
        let table = self
            .state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .table
            .clone();
        f(&table)
    }

    /// Installs `table` as the new state after its changed records were saved.
    fn publish(&self, table: Table) -> Result<(), ImageError> {
        let generation = self.paths.bump_generation()?;
        *self.state.write().unwrap_or_else(|e| e.into_inner()) = State {
            table: Arc::new(table),
            generation,
        };
        Ok(())
    }

    /// Pins content for a pull in progress so garbage collection leaves it alone.
    fn pin(&self, keys: Vec<Digest>) -> PinGuard {
        let mut p = lock(&self.pins);
        for k in &keys {
            *p.in_flight.entry(k.clone()).or_default() += 1;
        }
        PinGuard {
            pins: self.pins.clone(),
            keys,
        }
    }
}

fn load_records(paths: &StorePaths) -> Result<Vec<ImageRecord>, ImageError> {
    let dir = paths.records_dir();
    let entries = std::fs::read_dir(&dir).map_err(|source| ImageError::Io {
        what: "reading",
        path: dir.clone(),
        source,
    })?;
    let mut out = Vec::new();
    for e in entries.flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "json")
            && !e.file_name().to_string_lossy().starts_with('.')
        {
            match crate::store::load::<ImageRecord>(&p) {
                Ok(r) => out.push(r),
                Err(err) => tracing::warn!(error = %err, "skipping unreadable image record"),
            }
        }
    }
    Ok(out)
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}
