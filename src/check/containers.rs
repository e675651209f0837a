//! What containers need from the host, each finding saying what a missing piece disables:
//! the cgroup controllers limits go through, seccomp for RuntimeDefault profiles, AppArmor
//! and crust's profile for it,
//! mount_setattr for recursive read-only mounts, and room for more processes (a node's PID
//! pressure).

use std::path::Path;

use super::Finding;

/// The controllers container limits need, and what each enforces.
const CONTROLLERS: [(&str, &str); 4] = [
    ("cpu", "CPU shares and quotas"),
    ("cpuset", "CPU and memory node pinning"),
    ("memory", "memory limits and OOM kills"),
    ("pids", "process limits"),
];

pub fn controllers() -> Finding {
    let root = Path::new("/sys/fs/cgroup");
    let (hierarchy, available): (&str, Vec<String>) = if root.join("cgroup.controllers").exists() {
        let list = std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
        (
            "cgroup v2",
            list.split_whitespace().map(str::to_owned).collect(),
        )
    } else {
        let present = CONTROLLERS
            .iter()
            .filter(|(c, _)| root.join(c).join("cgroup.procs").exists())
            .map(|(c, _)| (*c).to_owned())
            .collect();
        ("cgroup v1", present)
    };
    missing_controllers(hierarchy, &available)
}

fn missing_controllers(hierarchy: &str, available: &[String]) -> Finding {
    let missing: Vec<String> = CONTROLLERS
        .iter()
        .filter(|(c, _)| !available.iter().any(|a| a == c))
        .map(|(c, what)| format!("{c} (no {what})"))
        .collect();
    if missing.is_empty() {
        let names: Vec<&str> = CONTROLLERS.iter().map(|(c, _)| *c).collect();
        Finding::Ok(format!("{hierarchy}: {} available", names.join(", ")))
    } else {
        Finding::Fail(format!(
            "{hierarchy}: controllers missing: {}",
            missing.join(", ")
        ))
    }
}

pub fn seccomp() -> Finding {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if !status.lines().any(|l| l.starts_with("Seccomp:")) {
        return Finding::Fail(
            "the kernel has no seccomp (CONFIG_SECCOMP): containers cannot be created, as \
             RuntimeDefault profiles cannot be applied"
                .into(),
        );
    }
    let actions =
        std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail").unwrap_or_default();
    Finding::Ok(format!("seccomp filters available ({})", actions.trim()))
}

/// Whether AppArmor is on and crust's profile loaded (crust serve loads it at start).
pub fn apparmor(state: &Path) -> Finding {
    use crate::container::apparmor::{AppArmor, AppArmorError, DEFAULT_PROFILE};
    let Some(apparmor) = AppArmor::detect(state) else {
        return Finding::Ok(
            "AppArmor is not enabled on this host: RuntimeDefault means no profile, and a \
             Localhost profile fails CreateContainer"
                .into(),
        );
    };
    match apparmor.is_loaded(DEFAULT_PROFILE) {
        Ok(true) => Finding::Ok(format!(
            "AppArmor on; crust's profile {DEFAULT_PROFILE} is loaded (RuntimeDefault)"
        )),
        Ok(false) if apparmor.has_parser() => Finding::Warn(format!(
            "AppArmor on; {DEFAULT_PROFILE} is not loaded yet: crust serve loads it at start \
             and whenever a container needs it"
        )),
        Ok(false) => Finding::Fail(AppArmorError::NoParser.to_string()),
        Err(e) => Finding::Warn(format!("AppArmor on, but {e}")),
    }
}

pub fn mount_setattr() -> Finding {
    if crate::sys::has_mount_setattr() {
        Finding::Ok("mount_setattr available: recursive read-only mounts work".into())
    } else {
        Finding::Warn(
            "no mount_setattr (Linux < 5.12): mounts asking for recursive read-only are refused"
                .into(),
        )
    }
}

/// Pods with `hostUsers: false`: the same probe the daemon runs at start, under the root's
/// writable layers (a root that does not exist yet is probed where it will be created), and
/// the state directory's way.
pub fn user_namespaces(root: &Path, state: &Path) -> Finding {
    let Some(dir) = root.ancestors().find(|d| d.exists()) else {
        return Finding::Fail(format!("{}: no part of it exists", root.display()));
    };
    let dir = if dir == root {
        root.join("containers")
    } else {
        dir.to_owned()
    };
    match crate::container::probe_user_namespaces(&dir, state) {
        Ok(works) => Finding::Ok(works),
        Err(why) => Finding::Warn(format!(
            "{why}: pods with user namespaces (hostUsers: false) are refused"
        )),
    }
}

pub fn pid_headroom() -> Finding {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    let (Some(pid_max), Some(threads_max)) = (
        read("/proc/sys/kernel/pid_max"),
        read("/proc/sys/kernel/threads-max"),
    ) else {
        return Finding::Warn("cannot read kernel.pid_max or kernel.threads-max".into());
    };
    let in_use = std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
                .count() as u64
        })
        .unwrap_or(0);
    headroom(in_use, pid_max.min(threads_max))
}

/// Kubelet's default PID eviction signal fires at 10% left; warn well before.
fn headroom(in_use: u64, limit: u64) -> Finding {
    let left = limit.saturating_sub(in_use);
    let detail = format!("{in_use} processes of {limit} allowed (pid_max, threads-max)");
    if left * 100 < limit * 10 {
        Finding::Fail(format!(
            "{detail}: under 10% left, new containers will fail to fork (raise kernel.pid_max)"
        ))
    } else if left * 100 < limit * 25 {
        Finding::Warn(format!(
            "{detail}: under 25% left, kubelet's PID pressure is near"
        ))
    } else {
        Finding::Ok(detail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_controllers_say_what_they_disable() {
        let all: Vec<String> = ["cpu", "cpuset", "memory", "pids", "io"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(matches!(
            missing_controllers("cgroup v2", &all),
            Finding::Ok(_)
        ));
        let Finding::Fail(msg) = missing_controllers("cgroup v2", &all[..2]) else {
            panic!("memory and pids are missing");
        };
        assert!(
            msg.contains("memory (no memory limits") && msg.contains("pids"),
            "{msg}"
        );
    }

    #[test]
    fn pid_headroom_thresholds() {
        assert!(matches!(headroom(100, 32768), Finding::Ok(_)));
        assert!(matches!(headroom(26000, 32768), Finding::Warn(_)));
        assert!(matches!(headroom(31000, 32768), Finding::Fail(_)));
    }
}
