//! The per-pod monitor: a small, single-threaded process (`crust monitor`) that anchors a pod.
//!
//! The daemon spawns it with fork+exec and writes a [`MonitorConfig`] to its stdin. The spawned
//! process forks once more and exits, so the monitor proper is reparented away from the daemon
//! and outlives daemon restarts the same way whether or not the daemon that started it still
//! runs. The monitor then:
//! 1. starts a new session and becomes a child subreaper (the pod's processes are its children);
//! 2. unshares the pod's namespaces, sets hostname and sysctls, brings `lo` up and pins each
//!    namespace with a bind mount at the path the config names; with pod-level PID sharing it
//!    forks a tiny init that is PID 1 of the pod's PID namespace;
//! 3. writes its pid file and one [`Ready`] JSON line on stdout, then closes stdout;
//! 4. serves [`Request`]s on `monitor.sock` in the sandbox directory, one JSON line each way.
//!
//! Namespace pins stay after the monitor exits (CNI DEL still needs the netns); the daemon
//! removes them when it tears the pod down.

pub mod client;
mod process;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use client::{MonitorError, MonitorHandle, read_pidfile, spawn};
pub use process::main as run;

/// File names inside the sandbox directory.
pub const SOCKET: &str = "monitor.sock";
pub const PIDFILE: &str = "monitor.pid";
pub const LOG: &str = "monitor.log";

/// Which namespaces the monitor creates, and where it pins each one. `None` means the pod
/// shares the host's namespace of that kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespacePins {
    pub net: Option<PathBuf>,
    pub ipc: Option<PathBuf>,
    pub uts: Option<PathBuf>,
    pub pid: Option<PathBuf>,
}

impl NamespacePins {
    pub fn all(&self) -> impl Iterator<Item = &Path> {
        [&self.net, &self.ipc, &self.uts, &self.pid].into_iter().flatten().map(PathBuf::as_path)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MonitorConfig {
    pub sandbox_id: String,
    /// The sandbox directory: socket, pid file and log live here.
    pub dir: PathBuf,
    pub pins: NamespacePins,
    /// Set only when the monitor creates a UTS namespace.
    pub hostname: Option<String>,
    /// `/proc/sys`-relative paths (`net/ipv4/ip_forward`) and values.
    pub sysctls: Vec<(String, String)>,
}

/// The monitor's first and only line on stdout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ready {
    Ok(Identity),
    Failed { step: String, error: String },
}

/// Names one monitor process for good: a pid alone may be reused, pid + start time may not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub pid: i32,
    pub start_time: u64,
    /// PID 1 of the pod's PID namespace, when the pod has one.
    pub init_pid: Option<i32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Answers with the monitor's identity.
    Ping,
    /// Kills every process of the pod, answers, and exits.
    Shutdown,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    Ok { sandbox_id: String, identity: Identity },
    Err { error: String },
}

/// The start time of `pid` in clock ticks since boot (field 22 of `/proc/<pid>/stat`).
pub fn process_start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses: skip past its last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// Whether the process `id` names is still alive (and is not a later process with its pid).
pub fn is_alive(id: &Identity) -> bool {
    process_start_time(id.pid) == Some(id.start_time)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_start_time_is_stable_and_others_differ() {
        let me = std::process::id() as i32;
        let t = process_start_time(me).unwrap();
        assert_eq!(process_start_time(me), Some(t));
        assert!(is_alive(&Identity { pid: me, start_time: t, init_pid: None }));
        assert!(!is_alive(&Identity { pid: me, start_time: t + 1, init_pid: None }));
        assert_eq!(process_start_time(i32::MAX), None);
    }

    #[test]
    fn wire_format() {
        assert_eq!(serde_json::to_string(&Request::Shutdown).unwrap(), r#"{"op":"shutdown"}"#);
        let r: Ready = serde_json::from_str(r#"{"failed":{"step":"unshare","error":"EPERM"}}"#)
            .unwrap();
        assert_eq!(r, Ready::Failed { step: "unshare".into(), error: "EPERM".into() });
    }
}
