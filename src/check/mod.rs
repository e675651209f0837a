//! `crust check`: inspects the host for what crust needs and prints one line per check, so an
//! operator learns what is missing before kubelet does. A `warn` line names something that
//! works but disables a feature or is close to a limit; a `FAIL` line, something in the way.

mod containers;
mod devices;
mod kubelet;
mod runtimes;
mod secrets;

use std::path::Path;

use crate::config::Config;
use crate::network::{Cni, CniSettings};

/// One check's finding.
pub enum Finding {
    Ok(String),
    /// Works, but a feature is off or a limit is near; says what it disables.
    Warn(String),
    Fail(String),
}

impl From<Result<String, String>> for Finding {
    fn from(r: Result<String, String>) -> Finding {
        match r {
            Ok(detail) => Finding::Ok(detail),
            Err(problem) => Finding::Fail(problem),
        }
    }
}

/// Runs every check, prints the results, and returns the failures.
pub fn run(loaded: &crate::config::layers::Loaded) -> Vec<String> {
    let config = &loaded.config;
    let mut checks: Vec<(&str, Finding)> = vec![
        ("root", root().into()),
        ("namespaces", namespaces().into()),
        ("cgroups", cgroups(config).into()),
        ("controllers", containers::controllers()),
        ("overlayfs", overlayfs().into()),
        ("seccomp", containers::seccomp()),
        ("apparmor", containers::apparmor(&config.state)),
        ("mounts", containers::mount_setattr()),
        (
            "userns",
            containers::user_namespaces(&config.root, &config.state),
        ),
        ("pids", containers::pid_headroom()),
        ("cni", cni(config).into()),
        ("cdi", devices::cdi(&config.cdi_spec_dirs)),
        ("storage", storage(config).into()),
        ("mirrors", mirrors(config).into()),
        ("secrets", secrets::secrets(loaded)),
        ("leftovers", leftovers(&config.root)),
        ("kubelet", kubelet::statistics(&config.listen)),
        ("criu", runtimes::criu(config)),
    ];
    checks.extend(
        runtimes::handlers(config)
            .into_iter()
            .map(|finding| ("handler", finding)),
    );
    let mut failed = Vec::new();
    for (name, finding) in checks {
        match finding {
            Finding::Ok(detail) => println!("ok    {name:<11} {detail}"),
            Finding::Warn(detail) => println!("warn  {name:<11} {detail}"),
            Finding::Fail(problem) => {
                println!("FAIL  {name:<11} {problem}");
                failed.push(format!("{name}: {problem}"));
            }
        }
    }
    failed
}

fn root() -> Result<String, String> {
    if nix::unistd::geteuid().is_root() {
        Ok("running as root".into())
    } else {
        Err("crust serve must run as root".into())
    }
}

fn namespaces() -> Result<String, String> {
    let missing: Vec<_> = ["net", "ipc", "uts", "pid", "mnt"]
        .into_iter()
        .filter(|ns| !Path::new("/proc/self/ns").join(ns).exists())
        .collect();
    if missing.is_empty() {
        Ok("net, ipc, uts, pid and mount namespaces available".into())
    } else {
        Err(format!("kernel lacks namespaces: {}", missing.join(", ")))
    }
}

/// The hierarchy and the driver in use; the systemd driver needs systemd as the init system
/// (it creates scopes over D-Bus), which `/run/systemd/system` tells, as sd_booted(3) does.
fn cgroups(config: &Config) -> Result<String, String> {
    let setup = libcgroups::common::get_cgroup_setup()
        .map_err(|e| format!("cannot detect the cgroup setup: {e}"))?;
    let driver = match config.cgroup_driver {
        crate::config::CgroupDriver::Cgroupfs => "cgroupfs",
        crate::config::CgroupDriver::Systemd => "systemd",
    };
    if driver == "systemd" && !Path::new("/run/systemd/system").is_dir() {
        return Err(
            "cgroup_driver is systemd but systemd is not the init system (no /run/systemd/system)"
                .into(),
        );
    }
    let unified = matches!(setup, libcgroups::common::CgroupSetup::Unified);
    let controllers = delegated(Path::new("/sys/fs/cgroup"), unified, driver == "systemd");
    if controllers.is_empty() {
        return Err(format!(
            "{setup:?} hierarchy at /sys/fs/cgroup, {driver} driver: no controller for containers"
        ));
    }
    Ok(format!(
        "{setup:?} hierarchy at /sys/fs/cgroup, {driver} driver, controllers: {}",
        controllers.join(" ")
    ))
}

/// The controllers a container's scope gets with the systemd driver: those systemd enables
/// below a slice for a delegated scope, and hugetlb, which systemd leaves at the root and crust
/// enables on the way down for a container with hugepage limits (as runc does); rdma and misc
/// stay at the root.
const SYSTEMD_CONTROLLERS: &[&str] = &["cpuset", "cpu", "io", "memory", "hugetlb", "pids"];

/// The v1 hierarchies crust's containers use, where mounted.
const V1_CONTROLLERS: &[&str] = &[
    "cpuset", "cpu", "cpuacct", "blkio", "memory", "devices", "freezer", "pids", "hugetlb",
];

/// The controllers crust's cgroups get under `root`. On v2: those the root offers in
/// cgroup.controllers (libcgroups enables them on the way down to each container's cgroup), and
/// with the systemd driver only those of them systemd manages. On v1: the hierarchies mounted.
fn delegated(root: &Path, unified: bool, systemd: bool) -> Vec<String> {
    if !unified {
        return V1_CONTROLLERS
            .iter()
            .filter(|c| root.join(c).join("cgroup.procs").exists())
            .map(|c| (*c).to_owned())
            .collect();
    }
    let offered = std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
    offered
        .split_whitespace()
        .filter(|c| !systemd || SYSTEMD_CONTROLLERS.contains(c))
        .map(str::to_owned)
        .collect()
}

fn overlayfs() -> Result<String, String> {
    let fs = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if fs.lines().any(|l| l.trim_end().ends_with("overlay")) {
        Ok("overlay filesystem available".into())
    } else {
        Err("overlay filesystem not available (modprobe overlay)".into())
    }
}

/// The root dir's filesystem keeps the share pulls leave free (it may not exist yet: its
/// nearest existing parent is on the same filesystem).
fn storage(config: &Config) -> Result<String, String> {
    let dir = config
        .root
        .ancestors()
        .find(|d| d.exists())
        .unwrap_or(Path::new("/"));
    crate::image::Reserve::new(config.image.min_free_percent)
        .check(dir, 0)
        .map_err(|e| e.to_string())?;
    let s = rustix::fs::statvfs(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(format!(
        "{}: {:.1} GiB free, pulls keep {}% free",
        config.root.display(),
        (s.f_bavail * s.f_frsize) as f64 / f64::from(1 << 30),
        config.image.min_free_percent
    ))
}

/// Every configured mirror accepts a connection (an offline node depends on them).
fn mirrors(config: &Config) -> Result<String, String> {
    use std::net::{TcpStream, ToSocketAddrs};
    let mut reached = Vec::new();
    for (registry, mirror) in &config.registry.mirrors {
        for endpoint in &mirror.endpoints {
            let Some(host) = crate::config::endpoint_host(endpoint) else {
                continue;
            };
            let port = if endpoint.starts_with("http://") {
                80
            } else {
                443
            };
            let with_port = if host
                .rsplit_once(':')
                .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
            {
                host.to_owned()
            } else {
                format!("{host}:{port}")
            };
            let unreachable = |why: String| format!("mirror {endpoint} for {registry}: {why}");
            let addr = with_port
                .to_socket_addrs()
                .map_err(|e| unreachable(e.to_string()))?
                .next()
                .ok_or_else(|| unreachable("no address".into()))?;
            TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2))
                .map_err(|e| unreachable(e.to_string()))?;
            reached.push(endpoint.as_str());
        }
    }
    if reached.is_empty() {
        return Ok("none configured".into());
    }
    reached.sort_unstable();
    reached.dedup();
    Ok(format!("{} reachable", reached.join(", ")))
}

/// Pods and containers a restart of the daemon could not undo (`store::RELEASE_FAILED` in
/// their records' directories): each is retried at the next start, and listed here with why
/// until then; and the records recovery found unreadable and set aside.
fn leftovers(root: &Path) -> Finding {
    let records = crate::store::records_dir(root);
    let mut found = Vec::new();
    for d in crate::store::damaged(&records.join(crate::store::DAMAGED_DIR)) {
        found.push(format!(
            "the {} record of {} was unreadable and set aside at {} ({})",
            d.kind,
            d.id,
            crate::clock::rfc3339_millis(d.at * 1_000_000_000),
            d.path.display()
        ));
    }
    for kind in ["sandboxes", "containers"] {
        for e in std::fs::read_dir(records.join(kind))
            .into_iter()
            .flatten()
            .flatten()
        {
            let why = std::fs::read_to_string(e.path().join(crate::store::RELEASE_FAILED));
            if let Ok(why) = why {
                let id = e.file_name().to_string_lossy().into_owned();
                found.push(format!("{kind}/{id}: {}", why.trim()));
            }
        }
    }
    if found.is_empty() {
        Finding::Ok("nothing a restart could not undo".into())
    } else {
        Finding::Warn(format!(
            "{} left after a failed rollback or set aside as unreadable (the next start of \
             crust tries a rollback again): {}",
            found.len(),
            found.join("; ")
        ))
    }
}

fn cni(config: &Config) -> Result<String, String> {
    let cni = Cni::new(CniSettings::from_config(&config.network));
    let list = cni.network().map_err(|e| e.to_string())?;
    let plugins: Vec<_> = list.plugins.iter().map(|p| p.kind.as_str()).collect();
    // A CNI 1.1 list: its plugins' STATUS is what kubelet's node Ready condition follows.
    let status = if list.has_status() {
        cni.ready_now().map_err(|e| e.to_string())?;
        "; every plugin's STATUS ok"
    } else {
        ""
    };
    Ok(format!(
        "network {:?} from {} ({}){status}",
        list.name,
        list.source.display(),
        plugins.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_mirror(endpoint: &str) -> Config {
        Config::parse(&format!(
            "[registry.mirrors.\"docker.io\"]\nendpoints = [\"{endpoint}\"]\n"
        ))
        .unwrap()
    }

    #[test]
    fn mirrors_are_dialled_and_a_dead_one_is_named() {
        let live = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", live.local_addr().unwrap());
        assert_eq!(
            mirrors(&with_mirror(&url)).unwrap(),
            format!("{url} reachable")
        );
        drop(live);
        let e = mirrors(&with_mirror(&url)).unwrap_err();
        assert!(e.contains(&url) && e.contains("docker.io"), "{e}");
        assert_eq!(mirrors(&Config::default()).unwrap(), "none configured");
    }

    #[test]
    fn storage_reports_a_reserve_it_cannot_keep() {
        let here = tempfile::tempdir().unwrap();
        let mut c = Config {
            root: here.path().join("not/yet/created"),
            ..Config::default()
        };
        // No reserve first: the machine's disk may be shared and nearly full.
        c.image.min_free_percent = 0;
        assert!(storage(&c).unwrap().contains("GiB free"));
        c.image.min_free_percent = 100;
        assert!(storage(&c).unwrap_err().contains("min_free_percent"));
    }

    #[test]
    fn delegated_controllers_per_hierarchy_and_driver() {
        let v2 = tempfile::tempdir().unwrap();
        std::fs::write(
            v2.path().join("cgroup.controllers"),
            "cpuset cpu io memory hugetlb pids rdma misc\n",
        )
        .unwrap();
        assert_eq!(
            delegated(v2.path(), true, false).join(" "),
            "cpuset cpu io memory hugetlb pids rdma misc"
        );
        assert_eq!(
            delegated(v2.path(), true, true).join(" "),
            "cpuset cpu io memory hugetlb pids"
        );
        let v1 = tempfile::tempdir().unwrap();
        for c in ["memory", "cpu", "unified"] {
            std::fs::create_dir(v1.path().join(c)).unwrap();
            std::fs::write(v1.path().join(c).join("cgroup.procs"), "").unwrap();
        }
        assert_eq!(delegated(v1.path(), false, false).join(" "), "cpu memory");
        assert!(delegated(v2.path().join("none").as_path(), true, false).is_empty());
    }
}
