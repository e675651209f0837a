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

    /// Commits the exit a failed start ended with (the monitor answered with it), in place of
    /// one its event held back for the start.
    pub(in crate::container) fn exit_of_failed_start(
        &self,
        id: &str,
        entry: &crate::container::Entry,
        exit: ExitInfo,
    ) {
        entry
            .pending_exit
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        self.finish_exit(id, entry, exit);
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

    /// The pod's monitor is gone, so no process of the pod has a parent that records its
    /// exit. Each container not yet exited ends: every process left in its cgroup is killed,
    /// and only once none is left is its exit recorded, the one its monitor wrote if it wrote
    /// one, else a kill by crust whose message says `why`. So no client ever reads a container
    /// exited while a process of it still runs (kubelet would start a second copy beside it).
    /// False while a container's processes outlive the kill: the caller tries again.
    pub(in crate::container) async fn monitor_gone(&self, pod_id: &str, why: Gone) -> bool {
        let pod = self.sandboxes.get(pod_id).ok();
        let message = why.message(&self.ctx.cgroups, pod.as_deref());
        let mut all_ended = true;
        for id in self.of_pod(pod_id) {
            let Ok(record) = self.get(&id) else { continue };
            if matches!(record.phase, Phase::Exited | Phase::Creating) {
                continue;
            }
            if !end_processes(&self.ctx.cgroups, &record.cgroup).await {
                tracing::warn!(container_id = %id, "the container's processes outlive SIGKILL; its exit waits for them");
                all_ended = false;
                continue;
            }
            let recorded = self.ctx.container_dir(&id).join(EXIT_FILE);
            let exit = crate::store::load::<ExitInfo>(&recorded).unwrap_or_else(|_| ExitInfo {
                code: 128 + nix::sys::signal::Signal::SIGKILL as i32,
                signal: Some(nix::sys::signal::Signal::SIGKILL as i32),
                finished_at: now_nanos(),
                oom_killed: false,
                oom_scope: None,
                message: message.clone(),
                start_failed: false,
                state_lost: false,
            });
            if let Ok((_, entry)) = self.entry(&id) {
                self.finish_exit(&id, &entry, exit);
            }
        }
        all_ended
    }
}

/// Why a pod's containers lost their monitor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::container) enum Gone {
    /// It died while the pod was meant to run.
    Died,
    /// StopPodSandbox stopped it, after stopping the containers (this takes what they left).
    PodStopped,
}

impl Gone {
    /// The exit message of a container crust killed for this reason.
    fn message(
        self,
        cgroups: &crate::sandbox::CgroupSettings,
        pod: Option<&crate::sandbox::SandboxRecord>,
    ) -> String {
        match (self, pod) {
            (Gone::PodStopped, _) => "killed by crust as its pod stopped".to_owned(),
            (Gone::Died, Some(pod)) => {
                let pid = pod
                    .monitor
                    .map_or(String::new(), |m| format!(" (pid {})", m.pid));
                let death = crate::sandbox::monitor_death(cgroups, pod);
                format!(
                    "killed by crust: the pod's monitor{pid} {death}, and no container runs without it"
                )
            }
            (Gone::Died, None) => {
                "killed by crust: the pod's monitor died, and no container runs without it"
                    .to_owned()
            }
        }
    }
}

/// How long a container's processes may take to die after SIGKILL before its end waits for a
/// later round.
const KILL_GRACE: Duration = Duration::from_secs(10);

/// Kills every process of cgroup `path` until none is left: none listed in the cgroup, and
/// each one it listed dead, a zombie at most (a process leaves its cgroup a moment before it
/// has exited). False if some outlive `KILL_GRACE` (in uninterruptible sleep: the kernel's to
/// end).
async fn end_processes(cgroups: &crate::sandbox::CgroupSettings, path: &str) -> bool {
    let deadline = std::time::Instant::now() + KILL_GRACE;
    let mut seen: Vec<crate::monitor::Identity> = Vec::new();
    loop {
        let (cgroups, path) = (cgroups.clone(), path.to_owned());
        let found = tokio::task::spawn_blocking(move || cgroups.kill_all(&path))
            .await
            .unwrap_or_default();
        for pid in found.iter().copied() {
            let start_time = crate::monitor::process_start_time(pid);
            if let (Some(start_time), false) = (start_time, seen.iter().any(|p| p.pid == pid)) {
                seen.push(crate::monitor::Identity {
                    pid,
                    start_time,
                    init_pid: None,
                });
            }
        }
        seen.retain(crate::monitor::is_alive);
        if found.is_empty() && seen.is_empty() {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Ends the containers of pod `pod_id`, whose monitor died, trying again each second while
/// some outlive their kill.
async fn end_with_monitor(me: &Weak<Containers>, pod_id: &str) {
    loop {
        let Some(c) = me.upgrade() else { return };
        if c.monitor_gone(pod_id, Gone::Died).await {
            return;
        }
        drop(c);
        tokio::time::sleep(Duration::from_secs(1)).await;
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
            drop(c);
            end_with_monitor(&me, &pod_id).await;
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
                if !apply_events(&me, &monitor, &mut events).await {
                    return;
                }
            }
            Err(e) => {
                tracing::debug!(pod_id = %pod_id, error = %e, "subscribing to the pod's monitor")
            }
        }
        let Some(c) = me.upgrade() else { return };
        if !crate::monitor::is_alive(&monitor.identity) {
            drop(c);
            end_with_monitor(&me, &pod_id).await;
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

/// Applies the monitor's events until its connection ends or the monitor is gone, whichever
/// comes first: a container created but not started is a fork of the monitor waiting for its
/// start, and holds the monitor's end of the connection open after the monitor died, so the
/// end of the connection alone would leave it CREATED for good. Once the monitor is gone what
/// it sent before is still read. False when the daemon is going away.
async fn apply_events(
    me: &Weak<Containers>,
    monitor: &crate::monitor::MonitorHandle,
    events: &mut Subscription,
) -> bool {
    let exited = async {
        if monitor.exited().await.is_err() && crate::monitor::is_alive(&monitor.identity) {
            // Nothing to watch it by: the end of the connection tells, as it may.
            std::future::pending::<()>().await;
        }
    };
    tokio::pin!(exited);
    let mut gone = false;
    loop {
        let event = if gone {
            // Only what is buffered: nothing more comes from a dead monitor.
            tokio::time::timeout(Duration::from_millis(50), events.next())
                .await
                .ok()
                .flatten()
        } else {
            tokio::select! {
                event = events.next() => event,
                _ = &mut exited => {
                    gone = true;
                    continue;
                }
            }
        };
        let Some(event) = event else { return true };
        let Some(c) = me.upgrade() else { return false };
        match event {
            Event::Exited { id, exit, started } => c.apply_exit(&id, exit, started),
        }
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
