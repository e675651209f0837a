//! The two decisions of an unpack that read the lower layers, taken after the fact.
//!
//! A layer's tar reads its lower layers for two things only (`lower.rs`): a directory the tar
//! leaves out but whose children it lists takes the lower layers' owner, mode and xattrs, and a
//! whiteout is written only for a name the lower layers show. Everything else a layer holds
//! depends on its own tar alone. So the layers of a pull are extracted side by side, each with
//! no lower layers in sight, noting where those two questions came up; once the layers below
//! one are complete, [`Deferred::settle`] answers them, bottom-up, with the same rules and the
//! same lookups as an extraction on top of them would have made.
//!
//! What comes out is the tree a sequential extraction makes, with one difference no reader
//! can see: a directory that received a whiteout keeps its own timestamps (sequential
//! extraction sets the listed directories' times after the last entry anyway).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, ResolveFlags, Timestamps};
use rustix::io::Errno;

use super::lower::{self, Lowers, Shown};
use super::unpack_error::UnpackError;

/// What an extraction without its lower layers left to decide.
#[derive(Debug, Default)]
pub struct Deferred {
    /// Directories made for a child's sake, by path; true when the tar listed the directory
    /// itself later (its entry then set owner and mode, and only the lower layers' xattrs
    /// that it did not set remain to copy, as they would have been copied first).
    parents: HashMap<PathBuf, bool>,
    /// Whiteouts, by the path they hide, whose target this layer did not hold when listed.
    whiteouts: Vec<PathBuf>,
    /// Bytes of paths held, for the extractor's bound on bookkeeping.
    bytes: usize,
}

/// What one remembered path costs beyond its bytes.
const OVERHEAD: usize = 64;

fn fs_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(Errno) -> UnpackError + 'a {
    move |e| UnpackError::Fs {
        op,
        path: path.display().to_string(),
        source: e.into(),
    }
}

fn in_root() -> ResolveFlags {
    ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS
}

fn comps(path: &Path) -> Vec<OsString> {
    path.iter().map(OsStr::to_owned).collect()
}

impl Deferred {
    /// Bytes of bookkeeping held so far.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// A directory made (0755, root's) for a child's sake at `path`.
    pub fn parent_made(&mut self, path: PathBuf) {
        self.bytes += path.as_os_str().len() + OVERHEAD;
        self.parents.insert(path, false);
    }

    /// The tar listed the directory `path` itself.
    pub fn dir_listed(&mut self, path: &Path) {
        if let Some(listed) = self.parents.get_mut(path) {
            *listed = true;
        }
    }

    /// A whiteout for `target`, which this layer does not hold (yet).
    pub fn whiteout(&mut self, target: PathBuf) {
        self.bytes += target.as_os_str().len() + OVERHEAD;
        self.whiteouts.push(target);
    }

    /// Whether nothing is left to decide.
    pub fn is_empty(&self) -> bool {
        self.parents.is_empty() && self.whiteouts.is_empty()
    }

    /// Answers what was left against `lowers` (the complete layers below, topmost first), in
    /// the layer tree `root`. Blocking.
    pub fn settle(&self, root: &Path, lowers: &Lowers) -> Result<(), UnpackError> {
        if self.is_empty() {
            return Ok(());
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let root = rfs::open(root, flags, Mode::empty()).map_err(fs_err("opening", root))?;
        for (path, listed) in &self.parents {
            settle_parent(&root, path, *listed, lowers)?;
        }
        for target in &self.whiteouts {
            settle_whiteout(&root, target, lowers)?;
        }
        Ok(())
    }
}

/// Opens the directory at `path` in the layer the way the extractor resolves parents (inside
/// the root, symlinks followed there); None when a later entry took it away.
fn open_dir(root: &OwnedFd, path: &Path, nofollow: bool) -> Result<Option<OwnedFd>, UnpackError> {
    let mut flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    if nofollow {
        flags |= OFlags::NOFOLLOW;
    }
    let path_or_root = if path.as_os_str().is_empty() {
        Path::new(".")
    } else {
        path
    };
    match rfs::openat2(root, path_or_root, flags, Mode::empty(), in_root()) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => Ok(None),
        Err(e) => Err(fs_err("opening", path)(e)),
    }
}

fn settle_parent(
    root: &OwnedFd,
    path: &Path,
    listed: bool,
    lowers: &Lowers,
) -> Result<(), UnpackError> {
    let Some(dir) = open_dir(root, path, true)? else {
        return Ok(()); // replaced by a later entry
    };
    let err = |e| fs_err("copying up the lower layers' parent of", path)(e);
    let Shown::Dir(src, st) = lowers.lookup(&comps(path)).map_err(err)? else {
        return Ok(()); // stays 0755 and root's, as made
    };
    if listed {
        lower::copy_xattrs(&src, &dir, true).map_err(err)
    } else {
        lower::copy_up(&src, &st, &dir).map_err(err)
    }
}

fn settle_whiteout(root: &OwnedFd, target: &Path, lowers: &Lowers) -> Result<(), UnpackError> {
    let (Some(parent), Some(name)) = (target.parent(), target.file_name()) else {
        return Ok(());
    };
    let Some(dir) = open_dir(root, parent, false)? else {
        return Ok(()); // a later entry replaced the directory, whiteout and all
    };
    match rfs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(_) => return Ok(()), // a later entry of this layer made it, which hides what is below
        Err(Errno::NOENT) => {}
        Err(e) => return Err(fs_err("stat", target)(e)),
    }
    match lowers.lookup(&comps(target)) {
        Ok(Shown::Nothing) => return Ok(()),
        Ok(_) => {}
        Err(e) => return Err(fs_err("looking in the lower layers for", target)(e)),
    }
    // The directory's times were set from its entry at the end of the extraction; a new
    // child must not move them.
    let st = rfs::fstat(&dir).map_err(fs_err("stat", parent))?;
    rfs::mknodat(
        &dir,
        name,
        FileType::CharacterDevice,
        Mode::empty(),
        rfs::makedev(0, 0),
    )
    .map_err(fs_err("creating whiteout", target))?;
    let times = Timestamps {
        last_access: rfs::Timespec {
            tv_sec: st.st_atime,
            tv_nsec: st.st_atime_nsec as _,
        },
        last_modification: rfs::Timespec {
            tv_sec: st.st_mtime,
            tv_nsec: st.st_mtime_nsec as _,
        },
    };
    rfs::futimens(&dir, &times).map_err(fs_err("setting times of", parent))
}
