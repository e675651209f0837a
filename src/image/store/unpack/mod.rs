//! Unpacking a layer blob into `layers/<chain id>/`: decompress (gzip, zstd or none, told by
//! magic number), hash the tar as it streams (its digest must equal the diff id), extract each
//! entry (`extract.rs`), then rename the finished directory into place. Until that rename the
//! work lives under `layers/.tmp-*`, which nothing reads and startup removes.

pub mod deferred;
pub mod extract;
#[cfg(test)]
mod extract_tests;
pub mod lower;
mod sparse;
mod stream;
mod tar_bounds;
mod unpack_error;

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use self::deferred::Deferred;
use self::extract::Extractor;
use self::lower::Lowers;
use self::stream as chunked;
use self::tar_bounds::TarBounds;
pub use self::unpack_error::UnpackError;
use super::content::{StorePaths, remove_tree};
use super::space::{Guarded, Reserve, Tripped};
use crate::image::digest::{Digest, HashingReader};
use crate::image::registry::manifest::Compression;

/// What one unpacked layer uses on disk, saved beside it as `layer.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct LayerMeta {
    pub chain_id: Option<Digest>,
    pub diff_id: Option<Digest>,
    pub bytes: u64,
    pub inodes: u64,
}

pub fn meta_path(layer_dir: &Path) -> PathBuf {
    layer_dir.join("layer.json")
}

pub fn read_meta(layer_dir: &Path) -> Option<LayerMeta> {
    serde_json::from_slice(&fs::read(meta_path(layer_dir)).ok()?).ok()
}

fn fs_err<'a>(op: &'static str, p: &'a Path) -> impl FnOnce(io::Error) -> UnpackError + 'a {
    move |source| UnpackError::Fs {
        op,
        path: p.display().to_string(),
        source,
    }
}

/// Removes a temporary directory when dropped, unless disarmed.
struct TmpDir(Option<PathBuf>);

impl Drop for TmpDir {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = remove_tree(&p);
        }
    }
}

/// The layers below the one being extracted.
pub enum Below {
    /// Complete: read as the extraction goes.
    Ready(Lowers),
    /// Not complete yet: what would read them is returned, to settle once they are.
    Later,
}

/// A layer extracted under its temporary name (`layers/.tmp-*`) without its lower layers, not
/// yet settled, durable nor visible: [`Extracted::settle`] completes it against them,
/// [`Extracted::seal`] makes it durable and visible. Dropped unsealed, it is removed. Once
/// settled it is a lower layer for the one above ([`Extracted::fs`]) while its data goes to
/// disk.
pub struct Extracted {
    tmp: TmpDir,
    dest: PathBuf,
    layers_dir: PathBuf,
    chain_id: Digest,
    diff_id: Digest,
    deferred: Deferred,
    /// Set by `settle`.
    meta: Option<LayerMeta>,
}

/// Unpacks `blob` as the layer `chain_id` on top of the unpacked layers `lowers` (its chain's
/// parents, topmost first) in one call. Blocking. Returns at once if the layer exists.
#[cfg(test)]
pub fn unpack(
    paths: &StorePaths,
    blob: &Path,
    diff_id: &Digest,
    chain_id: &Digest,
    lowers: &[PathBuf],
    reserve: Reserve,
) -> Result<LayerMeta, UnpackError> {
    if let Some(meta) = read_meta(&paths.layer_dir(chain_id)) {
        return Ok(meta);
    }
    let blob = File::open(blob).map_err(fs_err("opening", blob))?;
    let mut extracted = extract(paths, blob, diff_id, chain_id, reserve)?;
    extracted.settle(lowers)?;
    let synced = extracted.syncer()();
    extracted.seal(synced)
}

/// Extracts `blob` (read from its start) as the layer `chain_id` under a temporary name,
/// without its lower layers (see [`Extracted::settle`]). Blocking.
pub fn extract(
    paths: &StorePaths,
    blob: impl Read + Send,
    diff_id: &Digest,
    chain_id: &Digest,
    reserve: Reserve,
) -> Result<Extracted, UnpackError> {
    let dest = paths.layer_dir(chain_id);
    let mut rnd = [0u8; 6];
    getrandom::fill(&mut rnd)
        .map_err(|e| fs_err("creating", &dest)(io::Error::other(e.to_string())))?;
    let tmp = paths
        .layers_dir()
        .join(format!(".tmp-{}-{}", chain_id.short(), hex::encode(rnd)));
    let guard = TmpDir(Some(tmp.clone()));
    let fs_dir = tmp.join("fs");
    crate::durable::create_dir_all(&fs_dir).map_err(fs_err("creating", &fs_dir))?;
    // The layer root is what `/` shows when no layer above lists it (`./` entries are
    // skipped): 0755 whatever the daemon's umask.
    fs::set_permissions(&fs_dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .map_err(fs_err("chmod", &fs_dir))?;
    let started = std::time::Instant::now();
    let deferred = extract_tar(
        blob,
        &fs_dir,
        Below::Later,
        Some(diff_id),
        reserve,
        &paths.layers_dir(),
    )?;
    // Where a slow pull's time goes, for whoever reads the debug log.
    tracing::debug!(
        layer = %chain_id.short(),
        extract_ms = started.elapsed().as_millis() as u64,
        "layer extracted"
    );
    Ok(Extracted {
        tmp: guard,
        dest,
        layers_dir: paths.layers_dir(),
        chain_id: chain_id.clone(),
        diff_id: diff_id.clone(),
        deferred,
        meta: None,
    })
}

/// What [`Extracted::sync`] gives [`Extracted::seal`]: whether the layer's data is on disk.
pub type Synced = Result<(), UnpackError>;

impl Extracted {
    /// The layer's tree, for the layer above to read as a lower while this one is unsealed.
    pub fn fs(&self) -> PathBuf {
        self.tmp.0.as_ref().expect("unsealed").join("fs")
    }

    /// Completes the layer against `lowers` (the complete layers below it, topmost first:
    /// sealed, or settled and not yet sealed), measures it and writes its `layer.json`.
    /// Blocking.
    pub fn settle(&mut self, lowers: &[PathBuf]) -> Result<(), UnpackError> {
        let fs_dir = self.fs();
        let tmp = self.tmp.0.clone().expect("unsealed");
        self.deferred
            .settle(&fs_dir, &Lowers::new(lowers.to_vec()))?;
        let (bytes, inodes) =
            crate::stats::disk_usage(&fs_dir).map_err(fs_err("measuring", &fs_dir))?;
        let meta = LayerMeta {
            chain_id: Some(self.chain_id.clone()),
            diff_id: Some(self.diff_id.clone()),
            bytes,
            inodes,
        };
        let json = serde_json::to_vec(&meta).expect("layer meta serializes");
        crate::durable::write(meta_path(&tmp), json).map_err(fs_err("writing", &tmp))?;
        self.meta = Some(meta);
        Ok(())
    }

    /// What makes the layer's data durable, to run on any thread: blocking, and the slow part
    /// of sealing.
    pub fn syncer(&self) -> impl FnOnce() -> Synced + Send + 'static {
        let dir = File::open(self.tmp.0.as_ref().expect("unsealed"));
        let dest = self.dest.clone();
        move || {
            let dir = dir.map_err(fs_err("opening", &dest))?;
            let started = std::time::Instant::now();
            rustix::fs::syncfs(&dir).map_err(|e| fs_err("syncing", &dest)(e.into()))?;
            let sync_ms = started.elapsed().as_millis() as u64;
            tracing::debug!(layer = %dest.display(), sync_ms, "layer synced");
            Ok(())
        }
    }

    /// Renames the layer into place once `synced` says its data is on disk, so a power loss
    /// cannot leave a complete-looking layer with empty files. Blocking.
    pub fn seal(mut self, synced: Synced) -> Result<LayerMeta, UnpackError> {
        synced?;
        let tmp = self.tmp.0.clone().expect("unsealed");
        match crate::durable::rename(&tmp, &self.dest) {
            Ok(()) => {}
            // Another unpack of the same layer finished first; both are verified, keep theirs.
            Err(e) if self.dest.join("fs").is_dir() => {
                tracing::debug!(error = %e, "layer already unpacked");
                return Ok(self.meta.take().expect("settled before sealed"));
            }
            Err(e) => return Err(fs_err("renaming into place", &self.dest)(e)),
        }
        self.tmp.0 = None;
        File::open(&self.layers_dir)
            .and_then(|d| d.sync_all())
            .map_err(fs_err("syncing", &self.dest))?;
        Ok(self.meta.take().expect("settled before sealed"))
    }
}

/// Extracts a (possibly compressed) tar stream into the empty directory `dir` on top of the
/// layers `below`, checking the uncompressed stream against `diff_id` when given and the free
/// space of `store` (the directory messages name, on the same filesystem) against `reserve`.
/// Returns what is left to settle once the layers below are complete (nothing when they
/// were). Blocking.
pub fn extract_tar(
    input: impl Read + Send,
    dir: &Path,
    below: Below,
    diff_id: Option<&Digest>,
    reserve: Reserve,
    store: &Path,
) -> Result<Deferred, UnpackError> {
    let tripped = Tripped::default();
    let result = extract_guarded(input, dir, below, diff_id, reserve, store, &tripped);
    let no_space = crate::image::lock(&tripped).take();
    match no_space {
        Some(no_space) => Err(UnpackError::NoSpace(no_space)),
        None => result,
    }
}

fn extract_guarded(
    input: impl Read + Send,
    dir: &Path,
    below: Below,
    diff_id: Option<&Digest>,
    reserve: Reserve,
    store: &Path,
    tripped: &Tripped,
) -> Result<Deferred, UnpackError> {
    let mut buffered = BufReader::with_capacity(64 * 1024, input);
    let head = buffered
        .fill_buf()
        .map_err(|e| UnpackError::Corrupt(e.to_string()))?;
    let decoder: Box<dyn Read + Send> = match Compression::sniff(head) {
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(buffered)),
        Compression::Zstd => Box::new(ZstdFrames::new(buffered)?),
        Compression::None => Box::new(buffered),
    };
    let guarded = Guarded::new(decoder, reserve, store, tripped.clone());
    let algorithm = diff_id.map_or(crate::image::digest::Algorithm::Sha256, |d| d.algorithm());
    let root = rustix::fs::open(
        dir,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| UnpackError::Fs {
        op: "opening",
        path: dir.display().to_string(),
        source: e.into(),
    })?;
    let mut extractor = match below {
        Below::Ready(lowers) => Extractor::new(root, lowers),
        Below::Later => Extractor::deferring(root),
    };
    let (extracted, produced) = std::thread::scope(|scope| {
        let (chunks, producer) = chunked::spawn(scope, guarded);
        // The diff id is hashed on this side: inflating, on the other, is the slower half, and
        // for a large layer alone it was the whole unpack's pace.
        let mut hashed = HashingReader::new(chunks, algorithm);
        let extracted = extract_entries(&mut hashed, &mut extractor);
        // The tar's end-of-archive blocks leave padding unread, and the diff id covers it.
        // Either way the stream's end is dropped here, which stops the producer if it is not
        // done.
        let digested = extracted.and_then(|()| {
            hashed
                .finish()
                .map_err(|e| UnpackError::Corrupt(e.to_string()))
        });
        (digested, producer.join())
    });
    let produced =
        produced.map_err(|_| UnpackError::Corrupt("the decompressing thread panicked".into()))?;
    let actual = match (produced, extracted) {
        (Ok(_), Ok((digest, _))) => digest,
        // The unpack stopped first (a bad entry, a failed write): the stream only saw it stop.
        (Err(e), Err(first)) if chunked::stopped(&e) => return Err(first),
        // A failed read is the first cause; what the tar reader made of it is only its echo.
        (Err(e), _) => return Err(UnpackError::Corrupt(e.to_string())),
        (Ok(_), Err(e)) => return Err(e),
    };
    if let Some(expected) = diff_id {
        if &actual != expected {
            return Err(UnpackError::DiffId {
                expected: expected.clone(),
                actual,
            });
        }
    }
    extractor.finish()
}

fn extract_entries(chunks: &mut impl Read, extractor: &mut Extractor) -> Result<(), UnpackError> {
    let mut archive = tar::Archive::new(TarBounds::new(chunks));
    for entry in archive
        .entries()
        .map_err(|e| UnpackError::Corrupt(e.to_string()))?
    {
        extractor.entry(entry.map_err(|e| UnpackError::Corrupt(e.to_string()))?)?;
    }
    Ok(())
}

/// A zstd stream may hold several frames back to back; each is decoded in turn.
struct ZstdFrames<R: BufRead> {
    decoder: Option<ruzstd::decoding::StreamingDecoder<R, ruzstd::decoding::FrameDecoder>>,
}

impl<R: BufRead> ZstdFrames<R> {
    fn new(r: R) -> Result<Self, UnpackError> {
        let d = ruzstd::decoding::StreamingDecoder::new(r)
            .map_err(|e| UnpackError::Corrupt(format!("zstd: {e}")))?;
        Ok(ZstdFrames { decoder: Some(d) })
    }
}

impl<R: BufRead> Read for ZstdFrames<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let Some(d) = self.decoder.as_mut() else {
                return Ok(0);
            };
            let n = d.read(buf)?;
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
            let mut inner = self.decoder.take().expect("decoder present").into_inner();
            if inner.fill_buf()?.is_empty() {
                return Ok(0);
            }
            let next = ruzstd::decoding::StreamingDecoder::new(inner)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("zstd: {e}")))?;
            self.decoder = Some(next);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};

    use super::*;

    fn header(kind: tar::EntryType, size: u64) -> tar::Header {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(kind);
        h.set_mode(0o644);
        h.set_size(size);
        h.set_mtime(1_700_000_000);
        h
    }

    /// A tar of (name, kind, data or link target); names go into the header verbatim.
    fn tar_of(entries: &[(&str, tar::EntryType, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, kind, data) in entries {
            let link = matches!(kind, tar::EntryType::Link | tar::EntryType::Symlink);
            let mut h = header(*kind, if link { 0 } else { data.len() as u64 });
            h.as_mut_bytes()[..name.len()].copy_from_slice(name.as_bytes());
            if link {
                h.set_link_name_literal(data).unwrap();
            }
            if *kind == tar::EntryType::Char {
                h.set_device_major(1).unwrap();
                h.set_device_minor(5).unwrap();
            }
            h.set_cksum();
            b.append(&h, if link { &[][..] } else { *data }).unwrap();
        }
        b.into_inner().unwrap()
    }

    fn extract(t: &[u8]) -> (tempfile::TempDir, Result<(), UnpackError>) {
        assert!(
            nix::unistd::geteuid().is_root(),
            "unpack tests create devices and trusted xattrs: run as root"
        );
        let dir = tempfile::tempdir().unwrap();
        let r = extract_tar(
            t,
            dir.path(),
            Below::Ready(Lowers::default()),
            Some(&Digest::of(t)),
            Reserve::new(0),
            Path::new("/"),
        )
        .map(drop);
        (dir, r)
    }

    use tar::EntryType as T;

    #[test]
    fn whiteouts_become_overlayfs_whiteouts() {
        let t = tar_of(&[
            ("a/", T::Directory, b""),
            ("a/.wh..wh..opq", T::Regular, b""),
            ("a/keep", T::Regular, b"k"),
            ("mine", T::Regular, b"m"),
            (".wh.mine", T::Regular, b""),
            ("b/.wh..wh.plnk", T::Regular, b""),
        ]);
        let (d, r) = extract(&t);
        r.unwrap();
        let p = d.path();
        let mut v = [0u8; 4];
        let n = rustix::fs::lgetxattr(p.join("a"), "trusted.overlay.opaque", &mut v).unwrap();
        assert_eq!(&v[..n], b"y");
        assert_eq!(fs::read(p.join("a/keep")).unwrap(), b"k");
        assert_eq!(
            fs::read(p.join("mine")).unwrap(),
            b"m",
            "a whiteout never hides its own layer's file"
        );
        assert!(!p.join("b/.wh..wh.plnk").exists());
    }

    #[test]
    fn traversal_and_outside_links_are_refused() {
        for bad in [
            &[("../x", T::Regular, &b"x"[..])][..],
            &[("a/../../x", T::Regular, b"x")],
        ] {
            let (_d, r) = extract(&tar_of(bad));
            assert!(matches!(r, Err(UnpackError::Traversal { .. })), "{r:?}");
        }
        let (_d, r) = extract(&tar_of(&[("l", T::Link, b"../../etc/passwd")]));
        assert!(matches!(r, Err(UnpackError::BadLink { .. })), "{r:?}");
        let (_d, r) = extract(&tar_of(&[("l", T::Link, b"missing")]));
        assert!(matches!(r, Err(UnpackError::BadLink { .. })), "{r:?}");
        // Absolute names and symlinked parents stay inside.
        let (d, r) = extract(&tar_of(&[
            ("/abs", T::Regular, b"a"),
            ("up", T::Symlink, b"../../../.."),
            ("up/etc-file", T::Regular, b"inside"),
            ("out", T::Symlink, b"/"),
            ("out/x", T::Regular, b"x"),
        ]));
        r.unwrap();
        assert_eq!(fs::read(d.path().join("abs")).unwrap(), b"a");
        assert_eq!(fs::read(d.path().join("etc-file")).unwrap(), b"inside");
        assert_eq!(fs::read(d.path().join("x")).unwrap(), b"x");
    }

    /// Large enough that the decompressing thread is still at work when the tar fails.
    fn big_layer_after(first: (&str, tar::EntryType, &[u8])) -> Vec<u8> {
        let big = vec![7u8; 4 << 20];
        tar_of(&[first, ("big", T::Regular, &big)])
    }

    #[test]
    fn the_first_cause_of_a_failed_unpack_is_the_error() {
        // The tar fails while the stream is still being made: the entry is the cause.
        let (_d, r) = extract(&big_layer_after(("../x", T::Regular, b"x")));
        assert!(matches!(r, Err(UnpackError::Traversal { .. })), "{r:?}");
        // The stream fails mid-way: the decompressor's complaint is the cause, not the tar's.
        let t = big_layer_after(("ok", T::Regular, b"x"));
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        io::Write::write_all(&mut gz, &t).unwrap();
        let mut gz = gz.finish().unwrap();
        let middle = gz.len() / 2;
        gz.truncate(middle);
        let dir = tempfile::tempdir().unwrap();
        let r = extract_tar(
            &gz[..],
            dir.path(),
            Below::Ready(Lowers::default()),
            Some(&Digest::of(&t)),
            Reserve::new(0),
            Path::new("/"),
        );
        match r {
            Err(UnpackError::Corrupt(m)) => assert!(m.contains("deflate"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn hardlinks_devices_and_replacements() {
        let (d, r) = extract(&tar_of(&[
            ("f", T::Regular, b"one"),
            ("h", T::Link, b"f"),
            ("c", T::Char, b""),
            ("p", T::Fifo, b""),
            ("s", T::Symlink, b"f"),
            ("s", T::Regular, b"replaced symlink"),
            ("dir/", T::Directory, b""),
            ("dir/inner", T::Regular, b"i"),
            ("dir", T::Regular, b"replaced dir"),
        ]));
        r.unwrap();
        let p = d.path();
        assert_eq!(
            p.join("f").metadata().unwrap().ino(),
            p.join("h").metadata().unwrap().ino()
        );
        let c = p.join("c").symlink_metadata().unwrap();
        assert!(c.file_type().is_char_device());
        assert_eq!(c.rdev(), rustix::fs::makedev(1, 5));
        assert!(
            p.join("p")
                .symlink_metadata()
                .unwrap()
                .file_type()
                .is_fifo()
        );
        assert_eq!(fs::read(p.join("s")).unwrap(), b"replaced symlink");
        assert_eq!(fs::read(p.join("dir")).unwrap(), b"replaced dir");
    }

    #[test]
    fn diff_id_mismatch_leaves_no_layer() {
        let dir = tempfile::tempdir().unwrap();
        let paths = StorePaths::new(dir.path());
        paths.create_dirs().unwrap();
        let t = tar_of(&[("f", T::Regular, b"x")]);
        let blob = dir.path().join("blob");
        fs::write(&blob, &t).unwrap();
        let wrong = Digest::of(b"something else");
        let chain = Digest::of(b"chain");
        let r = unpack(&paths, &blob, &wrong, &chain, &[], Reserve::new(0));
        assert!(matches!(r, Err(UnpackError::DiffId { .. })), "{r:?}");
        assert_eq!(
            fs::read_dir(paths.layers_dir()).unwrap().count(),
            0,
            "nothing left in layers/"
        );
        let meta = unpack(&paths, &blob, &Digest::of(&t), &chain, &[], Reserve::new(0)).unwrap();
        assert!(meta.inodes >= 2 && paths.layer_fs(&chain).join("f").is_file());
        let mut z = Vec::new();
        ruzstd::encoding::compress(&t[..], &mut z, ruzstd::encoding::CompressionLevel::Fastest);
        let zdir = tempfile::tempdir().unwrap();
        extract_tar(
            &z[..],
            zdir.path(),
            Below::Ready(Lowers::default()),
            Some(&Digest::of(&t)),
            Reserve::new(0),
            Path::new("/"),
        )
        .unwrap();
        assert_eq!(fs::read(zdir.path().join("f")).unwrap(), b"x");
        assert!(matches!(
            extract_tar(
                &b"\x1f\x8bnot gzip at all"[..],
                zdir.path(),
                Below::Ready(Lowers::default()),
                None,
                Reserve::new(0),
                Path::new("/")
            ),
            Err(UnpackError::Corrupt(_))
        ));
    }
}
