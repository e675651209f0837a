//! The monitor's state, shared by its tasks (all on one thread), and the helpers every handler
//! of a request uses. The serving loop (`server.rs`) and the handlers (`workload/`: its
//! `lifecycle.rs`, `exec.rs`, `interactive.rs`) stand over this file; it calls none of them
//! but the runtime worker's classification of a failure.
//!
//! Children: every process the monitor reaps is looked up in `Children`. A container's
//! process belongs to a workload; an exec's process or a worker has a waiter. A process can be
//! reaped before its owner is known (an exec that ends before its worker's answer is read):
//! its status waits in `unclaimed`, stamped with the reap sequence, and is claimed only by an
//! owner that started after it, so a stale status of a reused pid is never taken.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::sync::{Notify, mpsc, oneshot};

use super::workload::Workload;
use super::workload::worker;
use super::{Event, Fault, Identity, MonitorConfig, Reply};

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
    /// Containers being created (a worker is at work for them), each with what their creation
    /// notifies when it ends, so that Forget and Shutdown wait for them: a worker left running
    /// while its container is released would recreate what the release removed.
    creating: RefCell<HashMap<String, Rc<Notify>>>,
    /// Notified once a Shutdown has been answered: the serving loop ends.
    pub stop: Notify,
    /// Notified whenever the monitor has work (a request, a child's exit): the idle trim
    /// (`server.rs`) waits for it to stay quiet.
    pub activity: Notify,
    /// OOM kills put down to this pod's containers so far (see `oom`): what the pod's
    /// hierarchical count holds besides a container whose own count vanished.
    pub oom_kills: Cell<u64>,
    /// Whether the pod's infra container is made (handlers whose binary makes a sandbox per
    /// pod); held while it is being made, so that the pod's first containers wait for it.
    pub infra: tokio::sync::Mutex<bool>,
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

impl Monitor {
    pub fn new(config: MonitorConfig, identity: Identity, pod_init: Option<Pid>) -> Monitor {
        Monitor {
            config,
            identity,
            pod_init: Cell::new(pod_init),
            workloads: RefCell::new(BTreeMap::new()),
            children: RefCell::default(),
            subscribers: RefCell::default(),
            creating: RefCell::default(),
            stop: Notify::new(),
            activity: Notify::new(),
            oom_kills: Cell::new(0),
            infra: tokio::sync::Mutex::new(false),
        }
    }

    /// Reaps every child that exited: waiters are told at once; the exits of containers'
    /// processes are returned (container id, status) for the caller to record.
    pub fn reap(&self) -> Vec<(String, WaitStatus)> {
        let mut containers = Vec::new();
        while let Ok(status) = waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
            let Some(pid) = status.pid() else { break };
            if let Some(id) = self.exited(pid, status) {
                containers.push((id, status));
            }
        }
        containers
    }

    fn exited(&self, pid: Pid, status: WaitStatus) -> Option<String> {
        if self.pod_init.get() == Some(pid) {
            log(&format!("pod init {pid} exited: {status:?}"));
            self.pod_init.set(None);
            return None;
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
        match owner? {
            Owner::Container(id) => Some(id),
            Owner::Waiter(tx) => {
                let _ = tx.send(status);
                None
            }
        }
    }

    /// Takes the pod's init, to kill it: it is no longer the monitor's to reap.
    pub fn take_pod_init(&self) -> Option<Pid> {
        self.pod_init.take()
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

    /// Marks container `id` as being created until the guard drops; None when it is being
    /// created already.
    pub fn begin_create(&self, id: &str) -> Option<Creating<'_>> {
        let mut creating = self.creating.borrow_mut();
        if creating.contains_key(id) {
            return None;
        }
        creating.insert(id.to_owned(), Rc::new(Notify::new()));
        Some(Creating {
            monitor: self,
            id: id.to_owned(),
        })
    }

    /// Returns once container `id` is not being created (at once if it is not).
    pub async fn created(&self, id: &str) {
        let Some(done) = self.creating.borrow().get(id).cloned() else {
            return;
        };
        log(&format!("container {id}: waiting for its creation to end"));
        // Polled before anything else can run on this thread: the notification cannot be
        // missed.
        done.notified().await;
    }

    /// Returns once no container is being created.
    pub async fn all_created(&self) {
        let ids: Vec<String> = self.creating.borrow().keys().cloned().collect();
        for id in ids {
            self.created(&id).await;
        }
    }

    /// Registers a subscriber for every later event.
    pub fn subscribe(&self, tx: mpsc::Sender<Rc<str>>) {
        self.subscribers.borrow_mut().push(tx);
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
                    log("a subscriber fell behind; cutting it off");
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            });
    }
}

/// A container's creation under way (see `Monitor::begin_create`).
pub struct Creating<'a> {
    monitor: &'a Monitor,
    id: String,
}

impl Drop for Creating<'_> {
    fn drop(&mut self) {
        if let Some(done) = self.monitor.creating.borrow_mut().remove(&self.id) {
            done.notify_waiters();
        }
    }
}

pub fn err(fault: Fault, error: String) -> Reply {
    Reply::Err { fault, error }
}

/// The error reply for a failed runtime call: the worker's error, followed by what the
/// runtime logged when that says more. The container's init logs its own failures (a full
/// disk while it prepares the root, say), which the worker's answer only summarises, so the
/// log may say better whose fault it was.
pub fn failed_as_logged(fault: Fault, error: String, logged: &str) -> Reply {
    if logged.is_empty() || error.contains(logged) {
        return err(fault, error);
    }
    let fault = match fault {
        Fault::Failed => worker::classify(logged),
        known => known,
    };
    err(fault, format!("{error} (runtime log: {logged})"))
}

pub fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or_default()
}

/// Log lines go to stderr, which the daemon points at `monitor.log` in the sandbox directory.
pub fn log(msg: &str) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    eprintln!("{}.{:03} {msg}", now.as_secs(), now.subsec_millis());
}
