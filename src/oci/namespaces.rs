//! Which namespaces a container gets. It joins its pod's network, IPC and UTS namespaces
//! (through the pins the pod's monitor holds; none pinned means the host's), has its own
//! mount namespace, and a PID namespace chosen by its `pid_mode`: its own (`Container`, the
//! default), the pod's shared one (`Pod`), the host's (`Node`) or another container's
//! (`Target`). It gets its own cgroup namespace on cgroup v2, like containerd (on v1 a cgroup
//! namespace would hide the controllers' real paths), and its pod's user namespace when the
//! pod has one (`hostUsers: false`), never one of its own.
//!
//! No hostname is ever set in the spec: the pod's UTS namespace already carries it, and
//! libcontainer refuses a hostname without a UTS namespace of the container's own.

use std::path::Path;

use oci_spec::runtime::{LinuxNamespace, LinuxNamespaceType};

use crate::model::NamespaceMode;

use super::{PodView, SpecError};

/// The `linux.namespaces` of a container.
pub(crate) fn namespaces(
    pid_mode: NamespaceMode,
    pod: &PodView,
    cgroup_v2: bool,
) -> Result<Vec<LinuxNamespace>, SpecError> {
    let mut out = Vec::with_capacity(7);
    // The user namespace first: the pod's others are owned by it.
    if let Some((pin, _)) = &pod.user_ns {
        out.push(join(LinuxNamespaceType::User, pin));
    }
    match pid_mode {
        NamespaceMode::Container => out.push(new(LinuxNamespaceType::Pid)),
        NamespaceMode::Node => {}
        NamespaceMode::Pod => {
            let pin = pod.pid_ns.as_deref().ok_or_else(|| {
                SpecError::Invalid(format!(
                    "pid namespace mode POD: pod {} does not share a PID namespace",
                    pod.id
                ))
            })?;
            out.push(join(LinuxNamespaceType::Pid, pin));
        }
        NamespaceMode::Target => {
            let pin = pod.target_pid_ns.as_deref().ok_or_else(|| {
                SpecError::Invalid(
                    "pid namespace mode TARGET: the target container's PID namespace is unknown"
                        .into(),
                )
            })?;
            out.push(join(LinuxNamespaceType::Pid, pin));
        }
    }
    let pod_pins = [
        (LinuxNamespaceType::Network, &pod.net_ns),
        (LinuxNamespaceType::Ipc, &pod.ipc_ns),
        (LinuxNamespaceType::Uts, &pod.uts_ns),
    ];
    for (kind, pin) in pod_pins {
        if let Some(pin) = pin {
            out.push(join(kind, pin));
        }
    }
    out.push(new(LinuxNamespaceType::Mount));
    if cgroup_v2 {
        out.push(new(LinuxNamespaceType::Cgroup));
    }
    Ok(out)
}

fn new(kind: LinuxNamespaceType) -> LinuxNamespace {
    let mut ns = LinuxNamespace::default();
    ns.set_typ(kind);
    ns
}

fn join(kind: LinuxNamespaceType, pin: &Path) -> LinuxNamespace {
    let mut ns = new(kind);
    ns.set_path(Some(pin.to_path_buf()));
    ns
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use LinuxNamespaceType::{Cgroup, Ipc, Mount, Network, Pid, Uts};

    fn pod() -> PodView {
        PodView {
            id: "pod1".into(),
            net_ns: Some("/run/crust/ns/pod1/net".into()),
            ipc_ns: Some("/run/crust/ns/pod1/ipc".into()),
            uts_ns: Some("/run/crust/ns/pod1/uts".into()),
            pid_ns: Some("/run/crust/ns/pod1/pid".into()),
            target_pid_ns: Some("/proc/42/ns/pid".into()),
            ..Default::default()
        }
    }

    fn host_pod() -> PodView {
        PodView {
            id: "pod2".into(),
            ..Default::default()
        }
    }

    fn summary(list: &[LinuxNamespace]) -> Vec<(LinuxNamespaceType, Option<PathBuf>)> {
        list.iter()
            .map(|ns| (ns.typ(), ns.path().clone()))
            .collect()
    }

    fn p(s: &str) -> Option<PathBuf> {
        Some(PathBuf::from(s))
    }

    #[test]
    fn picks_namespaces() {
        let pins = |pid: Option<(LinuxNamespaceType, Option<PathBuf>)>, v2: bool| {
            let mut v: Vec<_> = pid.into_iter().collect();
            v.extend([
                (Network, p("/run/crust/ns/pod1/net")),
                (Ipc, p("/run/crust/ns/pod1/ipc")),
                (Uts, p("/run/crust/ns/pod1/uts")),
                (Mount, None),
            ]);
            if v2 {
                v.push((Cgroup, None));
            }
            v
        };
        let table = [
            (
                "own pid, v2",
                NamespaceMode::Container,
                pod(),
                true,
                pins(Some((Pid, None)), true),
            ),
            (
                "own pid, v1",
                NamespaceMode::Container,
                pod(),
                false,
                pins(Some((Pid, None)), false),
            ),
            (
                "pod pid",
                NamespaceMode::Pod,
                pod(),
                true,
                pins(Some((Pid, p("/run/crust/ns/pod1/pid"))), true),
            ),
            (
                "host pid",
                NamespaceMode::Node,
                pod(),
                true,
                pins(None, true),
            ),
            (
                "target pid",
                NamespaceMode::Target,
                pod(),
                false,
                pins(Some((Pid, p("/proc/42/ns/pid"))), false),
            ),
            (
                "host network, ipc and uts",
                NamespaceMode::Container,
                host_pod(),
                true,
                vec![(Pid, None), (Mount, None), (Cgroup, None)],
            ),
        ];
        for (name, mode, pod, v2, want) in table {
            assert_eq!(
                summary(&namespaces(mode, &pod, v2).unwrap()),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn missing_pid_pins_are_errors() {
        let err = namespaces(NamespaceMode::Pod, &host_pod(), true).unwrap_err();
        assert_eq!(
            err.to_string(),
            "pid namespace mode POD: pod pod2 does not share a PID namespace"
        );
        let err = namespaces(NamespaceMode::Target, &host_pod(), true).unwrap_err();
        assert!(err.to_string().starts_with("pid namespace mode TARGET"));
    }
}
