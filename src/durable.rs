//! Every durable step the daemon takes on the node goes through here: a directory made or
//! removed, a file written, renamed or removed, a mount or an unmount; and, named by the caller
//! right after it happened, a step done by someone else (a cgroup made or removed by
//! libcgroups, a CNI plugin's ADD or DEL, a call the pod's monitor answered, a monitor started).
//!
//! Each of them is a crash point (debug builds; `crate::failpoint`): a test can kill the daemon
//! right after the Nth durable step of an RPC, for every N, so no step can be added without the
//! crash after it being tried. `tests/architecture.rs` keeps the daemon's rooms from making such
//! changes any other way. The calls take the caller's location (`#[track_caller]`), so a crash
//! point is named by the line of the verb that took the step.
//!
//! What is not here on purpose: the monitor's own steps (it is another process, with failpoints
//! of its own), files written inside a directory that is then renamed into place (the rename is
//! the step), and reads.

use std::fmt::Display;
use std::io;
use std::path::Path;

use nix::NixPath;
use nix::mount::{MntFlags, MsFlags};

/// After `step` happened to `what` (or was tried: a failed step changed nothing, and killing
/// there is as good as after the step before).
#[track_caller]
pub fn step(kind: &'static str, what: impl Display) {
    #[cfg(debug_assertions)]
    crate::failpoint::crash_point(kind, &what, std::panic::Location::caller());
    #[cfg(not(debug_assertions))]
    let _ = (kind, what);
}

#[track_caller]
fn after<T, E>(kind: &'static str, path: &Path, r: Result<T, E>) -> Result<T, E> {
    step(kind, path.display());
    r
}

#[track_caller]
pub fn create_dir_all(path: impl AsRef<Path>) -> io::Result<()> {
    let path = path.as_ref();
    after("mkdir", path, std::fs::create_dir_all(path))
}

#[track_caller]
pub fn create_dir(path: impl AsRef<Path>) -> io::Result<()> {
    let path = path.as_ref();
    after("mkdir", path, std::fs::create_dir(path))
}

#[track_caller]
pub fn remove_dir_all(path: impl AsRef<Path>) -> io::Result<()> {
    let path = path.as_ref();
    after("rmdir -r", path, std::fs::remove_dir_all(path))
}

#[track_caller]
pub fn remove_dir(path: impl AsRef<Path>) -> io::Result<()> {
    let path = path.as_ref();
    after("rmdir", path, std::fs::remove_dir(path))
}

#[track_caller]
pub fn remove_file(path: impl AsRef<Path>) -> io::Result<()> {
    let path = path.as_ref();
    after("unlink", path, std::fs::remove_file(path))
}

#[track_caller]
pub fn rename(from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<()> {
    let (from, to) = (from.as_ref(), to.as_ref());
    after("rename", to, std::fs::rename(from, to))
}

/// Writes a whole file in place (not atomically: for files whose readers only come after the
/// step that publishes them, such as a pod's hosts file before its record says Ready).
#[track_caller]
pub fn write(path: impl AsRef<Path>, bytes: impl AsRef<[u8]>) -> io::Result<()> {
    let path = path.as_ref();
    after("write", path, std::fs::write(path, bytes))
}

#[track_caller]
pub fn symlink(target: impl AsRef<Path>, link: impl AsRef<Path>) -> io::Result<()> {
    let (target, link) = (target.as_ref(), link.as_ref());
    after("symlink", link, std::os::unix::fs::symlink(target, link))
}

#[track_caller]
pub fn hard_link(from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<()> {
    let (from, to) = (from.as_ref(), to.as_ref());
    after("link", to, std::fs::hard_link(from, to))
}

/// Creates a new file for writing (`create_new`): the caller writes it, and a crash after this
/// step leaves it empty or partly written.
#[track_caller]
pub fn create_new(path: impl AsRef<Path>) -> io::Result<std::fs::File> {
    let path = path.as_ref();
    after(
        "create",
        path,
        std::fs::File::options()
            .write(true)
            .create_new(true)
            .open(path),
    )
}

/// Opens a log file for appending, creating it when missing.
#[track_caller]
pub fn open_append(path: impl AsRef<Path>) -> io::Result<std::fs::File> {
    let path = path.as_ref();
    after(
        "create",
        path,
        std::fs::File::options()
            .create(true)
            .append(true)
            .open(path),
    )
}

/// Opens a lock file, creating it when missing. Not a crash point: a lock file's existence is
/// no state (an empty file nobody reads; the lock dies with its holder).
pub fn open_lock(path: impl AsRef<Path>) -> io::Result<std::fs::File> {
    std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
}

/// `mount(2)`, as nix takes it.
#[track_caller]
pub fn mount<S, F, D>(
    source: Option<&S>,
    target: impl AsRef<Path>,
    fstype: Option<&F>,
    flags: MsFlags,
    data: Option<&D>,
) -> nix::Result<()>
where
    S: ?Sized + NixPath,
    F: ?Sized + NixPath,
    D: ?Sized + NixPath,
{
    let target = target.as_ref();
    after(
        "mount",
        target,
        nix::mount::mount(source, target, fstype, flags, data),
    )
}

/// `umount2(2)`.
#[track_caller]
pub fn umount2(target: impl AsRef<Path>, flags: MntFlags) -> nix::Result<()> {
    let target = target.as_ref();
    after("umount", target, nix::mount::umount2(target, flags))
}

/// How `remove_dir_all_on_one_mount` ended.
#[derive(Debug, PartialEq, Eq)]
pub enum OneMount {
    /// The tree is gone (or was not there).
    Removed,
    /// A directory below is on another mount: nothing at or under it was touched (what was
    /// already deleted beside it stays deleted).
    Mounted(std::path::PathBuf),
    /// Deeper than the walk goes, or the kernel gives no mount ids (before 5.8).
    Unwalked,
}

/// Deletes `path` and everything under it without entering another mount: each directory's
/// mount id is compared with `path`'s before anything in it is deleted. The way to delete a
/// tree that may have something mounted under it without reading the whole mount table; an
/// unlink or rmdir of a mount point itself fails (EBUSY) and deletes nothing.
#[track_caller]
pub fn remove_dir_all_on_one_mount(path: impl AsRef<Path>) -> io::Result<OneMount> {
    let path = path.as_ref();
    let r = one_mount::remove(path);
    after("rmdir -r", path, r)
}

mod one_mount {
    use std::ffi::{CStr, OsStr};
    use std::io;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
    use rustix::fs::{AtFlags, CWD, Dir, FileType, Mode, OFlags, StatxFlags};
    use rustix::io::Errno;

    use super::OneMount;

    /// Deeper trees go to the caller's slower way (each level holds a descriptor).
    const MAX_DEPTH: usize = 64;

    pub fn remove(path: &Path) -> io::Result<OneMount> {
        let dir = match open_dir(CWD, path) {
            Err(Errno::NOENT) => return Ok(OneMount::Removed),
            r => r?,
        };
        let Some(mount) = mount_id(&dir)? else {
            return Ok(OneMount::Unwalked);
        };
        match empty(&dir, mount, 0)? {
            OneMount::Removed => {}
            OneMount::Mounted(below) => return Ok(OneMount::Mounted(path.join(below))),
            OneMount::Unwalked => return Ok(OneMount::Unwalked),
        }
        drop(dir);
        unlink(CWD, path, AtFlags::REMOVEDIR)?;
        Ok(OneMount::Removed)
    }

    fn open_dir<P: rustix::path::Arg>(at: BorrowedFd, path: P) -> rustix::io::Result<OwnedFd> {
        rustix::fs::openat(
            at,
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
    }

    /// unlinkat(2); what is already gone is fine.
    fn unlink<P: rustix::path::Arg>(at: BorrowedFd, path: P, flags: AtFlags) -> io::Result<()> {
        match rustix::fs::unlinkat(at, path, flags) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn mount_id(dir: &OwnedFd) -> io::Result<Option<u64>> {
        let st = rustix::fs::statx(dir, c"", AtFlags::EMPTY_PATH, StatxFlags::MNT_ID)?;
        Ok((st.stx_mask & StatxFlags::MNT_ID.bits() != 0).then_some(st.stx_mnt_id))
    }

    /// Deletes what `dir` holds, which is on mount `mount`: `Removed` once it is empty,
    /// `Mounted` with the relative path of a directory on another mount.
    fn empty(dir: &OwnedFd, mount: u64, depth: usize) -> io::Result<OneMount> {
        let mut entries = Dir::read_from(dir)?;
        while let Some(entry) = entries.read() {
            let entry = entry?;
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            let is_dir = match entry.file_type() {
                FileType::Directory => true,
                FileType::Unknown => rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
                    .map(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory)?,
                _ => false,
            };
            if !is_dir {
                unlink(dir.as_fd(), name, AtFlags::empty())?;
                continue;
            }
            match subdir(dir.as_fd(), name, mount, depth)? {
                OneMount::Removed => {}
                OneMount::Mounted(below) => {
                    return Ok(OneMount::Mounted(relative(name).join(below)));
                }
                OneMount::Unwalked => return Ok(OneMount::Unwalked),
            }
        }
        Ok(OneMount::Removed)
    }

    /// Empties and removes the directory `name` in `parent`, unless it is on another mount.
    fn subdir(parent: BorrowedFd, name: &CStr, mount: u64, depth: usize) -> io::Result<OneMount> {
        if depth == MAX_DEPTH {
            return Ok(OneMount::Unwalked);
        }
        let child = open_dir(parent, name)?;
        if mount_id(&child)? != Some(mount) {
            return Ok(OneMount::Mounted(std::path::PathBuf::new()));
        }
        let walk = empty(&child, mount, depth + 1)?;
        drop(child);
        if walk == OneMount::Removed {
            unlink(parent, name, AtFlags::REMOVEDIR)?;
        }
        Ok(walk)
    }

    fn relative(name: &CStr) -> &Path {
        Path::new(OsStr::from_bytes(name.to_bytes()))
    }
}
