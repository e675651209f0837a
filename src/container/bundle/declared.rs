//! The volumes an image's config declares (`Volumes`, a Dockerfile's `VOLUME`), made as
//! `image_volumes` says, for each one no request mount is at (kubelet's volume wins, as in
//! containerd and CRI-O):
//!
//! - `bind`, containerd's default: a directory of the container's own under its layer
//!   directory, `declared/<n>` for the image's `n`th volume (in path order), holding a copy of
//!   what the image has at that path (containerd's `WithVolumes` / `copyExistingContents`):
//!   owners, modes, times, xattrs (but `security.selinux`), symlinks as they are, hard links as
//!   links, devices and fifos; an empty directory when the image has nothing there. It is bound
//!   at the path read-write like a kubelet volume, so the path is writable under a read-only
//!   root and what is written there stays out of the writable layer (and its usage figure).
//!   It goes with the layer directory (`rootfs::remove`), on RemoveContainer or a failed create.
//! - `mkdir`, CRI-O's default: an empty directory in the root filesystem where the image has
//!   none; it is the root filesystem's, read-only under a read-only root.
//! - `ignore`: nothing.
//!
//! The copy is read from the mounted root filesystem, resolved inside it (`RESOLVE_IN_ROOT`: a
//! symlink of the image cannot lead out of it) and walked by file descriptor without following
//! a link. In a pod with a user namespace the root filesystem shows the image's files already
//! under the pod's host ids (`idmap`), so the copy is stored under them and a plain bind shows
//! them as the image has them; a directory the image lacks belongs to the pod's root.

use std::collections::HashMap;
use std::ffi::{CStr, OsStr};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Gid, Mode, OFlags, ResolveFlags, Stat, Uid};
use rustix::io::Errno;

use crate::config::ImageVolumes;
use crate::container::{ContainerError, rootfs};
use crate::model::{MountSpec, Propagation};

/// Where the copies of a container's declared volumes are, under its layer directory.
const DIR: &str = "declared";

/// Makes the image's declared `volumes` as `mode` says; returns the bind mounts the spec
/// needs (none but with `bind`). `owner` is the host uid and gid of the pod's root in a pod
/// with a user namespace. Blocking.
pub fn make(
    mode: ImageVolumes,
    layout: &rootfs::Layout,
    volumes: impl Iterator<Item = impl AsRef<str>>,
    mounts: &[MountSpec],
    owner: Option<(u32, u32)>,
) -> Result<Vec<MountSpec>, ContainerError> {
    let mut binds = Vec::new();
    for (n, volume) in volumes.enumerate() {
        let volume = volume.as_ref();
        let Some(path) = clean(volume) else {
            tracing::warn!(
                volume,
                "the image declares a volume at no usable path; skipped"
            );
            continue;
        };
        if mounts
            .iter()
            .any(|m| clean(&m.container_path).as_ref() == Some(&path))
        {
            continue;
        }
        match mode {
            ImageVolumes::Ignore => {}
            ImageVolumes::Mkdir => {
                if let Err(e) = mkdir_in_root(&layout.rootfs, &path) {
                    tracing::warn!(volume, error = %e, "creating the image's volume directory");
                }
            }
            ImageVolumes::Bind => {
                let dir = layout.dir.join(DIR).join(n.to_string());
                copy_volume(&layout.rootfs, &path, &dir, owner).map_err(|source| {
                    ContainerError::Io {
                        what: "copying the image's content at volume",
                        path: path.clone(),
                        source,
                    }
                })?;
                binds.push(MountSpec {
                    container_path: path.to_string_lossy().into_owned(),
                    host_path: dir.to_string_lossy().into_owned(),
                    readonly: false,
                    propagation: Propagation::Private,
                    ..Default::default()
                });
            }
        }
    }
    Ok(binds)
}

/// `path` as an absolute path without `.` or `..` (a `..` climbs no higher than the root, as
/// Go's `path.Clean` of an absolute path); `None` for the root itself, which no volume can be.
fn clean(path: &str) -> Option<PathBuf> {
    let mut out = PathBuf::from("/");
    for part in Path::new(path).components() {
        match part {
            Component::Normal(name) => out.push(name),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    (out != Path::new("/")).then_some(out)
}

/// The root filesystem's directories on the way to `path`, made where missing, never through a
/// symlink out of it.
fn mkdir_in_root(root: &Path, path: &Path) -> std::io::Result<()> {
    let mut dir: OwnedFd = std::fs::File::open(root)?.into();
    for part in path.components().skip(1) {
        match rfs::mkdirat(&dir, part.as_os_str(), Mode::from_raw_mode(0o755)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        dir = rfs::openat2(
            &dir,
            part.as_os_str(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            in_root(),
        )?;
    }
    Ok(())
}

fn in_root() -> ResolveFlags {
    ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS
}

/// Makes `dir` and copies into it what the image has at `path` (resolved inside `root`), the
/// directory's own owner, mode and times included; with nothing there, `dir` stays empty,
/// 0755 and owned by `owner` (else root).
fn copy_volume(
    root: &Path,
    path: &Path,
    dir: &Path,
    owner: Option<(u32, u32)>,
) -> std::io::Result<()> {
    if let Some(parent) = dir.parent() {
        crate::durable::create_dir_all(parent)?;
    }
    crate::durable::create_dir(dir)?;
    let dst = open_dir(dir)?;
    let root_fd: OwnedFd = std::fs::File::open(root)?.into();
    let relative = path.strip_prefix("/").unwrap_or(path);
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let src = match rfs::openat2(&root_fd, relative, flags, Mode::empty(), in_root()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => {
            if let Some((uid, gid)) = owner {
                rfs::fchown(&dst, Some(uid_of(uid)), Some(gid_of(gid)))?;
            }
            return Ok(());
        }
        Err(Errno::NOTDIR) => {
            return Err(std::io::Error::other(
                "the image has something other than a directory there",
            ));
        }
        Err(e) => return Err(e.into()),
    };
    let mut copy = Copy {
        dst_root: dst.try_clone()?,
        links: HashMap::new(),
    };
    copy.dir(&src, &dst, Path::new(""))?;
    finish(&src, &dst, &rfs::fstat(&src)?)
}

fn open_dir(dir: &Path) -> std::io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rfs::open(dir, flags, Mode::empty())?)
}

/// One volume's copy: where it goes, and the files of more than one link already copied (by
/// device and inode), each with its path in the copy.
struct Copy {
    dst_root: OwnedFd,
    links: HashMap<(u64, u64), PathBuf>,
}

impl Copy {
    /// Copies the entries of `src` into `dst`; `at` is `dst`'s path in the copy.
    fn dir(&mut self, src: &OwnedFd, dst: &OwnedFd, at: &Path) -> std::io::Result<()> {
        for entry in rfs::Dir::read_from(src)? {
            let entry = entry?;
            let name = entry.file_name();
            if matches!(name.to_bytes(), b"." | b"..") {
                continue;
            }
            self.entry(src, dst, name, &at.join(OsStr::from_bytes(name.to_bytes())))?;
        }
        Ok(())
    }

    fn entry(
        &mut self,
        src: &OwnedFd,
        dst: &OwnedFd,
        name: &CStr,
        at: &Path,
    ) -> std::io::Result<()> {
        let st = rfs::statat(src, name, AtFlags::SYMLINK_NOFOLLOW)?;
        let nofollow = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => {
                rfs::mkdirat(dst, name, Mode::from_raw_mode(0o700))?;
                let from = rfs::openat(src, name, nofollow | OFlags::DIRECTORY, Mode::empty())?;
                let to = rfs::openat(dst, name, nofollow | OFlags::DIRECTORY, Mode::empty())?;
                self.dir(&from, &to, at)?;
                finish(&from, &to, &st)
            }
            FileType::RegularFile => {
                let key = (st.st_dev, st.st_ino);
                if st.st_nlink > 1 {
                    if let Some(first) = self.links.get(&key) {
                        rfs::linkat(&self.dst_root, first, dst, name, AtFlags::empty())?;
                        return Ok(());
                    }
                }
                let from = rfs::openat(src, name, nofollow, Mode::empty())?;
                let create = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW;
                let to = rfs::openat(
                    dst,
                    name,
                    create | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                )?;
                let (mut input, mut output) = (std::fs::File::from(from), std::fs::File::from(to));
                std::io::copy(&mut input, &mut output)?;
                finish(&input.into(), &output.into(), &st)?;
                if st.st_nlink > 1 {
                    self.links.insert(key, at.to_owned());
                }
                Ok(())
            }
            FileType::Symlink => {
                let target = rfs::readlinkat(src, name, Vec::new())?;
                rfs::symlinkat(target.as_c_str(), dst, name)?;
                finish_at(dst, name, &st, false)
            }
            kind @ (FileType::CharacterDevice | FileType::BlockDevice | FileType::Fifo) => {
                let mode = Mode::from_raw_mode(st.st_mode & 0o7777);
                rfs::mknodat(dst, name, kind, mode, st.st_rdev)?;
                finish_at(dst, name, &st, true)
            }
            // A socket is a listener's, not content; the runtimes copy none either.
            FileType::Socket | FileType::Unknown => Ok(()),
        }
    }
}

/// Owner, xattrs (a chown drops a file capability, so they come after it), mode (after the
/// chown too, which clears setuid bits) and times, from `st` and `src` onto `dst`.
fn finish(src: &OwnedFd, dst: &OwnedFd, st: &Stat) -> std::io::Result<()> {
    rfs::fchown(dst, Some(uid_of(st.st_uid)), Some(gid_of(st.st_gid)))?;
    copy_xattrs(src, dst)?;
    rfs::fchmod(dst, Mode::from_raw_mode(st.st_mode & 0o7777))?;
    rfs::futimens(dst, &times(st))?;
    Ok(())
}

/// The same for an entry that cannot be opened (a symlink, a device, a fifo), by its name.
fn finish_at(dir: &OwnedFd, name: &CStr, st: &Stat, chmod: bool) -> std::io::Result<()> {
    let (uid, gid) = (Some(uid_of(st.st_uid)), Some(gid_of(st.st_gid)));
    rfs::chownat(dir, name, uid, gid, AtFlags::SYMLINK_NOFOLLOW)?;
    if chmod {
        // Not a symlink: the node was made just now, by mknodat.
        let mode = Mode::from_raw_mode(st.st_mode & 0o7777);
        rfs::chmodat(dir, name, mode, AtFlags::empty())?;
    }
    rfs::utimensat(dir, name, &times(st), AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(())
}

fn times(st: &Stat) -> rfs::Timestamps {
    rfs::Timestamps {
        last_access: rfs::Timespec {
            tv_sec: st.st_atime,
            tv_nsec: st.st_atime_nsec as _,
        },
        last_modification: rfs::Timespec {
            tv_sec: st.st_mtime,
            tv_nsec: st.st_mtime_nsec as _,
        },
    }
}

fn uid_of(id: u32) -> Uid {
    Uid::from_raw(id)
}

fn gid_of(id: u32) -> Gid {
    Gid::from_raw(id)
}

/// The xattrs of `src` onto `dst`, but `security.selinux` (the container's label is not the
/// image's, as containerd leaves it out) and `trusted.*` (overlayfs' own). One the file
/// system refuses is left out, as containerd and tar leave it.
fn copy_xattrs(src: &OwnedFd, dst: &OwnedFd) -> std::io::Result<()> {
    let mut names = vec![0u8; 4096];
    let n = loop {
        match rfs::flistxattr(src, &mut names[..]) {
            Ok(n) => break n,
            Err(Errno::RANGE) if names.len() < 1 << 20 => names.resize(names.len() * 4, 0),
            Err(Errno::NOTSUP) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    };
    for name in names[..n].split(|b| *b == 0).filter(|n| !n.is_empty()) {
        if name == b"security.selinux" || name.starts_with(b"trusted.") {
            continue;
        }
        let name = OsStr::from_bytes(name);
        let mut value = vec![0u8; 64 << 10];
        let got = match rfs::fgetxattr(src, name, &mut value[..]) {
            Ok(got) => got,
            Err(Errno::NODATA) => continue,
            Err(e) => return Err(e.into()),
        };
        match rfs::fsetxattr(dst, name, &value[..got], rfs::XattrFlags::empty()) {
            Ok(()) | Err(Errno::NOTSUP | Errno::PERM) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn layout(dir: &Path) -> rootfs::Layout {
        rootfs::Layout {
            upper: dir.join("upper"),
            work: dir.join("work"),
            rootfs: dir.join("rootfs"),
            dir: dir.to_owned(),
        }
    }

    fn mount_at(path: &str) -> MountSpec {
        MountSpec {
            container_path: path.into(),
            host_path: "/host".into(),
            ..Default::default()
        }
    }

    #[test]
    fn paths_are_cleaned_as_go_cleans_them() {
        assert_eq!(clean("/data/"), Some(PathBuf::from("/data")));
        assert_eq!(clean("data//x/."), Some(PathBuf::from("/data/x")));
        assert_eq!(clean("/../a/../b"), Some(PathBuf::from("/b")));
        assert_eq!(clean("/"), None);
        assert_eq!(clean("/a/.."), None);
    }

    /// The copy keeps content, modes, links and owners, stays inside the root filesystem when
    /// the image's path is a symlink out of it, and leaves out the volumes a mount covers.
    #[test]
    fn bind_copies_the_image_s_content_and_skips_covered_volumes() {
        let t = tempfile::tempdir().unwrap();
        let l = layout(t.path());
        let data = l.rootfs.join("data");
        fs::create_dir_all(data.join("sub")).unwrap();
        fs::write(data.join("seed"), b"seeded").unwrap();
        fs::set_permissions(data.join("seed"), fs::Permissions::from_mode(0o640)).unwrap();
        fs::set_permissions(&data, fs::Permissions::from_mode(0o750)).unwrap();
        fs::hard_link(data.join("seed"), data.join("sub/again")).unwrap();
        std::os::unix::fs::symlink("../seed", data.join("sub/link")).unwrap();
        // /escape leads to the host's /etc: inside the root it is the root's own /etc.
        std::os::unix::fs::symlink("/etc", l.rootfs.join("escape")).unwrap();
        fs::create_dir_all(l.rootfs.join("etc")).unwrap();
        fs::write(l.rootfs.join("etc/mine"), b"root's").unwrap();
        let volumes = ["/data", "/escape", "/missing/", "/kubelet"];
        let mounts = [mount_at("/kubelet/")];
        let binds = make(ImageVolumes::Bind, &l, volumes.iter(), &mounts, None).unwrap();
        let at: Vec<_> = binds.iter().map(|b| b.container_path.as_str()).collect();
        assert_eq!(at, ["/data", "/escape", "/missing"]);
        assert!(binds.iter().all(|b| !b.readonly));
        let copy = Path::new(&binds[0].host_path);
        assert_eq!(copy, t.path().join("declared/0"));
        assert_eq!(fs::read(copy.join("seed")).unwrap(), b"seeded");
        let mode = |p: &Path| fs::symlink_metadata(p).unwrap().mode() & 0o7777;
        assert_eq!(mode(&copy.join("seed")), 0o640);
        assert_eq!(mode(copy), 0o750);
        let ino = |p: &Path| fs::metadata(p).unwrap().ino();
        assert_eq!(ino(&copy.join("seed")), ino(&copy.join("sub/again")));
        assert_eq!(
            fs::read_link(copy.join("sub/link")).unwrap(),
            Path::new("../seed")
        );
        let escaped = Path::new(&binds[1].host_path);
        assert_eq!(fs::read(escaped.join("mine")).unwrap(), b"root's");
        let missing = Path::new(&binds[2].host_path);
        assert_eq!(fs::read_dir(missing).unwrap().count(), 0);
        assert!(!t.path().join("declared/3").exists(), "covered: no copy");
    }

    /// Something other than a directory at the path fails the create, naming the volume, as
    /// containerd's copy fails; a directory the image lacks goes to the pod's root.
    #[test]
    fn a_file_at_the_path_is_refused_and_a_missing_one_is_the_pod_root_s() {
        let t = tempfile::tempdir().unwrap();
        let l = layout(t.path());
        fs::create_dir_all(&l.rootfs).unwrap();
        fs::write(l.rootfs.join("file"), b"x").unwrap();
        let err = make(ImageVolumes::Bind, &l, ["/file"].iter(), &[], None).unwrap_err();
        assert!(err.to_string().contains("volume /file"), "{err}");
        let me = (
            rustix::process::getuid().as_raw(),
            rustix::process::getgid().as_raw(),
        );
        // A container of its own: the failed one's layer directory goes with it.
        let l = layout(&t.path().join("next"));
        fs::create_dir_all(&l.rootfs).unwrap();
        let binds = make(ImageVolumes::Bind, &l, ["/new"].iter(), &[], Some(me)).unwrap();
        let made = fs::metadata(&binds[0].host_path).unwrap();
        assert_eq!(
            (made.uid(), made.gid(), made.mode() & 0o7777),
            (me.0, me.1, 0o755)
        );
    }

    #[test]
    fn mkdir_makes_the_directory_and_ignore_nothing() {
        let t = tempfile::tempdir().unwrap();
        let l = layout(t.path());
        fs::create_dir_all(&l.rootfs).unwrap();
        let volumes = ["/var/lib/db"];
        let none = make(ImageVolumes::Ignore, &l, volumes.iter(), &[], None).unwrap();
        assert!(none.is_empty() && !l.rootfs.join("var").exists());
        let none = make(ImageVolumes::Mkdir, &l, volumes.iter(), &[], None).unwrap();
        assert!(none.is_empty() && l.rootfs.join("var/lib/db").is_dir());
        assert!(!t.path().join(DIR).exists());
    }
}
