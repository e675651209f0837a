//! How the monitor ends a container's processes: signals to the process or its whole cgroup,
//! and waits for the reap.
//!
//! A start that failed ends the container, as containerd's does (exit code 128, reason
//! `StartError`, the error as its message): what runs of it is killed, and the answer to the
//! start waits until its process is reaped and its exit recorded. The daemon then records the
//! failure and the exit from that one answer. Before, the exit came only on the event stream,
//! a channel of its own: a client could read the container Created after its start had failed,
//! with its process already gone (a runtime binary's stand-in exits at once).

use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::Workload;
use crate::monitor::state::{Monitor, log};
use crate::monitor::{ExitInfo, START_FAILED_CODE};

/// How long a container's process may take to be reaped after SIGKILL.
pub(super) const KILL_WAIT: Duration = Duration::from_secs(10);

/// Signals the container's main process, and with `all` what else is in its cgroup.
pub fn kill(monitor: &Monitor, id: &str, signal: Signal, all: bool) {
    let workloads = monitor.workloads.borrow();
    let Some(w) = workloads.get(id) else { return };
    // The pid is ours until we reap it, so it still names the container's process.
    if let Some(pid) = w.pid {
        if w.req.runtime.as_ref().is_some_and(|r| r.sandbox) {
            // A stand-in forwards signals to the sandbox; it would die of a SIGKILL.
            let signo = match signal {
                Signal::SIGKILL => super::standin::kill_all(),
                other => other as i32,
            };
            let _ = crate::sys::signal_raw(pid.as_raw(), signo);
        } else {
            let _ = nix::sys::signal::kill(pid, signal);
        }
    }
    if all {
        kill_cgroup(w.req.cgroup_procs.as_deref(), signal);
    }
}

pub(super) fn kill_cgroup(procs: Option<&Path>, signal: Signal) {
    let Some(procs) = procs else { return };
    let Ok(text) = std::fs::read_to_string(procs) else {
        return;
    };
    for pid in text.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
        let _ = nix::sys::signal::kill(Pid::from_raw(pid), signal);
    }
}

/// Ends container `id` after its start failed with `error`; its exit once recorded, None when
/// its process outlived the kill (the exit then reaches the daemon as an event, if ever).
pub async fn end_failed_start(monitor: &Monitor, id: &str, error: &str) -> Option<ExitInfo> {
    let message = format!("failed to start: {error}");
    let exited = {
        let mut workloads = monitor.workloads.borrow_mut();
        let w = workloads.get_mut(id)?;
        w.start_error = Some(message.clone());
        w.exit.as_mut().map(|exit| {
            mark_failed_start(exit, message);
            exit.clone()
        })
    };
    let Some(already) = exited else {
        // A stand-in ends on its own (it blocks the kill's signal by then); libcontainer's or
        // runc's init would wait for a start that never comes.
        kill(monitor, id, Signal::SIGKILL, true);
        if !reaped(monitor, id, KILL_WAIT).await {
            log(&format!(
                "container {id}: its process outlived {KILL_WAIT:?} after its start failed"
            ));
            return None;
        }
        return monitor.workloads.borrow().get(id)?.exit.clone();
    };
    // Reaped while the start was awaited: recorded as an ordinary exit, now amended.
    let path = monitor
        .workloads
        .borrow()
        .get(id)?
        .dir()
        .join(crate::monitor::EXIT_FILE);
    if let Err(e) = crate::store::save(&path, &already) {
        log(&format!("recording the failed start of {id}: {e}"));
    }
    Some(already)
}

/// `exit` as a failed start's: what `process_exited` records once `start_error` is set, and
/// what an exit reaped before the start's failure was known becomes.
pub(super) fn mark_failed_start(exit: &mut ExitInfo, message: String) {
    exit.code = START_FAILED_CODE;
    exit.signal = None;
    exit.oom_killed = false;
    exit.oom_scope = None;
    exit.start_failed = true;
    exit.message = message;
}

/// Waits until container `id`'s main process is reaped (or the container is forgotten), at most
/// `wait`. Reaps happen on this thread, between the pauses.
pub(super) async fn reaped(monitor: &Monitor, id: &str, wait: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + wait;
    while monitor
        .workloads
        .borrow()
        .get(id)
        .is_some_and(Workload::is_alive)
    {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    true
}
