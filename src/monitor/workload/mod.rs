//! What the monitor runs inside its pod: the containers and the processes executed in them.
//!
//! This file holds one container as the monitor holds it: its request, its main process until
//! it is reaped, its log and output relays, its attachers and OOM watch. The verbs on it are in
//! `lifecycle.rs`, and `ending.rs` kills its processes and waits for their reap; the table of them is the monitor's state (`../state.rs`). Processes started
//! in a container (`exec.rs`, and `interactive.rs` for streams and attach) and containers alike
//! go through a runtime worker (`worker.rs`, libcontainer in a process of its own); `logs.rs`
//! writes CRI log files and `oom.rs` watches for OOM kills.

mod ending;
pub(super) mod exec;
mod exec_seccomp;
mod infra;
pub(super) mod interactive;
pub(super) mod lifecycle;
mod logs;
pub(super) mod oom;
mod restore;
mod standin;
pub(super) mod worker;

use std::cell::RefCell;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::rc::Rc;

use nix::unistd::Pid;

use super::{ContainerState, CreateRequest, ExitInfo};
use logs::{LogFile, Relay};
use oom::OomWatch;

/// One container of the pod.
pub struct Workload {
    pub(super) req: CreateRequest,
    /// The container's main process until it is reaped.
    pub(super) pid: Option<Pid>,
    pub(super) started_at: Option<i64>,
    /// A start under way: its process may already run, and even end, before the start returns.
    pub(super) starting: bool,
    pub(super) exit: Option<ExitInfo>,
    /// Why its start failed, once it did: its exit is then recorded as that (`ending.rs`).
    pub(super) start_error: Option<String>,
    pub(super) log: Rc<RefCell<LogFile>>,
    pub(super) relays: Vec<Rc<RefCell<Relay>>>,
    /// Clients attached to the container's output.
    pub attachers: logs::Attachers,
    /// The container's stdin write end (or a copy of its tty master), kept open so its stdin
    /// stays open until an attacher with `stdin_once` detaches.
    pub stdin: Option<OwnedFd>,
    /// Its OOM kills as they are counted (cgroup v2), until its exit is recorded.
    pub(super) oom: Option<OomWatch>,
}

impl Workload {
    pub fn is_alive(&self) -> bool {
        self.pid.is_some()
    }

    /// crust's directory for the container (exit record, runtime log).
    pub fn dir(&self) -> &Path {
        &self.req.dir
    }

    /// The OCI runtime binary that runs it and its execs; `None`: libcontainer.
    pub fn runtime(&self) -> Option<&crate::model::OciRuntime> {
        self.req.runtime.as_ref()
    }

    pub fn tty(&self) -> bool {
        self.req.tty
    }

    pub fn stdin_once(&self) -> bool {
        self.req.stdin_once
    }

    pub fn state(&self, id: &str) -> ContainerState {
        ContainerState {
            id: id.to_owned(),
            pid: self.pid.map(Pid::as_raw),
            started_at: self.started_at,
            exit: self.exit.clone(),
        }
    }
}
