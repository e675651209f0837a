//! The image store under `<root>/images`: verified content by digest (`content.rs`, which also
//! lays out the directories), image records (`records.rs`), layers unpacked as overlayfs
//! lowerdirs (`unpack/`: its `mod.rs` drives `extract.rs`, which reads the lower layers
//! through `lower.rs`, or leaves what needs them to `deferred.rs` when they are still being
//! extracted, GNU sparse files through `sparse.rs`, and the tar's block structure through
//! `tar_bounds.rs`), a download read as it arrives (`follow.rs`), and the free-space reserve
//! (`space.rs`).
//!
//! # Concurrency rules
//!
//! Everything that coordinates writers of the store is listed here; `locking.rs` holds the
//! in-process parts.
//!
//! 1. **Content is immutable and written once.** A download or an unpack writes under a
//!    random temporary name (`ingest/<random>`, `layers/.tmp-*`) and renames into its
//!    content-addressed place only when verified (blob digest, layer diff id) and synced. Two
//!    writers of the same content cannot collide; the rename is idempotent, and startup
//!    removes whatever temporary names a crash left. Neither needs a lock for correctness.
//! 2. **One download per blob and one unpack per layer** in this process, so concurrent
//!    pulls do the work once: the per-digest async mutexes (`KeyedLocks`, keyed by blob digest
//!    and by chain id); a waiter finds the finished result in the store. Downloads and unpacks
//!    are further bounded by semaphores (configured downloads, CPU count for unpacks), and
//!    pull tasks by `MAX_PULL_TASKS`.
//! 3. **Records and deletions are serialized across processes** by the exclusive flock on
//!    `images/lock` (`crust image import` takes it for its whole run), and inside the daemon
//!    by `commit_lock`, always taken before the flock. Whoever changed records rewrites
//!    `images/generation` (a new inode) before letting go.
//! 4. **Readers never take the flock for long.** A read stats `images/generation`; when it
//!    changed, the records are reloaded, but only if the flock is free at that moment (a
//!    writer bumps the generation again when done, so the next read reloads).
//! 5. **Nothing in use is deleted.** Garbage collection runs under the flock and the `pins`
//!    mutex together; it keeps what any record lists, what a pull in progress has pinned
//!    (`PinGuard`, taken before the pull looks at the store, dropped when it ends) and what a
//!    container holds (holds, persisted under `images/holds` before `acquire` returns and
//!    loaded before the start-up collection). A pull that pins content and then finds it
//!    present can therefore rely on it staying.
//! 6. **A record is the commit point.** It is saved (atomically, by `crate::store`) only after
//!    every blob and layer it names exists; a tag moved to another image is taken from the
//!    old record first, so a crash never leaves one name on two images.
//! 7. **Lock order:** `commit_lock` -> flock -> `pins` -> `state`. Async per-digest locks are
//!    never held while taking `commit_lock`.

pub mod content;
pub mod follow;
pub mod locking;
pub mod records;
pub mod space;
pub mod unpack;
