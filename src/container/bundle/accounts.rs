//! The image's /etc/passwd and /etc/group, read to resolve the container's user: the only
//! files of an image the daemon opens on the host.
//!
//! The image's author decides what is there, so nothing but a regular file is ever opened. The
//! path is resolved inside the root filesystem (`RESOLVE_IN_ROOT`: a symlink in the image,
//! absolute or not, points into the image, as containerd resolves it in scope) and opened with
//! `O_PATH`, which runs no driver's open and never waits; only once that descriptor is a regular
//! file of at most `MAX_BYTES` is it reopened for reading (`O_NONBLOCK`, through
//! `/proc/self/fd`, so the inode checked is the inode read). A FIFO there would have blocked
//! the open forever, and a device node (a tty, a watchdog, a disk) would have been opened by root
//! on the host: both are the request's InvalidArgument instead, naming the file and its type.
//! Called on the blocking pool, never on the async workers.

use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};

use crate::container::ContainerError;

/// The most of an image's /etc/passwd or /etc/group crust reads.
pub const MAX_BYTES: u64 = 4 << 20;

/// The two files' text, empty for a file the image does not have.
#[derive(Debug, Default, Clone)]
pub struct Accounts {
    pub passwd: String,
    pub group: String,
}

impl Accounts {
    pub fn files(&self) -> crate::oci::AccountFiles<'_> {
        crate::oci::AccountFiles {
            passwd: &self.passwd,
            group: &self.group,
        }
    }
}

/// Reads both files of the root filesystem at `rootfs`. Blocking.
pub fn read(rootfs: &Path) -> Result<Accounts, ContainerError> {
    let root = std::fs::File::open(rootfs).map_err(|source| ContainerError::Io {
        what: "opening the root filesystem",
        path: rootfs.to_owned(),
        source,
    })?;
    Ok(Accounts {
        passwd: read_in_root(root.as_fd(), "etc/passwd")?,
        group: read_in_root(root.as_fd(), "etc/group")?,
    })
}

fn read_in_root(root: std::os::fd::BorrowedFd<'_>, path: &str) -> Result<String, ContainerError> {
    let shown = PathBuf::from("/").join(path);
    let io = |source: std::io::Error| ContainerError::Io {
        what: "reading the image's",
        path: shown.clone(),
        source,
    };
    let found = rustix::fs::openat2(
        root,
        path,
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    );
    let at: OwnedFd = match found {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => return Ok(String::new()),
        Err(e) => return Err(io(e.into())),
    };
    let st = rustix::fs::fstat(&at).map_err(|e| io(e.into()))?;
    let kind = FileType::from_raw_mode(st.st_mode);
    if kind != FileType::RegularFile {
        return Err(ContainerError::Invalid(format!(
            "the image's {} is {}, not a regular file: crust reads it to resolve the \
             container's user and opens nothing else there",
            shown.display(),
            kind_name(kind)
        )));
    }
    let size = st.st_size.max(0) as u64;
    if size > MAX_BYTES {
        return Err(too_large(&shown, size));
    }
    // The inode just checked, opened for reading: the path is not looked up again.
    let file = rustix::fs::open(
        format!("/proc/self/fd/{}", at.as_raw_fd()),
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map(std::fs::File::from)
    .map_err(|e| io(e.into()))?;
    let mut bytes = Vec::with_capacity(size as usize);
    // One byte past the cap tells a file that grew since its fstat from one that did not.
    (&file)
        .take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(too_large(&shown, bytes.len() as u64));
    }
    String::from_utf8(bytes).map_err(|_| {
        ContainerError::Invalid(format!("the image's {} is not UTF-8 text", shown.display()))
    })
}

fn too_large(path: &Path, size: u64) -> ContainerError {
    ContainerError::Invalid(format!(
        "the image's {} is {size} bytes, more than the {} MiB crust reads of it",
        path.display(),
        MAX_BYTES >> 20
    ))
}

fn kind_name(kind: FileType) -> &'static str {
    match kind {
        FileType::Fifo => "a FIFO",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Socket => "a socket",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symbolic link",
        _ => "not a file crust knows",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("etc")).unwrap();
        dir
    }

    #[test]
    fn regular_files_are_read_and_missing_ones_are_empty() {
        let dir = root();
        std::fs::write(dir.path().join("etc/passwd"), "root:x:0:0::/:/bin/sh\n").unwrap();
        let a = read(dir.path()).unwrap();
        assert_eq!(a.passwd, "root:x:0:0::/:/bin/sh\n");
        assert_eq!(a.group, "");
    }

    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_writer() {
        let dir = root();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            dir.path().join("etc/group"),
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let e = read(dir.path()).unwrap_err();
        assert!(matches!(e, ContainerError::Invalid(_)), "{e}");
        assert!(e.to_string().contains("/etc/group is a FIFO"), "{e}");
    }

    #[test]
    fn a_symlink_resolves_inside_the_root_and_a_large_file_is_refused() {
        let dir = root();
        std::fs::write(dir.path().join("etc/real"), "x:x:1:1::/:/bin/sh\n").unwrap();
        std::os::unix::fs::symlink("/etc/real", dir.path().join("etc/passwd")).unwrap();
        assert_eq!(read(dir.path()).unwrap().passwd, "x:x:1:1::/:/bin/sh\n");
        let big = std::fs::File::create(dir.path().join("etc/group")).unwrap();
        big.set_len(MAX_BYTES + 1).unwrap();
        let e = read(dir.path()).unwrap_err();
        assert!(e.to_string().contains("more than the 4 MiB"), "{e}");
    }
}
