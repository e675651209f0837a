//! ExecSync in the monitor: a runtime worker starts the process in the container (through
//! libcontainer's tenant builder: the container's namespaces, cgroup, user and capabilities),
//! the monitor collects its output, bounded, and reaps it; a timeout kills it.

use std::cell::RefCell;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::sys::wait::WaitStatus;
use nix::unistd::Pid;

use super::worker::{self, Job, Outcome, Stdio};
use crate::model::OciRuntime;
use crate::monitor::oci_cli;
use crate::monitor::state::{Monitor, err, failed_as_logged};
use crate::monitor::{ExecOutput, ExecRequest, Fault, RUNTIME_LOG, Reply};

/// How long output is still read after the process exited (a child it left behind may hold
/// the pipes open for good).
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(500);

pub async fn run(monitor: &Rc<Monitor>, req: ExecRequest) -> Reply {
    let (dir, runtime): (std::path::PathBuf, Option<OciRuntime>) = {
        let workloads = monitor.workloads.borrow();
        let Some(w) = workloads.get(&req.id) else {
            return err(
                Fault::NotFound,
                format!("this pod's monitor has no container {}", req.id),
            );
        };
        if !w.is_alive() {
            return err(Fault::State, format!("container {} is not running", req.id));
        }
        (w.dir().to_owned(), w.runtime().cloned())
    };
    let (theirs, out, errs) = match pipes() {
        Ok(p) => p,
        Err(e) => return err(Fault::Failed, format!("creating the exec's pipes: {e}")),
    };
    let since = monitor.reap_seq();
    let job = Job::Exec {
        id: req.id.clone(),
        runtime_root: req.runtime_root.clone(),
        process: Box::new(req.process.clone()),
        stdio: theirs,
        console_socket: None,
        runtime: runtime.clone(),
        dir: dir.clone(),
    };
    let spawned = match worker::spawn(job, &dir.join(RUNTIME_LOG)) {
        Ok(s) => s,
        Err(e) => return err(Fault::Failed, format!("starting a runtime worker: {e}")),
    };
    drop(monitor.watch(spawned.pid, since));
    let stdout = Collector::start(out, req.max_output);
    let stderr = Collector::start(errs, req.max_output);
    let pid = match spawned.outcome().await {
        Outcome::Pid(pid) => Pid::from_raw(pid),
        Outcome::Failed { fault, error } => {
            let logged = worker::logged_errors(&dir.join(RUNTIME_LOG));
            return failed_as_logged(fault, error, &logged);
        }
        Outcome::Done => return worker::no_pid(),
    };
    let exited = monitor.watch(pid, since);
    let timeout = req.timeout_ms.map(Duration::from_millis);
    let (status, timed_out) = match timeout {
        None => (exited.await.ok(), false),
        Some(t) => {
            tokio::pin!(exited);
            match tokio::time::timeout(t, &mut exited).await {
                Ok(status) => (status.ok(), false),
                Err(_) => {
                    kill(monitor, runtime.as_ref(), &req.id, &dir, pid).await;
                    (exited.await.ok(), true)
                }
            }
        }
    };
    ended(&dir, pid);
    let deadline = tokio::time::Instant::now() + DRAIN_AFTER_EXIT;
    let (stdout, stderr) = tokio::join!(stdout.finish(deadline), stderr.finish(deadline));
    Reply::Exec(ExecOutput {
        exit_code: exit_code(status),
        truncated: stdout.1 || stderr.1,
        stdout: stdout.0,
        stderr: stderr.0,
        timed_out,
    })
}

/// Kills an exec's process: the one the monitor reaps, and for a sandboxing binary first the
/// process inside the sandbox that it stands for (`runsc-exec` does not take it along).
pub(super) async fn kill(
    monitor: &Monitor,
    runtime: Option<&OciRuntime>,
    id: &str,
    dir: &Path,
    pid: Pid,
) {
    let inner = runtime.filter(|r| r.sandbox).and_then(|r| {
        let text = std::fs::read_to_string(oci_cli::inner_pid_file(dir, pid.as_raw())).ok()?;
        Some((r.clone(), text.trim().parse::<i32>().ok()?))
    });
    if let Some((runtime, inner)) = inner {
        let since = monitor.reap_seq();
        let job = Job::KillInner {
            runtime,
            id: id.to_owned(),
            dir: dir.to_owned(),
            inner,
        };
        if let Ok(spawned) = worker::spawn(job, &dir.join(RUNTIME_LOG)) {
            drop(monitor.watch(spawned.pid, since));
            let _ = spawned.outcome().await;
        }
    }
    let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
}

/// An exec's process was reaped: what a sandboxing binary's exec left for it goes.
pub(super) fn ended(dir: &Path, pid: Pid) {
    let _ = std::fs::remove_file(oci_cli::inner_pid_file(dir, pid.as_raw()));
}

fn exit_code(status: Option<WaitStatus>) -> i32 {
    match status {
        Some(WaitStatus::Exited(_, code)) => code,
        Some(WaitStatus::Signaled(_, sig, _)) => 128 + sig as i32,
        _ => -1,
    }
}

fn pipes() -> std::io::Result<(Stdio, OwnedFd, OwnedFd)> {
    let (out_r, out_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (err_r, err_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let null: OwnedFd = std::fs::File::open("/dev/null")?.into();
    Ok((
        Stdio {
            stdin: null,
            stdout: out_w,
            stderr: err_w,
        },
        out_r,
        err_r,
    ))
}

/// Reads one output pipe into a bounded buffer, in a task of its own so the process never
/// blocks on a full pipe.
struct Collector {
    buf: Rc<RefCell<(Vec<u8>, bool)>>,
    task: tokio::task::JoinHandle<()>,
}

impl Collector {
    fn start(fd: OwnedFd, max: usize) -> Collector {
        let buf: Rc<RefCell<(Vec<u8>, bool)>> = Rc::default();
        let sink = buf.clone();
        let task = tokio::task::spawn_local(async move {
            if super::logs::set_nonblocking(&fd).is_err() {
                return;
            }
            let Ok(afd) = crate::sys::async_fd(fd) else {
                return;
            };
            let mut chunk = vec![0u8; 64 * 1024];
            loop {
                let Ok(mut ready) = afd.readable().await else {
                    return;
                };
                match nix::unistd::read(std::os::fd::AsRawFd::as_raw_fd(afd.get_ref()), &mut chunk)
                {
                    Ok(0) => return,
                    Ok(n) => {
                        let mut b = sink.borrow_mut();
                        let room = max.saturating_sub(b.0.len());
                        b.0.extend_from_slice(&chunk[..n.min(room)]);
                        b.1 |= n > room;
                    }
                    Err(nix::errno::Errno::EAGAIN) => ready.clear_ready(),
                    Err(nix::errno::Errno::EINTR) => {}
                    Err(_) => return,
                }
            }
        });
        Collector { buf, task }
    }

    /// What was read by `deadline` (or the end of the stream): the bytes and whether some
    /// were dropped for the bound.
    async fn finish(self, deadline: tokio::time::Instant) -> (Vec<u8>, bool) {
        let mut task = self.task;
        if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
            task.abort();
        }
        std::mem::take(&mut *self.buf.borrow_mut())
    }
}
