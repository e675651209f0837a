//! The on-disk layout of the image store and the content store inside it.
//!
//! ```text
//! <root>/images/
//!   lock                 flock: held exclusively by whoever changes records or deletes content
//!   generation           rewritten (new inode) after every change of records, so readers in
//!                        other processes notice with one stat
//!   blobs/<alg>/<hex>    verified blobs, named by digest
//!   ingest/<random>      downloads in progress; read only by the extraction following one
//!                        (which ends only once it verifies), removed at start
//!   layers/<chain hex>/  one unpacked layer: fs/ (an overlayfs lowerdir) and layer.json
//!   layers/.tmp-*        unpacks in progress; removed at start
//!   records/<id hex>.json image records (`crate::store` envelopes)
//! ```
//!
//! Invariant: a file exists under `blobs/` only if its content matched its name when it was
//! renamed there (after an fsync), and a directory exists under `layers/` only if its tar
//! matched its diff id (and was synced to disk). Everything partial lives under a name no
//! reader looks up.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::fcntl::{Flock, FlockArg};

use super::follow::{Following, Progress};
use crate::image::digest::{Algorithm, Digest, Hasher};

#[derive(Debug, Clone)]
pub struct StorePaths {
    root: PathBuf,
}

impl StorePaths {
    /// The image store inside crust's root directory.
    pub fn new(crust_root: &Path) -> StorePaths {
        StorePaths {
            root: crust_root.join("images"),
        }
    }
    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn blobs_dir(&self) -> PathBuf {
        self.root.join("blobs")
    }
    pub fn blob(&self, d: &Digest) -> PathBuf {
        self.blobs_dir().join(d.algorithm().name()).join(d.hex())
    }
    pub fn ingest_dir(&self) -> PathBuf {
        self.root.join("ingest")
    }
    pub fn layers_dir(&self) -> PathBuf {
        self.root.join("layers")
    }
    pub fn layer_dir(&self, chain_id: &Digest) -> PathBuf {
        self.layers_dir().join(chain_id.hex())
    }
    /// The chain id a directory under `layers/` is named after: the hex alone, its algorithm
    /// told by its length (64 for sha256, 128 for sha512). None for anything else.
    pub fn layer_chain(name: &std::ffi::OsStr) -> Option<Digest> {
        let hex = name.to_str()?;
        let alg = match hex.len() {
            64 => "sha256",
            128 => "sha512",
            _ => return None,
        };
        format!("{alg}:{hex}").parse().ok()
    }
    /// The directory given to overlayfs as a lowerdir.
    pub fn layer_fs(&self, chain_id: &Digest) -> PathBuf {
        self.layer_dir(chain_id).join("fs")
    }
    pub fn records_dir(&self) -> PathBuf {
        self.root.join("records")
    }
    pub fn record(&self, id: &Digest) -> PathBuf {
        self.records_dir().join(format!("{}.json", id.hex()))
    }
    /// One file per hold on an image (see `rootfs.rs`), named by the digest of the holder.
    pub fn holds_dir(&self) -> PathBuf {
        self.root.join("holds")
    }
    pub fn hold(&self, holder: &str) -> PathBuf {
        self.holds_dir()
            .join(format!("{}.json", Digest::of(holder.as_bytes()).hex()))
    }
    fn lock_file(&self) -> PathBuf {
        self.root.join("lock")
    }
    fn generation_file(&self) -> PathBuf {
        self.root.join("generation")
    }

    pub fn create_dirs(&self) -> io::Result<()> {
        for d in [
            self.blobs_dir().join("sha256"),
            self.blobs_dir().join("sha512"),
            self.ingest_dir(),
            self.layers_dir(),
            self.records_dir(),
            self.holds_dir(),
        ] {
            crate::durable::create_dir_all(d)?;
        }
        Ok(())
    }

    pub fn has_blob(&self, d: &Digest) -> bool {
        self.blob(d).is_file()
    }

    /// Takes the store lock: exclusive to change records or delete content, shared to read
    /// records consistently. Blocks; call from a blocking thread.
    pub fn lock(&self, exclusive: bool) -> io::Result<Flock<File>> {
        let arg = if exclusive {
            FlockArg::LockExclusive
        } else {
            FlockArg::LockShared
        };
        self.flock(arg)?
            .ok_or_else(|| io::Error::from(io::ErrorKind::WouldBlock))
    }

    /// Like `lock` but gives up at once when another process holds it.
    pub fn try_lock(&self, exclusive: bool) -> io::Result<Option<Flock<File>>> {
        let arg = if exclusive {
            FlockArg::LockExclusiveNonblock
        } else {
            FlockArg::LockSharedNonblock
        };
        self.flock(arg)
    }

    fn flock(&self, arg: FlockArg) -> io::Result<Option<Flock<File>>> {
        let file = crate::durable::open_lock(self.lock_file())?;
        match Flock::lock(file, arg) {
            Ok(l) => Ok(Some(l)),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
            Err((_, e)) => Err(e.into()),
        }
    }

    /// Marks the records as changed for other processes. Call with the lock held.
    pub fn bump_generation(&self) -> Result<Generation, crate::store::StoreError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        crate::store::write_atomic(&self.generation_file(), nanos.to_string().as_bytes())?;
        Ok(self.generation())
    }

    /// The current generation: the identity of the generation file (it is replaced, never
    /// rewritten in place, so a new inode or mtime means a change).
    pub fn generation(&self) -> Generation {
        use std::os::unix::fs::MetadataExt;
        match fs::metadata(self.generation_file()) {
            Ok(m) => Generation(m.ino(), m.mtime(), m.mtime_nsec()),
            Err(_) => Generation(0, 0, 0),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Generation(u64, i64, i64);

#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("content digest is {actual}, expected {expected}")]
    Digest { expected: Digest, actual: Digest },
    #[error("content is {actual} bytes, expected {expected}")]
    Size { expected: u64, actual: u64 },
    #[error("storing blob: {0}")]
    Io(#[from] io::Error),
}

/// A blob being written. It lives under `ingest/` with a random name until `commit` verifies it
/// and renames it into `blobs/`; dropped uncommitted, it is deleted.
pub struct Ingest {
    path: PathBuf,
    file: Option<io::BufWriter<File>>,
    hasher: Hasher,
    size: u64,
    /// Set once a reader follows the download (`follow`).
    progress: Option<Arc<Progress>>,
}

impl Ingest {
    pub fn create(paths: &StorePaths, algorithm: Algorithm) -> io::Result<Ingest> {
        let mut rnd = [0u8; 12];
        getrandom::fill(&mut rnd).map_err(|e| io::Error::other(e.to_string()))?;
        let path = paths.ingest_dir().join(hex::encode(rnd));
        let file = crate::durable::create_new(&path)?;
        Ok(Ingest {
            path,
            // Registry chunks are mostly 8-64 KiB; larger ones bypass the buffer. Kept under
            // glibc's mmap threshold (see fetch.rs COPY_BUF).
            file: Some(io::BufWriter::with_capacity(64 << 10, file)),
            hasher: Hasher::new(algorithm),
            size: 0,
            progress: None,
        })
    }

    /// A reader of the blob as it is written, which ends where the blob verifies
    /// (`follow.rs`).
    pub fn follow(&mut self) -> io::Result<Following> {
        let progress = Arc::new(Progress::default());
        if let Some(f) = &mut self.file {
            f.flush()?;
        }
        progress.advance(self.size);
        self.progress = Some(progress.clone());
        Following::open(&self.path, progress)
    }

    pub fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.hasher.update(bytes);
        self.size += bytes.len() as u64;
        let Some(f) = &mut self.file else {
            return Err(io::Error::other("ingest already finished"));
        };
        f.write_all(bytes)?;
        if let Some(progress) = &self.progress {
            f.flush()?;
            progress.advance(self.size);
        }
        Ok(())
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Verifies size and digest, makes the data durable and moves it to `dest`. Blocking.
    pub fn commit(
        self,
        expected: &Digest,
        size: Option<u64>,
        dest: &Path,
    ) -> Result<(), CommitError> {
        Ok(self.verify(expected, size)?.persist(dest)?)
    }

    /// Verifies size and digest and hands the data to the file (not yet to the disk): what
    /// it returns can be read while it is made durable and moved into place. Blocking.
    pub fn verify(mut self, expected: &Digest, size: Option<u64>) -> Result<Verified, CommitError> {
        let file = self
            .file
            .take()
            .expect("ingest file present until verified");
        if let Some(expected) = size {
            if expected != self.size {
                return Err(CommitError::Size {
                    expected,
                    actual: self.size,
                });
            }
        }
        let hasher = std::mem::replace(&mut self.hasher, Hasher::new(expected.algorithm()));
        let actual = hasher.finish();
        if &actual != expected {
            return Err(CommitError::Digest {
                expected: expected.clone(),
                actual,
            });
        }
        let file = file.into_inner().map_err(|e| e.into_error())?;
        if let Some(progress) = self.progress.take() {
            progress.advance(self.size);
            progress.end(Ok(()));
        }
        Ok(Verified {
            path: std::mem::take(&mut self.path),
            file: Some(file),
        })
    }
}

/// A blob whose digest holds, still under `ingest/` and maybe not on disk; dropped before
/// [`Verified::persist`], it is deleted.
pub struct Verified {
    path: PathBuf,
    file: Option<File>,
}

impl Verified {
    /// Makes the data durable and moves it to `dest`. Blocking.
    pub fn persist(mut self, dest: &Path) -> io::Result<()> {
        if let Some(file) = self.file.take() {
            file.sync_all()?;
        }
        crate::durable::rename(&self.path, dest)?;
        self.path = PathBuf::new();
        if let Some(dir) = dest.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
}

impl Drop for Verified {
    fn drop(&mut self) {
        if !self.path.as_os_str().is_empty() {
            let _ = crate::durable::remove_file(&self.path);
        }
    }
}

impl Drop for Ingest {
    fn drop(&mut self) {
        if let Some(progress) = self.progress.take() {
            progress.end(Err(
                "the blob's download did not complete or did not verify".into(),
            ));
        }
        // Verified ingests handed their file on; this only removes abandoned ones.
        if !self.path.as_os_str().is_empty() {
            let _ = crate::durable::remove_file(&self.path);
        }
    }
}

/// Removes what interrupted writers left behind: ingest files, half-unpacked layers, and the
/// temporary files of record and hold writes.
/// Call with the store lock held exclusively.
pub fn remove_partials(paths: &StorePaths) -> io::Result<usize> {
    let mut removed = 0;
    for e in fs::read_dir(paths.ingest_dir())? {
        let e = e?;
        if e.file_type()?.is_dir() {
            remove_tree(&e.path())?; // an interrupted import's scratch directory
        } else {
            crate::durable::remove_file(e.path())?;
        }
        removed += 1;
    }
    for e in fs::read_dir(paths.layers_dir())? {
        let e = e?;
        if e.file_name().to_string_lossy().starts_with(".tmp-") {
            remove_tree(&e.path())?;
            removed += 1;
        }
    }
    // Records, holds and the generation file are written atomically: a writer killed
    // mid-write leaves its temporary file beside them (found by tests/crash_points.rs).
    for dir in [
        paths.records_dir(),
        paths.holds_dir(),
        paths.root().to_owned(),
    ] {
        removed += crate::store::remove_stale_temps(&dir);
    }
    Ok(removed)
}

/// Deletes a directory tree without following symlinks (std's remove_dir_all does not).
pub fn remove_tree(path: &Path) -> io::Result<()> {
    match crate::durable::remove_dir_all(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ingest_commits_only_matching_content() {
        let dir = tempfile::tempdir().unwrap();
        let paths = StorePaths::new(dir.path());
        paths.create_dirs().unwrap();
        let good = Digest::of(b"hello");
        let mut i = Ingest::create(&paths, Algorithm::Sha256).unwrap();
        i.write(b"hel").unwrap();
        i.write(b"lo").unwrap();
        i.commit(&good, Some(5), &paths.blob(&good)).unwrap();
        assert_eq!(fs::read(paths.blob(&good)).unwrap(), b"hello");

        let mut i = Ingest::create(&paths, Algorithm::Sha256).unwrap();
        i.write(b"evil").unwrap();
        let other = Digest::of(b"other");
        let err = i.commit(&other, None, &paths.blob(&other)).unwrap_err();
        assert!(matches!(err, CommitError::Digest { .. }), "{err}");
        assert!(!paths.has_blob(&other));

        let mut i = Ingest::create(&paths, Algorithm::Sha256).unwrap();
        i.write(b"partial").unwrap();
        drop(i);
        assert_eq!(
            fs::read_dir(paths.ingest_dir()).unwrap().count(),
            0,
            "abandoned ingest removed"
        );
    }

    #[test]
    fn generation_changes_when_bumped() {
        let dir = tempfile::tempdir().unwrap();
        let paths = StorePaths::new(dir.path());
        paths.create_dirs().unwrap();
        let g0 = paths.generation();
        let g1 = paths.bump_generation().unwrap();
        assert_ne!(g0, g1);
        let g2 = paths.bump_generation().unwrap();
        assert_ne!(g1, g2);
        assert_eq!(g2, paths.generation());
    }
}
