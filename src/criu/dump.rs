//! `criu dump`: what is dumped, what is left outside the images, and the command line.
//!
//! A container's tree is dumped with what it does not own named as external, so that CRIU
//! records a reference instead of failing or copying the host's state:
//! - the pod's namespaces the container joined (network always; PID when the pod shares one),
//!   each under a key a restore hands back (`extRootNetNS`, `extRootPidNS`, runc's names);
//! - every bind mount from the host (volumes, /etc/hosts, the cgroup directories), keyed by
//!   its destination inside the container, so a restore can map each to a new source.
//!
//! The tree is frozen through its cgroup (`--freeze-cgroup`), so no process forks past the
//! walk; a cgroup the caller froze first stays frozen when CRIU is done, as CRIU restores the
//! state it found.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Criu, CriuError, log_errors};

/// The name of CRIU's log inside the images directory.
pub const LOG: &str = "dump.log";

/// A namespace the container shares with its pod, left out of the dump.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExternalNamespace {
    Net { inode: u64 },
    Pid { inode: u64 },
}

/// One dump of a container's process tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpPlan {
    /// The root of the tree: the container's main process.
    pub pid: i32,
    /// Where the images (and the log) go; it exists and is empty.
    pub images_dir: PathBuf,
    /// The freezer of the container's cgroup (v1 `freezer/<path>`, v2 the unified directory).
    pub freeze_cgroup: Option<PathBuf>,
    pub namespaces: Vec<ExternalNamespace>,
    /// Destinations of the container's bind mounts from the host.
    pub external_mounts: Vec<String>,
    /// The tree keeps running after the dump (kubelet's forensic checkpoint), else it is
    /// killed once dumped.
    pub leave_running: bool,
}

impl DumpPlan {
    pub fn args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            "dump".into(),
            "--tree".into(),
            self.pid.to_string().into(),
            "--images-dir".into(),
            self.images_dir.clone().into(),
            "--log-file".into(),
            LOG.into(),
            "-v4".into(),
            // Established connections are dumped in repair mode (and stay up with
            // leave-running) instead of failing the dump; file locks are kept.
            "--tcp-established".into(),
            "--file-locks".into(),
            // The cgroup's settings are the runtime's to restore, not CRIU's.
            "--manage-cgroups=ignore".into(),
        ];
        if self.leave_running {
            args.push("--leave-running".into());
        }
        if let Some(freezer) = &self.freeze_cgroup {
            args.push("--freeze-cgroup".into());
            args.push(freezer.clone().into());
        }
        for ns in &self.namespaces {
            let spec = match ns {
                ExternalNamespace::Net { inode } => format!("net[{inode}]:extRootNetNS"),
                ExternalNamespace::Pid { inode } => format!("pid[{inode}]:extRootPidNS"),
            };
            args.push("--external".into());
            args.push(spec.into());
        }
        for dest in &self.external_mounts {
            args.push("--external".into());
            args.push(format!("mnt[{dest}]:{dest}").into());
        }
        args
    }
}

impl Criu {
    /// Runs the dump; on failure the error carries CRIU's own reasons from its log.
    pub fn dump(&self, plan: &DumpPlan) -> Result<(), CriuError> {
        let out = Command::new(&self.path)
            .args(plan.args())
            .output()
            .map_err(|source| CriuError::Spawn {
                path: self.path.clone(),
                source,
            })?;
        if out.status.success() {
            return Ok(());
        }
        Err(CriuError::Failed {
            action: "dump",
            status: out.status.to_string(),
            log: log_errors(&plan.images_dir.join(LOG)),
        })
    }
}

/// The inode of the namespace a `/proc/<pid>/ns/<kind>`-like path names.
pub fn namespace_inode(path: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map(|m| m.ino())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_names_what_stays_outside() {
        let plan = DumpPlan {
            pid: 42,
            images_dir: "/w/images".into(),
            freeze_cgroup: Some("/sys/fs/cgroup/freezer/crust/p/c".into()),
            namespaces: vec![
                ExternalNamespace::Net { inode: 7 },
                ExternalNamespace::Pid { inode: 9 },
            ],
            external_mounts: vec!["/etc/hosts".into()],
            leave_running: true,
        };
        let args: Vec<String> = plan
            .args()
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        let joined = args.join(" ");
        assert!(
            joined.starts_with("dump --tree 42 --images-dir /w/images"),
            "{joined}"
        );
        for part in [
            "--leave-running",
            "--freeze-cgroup /sys/fs/cgroup/freezer/crust/p/c",
            "--external net[7]:extRootNetNS",
            "--external pid[9]:extRootPidNS",
            "--external mnt[/etc/hosts]:/etc/hosts",
            "--tcp-established",
        ] {
            assert!(joined.contains(part), "{part} missing from {joined}");
        }
        let stop = DumpPlan {
            leave_running: false,
            ..plan
        };
        assert!(!stop.args().iter().any(|a| a == "--leave-running"));
    }
}
