//! Startup recovery: rebuild the table from the records in the state directory. Ready sandboxes
//! whose monitor still answers are adopted; those whose monitor died become NotReady (Stop will
//! release what they hold). Half-created sandboxes are rolled back, CNI DEL included.
//! Directories without a readable record and namespace pins nobody owns are removed.

use std::collections::HashSet;
use std::sync::Arc;

use super::model::{Phase, SandboxRecord};
use super::{SandboxContext, Sandboxes, teardown};
use crate::history::Fact;
use crate::monitor::MonitorHandle;

/// What recovery found, for the start-up log line.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RecoverySummary {
    pub ready: usize,
    pub not_ready: usize,
    pub rolled_back: usize,
    pub discarded: usize,
    pub failed: usize,
}

impl Sandboxes {
    pub async fn recover(self: &Arc<Self>) -> RecoverySummary {
        let mut summary = RecoverySummary::default();
        let mut known = HashSet::new();
        let dirs = std::fs::read_dir(self.ctx.sandboxes_dir())
            .into_iter()
            .flatten()
            .flatten();
        for dir in dirs.map(|d| d.path()) {
            let id = dir
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_owned();
            // A writer killed mid-save leaves its temporary file behind.
            crate::store::remove_stale_temps(&dir);
            match crate::store::load::<SandboxRecord>(&SandboxContext::record_path(&dir)) {
                Ok(record) if record.phase == Phase::Creating => {
                    if !self.roll_back(&record, &mut summary).await {
                        known.insert(id);
                    }
                }
                Ok(record) => {
                    known.insert(id);
                    self.adopt(record, &mut summary).await;
                }
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "discarding unreadable sandbox");
                    let half = SandboxRecord::orphan(&self.ctx, id);
                    let _ = teardown::release(&self.ctx, &half).await;
                    let _ = crate::durable::remove_dir_all(&dir);
                    summary.discarded += 1;
                }
            }
        }
        self.remove_orphan_pins(&known);
        tracing::info!(?summary, "sandbox recovery done");
        summary
    }

    /// Undoes a half-created sandbox; false when that failed and the sandbox is kept.
    async fn roll_back(&self, record: &SandboxRecord, summary: &mut RecoverySummary) -> bool {
        match teardown::release(&self.ctx, record).await {
            Ok(()) => {
                let _ = crate::durable::remove_dir_all(&record.dir);
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
                    record.dir.join(crate::store::RELEASE_FAILED),
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
            let alive = match record.monitor {
                Some(identity) => MonitorHandle {
                    identity,
                    dir: record.dir.clone(),
                }
                .ping(self.ctx.monitor_timeout)
                .await
                .is_ok(),
                None => false,
            };
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

impl SandboxRecord {
    /// The most that can be known of a sandbox whose record is lost: where its pins and monitor
    /// and the monitor's cgroup would be. Its pod cgroup and CNI attachment cannot be named
    /// and are left alone.
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
        std::fs::create_dir_all(&record.dir).unwrap();
        s.save(&record).unwrap();
        let entry = s.insert(record.clone());
        let stopped = s.commit(&entry, |r| r.phase = Phase::Stopped).unwrap();
        assert_eq!(stopped.phase, Phase::Stopped);
        assert_eq!(entry.snapshot().phase, Phase::Stopped);

        // A directory in the record's place: the rename fails after the temp file is written.
        let path = SandboxContext::record_path(&record.dir);
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir_all(path.join("x")).unwrap();
        let err = s.commit(&entry, |r| r.phase = Phase::Exited).unwrap_err();
        assert!(err.to_string().contains("sandbox.json"), "{err}");
        assert_eq!(entry.snapshot().phase, Phase::Stopped, "memory unchanged");
        assert!(path.join("x").is_dir(), "disk unchanged");
        let names: Vec<_> = std::fs::read_dir(&record.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, ["sandbox.json"], "no temp file left");
    }
}
