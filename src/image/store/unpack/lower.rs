//! The layers below the one being unpacked, read the way overlayfs merges them.
//!
//! A layer is unpacked on top of its lower layers (they are its chain's parents, so they are
//! always unpacked first) for two questions only:
//! - a directory a layer does not list but whose children it does (`tmp/x` without `tmp/`)
//!   takes the owner, mode and xattrs of the directory the lower layers show at that path, as
//!   overlayfs copy-up and containerd's applier do, so `/tmp` keeps its 1777;
//! - a whiteout is written only for a name some lower layer shows: a whiteout with nothing
//!   below it would stay in a directory overlayfs does not merge, where readdir lists it and
//!   stat cannot find it.
//!
//! Lookups walk the lower layers topmost first, component by component, never following
//! symlinks: a whiteout or a non-directory hides everything below it, an opaque directory
//! hides the same path in deeper layers.

use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, Stat, XattrFlags};
use rustix::io::Errno;

const OPAQUE_XATTR: &str = "trusted.overlay.opaque";

/// What the lower layers show at a path.
pub enum Shown {
    Nothing,
    /// A directory, opened, with its status.
    Dir(OwnedFd, Box<Stat>),
    /// Anything else (file, symlink, device).
    Other,
}

/// The lower layers' directories, topmost first. Opened for each lookup rather than held:
/// an image may have hundreds of layers, and lookups are few (missing parents, whiteouts).
#[derive(Default)]
pub struct Lowers {
    layers: Vec<PathBuf>,
}

fn open_dir_at(dir: &OwnedFd, name: &OsString) -> Result<OwnedFd, Errno> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rfs::openat(dir, name.as_os_str(), flags, Mode::empty())
}

fn is_opaque(dir: &OwnedFd) -> bool {
    let mut v = [0u8; 1];
    matches!(rfs::fgetxattr(dir, OPAQUE_XATTR, &mut v), Ok(1) if v[0] == b'y')
}

/// An overlayfs whiteout: a character device numbered 0:0.
pub fn is_whiteout(st: &Stat) -> bool {
    FileType::from_raw_mode(st.st_mode) == FileType::CharacterDevice && st.st_rdev == 0
}

/// One layer's answer: the entry, or nothing here (and whether an opaque directory on the
/// way hides the deeper layers too).
enum Here {
    Found(Shown),
    Missing { opaque: bool },
}

impl Lowers {
    /// The lower layers of a layer, given topmost first.
    pub fn new(dirs: Vec<PathBuf>) -> Lowers {
        Lowers { layers: dirs }
    }

    /// What the merged lower layers show at `comps` (relative to the layer root, non-empty).
    pub fn lookup(&self, comps: &[OsString]) -> Result<Shown, Errno> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        for dir in &self.layers {
            let layer = rfs::open(dir, flags, Mode::empty())?;
            match lookup_in(&layer, comps)? {
                Here::Found(shown) => return Ok(shown),
                Here::Missing { opaque: true } => return Ok(Shown::Nothing),
                Here::Missing { opaque: false } => {}
            }
        }
        Ok(Shown::Nothing)
    }
}

fn lookup_in(layer: &OwnedFd, comps: &[OsString]) -> Result<Here, Errno> {
    let Some((last, parents)) = comps.split_last() else {
        return Ok(Here::Found(Shown::Other));
    };
    let mut dir = layer.try_clone().map_err(|_| Errno::BADF)?;
    let mut opaque = false;
    for c in parents {
        match rfs::statat(&dir, c.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Err(Errno::NOENT) => return Ok(Here::Missing { opaque }),
            Err(e) => return Err(e),
            Ok(st) if FileType::from_raw_mode(st.st_mode) != FileType::Directory => {
                // A whiteout, file or symlink here hides this path in every deeper layer.
                return Ok(Here::Found(Shown::Nothing));
            }
            Ok(_) => {
                dir = open_dir_at(&dir, c)?;
                opaque = is_opaque(&dir);
            }
        }
    }
    match rfs::statat(&dir, last.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
        Err(Errno::NOENT) => Ok(Here::Missing { opaque }),
        Err(e) => Err(e),
        Ok(st) if is_whiteout(&st) => Ok(Here::Found(Shown::Nothing)),
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => Ok(Here::Found(
            Shown::Dir(open_dir_at(&dir, last)?, Box::new(st)),
        )),
        Ok(_) => Ok(Here::Found(Shown::Other)),
    }
}

/// Gives the new directory `dst` the owner, mode (setuid, setgid and sticky bits included) and
/// xattrs of the lower directory `src`, as overlayfs copy-up does. `trusted.*` xattrs stay
/// behind: they belong to the overlay below (opaque markers), not to the directory.
pub fn copy_up(src: &OwnedFd, st: &Stat, dst: &OwnedFd) -> Result<(), Errno> {
    rfs::fchown(
        dst,
        Some(rfs::Uid::from_raw_unchecked(st.st_uid)),
        Some(rfs::Gid::from_raw_unchecked(st.st_gid)),
    )?;
    rfs::fchmod(dst, Mode::from_raw_mode(st.st_mode & 0o7777))?;
    copy_xattrs(src, dst, false)
}

/// Copies the xattrs of `src` but `trusted.*` onto `dst`; with `missing_only`, only those
/// `dst` does not have (what a tar entry set itself stays).
pub fn copy_xattrs(src: &OwnedFd, dst: &OwnedFd, missing_only: bool) -> Result<(), Errno> {
    let len = match rfs::flistxattr_query(src) {
        Ok(n) => n,
        Err(Errno::NOTSUP) => return Ok(()),
        Err(e) => return Err(e),
    };
    if len == 0 {
        return Ok(());
    }
    let mut names = vec![0u8; len];
    let n = rfs::flistxattr(src, &mut names[..])?;
    for name in names[..n].split(|b| *b == 0).filter(|n| !n.is_empty()) {
        if name.starts_with(b"trusted.") {
            continue;
        }
        let name = OsStr::from_bytes(name);
        if missing_only && rfs::fgetxattr_query(dst, name).is_ok() {
            continue;
        }
        let size = match rfs::fgetxattr_query(src, name) {
            Ok(s) => s,
            Err(Errno::NODATA) => continue,
            Err(e) => return Err(e),
        };
        let mut value = vec![0u8; size];
        let got = rfs::fgetxattr(src, name, &mut value[..])?;
        match rfs::fsetxattr(dst, name, &value[..got], XattrFlags::empty()) {
            Ok(()) | Err(Errno::NOTSUP | Errno::PERM) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
