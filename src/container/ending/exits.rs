//! Exits, as the pod monitors push them. One task per pod with containers follows its
//! monitor's event stream: the snapshot first (exits that happened while nobody listened, e.g.
//! while the daemon restarted), then each exit as it happens. Each exit is committed to the
//! container's record and wakes whoever waits for it (StopContainer). When the monitor is gone,
//! the exits it recorded on disk are taken, and containers it took with it are ended.

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::container::monitor_of;
use crate::container::{Containers, ExitInfo, Phase, now_nanos};
use crate::monitor::{ContainerState, EXIT_FILE, Event, Subscription};

impl Containers {
    /// Follows the events of pod `pod_id`'s monitor, unless a task does already.
    pub(in crate::container) fn watch_pod(self: &Arc<Self>, pod_id: &str) {
        self.watch_pod_from(pod_id, None);
    }

    /// Like `watch_pod`, for a pod whose monitor outlived the daemon: what the monitor did
    /// meanwhile (starts the daemon did not record, exits) is applied before this returns,
    /// so a daemon that starts serving after recovery never reports a state the monitor has
    /// already left (a started container still Created, an exited one still running).
    pub(in crate::container) async fn catch_up(self: &Arc<Self>, pod_id: &str) {
        let monitor = self
            .sandboxes
            .get(pod_id)
            .ok()
            .and_then(|p| monitor_of(&p).ok());
        let subscribed = match monitor {
            Some(m) => m.subscribe(self.ctx.monitor_timeout).await.ok(),
            None => None,
        };
        let events = subscribed.map(|(snapshot, events)| {
            self.apply_snapshot(snapshot);
            events
        });
        self.watch_pod_from(pod_id, events);
    }

    fn watch_pod_from(self: &Arc<Self>, pod_id: &str, events: Option<Subscription>) {
        let mut watchers = self.watchers.lock().unwrap_or_else(|e| e.into_inner());
        if watchers.get(pod_id).is_some_and(|h| !h.is_finished()) {
            return;
        }
        let (me, pod) = (Arc::downgrade(self), pod_id.to_owned());
        watchers.insert(pod_id.to_owned(), tokio::spawn(follow(me, pod, events)));
    }

    /// The monitor's account of its containers, when one subscribes: starts and exits.
    fn apply_snapshot(&self, snapshot: Vec<ContainerState>) {
        for state in snapshot {
            if let (Some(at), None) = (state.started_at, &state.exit) {
                self.adopt_start(&state.id, at);
            }
            if let Some(exit) = state.exit {
                self.apply_exit(&state.id, exit, state.started_at.is_some());
            }
        }
    }

    /// Commits an exit the monitor reported (once: a repeated report changes nothing). The
    /// exit of a container the monitor started whose start is not recorded yet waits for it.
    fn apply_exit(&self, id: &str, exit: ExitInfo, started: bool) {
        let Ok((_, entry)) = self.entry(id) else {
            return;
        };
        let phase = entry.snapshot().phase;
        let starting = entry.starting.load(std::sync::atomic::Ordering::SeqCst);
        if started && phase == Phase::Created && starting {
            *entry.pending_exit.lock().unwrap_or_else(|e| e.into_inner()) = Some(exit);
            return;
        }
        self.finish_exit(id, &entry, exit);
    }

    /// Records the start of a container its monitor runs while its record still says Created:
    /// the daemon died between the monitor's start and the record. A StartContainer under way
    /// (holding the container's lock) records it itself.
    fn adopt_start(&self, id: &str, started_at: i64) {
        let Ok((_, entry)) = self.entry(id) else {
            return;
        };
        let Ok(_op) = entry.op.clone().try_lock_owned() else {
            return;
        };
        if entry.snapshot().phase != Phase::Created {
            return;
        }
        match entry.commit(&self.ctx, |r| {
            r.started_at = started_at;
            r.phase = Phase::Running;
        }) {
            Ok(_) => {
                tracing::info!(container_id = %id, "adopted a start the daemon did not record")
            }
            Err(e) => {
                tracing::error!(container_id = %id, error = %e, "recording a container's start")
            }
        }
    }

    /// Applies the exit a start left waiting, if any.
    pub(in crate::container) fn take_pending_exit(
        &self,
        id: &str,
        entry: &crate::container::Entry,
    ) {
        let pending = entry
            .pending_exit
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(exit) = pending {
            self.finish_exit(id, entry, exit);
        }
    }

    fn finish_exit(&self, id: &str, entry: &crate::container::Entry, exit: ExitInfo) {
        if entry.snapshot().phase == Phase::Exited {
            return;
        }
        let (code, reason, oom) = (exit.code, exit.reason(), exit.oom_killed);
        match entry.commit(&self.ctx, |r| {
            r.phase = Phase::Exited;
            r.exit = Some(exit);
            r.pid = None;
        }) {
            Ok(record) => {
                if oom {
                    crate::metrics::oom_kill();
                }
                tracing::info!(container_id = %id, code, reason, "container exited");
                if let Some(fact) = exited(&record) {
                    self.note(&record.pod_id, fact);
                }
                self.announce_exit(&record);
                self.publish(id, crate::container::EventKind::Stopped, &record.pod_id);
            }
            Err(e) => {
                tracing::error!(container_id = %id, error = %e, "recording a container's exit")
            }
        }
    }

    /// The pod's monitor is gone, and so is every process of the pod: each container not yet
    /// exited ends with the exit its monitor recorded, or as killed when there is none (its
    /// leftover processes are killed first).
    pub(in crate::container) fn monitor_gone(&self, pod_id: &str) {
        for id in self.of_pod(pod_id) {
            let Ok(record) = self.get(&id) else { continue };
            if matches!(record.phase, Phase::Exited | Phase::Creating) {
                continue;
            }
            let recorded = self.ctx.container_dir(&id).join(EXIT_FILE);
            let exit = crate::store::load::<ExitInfo>(&recorded).unwrap_or_else(|_| {
                kill_leftovers(&self.ctx.cgroups, &record.cgroup);
                ExitInfo {
                    code: 128 + nix::sys::signal::Signal::SIGKILL as i32,
                    signal: Some(nix::sys::signal::Signal::SIGKILL as i32),
                    finished_at: now_nanos(),
                    oom_killed: false,
                    oom_scope: None,
                    message: "the pod's monitor exited and took the container's process with it"
                        .into(),
                }
            });
            if let Ok((_, entry)) = self.entry(&id) {
                self.finish_exit(&id, &entry, exit);
            }
        }
    }
}

/// Follows pod `pod_id`'s monitor: `first`, a subscription whose snapshot was applied
/// already, then new ones (each snapshot applied) until the monitor is gone.
async fn follow(me: Weak<Containers>, pod_id: String, mut first: Option<Subscription>) {
    loop {
        let Some(c) = me.upgrade() else { return };
        let Some(monitor) = c
            .sandboxes
            .get(&pod_id)
            .ok()
            .and_then(|p| monitor_of(&p).ok())
        else {
            c.monitor_gone(&pod_id);
            return;
        };
        let subscribed = match first.take() {
            Some(events) => Ok(events),
            None => monitor
                .subscribe(c.ctx.monitor_timeout)
                .await
                .map(|(snapshot, events)| {
                    c.apply_snapshot(snapshot);
                    events
                }),
        };
        match subscribed {
            Ok(mut events) => {
                drop(c);
                while let Some(event) = events.next().await {
                    let Some(c) = me.upgrade() else { return };
                    match event {
                        Event::Exited { id, exit, started } => c.apply_exit(&id, exit, started),
                    }
                }
            }
            Err(e) => {
                tracing::debug!(pod_id = %pod_id, error = %e, "subscribing to the pod's monitor")
            }
        }
        let Some(c) = me.upgrade() else { return };
        if !crate::monitor::is_alive(&monitor.identity) {
            c.monitor_gone(&pod_id);
            drop(c);
            if died_on_its_own(&me, &pod_id).await {
                if let Some(c) = me.upgrade() {
                    c.publish(&pod_id, crate::container::EventKind::Stopped, &pod_id);
                }
            }
            return;
        }
        drop(c);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether a pod's monitor that is gone died rather than being stopped. The sandbox's own
/// watcher records a death (Exited) under the pod's lock; a StopPodSandbox under way ends in
/// Stopped and announces it itself. Until one of them has decided, the pod still reads Ready.
async fn died_on_its_own(me: &Weak<Containers>, pod_id: &str) -> bool {
    use crate::sandbox::Phase;
    for _ in 0..250 {
        let Some(c) = me.upgrade() else { return false };
        match c.sandboxes.get(pod_id).map(|p| p.phase) {
            Ok(Phase::Exited) => return true,
            Ok(Phase::Ready | Phase::Creating) => {}
            Ok(Phase::Stopped) | Err(_) => return false,
        }
        drop(c);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// The history's account of the exit `record` holds.
fn exited(record: &crate::container::ContainerRecord) -> Option<crate::history::Fact> {
    Some(crate::history::Fact::ContainerExited {
        container: record.id.clone(),
        name: record.spec.metadata.name.clone(),
        attempt: record.spec.metadata.attempt,
        started_at: record.started_at,
        exit: record.exit.clone()?,
    })
}

fn kill_leftovers(cgroups: &crate::sandbox::CgroupSettings, cgroup: &str) {
    for pid in cgroups.pids(cgroup) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}
