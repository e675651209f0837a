//! A container's root filesystem: the image's layers under a writable layer of its own,
//! `<root>/containers/<id>/{upper,work}`, mounted at `<root>/containers/<id>/rootfs` in the
//! host's mount namespace (libcontainer pivots into it in the container's own).

use std::path::{Path, PathBuf};

use crate::durable::umount2;
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
/// would delete through the mount, into the image's layers.
pub fn remove(layout: &Layout) -> Result<(), String> {
    for target in mounts_under(&layout.dir) {
        match umount2(&target, MntFlags::MNT_DETACH) {
            Ok(()) | Err(Errno::EINVAL | Errno::ENOENT) => {}
            Err(e) => return Err(format!("unmount {}: {e}", target.display())),
        }
    }
    remove_dir(&layout.dir)
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
