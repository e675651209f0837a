//! A container's root filesystem: the image's layers under a writable layer of its own,
//! `<root>/containers/<id>/{upper,work}`, mounted at `<root>/containers/<id>/rootfs` in the
//! host's mount namespace (libcontainer pivots into it in the container's own).

use std::path::{Path, PathBuf};

use crate::durable::{OneMount, umount2};
use nix::errno::Errno;
use nix::mount::MntFlags;

use crate::container::idmap::{self, PodUserns};
use crate::container::{ContainerContext, ContainerError};
use crate::snapshot::{Upper, mount_overlay};

pub struct Layout {
    pub dir: PathBuf,
    pub upper: PathBuf,
    pub work: PathBuf,
    pub rootfs: PathBuf,
}

pub fn layout(ctx: &ContainerContext, id: &str) -> Layout {
    let dir = ctx.layers_dir.join(id);
    Layout {
        upper: dir.join("upper"),
        work: dir.join("work"),
        rootfs: dir.join("rootfs"),
        dir,
    }
}

/// Creates the writable layer and mounts the root filesystem; in a pod with a user namespace
/// over id-mapped layers, with the writable layer the pod root's (see `idmap`).
pub fn mount(
    layout: &Layout,
    lowerdirs: &[PathBuf],
    userns: Option<&PodUserns>,
) -> Result<(), ContainerError> {
    for d in [&layout.upper, &layout.work, &layout.rootfs] {
        crate::durable::create_dir_all(d).map_err(|source| ContainerError::Io {
            what: "creating",
            path: d.clone(),
            source,
        })?;
    }
    let upper = Upper {
        upper: &layout.upper,
        work: &layout.work,
    };
    let Some(userns) = userns else {
        mount_overlay(lowerdirs, Some(upper), &layout.rootfs)?;
        return Ok(());
    };
    idmap::own_upper(layout, userns)?;
    let mapped = idmap::map_layers(layout, lowerdirs, userns);
    let mounted = match &mapped {
        Ok(mapped) => mount_overlay(mapped, Some(upper), &layout.rootfs).map_err(Into::into),
        Err(_) => Ok(()),
    };
    // Attached or not, the copies go: the overlay holds its own references to them.
    idmap::detach_layers(&idmap::layer_dirs(layout, lowerdirs.len()));
    mapped.and(mounted)
}

/// Unmounts the root filesystem (and image volumes) and deletes the writable layer; what is
/// already gone is fine. Nothing is deleted while something is still mounted under it: that
/// would delete through the mount, into the image's layers or a volume.
///
/// The mount table is read only when something besides the root filesystem is mounted there
/// (image volumes, id-mapped volumes): on a node with hundreds of containers one read of
/// /proc/self/mountinfo costs milliseconds of the kernel's time, per removal.
pub fn remove(layout: &Layout) -> Result<(), String> {
    unmount(&layout.rootfs)?;
    match crate::durable::remove_dir_all_on_one_mount(&layout.dir) {
        Ok(OneMount::Removed) => return Ok(()),
        // Another mount below, a file mount point (EBUSY), a tree too deep to walk: the table.
        Ok(OneMount::Mounted(_) | OneMount::Unwalked) | Err(_) => {}
    }
    for target in mounts_under(&layout.dir) {
        unmount(&target)?;
    }
    remove_dir(&layout.dir)
}

fn unmount(target: &Path) -> Result<(), String> {
    match umount2(target, MntFlags::MNT_DETACH | MntFlags::UMOUNT_NOFOLLOW) {
        Ok(()) | Err(Errno::EINVAL | Errno::ENOENT) => Ok(()),
        Err(e) => Err(format!("unmount {}: {e}", target.display())),
    }
}

/// Mount points at or under `dir`, deepest first, from /proc/self/mountinfo.
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut found: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(PathBuf::from)
        .filter(|m| m.starts_with(dir))
        .collect();
    found.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    found.dedup();
    found
}

pub fn remove_dir(dir: &Path) -> Result<(), String> {
    match crate::durable::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("remove {}: {e}", dir.display()))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durable::remove_dir_all_on_one_mount;
    use nix::mount::MsFlags;
    use std::fs;

    fn require_root() {
        assert!(
            rustix::process::geteuid().is_root(),
            "mounting needs root (make test runs as root)"
        );
    }

    /// Detaches what a test mounted when it ends, passed or not: a failed assertion must not
    /// leave mounts on the machine.
    struct Detach(Vec<PathBuf>);

    impl Drop for Detach {
        fn drop(&mut self) {
            for p in &self.0 {
                let _ = nix::mount::umount2(p, MntFlags::MNT_DETACH);
            }
        }
    }

    fn bind(source: &Path, target: &Path) {
        nix::mount::mount(
            Some(source),
            target,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .unwrap();
    }

    /// A writable layer's usual contents: nested directories, files, a link out of the tree.
    fn fill(dir: &Path, outside: &Path) {
        let deep = dir.join("upper/etc/a/b/c");
        fs::create_dir_all(&deep).unwrap();
        fs::create_dir_all(dir.join("work/work")).unwrap();
        fs::create_dir_all(dir.join("rootfs")).unwrap();
        fs::write(deep.join("f"), b"x").unwrap();
        fs::write(dir.join("upper/etc/g"), b"y").unwrap();
        std::os::unix::fs::symlink(outside, dir.join("upper/etc/link")).unwrap();
        std::os::unix::fs::symlink(outside.parent().unwrap(), dir.join("upper/dirlink")).unwrap();
    }

    #[test]
    fn a_layer_goes_without_following_links() {
        let t = tempfile::tempdir().unwrap();
        let outside = t.path().join("outside");
        fs::write(&outside, b"kept").unwrap();
        let dir = t.path().join("layer");
        fill(&dir, &outside);
        assert_eq!(
            remove_dir_all_on_one_mount(&dir).unwrap(),
            OneMount::Removed
        );
        assert!(!dir.exists());
        assert_eq!(fs::read(&outside).unwrap(), b"kept");
        assert_eq!(
            remove_dir_all_on_one_mount(&dir).unwrap(),
            OneMount::Removed,
            "what is gone is fine"
        );
    }

    /// A volume bound from the same file system has the same device number: only the mount
    /// id tells it apart, and the walk must stop there rather than empty the volume.
    #[test]
    fn the_walk_stops_at_a_mount_from_the_same_file_system() {
        require_root();
        let t = tempfile::tempdir().unwrap();
        let volume = t.path().join("volume");
        fs::create_dir_all(volume.join("data")).unwrap();
        fs::write(volume.join("data/keep"), b"user data").unwrap();
        let dir = t.path().join("layer");
        fill(&dir, &volume.join("data/keep"));
        let at = dir.join("idmap/mount-0");
        fs::create_dir_all(&at).unwrap();
        bind(&volume, &at);
        let _detach = Detach(vec![at.clone()]);
        let walked = remove_dir_all_on_one_mount(&dir);
        let still = fs::read(volume.join("data/keep"));
        assert_eq!(walked.unwrap(), OneMount::Mounted(at));
        assert_eq!(still.unwrap(), b"user data");
    }

    /// rootfs::remove: the root filesystem's overlay and a volume mounted beside it are
    /// unmounted, the layer deleted, and the volume's own files untouched.
    #[test]
    fn removal_unmounts_the_root_and_every_volume_and_deletes_the_layer() {
        require_root();
        let t = tempfile::tempdir().unwrap();
        let volume = t.path().join("volume");
        fs::create_dir_all(&volume).unwrap();
        fs::write(volume.join("keep"), b"user data").unwrap();
        let lower = t.path().join("lower");
        fs::create_dir_all(&lower).unwrap();
        fs::write(lower.join("image-file"), b"image").unwrap();
        let dir = t.path().join("layer");
        let layout = Layout {
            upper: dir.join("upper"),
            work: dir.join("work"),
            rootfs: dir.join("rootfs"),
            dir: dir.clone(),
        };
        let file_volume = dir.join("idmap/mount-1");
        let dir_volume = dir.join("volumes/0");
        let _detach = Detach(vec![
            layout.rootfs.clone(),
            file_volume.clone(),
            dir_volume.clone(),
        ]);
        mount(&layout, std::slice::from_ref(&lower), None).unwrap();
        fs::write(layout.rootfs.join("written"), b"w").unwrap();
        fs::create_dir_all(dir.join("idmap")).unwrap();
        fs::write(&file_volume, b"").unwrap();
        bind(&volume.join("keep"), &file_volume);
        fs::create_dir_all(&dir_volume).unwrap();
        bind(&volume, &dir_volume);

        remove(&layout).unwrap();
        assert!(!dir.exists(), "the layer is gone");
        assert_eq!(fs::read(volume.join("keep")).unwrap(), b"user data");
        assert_eq!(fs::read(lower.join("image-file")).unwrap(), b"image");
        let table = fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(
            !table.contains(dir.to_str().unwrap()),
            "nothing stays mounted under the layer"
        );
    }
}
