//! The per-pod monitor: a small, single-threaded process (`crust monitor`) that anchors a pod.
//!
//! The daemon spawns it with fork+exec and writes a [`MonitorConfig`] to its stdin. The spawned
//! process forks once more and exits, so the monitor proper is reparented away from the daemon
//! and outlives daemon restarts the same way whether or not the daemon that started it still
//! runs. The monitor then:
//! 1. starts a new session and becomes a child subreaper (the pod's processes are its children);
//! 2. unshares the pod's namespaces, sets hostname and sysctls, brings `lo` up and pins each
//!    namespace with a bind mount at the path the config names; with pod-level PID sharing it
//!    starts a tiny, confined init that is PID 1 of the pod's PID namespace ([`pod_init`]);
//! 3. writes its pid file and one [`Ready`] JSON line on stdout, then closes stdout;
//! 4. serves [`Request`]s on `monitor.sock` in the sandbox directory, one JSON line each way.
//!
//! Namespace pins stay after the monitor exits (CNI DEL still needs the netns); the daemon
//! removes them when it tears the pod down.

pub mod client;
pub mod oci_cli;
mod pod_init;
mod process;
#[cfg(test)]
mod protocol_tests;
mod server;
pub mod session;
mod state;
mod workload;
pub use workload::oom::OomScope;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use client::{MonitorError, MonitorHandle, StartFailed, Subscription, read_pidfile, spawn};
pub use process::main as run;

/// The version of the daemon-to-monitor protocol (the [`Request`] and [`Reply`] lines) this
/// build speaks. A monitor outlives the daemon that started it, so a daemon talks to monitors of
/// older (and, after a downgrade, newer) builds: a change a monitor of another version would
/// misread (a new request, a field whose absence means something else) raises this number, and
/// the daemon checks a monitor's version (from its Ping answer) before sending it such a
/// request. 1: crust 0.1.0, whose answers name no version; 2: the Ok answer names it.
/// tests/fixtures/monitor-protocol holds each version's lines, which this build must read and
/// still write as they are.
pub const PROTOCOL: u32 = 2;

/// The protocol of a monitor whose answers name none (crust 0.1.0's).
fn first_protocol() -> u32 {
    1
}

/// File names inside the sandbox directory.
pub const SOCKET: &str = "monitor.sock";
/// The bundle and logs of a pod's infra container, in the sandbox directory (handlers whose
/// binary makes a sandbox per pod: `workload/infra.rs`).
pub const INFRA_DIR: &str = "infra";
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
    /// The pod's user namespace (`hostUsers: false`), which owns the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<PathBuf>,
}

impl NamespacePins {
    pub fn all(&self) -> impl Iterator<Item = &Path> {
        [&self.net, &self.ipc, &self.uts, &self.pid, &self.user]
            .into_iter()
            .flatten()
            .map(PathBuf::as_path)
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
    /// The pod's user namespace maps; `None`: the node's user namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_maps: Option<crate::model::IdMaps>,
    /// Where the node's cgroup v1 hierarchies are mounted, as the daemon read them (empty on
    /// cgroup v2): libcontainer's processes find them here instead of in the mount table.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cgroup_v1_mounts: Vec<PathBuf>,
}

impl Request {
    /// The request's name, for logs and crash points.
    pub fn op_name(&self) -> &'static str {
        match self {
            Request::Ping => "ping",
            Request::Shutdown => "shutdown",
            Request::Create(_) => "create",
            Request::Start { .. } => "start",
            Request::Signal { .. } => "signal",
            Request::Forget { .. } => "forget",
            Request::Exec(_) => "exec",
            Request::ReopenLog { .. } => "reopen_log",
            Request::Subscribe => "subscribe",
            Request::ExecStream(_) => "exec_stream",
            Request::Attach { .. } => "attach",
        }
    }
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
    /// Kills every process of the pod, records the containers' exits, answers, and exits.
    Shutdown,
    /// Creates a container through libcontainer, or the pod handler's OCI runtime binary (its
    /// process waits to be started); answers
    /// `Created`.
    Create(Box<CreateRequest>),
    /// Starts a created container; answers `Started`.
    Start { id: String },
    /// Sends `signal` to the container's process (and, with `all`, to every process left in
    /// its cgroup); answers `Done`. A container that already exited is not an error.
    Signal { id: String, signal: i32, all: bool },
    /// Forgets a container (killing it first if it still runs); answers `Done`.
    Forget { id: String },
    /// Runs a process in a running container and collects its output; answers `Exec`.
    Exec(Box<ExecRequest>),
    /// Reopens the container's log file (after kubelet rotated it); answers `Done`.
    ReopenLog { id: String },
    /// Keeps the connection: first a `Snapshot` line, then one `Event` line per change.
    Subscribe,
    /// Starts a process in a running container for a client to talk to (streaming Exec):
    /// answers `Streaming` with the process's stdio attached (SCM_RIGHTS), then `Exited` when
    /// it ends. The connection's closing kills the process.
    ExecStream(Box<ExecStreamRequest>),
    /// Joins a container's stdio (Attach): answers `Attached` with its stdin (or tty)
    /// attached when asked for, then carries its output as frames (`frame::encode`) until it
    /// exits. Closing the connection detaches.
    Attach { id: String, stdin: bool },
}

/// A process to run in a running container with its stdio handed to the caller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecStreamRequest {
    pub id: String,
    pub runtime_root: PathBuf,
    /// The OCI process; `terminal` set gives it a tty, whose master is handed over.
    pub process: oci_spec::runtime::Process,
    /// Whether the caller writes to the process's stdin (else it reads /dev/null).
    pub stdin: bool,
}

/// Everything the monitor needs to create and then watch one container.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateRequest {
    pub id: String,
    /// The OCI bundle: holds `config.json`, whose root path is the mounted rootfs.
    pub bundle: PathBuf,
    /// libcontainer's state root (its container directory is `<runtime_root>/<id>`).
    pub runtime_root: PathBuf,
    /// crust's directory for the container: the exit record and the runtime log go here.
    pub dir: PathBuf,
    /// The CRI log file; `None`: output is read and dropped.
    pub log_path: Option<PathBuf>,
    pub tty: bool,
    pub stdin: bool,
    pub stdin_once: bool,
    /// libcontainer manages the cgroup through systemd.
    pub systemd: bool,
    /// The container's memory cgroup directory, read for OOM kills when it exits.
    pub memory_cgroup: Option<PathBuf>,
    /// A `cgroup.procs` of the container's cgroup: what is left there is killed when its
    /// main process exits, unless the container has a PID namespace of its own (then the
    /// kernel does it).
    pub cgroup_procs: Option<PathBuf>,
    pub own_pid_namespace: bool,
    /// The OCI runtime binary of the pod's handler, which also runs the container's execs;
    /// `None`: libcontainer (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<crate::model::OciRuntime>,
    /// The container is restored from a checkpoint by CRIU, its processes left stopped until
    /// Start, instead of created by libcontainer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreRequest>,
}

/// A container's processes as a checkpoint holds them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RestoreRequest {
    /// The CRIU binary.
    pub criu: PathBuf,
    /// CRIU's images (with the dump's `descriptors.json`).
    pub images_dir: PathBuf,
}

/// A process to run in a running container (ExecSync).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecRequest {
    pub id: String,
    pub runtime_root: PathBuf,
    /// The OCI process to run (the container's user, env, capabilities, with new args).
    pub process: oci_spec::runtime::Process,
    /// Killed after this long; `None`: no limit.
    pub timeout_ms: Option<u64>,
    /// Bytes kept of each of stdout and stderr; the rest is read and dropped.
    pub max_output: usize,
}

/// What went wrong, for the daemon's error codes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// The request cannot work as asked (e.g. the command does not exist in the image).
    Invalid,
    /// The monitor does not know the container.
    NotFound,
    /// The container is not in a state that allows the request.
    State,
    /// A file system the runtime writes to (the container's writable layer, mostly) has no
    /// space or no inodes left.
    NoRoom,
    /// Anything else: a failed system call, libcontainer's own failure.
    #[default]
    Failed,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    Ok {
        sandbox_id: String,
        identity: Identity,
        /// The protocol version the monitor speaks.
        #[serde(default = "first_protocol")]
        protocol: u32,
    },
    Err {
        #[serde(default)]
        fault: Fault,
        error: String,
    },
    Created {
        pid: i32,
    },
    Started {
        started_at: i64,
    },
    /// The start failed and ended the container: its exit, recorded before this answer.
    StartFailed {
        #[serde(default)]
        fault: Fault,
        error: String,
        exit: ExitInfo,
    },
    Done,
    Exec(ExecOutput),
    Snapshot {
        containers: Vec<ContainerState>,
    },
    /// An exec process started; its descriptors came with this line: the tty master, or
    /// stdin's write end (when asked for), stdout's and stderr's read ends.
    Streaming {
        pid: i32,
    },
    /// The exec process ended.
    Exited {
        exit_code: i32,
    },
    /// Attached; the descriptor that came with this line (when stdin was asked for, or the
    /// container has a tty) is the container's stdin write end or its tty master.
    Attached {
        tty: bool,
    },
}

/// Attach output frames: a stream byte (1 stdout, 2 stderr), a big-endian u32 length, the
/// bytes.
pub mod frame {
    pub const STDOUT: u8 = 1;
    pub const STDERR: u8 = 2;
    pub const HEADER: usize = 5;
    /// The largest frame body a reader accepts.
    pub const MAX: usize = 1 << 20;

    pub fn encode(stream: u8, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + data.len());
        out.push(stream);
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        out.extend_from_slice(data);
        out
    }

    /// The stream and body length of a header.
    pub fn decode_header(h: [u8; HEADER]) -> (u8, usize) {
        (h[0], u32::from_be_bytes([h[1], h[2], h[3], h[4]]) as usize)
    }
}

/// The outcome of an Exec request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecOutput {
    pub exit_code: i32,
    #[serde(with = "b64")]
    pub stdout: Vec<u8>,
    #[serde(with = "b64")]
    pub stderr: Vec<u8>,
    /// The process outlived the timeout and was killed.
    pub timed_out: bool,
    /// stdout or stderr was longer than `max_output`: only its start is here.
    pub truncated: bool,
}

/// A container as its monitor sees it, in the Snapshot that opens a subscription.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContainerState {
    pub id: String,
    pub pid: Option<i32>,
    pub started_at: Option<i64>,
    pub exit: Option<ExitInfo>,
}

/// One change the monitor pushes to subscribers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    Exited {
        id: String,
        exit: ExitInfo,
        /// The container had been started (else it was killed while created).
        #[serde(default)]
        started: bool,
    },
}

/// How a container's process ended, as its monitor recorded it (durably, in the container's
/// directory, before telling anyone).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitInfo {
    /// The exit status, or 128 + the signal that killed it.
    pub code: i32,
    /// The signal that killed it, if one did.
    pub signal: Option<i32>,
    /// Nanoseconds since the epoch.
    pub finished_at: i64,
    /// The kernel's OOM killer ended it (read from the container's cgroup, not guessed).
    pub oom_killed: bool,
    /// Whose limit that kill enforced, as the cgroups counted it (absent in records written
    /// before crust read it, and for an exit that was not an OOM kill).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_scope: Option<OomScope>,
    /// Why it ended, for ContainerStatus.message (empty when it simply exited).
    pub message: String,
    /// Its start failed, which ended it (CRI's reason `StartError`, code 128, as containerd's).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub start_failed: bool,
    /// It ran when the state it lived in was lost (the node rebooted): how it really ended is
    /// unknown (code 255, CRI's reason `NodeRebooted`; containerd says `Unknown`). Set by the
    /// daemon's recovery, never by a monitor.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub state_lost: bool,
}

impl crate::store::Record for ExitInfo {
    const VERSION: u32 = 1;
}

impl ExitInfo {
    /// CRI's reason: `NodeRebooted`, `StartError`, `OOMKilled`, `Completed` (exit 0) or
    /// `Error`.
    pub fn reason(&self) -> &'static str {
        if self.state_lost {
            "NodeRebooted"
        } else if self.start_failed {
            "StartError"
        } else if self.oom_killed {
            "OOMKilled"
        } else if self.code == 0 {
            "Completed"
        } else {
            "Error"
        }
    }
}

/// The exit code of a container whose end is unknown (its state was lost), as containerd's.
pub const UNKNOWN_EXIT_CODE: i32 = 255;

/// The exit code of a container whose start failed: runc's and runsc's, and containerd's.
pub const START_FAILED_CODE: i32 = 128;

/// File names inside a container's directory.
pub const EXIT_FILE: &str = "exit.json";
pub const RUNTIME_LOG: &str = "runtime.log";

/// Bytes as base64 strings in the JSON lines.
mod b64 {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

/// A path to `dir/name` short enough for a unix socket address (108 bytes), however long `dir`
/// is: `/proc/self/fd/<fd>/name`, valid while the returned directory handle is open.
pub fn short_socket_path(dir: &Path, name: &str) -> std::io::Result<(std::fs::File, PathBuf)> {
    use std::os::fd::AsRawFd;
    let handle = std::fs::File::open(dir)?;
    let path = PathBuf::from(format!("/proc/self/fd/{}/{name}", handle.as_raw_fd()));
    Ok((handle, path))
}

/// The start time of `pid` in clock ticks since boot (field 22 of `/proc/<pid>/stat`).
pub fn process_start_time(pid: i32) -> Option<u64> {
    stat_field(pid, 19)
}

/// The parent of process `pid`.
pub fn parent_pid(pid: i32) -> Option<i32> {
    stat_field(pid, 1)
}

/// Field `n` of `/proc/<pid>/stat`, counted from the state (field 3) as 0.
fn stat_field<T: std::str::FromStr>(pid: i32, n: usize) -> Option<T> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses: skip past its last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(n)?.parse().ok()
}

/// Whether the process `id` names is still alive (and is not a later process with its pid).
/// A zombie is not: it has exited and serves nothing, it only waits to be reaped.
pub fn is_alive(id: &Identity) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", id.pid)) else {
        return false;
    };
    let zombie = stat
        .rfind(')')
        .and_then(|i| stat.get(i + 2..i + 3))
        .is_some_and(|state| state == "Z" || state == "X");
    !zombie && process_start_time(id.pid) == Some(id.start_time)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_of_a_child_is_this_process() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let parent = parent_pid(child.id() as i32);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(parent, Some(std::process::id() as i32));
    }

    #[test]
    fn own_start_time_is_stable_and_others_differ() {
        let me = std::process::id() as i32;
        let t = process_start_time(me).unwrap();
        assert_eq!(process_start_time(me), Some(t));
        assert!(is_alive(&Identity {
            pid: me,
            start_time: t,
            init_pid: None
        }));
        assert!(!is_alive(&Identity {
            pid: me,
            start_time: t + 1,
            init_pid: None
        }));
        assert_eq!(process_start_time(i32::MAX), None);
    }

    #[test]
    fn wire_format() {
        assert_eq!(
            serde_json::to_string(&Request::Shutdown).unwrap(),
            r#"{"op":"shutdown"}"#
        );
        let r: Ready =
            serde_json::from_str(r#"{"failed":{"step":"unshare","error":"EPERM"}}"#).unwrap();
        assert_eq!(
            r,
            Ready::Failed {
                step: "unshare".into(),
                error: "EPERM".into()
            }
        );
    }
}
