//! Startup recovery: rebuild the table from the records in the state directory. Containers of
//! live pods are adopted and their monitors followed again (the monitor's snapshot brings the
//! exits that happened while the daemon was down); half-created containers are rolled back;
//! removed containers whose reclaim the previous run did not finish (a tombstone in their
//! directory) are reclaimed in the background, never listed; containers whose pod is gone, and
//! writable layers, libcontainer state and image holds that no record or reclaim owns, are
//! removed.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use super::remove::TOMBSTONE;
use super::{ContainerRecord, Containers, Phase, now_nanos, rootfs, teardown};
use crate::store::RELEASE_FAILED;

/// What recovery found, for the start-up log line.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RecoverySummary {
    pub live: usize,
    pub exited: usize,
    pub rolled_back: usize,
    pub discarded: usize,
    pub failed: usize,
    /// Removed containers whose reclaim was cut short, reclaimed now.
    pub reclaiming: usize,
}

impl Containers {
    pub async fn recover(self: &Arc<Self>) -> RecoverySummary {
        let mut summary = RecoverySummary::default();
        let mut pods = HashSet::new();
        let dirs = std::fs::read_dir(&self.ctx.state_dir)
            .into_iter()
            .flatten()
            .flatten();
        for dir in dirs {
            let id = dir.file_name().to_string_lossy().into_owned();
            crate::store::remove_stale_temps(&dir.path());
            super::checkpoint::recover_in_flight(&self.ctx, &dir.path());
            let tombstone = dir.path().join(TOMBSTONE);
            if tombstone.exists() {
                let record = crate::store::load::<ContainerRecord>(&tombstone)
                    .unwrap_or_else(|_| self.orphan(id));
                let record = Arc::new(record);
                self.reclaims.begin(&record);
                self.spawn_reclaim(record);
                summary.reclaiming += 1;
                continue;
            }
            match crate::store::load::<ContainerRecord>(&self.ctx.record_path(&id)) {
                Ok(record)
                    if record.phase == Phase::Creating
                        || self.sandboxes.get(&record.pod_id).is_err() =>
                {
                    self.discard(&record, &mut summary).await;
                }
                Ok(record) => {
                    if record.phase == Phase::Exited {
                        summary.exited += 1;
                    } else {
                        summary.live += 1;
                        pods.insert(record.pod_id.clone());
                    }
                    self.adopt_for_plugins(&record);
                    self.insert(record);
                }
                Err(e) => {
                    tracing::warn!(container_id = %id, error = %e, "discarding unreadable container");
                    let orphan = self.orphan(id);
                    self.discard(&orphan, &mut summary).await;
                }
            }
        }
        for pod in pods {
            self.catch_up(&pod).await;
        }
        self.remove_orphans();
        tracing::info!(?summary, "container recovery done");
        summary
    }

    /// Rolls back a half-created container, or removes one whose pod is gone. One whose
    /// release fails is never left unseen: it says why in `<dir>/RELEASE_FAILED` (which `crust
    /// check` reads and the next start retries), and if its pod is here it stays listed, exited
    /// with the reason, so that RemoveContainer retries the release.
    async fn discard(&self, record: &ContainerRecord, summary: &mut RecoverySummary) {
        match teardown::release(self, record).await {
            Ok(()) => {
                tracing::info!(container_id = %record.id, "removed a half-created or orphaned container");
                if record.phase == Phase::Creating {
                    summary.rolled_back += 1;
                } else {
                    summary.discarded += 1;
                }
            }
            Err(e) => {
                tracing::error!(container_id = %record.id, error = %e, "removing a half-created or orphaned container; kept for a retry");
                summary.failed += 1;
                let why = format!("recovery could not remove this container: {e}\n");
                let _ = crate::durable::write(
                    self.ctx.container_dir(&record.id).join(RELEASE_FAILED),
                    why,
                );
                if self.sandboxes.get(&record.pod_id).is_ok() {
                    self.keep_listed(record, &e);
                }
            }
        }
    }

    /// Lists a container whose rollback failed as exited, with the reason.
    fn keep_listed(&self, record: &ContainerRecord, error: &str) {
        let mut kept = record.clone();
        kept.phase = Phase::Exited;
        kept.pid = None;
        kept.exit = Some(crate::monitor::ExitInfo {
            code: 255,
            signal: None,
            finished_at: now_nanos(),
            oom_killed: false,
            oom_scope: None,
            message: format!(
                "its creation was cut short by a restart of crust, and undoing it failed: {error}; RemoveContainer tries again"
            ),
            start_failed: false,
        });
        match crate::store::save(&self.ctx.record_path(&kept.id), &kept) {
            Ok(()) => {
                self.insert(kept);
            }
            Err(e) => {
                tracing::error!(container_id = %kept.id, error = %e, "keeping a container whose rollback failed")
            }
        }
    }

    /// The most that can be known of a container whose record is lost: its id.
    fn orphan(&self, id: String) -> ContainerRecord {
        ContainerRecord {
            pod_id: String::new(),
            spec: Default::default(),
            created_at: 0,
            started_at: 0,
            phase: Phase::Creating,
            exit: None,
            pid: None,
            image: Default::default(),
            user: Default::default(),
            stop_signal: 0,
            log_path: None,
            cgroup: String::new(),
            own_pid_namespace: true,
            image_volumes: Default::default(),
            cdi_devices: Vec::new(),
            runtime: None,
            id,
        }
    }

    /// Writable layers, libcontainer's and the runtime binaries' state and image holds that belong to no container or
    /// reclaim (the machine rebooted: records lived in memory, layers on disk).
    fn remove_orphans(&self) {
        let mut known: HashSet<String> = self.table().by_id.keys().cloned().collect();
        // A reclaim releases a hold only once its mounts are gone.
        known.extend(self.reclaiming());
        // A sandboxing binary's root holds state files of pods as well (runsc's
        // `<id>_sandbox:<pod>.state`), which the pod's teardown deletes.
        let binaries = self
            .ctx
            .runtimes
            .values()
            .filter(|r| !r.sandbox)
            .map(|r| &r.root);
        let roots: Vec<&PathBuf> = [&self.ctx.layers_dir, &self.ctx.runtime_root]
            .into_iter()
            .chain(binaries)
            .collect();
        for root in roots {
            for e in std::fs::read_dir(root).into_iter().flatten().flatten() {
                let id = e.file_name().to_string_lossy().into_owned();
                if known.contains(&id) {
                    continue;
                }
                let removed = if root == &self.ctx.layers_dir {
                    rootfs::remove(&rootfs::layout(&self.ctx, &id))
                } else {
                    rootfs::remove_dir(&e.path())
                };
                match removed {
                    Ok(()) => {
                        tracing::info!(container_id = %id, "removed orphaned container files")
                    }
                    Err(e) => {
                        tracing::warn!(container_id = %id, error = %e, "removing orphaned container files")
                    }
                }
            }
        }
        for holder in self.images.holders() {
            if !known.contains(super::volumes::holder_container(&holder)) {
                if let Err(e) = self.images.release(&holder) {
                    tracing::warn!(holder = %holder, error = %e, "releasing an orphaned image hold");
                }
            }
        }
    }
}
