//! Images: pulling from OCI registries, the content store, unpacked layers, image records, and
//! what the container module needs to build a root filesystem. One file per verb (`pull.rs`,
//! `remove.rs`, `status.rs`, `import.rs`, `fsinfo.rs`, `rootfs.rs`); this file holds the
//! `Images` service and what the verbs share. `registry/` talks to registries (references,
//! manifests, endpoints, credentials, size-capped requests, tokens); `store/` keeps what was
//! pulled under `<root>/images` (content, records, unpacked layers) and states the store's
//! concurrency rules, which every verb follows; `fetch.rs` gets content from a registry or a
//! local file into the store for pulls and imports alike; `idle.rs` gives memory back when
//! pulls go quiet. Dependencies run one way: verbs -> `registry/`, `store/` -> `digest.rs`
//! (and `store/` reads manifest types from `registry/`, never the reverse).
//!
//! Ownership: `Images` owns `<root>/images`. Container writable layers live in
//! `<root>/containers`, which only `fsinfo.rs` reads here.

mod digest;
mod fetch;
mod fsinfo;
#[doc(hidden)]
pub mod fuzz;
mod idle;
mod import;
mod pinned;
mod pull;
mod registry;
mod remove;
mod rootfs;
mod status;
mod store;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

pub use digest::Digest;
pub use fsinfo::FsUsage;
pub use import::ImportError;
pub use registry::Credentials;
pub use registry::manifest::{ImageConfig, Platform, RuntimeConfig};
pub use registry::reference::{self, ImageRef, ReferenceError};
pub use rootfs::ImageUse;
pub use status::ImageView;
pub use store::content::StorePaths;
pub use store::records::{ImageRecord, LayerRef};
pub use store::space::{NoSpace, Reserve};
pub use store::unpack::UnpackError;

use crate::config::RegistryConfig;
use crate::store::StoreError;
use store::content::Generation;
use store::locking::{KeyedLocks, Pins, State};
use store::records::Table;

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
    /// A download slower than `image.pull_min_kib_per_sec` over a whole window.
    #[error(
        "{what}: {got} bytes in the last {secs}s, under image.pull_min_kib_per_sec = {min_kib}; \
         aborted to free its download slot"
    )]
    TooSlow {
        what: String,
        got: u64,
        secs: u64,
        min_kib: u64,
    },
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
    /// A layer download averaging less than this (bytes/s) over a `progress_timeout` window
    /// fails; 0: no minimum.
    pub min_download_rate: u64,
    pub platform: Platform,
    /// The share of the image filesystem pulls leave free.
    pub reserve: Reserve,
    /// References and globs of the images kubelet's garbage collection must leave alone.
    pub pinned_images: Vec<String>,
}

impl ImageSettings {
    pub fn from_config(config: &crate::config::Config) -> ImageSettings {
        ImageSettings {
            root: config.root.clone(),
            registry: config.registry.clone(),
            max_concurrent_downloads: config.image.max_concurrent_downloads,
            progress_timeout: Duration::from_secs(config.image.pull_progress_timeout_secs),
            min_download_rate: config.image.pull_min_kib_per_sec.saturating_mul(1024),
            platform: Platform::current(),
            reserve: Reserve::new(config.image.min_free_percent),
            pinned_images: config.image.pinned_images.clone(),
        }
    }
}

/// The image service. Cheap to share behind an `Arc`; every method is safe to call concurrently.
pub struct Images {
    paths: StorePaths,
    containers_dir: PathBuf,
    settings: ImageSettings,
    pinned: pinned::PinnedImages,
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
    layer_usage: Mutex<HashMap<Digest, store::unpack::LayerMeta>>,
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

/// Deletes the file at `path`; one already gone is fine.
fn remove_file(path: PathBuf) -> Result<(), ImageError> {
    match crate::durable::remove_file(&path) {
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
            pinned: pinned::PinnedImages::new(&settings.pinned_images),
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
        let unreadable = images.reload(true)?;
        images.load_holds(recover)?;
        for (path, err) in unreadable {
            images.unreadable(&path, "image", &err, recover);
        }
        if recover {
            images.recover()?;
        }
        Ok(images)
    }

    pub fn paths(&self) -> &StorePaths {
        &self.paths
    }

    /// Uses `registry` (mirrors, TLS settings, node credentials) for pulls from now on.
    pub fn set_registry(&self, registry: RegistryConfig) {
        self.registries.set_config(registry);
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
            min_download_rate: 0,
            platform: Platform::current(),
            reserve: Reserve::new(0),
            pinned_images: Vec::new(),
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
        let partials =
            store::content::remove_partials(&self.paths).map_err(|source| ImageError::Io {
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
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}
