//! The monitor's serving loop. A current-thread tokio runtime on the monitor's one thread:
//! the monitor forks runtime workers, and a fork is sound only while no other thread exists,
//! so nothing here may start one (no `spawn_blocking`, no `tokio::fs`); `worker::spawn`
//! checks. Tasks: one per control connection, one reaper reading SIGCHLD from a signalfd, one
//! log relay per container output, and one writer per subscriber.
//!
//! Children: every process the monitor reaps is looked up in `Children`. A container's
//! process belongs to a workload; an exec's process or a worker has a waiter. A process can be
//! reaped before its owner is known (an exec that ends before its worker's answer is read):
//! its status waits in `unclaimed`, stamped with the reap sequence, and is claimed only by an
//! owner that started after it, so a stale status of a reused pid is never taken.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::Duration;

use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Notify, mpsc, oneshot};

use super::workloads::{self, Workload};
use super::{Event, Fault, Identity, MonitorConfig, Reply, Request, SOCKET};

/// The longest request line the monitor reads (an exec carries a whole OCI process).
const MAX_REQUEST: usize = 1 << 20;
/// Events a subscriber may fall behind by before it is cut off.
const SUBSCRIBER_BACKLOG: usize = 1024;
/// Reap statuses kept for owners not known yet.
const MAX_UNCLAIMED: usize = 1024;

/// The monitor's state, shared by its tasks (all on one thread).
pub struct Monitor {
    pub config: MonitorConfig,
    pub identity: Identity,
    pod_init: Cell<Option<Pid>>,
    pub workloads: RefCell<BTreeMap<String, Workload>>,
    children: RefCell<Children>,
    subscribers: RefCell<Vec<mpsc::Sender<Rc<str>>>>,
    stop: Notify,
    /// OOM kills put down to this pod's containers so far (see `oom`): what the pod's
    /// hierarchical count holds besides a container whose own count vanished.
    pub oom_kills: Cell<u64>,
}

#[derive(Default)]
struct Children {
    owners: HashMap<i32, Owner>,
    unclaimed: HashMap<i32, (u64, WaitStatus)>,
    /// Bumped on every reap.
    seq: u64,
}

enum Owner {
    Container(String),
    Waiter(oneshot::Sender<WaitStatus>),
}

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
            super::process::log(&format!("starting the event loop: {e}"));
            return 1;
        }
    };
    let monitor = Rc::new(Monitor {
        config,
        identity,
        pod_init: Cell::new(pod_init),
        workloads: RefCell::new(BTreeMap::new()),
        children: RefCell::default(),
        subscribers: RefCell::default(),
        stop: Notify::new(),
        oom_kills: Cell::new(0),
    });
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
            super::process::log(&format!("control socket: {e}"));
            return 1;
        }
    };
    if let Err(e) = start_reaper(monitor.clone()) {
        super::process::log(&format!("reaper: {e}"));
        return 1;
    }
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    tokio::task::spawn_local(connection(monitor.clone(), stream));
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
    monitor.reap();
    tokio::task::spawn_local(async move {
        loop {
            let Ok(mut ready) = fd.readable().await else {
                return;
            };
            while let Ok(Some(_)) = fd.get_ref().read_signal() {}
            ready.clear_ready();
            monitor.reap();
        }
    });
    Ok(())
}

impl Monitor {
    fn reap(&self) {
        while let Ok(status) = waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
            let Some(pid) = status.pid() else { break };
            self.exited(pid, status);
        }
    }

    fn exited(&self, pid: Pid, status: WaitStatus) {
        if self.pod_init.get() == Some(pid) {
            super::process::log(&format!("pod init {pid} exited: {status:?}"));
            self.pod_init.set(None);
            return;
        }
        let owner = {
            let mut children = self.children.borrow_mut();
            children.seq += 1;
            let owner = children.owners.remove(&pid.as_raw());
            if owner.is_none() {
                let seq = children.seq;
                children.unclaimed.insert(pid.as_raw(), (seq, status));
                if children.unclaimed.len() > MAX_UNCLAIMED {
                    let oldest = children.unclaimed.iter().min_by_key(|(_, (s, _))| *s);
                    if let Some(&k) = oldest.map(|(k, _)| k) {
                        children.unclaimed.remove(&k);
                    }
                }
            }
            owner
        };
        match owner {
            Some(Owner::Container(id)) => workloads::process_exited(self, &id, status),
            Some(Owner::Waiter(tx)) => {
                let _ = tx.send(status);
            }
            None => {}
        }
    }

    /// The current reap sequence: an owner registered later claims only exits reaped after it.
    pub fn reap_seq(&self) -> u64 {
        self.children.borrow().seq
    }

    /// Claims `pid` for a waiter started at reap sequence `since`.
    pub fn watch(&self, pid: Pid, since: u64) -> oneshot::Receiver<WaitStatus> {
        let (tx, rx) = oneshot::channel();
        match self.take_unclaimed(pid, since) {
            Some(status) => {
                let _ = tx.send(status);
            }
            None => {
                self.children
                    .borrow_mut()
                    .owners
                    .insert(pid.as_raw(), Owner::Waiter(tx));
            }
        }
        rx
    }

    /// Claims `pid` as container `id`'s process; returns its status if it already exited.
    pub fn adopt(&self, pid: Pid, since: u64, id: &str) -> Option<WaitStatus> {
        let status = self.take_unclaimed(pid, since);
        if status.is_none() {
            self.children
                .borrow_mut()
                .owners
                .insert(pid.as_raw(), Owner::Container(id.to_owned()));
        }
        status
    }

    pub fn disown(&self, pid: Pid) {
        self.children.borrow_mut().owners.remove(&pid.as_raw());
    }

    fn take_unclaimed(&self, pid: Pid, since: u64) -> Option<WaitStatus> {
        let mut children = self.children.borrow_mut();
        match children.unclaimed.remove(&pid.as_raw()) {
            Some((seq, status)) if seq > since => Some(status),
            _ => None,
        }
    }

    /// Sends `event` to every subscriber; one that fell too far behind is cut off.
    pub fn publish(&self, event: &Event) {
        let line: Rc<str> = match serde_json::to_string(event) {
            Ok(l) => format!("{l}\n").into(),
            Err(_) => return,
        };
        self.subscribers
            .borrow_mut()
            .retain(|s| match s.try_send(line.clone()) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    super::process::log("a subscriber fell behind; cutting it off");
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            });
    }

    /// Kills the pod's processes (containers first, recording their exits), then its init.
    async fn shutdown(&self) {
        let ids: Vec<String> = self.workloads.borrow().keys().cloned().collect();
        for id in &ids {
            workloads::kill(self, id, Signal::SIGKILL, true);
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while self.workloads.borrow().values().any(Workload::is_alive)
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if let Some(init) = self.pod_init.take() {
            let _ = nix::sys::signal::kill(init, Signal::SIGKILL);
            let _ = waitpid(init, None);
        }
        let _ = std::fs::remove_file(self.config.dir.join(SOCKET));
        super::process::log("shutdown requested");
    }
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
            return super::interactive::exec(&monitor, *req, read, write).await;
        }
        Request::Attach { id, stdin } => {
            let read = reader.into_inner().into_inner();
            return super::interactive::attach(&monitor, &id, stdin, read, write).await;
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
    };
    match request {
        Request::Ping => ok(),
        Request::Shutdown => {
            monitor.shutdown().await;
            ok()
        }
        Request::Create(req) => workloads::create(monitor, *req).await,
        Request::Start { id } => workloads::start(monitor, &id),
        Request::Signal { id, signal, all } => workloads::signal(monitor, &id, signal, all),
        Request::Forget { id } => workloads::forget(monitor, &id).await,
        Request::ReopenLog { id } => workloads::reopen_log(monitor, &id),
        Request::Exec(req) => super::exec::run(monitor, *req).await,
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
    monitor.subscribers.borrow_mut().push(tx);
    if write.write_all(&encode(&snapshot)).await.is_err() {
        return;
    }
    while let Some(line) = rx.recv().await {
        if write.write_all(line.as_bytes()).await.is_err() {
            return;
        }
    }
}

pub fn err(fault: Fault, error: String) -> Reply {
    Reply::Err { fault, error }
}

fn encode(reply: &Reply) -> Vec<u8> {
    let mut out = serde_json::to_vec(reply).unwrap_or_default();
    out.push(b'\n');
    out
}

pub fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or_default()
}
