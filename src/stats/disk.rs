//! Disk usage: the bytes and inodes a directory tree holds (a container's writable layer, the
//! container layers directory for ImageFsInfo), and the size and device of the filesystem a
//! directory is on (cAdvisor's `container_fs_*` series).
//!
//! The walk stays on the starting directory's device: a running container's root filesystem is
//! an overlay mounted inside its layer directory (and image volumes next to it), and crossing
//! into those mounts would count the image's layers again for every container.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Bytes (allocated blocks) and inodes under `dir`, hard-linked inodes counted once, mounts
/// under it left out.
pub fn disk_usage(dir: &Path) -> io::Result<(u64, u64)> {
    let top = fs::symlink_metadata(dir)?;
    let device = top.dev();
    let mut seen = HashSet::new();
    let (mut bytes, mut inodes) = (top.blocks() * 512, 1u64);
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let entries = match fs::read_dir(&d) {
            Ok(e) => e,
            // Removed while walking (a container going away): nothing left to count.
            Err(e) if e.kind() == io::ErrorKind::NotFound && d != dir => continue,
            Err(e) => return Err(e),
        };
        for e in entries {
            let e = e?;
            let m = match e.metadata() {
                Ok(m) => m,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            if m.dev() != device {
                continue;
            }
            if m.is_dir() {
                bytes += m.blocks() * 512;
                inodes += 1;
                stack.push(e.path());
            } else if m.nlink() <= 1 || seen.insert(m.ino()) {
                bytes += m.blocks() * 512;
                inodes += 1;
            }
        }
    }
    Ok((bytes, inodes))
}

/// The filesystem a directory is on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filesystem {
    /// What mounted it (`/dev/vda1`, `overlay`, `tmpfs`): cAdvisor's `device` label.
    pub device: String,
    pub capacity: u64,
    pub available: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

/// Size, free space and device of the filesystem holding `dir`.
pub fn filesystem(dir: &Path) -> io::Result<Filesystem> {
    let mut fs = filesystem_usage(dir)?;
    let dev = fs::metadata(dir)?.dev();
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    fs.device = mount_source(
        &mountinfo,
        nix::sys::stat::major(dev),
        nix::sys::stat::minor(dev),
    )
    .unwrap_or_default();
    Ok(fs)
}

/// Size and free space of the filesystem holding `dir`, without its device: the mount table
/// that names it costs milliseconds to read on a node with hundreds of containers.
pub fn filesystem_usage(dir: &Path) -> io::Result<Filesystem> {
    let st = nix::sys::statvfs::statvfs(dir).map_err(io::Error::from)?;
    let frag = st.fragment_size();
    Ok(Filesystem {
        device: String::new(),
        capacity: st.blocks() * frag,
        available: st.blocks_available() * frag,
        inodes: st.files(),
        inodes_free: st.files_available(),
    })
}

/// The path that identifies the filesystem of `dir` in CRI (`FilesystemIdentifier.mountpoint`):
/// `image_root` when `dir` is on the image store's filesystem, `dir` when it is on one of its
/// own. kubelet takes two different mountpoints for a split disk (image and container
/// filesystems apart, KubeletSeparateDiskGC) and then tracks and garbage-collects each on its
/// own; one disk must not read as two. A `dir` not made yet is judged by its nearest ancestor.
pub fn filesystem_id(dir: &Path, image_root: &Path) -> PathBuf {
    let dev = |p: &Path| {
        p.ancestors()
            .find_map(|a| fs::metadata(a).ok())
            .map(|m| m.dev())
    };
    match (dev(dir), dev(image_root)) {
        (Some(a), Some(b)) if a == b => image_root.to_owned(),
        _ => dir.to_owned(),
    }
}

/// The name of block device `major:minor` (`/dev/vda`), or the numbers when sysfs does not
/// know it.
pub fn block_device_name(major: u64, minor: u64) -> String {
    fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/uevent"))
        .ok()
        .and_then(|u| {
            u.lines()
                .find_map(|l| l.strip_prefix("DEVNAME="))
                .map(|n| format!("/dev/{n}"))
        })
        .unwrap_or_else(|| format!("{major}:{minor}"))
}

/// The mount source of the filesystem with device `major:minor` in `/proc/self/mountinfo`
/// (fields: id, parent, major:minor, root, mount point, options..., `-`, type, source, ...).
fn mount_source(mountinfo: &str, major: u64, minor: u64) -> Option<String> {
    let wanted = format!("{major}:{minor}");
    mountinfo.lines().find_map(|line| {
        let mut fields = line.split(' ');
        (fields.nth(2)? == wanted).then_some(())?;
        let mut after = line.split(" - ").nth(1)?.split(' ');
        after.nth(1).map(str::to_owned)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount_tmpfs(at: &Path) {
        let flags = nix::mount::MsFlags::empty();
        nix::mount::mount(Some("tmpfs"), at, Some("tmpfs"), flags, None::<&str>).unwrap();
    }

    #[test]
    fn counts_files_dirs_and_hard_links_once() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("upper");
        fs::create_dir_all(d.join("a/b")).unwrap();
        fs::write(d.join("a/b/f"), vec![1u8; 10_000]).unwrap();
        fs::hard_link(d.join("a/b/f"), d.join("a/link")).unwrap();
        let (bytes, inodes) = disk_usage(&d).unwrap();
        // upper, a, b and one file (linked twice).
        assert_eq!(inodes, 4);
        assert!(bytes >= 10_000, "{bytes}");
    }

    #[test]
    fn a_mount_under_the_directory_is_not_counted() {
        assert!(
            nix::unistd::geteuid().is_root(),
            "this test mounts a tmpfs: run it as root"
        );
        let t = tempfile::tempdir().unwrap();
        let mnt = t.path().join("ctr/rootfs");
        fs::create_dir_all(&mnt).unwrap();
        let before = disk_usage(t.path()).unwrap();
        mount_tmpfs(&mnt);
        let written = fs::create_dir(mnt.join("big"))
            .and_then(|()| fs::write(mnt.join("big/file"), vec![7u8; 1 << 20]));
        let during = disk_usage(t.path());
        nix::mount::umount(&mnt).unwrap();
        written.unwrap();
        let (bytes, inodes) = during.unwrap();
        // Left out with what is mounted on it: the mount point shows the mount's root.
        assert!(inodes <= before.1, "files inside the mount were counted");
        assert!(
            bytes < before.0 + (1 << 20),
            "{bytes} counts the mount's megabyte"
        );
    }

    #[test]
    fn filesystem_of_a_directory() {
        let t = tempfile::tempdir().unwrap();
        let f = filesystem(t.path()).unwrap();
        assert!(f.capacity > 0 && f.available <= f.capacity, "{f:?}");
        assert!(!f.device.is_empty(), "{f:?}");
    }

    #[test]
    fn one_disk_reads_as_one_filesystem_and_a_mount_as_its_own() {
        assert!(
            nix::unistd::geteuid().is_root(),
            "this test mounts a tmpfs: run it as root"
        );
        let t = tempfile::tempdir().unwrap();
        let (root, containers) = (t.path().join("root"), t.path().join("root/containers"));
        // Not made yet: judged by the root it will be made in.
        assert_eq!(filesystem_id(&containers, &root), root);
        fs::create_dir_all(&containers).unwrap();
        assert_eq!(filesystem_id(&containers, &root), root);
        mount_tmpfs(&containers);
        let split = filesystem_id(&containers, &root);
        nix::mount::umount(&containers).unwrap();
        assert_eq!(split, containers);
    }

    #[test]
    fn mount_source_by_device_number() {
        let info = "22 1 0:21 / /sys rw,nosuid - sysfs sysfs rw\n\
                    29 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n";
        assert_eq!(mount_source(info, 254, 1).as_deref(), Some("/dev/vda1"));
        assert_eq!(mount_source(info, 8, 0), None);
    }
}
