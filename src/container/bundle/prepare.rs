//! Gathers from the host what a container's OCI spec needs (the image's passwd and group
//! files, read by `accounts`, resolved host paths and devices, a Localhost seccomp profile, the propagation of host
//! mounts), builds the spec with the pure `oci` module, and writes the bundle.

use std::path::{Path, PathBuf};

use oci_spec::runtime::Spec;

use crate::container::{ContainerContext, ContainerError};
use crate::image::ImageUse;
use crate::model::NamespaceMode;
use crate::model::{ContainerSpec, MountSpec, Propagation, ResolvedUser};
use crate::oci::{self, DeviceNode, PodView, SpecInput};
use crate::sandbox::SandboxRecord;

/// What `prepare` decided about a container.
pub struct Prepared {
    pub spec: Spec,
    pub user: ResolvedUser,
    pub stop_signal: i32,
}

pub struct Inputs<'a> {
    pub id: &'a str,
    pub pod: &'a SandboxRecord,
    pub spec: &'a ContainerSpec,
    pub image: &'a ImageUse,
    pub image_name: &'a str,
    pub rootfs: &'a Path,
    pub cgroup: &'a str,
    /// `/proc/<pid>/ns/pid` of the container a `Target` PID mode names.
    pub target_pid_ns: Option<PathBuf>,
    /// The request's CDI devices, resolved before anything was made.
    pub cdi: &'a crate::cdi::Resolved,
    /// The AppArmor profile `RuntimeDefault` means here, loaded (`apparmor::for_container`).
    pub apparmor_default: Option<String>,
    /// The image's /etc/passwd and /etc/group, read off the async workers (`accounts::read`).
    pub accounts: &'a super::accounts::Accounts,
    /// The binds of the image's declared volumes (`declared::make`), from crust's own dirs.
    pub declared: &'a [MountSpec],
}

pub fn prepare(ctx: &ContainerContext, inputs: &Inputs<'_>) -> Result<Prepared, ContainerError> {
    let spec = inputs.spec;
    let config = &inputs.image.config;
    let files = inputs.accounts.files();
    let user = oci::resolve_user(&spec.security, &config.user, inputs.image_name, &files)?;
    let mut mounts = resolve_mounts(&spec.mounts)?;
    // The image's declared volumes are bound like the request's own (containerd adds them to
    // its CRI mounts), and sorted among them by depth.
    mounts.extend(inputs.declared.iter().cloned());
    let mut host = ctx.host.clone();
    for m in &mounts {
        if m.propagation != Propagation::Private {
            host.mount_propagation.insert(
                m.host_path.clone(),
                crate::container::host::propagation_of(Path::new(&m.host_path)),
            );
        }
    }
    if !host.cgroup_v2 {
        host.cgroup_v1_binds = cgroup_v1_binds(&ctx.cgroups, inputs.cgroup);
    }
    host.apparmor_default_profile = inputs.apparmor_default.clone();
    let devices = resolve_devices(spec, ctx.device_ownership_from_security_context)?;
    let seccomp = match &spec.security.seccomp {
        Some(crate::model::Profile::Localhost(path)) => Some(load_seccomp(path)?),
        _ => None,
    };
    let pod = pod_view(inputs.pod, inputs.target_pid_ns.clone());
    let input = SpecInput {
        container_id: inputs.id,
        spec,
        image: config,
        image_name: inputs.image_name,
        user: &user,
        pod: &pod,
        rootfs: inputs.rootfs,
        cgroups_path: inputs.cgroup,
        mounts: &mounts,
        devices: &devices,
        seccomp_localhost: seccomp.as_ref(),
        host: &host,
    };
    let mut built = oci::build(&input)?;
    // After the spec is whole: CDI edits replace what they name (a device node, a mount, an
    // env variable) and see the resolved user, whom unowned device nodes go to.
    crate::cdi::apply(inputs.cdi, &mut built)?;
    // Then the node's OCI hook files, which match on the spec as built (annotations, command).
    let hooks = crate::hooks::apply(&ctx.hooks_dirs, &mut built, !spec.mounts.is_empty());
    if !hooks.is_empty() {
        tracing::info!(files = ?hooks, "OCI hooks added from hooks_dir");
    }
    let stop_signal = oci::stop_signal(&spec.stop_signal, &config.stop_signal)?;
    Ok(Prepared {
        spec: built,
        user,
        stop_signal,
    })
}

/// Writes the bundle kubelet's container runs from: `<dir>/bundle/config.json`.
pub fn write_bundle(dir: &Path, spec: &Spec) -> Result<PathBuf, ContainerError> {
    let bundle = dir.join("bundle");
    let io = |what, path: &Path| {
        let path = path.to_owned();
        move |source| ContainerError::Io { what, path, source }
    };
    crate::durable::create_dir_all(&bundle).map_err(io("creating", &bundle))?;
    let json = serde_json::to_vec(spec).map_err(|e| io("encoding", &bundle)(e.into()))?;
    let path = bundle.join("config.json");
    crate::store::write_atomic(&path, &json)?;
    Ok(bundle)
}

/// Reads the container's process template back from its bundle (for ExecSync).
pub fn load_process(dir: &Path) -> Result<oci_spec::runtime::Process, ContainerError> {
    let path = dir.join("bundle").join("config.json");
    let spec = Spec::load(&path).map_err(|e| ContainerError::Io {
        what: "reading",
        path: path.clone(),
        source: std::io::Error::other(e.to_string()),
    })?;
    spec.process().clone().ok_or(ContainerError::Io {
        what: "reading the process of",
        path,
        source: std::io::Error::other("no process in the spec"),
    })
}

fn pod_view(pod: &SandboxRecord, target_pid_ns: Option<PathBuf>) -> PodView {
    use crate::sandbox::host::files;
    let dir = &pod.dir;
    PodView {
        id: pod.id.clone(),
        hostname: std::fs::read_to_string(dir.join(files::HOSTNAME))
            .map(|h| h.trim().to_owned())
            .unwrap_or_default(),
        net_ns: pod.pins.net.clone(),
        ipc_ns: pod.pins.ipc.clone(),
        uts_ns: pod.pins.uts.clone(),
        pid_ns: pod.pins.pid.clone(),
        shm: pod.pins.ipc.as_ref().map(|_| dir.join(files::SHM)),
        resolv_conf: dir.join(files::RESOLV_CONF),
        hostname_file: dir.join(files::HOSTNAME),
        hosts_file: dir.join(files::HOSTS),
        host_network: pod.spec.namespaces.network == NamespaceMode::Node,
        sysctls: pod.spec.sysctls.clone(),
        target_pid_ns,
        user_ns: pod.pins.user.clone().zip(pod.spec.id_maps()),
    }
}

/// The request's mounts with each host path resolved (symlinks followed, as the kernel's bind
/// mount would); a host path that does not exist is the request's fault.
fn resolve_mounts(mounts: &[MountSpec]) -> Result<Vec<MountSpec>, ContainerError> {
    mounts
        .iter()
        .map(|m| {
            if !m.container_path.starts_with('/') {
                return Err(ContainerError::Invalid(format!(
                    "mount container_path {:?} is not absolute",
                    m.container_path
                )));
            }
            let resolved = std::fs::canonicalize(&m.host_path).map_err(|e| {
                ContainerError::Invalid(format!(
                    "mount host_path {:?} (for {}): {e}",
                    m.host_path, m.container_path
                ))
            })?;
            Ok(MountSpec {
                host_path: resolved.to_string_lossy().into_owned(),
                ..m.clone()
            })
        })
        .collect()
}

/// The v1 hierarchies libcgroups creates a container's cgroup in: their directories for the
/// container exist by the time its root filesystem is prepared.
const V1_CONTROLLERS: [&str; 12] = [
    "blkio",
    "cpu",
    "cpuacct",
    "cpuset",
    "devices",
    "freezer",
    "hugetlb",
    "memory",
    "net_cls",
    "net_prio",
    "perf_event",
    "pids",
];

/// Points the container's cgroup v1 bind mounts at `new` instead of `old` (an NRI plugin moved
/// the container's cgroup after the spec was built).
pub fn retarget_cgroup(ctx: &ContainerContext, spec: &mut Spec, old: &str, new: &str) {
    let rel = |c: &str| {
        let r = ctx.cgroups.relative_dir(c);
        r.strip_prefix("/").unwrap_or(&r).to_owned()
    };
    let (old, new) = (rel(old), rel(new));
    let Some(mounts) = spec.mounts_mut().as_mut() else {
        return;
    };
    for m in mounts.iter_mut() {
        if !m.destination().starts_with("/sys/fs/cgroup/") {
            continue;
        }
        let moved = m.source().as_ref().and_then(|src| {
            let hierarchy = src
                .strip_prefix(&ctx.cgroups.root)
                .ok()?
                .components()
                .next()?;
            (src == &ctx.cgroups.root.join(hierarchy).join(&old))
                .then(|| ctx.cgroups.root.join(hierarchy).join(&new))
        });
        if let Some(source) = moved {
            m.set_source(Some(source));
        }
    }
}

/// The container's cgroup directory in each v1 hierarchy, by its name under the cgroup root
/// (aliases such as `cpu` for `cpu,cpuacct` included), systemd's named one among them as runc
/// mounts it.
fn cgroup_v1_binds(
    cgroups: &crate::sandbox::CgroupSettings,
    cgroup: &str,
) -> Vec<(String, PathBuf)> {
    let rel = cgroups.relative_dir(cgroup);
    let rel = rel.strip_prefix("/").unwrap_or(&rel).to_owned();
    let mut out = Vec::new();
    for e in std::fs::read_dir(&cgroups.root)
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        let real = std::fs::canonicalize(e.path()).unwrap_or_else(|_| e.path());
        let real_name = real
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let managed = !real_name.is_empty()
            && real_name.split(',').all(|c| V1_CONTROLLERS.contains(&c))
            && real.join("cgroup.procs").exists();
        if managed {
            out.push((name, real.join(&rel)));
        }
    }
    if let Some(dir) = cgroups.named_systemd_dir(cgroup) {
        out.push(("systemd".into(), dir));
    }
    out.sort();
    out
}

/// The request's devices, and for a privileged container every device of the host. With
/// `owner_from_context` (`device_ownership_from_security_context`), the request's devices
/// belong to the run_as_user and run_as_group the request names, where not root, instead of
/// the host node's owner, as containerd's and CRI-O's option has it: a non-root pod can then
/// open the raw block volume (`root:disk 0660` on the host) it was given.
fn resolve_devices(
    spec: &ContainerSpec,
    owner_from_context: bool,
) -> Result<Vec<DeviceNode>, ContainerError> {
    let mut out = Vec::new();
    let from_context = |id: Option<i64>| {
        id.filter(|_| owner_from_context)
            .and_then(|id| u32::try_from(id).ok())
            .filter(|id| *id != 0)
    };
    let (uid, gid) = (
        from_context(spec.security.run_as_user),
        from_context(spec.security.run_as_group),
    );
    for d in &spec.devices {
        let mut node = device_node(Path::new(&d.host_path), &d.container_path, &d.permissions)
            .map_err(|e| {
                ContainerError::Invalid(format!("device host_path {:?}: {e}", d.host_path))
            })?;
        node.uid = uid.unwrap_or(node.uid);
        node.gid = gid.unwrap_or(node.gid);
        out.push(node);
    }
    if spec.security.privileged {
        let mut host = Vec::new();
        host_devices(Path::new("/dev"), &mut host);
        for node in host {
            if !out.iter().any(|d| d.container_path == node.container_path) {
                out.push(node);
            }
        }
    }
    Ok(out)
}

fn device_node(host: &Path, container: &str, perms: &str) -> std::io::Result<DeviceNode> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let meta = std::fs::metadata(host)?;
    let kind = if meta.file_type().is_char_device() {
        'c'
    } else if meta.file_type().is_block_device() {
        'b'
    } else {
        return Err(std::io::Error::other("not a device"));
    };
    let rdev = meta.rdev();
    Ok(DeviceNode {
        container_path: if container.is_empty() {
            host.to_string_lossy().into_owned()
        } else {
            container.to_owned()
        },
        host_path: host.to_string_lossy().into_owned(),
        kind,
        major: nix::sys::stat::major(rdev) as i64,
        minor: nix::sys::stat::minor(rdev) as i64,
        file_mode: meta.mode() & 0o7777,
        uid: meta.uid(),
        gid: meta.gid(),
        permissions: if perms.is_empty() {
            "rwm".into()
        } else {
            perms.to_owned()
        },
    })
}

/// Device nodes under `dir`, skipping the pseudo-filesystems a container gets its own of.
fn host_devices(dir: &Path, out: &mut Vec<DeviceNode>) {
    const SKIP: [&str; 6] = ["pts", "shm", "mqueue", "fd", ".lxc", ".udev"];
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let Ok(kind) = e.file_type() else { continue };
        if kind.is_dir() {
            if dir == Path::new("/dev") && SKIP.iter().any(|s| e.file_name() == *s) {
                continue;
            }
            host_devices(&path, out);
        } else if !kind.is_symlink() && path != Path::new("/dev/console") {
            if let Ok(node) = device_node(&path, "", "rwm") {
                out.push(node);
            }
        }
    }
}

fn load_seccomp(path: &str) -> Result<oci::SeccompProfile, ContainerError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ContainerError::Invalid(format!("seccomp profile {path:?} cannot be read: {e}"))
    })?;
    Ok(oci::parse_seccomp_profile(path, &text)?)
}
