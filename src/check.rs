//! `crust check`: inspects the host for what crust needs and prints one line per check, so an
//! operator learns what is missing before kubelet does.

use std::path::Path;

use crate::config::Config;
use crate::network::{Cni, CniSettings};

/// Runs every check, prints the results, and returns the failures.
pub fn run(config: &Config) -> Vec<String> {
    let checks: Vec<(&str, Result<String, String>)> = vec![
        ("root", root()),
        ("namespaces", namespaces()),
        ("cgroups", cgroups()),
        ("overlayfs", overlayfs()),
        ("cni", cni(config)),
    ];
    let mut failed = Vec::new();
    for (name, result) in checks {
        match result {
            Ok(detail) => println!("ok    {name:<11} {detail}"),
            Err(problem) => {
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

fn cgroups() -> Result<String, String> {
    match libcgroups::common::get_cgroup_setup() {
        Ok(setup) => Ok(format!("{setup:?} hierarchy at /sys/fs/cgroup")),
        Err(e) => Err(format!("cannot detect the cgroup setup: {e}")),
    }
}

fn overlayfs() -> Result<String, String> {
    let fs = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if fs.lines().any(|l| l.trim_end().ends_with("overlay")) {
        Ok("overlay filesystem available".into())
    } else {
        Err("overlay filesystem not available (modprobe overlay)".into())
    }
}

fn cni(config: &Config) -> Result<String, String> {
    let cni = Cni::new(CniSettings::from_config(&config.network));
    let list = cni.network().map_err(|e| e.to_string())?;
    let plugins: Vec<_> = list.plugins.iter().map(|p| p.kind.as_str()).collect();
    Ok(format!(
        "network {:?} from {} ({})",
        list.name,
        list.source.display(),
        plugins.join(", ")
    ))
}
