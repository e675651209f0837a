//! Writes the entries of one layer tar into a fresh directory in overlayfs lowerdir form.
//!
//! Containment: every path is cleaned lexically (a leading `/` is dropped; a `..` that would
//! climb above the layer root is refused), and every parent directory is opened with
//! `openat2(RESOLVE_IN_ROOT)` relative to the layer root, so a symlink planted by an earlier
//! entry (`a -> /etc`, then `a/passwd`) resolves inside the layer, never outside it. The last
//! component is never followed: files are created with `O_EXCL|O_NOFOLLOW`, metadata is set on
//! the new file's own descriptor or with `AT_SYMLINK_NOFOLLOW`.
//!
//! Whiteouts: `.wh.NAME` becomes a 0:0 character device `NAME` and `.wh..wh..opq` sets
//! `trusted.overlay.opaque=y` on its directory, as overlayfs expects. A whiteout applies to
//! the lower layers only: none is written for a name this layer made itself or that no lower
//! layer shows (`lower.rs`). `trusted.*` xattrs carried by the tar itself are dropped, as
//! containerd drops them: that namespace is overlayfs's, and only whiteouts may write to it.
//!
//! Read as containerd reads layers (Go's archive/tar): the layer root entry (`./`) is skipped,
//! so `/` keeps the lower layers' (or the default 0755 root) metadata; a legacy regular-file
//! entry (type `\0`) whose name ends in `/` is a directory; a directory listed twice keeps the
//! last entry's metadata and mtime; a directory the tar leaves out but whose children it lists
//! takes the lower layers' owner, mode and xattrs (`lower.rs`); GNU sparse files in PAX form
//! are written as the real file (`sparse.rs`) or refused.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{
    self as rfs, AtFlags, FileType, Gid, Mode, OFlags, ResolveFlags, Timespec, Timestamps, Uid,
    XattrFlags,
};
use rustix::io::Errno;

use super::deferred::Deferred;
use super::lower::{Lowers, Shown};
use super::sparse::{Sparse, SparseFail, SparseRecords};
use super::unpack_error::UnpackError;

const WHITEOUT_PREFIX: &str = ".wh.";
const OPAQUE_MARKER: &str = ".wh..wh..opq";
const OPAQUE_XATTR: &str = "trusted.overlay.opaque";

/// Memory the directory mtimes kept until the end of a layer may take (paths plus overhead):
/// about a million directories, far beyond real images, and bounded against hostile ones.
const MAX_DIR_TIMES_BYTES: usize = 64 << 20;
/// What one remembered directory costs beyond its path.
const DIR_TIME_OVERHEAD: usize = 64;

/// Ownership, permissions, time and xattrs of one entry, from its header and PAX records.
struct Meta {
    uid: u32,
    gid: u32,
    mode: u32,
    mtime: Timespec,
    xattrs: Vec<(String, Vec<u8>)>,
    /// Set for a GNU sparse file in PAX form.
    sparse: Option<Sparse>,
}

pub struct Extractor {
    root: OwnedFd,
    lowers: Lowers,
    /// Set when the lower layers are not there yet: what would read them is noted here
    /// instead (`deferred.rs`).
    deferred: Option<Deferred>,
    /// The last parent directory opened, by its cleaned path (tars are sorted, so consecutive
    /// entries usually share it). Dropped whenever anything is removed.
    parent_cache: Option<(PathBuf, OwnedFd)>,
    /// Directory mtimes, set at the end (creating children changes them); a directory listed
    /// again gets the later entry's.
    dir_times: HashMap<PathBuf, Timespec>,
    /// What `dir_times` holds, in bytes, against `dir_times_limit`.
    dir_times_bytes: usize,
    dir_times_limit: usize,
    /// File data passes through this one buffer (under glibc's mmap threshold, allocated once
    /// per layer rather than once per file).
    buf: Vec<u8>,
}

fn fs_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(Errno) -> UnpackError + 'a {
    move |e| UnpackError::Fs {
        op,
        path: path.display().to_string(),
        source: e.into(),
    }
}

fn dup(fd: &OwnedFd, path: &Path) -> Result<OwnedFd, UnpackError> {
    fd.try_clone().map_err(|source| UnpackError::Fs {
        op: "duplicating fd of",
        path: path.display().to_string(),
        source,
    })
}

fn corrupt(e: io::Error) -> UnpackError {
    UnpackError::Corrupt(e.to_string())
}

/// Cleans a tar path into components relative to the layer root, refusing to climb out.
pub fn clean_path(raw: &Path) -> Result<Vec<OsString>, UnpackError> {
    let mut out: Vec<OsString> = Vec::new();
    for c in raw.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => out.push(n.to_owned()),
            Component::ParentDir => {
                if out.pop().is_none() {
                    return Err(UnpackError::Traversal {
                        path: raw.display().to_string(),
                    });
                }
            }
            Component::Prefix(_) => {
                return Err(UnpackError::Traversal {
                    path: raw.display().to_string(),
                });
            }
        }
    }
    Ok(out)
}

impl Extractor {
    /// An extractor into the empty directory `root`, on top of `lowers`.
    pub fn new(root: OwnedFd, lowers: Lowers) -> Extractor {
        Extractor {
            root,
            lowers,
            deferred: None,
            parent_cache: None,
            dir_times: HashMap::new(),
            dir_times_bytes: 0,
            dir_times_limit: MAX_DIR_TIMES_BYTES,
            buf: vec![0u8; 64 << 10],
        }
    }

    /// An extractor into the empty directory `root` whose lower layers are not complete yet:
    /// [`Extractor::finish`] returns what to decide once they are.
    pub fn deferring(root: OwnedFd) -> Extractor {
        let mut e = Extractor::new(root, Lowers::default());
        e.deferred = Some(Deferred::default());
        e
    }

    /// Applies one tar entry.
    pub fn entry<R: Read>(&mut self, mut e: tar::Entry<'_, R>) -> Result<(), UnpackError> {
        let header_path = e.path().map_err(corrupt)?.into_owned();
        let mut meta = read_meta(&mut e, &header_path)?;
        let raw = match meta.sparse.as_mut().and_then(|s| s.name.take()) {
            Some(real) => PathBuf::from(OsString::from_vec(real)),
            None => header_path,
        };
        let comps = clean_path(&raw)?;
        let kind = entry_kind(&e);
        let Some((name, parent)) = comps.split_last() else {
            // The layer root itself (`./`): skipped, as containerd does, so a layer cannot make
            // `/` private or hand it to a user.
            return Ok(());
        };
        let path: PathBuf = comps.iter().collect();
        let name_str = name.to_string_lossy();
        if name_str == OPAQUE_MARKER {
            let dir = self.open_dir(parent, &raw)?;
            return rfs::fsetxattr(&dir, OPAQUE_XATTR, b"y", XattrFlags::empty())
                .map_err(fs_err("marking opaque", &raw));
        }
        if name_str.starts_with(".wh..wh.") {
            return Ok(()); // other AUFS metadata (.wh..wh.plnk and friends) has no overlay form
        }
        if let Some(hidden) = name_str.strip_prefix(WHITEOUT_PREFIX) {
            let target: PathBuf = parent
                .iter()
                .chain(std::iter::once(&OsString::from(hidden)))
                .collect();
            return self.whiteout(parent, OsStr::new(hidden), &target, &raw);
        }
        let parent_fd = self.parent(parent, &raw)?;
        use tar::EntryType as T;
        match kind {
            T::Directory => self.directory(&parent_fd, name, &path, &meta)?,
            T::Regular | T::Continuous | T::GNUSparse => {
                self.regular(&parent_fd, name, &path, &meta, &mut e)?
            }
            T::Symlink => {
                let target = e
                    .link_name()
                    .map_err(corrupt)?
                    .unwrap_or_default()
                    .into_owned();
                self.replace(&parent_fd, name, &path)?;
                rfs::symlinkat(&target, &parent_fd, name)
                    .map_err(fs_err("creating symlink", &path))?;
                apply_at_meta(&parent_fd, name, &meta, &path, false)?;
            }
            T::Link => {
                let target = e
                    .link_name()
                    .map_err(corrupt)?
                    .unwrap_or_default()
                    .into_owned();
                self.hard_link(&parent_fd, name, &path, &target)?;
            }
            T::Char | T::Block | T::Fifo => {
                let (ft, dev) = match kind {
                    T::Char => (FileType::CharacterDevice, device(&e)?),
                    T::Block => (FileType::BlockDevice, device(&e)?),
                    _ => (FileType::Fifo, 0),
                };
                self.replace(&parent_fd, name, &path)?;
                rfs::mknodat(&parent_fd, name, ft, Mode::from_raw_mode(0o600), dev)
                    .map_err(fs_err("creating device node", &path))?;
                apply_at_meta(&parent_fd, name, &meta, &path, true)?;
            }
            other => {
                tracing::debug!(path = %path.display(), kind = ?other, "skipping tar entry of unsupported type");
            }
        }
        Ok(())
    }

    /// The same extractor with a smaller bound on directory bookkeeping (tests).
    #[cfg(test)]
    pub fn with_dir_times_limit(mut self, bytes: usize) -> Extractor {
        self.dir_times_limit = bytes;
        self
    }

    /// Sets directory mtimes (each directory's last entry's). Call after the last entry. Returns
    /// what is left to decide against the lower layers (nothing unless `deferring`).
    pub fn finish(mut self) -> Result<Deferred, UnpackError> {
        self.parent_cache = None;
        for (path, mtime) in &self.dir_times {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let fd = match rfs::openat2(&self.root, path, flags, Mode::empty(), in_root()) {
                Ok(fd) => fd,
                Err(_) => continue, // replaced by a later entry
            };
            let t = Timestamps {
                last_access: *mtime,
                last_modification: *mtime,
            };
            rfs::futimens(&fd, &t).map_err(fs_err("setting times of", path))?;
        }
        Ok(self.deferred.take().unwrap_or_default())
    }

    /// Bounds what is remembered until the end of the layer against hostile tars.
    fn bookkeeping_fits(&self) -> Result<(), UnpackError> {
        let deferred = self.deferred.as_ref().map_or(0, Deferred::bytes);
        if self.dir_times_bytes + deferred > self.dir_times_limit {
            return Err(UnpackError::Limit {
                what: format!(
                    "more directories and whiteouts than {} MiB of paths can list",
                    self.dir_times_limit >> 20
                ),
            });
        }
        Ok(())
    }

    fn whiteout(
        &mut self,
        parent: &[OsString],
        hidden: &OsStr,
        target: &Path,
        raw: &Path,
    ) -> Result<(), UnpackError> {
        if hidden.is_empty() || hidden == "." || hidden == ".." {
            return Err(UnpackError::Traversal {
                path: raw.display().to_string(),
            });
        }
        // The parent is made as for any entry (containerd does too), even when no whiteout
        // follows.
        let parent_fd = self.parent(parent, raw)?;
        match rfs::statat(&parent_fd, hidden, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(_) => return Ok(()), // this layer's own entry already hides whatever is below
            Err(Errno::NOENT) => {}
            Err(e) => return Err(fs_err("stat", target)(e)),
        }
        if let Some(deferred) = self.deferred.as_mut() {
            deferred.whiteout(target.to_owned());
            return self.bookkeeping_fits();
        }
        let comps: Vec<OsString> = target.iter().map(OsStr::to_owned).collect();
        match self.lowers.lookup(&comps) {
            Ok(Shown::Nothing) => return Ok(()), // nothing below to hide
            Ok(_) => {}
            Err(e) => return Err(fs_err("looking in the lower layers for", target)(e)),
        }
        rfs::mknodat(
            &parent_fd,
            hidden,
            FileType::CharacterDevice,
            Mode::empty(),
            rfs::makedev(0, 0),
        )
        .map_err(fs_err("creating whiteout", target))
    }

    fn directory(
        &mut self,
        parent: &OwnedFd,
        name: &OsStr,
        path: &Path,
        meta: &Meta,
    ) -> Result<(), UnpackError> {
        match rfs::mkdirat(parent, name, Mode::from_raw_mode(0o700)) {
            Ok(()) => {}
            Err(Errno::EXIST) => {
                let st = rfs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(fs_err("stat", path))?;
                if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
                    self.replace(parent, name, path)?;
                    rfs::mkdirat(parent, name, Mode::from_raw_mode(0o700))
                        .map_err(fs_err("creating directory", path))?;
                }
            }
            Err(e) => return Err(fs_err("creating directory", path)(e)),
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rfs::openat(parent, name, flags, Mode::empty())
            .map_err(fs_err("opening directory", path))?;
        apply_fd_meta(&fd, meta, path)?;
        if let Some(deferred) = self.deferred.as_mut() {
            deferred.dir_listed(path);
        }
        if self.dir_times.insert(path.to_owned(), meta.mtime).is_none() {
            self.dir_times_bytes += path.as_os_str().len() + DIR_TIME_OVERHEAD;
            self.bookkeeping_fits()?;
        }
        Ok(())
    }

    fn regular<R: Read>(
        &mut self,
        parent: &OwnedFd,
        name: &OsStr,
        path: &Path,
        meta: &Meta,
        data: &mut R,
    ) -> Result<(), UnpackError> {
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mode = Mode::from_raw_mode(0o600);
        let fd = match rfs::openat(parent, name, flags, mode) {
            Err(Errno::EXIST) => {
                self.replace(parent, name, path)?;
                rfs::openat(parent, name, flags, mode)
            }
            r => r,
        }
        .map_err(fs_err("creating file", path))?;
        let mut file = std::fs::File::from(fd);
        if let Some(sparse) = &meta.sparse {
            sparse
                .write(&mut file, data, &mut self.buf)
                .map_err(|e| sparse_error(e, path))?;
            return apply_fd_meta(&file, meta, path);
        }
        loop {
            let n = data.read(&mut self.buf).map_err(corrupt)?;
            if n == 0 {
                break;
            }
            file.write_all(&self.buf[..n])
                .map_err(|source| UnpackError::Fs {
                    op: "writing",
                    path: path.display().to_string(),
                    source,
                })?;
        }
        apply_fd_meta(&file, meta, path)
    }

    fn hard_link(
        &mut self,
        parent: &OwnedFd,
        name: &OsStr,
        path: &Path,
        target: &Path,
    ) -> Result<(), UnpackError> {
        let bad = || UnpackError::BadLink {
            path: path.display().to_string(),
            target: target.display().to_string(),
        };
        let tcomps = clean_path(target).map_err(|_| bad())?;
        let Some((tname, tparent)) = tcomps.split_last() else {
            return Err(bad());
        };
        let tparent_fd = self.open_existing_dir(tparent).map_err(|_| bad())?;
        let tst = rfs::statat(&tparent_fd, tname.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|_| bad())?;
        if let Ok(st) = rfs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
            if st.st_ino == tst.st_ino && st.st_dev == tst.st_dev {
                return Ok(());
            }
            if FileType::from_raw_mode(tst.st_mode) == FileType::Directory {
                return Err(bad());
            }
            self.replace(parent, name, path)?;
        }
        rfs::linkat(
            &tparent_fd,
            tname.as_os_str(),
            parent,
            name,
            AtFlags::empty(),
        )
        .map_err(fs_err("creating hard link", path))
    }

    /// Removes whatever is at `name` (a whole tree for a directory), so a later entry replaces it.
    fn replace(&mut self, parent: &OwnedFd, name: &OsStr, path: &Path) -> Result<(), UnpackError> {
        match rfs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
            Err(Errno::NOENT) => return Ok(()),
            Err(e) => return Err(fs_err("stat", path)(e)),
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
                self.parent_cache = None;
                remove_dir_at(parent, name).map_err(fs_err("removing", path))?;
            }
            Ok(_) => {
                rfs::unlinkat(parent, name, AtFlags::empty()).map_err(fs_err("removing", path))?
            }
        }
        Ok(())
    }

    /// The directory at `comps` (created, with missing parents, as the lower layers show them).
    fn parent(&mut self, comps: &[OsString], raw: &Path) -> Result<OwnedFd, UnpackError> {
        let key: PathBuf = comps.iter().collect();
        if let Some((p, fd)) = &self.parent_cache {
            if *p == key {
                return dup(fd, raw);
            }
        }
        let fd = self.open_dir(comps, raw)?;
        self.parent_cache = Some((key, dup(&fd, raw)?));
        Ok(fd)
    }

    fn open_existing_dir(&self, comps: &[OsString]) -> Result<OwnedFd, Errno> {
        if comps.is_empty() {
            return self
                .root
                .try_clone()
                .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO));
        }
        let key: PathBuf = comps.iter().collect();
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        rfs::openat2(&self.root, &key, flags, Mode::empty(), in_root())
    }

    fn open_dir(&mut self, comps: &[OsString], raw: &Path) -> Result<OwnedFd, UnpackError> {
        self.open_or_create_dir(comps, raw, 0)
    }

    /// Opens the directory at `comps`, creating missing ones (see `copy_up`). A component
    /// that is a symlink to a missing directory is followed the way RESOLVE_IN_ROOT would
    /// (inside the root, `..` stopping at it) and its target created.
    fn open_or_create_dir(
        &mut self,
        comps: &[OsString],
        raw: &Path,
        depth: u32,
    ) -> Result<OwnedFd, UnpackError> {
        match self.open_existing_dir(comps) {
            Ok(fd) => return Ok(fd),
            Err(Errno::NOENT) if depth < 40 => {}
            Err(e) => return Err(fs_err("opening parent of", raw)(e)),
        }
        let mut cur = dup(&self.root, raw)?;
        for i in 0..comps.len() {
            match self.open_existing_dir(&comps[..=i]) {
                Ok(fd) => cur = fd,
                Err(Errno::NOENT) => {
                    let name = comps[i].as_os_str();
                    match rfs::mkdirat(&cur, name, Mode::from_raw_mode(0o755)) {
                        Ok(()) => {}
                        Err(Errno::EXIST) => {
                            // A dangling symlink: create its target, then carry on below it.
                            let target = rfs::readlinkat(&cur, name, Vec::new())
                                .map_err(fs_err("reading link in", raw))?;
                            let mut dest =
                                clamp(&comps[..i], Path::new(OsStr::from_bytes(target.as_bytes())));
                            let fd = self.open_or_create_dir(&dest, raw, depth + 1)?;
                            if i + 1 == comps.len() {
                                return Ok(fd);
                            }
                            dest.extend(comps[i + 1..].iter().cloned());
                            return self.open_or_create_dir(&dest, raw, depth + 1);
                        }
                        Err(e) => return Err(fs_err("creating parent of", raw)(e)),
                    }
                    let flags =
                        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                    let fd = rfs::openat(&cur, name, flags, Mode::empty())
                        .map_err(fs_err("opening parent of", raw))?;
                    self.copy_up(&comps[..=i], &fd, raw)?;
                    cur = fd;
                }
                Err(e) => return Err(fs_err("opening parent of", raw)(e)),
            }
        }
        Ok(cur)
    }
}

impl Extractor {
    /// Gives a directory made for an entry's parent what the lower layers show at its path
    /// (owner, mode, xattrs), or 0755 root-owned when they show no directory there.
    fn copy_up(&mut self, comps: &[OsString], fd: &OwnedFd, raw: &Path) -> Result<(), UnpackError> {
        if let Some(deferred) = self.deferred.as_mut() {
            rfs::fchmod(fd, Mode::from_raw_mode(0o755)).map_err(fs_err("chmod", raw))?;
            deferred.parent_made(comps.iter().collect());
            return self.bookkeeping_fits();
        }
        let err = |e| fs_err("copying up the lower layers' parent of", raw)(e);
        match self.lowers.lookup(comps).map_err(err)? {
            Shown::Dir(src, st) => super::lower::copy_up(&src, &st, fd).map_err(err),
            Shown::Nothing | Shown::Other => {
                rfs::fchmod(fd, Mode::from_raw_mode(0o755)).map_err(fs_err("chmod", raw))
            }
        }
    }
}

/// The entry's type as Go's archive/tar reads it: a legacy regular file (type `\0`) whose name
/// ends in `/` is a directory.
fn entry_kind<R: Read>(e: &tar::Entry<'_, R>) -> tar::EntryType {
    let kind = e.header().entry_type();
    if e.header().as_bytes()[156] == 0 && e.path_bytes().ends_with(b"/") {
        return tar::EntryType::Directory;
    }
    kind
}

/// An unpack error for a sparse entry that cannot be written, naming the entry.
fn sparse_error(e: SparseFail, path: &Path) -> UnpackError {
    let path = path.display().to_string();
    match e {
        SparseFail::Unsupported(format) => UnpackError::UnsupportedEntry { path, format },
        SparseFail::Corrupt(detail) => UnpackError::BadEntry { path, detail },
        SparseFail::Write(source) => UnpackError::Fs {
            op: "writing",
            path,
            source,
        },
    }
}

/// Resolves a symlink `target` found in directory `base` to components under the root, the way
/// the kernel does with RESOLVE_IN_ROOT: absolute targets start at the root and `..` never
/// climbs above it.
fn clamp(base: &[OsString], target: &Path) -> Vec<OsString> {
    let mut out: Vec<OsString> = if target.is_absolute() {
        Vec::new()
    } else {
        base.to_vec()
    };
    for c in target.components() {
        match c {
            Component::Normal(n) => out.push(n.to_owned()),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

fn in_root() -> ResolveFlags {
    ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS
}

fn device<R: Read>(e: &tar::Entry<'_, R>) -> Result<rfs::Dev, UnpackError> {
    let h = e.header();
    let major = h.device_major().map_err(corrupt)?.unwrap_or(0);
    let minor = h.device_minor().map_err(corrupt)?.unwrap_or(0);
    Ok(rfs::makedev(major, minor))
}

fn read_meta<R: Read>(e: &mut tar::Entry<'_, R>, path: &Path) -> Result<Meta, UnpackError> {
    let h = e.header();
    // Empty numeric fields read as 0, as Go's archive/tar (and so docker and containerd) does.
    let mut meta = Meta {
        uid: h.uid().unwrap_or(0) as u32,
        gid: h.gid().unwrap_or(0) as u32,
        mode: h.mode().map_err(corrupt)? & 0o7777,
        mtime: Timespec {
            tv_sec: h.mtime().unwrap_or(0) as i64,
            tv_nsec: 0,
        },
        xattrs: Vec::new(),
        sparse: None,
    };
    let mut sparse = SparseRecords::default();
    if let Some(exts) = e.pax_extensions().map_err(corrupt)? {
        for ext in exts {
            let ext = ext.map_err(corrupt)?;
            let Ok(key) = ext.key() else { continue };
            let value = ext.value_bytes();
            let num = || {
                std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.parse::<u32>().ok())
            };
            match key {
                "uid" => meta.uid = num().unwrap_or(meta.uid),
                "gid" => meta.gid = num().unwrap_or(meta.gid),
                "mtime" => {
                    if let Some(t) = std::str::from_utf8(value).ok().and_then(parse_pax_time) {
                        meta.mtime = t;
                    }
                }
                k if sparse.record(k, value) => {}
                k => {
                    if let Some(name) = k.strip_prefix("SCHILY.xattr.") {
                        if !name.starts_with("trusted.") {
                            meta.xattrs.push((name.to_owned(), value.to_vec()));
                        }
                    }
                }
            }
        }
    }
    meta.sparse = sparse.finish().map_err(|e| sparse_error(e, path))?;
    Ok(meta)
}

/// PAX times are decimal seconds with an optional fraction: `1704067200.123456789`.
fn parse_pax_time(s: &str) -> Option<Timespec> {
    let (sec, frac) = s.split_once('.').unwrap_or((s, ""));
    let tv_sec: i64 = sec.parse().ok()?;
    let digits: String = frac.chars().take(9).collect();
    let tv_nsec = if digits.is_empty() {
        0
    } else {
        format!("{digits:0<9}").parse().ok()?
    };
    Some(Timespec { tv_sec, tv_nsec })
}

fn ids(meta: &Meta) -> (Option<Uid>, Option<Gid>) {
    (
        Some(Uid::from_raw_unchecked(meta.uid)),
        Some(Gid::from_raw_unchecked(meta.gid)),
    )
}

/// Owner, then mode (chown clears setuid bits), xattrs and times, on an open file or directory.
fn apply_fd_meta<F: AsFd>(fd: F, meta: &Meta, path: &Path) -> Result<(), UnpackError> {
    let (u, g) = ids(meta);
    rfs::fchown(&fd, u, g).map_err(fs_err("chown", path))?;
    rfs::fchmod(&fd, Mode::from_raw_mode(meta.mode)).map_err(fs_err("chmod", path))?;
    for (k, v) in &meta.xattrs {
        set_xattr(
            rfs::fsetxattr(&fd, k.as_str(), v, XattrFlags::empty()),
            k,
            path,
        )?;
    }
    let t = Timestamps {
        last_access: meta.mtime,
        last_modification: meta.mtime,
    };
    rfs::futimens(&fd, &t).map_err(fs_err("setting times of", path))
}

/// The same for an entry that cannot be opened (symlink, device, fifo), by parent and name.
fn apply_at_meta(
    parent: &OwnedFd,
    name: &OsStr,
    meta: &Meta,
    path: &Path,
    chmod: bool,
) -> Result<(), UnpackError> {
    let (u, g) = ids(meta);
    rfs::chownat(parent, name, u, g, AtFlags::SYMLINK_NOFOLLOW).map_err(fs_err("chown", path))?;
    if chmod {
        // Following is safe: the entry was just created by us as a node, not a symlink.
        rfs::chmodat(
            parent,
            name,
            Mode::from_raw_mode(meta.mode),
            AtFlags::empty(),
        )
        .map_err(fs_err("chmod", path))?;
    }
    if !meta.xattrs.is_empty() {
        let mut p = PathBuf::from(format!("/proc/self/fd/{}", parent.as_raw_fd()));
        p.push(name);
        for (k, v) in &meta.xattrs {
            set_xattr(
                rfs::lsetxattr(&p, k.as_str(), v, XattrFlags::empty()),
                k,
                path,
            )?;
        }
    }
    let t = Timestamps {
        last_access: meta.mtime,
        last_modification: meta.mtime,
    };
    rfs::utimensat(parent, name, &t, AtFlags::SYMLINK_NOFOLLOW)
        .map_err(fs_err("setting times of", path))
}

/// xattrs the filesystem cannot store (user.* on some, security.* under some LSMs) are skipped,
/// as containerd and tar do; any other failure is an error.
fn set_xattr(r: rustix::io::Result<()>, key: &str, path: &Path) -> Result<(), UnpackError> {
    match r {
        Ok(()) => Ok(()),
        Err(Errno::NOTSUP | Errno::PERM) => {
            tracing::debug!(path = %path.display(), xattr = key, "filesystem refused xattr; skipped");
            Ok(())
        }
        Err(e) => Err(fs_err("setting xattr on", path)(e)),
    }
}

/// Removes the directory `name` in `parent` and everything under it, never following symlinks.
fn remove_dir_at(parent: &OwnedFd, name: &OsStr) -> Result<(), Errno> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rfs::openat(parent, name, flags, Mode::empty())?;
    let mut children = Vec::new();
    for entry in rfs::Dir::read_from(&fd)? {
        let entry = entry?;
        let n = entry.file_name().to_bytes();
        if n != b"." && n != b".." {
            children.push((
                OsStr::from_bytes(n).to_owned(),
                entry.file_type() == FileType::Directory,
            ));
        }
    }
    for (child, is_dir) in children {
        if is_dir {
            remove_dir_at(&fd, &child)?;
        } else {
            rfs::unlinkat(&fd, child.as_os_str(), AtFlags::empty())?;
        }
    }
    rfs::unlinkat(parent, name, AtFlags::REMOVEDIR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_cleaned_and_escapes_refused() {
        let c = |s: &str| clean_path(Path::new(s)).map(|v| v.iter().collect::<PathBuf>());
        assert_eq!(c("/etc/passwd").unwrap(), PathBuf::from("etc/passwd"));
        assert_eq!(c("./a/./b/../c").unwrap(), PathBuf::from("a/c"));
        assert!(c("../x").is_err());
        assert!(c("a/../../x").is_err());
        assert_eq!(c("./").unwrap(), PathBuf::new());
    }

    #[test]
    fn pax_times_parse() {
        assert_eq!(parse_pax_time("12.5").unwrap().tv_nsec, 500_000_000);
        assert_eq!(parse_pax_time("12").unwrap().tv_sec, 12);
        assert!(parse_pax_time("x").is_none());
    }
}
