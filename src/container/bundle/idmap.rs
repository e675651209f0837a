//! A container of a pod with a user namespace sees its files through that namespace's maps.
//!
//! - Its root filesystem: each image layer is id-mapped (a detached copy of its directory,
//!   mapped through the pod's user namespace and attached under the container's layer
//!   directory at `idmap/layer-<n>` just long enough for overlayfs to take it), so the
//!   image's root-owned files are the pod root's; the writable layer is owned by the host
//!   ids of the pod's root, so what the container writes is stored under those ids.
//! - Each mount that carries the maps (kubelet sends them on every mount of such a pod) is an
//!   id-mapped copy of its host path, attached at `idmap/mount-<n>` and bound from there
//!   (libcontainer 0.7 takes no idmap options). It stays until the layer directory goes.
//!
//! A file system the kernel cannot id-map (tmpfs before Linux 6.3) fails the request with the
//! mount and the kernel's answer, never a container with the wrong owners.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use nix::mount::MntFlags;

use crate::container::{ContainerError, rootfs};
use crate::model::{ContainerSpec, IdMaps, UserNsRequest};
use crate::sandbox::SandboxRecord;
use crate::sys::userns::{attach, idmapped_tree};

/// The pod's user namespace, opened, with its maps.
pub struct PodUserns {
    ns: File,
    pub maps: IdMaps,
}

impl PodUserns {
    /// `None` for a pod in the node's user namespace.
    pub fn open(pod: &SandboxRecord) -> Result<Option<PodUserns>, ContainerError> {
        let (Some(pin), Some(maps)) = (&pod.pins.user, pod.spec.id_maps()) else {
            return Ok(None);
        };
        let ns = File::open(pin).map_err(|source| ContainerError::Io {
            what: "opening the pod's user namespace",
            path: pin.clone(),
            source,
        })?;
        Ok(Some(PodUserns { ns, maps }))
    }
}

/// The request's user namespace and its mounts' maps must be the pod's: a container cannot
/// have a namespace of its own, nor see a volume through other ids than its pod's.
pub fn check(spec: &ContainerSpec, pod: &SandboxRecord) -> Result<(), ContainerError> {
    let own = pod.spec.id_maps();
    if let Some(asked) = &spec.security.userns {
        if asked.id_maps() != own || (own.is_none() && !node_mode(asked)) {
            return Err(ContainerError::Invalid(format!(
                "namespace_options.userns_options differs from pod {}'s user namespace",
                pod.id
            )));
        }
    }
    for m in &spec.mounts {
        let Some(asked) = &m.id_maps else { continue };
        match own {
            None => {
                return Err(ContainerError::Invalid(format!(
                    "mount {}: uid_mappings need a pod with a user namespace; pod {} has none",
                    m.container_path, pod.id
                )));
            }
            Some(maps) if asked.id_maps() != Some(maps) => {
                return Err(ContainerError::Invalid(format!(
                    "mount {}: uid_mappings / gid_mappings differ from pod {}'s user namespace",
                    m.container_path, pod.id
                )));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

fn node_mode(u: &UserNsRequest) -> bool {
    u.mode == crate::model::NamespaceMode::Node && u.uids.is_empty() && u.gids.is_empty()
}

/// Id-maps each layer under `layout.dir/idmap`; the returned directories stand in for
/// `lowerdirs` until [`detach_layers`] once the overlay holds them.
pub fn map_layers(
    layout: &rootfs::Layout,
    lowerdirs: &[PathBuf],
    userns: &PodUserns,
) -> Result<Vec<PathBuf>, ContainerError> {
    let dirs = layer_dirs(layout, lowerdirs.len());
    for (layer, at) in lowerdirs.iter().zip(&dirs) {
        mkdir(at)?;
        let tree = idmapped_tree(layer, userns.ns.as_fd(), false).map_err(|e| {
            ContainerError::Spec(crate::oci::SpecError::HostLacks(format!(
                "id-mapping image layer {} for the pod's user namespace: {e} (the layer store's \
                 file system or this kernel cannot id-map)",
                layer.display()
            )))
        })?;
        let attached = attach(tree, at);
        crate::durable::step("mount", at.display());
        attached.map_err(io("attaching an id-mapped layer at", at))?;
    }
    Ok(dirs)
}

/// Where the id-mapped copies of `n` layers are attached.
pub fn layer_dirs(layout: &rootfs::Layout, n: usize) -> Vec<PathBuf> {
    let dir = layout.dir.join("idmap");
    (0..n).map(|i| dir.join(format!("layer-{i}"))).collect()
}

/// Detaches the layers' id-mapped copies: the overlay keeps its own references to them.
pub fn detach_layers(mapped: &[PathBuf]) {
    for at in mapped {
        let _ = crate::durable::umount2(at, MntFlags::MNT_DETACH);
        let _ = crate::durable::remove_dir(at);
    }
}

/// The writable layer belongs to the pod's root (its host ids).
pub fn own_upper(layout: &rootfs::Layout, userns: &PodUserns) -> Result<(), ContainerError> {
    let (uid, gid) = userns.maps.root();
    std::os::unix::fs::chown(&layout.upper, Some(uid), Some(gid))
        .map_err(io("giving the pod's root", &layout.upper))
}

/// Replaces the host path of each mount that carries maps with an id-mapped copy of it.
/// Blocking.
pub fn map_mounts(
    layout: &rootfs::Layout,
    spec: &mut ContainerSpec,
    userns: &PodUserns,
) -> Result<(), ContainerError> {
    for (n, m) in spec.mounts.iter_mut().enumerate() {
        if m.id_maps.is_none() {
            continue;
        }
        let source = PathBuf::from(&m.host_path);
        let at = layout.dir.join("idmap").join(format!("mount-{n}"));
        if source.is_dir() {
            mkdir(&at)?;
        } else {
            mkdir(layout.dir.join("idmap").as_path())?;
            crate::durable::write(&at, b"").map_err(io("creating", &at))?;
        }
        let tree = idmapped_tree(&source, userns.ns.as_fd(), true).map_err(|e| {
            ContainerError::Spec(crate::oci::SpecError::HostLacks(format!(
                "mount {}: id-mapping {} for the pod's user namespace: {e} ({} cannot id-map \
                 this file system{})",
                m.container_path,
                source.display(),
                kernel(),
                tmpfs_hint(&source)
            )))
        })?;
        let attached = attach(tree, &at);
        crate::durable::step("mount", at.display());
        attached.map_err(io("attaching an id-mapped mount at", &at))?;
        m.host_path = at.to_string_lossy().into_owned();
    }
    Ok(())
}

fn kernel() -> String {
    let release = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("Linux {release}")
}

fn tmpfs_hint(path: &Path) -> &'static str {
    match nix::sys::statfs::statfs(path) {
        Ok(s) if s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC => "; tmpfs needs Linux 6.3",
        _ => "",
    }
}

fn mkdir(at: &Path) -> Result<(), ContainerError> {
    crate::durable::create_dir_all(at).map_err(io("creating", at))
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ContainerError {
    let path = path.to_owned();
    move |source| ContainerError::Io { what, path, source }
}

/// What the pods' user namespaces need, tried for real under `layers_dir` (where writable
/// layers live, beside the image's layers): a user namespace with a map, an id-mapped copy of
/// a directory there, and an overlay over such a copy; and that a pod's root, nobody on the
/// node, may pass through the directories above the layers and `state_dir` (a container's
/// process in the pod's namespace mounts its root filesystem and the pod's files from there).
/// `Ok` says what works; `Err`, the first step that failed. Blocking: forks a short-lived
/// child.
pub fn probe(layers_dir: &Path, state_dir: &Path) -> Result<String, String> {
    for dir in [layers_dir, state_dir] {
        passable(dir)?;
    }
    let range = crate::model::IdRange {
        container: 0,
        host: 1 << 16,
        size: 1 << 16,
    };
    let maps = IdMaps {
        uid: range,
        gid: range,
    };
    let child = crate::sys::userns::UserNsChild::spawn(&maps, || Ok(Vec::new()))
        .map_err(|e| format!("user namespaces cannot be created: {e}"))?;
    let ns = File::open(child.ns_path("user"))
        .map_err(|e| format!("user namespaces cannot be opened: {e}"))?;
    let scratch = layers_dir.join(format!(".userns-probe-{}", std::process::id()));
    let result = probe_mounts(&scratch, &PodUserns { ns, maps });
    for m in ["merged", "mapped"] {
        let _ = crate::durable::umount2(scratch.join(m), MntFlags::MNT_DETACH);
    }
    let _ = crate::durable::remove_dir_all(&scratch);
    child.finish();
    result.map(|()| {
        format!(
            "user namespaces, id-mapped mounts on {} and overlay over id-mapped layers work",
            layers_dir.display()
        )
    })
}

/// Every existing directory from `/` to `dir` lets others search it (the execute bit for
/// others, as containerd's 0711 root): a pod's root is neither their owner nor in their group.
fn passable(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    for d in dir.ancestors().filter(|d| d.exists()) {
        let mode = std::fs::metadata(d)
            .map_err(|e| format!("cannot read {}: {e}", d.display()))?
            .permissions()
            .mode();
        if mode & 0o001 == 0 {
            return Err(format!(
                "{} is mode {:o}: a pod's root, nobody on the node, cannot pass through it to \
                 its container's files (make it searchable by others, e.g. 0711)",
                d.display(),
                mode & 0o7777
            ));
        }
    }
    Ok(())
}

fn probe_mounts(scratch: &Path, userns: &PodUserns) -> Result<(), String> {
    for d in ["lower", "upper", "work", "merged", "mapped"] {
        crate::durable::create_dir_all(scratch.join(d))
            .map_err(|e| format!("cannot create {}: {e}", scratch.join(d).display()))?;
    }
    let tree = idmapped_tree(&scratch.join("lower"), userns.ns.as_fd(), false).map_err(|e| {
        format!(
            "{} cannot id-map the file system of {}: {e}",
            kernel(),
            scratch.display()
        )
    })?;
    attach(tree, &scratch.join("mapped"))
        .map_err(|e| format!("attaching an id-mapped mount: {e}"))?;
    let upper = crate::snapshot::Upper {
        upper: &scratch.join("upper"),
        work: &scratch.join("work"),
    };
    crate::snapshot::mount_overlay(
        &[scratch.join("mapped")],
        Some(upper),
        &scratch.join("merged"),
    )
    .map_err(|e| format!("overlayfs refuses an id-mapped layer: {e}"))
}
