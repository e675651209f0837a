//! The monitor's serving loop. A current-thread tokio runtime on the monitor's one thread:
//! the monitor forks runtime workers, and a fork is sound only while no other thread exists,
//! so nothing here may start one (no `spawn_blocking`, no `tokio::fs`); `worker::spawn`
//! checks. Tasks: one per control connection, one reaper reading SIGCHLD from a signalfd, one
//! log relay per container output, one writer per subscriber, and the idle trim. This file
//! reads requests and dispatches them to their handlers (`workload/`: `lifecycle.rs`,
//! `exec.rs`, `interactive.rs`); the state they share is `state.rs`.

use std::rc::Rc;
use std::time::Duration;

use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::waitpid;
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

use super::state::{Monitor, err, log};
use super::workload::Workload;
use super::workload::lifecycle as workloads;
use super::{Fault, Identity, MonitorConfig, Reply, Request, SOCKET};

/// The longest request line the monitor reads (an exec carries a whole OCI process).
const MAX_REQUEST: usize = 1 << 20;
/// Events a subscriber may fall behind by before it is cut off.
const SUBSCRIBER_BACKLOG: usize = 1024;
/// How long the monitor must have had nothing to do before it lets go of what it ran.
const IDLE: Duration = Duration::from_secs(1);

/// Runs the serving loop until a Shutdown request; returns the process exit code.
pub fn run(
    config: MonitorConfig,
    identity: Identity,
    listener: std::os::unix::net::UnixListener,
    pod_init: Option<Pid>,
) -> i32 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            log(&format!("starting the event loop: {e}"));
            return 1;
        }
    };
    let monitor = Rc::new(Monitor::new(config, identity, pod_init));
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, serve(monitor, listener))
}

async fn serve(monitor: Rc<Monitor>, listener: std::os::unix::net::UnixListener) -> i32 {
    let listener = match listener
        .set_nonblocking(true)
        .and_then(|()| UnixListener::from_std(listener))
    {
        Ok(l) => l,
        Err(e) => {
            log(&format!("control socket: {e}"));
            return 1;
        }
    };
    if let Err(e) = start_reaper(monitor.clone()) {
        log(&format!("reaper: {e}"));
        return 1;
    }
    // Start-up counts as work: the first trim comes once it is over.
    monitor.activity.notify_one();
    tokio::task::spawn_local(trim_when_idle(monitor.clone()));
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    monitor.activity.notify_one();
                    let monitor = monitor.clone();
                    tokio::task::spawn_local(async move {
                        connection(monitor.clone(), stream).await;
                        // The idle time counts from the end of a request, not its start: a
                        // create or an ExecSync may outlast `IDLE`.
                        monitor.activity.notify_one();
                    });
                }
            }
            () = monitor.stop.notified() => return 0,
        }
    }
}

fn start_reaper(monitor: Rc<Monitor>) -> std::io::Result<()> {
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    let fd = SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)?;
    let fd = crate::sys::async_fd(fd)?;
    // Exits that happened before the signalfd existed are reaped now.
    reap(&monitor);
    tokio::task::spawn_local(async move {
        loop {
            let Ok(mut ready) = fd.readable().await else {
                return;
            };
            while let Ok(Some(_)) = fd.get_ref().read_signal() {}
            ready.clear_ready();
            reap(&monitor);
        }
    });
    Ok(())
}

/// Once the monitor has had nothing to do for `IDLE` after some work, lets go of the pages
/// that work brought in: the code and read-only data it ran (creating a container runs much
/// of crust's code that an idle monitor never runs again) and the heap it freed. A monitor
/// spends nearly all its life idle, so that is what it holds; the next request maps the code
/// back from the page cache, which the daemon keeps warm. Work is a connection accepted or
/// ended and a child reaped (`activity`); a connection that stays open (a subscriber, an
/// interactive exec) does not hold the trim off. The trim runs on this one thread, between
/// two tasks' steps, so no mapping changes under it (see `sys::trim_file_pages`). Between
/// trims the task waits without a timer, so an idle monitor is never woken for this.
async fn trim_when_idle(monitor: Rc<Monitor>) {
    loop {
        monitor.activity.notified().await;
        while tokio::time::timeout(IDLE, monitor.activity.notified())
            .await
            .is_ok()
        {}
        crate::sys::trim_file_pages();
        crate::sys::release_free_heap();
    }
}

/// Reaps what exited and records the exits of containers' processes.
fn reap(monitor: &Monitor) {
    monitor.activity.notify_one();
    for (id, status) in monitor.reap() {
        workloads::process_exited(monitor, &id, status);
    }
}

/// Kills the pod's processes (containers first, recording their exits), then its init.
async fn shutdown(monitor: &Monitor) {
    // A creation under way ends first, so that its container is killed with the others
    // instead of outliving the monitor.
    monitor.all_created().await;
    let ids: Vec<String> = monitor.workloads.borrow().keys().cloned().collect();
    for id in &ids {
        workloads::kill(monitor, id, Signal::SIGKILL, true);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while monitor.workloads.borrow().values().any(Workload::is_alive)
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    if let Some(init) = monitor.take_pod_init() {
        let _ = nix::sys::signal::kill(init, Signal::SIGKILL);
        let _ = waitpid(init, None);
    }
    let _ = std::fs::remove_file(monitor.config.dir.join(SOCKET));
    log("shutdown requested");
}

async fn connection(monitor: Rc<Monitor>, stream: UnixStream) {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read).take(MAX_REQUEST as u64);
    let mut line = String::new();
    let read = tokio::time::timeout(Duration::from_secs(5), reader.read_line(&mut line)).await;
    if !matches!(read, Ok(Ok(n)) if n > 0) {
        return;
    }
    let request = match serde_json::from_str::<Request>(&line) {
        Ok(r) => r,
        Err(e) => {
            let reply = err(Fault::Invalid, format!("bad request: {e}"));
            let _ = write.write_all(&encode(&reply)).await;
            return;
        }
    };
    match request {
        Request::Subscribe => return subscribe(&monitor, write).await,
        Request::ExecStream(req) => {
            let read = reader.into_inner().into_inner();
            return super::workload::interactive::exec(&monitor, *req, read, write).await;
        }
        Request::Attach { id, stdin } => {
            let read = reader.into_inner().into_inner();
            return super::workload::interactive::attach(&monitor, &id, stdin, read, write).await;
        }
        _ => {}
    }
    let exit = matches!(request, Request::Shutdown);
    let reply = handle(&monitor, request).await;
    let _ = write.write_all(&encode(&reply)).await;
    if exit {
        monitor.stop.notify_one();
    }
}

async fn handle(monitor: &Rc<Monitor>, request: Request) -> Reply {
    let ok = || Reply::Ok {
        sandbox_id: monitor.config.sandbox_id.clone(),
        identity: monitor.identity,
        protocol: super::PROTOCOL,
    };
    match request {
        Request::Ping => ok(),
        Request::Shutdown => {
            shutdown(monitor).await;
            ok()
        }
        Request::Create(req) => workloads::create(monitor, *req).await,
        Request::Start { id } => workloads::start(monitor, &id).await,
        Request::Signal { id, signal, all } => workloads::signal(monitor, &id, signal, all),
        Request::Forget { id } => workloads::forget(monitor, &id).await,
        Request::ReopenLog { id } => workloads::reopen_log(monitor, &id),
        Request::Exec(req) => super::workload::exec::run(monitor, *req).await,
        Request::Subscribe | Request::ExecStream(_) | Request::Attach { .. } => err(
            Fault::Invalid,
            "a streaming request is answered elsewhere".into(),
        ),
    }
}

/// Keeps the connection as an event stream: the snapshot of every container, then events.
async fn subscribe(monitor: &Rc<Monitor>, mut write: tokio::net::unix::OwnedWriteHalf) {
    let (tx, mut rx) = mpsc::channel::<Rc<str>>(SUBSCRIBER_BACKLOG);
    // Snapshot and registration happen with no await between them, so no event is lost.
    let snapshot = Reply::Snapshot {
        containers: monitor
            .workloads
            .borrow()
            .iter()
            .map(|(id, w)| w.state(id))
            .collect(),
    };
    monitor.subscribe(tx);
    if write.write_all(&encode(&snapshot)).await.is_err() {
        return;
    }
    while let Some(line) = rx.recv().await {
        if write.write_all(line.as_bytes()).await.is_err() {
            return;
        }
    }
}

fn encode(reply: &Reply) -> Vec<u8> {
    let mut out = serde_json::to_vec(reply).unwrap_or_default();
    out.push(b'\n');
    out
}
