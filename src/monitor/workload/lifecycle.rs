//! The pod's containers, as the monitor runs them: created through a runtime worker, started
//! through libcontainer's start signal, their output relayed into CRI log files, their exits
//! reaped here and written to `<dir>/exit.json` before subscribers hear of them.

use std::cell::RefCell;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::sys::wait::WaitStatus;
use nix::unistd::Pid;

use super::Workload;
pub use super::ending::kill;
use super::ending::{KILL_WAIT, end_failed_start, kill_cgroup, mark_failed_start, reaped};
use super::logs::{self, LogFile, Relay, Stream};
use super::oom::{OomWatch, oom_kills};
use super::worker::{self, Job, Outcome, Stdio};
use crate::monitor::state::{Monitor, err, failed_as_logged, log, now_nanos};
use crate::monitor::{CreateRequest, EXIT_FILE, Event, ExitInfo, Fault, RUNTIME_LOG, Reply};

/// What the monitor keeps of the container's standard streams.
struct Ours {
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
    stdin: Option<OwnedFd>,
    console: Option<tokio::net::UnixListener>,
}

pub async fn create(monitor: &Rc<Monitor>, req: CreateRequest) -> Reply {
    if monitor.workloads.borrow().contains_key(&req.id) {
        return err(Fault::State, format!("container {} exists already", req.id));
    }
    let Some(_creating) = monitor.begin_create(&req.id) else {
        return err(
            Fault::State,
            format!("container {} is being created already", req.id),
        );
    };
    if let Some(runtime) = req.runtime.as_ref().filter(|r| r.sandbox) {
        if let Err(reply) = super::infra::ensure(monitor, runtime, &req).await {
            return reply;
        }
    }
    let _held = crate::failpoint_pause!("monitor.create.before_worker");
    let log = match LogFile::open(req.log_path.clone()) {
        Ok(l) => Rc::new(RefCell::new(l)),
        Err(e) => return failed("open the log file", req.log_path.as_deref(), e),
    };
    let (theirs, ours, console_socket) = match standard_streams(&req) {
        Ok(s) => s,
        Err(e) => return failed("set up the container's stdio", Some(&req.dir), e),
    };
    let since = monitor.reap_seq();
    let job = Job::Create {
        req: req.clone(),
        stdio: theirs,
        console_socket,
    };
    let spawned = match worker::spawn(job, &req.dir.join(RUNTIME_LOG)) {
        Ok(s) => s,
        Err(e) => return failed("start a runtime worker", None, e),
    };
    // Reaped like any child; nothing waits for its status.
    drop(monitor.watch(spawned.pid, since));
    let (outcome, console) = tokio::join!(spawned.outcome(), worker::receive_console(ours.console));
    let pid = match outcome {
        Outcome::Pid(pid) => {
            crate::failpoint!("monitor.create.after_libcontainer");
            Pid::from_raw(pid)
        }
        Outcome::Failed { fault, error } => {
            let logged = worker::logged_errors(&req.dir.join(RUNTIME_LOG));
            return failed_as_logged(fault, error, &logged);
        }
        Outcome::Done => return worker::no_pid(),
    };
    let attachers = logs::Attachers::default();
    // With a tty, stdin is the master: a copy stays for attachers (stdin and resizes).
    let stdin = match (&console, ours.stdin) {
        (Some(master), _) if req.stdin => master.try_clone().ok(),
        (_, stdin) => stdin,
    };
    let relays = match relay_outputs(&req, ours.stdout, ours.stderr, console, &log, &attachers) {
        Ok(r) => r,
        Err(e) => {
            let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
            return failed("relay the container's output", None, e);
        }
    };
    let id = req.id.clone();
    let oom = req
        .memory_cgroup
        .as_deref()
        .map(|dir| OomWatch::start(dir, monitor.oom_kills.get()));
    let status = monitor.adopt(pid, since, &id);
    monitor.workloads.borrow_mut().insert(
        id.clone(),
        Workload {
            req,
            pid: Some(pid),
            started_at: None,
            starting: false,
            exit: None,
            start_error: None,
            log,
            relays,
            attachers,
            stdin,
            oom,
        },
    );
    if let Some(status) = status {
        process_exited(monitor, &id, status);
    }
    Reply::Created { pid: pid.as_raw() }
}

/// The container's side and the monitor's side of stdin, stdout and stderr. A tty
/// container gets its streams from the tty libcontainer creates; its master comes back on the
/// console socket.
fn standard_streams(req: &CreateRequest) -> std::io::Result<(Stdio, Ours, Option<PathBuf>)> {
    let null = worker::dev_null;
    let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC);
    if req.tty {
        let path = req.dir.join("console.sock");
        let _ = std::fs::remove_file(&path);
        let (_dir, short) = crate::monitor::short_socket_path(&req.dir, "console.sock")?;
        let listener = std::os::unix::net::UnixListener::bind(short)?;
        listener.set_nonblocking(true)?;
        let theirs = Stdio {
            stdin: null()?,
            stdout: null()?,
            stderr: null()?,
        };
        let ours = Ours {
            stdout: None,
            stderr: None,
            stdin: None,
            console: Some(tokio::net::UnixListener::from_std(listener)?),
        };
        return Ok((theirs, ours, Some(path)));
    }
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let (stdin, our_stdin) = if req.stdin {
        let (r, w) = pipe()?;
        (r, Some(w))
    } else {
        (null()?, None)
    };
    let theirs = Stdio {
        stdin,
        stdout: out_w,
        stderr: err_w,
    };
    let ours = Ours {
        stdout: Some(out_r),
        stderr: Some(err_r),
        stdin: our_stdin,
        console: None,
    };
    Ok((theirs, ours, None))
}

fn relay_outputs(
    req: &CreateRequest,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
    console: Option<OwnedFd>,
    log: &Rc<RefCell<LogFile>>,
    attachers: &logs::Attachers,
) -> std::io::Result<Vec<Rc<RefCell<Relay>>>> {
    let mut relays = Vec::new();
    if req.tty {
        let master = console.ok_or_else(|| {
            std::io::Error::other("the container's init sent no tty on the console socket")
        })?;
        let relay = logs::start(master, Stream::Stdout, true, log.clone(), attachers.clone())?;
        relays.push(relay);
        return Ok(relays);
    }
    for (fd, stream) in [(stdout, Stream::Stdout), (stderr, Stream::Stderr)] {
        if let Some(fd) = fd {
            relays.push(logs::start(
                fd,
                stream,
                false,
                log.clone(),
                attachers.clone(),
            )?);
        }
    }
    Ok(relays)
}

pub async fn start(monitor: &Rc<Monitor>, id: &str) -> Reply {
    let (runtime_dir, runtime, dir, pid, restored, sandboxed) = {
        let mut workloads = monitor.workloads.borrow_mut();
        let Some(w) = workloads.get_mut(id) else {
            return not_found(id);
        };
        if let Some(exit) = &w.exit {
            return err(
                Fault::State,
                format!(
                    "container {id} exited before it was started (exit code {})",
                    exit.code
                ),
            );
        }
        if w.started_at.is_some() || w.starting {
            return err(Fault::State, format!("container {id} is already running"));
        }
        w.starting = true;
        (
            w.req.runtime_root.join(id),
            w.req.runtime.clone(),
            w.req.dir.clone(),
            w.pid,
            w.req.restore.is_some().then(|| w.req.cgroup_procs.clone()),
            w.req.runtime.as_ref().is_some_and(|r| r.sandbox),
        )
    };
    let started = match (runtime, restored) {
        (_, Some(procs)) => super::restore::continue_restored(procs.as_deref(), &runtime_dir),
        (Some(runtime), None) => start_by_binary(monitor, runtime, id, dir).await,
        (None, None) => libcontainer::container::Container::load(runtime_dir)
            .and_then(|mut c| c.start())
            .map_err(|e| e.to_string()),
    };
    // Stamped as the start returns, before anything else may run: a command that ends at once
    // (`true`) can be reaped while the start is awaited, and its exit must not precede its start.
    let started_at = {
        let mut workloads = monitor.workloads.borrow_mut();
        let w = workloads.get_mut(id);
        let now = now_nanos();
        match (w, &started) {
            (Some(w), Ok(())) => {
                w.starting = false;
                let at = w.exit.as_ref().map_or(now, |e| e.finished_at.min(now));
                w.started_at = Some(at);
                at
            }
            (Some(w), Err(_)) => {
                w.starting = false;
                now
            }
            (None, _) => now,
        }
    };
    if let Err(e) = started {
        // A binary's words may say it is the request's fault (runsc finds a joining
        // container's command only now).
        let (fault, error) = (
            worker::classify(&e),
            format!("starting container {id}: {e}"),
        );
        return match end_failed_start(monitor, id, &e).await {
            Some(exit) => Reply::StartFailed { fault, error, exit },
            None => err(fault, error),
        };
    }
    // A stand-in (`standin.rs`) runs crust's code for the container's whole life.
    if let Some(pid) = pid.filter(|_| !sandboxed) {
        left_crust(pid).await;
    }
    crate::failpoint!("monitor.start.after_start");
    Reply::Started { started_at }
}

/// How long StartContainer waits for the container's process to run its own program: only a
/// startContainer hook, which runs before that, takes longer.
const EXEC_WAIT: Duration = Duration::from_secs(5);

/// Waits until the container's process has left crust's code for its own program. libcontainer's
/// start only tells the container's init to go on; until its execve that process is a copy of
/// the monitor (crust's executable and command line) inside the container's PID namespace,
/// where the container's own processes (and a debugging container's) would see it.
async fn left_crust(pid: Pid) {
    use std::os::unix::fs::MetadataExt;
    let file = |path: String| std::fs::metadata(path).map(|m| (m.dev(), m.ino()));
    let Ok(ours) = file("/proc/self/exe".into()) else {
        return;
    };
    let deadline = tokio::time::Instant::now() + EXEC_WAIT;
    let mut pause = Duration::from_micros(100);
    // An error (the process ended, or is a zombie) also means it runs crust's code no more.
    while file(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe == ours) {
        if tokio::time::Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(10));
    }
}

/// `<runtime> start` in a worker: the binary's own waiting process execs the program.
async fn start_by_binary(
    monitor: &Monitor,
    runtime: crate::model::OciRuntime,
    id: &str,
    dir: PathBuf,
) -> Result<(), String> {
    let log = dir.join(RUNTIME_LOG);
    let since = monitor.reap_seq();
    let job = Job::Start {
        runtime,
        id: id.to_owned(),
        dir,
    };
    let spawned =
        worker::spawn(job, &log).map_err(|e| format!("starting a runtime worker: {e}"))?;
    drop(monitor.watch(spawned.pid, since));
    match spawned.outcome().await {
        Outcome::Failed { error, .. } => Err(error),
        Outcome::Done | Outcome::Pid(_) => Ok(()),
    }
}

pub fn signal(monitor: &Monitor, id: &str, signal: i32, all: bool) -> Reply {
    let Ok(signal) = Signal::try_from(signal) else {
        return err(Fault::Invalid, format!("{signal} is not a signal"));
    };
    if !monitor.workloads.borrow().contains_key(id) {
        return not_found(id);
    }
    kill(monitor, id, signal, all);
    Reply::Done
}

pub async fn forget(monitor: &Monitor, id: &str) -> Reply {
    // A container whose daemon died while the monitor created it: its worker must be done
    // with the container's directories before the daemon removes them.
    monitor.created(id).await;
    if !monitor.workloads.borrow().contains_key(id) {
        return Reply::Done;
    }
    kill(monitor, id, Signal::SIGKILL, true);
    if !reaped(monitor, id, KILL_WAIT).await {
        return err(
            Fault::Failed,
            format!("container {id} did not die within {KILL_WAIT:?} of SIGKILL"),
        );
    }
    if let Some(w) = monitor.workloads.borrow_mut().remove(id) {
        if let Some(pid) = w.pid {
            monitor.disown(pid);
        }
    }
    Reply::Done
}

pub fn reopen_log(monitor: &Monitor, id: &str) -> Reply {
    let workloads = monitor.workloads.borrow();
    let Some(w) = workloads.get(id) else {
        return not_found(id);
    };
    match w.log.borrow_mut().reopen() {
        Ok(()) => Reply::Done,
        Err(e) => failed("reopen the log file", w.req.log_path.as_deref(), e),
    }
}

/// The container's main process was reaped: finish its output, record how it ended (on disk
/// first), then tell the subscribers.
pub fn process_exited(monitor: &Monitor, id: &str, status: WaitStatus) {
    let (code, signal) = match status {
        WaitStatus::Exited(_, code) => (code, None),
        WaitStatus::Signaled(_, sig, _) => (128 + sig as i32, Some(sig as i32)),
        _ => return,
    };
    let (exit, started) = {
        let mut workloads = monitor.workloads.borrow_mut();
        let Some(w) = workloads.get_mut(id) else {
            return;
        };
        w.pid = None;
        // Without a PID namespace of its own the container's other processes outlive its
        // main one; kubelet expects a container to be gone when it is reported exited.
        if !w.req.own_pid_namespace {
            kill_cgroup(w.req.cgroup_procs.as_deref(), Signal::SIGKILL);
        }
        for relay in &w.relays {
            relay.borrow_mut().pump();
        }
        // Its output is all out: attached clients are done.
        w.attachers.borrow_mut().clear();
        let clean = code == 0 && signal.is_none();
        // What the watch saw first: with the systemd driver the cgroup may be gone by now.
        let sigkill = signal == Some(Signal::SIGKILL as i32);
        let watch = w.oom.take();
        let watched = watch
            .as_ref()
            .map_or(0, |o| o.kills_at_exit(sigkill, monitor.oom_kills.get()));
        monitor.oom_kills.set(monitor.oom_kills.get() + watched);
        let oom_killed =
            !clean && (watched > 0 || w.req.memory_cgroup.as_deref().is_some_and(oom_kills));
        let mut exit = ExitInfo {
            code,
            signal,
            finished_at: now_nanos(),
            oom_killed,
            oom_scope: watch.filter(|_| oom_killed).map(|o| o.scope_at_exit()),
            start_failed: false,
            state_lost: false,
            message: String::new(),
        };
        // A start that failed ends the container as runc's does, whatever ended the process.
        if let Some(message) = w.start_error.clone() {
            mark_failed_start(&mut exit, message);
        }
        let path = w.req.dir.join(EXIT_FILE);
        if let Err(e) = crate::store::save(&path, &exit) {
            log(&format!("recording the exit of {id}: {e}"));
        }
        w.exit = Some(exit.clone());
        // A start under way counts: the daemon keeps the exit until it has recorded the start.
        (exit, w.started_at.is_some() || w.starting)
    };
    monitor.publish(&Event::Exited {
        id: id.to_owned(),
        exit,
        started,
    });
}

fn not_found(id: &str) -> Reply {
    err(
        Fault::NotFound,
        format!("this pod's monitor has no container {id}"),
    )
}

fn failed(step: &str, path: Option<&Path>, e: std::io::Error) -> Reply {
    let at = path
        .map(|p| format!(" {}", p.display()))
        .unwrap_or_default();
    err(Fault::Failed, format!("failed to {step}{at}: {e}"))
}
