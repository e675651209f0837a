//! Getting an image's content into the store, from a registry or from local files (import):
//! blobs verified into `blobs/`, layers unpacked into `layers/`, then the record committed.
//! Shared by `pull.rs` and `import.rs`.
//!
//! Concurrency: one download per blob and one unpack per layer at a time across all pulls
//! (`KeyedLocks`; a waiter finds the finished result), downloads bounded by the configured
//! limit, unpacks by the CPU count. Layers of one image download in parallel and are
//! extracted side by side, each from its download as the bytes arrive (`store/follow.rs`: the
//! extraction ends only once the blob verifies) and without the layers below it;
//! what a layer needs from those (a directory it leaves out takes their metadata, a whiteout
//! is written only for what they show: `store/unpack/deferred.rs`) is settled bottom first once they
//! are complete. A layer's syncfs runs while the next one is settled; all are renamed into
//! place at the end (`unpack_all`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::try_join_all;

use super::digest::{Digest, chain_ids};
use super::registry::Session;
use super::registry::manifest::{self, Descriptor, ImageConfig, Manifest};
use super::store::content::{CommitError, Ingest, Verified};
use super::store::records::{ImageRecord, LayerRef};
use super::{Images, PullError, TaskFailed, local, off_thread};

/// Where blobs come from.
pub enum Source<'a> {
    Registry(&'a Session),
    /// Files on disk: an explicit map (docker archives), else `<dir>/blobs/<alg>/<hex>` (OCI
    /// layouts).
    Local {
        dir: PathBuf,
        files: HashMap<Digest, PathBuf>,
    },
}

/// The layers of `m` with their diff ids (from the config) and chain ids.
fn layer_refs(m: &Manifest, config: &ImageConfig) -> Result<Vec<LayerRef>, PullError> {
    let diff_ids = &config.rootfs.diff_ids;
    if diff_ids.len() != m.layers.len() {
        return Err(PullError::Invalid(format!(
            "the config lists {} diff ids for {} layers",
            diff_ids.len(),
            m.layers.len()
        )));
    }
    Ok(m.layers
        .iter()
        .zip(diff_ids)
        .zip(chain_ids(diff_ids))
        .map(|((l, diff), chain)| LayerRef {
            blob: l.digest.clone(),
            media_type: l.media_type.clone(),
            size: l.size.max(0) as u64,
            diff_id: diff.clone(),
            chain_id: chain,
        })
        .collect())
}

/// Where a local source keeps blob `d`.
fn local_path(dir: &Path, files: &HashMap<Digest, PathBuf>, d: &Digest) -> PathBuf {
    files
        .get(d)
        .cloned()
        .unwrap_or_else(|| dir.join("blobs").join(d.algorithm().name()).join(d.hex()))
}

/// An image about to be installed: its manifest (and the index it was chosen from, if any)
/// and the names to record.
pub struct Candidate {
    pub manifest: Manifest,
    pub manifest_bytes: bytes::Bytes,
    pub manifest_digest: Digest,
    pub index: Option<(bytes::Bytes, Digest)>,
    pub repo_tags: Vec<String>,
    pub repo_digests: Vec<String>,
}

impl Images {
    /// Fetches, verifies and unpacks everything `c` needs, then commits its record.
    pub(super) async fn install(
        &self,
        src: &Source<'_>,
        c: Candidate,
    ) -> Result<ImageRecord, PullError> {
        let m = &c.manifest;
        // An ocicrypt layer (`...tar+gzip+encrypted`) names a tar type too: refused before any
        // byte is fetched, instead of failing its unpack on ciphertext.
        if let Some((n, enc)) = m
            .layers
            .iter()
            .enumerate()
            .find(|(_, l)| manifest::is_encrypted(&l.media_type))
        {
            return Err(PullError::Unsupported(format!(
                "layer {} ({}) is encrypted (media type {:?}): crust does not decrypt layers; \
                 pull a decrypted copy of the image",
                n + 1,
                enc.digest,
                enc.media_type
            )));
        }
        if let Some(bad) = m
            .layers
            .iter()
            .find(|l| !manifest::is_layer_type(&l.media_type))
        {
            return Err(PullError::Unsupported(format!(
                "layer media type {:?} is not supported",
                bad.media_type
            )));
        }
        // Pinned from the start, so a RemoveImage of the same image meanwhile (which collects
        // what no record uses) cannot delete what this install is about to record.
        let mut meta_keys = vec![c.manifest_digest.clone(), m.config.digest.clone()];
        meta_keys.extend(c.index.as_ref().map(|(_, d)| d.clone()));
        let _pin_meta = self.pin(meta_keys);
        let config = self.config(src, &m.config).await?;
        let layers = layer_refs(m, &config)?;
        let keys = layers
            .iter()
            .flat_map(|l| [l.blob.clone(), l.chain_id.clone()])
            .collect();
        let _pins = self.pin(keys);
        self.unpack_all(src, m, &layers).await?;

        let mut blobs = vec![c.manifest_digest.clone(), m.config.digest.clone()];
        self.put_small_blob(&c.manifest_digest, &c.manifest_bytes)
            .await?;
        if let Some((bytes, digest)) = &c.index {
            self.put_small_blob(digest, bytes).await?;
            blobs.insert(0, digest.clone());
        }
        blobs.extend(layers.iter().map(|l| l.blob.clone()));
        // What containerd reports too: every blob the image was pulled through, the index
        // included.
        let size = c.index.as_ref().map_or(0, |(bytes, _)| bytes.len() as u64)
            + c.manifest_bytes.len() as u64
            + m.config.size.max(0) as u64
            + layers.iter().map(|l| l.size).sum::<u64>();
        let record = ImageRecord {
            id: m.config.digest.clone(),
            repo_tags: c.repo_tags,
            repo_digests: c.repo_digests,
            size,
            manifest: c.manifest_digest,
            blobs,
            layers,
            config,
            stored_at: super::now_secs(),
        };
        self.commit(record).await
    }

    /// Stores and reads the image config.
    async fn config(&self, src: &Source<'_>, desc: &Descriptor) -> Result<ImageConfig, PullError> {
        self.ensure_blob(src, desc).await?;
        let path = self.paths.blob(&desc.digest);
        let bytes = off_thread("reading the image config", move || {
            std::fs::read(&path).map_err(local("reading", &path))
        })
        .await?;
        manifest::parse_config(&bytes).map_err(|e| PullError::Invalid(e.to_string()))
    }

    /// Saves `record` (merging names, moving tags) and publishes it. Blocking parts run on the
    /// blocking pool.
    async fn commit(&self, record: ImageRecord) -> Result<ImageRecord, PullError> {
        let id = record.id.clone();
        let result = tokio::task::block_in_place(|| {
            self.with_store_lock(|table| {
                let mut table = table.clone();
                let changed = table.add(record);
                // Images that lost a name are saved first, the new record last: a crash in
                // between leaves the name on no image (the pull did not finish), never on two.
                crate::failpoint!("image.pull.before_record");
                for c in changed.iter().filter(|c| **c != id).chain([&id]) {
                    if let Some(r) = table.get(c) {
                        crate::store::save(&self.paths.record(c), r)?;
                    }
                }
                crate::failpoint!("image.pull.after_record");
                let saved = table.get(&id).cloned();
                self.publish(table)?;
                Ok(saved)
            })
        });
        result
            .map_err(|e| match e {
                super::ImageError::Store(s) => PullError::Store(s),
                super::ImageError::Io { what, path, source } => {
                    PullError::Local { what, path, source }
                }
                other => PullError::Internal(format!("saving the image record: {other}")),
            })?
            .ok_or_else(|| PullError::Internal("saving the image record: it vanished".into()))
    }

    /// Stores a small blob (a manifest) whose digest was already verified.
    async fn put_small_blob(&self, digest: &Digest, bytes: &[u8]) -> Result<(), PullError> {
        if self.paths.has_blob(digest) {
            return Ok(());
        }
        let mut ingest = Ingest::create(&self.paths, digest.algorithm())
            .map_err(local("creating", &self.paths.ingest_dir()))?;
        ingest
            .write(bytes)
            .map_err(local("writing", &self.paths.ingest_dir()))?;
        self.commit_ingest(ingest, digest, Some(bytes.len() as u64), "manifest")
            .await
    }

    /// Makes sure the blob `desc` is in the store, downloading or copying it if not.
    pub(super) async fn ensure_blob(
        &self,
        src: &Source<'_>,
        desc: &Descriptor,
    ) -> Result<(), PullError> {
        let _one = self.blob_locks.lock(&desc.digest).await;
        if self.paths.has_blob(&desc.digest) {
            return Ok(());
        }
        let ingest = self.new_ingest(desc)?;
        let verified = self.fetch_into(src, desc, ingest).await?;
        persist(verified, self.paths.blob(&desc.digest)).await?;
        crate::failpoint!("image.pull.after_blob");
        Ok(())
    }

    /// A new ingest for the blob `desc`, if the store has room for it.
    fn new_ingest(&self, desc: &Descriptor) -> Result<Ingest, PullError> {
        let size = u64::try_from(desc.size).ok();
        self.settings
            .reserve
            .check(&self.paths.ingest_dir(), size.unwrap_or(0))?;
        Ingest::create(&self.paths, desc.digest.algorithm())
            .map_err(local("creating", &self.paths.ingest_dir()))
    }

    /// Downloads or copies the blob `desc` into `ingest` and checks its size and digest.
    async fn fetch_into(
        &self,
        src: &Source<'_>,
        desc: &Descriptor,
        ingest: Ingest,
    ) -> Result<Verified, PullError> {
        let size = u64::try_from(desc.size).ok();
        let what = format!("blob {}", desc.digest);
        let started = std::time::Instant::now();
        let ingest = match src {
            Source::Registry(session) => {
                let _permit = self
                    .downloads
                    .acquire()
                    .await
                    .map_err(|_| PullError::ShuttingDown)?;
                let min_rate = self.settings.min_download_rate;
                download(session, desc, ingest, size, min_rate).await?
            }
            Source::Local { dir, files } => {
                let path = local_path(dir, files, &desc.digest);
                off_thread("copying a blob", move || copy_file(&path, ingest)).await?
            }
        };
        let (d, dest) = (desc.digest.clone(), self.paths.blob(&desc.digest));
        let verified = off_thread("verifying a blob", move || {
            ingest
                .verify(&d, size)
                .map_err(|e| commit_error(e, what, dest))
        })
        .await?;
        tracing::debug!(
            blob = %desc.digest.short(),
            size = desc.size,
            fetch_ms = started.elapsed().as_millis() as u64,
            "blob fetched"
        );
        Ok(verified)
    }

    async fn commit_ingest(
        &self,
        ingest: Ingest,
        digest: &Digest,
        size: Option<u64>,
        what: &str,
    ) -> Result<(), PullError> {
        let dest = self.paths.blob(digest);
        let (d, what) = (digest.clone(), what.to_owned());
        off_thread("storing a blob", move || {
            ingest
                .commit(&d, size, &dest)
                .map_err(|e| commit_error(e, what, dest))
        })
        .await
    }

    /// Unpacks the layers of `m` that are not unpacked yet. Each is extracted on its own as
    /// soon as its blob is in (up to `unpacks` at once, across pulls), without its lower
    /// layers; then, bottom first, each is settled against the layers below it
    /// (`store/unpack/deferred.rs`) and its data sent to disk while the next is settled; all are
    /// sealed (renamed into place) bottom first at the end, so no tree a layer above reads
    /// moves under it.
    async fn unpack_all(
        &self,
        src: &Source<'_>,
        m: &Manifest,
        layers: &[LayerRef],
    ) -> Result<(), PullError> {
        // Every pull takes the locks of its chain bottom first and a chain id names all the
        // layers below it, so two pulls sharing layers take their locks in one order.
        let mut extracting = futures_util::stream::FuturesOrdered::new();
        let mut present = Vec::new();
        for (desc, layer) in m.layers.iter().zip(layers) {
            let lock = self.layer_locks.lock(&layer.chain_id).await;
            let dir = self.paths.layer_dir(&layer.chain_id);
            if super::store::unpack::read_meta(&dir).is_none() {
                extracting.push_back(self.extract_layer(src, desc, layer, lock));
            } else {
                present.push(self.ensure_blob(src, desc)); // the record lists every blob
            }
        }
        let settle_all = async {
            let mut pending: Vec<Pending> = Vec::new();
            while let Some(next) = extracting.next().await {
                let settled = match next {
                    Ok(x) => self.settle(x, layers, &pending).await,
                    Err(e) => Err(e),
                };
                match settled {
                    Ok(p) => pending.push(p),
                    Err(e) => return (pending, Err(e)),
                }
            }
            (pending, Ok(()))
        };
        let (stored, (pending, mut result)) =
            futures_util::future::join(try_join_all(present), settle_all).await;
        result = result.and(stored.map(drop));
        // Those above a failure are removed unsettled; those below it are sealed, so a retry
        // finds them done.
        drop(extracting);
        for p in pending {
            let sealed = self.seal(p).await;
            result = result.and(sealed);
        }
        if result.is_err() {
            // A blob that verified is kept, moved into place by a task of its own that holds
            // the blob's lock: a layer that failed to extract or settle let go of its task.
            // Taking each lock once waits for them, so the pull answers with no file of its
            // left in `ingest/`.
            tracing::debug!("a layer failed: waiting for the blobs that verified to be stored");
            for desc in &m.layers {
                drop(self.blob_locks.lock(&desc.digest).await);
            }
        }
        result
    }

    /// Extracts the layer without its lower layers, from its stored blob or from its download
    /// as it arrives (the extraction ends only once the blob verifies; making the blob
    /// durable and moving it into place then runs on, holding the blob's lock). What it
    /// returns holds the layer's lock until sealed.
    async fn extract_layer(
        &self,
        src: &Source<'_>,
        desc: &Descriptor,
        layer: &LayerRef,
        lock: tokio::sync::OwnedMutexGuard<()>,
    ) -> Result<Extracting, PullError> {
        let blob_lock = self.blob_locks.lock(&desc.digest).await;
        let dest = self.paths.blob(&desc.digest);
        let (extracted, persisting) = if self.paths.has_blob(&desc.digest) {
            drop(blob_lock);
            let file = std::fs::File::open(&dest).map_err(local("opening", &dest))?;
            (self.extract_from(file, layer).await?, None)
        } else {
            let mut ingest = self.new_ingest(desc)?;
            let following = ingest
                .follow()
                .map_err(local("opening", &self.paths.ingest_dir()))?;
            // The blob's fsync starts as soon as its digest holds, beside the extraction.
            let fetching = async move {
                let verified = self.fetch_into(src, desc, ingest).await?;
                Ok::<Persisting, PullError>(tokio::spawn(async move {
                    let _lock = blob_lock;
                    // A test holds the blob here, verified and still in `ingest/`.
                    let _held = crate::failpoint_pause!("image.pull.blob_verified");
                    persist(verified, dest).await?;
                    crate::failpoint!("image.pull.after_blob");
                    Ok(())
                }))
            };
            let (fetched, extracted) =
                futures_util::future::join(fetching, self.extract_from(following, layer)).await;
            // A failed download is the cause of whatever the extraction made of it.
            let persisting = fetched?;
            (extracted?, Some(persisting))
        };
        Ok(Extracting {
            lock,
            chain_id: layer.chain_id.clone(),
            blob: layer.blob.clone(),
            persisting,
            extracted,
        })
    }

    /// Extracts `blob` as `layer`, once one of the unpack slots is free.
    async fn extract_from(
        &self,
        blob: impl std::io::Read + Send + 'static,
        layer: &LayerRef,
    ) -> Result<super::store::unpack::Extracted, PullError> {
        let _permit = self
            .unpacks
            .acquire()
            .await
            .map_err(|_| PullError::ShuttingDown)?;
        let (paths, l) = (self.paths.clone(), layer.clone());
        let reserve = self.settings.reserve;
        let blob_digest = layer.blob.clone();
        off_thread("unpacking a layer", move || {
            super::store::unpack::extract(&paths, blob, &l.diff_id, &l.chain_id, reserve).map_err(
                |error| PullError::Layer {
                    blob: blob_digest,
                    error,
                },
            )
        })
        .await
    }

    /// Completes an extracted layer against the layers below it (`pending` holds those not yet
    /// sealed) and starts its sync.
    async fn settle(
        &self,
        x: Extracting,
        layers: &[LayerRef],
        pending: &[Pending],
    ) -> Result<Pending, PullError> {
        let at = layers
            .iter()
            .position(|l| l.chain_id == x.chain_id)
            .unwrap_or(layers.len());
        let lowers: Vec<PathBuf> = layers[..at]
            .iter()
            .rev()
            .map(
                |b| match pending.iter().find(|p| p.chain_id == b.chain_id) {
                    Some(p) => p.extracted.fs(),
                    None => self.paths.layer_fs(&b.chain_id),
                },
            )
            .collect();
        let Extracting {
            lock,
            chain_id,
            blob,
            persisting,
            mut extracted,
        } = x;
        let b = blob.clone();
        let extracted = off_thread("settling a layer", move || {
            extracted
                .settle(&lowers)
                .map(|()| extracted)
                .map_err(|error| PullError::Layer { blob: b, error })
        })
        .await?;
        let sync = tokio::task::spawn_blocking(extracted.syncer());
        Ok(Pending {
            _lock: lock,
            chain_id,
            blob,
            persisting,
            extracted,
            sync,
        })
    }

    /// Renames an extracted layer into place once its data is on disk.
    async fn seal(&self, p: Pending) -> Result<(), PullError> {
        if let Some(persisting) = p.persisting {
            persisting
                .await
                .map_err(|e| PullError::from(TaskFailed(format!("storing a blob: {e}"))))??;
        }
        let blob = p.blob.clone();
        let layer_error = move |error| PullError::Layer { blob, error };
        let synced = p
            .sync
            .await
            .map_err(|e| PullError::from(TaskFailed(format!("syncing a layer: {e}"))))?;
        let extracted = p.extracted;
        let meta = off_thread("sealing a layer", move || {
            extracted.seal(synced).map_err(layer_error)
        })
        .await?;
        crate::failpoint!("image.pull.after_layer");
        super::lock(&self.layer_usage).insert(p.chain_id, meta);
        Ok(())
    }
}

/// A layer extracted without its lower layers; holds its lock (a concurrent pull of the same
/// layer waits, then finds it done).
struct Extracting {
    lock: tokio::sync::OwnedMutexGuard<()>,
    chain_id: Digest,
    blob: Digest,
    persisting: Option<Persisting>,
    extracted: super::store::unpack::Extracted,
}

/// A verified download being made durable and moved into place.
type Persisting = tokio::task::JoinHandle<Result<(), PullError>>;

/// A layer settled and syncing, not yet in place; holds its lock.
struct Pending {
    _lock: tokio::sync::OwnedMutexGuard<()>,
    chain_id: Digest,
    blob: Digest,
    persisting: Option<Persisting>,
    extracted: super::store::unpack::Extracted,
    sync: tokio::task::JoinHandle<super::store::unpack::Synced>,
}

/// Makes a verified blob durable and moves it to `dest`.
async fn persist(verified: Verified, dest: PathBuf) -> Result<(), PullError> {
    let started = std::time::Instant::now();
    let path = dest.clone();
    off_thread("storing a blob", move || {
        verified
            .persist(&dest)
            .map_err(|e| local("storing", &dest)(e))
    })
    .await?;
    tracing::debug!(blob = %path.display(), persist_ms = started.elapsed().as_millis() as u64, "blob stored");
    Ok(())
}

/// What a failed verification or commit of `what` (going to `dest`) is to the client.
fn commit_error(e: CommitError, what: String, dest: PathBuf) -> PullError {
    match e {
        CommitError::Digest { expected, actual } => PullError::DigestMismatch {
            what,
            expected: expected.to_string(),
            actual: actual.to_string(),
        },
        CommitError::Size { expected, actual } => PullError::SizeMismatch {
            what,
            expected,
            actual,
        },
        CommitError::Io(source) => PullError::Local {
            what: "storing",
            path: dest,
            source,
        },
    }
}

/// Below glibc's default mmap threshold (128 KiB): a larger buffer, freed, raises that
/// threshold and leaves later allocations in per-thread arenas the daemon never gives back.
const COPY_BUF: usize = 64 << 10;

/// Streams a blob from the registry into `ingest`, aborting when no data arrives for the
/// progress timeout or when the registry sends more than the descriptor's size. The bytes are
/// hashed and written on the blocking pool, `COPY_BUF` at a time.
async fn download(
    session: &Session,
    desc: &Descriptor,
    mut ingest: Ingest,
    size: Option<u64>,
    min_rate: u64,
) -> Result<Ingest, PullError> {
    let what = format!("blob {}", desc.digest);
    let mut stream = session.blob(desc).await?;
    let progress = format!("downloading {what} from {}", session.registry);
    let mut pending: Vec<u8> = Vec::with_capacity(COPY_BUF);
    let mut rate = RateFloor::new(min_rate, session.timeout());
    loop {
        let next = session.within(&progress, stream.next()).await?;
        match next {
            None => return Ok(write_off_thread(ingest, pending).await?.0),
            Some(Ok(chunk)) => {
                crate::metrics::image_bytes_downloaded(chunk.len() as u64);
                rate.received(chunk.len() as u64, std::time::Instant::now())
                    .map_err(|(got, secs)| PullError::TooSlow {
                        what: progress.clone(),
                        got,
                        secs,
                        min_kib: min_rate >> 10,
                    })?;
                let got = ingest.size() + (pending.len() + chunk.len()) as u64;
                if let Some(expected) = size.filter(|e| got > *e) {
                    return Err(PullError::SizeMismatch {
                        what,
                        expected,
                        actual: got,
                    });
                }
                if pending.len() + chunk.len() > COPY_BUF {
                    (ingest, pending) = write_off_thread(ingest, pending).await?;
                }
                if chunk.len() >= COPY_BUF {
                    (ingest, _) = write_off_thread(ingest, chunk).await?;
                } else {
                    pending.extend_from_slice(&chunk);
                }
            }
            Some(Err(e)) => return Err(session.stream_error(&e, &progress)),
        }
    }
}

/// The minimum rate of a download, over consecutive windows: a registry that drips a few
/// bytes just often enough to pass the progress timeout would otherwise hold one of the
/// node's shared download slots for as long as it likes.
struct RateFloor {
    /// Bytes per second; 0: no floor.
    min: u64,
    window: Duration,
    since: std::time::Instant,
    got: u64,
}

impl RateFloor {
    fn new(min: u64, window: Duration) -> RateFloor {
        RateFloor {
            min,
            window: window.max(Duration::from_secs(1)),
            since: std::time::Instant::now(),
            got: 0,
        }
    }

    /// Counts `n` bytes received at `now`; when a window has passed, Err with what it got
    /// and how long it lasted (seconds) if that was under the floor, and a new window begins.
    fn received(&mut self, n: u64, now: std::time::Instant) -> Result<(), (u64, u64)> {
        self.got += n;
        let spent = now.saturating_duration_since(self.since);
        if self.min == 0 || spent < self.window {
            return Ok(());
        }
        let floor = (self.min as f64 * spent.as_secs_f64()) as u64;
        if self.got < floor {
            return Err((self.got, spent.as_secs()));
        }
        (self.since, self.got) = (now, 0);
        Ok(())
    }
}

/// Hashes and writes `bytes` into `ingest` on the blocking pool; gives both back, a vector
/// emptied for reuse.
async fn write_off_thread<B: Buffer>(
    mut ingest: Ingest,
    mut bytes: B,
) -> Result<(Ingest, B), PullError> {
    if bytes.as_ref().is_empty() {
        return Ok((ingest, bytes));
    }
    off_thread("writing a download", move || {
        ingest
            .write(bytes.as_ref())
            .map_err(|e| local("writing", ingest.path())(e))?;
        bytes.reset();
        Ok((ingest, bytes))
    })
    .await
}

/// What a download hands to the blocking pool: its reusable buffer or a whole large chunk.
trait Buffer: AsRef<[u8]> + Send + 'static {
    fn reset(&mut self);
}

impl Buffer for Vec<u8> {
    fn reset(&mut self) {
        self.clear();
    }
}

impl Buffer for bytes::Bytes {
    fn reset(&mut self) {}
}

fn copy_file(path: &Path, mut ingest: Ingest) -> Result<Ingest, PullError> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)
        .map_err(|_| PullError::Invalid(format!("blob file {} is missing", path.display())))?;
    let mut buf = vec![0u8; COPY_BUF];
    loop {
        let n = f.read(&mut buf).map_err(local("reading", path))?;
        if n == 0 {
            return Ok(ingest);
        }
        ingest.write(&buf[..n]).map_err(local("writing", path))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_download_under_the_floor_for_a_whole_window_fails_and_one_above_goes_on() {
        let mut r = RateFloor::new(1000, Duration::from_secs(10));
        let t0 = r.since;
        let at = |s: u64| t0 + Duration::from_secs(s);
        // A burst, then nothing: judged only once the window has passed.
        assert_eq!(r.received(9_000, at(1)), Ok(()));
        assert_eq!(r.received(2_000, at(10)), Ok(()));
        // The next window starts at 10 s: a drip of 10 bytes every 9 s is far under.
        assert_eq!(r.received(10, at(19)), Ok(()));
        assert_eq!(r.received(10, at(28)), Err((20, 18)));
        let mut off = RateFloor::new(0, Duration::from_secs(1));
        let later = off.since + Duration::from_secs(3600);
        assert_eq!(off.received(1, later), Ok(()));
    }
}
