//! A typical container for the tests: a busybox-like image, a user resolved as critest's
//! predefined-group image has it, a pod with its own namespaces and files, on cgroup v2.

use std::path::PathBuf;

use crate::image::RuntimeConfig;
use crate::model::NamespaceMode;
use crate::model::{ContainerSpec, MountSpec, ResolvedUser};

use super::{DeviceNode, HostFeatures, PodView, SeccompProfile, SpecInput};

pub(crate) struct Fixture {
    pub spec: ContainerSpec,
    pub image: RuntimeConfig,
    pub user: ResolvedUser,
    pub pod: PodView,
    pub rootfs: PathBuf,
    pub mounts: Vec<MountSpec>,
    pub devices: Vec<DeviceNode>,
    pub seccomp: Option<SeccompProfile>,
    pub host: HostFeatures,
}

impl Fixture {
    pub fn new() -> Self {
        let mut spec = ContainerSpec::default();
        spec.metadata.name = "c1".into();
        spec.image = "busybox".into();
        spec.command = vec!["/bin/sh".into(), "-c".into(), "sleep 1000".into()];
        // What kubelet sends for a pod that does not share its PID namespace (the derived
        // default, POD, is CRI's zero value).
        spec.security.pid_mode = NamespaceMode::Container;
        // kubelet's lists for `procMount: Default` (an empty list means none).
        spec.security.masked_paths = ["/proc/kcore", "/proc/keys", "/sys/firmware"]
            .map(String::from)
            .to_vec();
        spec.security.readonly_paths = ["/proc/bus", "/proc/sys"].map(String::from).to_vec();
        let pod_dir = PathBuf::from("/run/crust/pods/p1");
        let ns_dir = PathBuf::from("/run/crust/ns/p1");
        Fixture {
            spec,
            image: RuntimeConfig {
                env: vec![
                    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
                ],
                cmd: vec!["sh".into()],
                ..Default::default()
            },
            user: ResolvedUser {
                uid: 1000,
                gid: 1000,
                additional_gids: vec![1000, 50000],
                home: None,
            },
            pod: PodView {
                id: "p1".into(),
                hostname: "pod-host".into(),
                net_ns: Some(ns_dir.join("net")),
                ipc_ns: Some(ns_dir.join("ipc")),
                uts_ns: Some(ns_dir.join("uts")),
                pid_ns: None,
                shm: Some(pod_dir.join("shm")),
                resolv_conf: pod_dir.join("resolv.conf"),
                hostname_file: pod_dir.join("hostname"),
                hosts_file: pod_dir.join("hosts"),
                ..Default::default()
            },
            rootfs: PathBuf::from("/var/lib/crust/containers/c1/rootfs"),
            mounts: Vec::new(),
            devices: Vec::new(),
            seccomp: None,
            host: HostFeatures {
                cgroup_v2: true,
                mount_setattr: true,
                swap_limit: true,
                min_oom_score_adj: -999,
                ..Default::default()
            },
        }
    }

    pub fn input(&self) -> SpecInput<'_> {
        SpecInput {
            container_id: "c1-id",
            spec: &self.spec,
            image: &self.image,
            image_name: "docker.io/library/busybox:latest",
            user: &self.user,
            pod: &self.pod,
            rootfs: &self.rootfs,
            cgroups_path: "/crust/crust-p1/c1-id",
            mounts: &self.mounts,
            devices: &self.devices,
            seccomp_localhost: self.seccomp.as_ref(),
            host: &self.host,
        }
    }
}
