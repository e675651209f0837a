//! CRI container config -> OCI runtime spec: pure functions, table-tested. Nothing here touches
//! the filesystem or the kernel: the container module gathers what the spec needs from the
//! host (the image's passwd and group files, host paths and devices, a localhost seccomp
//! profile, host features) into [`SpecInput`] first, so every rule here is a plain function of
//! its input.
//!
//! One file per concern: `process` (args, env, cwd, rlimits, exec processes), `user` (who the
//! process runs as), `security` (capabilities, privileged, masked paths, seccomp choice,
//! AppArmor, SELinux) with `seccomp` (node profiles) and `seccomp_default` (the default
//! profile, containerd's, as data), `mounts`, `resources` (cgroup limits and devices), `namespaces` and `signal`
//! (the stop signal). [`build`] assembles them into the spec libcontainer runs.
//!
//! The spec is written for youki's libcontainer 0.7, whose rules it follows where they differ
//! from runc's: no `hostname` (the pod's UTS namespace has it), no `Some(false)`
//! no_new_privileges, `slave`/`shared`/`private` root propagation, masked seccomp
//! comparisons written mask-in-`valueTwo`; each is explained where it is decided. The pod's
//! sysctls are not repeated in the spec: the pod's monitor set them in the namespaces the
//! container joins.

mod capabilities;
mod mounts;
mod namespaces;
mod process;
mod resources;
mod seccomp;
mod seccomp_default;
mod security;
mod signal;
mod user;

#[cfg(any(test, fuzzing))]
pub(crate) mod fixture;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use oci_spec::runtime::{Linux, Root, Spec};

use crate::image::RuntimeConfig;
use crate::model::{ContainerSpec, ResolvedUser};

pub use capabilities::parse_capability;
pub use process::exec_process;
pub use resources::{container_resources, cri_resources, pod_resources};
pub use seccomp::{SeccompProfile, masked_as_runc_reads, parse_seccomp_profile};
pub use seccomp_default::default_profile as runtime_default_seccomp;
pub use signal::{parse_signal, stop_signal};
pub use user::{AccountFiles, resolve_user};

/// Why a spec could not be built: always the request's fault (InvalidArgument) or a feature
/// this host lacks (FailedPrecondition); see `SpecError::is_host_limit`.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    HostLacks(String),
    /// crust's own data is wrong (its built-in seccomp profile): a bug, never the request's.
    #[error("{0}")]
    Bug(String),
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
    /// The pod's user namespace pin and its maps, when it has one of its own.
    pub user_ns: Option<(PathBuf, crate::model::IdMaps)>,
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
    /// Why pods cannot have user namespaces here (the probe's first failed step); `None`:
    /// they can.
    pub no_user_namespaces: Option<String>,
    /// The lowest oom_score_adj crust itself may give a process (crust without
    /// CAP_SYS_RESOURCE cannot go below its own value).
    pub min_oom_score_adj: i64,
    /// The capabilities crust itself holds (its bounding set): a privileged container, or one
    /// asking for ALL, gets these (no process can hand out more). `None`: every capability.
    pub available_caps: Option<std::collections::HashSet<oci_spec::runtime::Capability>>,
    /// The highest RLIMIT_NOFILE crust may give a process (without CAP_SYS_RESOURCE, its own
    /// hard limit); 0: unknown, no clamp.
    pub max_nofile: u64,
    /// On cgroup v1: the container's own cgroup directory in each hierarchy, by the name it
    /// has under /sys/fs/cgroup (`memory`, `cpu,cpuacct`, and the `cpu` alias). Bound there
    /// read-only instead of a `cgroup` mount: libcontainer 0.7 emulates that mount from
    /// `/proc/<pid>` of the host, which names another process when the container joins its
    /// pod's PID namespace. Empty: a `cgroup` mount (cgroup v2, with a cgroup namespace).
    pub cgroup_v1_binds: Vec<(String, PathBuf)>,
    /// Whether each request mount's host path sits on a shared / slave mount, by host path
    /// (needed for Bidirectional / HostToContainer propagation).
    pub mount_propagation: BTreeMap<String, HostPropagation>,
    /// The memory controller can limit swap (cgroup v1 `memory.memsw.*`, v2
    /// `memory.swap.max`); without it no swap limit is written.
    pub swap_limit: bool,
    /// The container's cgroup hierarchy has the hugetlb controller. Without it hugepage limits
    /// are left out, as runc leaves out a controller that is not mounted: kubelet asks for
    /// them whenever the kernel has huge pages, and a hybrid v1 host may keep hugetlb only in
    /// the unified hierarchy no container is placed in.
    pub hugetlb: bool,
    /// The AppArmor profile `RuntimeDefault` (and an unset profile) means, once the container
    /// module has loaded it; `None` leaves such containers without a profile.
    pub apparmor_default_profile: Option<String>,
    /// The node's `default_ulimits`: every container's process starts with these.
    pub default_ulimits: Vec<crate::config::Ulimit>,
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
    pub mounts: &'a [crate::model::MountSpec],
    /// Request devices resolved from the host, plus all host devices when privileged.
    pub devices: &'a [DeviceNode],
    /// The parsed `Localhost` seccomp profile (see [`parse_seccomp_profile`]), when the
    /// request names one.
    pub seccomp_localhost: Option<&'a SeccompProfile>,
    pub host: &'a HostFeatures,
}

/// A range as the spec carries it (libcontainer joins the pod's namespace and writes none:
/// the maps say what the container's ids are on the node).
fn id_mapping(r: crate::model::IdRange) -> oci_spec::runtime::LinuxIdMapping {
    oci_spec::runtime::LinuxIdMappingBuilder::default()
        .container_id(r.container)
        .host_id(r.host)
        .size(r.size)
        .build()
        .unwrap_or_default()
}

/// Builds the OCI runtime spec for a container.
pub fn build(input: &SpecInput<'_>) -> Result<Spec, SpecError> {
    let sc = &input.spec.security;
    let security = security::security(sc, input.seccomp_localhost, input.host)?;
    let process = process::process(
        &process::ProcessInput {
            spec: input.spec,
            image: input.image,
            image_name: input.image_name,
            user: input.user,
            pod_hostname: &input.pod.hostname,
            min_oom_score_adj: input.host.min_oom_score_adj,
            max_nofile: input.host.max_nofile,
            default_ulimits: &input.host.default_ulimits,
        },
        &security,
    )?;
    let mounts = mounts::mounts(input, security.privileged)?;
    let namespaces = namespaces::namespaces(sc.pid_mode, input.pod, input.host.cgroup_v2)?;
    let resources = resources::resources(
        &input.spec.resources,
        input.devices,
        sc.privileged,
        input.host,
    )?;
    let devices = resources::linux_devices(input.devices)?;

    let non_empty = |v: Vec<String>| Some(v).filter(|v| !v.is_empty());
    let mut linux = Linux::default();
    linux
        .set_namespaces(Some(namespaces))
        .set_resources(Some(resources))
        .set_devices(Some(devices).filter(|d| !d.is_empty()))
        .set_cgroups_path(Some(input.cgroups_path.into()))
        .set_masked_paths(non_empty(security.masked_paths))
        .set_readonly_paths(non_empty(security.readonly_paths))
        .set_seccomp(security.seccomp)
        .set_rootfs_propagation(Some(mounts.rootfs_propagation))
        .set_mount_label(security.mount_label)
        .set_sysctl(None)
        .set_uid_mappings(
            input
                .pod
                .user_ns
                .as_ref()
                .map(|(_, m)| vec![id_mapping(m.uid)]),
        )
        .set_gid_mappings(
            input
                .pod
                .user_ns
                .as_ref()
                .map(|(_, m)| vec![id_mapping(m.gid)]),
        );
    let mut root = Root::default();
    root.set_path(input.rootfs.to_path_buf())
        .set_readonly(Some(sc.readonly_rootfs));
    let mut spec = Spec::default();
    spec.set_hostname(None)
        .set_domainname(None)
        .set_process(Some(process))
        .set_root(Some(root))
        .set_mounts(Some(mounts.mounts))
        .set_annotations(Some(annotations(input)))
        .set_hooks(None)
        .set_linux(Some(linux));
    Ok(spec)
}

/// The request's annotations, and the ones containerd adds that tools read back.
fn annotations(input: &SpecInput<'_>) -> HashMap<String, String> {
    let mut out: HashMap<String, String> = input.spec.annotations.clone().into_iter().collect();
    let ours = [
        ("io.kubernetes.cri.container-type", "container"),
        ("io.kubernetes.cri.sandbox-id", input.pod.id.as_str()),
        (
            "io.kubernetes.cri.container-name",
            input.spec.metadata.name.as_str(),
        ),
        ("io.kubernetes.cri.image-name", input.image_name),
    ];
    for (key, value) in ours {
        out.insert(key.to_string(), value.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use libcontainer::validator::Validator;
    use oci_spec::runtime::{Capability, LinuxNamespaceType, LinuxSeccompAction};

    use super::fixture::Fixture;
    use super::*;
    use crate::model::NamespaceMode;
    use crate::model::{MountSpec, Profile, Propagation};

    #[test]
    fn builds_a_spec_libcontainer_accepts() {
        let mut fx = Fixture::new();
        fx.spec.security.seccomp = Some(Profile::RuntimeDefault);
        fx.spec.security.no_new_privs = true;
        fx.spec.annotations.insert("team".into(), "a".into());
        fx.spec
            .annotations
            .insert("io.kubernetes.cri.container-type".into(), "forged".into());
        fx.spec.resources.memory_limit = 64 << 20;
        fx.mounts = vec![MountSpec {
            container_path: "/data".into(),
            host_path: "/srv/data".into(),
            ..Default::default()
        }];
        let spec = build(&fx.input()).unwrap();
        Validator::validate_spec(&spec).unwrap();

        assert!(spec.version().starts_with("1."));
        assert_eq!(
            spec.hostname(),
            &None,
            "the pod's UTS namespace carries the hostname"
        );
        let root = spec.root().as_ref().unwrap();
        assert_eq!(
            (root.path().as_path(), root.readonly()),
            (fx.rootfs.as_path(), Some(false))
        );
        let annotations = spec.annotations().as_ref().unwrap();
        for (key, value) in [
            ("team", "a"),
            ("io.kubernetes.cri.container-type", "container"),
            ("io.kubernetes.cri.sandbox-id", "p1"),
            ("io.kubernetes.cri.container-name", "c1"),
            (
                "io.kubernetes.cri.image-name",
                "docker.io/library/busybox:latest",
            ),
        ] {
            assert_eq!(
                annotations.get(key).map(String::as_str),
                Some(value),
                "{key}"
            );
        }

        let linux = spec.linux().as_ref().unwrap();
        assert_eq!(
            linux.cgroups_path().as_deref(),
            Some(Path::new("/crust/crust-p1/c1-id"))
        );
        assert_eq!(linux.rootfs_propagation().as_deref(), Some("private"));
        assert_eq!(linux.sysctl(), &None);
        assert_eq!(
            linux.masked_paths().as_ref(),
            Some(&fx.spec.security.masked_paths)
        );
        assert_eq!(
            linux.readonly_paths().as_ref(),
            Some(&fx.spec.security.readonly_paths)
        );
        let seccomp = linux.seccomp().as_ref().unwrap();
        assert_eq!(seccomp.default_action(), LinuxSeccompAction::ScmpActErrno);
        let kinds: Vec<_> = linux
            .namespaces()
            .iter()
            .flatten()
            .map(|n| n.typ())
            .collect();
        assert_eq!(
            kinds,
            [
                LinuxNamespaceType::Pid,
                LinuxNamespaceType::Network,
                LinuxNamespaceType::Ipc,
                LinuxNamespaceType::Uts,
                LinuxNamespaceType::Mount,
                LinuxNamespaceType::Cgroup,
            ]
        );
        let memory = linux
            .resources()
            .as_ref()
            .and_then(|r| r.memory().as_ref())
            .unwrap();
        assert_eq!(memory.limit(), Some(64 << 20));

        let process = spec.process().as_ref().unwrap();
        assert_eq!(process.no_new_privileges(), Some(true));
        assert_eq!(process.oom_score_adj(), Some(0));
        assert_eq!(process.apparmor_profile(), &None);
        let env = process.env().as_ref().unwrap();
        assert_eq!(env.iter().filter(|e| e.starts_with("PATH=")).count(), 1);

        // The spec survives the config.json round trip libcontainer makes.
        let json = serde_json::to_string(&spec).unwrap();
        let back: Spec = serde_json::from_str(&json).unwrap();
        assert_eq!(back, spec);
    }

    #[test]
    fn privileged_spec() {
        let mut fx = Fixture::new();
        fx.spec.security.privileged = true;
        fx.spec.security.seccomp = Some(Profile::RuntimeDefault);
        fx.spec.security.readonly_rootfs = true;
        fx.spec.security.pid_mode = NamespaceMode::Node;
        fx.devices = vec![DeviceNode {
            container_path: "/dev/kmsg".into(),
            host_path: "/dev/kmsg".into(),
            kind: 'c',
            major: 1,
            minor: 11,
            file_mode: 0o644,
            uid: 0,
            gid: 0,
            permissions: "rwm".into(),
        }];
        fx.mounts = vec![MountSpec {
            container_path: "/shared".into(),
            host_path: "/mnt/shared".into(),
            propagation: Propagation::Bidirectional,
            ..Default::default()
        }];
        fx.host
            .mount_propagation
            .insert("/mnt/shared".into(), HostPropagation::Shared);
        let spec = build(&fx.input()).unwrap();
        Validator::validate_spec(&spec).unwrap();

        let linux = spec.linux().as_ref().unwrap();
        assert_eq!(linux.seccomp(), &None);
        assert_eq!(linux.masked_paths(), &None);
        assert_eq!(linux.readonly_paths(), &None);
        assert_eq!(linux.rootfs_propagation().as_deref(), Some("shared"));
        assert_eq!(linux.devices().as_ref().map(|d| d.len()), Some(1));
        let rules = linux
            .resources()
            .as_ref()
            .and_then(|r| r.devices().clone())
            .unwrap();
        assert_eq!(rules.len(), 1);
        assert!(rules[0].allow() && rules[0].typ().is_none());
        let kinds: Vec<_> = linux
            .namespaces()
            .iter()
            .flatten()
            .map(|n| n.typ())
            .collect();
        assert!(!kinds.contains(&LinuxNamespaceType::Pid));
        assert_eq!(spec.root().as_ref().and_then(|r| r.readonly()), Some(true));
        let caps = spec
            .process()
            .as_ref()
            .and_then(|p| p.capabilities().clone())
            .unwrap();
        assert!(
            caps.bounding()
                .as_ref()
                .unwrap()
                .contains(&Capability::SysAdmin)
        );
        let sys = spec
            .mounts()
            .iter()
            .flatten()
            .find(|m| m.destination() == Path::new("/sys"));
        assert!(!sys.unwrap().options().iter().flatten().any(|o| o == "ro"));
    }

    #[test]
    fn errors_say_which_kind() {
        let mut fx = Fixture::new();
        fx.spec.security.apparmor = Some(Profile::Localhost("p".into()));
        assert!(build(&fx.input()).unwrap_err().is_host_limit());

        let mut fx = Fixture::new();
        fx.spec.security.capabilities.add = vec!["CAP_FOO".into()];
        let err = build(&fx.input()).unwrap_err();
        assert!(!err.is_host_limit());
        assert_eq!(
            err.to_string(),
            "capabilities.add: unknown capability \"CAP_FOO\""
        );

        let mut fx = Fixture::new();
        fx.spec.command.clear();
        fx.image.cmd.clear();
        assert!(
            build(&fx.input())
                .unwrap_err()
                .to_string()
                .contains("nothing to run")
        );
    }
}
