//! Image volumes: an image's content mounted read-only into a container (Kubernetes'
//! ImageVolume). Each is held like the container's own image (holder `<id>#volume-<n>`, so a
//! removed image keeps its layers while a container mounts it), mounted under the
//! container's layer directory (`volumes/<n>`), and bound into the container like a host
//! path, at its sub-path when the request names one.

use std::path::{Path, PathBuf};

use crate::container::{ContainerError, ContainerRecord, rootfs};
use crate::image::Images;
use crate::snapshot::mount_overlay;

/// The image hold of a container's `n`th mount.
pub fn holder(container: &str, n: usize) -> String {
    format!("{container}#volume-{n}")
}

/// The container a hold belongs to (holds of its volumes included).
pub fn holder_container(holder: &str) -> &str {
    holder.split('#').next().unwrap_or(holder)
}

/// Mounts the record's image volumes and points their mounts at them. Blocking.
pub fn mount_all(
    images: &Images,
    layout: &rootfs::Layout,
    record: &mut ContainerRecord,
) -> Result<(), ContainerError> {
    for (n, m) in record.spec.mounts.iter_mut().enumerate() {
        let Some(image) = m.image.clone() else {
            continue;
        };
        let used = images.acquire(&holder(&record.id, n), &image)?;
        let dir = layout.dir.join("volumes").join(n.to_string());
        crate::durable::create_dir_all(&dir).map_err(|source| ContainerError::Io {
            what: "creating",
            path: dir.clone(),
            source,
        })?;
        mount_read_only(&used.lowerdirs, &dir)?;
        m.host_path = sub_path(&dir, &m.image_sub_path, &m.container_path)?
            .to_string_lossy()
            .into_owned();
        m.readonly = true;
        record
            .image_volumes
            .insert(m.container_path.clone(), used.id.to_string());
    }
    Ok(())
}

/// Drops the holds of the record's image volumes (their mounts go with the layer directory).
pub fn release_all(images: &Images, record: &ContainerRecord) -> Vec<String> {
    record
        .spec
        .mounts
        .iter()
        .enumerate()
        .filter(|(_, m)| m.image.is_some())
        .filter_map(|(n, _)| images.release(&holder(&record.id, n)).err())
        .map(|e| format!("release an image volume's image: {e}"))
        .collect()
}

/// An image's layers, read-only: an overlay of two layers or more, a read-only bind of one.
fn mount_read_only(lowerdirs: &[PathBuf], target: &Path) -> Result<(), ContainerError> {
    use crate::durable::mount;
    use nix::mount::MsFlags;
    if lowerdirs.len() >= 2 {
        return Ok(mount_overlay(lowerdirs, None, target)?);
    }
    let Some(layer) = lowerdirs.first() else {
        return Ok(());
    };
    let io = |source: nix::Error| ContainerError::Io {
        what: "mounting an image volume on",
        path: target.to_owned(),
        source: source.into(),
    };
    mount(
        Some(layer),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(io)?;
    let read_only = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
    mount(None::<&str>, target, None::<&str>, read_only, None::<&str>).map_err(io)
}

/// `root/sub`, which must exist inside `root` (a symlink may not lead out of the image).
fn sub_path(root: &Path, sub: &str, container_path: &str) -> Result<PathBuf, ContainerError> {
    if sub.is_empty() {
        return Ok(root.to_owned());
    }
    let invalid = |why: String| {
        ContainerError::Invalid(format!(
            "mount {container_path}: image_sub_path {sub:?} {why}"
        ))
    };
    let resolved = std::fs::canonicalize(root.join(sub.trim_start_matches('/')))
        .map_err(|e| invalid(format!("is not in the image: {e}")))?;
    if !resolved.starts_with(root) {
        return Err(invalid("leads out of the image".into()));
    }
    Ok(resolved)
}
