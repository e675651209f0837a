//! A container's mounts, in the order libcontainer performs them:
//! 1. the kernel filesystems every container has, in runc/containerd order (/proc, /dev,
//!    /dev/pts, /dev/mqueue, /sys, /sys/fs/cgroup), /sys and the cgroup fs read-only unless
//!    privileged; one the request mounts over (or over a parent of) is left out;
//! 2. then, sorted by depth (a parent before its children, as containerd sorts), the pod's
//!    /dev/shm and its /etc/hostname, /etc/hosts and /etc/resolv.conf (each left out when
//!    the request mounts that path itself, as kubelet does for /etc/hosts), and the
//!    request's bind mounts.
//!
//! Propagation needs care with libcontainer 0.7: it parses `rprivate`/`rslave`/`rshared` on
//! a bind mount but never applies them; a bind mount inherits the propagation its source
//! has in the container's mount namespace after the root's propagation is set from
//! `linux.rootfsPropagation` (and it accepts only `shared`, `slave`, `private`,
//! `unbindable` there, not runc's `rshared`/`rslave`). So the root propagation is what makes
//! a mount's propagation: `shared` when a mount is Bidirectional, `slave` when one is
//! HostToContainer, `private` otherwise. The per-mount options are still written, so the
//! spec says what was asked and a libcontainer that applies them needs no change here.

use std::path::{Component, Path, PathBuf};

use oci_spec::runtime::Mount;

use crate::model::{MountSpec, Propagation};

use super::{HostFeatures, HostPropagation, SpecError, SpecInput};

/// The only paths under /proc that libcontainer lets a bind mount cover (lxcfs's files).
const PROC_MOUNTABLE: &[&str] = &[
    "/proc/cpuinfo",
    "/proc/diskstats",
    "/proc/meminfo",
    "/proc/stat",
    "/proc/swaps",
    "/proc/uptime",
    "/proc/loadavg",
    "/proc/slabinfo",
    "/proc/sys/kernel/ns_last_pid",
    "/proc/sys/crypto/fips_enabled",
];

/// A kernel filesystem every container gets.
struct KernelMount {
    destination: &'static str,
    kind: &'static str,
    source: &'static str,
    options: &'static [&'static str],
    /// Read-only unless the container is privileged.
    ro_unless_privileged: bool,
}

const KERNEL_MOUNTS: &[KernelMount] = &[
    KernelMount {
        destination: "/proc",
        kind: "proc",
        source: "proc",
        options: &["nosuid", "noexec", "nodev"],
        ro_unless_privileged: false,
    },
    KernelMount {
        destination: "/dev",
        kind: "tmpfs",
        source: "tmpfs",
        options: &["nosuid", "strictatime", "mode=755", "size=65536k"],
        ro_unless_privileged: false,
    },
    KernelMount {
        destination: "/dev/pts",
        kind: "devpts",
        source: "devpts",
        options: &[
            "nosuid",
            "noexec",
            "newinstance",
            "ptmxmode=0666",
            "mode=0620",
            "gid=5",
        ],
        ro_unless_privileged: false,
    },
    KernelMount {
        destination: "/dev/mqueue",
        kind: "mqueue",
        source: "mqueue",
        options: &["nosuid", "noexec", "nodev"],
        ro_unless_privileged: false,
    },
    KernelMount {
        destination: "/sys",
        kind: "sysfs",
        source: "sysfs",
        options: &["nosuid", "noexec", "nodev"],
        ro_unless_privileged: true,
    },
    KernelMount {
        destination: "/sys/fs/cgroup",
        kind: "cgroup",
        source: "cgroup",
        options: &["nosuid", "noexec", "nodev", "relatime"],
        ro_unless_privileged: true,
    },
];

/// The mounts and the `linux.rootfsPropagation` of a container.
#[derive(Debug)]
pub(crate) struct Mounts {
    pub mounts: Vec<Mount>,
    pub rootfs_propagation: String,
}

pub(crate) fn mounts(input: &SpecInput<'_>, privileged: bool) -> Result<Mounts, SpecError> {
    let requested: Vec<(PathBuf, &MountSpec)> = input
        .mounts
        .iter()
        .map(|m| Ok((check_request(m, input.host)?, m)))
        .collect::<Result<_, SpecError>>()?;
    let covered = |dest: &Path| requested.iter().any(|(path, _)| dest.starts_with(path));

    let binds = &input.host.cgroup_v1_binds;
    let mut out: Vec<Mount> = KERNEL_MOUNTS
        .iter()
        .filter(|k| !covered(Path::new(k.destination)))
        .map(|k| {
            if k.kind == "cgroup" && !binds.is_empty() {
                cgroup_tmpfs()
            } else if k.kind == "sysfs" && input.pod.user_ns.is_some() && input.pod.host_network {
                host_sysfs(privileged)
            } else {
                kernel_mount(k, privileged)
            }
        })
        .collect();
    if !covered(Path::new(CGROUP_ROOT)) {
        out.extend(
            binds
                .iter()
                .map(|(name, dir)| cgroup_bind(name, dir, privileged)),
        );
    }

    let mut later: Vec<Mount> = pod_mounts(input)
        .into_iter()
        .filter(|m| !requested.iter().any(|(path, _)| path == m.destination()))
        .collect();
    later.extend(requested.iter().map(|(path, m)| request_mount(path, m)));
    later.sort_by_key(|m| m.destination().components().count());
    out.extend(later);

    Ok(Mounts {
        mounts: out,
        rootfs_propagation: rootfs_propagation(input.mounts).into(),
    })
}

const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// /sys for a container in a user namespace on the node's network: sysfs can be mounted only by
/// a user namespace owning the network namespace, so the node's is bound instead (as runc falls
/// back to for the same pods), read-only unless privileged.
fn host_sysfs(privileged: bool) -> Mount {
    let mut options = strings(&["rbind", "rprivate", "nosuid", "noexec", "nodev"]);
    if !privileged {
        options.push("ro".into());
    }
    mount("/sys", "bind", Path::new("/sys"), options)
}

/// Where the container's cgroup v1 directories are bound: a tmpfs like the host's.
fn cgroup_tmpfs() -> Mount {
    mount(
        CGROUP_ROOT,
        "tmpfs",
        Path::new("tmpfs"),
        strings(&["nosuid", "noexec", "nodev", "mode=755"]),
    )
}

/// The container's own cgroup of one v1 hierarchy, at its usual place.
fn cgroup_bind(name: &str, dir: &Path, privileged: bool) -> Mount {
    let mut options = strings(&["rbind", "nosuid", "noexec", "nodev"]);
    if !privileged {
        options.push("ro".into());
    }
    mount(&format!("{CGROUP_ROOT}/{name}"), "bind", dir, options)
}

fn kernel_mount(k: &KernelMount, privileged: bool) -> Mount {
    let mut options: Vec<String> = k.options.iter().map(|o| o.to_string()).collect();
    if k.ro_unless_privileged && !privileged {
        options.push("ro".into());
    }
    mount(k.destination, k.kind, Path::new(k.source), options)
}

/// /dev/shm and the /etc files the pod wrote. They follow a read-only root filesystem, as
/// in containerd; /dev/shm stays writable.
fn pod_mounts(input: &SpecInput<'_>) -> Vec<Mount> {
    let pod = input.pod;
    let shm = pod.shm.as_deref().unwrap_or(Path::new("/dev/shm"));
    let shm_options = ["rbind", "rprivate", "nosuid", "nodev", "noexec", "rw"];
    let mut out = vec![mount("/dev/shm", "bind", shm, strings(&shm_options))];
    let access = if input.spec.security.readonly_rootfs {
        "ro"
    } else {
        "rw"
    };
    let files = [
        ("/etc/hostname", &pod.hostname_file),
        ("/etc/hosts", &pod.hosts_file),
        ("/etc/resolv.conf", &pod.resolv_conf),
    ];
    for (destination, source) in files {
        if !source.as_os_str().is_empty() {
            out.push(mount(
                destination,
                "bind",
                source,
                strings(&["rbind", "rprivate", access]),
            ));
        }
    }
    out
}

fn request_mount(destination: &Path, m: &MountSpec) -> Mount {
    let propagation = match m.propagation {
        Propagation::Private => "rprivate",
        Propagation::HostToContainer => "rslave",
        Propagation::Bidirectional => "rshared",
    };
    let mut options = strings(&["rbind", propagation]);
    if m.readonly || m.recursive_readonly {
        options.push("ro".into());
    } else {
        options.push("rw".into());
    }
    if m.recursive_readonly {
        options.push("rro".into());
    }
    options.extend(m.options.iter().map(|o| o.name().to_owned()));
    let mut out = Mount::default();
    out.set_destination(destination.to_path_buf())
        .set_typ(Some("bind".into()))
        .set_source(Some(PathBuf::from(&m.host_path)))
        .set_options(Some(options));
    out
}

/// Validates one request mount and gives its clean container path.
fn check_request(m: &MountSpec, host: &HostFeatures) -> Result<PathBuf, SpecError> {
    let at = &m.container_path;
    let invalid = |why: String| SpecError::Invalid(format!("mounts[{at}]: {why}"));
    let destination = clean_absolute(at).ok_or_else(|| {
        invalid("the container path must be absolute, without '..', and not /".into())
    })?;
    if destination.starts_with("/proc")
        && !PROC_MOUNTABLE.iter().any(|p| destination == Path::new(p))
    {
        return Err(invalid(
            "only a few lxcfs files under /proc may be mounted over".into(),
        ));
    }
    if !m.host_path.starts_with('/') {
        return Err(invalid(format!(
            "host path {:?} is not absolute",
            m.host_path
        )));
    }
    if m.recursive_readonly {
        if m.propagation != Propagation::Private {
            return Err(invalid(
                "a recursive read-only mount must have private propagation".into(),
            ));
        }
        if !host.mount_setattr {
            return Err(SpecError::HostLacks(format!(
                "mounts[{at}]: recursive read-only needs mount_setattr (Linux 5.12), which this \
                 kernel lacks"
            )));
        }
    }
    let host_side = host.mount_propagation.get(&m.host_path).copied();
    let (ok, needs) = match m.propagation {
        Propagation::Private => (true, ""),
        Propagation::HostToContainer => (
            matches!(
                host_side,
                Some(HostPropagation::Shared | HostPropagation::Slave)
            ),
            "a shared or slave mount (HostToContainer)",
        ),
        Propagation::Bidirectional => (
            host_side == Some(HostPropagation::Shared),
            "a shared mount (Bidirectional)",
        ),
    };
    if !ok {
        return Err(invalid(format!(
            "host path {} is not on {needs}",
            m.host_path
        )));
    }
    Ok(destination)
}

/// The root propagation that gives the request's mounts theirs (see the module docs).
fn rootfs_propagation(requested: &[MountSpec]) -> &'static str {
    let has = |p: Propagation| requested.iter().any(|m| m.propagation == p);
    if has(Propagation::Bidirectional) {
        "shared"
    } else if has(Propagation::HostToContainer) {
        "slave"
    } else {
        "private"
    }
}

/// `path` made canonical (`//a/./b/` is `/a/b`), if it is absolute, has no `..` and is not
/// the root itself.
fn clean_absolute(path: &str) -> Option<PathBuf> {
    let path = Path::new(path);
    if !path.is_absolute() {
        return None;
    }
    let mut out = PathBuf::from("/");
    for part in path.components() {
        match part {
            Component::Normal(name) => out.push(name),
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir | Component::Prefix(_) => return None,
        }
    }
    (out != Path::new("/")).then_some(out)
}

fn mount(destination: &str, kind: &str, source: &Path, options: Vec<String>) -> Mount {
    let mut out = Mount::default();
    out.set_destination(PathBuf::from(destination))
        .set_typ(Some(kind.to_string()))
        .set_source(Some(source.to_path_buf()))
        .set_options(Some(options));
    out
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::super::fixture::Fixture;
    use super::*;
    use crate::model::BindOption;

    fn request(container: &str, host: &str, propagation: Propagation) -> MountSpec {
        MountSpec {
            container_path: container.into(),
            host_path: host.into(),
            propagation,
            ..Default::default()
        }
    }

    fn summary(m: &Mount) -> (String, String, String, String) {
        (
            m.destination().display().to_string(),
            m.typ().clone().unwrap_or_default(),
            m.source()
                .as_ref()
                .map(|s| s.display().to_string())
                .unwrap_or_default(),
            m.options().clone().unwrap_or_default().join(","),
        )
    }

    fn destinations(out: &Mounts) -> Vec<String> {
        out.mounts
            .iter()
            .map(|m| m.destination().display().to_string())
            .collect()
    }

    #[test]
    fn default_mounts_in_order() {
        let fx = Fixture::new();
        let out = mounts(&fx.input(), false).unwrap();
        let got: Vec<_> = out.mounts.iter().map(summary).collect();
        let want = [
            ("/proc", "proc", "proc", "nosuid,noexec,nodev"),
            (
                "/dev",
                "tmpfs",
                "tmpfs",
                "nosuid,strictatime,mode=755,size=65536k",
            ),
            (
                "/dev/pts",
                "devpts",
                "devpts",
                "nosuid,noexec,newinstance,ptmxmode=0666,mode=0620,gid=5",
            ),
            ("/dev/mqueue", "mqueue", "mqueue", "nosuid,noexec,nodev"),
            ("/sys", "sysfs", "sysfs", "nosuid,noexec,nodev,ro"),
            (
                "/sys/fs/cgroup",
                "cgroup",
                "cgroup",
                "nosuid,noexec,nodev,relatime,ro",
            ),
            (
                "/dev/shm",
                "bind",
                "/run/crust/pods/p1/shm",
                "rbind,rprivate,nosuid,nodev,noexec,rw",
            ),
            (
                "/etc/hostname",
                "bind",
                "/run/crust/pods/p1/hostname",
                "rbind,rprivate,rw",
            ),
            (
                "/etc/hosts",
                "bind",
                "/run/crust/pods/p1/hosts",
                "rbind,rprivate,rw",
            ),
            (
                "/etc/resolv.conf",
                "bind",
                "/run/crust/pods/p1/resolv.conf",
                "rbind,rprivate,rw",
            ),
        ];
        let want: Vec<_> = want
            .iter()
            .map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), d.to_string()))
            .collect();
        assert_eq!(got, want);
        assert_eq!(out.rootfs_propagation, "private");
    }

    #[test]
    fn privileged_readonly_rootfs_and_host_ipc() {
        let mut fx = Fixture::new();
        fx.pod.shm = None;
        fx.spec.security.readonly_rootfs = true;
        let out = mounts(&fx.input(), true).unwrap();
        let by_dest = |d: &str| {
            out.mounts
                .iter()
                .find(|m| m.destination() == Path::new(d))
                .map(summary)
                .unwrap()
        };
        assert_eq!(by_dest("/sys").3, "nosuid,noexec,nodev");
        assert_eq!(by_dest("/sys/fs/cgroup").3, "nosuid,noexec,nodev,relatime");
        assert_eq!(by_dest("/dev/shm").2, "/dev/shm");
        assert_eq!(by_dest("/etc/hosts").3, "rbind,rprivate,ro");
        assert_eq!(
            by_dest("/dev/shm").3,
            "rbind,rprivate,nosuid,nodev,noexec,rw"
        );
    }

    #[test]
    fn cgroup_v1_directories_are_bound_read_only_over_a_tmpfs() {
        let mut fx = Fixture::new();
        fx.host.cgroup_v1_binds = vec![
            ("memory".into(), "/sys/fs/cgroup/memory/pod/c".into()),
            ("cpu".into(), "/sys/fs/cgroup/cpu,cpuacct/pod/c".into()),
        ];
        let mounts = mounts(&fx.input(), false).unwrap().mounts;
        let root = mounts
            .iter()
            .find(|m| m.destination() == Path::new("/sys/fs/cgroup"))
            .unwrap();
        assert_eq!(root.typ().as_deref(), Some("tmpfs"));
        let cpu = mounts
            .iter()
            .find(|m| m.destination() == Path::new("/sys/fs/cgroup/cpu"))
            .unwrap();
        assert_eq!(
            cpu.source().as_deref(),
            Some(Path::new("/sys/fs/cgroup/cpu,cpuacct/pod/c"))
        );
        assert!(cpu.options().as_ref().unwrap().contains(&"ro".to_owned()));
    }

    #[test]
    fn request_mounts_replace_and_sort() {
        let mut fx = Fixture::new();
        fx.mounts = vec![
            request("/data/cache/deep", "/host/deep", Propagation::Private),
            request("/etc/hosts", "/var/lib/kubelet/hosts", Propagation::Private),
            request("/data", "/host/data", Propagation::Private),
            request("/sys", "/host/sys", Propagation::Private),
        ];
        fx.mounts[2].readonly = true;
        let out = mounts(&fx.input(), false).unwrap();
        assert_eq!(
            destinations(&out),
            vec![
                "/proc",
                "/dev",
                "/dev/pts",
                "/dev/mqueue",
                "/data",
                "/sys",
                "/dev/shm",
                "/etc/hostname",
                "/etc/resolv.conf",
                "/etc/hosts",
                "/data/cache/deep",
            ]
        );
        let data = out
            .mounts
            .iter()
            .find(|m| m.destination() == Path::new("/data"))
            .unwrap();
        assert_eq!(summary(data).3, "rbind,rprivate,ro");
        let hosts = out
            .mounts
            .iter()
            .find(|m| m.destination() == Path::new("/etc/hosts"))
            .unwrap();
        assert_eq!(summary(hosts).2, "/var/lib/kubelet/hosts");
    }

    #[test]
    fn propagation_follows_the_request_and_the_host() {
        struct Case(&'static str, Propagation, Option<HostPropagation>, Want);
        type Want = Result<(&'static str, &'static str), &'static str>;
        let table = vec![
            Case(
                "private",
                Propagation::Private,
                None,
                Ok(("rprivate", "private")),
            ),
            Case(
                "to container on shared",
                Propagation::HostToContainer,
                Some(HostPropagation::Shared),
                Ok(("rslave", "slave")),
            ),
            Case(
                "to container on slave",
                Propagation::HostToContainer,
                Some(HostPropagation::Slave),
                Ok(("rslave", "slave")),
            ),
            Case(
                "to container on private",
                Propagation::HostToContainer,
                Some(HostPropagation::Private),
                Err(
                    "mounts[/mnt/x]: host path /host/x is not on a shared or slave mount (HostToContainer)",
                ),
            ),
            Case(
                "bidirectional on shared",
                Propagation::Bidirectional,
                Some(HostPropagation::Shared),
                Ok(("rshared", "shared")),
            ),
            Case(
                "bidirectional on slave",
                Propagation::Bidirectional,
                Some(HostPropagation::Slave),
                Err("mounts[/mnt/x]: host path /host/x is not on a shared mount (Bidirectional)"),
            ),
            Case(
                "bidirectional, host unknown",
                Propagation::Bidirectional,
                None,
                Err("mounts[/mnt/x]: host path /host/x is not on a shared mount (Bidirectional)"),
            ),
        ];
        for Case(name, propagation, host_side, want) in table {
            let mut fx = Fixture::new();
            fx.mounts = vec![request("/mnt/x", "/host/x", propagation)];
            if let Some(side) = host_side {
                fx.host.mount_propagation.insert("/host/x".into(), side);
            }
            match (mounts(&fx.input(), true), want) {
                (Ok(out), Ok((option, root))) => {
                    let m = out.mounts.last().unwrap();
                    assert_eq!(summary(m).3, format!("rbind,{option},rw"), "{name}");
                    assert_eq!(out.rootfs_propagation, root, "{name}");
                }
                (Err(err), Err(want)) => assert_eq!(err.to_string(), want, "{name}"),
                (Ok(_), Err(want)) => panic!("{name}: accepted, want {want}"),
                (Err(err), Ok(_)) => panic!("{name}: {err}"),
            }
        }
    }

    #[test]
    fn recursive_readonly_needs_mount_setattr() {
        let mut fx = Fixture::new();
        let mut m = request("/ro", "/host/ro", Propagation::Private);
        m.recursive_readonly = true;
        fx.mounts = vec![m.clone()];
        fx.host.mount_setattr = true;
        let out = mounts(&fx.input(), false).unwrap();
        let ro = out
            .mounts
            .iter()
            .find(|m| m.destination() == Path::new("/ro"))
            .unwrap();
        assert_eq!(summary(ro).3, "rbind,rprivate,ro,rro");

        fx.host.mount_setattr = false;
        let err = mounts(&fx.input(), false).unwrap_err();
        assert!(err.is_host_limit());
        assert_eq!(
            err.to_string(),
            "mounts[/ro]: recursive read-only needs mount_setattr (Linux 5.12), which this kernel lacks"
        );

        m.propagation = Propagation::HostToContainer;
        fx.mounts = vec![m];
        fx.host.mount_setattr = true;
        let err = mounts(&fx.input(), false).unwrap_err();
        assert_eq!(
            err.to_string(),
            "mounts[/ro]: a recursive read-only mount must have private propagation"
        );
    }

    #[test]
    fn bind_options_follow_the_request() {
        let mut fx = Fixture::new();
        let mut m = request("/data", "/host/data", Propagation::Private);
        m.options = vec![BindOption::NoExec, BindOption::NoDev];
        fx.mounts = vec![m];
        let out = mounts(&fx.input(), false).unwrap();
        let data = out
            .mounts
            .iter()
            .find(|m| m.destination() == Path::new("/data"))
            .unwrap();
        assert_eq!(summary(data).3, "rbind,rprivate,rw,noexec,nodev");
    }

    #[test]
    fn refuses_bad_paths() {
        let table = [
            (
                "relative",
                "data",
                "/h",
                "mounts[data]: the container path must be absolute, without '..', and not /",
            ),
            (
                "dotdot",
                "/a/../etc",
                "/h",
                "mounts[/a/../etc]: the container path must be absolute, without '..', and not /",
            ),
            (
                "root",
                "/",
                "/h",
                "mounts[/]: the container path must be absolute, without '..', and not /",
            ),
            (
                "proc",
                "/proc/sys/kernel",
                "/h",
                "mounts[/proc/sys/kernel]: only a few lxcfs files under /proc may be mounted over",
            ),
            (
                "relative host",
                "/x",
                "h",
                "mounts[/x]: host path \"h\" is not absolute",
            ),
        ];
        for (name, container, host, want) in table {
            let mut fx = Fixture::new();
            fx.mounts = vec![request(container, host, Propagation::Private)];
            let err = mounts(&fx.input(), false).unwrap_err();
            assert_eq!(err.to_string(), want, "{name}");
        }
        let mut fx = Fixture::new();
        fx.mounts = vec![request(
            "/proc/meminfo",
            "/var/lib/lxcfs/proc/meminfo",
            Propagation::Private,
        )];
        assert!(mounts(&fx.input(), false).is_ok());
        assert_eq!(clean_absolute("//a/./b/"), Some(PathBuf::from("/a/b")));
    }
}
