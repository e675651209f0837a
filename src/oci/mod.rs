//! CRI container config -> OCI runtime spec: pure functions, table-tested. Nothing here touches
//! the filesystem or the kernel: the container module gathers what the spec needs from the
//! host (the image's passwd and group files, host paths and devices, a localhost seccomp
//! profile, host features) into [`SpecInput`] first, so every rule here is a plain function of
//! its input.

use std::collections::BTreeMap;
use std::path::PathBuf;

use oci_spec::runtime::{LinuxSeccomp, Spec};

use crate::container::{ContainerSpec, ResolvedUser};
use crate::image::RuntimeConfig;
use crate::sandbox::NamespaceMode;

/// Why a spec could not be built: always the request's fault (InvalidArgument) or a feature
/// this host lacks (FailedPrecondition); see `SpecError::is_host_limit`.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    HostLacks(String),
}

impl SpecError {
    /// The host lacks what the request needs (AppArmor off, no mount_setattr, ...).
    pub fn is_host_limit(&self) -> bool {
        matches!(self, SpecError::HostLacks(_))
    }
}

/// What a container takes from its pod.
#[derive(Debug, Clone, Default)]
pub struct PodView {
    pub id: String,
    pub hostname: String,
    /// Namespace pins of the pod; `None` means the host's namespace of that kind.
    pub net_ns: Option<PathBuf>,
    pub ipc_ns: Option<PathBuf>,
    pub uts_ns: Option<PathBuf>,
    /// The pod's PID namespace pin, when the pod shares one (`NamespaceMode::Pod`).
    pub pid_ns: Option<PathBuf>,
    /// The pod's `/dev/shm` (a tmpfs the pod owns); `None` with host IPC (the host's /dev/shm).
    pub shm: Option<PathBuf>,
    /// `resolv.conf`, `hostname` and `hosts` written for the pod.
    pub resolv_conf: PathBuf,
    pub hostname_file: PathBuf,
    pub hosts_file: PathBuf,
    pub host_network: bool,
    /// The pod's sysctls (already applied to its namespaces).
    pub sysctls: BTreeMap<String, String>,
    /// For a `Target` PID mode container: `/proc/<pid>/ns/pid` of the target's process.
    pub target_pid_ns: Option<PathBuf>,
}

/// A host device node resolved for the container (from a request device, or from the host's
/// /dev for a privileged container).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceNode {
    pub container_path: String,
    pub host_path: String,
    /// 'c' or 'b'.
    pub kind: char,
    pub major: i64,
    pub minor: i64,
    /// File mode bits (permissions only).
    pub file_mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// cgroup permissions `rwm` subset.
    pub permissions: String,
}

/// What this host offers, detected once by the container module.
#[derive(Debug, Clone, Default)]
pub struct HostFeatures {
    pub cgroup_v2: bool,
    pub apparmor_enabled: bool,
    pub selinux_enabled: bool,
    /// The kernel has mount_setattr (recursive read-only mounts).
    pub mount_setattr: bool,
    /// The lowest oom_score_adj crust itself may give a process (crust without
    /// CAP_SYS_RESOURCE cannot go below its own value).
    pub min_oom_score_adj: i64,
    /// Whether each request mount's host path sits on a shared / slave mount, by host path
    /// (needed for Bidirectional / HostToContainer propagation).
    pub mount_propagation: BTreeMap<String, HostPropagation>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostPropagation {
    Private,
    Shared,
    Slave,
}

/// Everything `build` needs.
pub struct SpecInput<'a> {
    pub container_id: &'a str,
    pub spec: &'a ContainerSpec,
    /// The image's runtime config (Env, Entrypoint, Cmd, WorkingDir, User, Volumes, StopSignal).
    pub image: &'a RuntimeConfig,
    /// The image reference and id, for annotations.
    pub image_name: &'a str,
    pub user: &'a ResolvedUser,
    pub pod: &'a PodView,
    /// The mounted root filesystem (absolute).
    pub rootfs: &'a std::path::Path,
    /// The container's cgroup, as libcontainer/libcgroups name it (`/parent/child` for
    /// cgroupfs, `slice:prefix:name` for systemd).
    pub cgroups_path: &'a str,
    /// The request's mounts with host paths resolved (symlinks followed), in request order.
    pub mounts: &'a [crate::container::MountSpec],
    /// Request devices resolved from the host, plus all host devices when privileged.
    pub devices: &'a [DeviceNode],
    /// The parsed `Localhost` seccomp profile, when the request names one.
    pub seccomp_localhost: Option<&'a LinuxSeccomp>,
    pub host: &'a HostFeatures,
}

/// Builds the OCI runtime spec for a container.
///
/// Interim: process, user, root, pod namespaces, pod files and the request's mounts only; the
/// full builder (security, resources, devices, seccomp) replaces it.
pub fn build(input: &SpecInput<'_>) -> Result<Spec, SpecError> {
    use oci_spec::runtime::{
        LinuxBuilder, LinuxNamespaceBuilder, LinuxNamespaceType, MountBuilder, ProcessBuilder,
        RootBuilder, UserBuilder, get_default_namespaces,
    };
    let spec = input.spec;
    let image = input.image;
    let args: Vec<String> = if !spec.command.is_empty() {
        spec.command.iter().chain(&spec.args).cloned().collect()
    } else if !spec.args.is_empty() {
        image.entrypoint.iter().chain(&spec.args).cloned().collect()
    } else {
        image.entrypoint.iter().chain(&image.cmd).cloned().collect()
    };
    if args.is_empty() {
        return Err(SpecError::Invalid(format!(
            "container {:?}: no command given and the image has none",
            spec.metadata.name
        )));
    }
    let mut env: Vec<String> = image.env.clone();
    for (k, v) in &spec.envs {
        env.retain(|e| e.split_once('=').map(|(ek, _)| ek) != Some(k.as_str()));
        env.push(format!("{k}={v}"));
    }
    if !env.iter().any(|e| e.starts_with("PATH=")) {
        env.push("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    }
    let cwd = [&spec.working_dir, &image.working_dir]
        .into_iter()
        .find(|d| !d.is_empty())
        .cloned()
        .unwrap_or_else(|| "/".into());
    let user = UserBuilder::default()
        .uid(input.user.uid)
        .gid(input.user.gid)
        .additional_gids(input.user.additional_gids.clone())
        .build()
        .map_err(invalid)?;
    let process = ProcessBuilder::default()
        .args(args)
        .env(env)
        .cwd(cwd)
        .terminal(spec.tty)
        .user(user)
        .build()
        .map_err(invalid)?;
    let mut namespaces = get_default_namespaces();
    let pod = input.pod;
    namespaces.retain(|n| {
        !matches!(
            n.typ(),
            LinuxNamespaceType::User | LinuxNamespaceType::Cgroup
        )
    });
    for ns in &mut namespaces {
        let pin = match ns.typ() {
            LinuxNamespaceType::Network => Some(&pod.net_ns),
            LinuxNamespaceType::Ipc => Some(&pod.ipc_ns),
            LinuxNamespaceType::Uts => Some(&pod.uts_ns),
            LinuxNamespaceType::Pid if spec.security.pid_mode == NamespaceMode::Pod => {
                Some(&pod.pid_ns)
            }
            _ => None,
        };
        if let Some(Some(path)) = pin {
            *ns = LinuxNamespaceBuilder::default()
                .typ(ns.typ())
                .path(path.clone())
                .build()
                .map_err(invalid)?;
        }
    }
    namespaces.retain(|n| match n.typ() {
        LinuxNamespaceType::Network => pod.net_ns.is_some(),
        LinuxNamespaceType::Ipc => pod.ipc_ns.is_some(),
        LinuxNamespaceType::Uts => pod.uts_ns.is_some(),
        LinuxNamespaceType::Pid => spec.security.pid_mode != NamespaceMode::Node,
        _ => true,
    });
    let bind = |dest: &str, src: &std::path::Path, ro: bool| {
        let mut options = vec!["rbind".to_owned(), "rprivate".to_owned()];
        if ro {
            options.push("ro".into());
        }
        MountBuilder::default()
            .destination(dest)
            .typ("bind")
            .source(src)
            .options(options)
            .build()
    };
    let mut mounts = oci_spec::runtime::get_default_mounts();
    for (dest, src) in [
        ("/etc/hostname", &pod.hostname_file),
        ("/etc/hosts", &pod.hosts_file),
        ("/etc/resolv.conf", &pod.resolv_conf),
    ] {
        if !input.mounts.iter().any(|m| m.container_path == dest) {
            mounts.push(bind(dest, src, false).map_err(invalid)?);
        }
    }
    if let Some(shm) = &pod.shm {
        mounts.retain(|m| m.destination() != std::path::Path::new("/dev/shm"));
        mounts.push(bind("/dev/shm", shm, false).map_err(invalid)?);
    }
    for m in input.mounts {
        mounts.push(bind(&m.container_path, m.host_path.as_ref(), m.readonly).map_err(invalid)?);
    }
    let linux = LinuxBuilder::default()
        .namespaces(namespaces)
        .cgroups_path(PathBuf::from(input.cgroups_path))
        .build()
        .map_err(invalid)?;
    let mut out = Spec::default();
    out.set_hostname(None)
        .set_process(Some(process))
        .set_root(Some(
            RootBuilder::default()
                .path(input.rootfs)
                .readonly(spec.security.readonly_rootfs)
                .build()
                .map_err(invalid)?,
        ))
        .set_mounts(Some(mounts))
        .set_linux(Some(linux))
        .set_annotations(Some(spec.annotations.clone().into_iter().collect()));
    Ok(out)
}

fn invalid(e: impl std::fmt::Display) -> SpecError {
    SpecError::Invalid(e.to_string())
}

/// The process an ExecSync or Exec runs: the container's, with `cmd` and a tty or not.
pub fn exec_process(
    container: &oci_spec::runtime::Process,
    cmd: &[String],
    tty: bool,
) -> oci_spec::runtime::Process {
    let mut p = container.clone();
    p.set_args(Some(cmd.to_vec())).set_terminal(Some(tty));
    p
}

/// Resolves the user a container runs as (interim: numeric users only, no groups file).
pub fn resolve_user(
    security: &crate::container::SecurityContext,
    image_user: &str,
    _passwd: &str,
    _group: &str,
) -> Result<ResolvedUser, SpecError> {
    let uid = security
        .run_as_user
        .map(|u| u as u32)
        .or_else(|| image_user.split(':').next().and_then(|u| u.parse().ok()))
        .unwrap_or(0);
    let gid = security.run_as_group.map(|g| g as u32).unwrap_or(0);
    Ok(ResolvedUser {
        uid,
        gid,
        additional_gids: security
            .supplemental_groups
            .iter()
            .map(|g| *g as u32)
            .collect(),
    })
}

/// Parses a Localhost seccomp profile (interim: OCI format only).
pub fn parse_seccomp_profile(json: &str) -> Result<LinuxSeccomp, SpecError> {
    serde_json::from_str(json).map_err(|e| SpecError::Invalid(format!("seccomp profile: {e}")))
}

/// The signal StopContainer sends first: the request's, else the image's, else SIGTERM.
pub fn stop_signal(requested: &str, image: &str) -> Result<i32, SpecError> {
    let name = [requested, image]
        .into_iter()
        .find(|s| !s.is_empty())
        .unwrap_or("SIGTERM");
    if let Ok(n) = name.parse::<i32>() {
        return Ok(n);
    }
    let full = if name.starts_with("SIG") {
        name.to_owned()
    } else {
        format!("SIG{name}")
    };
    full.parse::<nix::sys::signal::Signal>()
        .map(|s| s as i32)
        .map_err(|_| SpecError::Invalid(format!("stop signal {name:?} is not a signal")))
}

/// CRI resources as the OCI spec's (interim: cpu, cpuset, memory).
pub fn linux_resources(
    r: &crate::container::Resources,
    _host: &HostFeatures,
) -> Result<oci_spec::runtime::LinuxResources, SpecError> {
    use oci_spec::runtime::{LinuxCpuBuilder, LinuxMemoryBuilder, LinuxResourcesBuilder};
    let mut cpu = LinuxCpuBuilder::default();
    if r.cpu_shares > 0 {
        cpu = cpu.shares(r.cpu_shares as u64);
    }
    if r.cpu_quota != 0 {
        cpu = cpu.quota(r.cpu_quota);
    }
    if r.cpu_period > 0 {
        cpu = cpu.period(r.cpu_period as u64);
    }
    if !r.cpuset_cpus.is_empty() {
        cpu = cpu.cpus(r.cpuset_cpus.clone());
    }
    if !r.cpuset_mems.is_empty() {
        cpu = cpu.mems(r.cpuset_mems.clone());
    }
    let mut memory = LinuxMemoryBuilder::default();
    if r.memory_limit > 0 {
        memory = memory.limit(r.memory_limit);
    }
    if r.memory_swap_limit != 0 {
        memory = memory.swap(r.memory_swap_limit);
    }
    LinuxResourcesBuilder::default()
        .cpu(cpu.build().map_err(invalid)?)
        .memory(memory.build().map_err(invalid)?)
        .build()
        .map_err(invalid)
}
