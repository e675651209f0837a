//! Startup recovery: rebuild the table from the records on disk (`<root>/records/sandboxes`).
//! Ready sandboxes whose monitor still answers are adopted; those whose monitor died become
//! NotReady (Stop will release what they hold). Half-created sandboxes are rolled back, CNI DEL
//! included. When the state the records describe is gone (a reboot, `store::epoch`), every pod
//! is NotReady, named so, and what it held outside the state directory (its IP, its cgroup) is
//! released in the background. A record this crust cannot read is set aside and its pod ended
//! whole from its planned copy; one a newer crust wrote is left alone, with its pod. Records a
//! crust that kept them in the state directory wrote move to disk; state directories without a
//! record and namespace pins nobody owns are removed.

use std::collections::HashSet;
use std::sync::Arc;

use super::model::{Phase, SandboxRecord};
use super::{SandboxContext, Sandboxes, teardown};
use crate::history::Fact;
use crate::monitor::MonitorHandle;
use crate::store::epoch::{Continuity, Loss};
use crate::store::{StoreError, file_name, subdirs};

/// What recovery found, for the start-up log line.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RecoverySummary {
    pub ready: usize,
    pub not_ready: usize,
    pub rolled_back: usize,
    pub discarded: usize,
    pub failed: usize,
    /// Pods whose state was lost (a reboot): listed NotReady, released in the background.
    pub outlived: usize,
    /// Unreadable records, set aside (their pods ended).
    pub damaged: usize,
    /// Records of a newer crust, left alone with what they describe.
    pub newer: usize,
    /// Records moved from the state directory to disk (written by an older crust).
    pub migrated: usize,
    /// Running pods whose monitor speaks another protocol version than this build (started by
    /// an older or newer crust): kept, and asked only what their version understands.
    pub other_protocol: usize,
}

/// How many pods whose state was lost are released at once after a start.
const RELEASE_AT_ONCE: usize = 4;

impl Sandboxes {
    pub async fn recover(self: &Arc<Self>, continuity: &Continuity) -> RecoverySummary {
        let mut summary = RecoverySummary {
            migrated: self.migrate_state_records(),
            ..Default::default()
        };
        let lost = match continuity {
            Continuity::Lost(loss) => Some(loss),
            _ => None,
        };
        let mut known = HashSet::new();
        let mut outlived = Vec::new();
        for dir in subdirs(&self.ctx.records_dir) {
            let id = file_name(&dir);
            // A writer killed mid-save leaves its temporary file behind.
            crate::store::remove_stale_temps(&dir);
            match crate::store::load::<SandboxRecord>(&self.ctx.record_path(&id)) {
                Ok(record) if record.phase == Phase::Creating => {
                    let record = forget_pids_of_another_boot(record, lost);
                    if !self.roll_back(&record, &mut summary).await {
                        known.insert(id);
                    }
                }
                Ok(record) if lost.is_some() => {
                    known.insert(id);
                    let loss = lost.expect("matched");
                    outlived.push(self.outlived(record, loss, &mut summary));
                }
                Ok(record) => {
                    known.insert(id);
                    self.adopt(record, &mut summary).await;
                }
                Err(e @ StoreError::Version { .. }) => {
                    tracing::error!(pod_id = %id, error = %e, "leaving alone a pod sandbox whose record a newer crust wrote; it is not listed");
                    self.left_alone_ids().insert(id.clone());
                    known.insert(id);
                    summary.newer += 1;
                }
                Err(e) => {
                    self.end_damaged(&id, &e, lost).await;
                    summary.damaged += 1;
                }
            }
        }
        summary.discarded += self.discard_unrecorded(&known).await;
        self.remove_orphan_pins(&known);
        if !outlived.is_empty() {
            self.release_outlived(outlived, lost.cloned());
        }
        tracing::info!(?summary, "sandbox recovery done");
        summary
    }

    /// Moves the records a crust that kept them in the state directory wrote
    /// (`<state>/sandboxes/<id>/sandbox.json`) to disk; returns how many moved.
    fn migrate_state_records(&self) -> usize {
        let mut moved = 0;
        for dir in subdirs(&self.ctx.sandboxes_dir()) {
            let old = dir.join(super::RECORD);
            if !old.exists() {
                continue;
            }
            let id = file_name(&dir);
            crate::store::remove_stale_temps(&dir);
            let to = self.ctx.record_dir(&id);
            let moved_here = crate::durable::create_dir_all(&to)
                .map_err(|source| StoreError::Write {
                    path: to.clone(),
                    source,
                })
                .and_then(|()| crate::store::move_across(&old, &self.ctx.record_path(&id)));
            match moved_here {
                Ok(()) => moved += 1,
                Err(e) => {
                    tracing::error!(pod_id = %id, error = %e, "moving a sandbox record to disk")
                }
            }
        }
        moved
    }

    /// Takes a pod whose state was lost: NotReady at once, with why; its release follows in
    /// the background (`release_outlived`).
    fn outlived(
        self: &Arc<Self>,
        record: SandboxRecord,
        loss: &Loss,
        summary: &mut RecoverySummary,
    ) -> Arc<super::Entry> {
        let mut record = forget_pids_of_another_boot(record, Some(loss));
        if record.phase.holds_resources() {
            record.phase = Phase::Exited;
            record.problem = Some(loss.describe(&self.ctx.state_dir));
            if let Err(e) = self.save(&record) {
                tracing::error!(pod_id = %record.id, error = %e, "saving sandbox record");
            }
            self.ctx.note(
                &record,
                Fact::StateLost {
                    cause: loss.describe(&self.ctx.state_dir),
                },
            );
        }
        summary.outlived += 1;
        summary.not_ready += 1;
        self.ctx
            .nri
            .adopt_pod(&super::plugins::pod_info(&record), true);
        self.insert(record)
    }

    /// Releases, a few at a time, what pods whose state was lost still hold outside it (CNI
    /// DEL with no network namespace frees the IP; the pod cgroup; a monitor of the same boot
    /// still running): each under its pod's lock, so a StopPodSandbox that comes meanwhile
    /// waits for it and finds nothing left to do. A release that fails leaves the pod NotReady
    /// with the reason, for Stop to retry.
    fn release_outlived(self: &Arc<Self>, entries: Vec<Arc<super::Entry>>, loss: Option<Loss>) {
        let limit = Arc::new(tokio::sync::Semaphore::new(RELEASE_AT_ONCE));
        for entry in entries {
            let (me, limit, loss) = (self.clone(), limit.clone(), loss.clone());
            tokio::spawn(async move {
                let Ok(_slot) = limit.acquire().await else {
                    return;
                };
                let _op = entry.op.clone().lock_owned().await;
                let record = entry.snapshot();
                if !record.phase.holds_resources() || !me.table().by_id.contains_key(&record.id) {
                    return;
                }
                let why = loss
                    .map(|l| l.describe(&me.ctx.state_dir))
                    .unwrap_or_default();
                let released = teardown::release(&me.ctx, &record).await;
                let saved = me.commit(&entry, |r| match &released {
                    Ok(()) => {
                        r.phase = Phase::Stopped;
                        r.problem = Some(why.clone());
                    }
                    Err(errors) => {
                        r.problem = Some(format!("{why}; releasing what it held: {errors}"))
                    }
                });
                match (released, saved) {
                    (Ok(()), Ok(_)) => {
                        tracing::info!(pod_id = %record.id, "released a pod whose state was lost")
                    }
                    (Err(e), _) => {
                        tracing::warn!(pod_id = %record.id, error = %e, "releasing a pod whose state was lost; StopPodSandbox retries")
                    }
                    (_, Err(e)) => {
                        tracing::error!(pod_id = %record.id, error = %e, "saving sandbox record")
                    }
                }
            });
        }
    }

    /// Sets an unreadable record aside and ends its pod whole from what else is known: the
    /// planned copy names its cgroups, pins and network attachment, the monitor's pid file in
    /// the state directory its processes (its Shutdown kills the containers' too).
    async fn end_damaged(&self, id: &str, error: &StoreError, lost: Option<&Loss>) {
        let path = self.ctx.record_path(id);
        let moved = crate::store::set_aside(&path, &self.ctx.damaged_dir(), "sandbox", id);
        let planned = crate::store::load::<SandboxRecord>(&self.ctx.planned_path(id));
        match &moved {
            Ok(to) => {
                tracing::error!(pod_id = %id, error = %error, moved_to = %to.display(), planned = planned.is_ok(), "unreadable sandbox record set aside; ending the pod")
            }
            Err(e) => {
                tracing::error!(pod_id = %id, error = %error, set_aside = %e, "unreadable sandbox record; ending the pod")
            }
        }
        let record = planned.unwrap_or_else(|_| SandboxRecord::orphan(&self.ctx, id.to_owned()));
        let record = forget_pids_of_another_boot(record, lost);
        if let Err(e) = teardown::release(&self.ctx, &record).await {
            tracing::error!(pod_id = %id, error = %e, "ending the pod of an unreadable record");
        }
        let _ = crate::durable::remove_dir_all(&record.dir);
        let _ = crate::durable::remove_dir_all(self.ctx.record_dir(id));
    }

    /// State directories no record owns: a crash between a record's removal and its
    /// directory's, or a pod whose record is gone. What a pid file names is stopped.
    async fn discard_unrecorded(&self, known: &HashSet<String>) -> usize {
        let mut discarded = 0;
        for dir in subdirs(&self.ctx.sandboxes_dir()) {
            let id = file_name(&dir);
            if known.contains(&id) || self.ctx.record_path(&id).exists() {
                continue;
            }
            tracing::warn!(dir = %dir.display(), "discarding a sandbox directory without a record");
            let half = SandboxRecord::orphan(&self.ctx, id);
            let _ = teardown::release(&self.ctx, &half).await;
            let _ = crate::durable::remove_dir_all(&dir);
            discarded += 1;
        }
        discarded
    }

    /// Undoes a half-created sandbox; false when that failed and the sandbox is kept.
    async fn roll_back(&self, record: &SandboxRecord, summary: &mut RecoverySummary) -> bool {
        match teardown::release(&self.ctx, record).await {
            Ok(()) => {
                let _ = crate::durable::remove_dir_all(&record.dir);
                let _ = crate::durable::remove_dir_all(self.ctx.record_dir(&record.id));
                tracing::info!(pod_id = %record.id, "rolled back half-created sandbox");
                summary.rolled_back += 1;
                true
            }
            Err(e) => {
                // Kept listed, not ready, with the reason: Stop and Remove retry the release,
                // and nothing the sandbox still holds is invisible.
                tracing::error!(pod_id = %record.id, error = %e, "rolling back half-created sandbox");
                summary.failed += 1;
                // Also for `crust check`, which reads it while the daemon is down too.
                let _ = crate::durable::write(
                    self.ctx
                        .record_dir(&record.id)
                        .join(crate::store::RELEASE_FAILED),
                    format!("recovery could not roll this pod back: {e}\n"),
                );
                let mut kept = record.clone();
                kept.phase = Phase::Exited;
                kept.problem = Some(format!("rolling back after a restart: {e}"));
                if let Err(e) = self.save(&kept) {
                    tracing::error!(pod_id = %kept.id, error = %e, "saving sandbox record");
                }
                self.insert(kept);
                false
            }
        }
    }

    async fn adopt(self: &Arc<Self>, mut record: SandboxRecord, summary: &mut RecoverySummary) {
        if record.phase == Phase::Ready {
            let protocol = match record.monitor {
                Some(identity) => MonitorHandle {
                    identity,
                    dir: record.dir.clone(),
                }
                .ping(self.ctx.monitor_timeout)
                .await
                .ok(),
                None => None,
            };
            if let Some(version) = protocol.filter(|v| *v != crate::monitor::PROTOCOL) {
                tracing::info!(pod_id = %record.id, protocol = version, ours = crate::monitor::PROTOCOL, "pod monitor of another crust version adopted");
                summary.other_protocol += 1;
            }
            let alive = protocol.is_some();
            if !alive {
                crate::metrics::monitor_died();
                let death = super::monitor_death(&self.ctx.cgroups, &record);
                tracing::warn!(pod_id = %record.id, %death, "pod monitor died while crust was down; sandbox is not ready");
                let pid = record.monitor.map_or(0, |m| m.pid);
                let cause = death.to_string();
                self.ctx.note(
                    &record,
                    Fact::MonitorDied {
                        pid,
                        cause: cause.clone(),
                    },
                );
                record.problem = Some(format!("the pod monitor (pid {pid}) {cause}"));
                record.phase = Phase::Exited;
                if let Err(e) = self.save(&record) {
                    tracing::error!(pod_id = %record.id, error = %e, "saving sandbox record");
                }
            }
        }
        if record.phase == Phase::Ready {
            summary.ready += 1;
        } else {
            summary.not_ready += 1;
        }
        let stopped = record.phase == Phase::Stopped;
        self.ctx
            .nri
            .adopt_pod(&super::plugins::pod_info(&record), stopped);
        let entry = self.insert(record);
        self.watch(&entry);
    }

    /// Unmounts pins in the namespace directory that belong to no known sandbox.
    fn remove_orphan_pins(&self, known: &HashSet<String>) {
        let pins = std::fs::read_dir(self.ctx.ns_dir())
            .into_iter()
            .flatten()
            .flatten();
        for pin in pins.map(|p| p.path()) {
            let owner = pin.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
            if !known.contains(owner) {
                tracing::info!(pin = %pin.display(), "removing orphan namespace pin");
                let _ = teardown::unpin(&pin);
            }
        }
    }
}

/// A record written in another boot names pids that are other processes now: recovery must
/// never signal them.
fn forget_pids_of_another_boot(mut record: SandboxRecord, lost: Option<&Loss>) -> SandboxRecord {
    if lost.is_some_and(|l| l.rebooted) {
        record.monitor = None;
    }
    record
}

impl SandboxRecord {
    /// The most that can be known of a sandbox whose record and planned copy are lost: where
    /// its pins and monitor and the monitor's cgroup would be. Its pod cgroup and CNI
    /// attachment cannot be named and are left alone.
    fn orphan(ctx: &SandboxContext, id: String) -> SandboxRecord {
        let pin = |kind: &str| Some(ctx.ns_dir().join(format!("{id}.{kind}")));
        SandboxRecord {
            dir: ctx.sandbox_dir(&id),
            spec: Default::default(),
            created_at: 0,
            phase: Phase::Creating,
            runtime_handler: String::new(),
            runtime: None,
            monitor: None,
            pins: crate::monitor::NamespacePins {
                net: pin("net"),
                ipc: pin("ipc"),
                uts: pin("uts"),
                pid: pin("pid"),
                user: pin("user"),
            },
            cgroup: String::new(),
            monitor_cgroup: Some(ctx.cgroups.monitor_path(&id)),
            network: None,
            id,
            problem: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::network::{Cni, CniSettings};
    use crate::sandbox::{CgroupSettings, SandboxContext};

    fn sandboxes(state: &std::path::Path) -> Arc<Sandboxes> {
        let cni = Cni::new(CniSettings {
            conf_dir: state.join("net.d"),
            conf_template: None,
            bin_dirs: vec![],
            plugin_timeout: Duration::from_secs(1),
        });
        Sandboxes::new(SandboxContext {
            state_dir: state.to_owned(),
            records_dir: state.join("records"),
            exe: "/bin/false".into(),
            cni: Arc::new(cni),
            cgroups: CgroupSettings::detect(
                crate::config::CgroupDriver::Cgroupfs,
                "/crust-unit".into(),
                state.join("cgroup"),
            ),
            default_handler: "runc".into(),
            handlers: vec!["runc".into()],
            runtimes: Default::default(),
            monitor_timeout: Duration::from_secs(1),
            pod_sysctls: Default::default(),
            history: Arc::new(crate::history::History::new(state)),
            nri: crate::nri::Nri::disabled(),
        })
    }

    #[test]
    fn a_failed_save_leaves_memory_and_disk_as_they_were() {
        let dir = tempfile::tempdir().unwrap();
        let s = sandboxes(dir.path());
        let mut record = SandboxRecord::orphan(&s.ctx, "abc".into());
        record.phase = Phase::Ready;
        std::fs::create_dir_all(s.ctx.record_dir(&record.id)).unwrap();
        s.save(&record).unwrap();
        let entry = s.insert(record.clone());
        let stopped = s.commit(&entry, |r| r.phase = Phase::Stopped).unwrap();
        assert_eq!(stopped.phase, Phase::Stopped);
        assert_eq!(entry.snapshot().phase, Phase::Stopped);

        // A directory in the record's place: the rename fails after the temp file is written.
        let path = s.ctx.record_path(&record.id);
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir_all(path.join("x")).unwrap();
        let err = s.commit(&entry, |r| r.phase = Phase::Exited).unwrap_err();
        assert!(err.to_string().contains("sandbox.json"), "{err}");
        assert_eq!(entry.snapshot().phase, Phase::Stopped, "memory unchanged");
        assert!(path.join("x").is_dir(), "disk unchanged");
        let names: Vec<_> = std::fs::read_dir(s.ctx.record_dir(&record.id))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, ["sandbox.json"], "no temp file left");
    }
}
