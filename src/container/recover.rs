//! Startup recovery: rebuild the table from the records on disk (`<root>/records/containers`).
//! Containers of live pods are adopted and their monitors followed again (the monitor's
//! snapshot brings the exits that happened while the daemon was down); half-created containers
//! are rolled back; removed containers whose reclaim the previous run did not finish (a
//! tombstone in their record's directory) are reclaimed in the background, never listed;
//! containers whose pod is gone, and writable layers, libcontainer state and image holds that no
//! record or reclaim owns, are removed. When the state the records describe was lost (a reboot,
//! `store::epoch`), every container that had not ended is exited with code 255 and reason
//! `NodeRebooted`, and stays listed so kubelet keeps its restart count. An unreadable record is
//! set aside and its container ended whole from its planned copy; one a newer crust wrote is
//! left alone. Records a crust that kept them in the state directory wrote move to disk.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use super::remove::TOMBSTONE;
use super::{ContainerRecord, Containers, Phase, now_nanos, rootfs, teardown};
use crate::store::epoch::{Continuity, Loss};
use crate::store::{RELEASE_FAILED, StoreError, file_name, subdirs};

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
    /// Containers that ran when their state was lost (a reboot), exited now.
    pub outlived: usize,
    /// Unreadable records, set aside (their containers ended).
    pub damaged: usize,
    /// Records of a newer crust, left alone with what they describe.
    pub newer: usize,
    /// Records moved from the state directory to disk (written by an older crust).
    pub migrated: usize,
}

impl Containers {
    pub async fn recover(self: &Arc<Self>, continuity: &Continuity) -> RecoverySummary {
        let mut summary = RecoverySummary {
            migrated: self.migrate_state_records(),
            ..Default::default()
        };
        let lost = match continuity {
            Continuity::Lost(loss) => Some(loss),
            _ => None,
        };
        let mut pods = HashSet::new();
        // Ids whose files nobody may remove: records left alone (a newer crust's) and those of
        // pods left alone.
        let mut kept = HashSet::new();
        let pods_left_alone = self.sandboxes.left_alone();
        for dir in subdirs(&self.ctx.records_dir) {
            let id = file_name(&dir);
            crate::store::remove_stale_temps(&dir);
            super::checkpoint::recover_in_flight(&self.ctx, &self.ctx.container_dir(&id));
            let tombstone = dir.join(TOMBSTONE);
            if tombstone.exists() {
                let record = crate::store::load::<ContainerRecord>(&tombstone)
                    .or_else(|_| crate::store::load(&self.ctx.planned_path(&id)))
                    .unwrap_or_else(|_| self.orphan(id));
                let record = Arc::new(record);
                self.reclaims.begin(&record);
                self.spawn_reclaim(record);
                summary.reclaiming += 1;
                continue;
            }
            match crate::store::load::<ContainerRecord>(&self.ctx.record_path(&id)) {
                Ok(record) if pods_left_alone.contains(&record.pod_id) => {
                    kept.insert(id);
                }
                Ok(record)
                    if record.phase == Phase::Creating
                        || self.sandboxes.get(&record.pod_id).is_err() =>
                {
                    self.discard(&record, &mut summary).await;
                }
                Ok(record) => {
                    let record = match lost {
                        Some(loss) => self.ended_by_loss(record, loss, &mut summary),
                        None => record,
                    };
                    if record.phase == Phase::Exited {
                        summary.exited += 1;
                    } else {
                        summary.live += 1;
                        pods.insert(record.pod_id.clone());
                    }
                    self.adopt_for_plugins(&record);
                    self.insert(record);
                }
                Err(e @ StoreError::Version { .. }) => {
                    tracing::error!(container_id = %id, error = %e, "leaving alone a container whose record a newer crust wrote; it is not listed");
                    kept.insert(id);
                    summary.newer += 1;
                }
                Err(e) => {
                    self.end_damaged(&id, &e, &mut summary).await;
                }
            }
        }
        for pod in pods {
            self.catch_up(&pod).await;
        }
        if self.images.holds_lost() {
            self.repair_holds().await;
        }
        self.remove_orphans(&kept);
        tracing::info!(?summary, "container recovery done");
        summary
    }

    /// Moves the records and tombstones a crust that kept them in the state directory wrote
    /// (`<state>/containers/<id>/container.json` or `removing.json`) to disk; returns how many.
    fn migrate_state_records(&self) -> usize {
        let mut moved = 0;
        for dir in subdirs(&self.ctx.state_dir) {
            let id = file_name(&dir);
            for name in [super::RECORD, TOMBSTONE] {
                let old = dir.join(name);
                if !old.exists() {
                    continue;
                }
                crate::store::remove_stale_temps(&dir);
                let to = self.ctx.record_dir(&id);
                let migrated = crate::durable::create_dir_all(&to)
                    .map_err(|source| StoreError::Write {
                        path: to.clone(),
                        source,
                    })
                    .and_then(|()| crate::store::move_across(&old, &to.join(name)));
                match migrated {
                    Ok(()) => moved += 1,
                    Err(e) => {
                        tracing::error!(container_id = %id, error = %e, "moving a container record to disk")
                    }
                }
            }
        }
        moved
    }

    /// A container that had not ended when the state it lived in was lost: exited now, with
    /// code 255 and why (its real end is unknown), saved before it is listed.
    fn ended_by_loss(
        &self,
        mut record: ContainerRecord,
        loss: &Loss,
        summary: &mut RecoverySummary,
    ) -> ContainerRecord {
        if record.phase == Phase::Exited {
            return record;
        }
        summary.outlived += 1;
        let was = record.state_name();
        record.phase = Phase::Exited;
        record.pid = None;
        record.exit = Some(crate::monitor::ExitInfo {
            code: crate::monitor::UNKNOWN_EXIT_CODE,
            signal: None,
            finished_at: now_nanos(),
            oom_killed: false,
            oom_scope: None,
            message: format!(
                "it was {was} when {}; how it ended is unknown",
                loss.describe(self.ctx.state_dir.parent().unwrap_or(&self.ctx.state_dir))
            ),
            start_failed: false,
            state_lost: true,
        });
        if let Err(e) = crate::store::save(&self.ctx.record_path(&record.id), &record) {
            tracing::error!(container_id = %record.id, error = %e, "saving container record");
        }
        record
    }

    /// Sets an unreadable record aside and ends its container whole from its planned copy
    /// (its pod, cgroup and image hold): its processes are killed (through its pod's monitor,
    /// then its cgroup) before its root filesystem is unmounted, so nothing runs without it.
    async fn end_damaged(&self, id: &str, error: &StoreError, summary: &mut RecoverySummary) {
        summary.damaged += 1;
        let damaged = self.sandboxes.context().damaged_dir();
        let moved = crate::store::set_aside(&self.ctx.record_path(id), &damaged, "container", id);
        let planned = crate::store::load::<ContainerRecord>(&self.ctx.planned_path(id));
        match &moved {
            Ok(to) => {
                tracing::error!(container_id = %id, error = %error, moved_to = %to.display(), planned = planned.is_ok(), "unreadable container record set aside; ending the container")
            }
            Err(e) => {
                tracing::error!(container_id = %id, error = %error, set_aside = %e, "unreadable container record; ending the container")
            }
        }
        let record = planned.unwrap_or_else(|_| self.orphan(id.to_owned()));
        if let Err(e) = teardown::release(self, &record).await {
            tracing::error!(container_id = %id, error = %e, "ending the container of an unreadable record");
            let why = format!("ending the container of an unreadable record failed: {e}\n");
            let _ = crate::durable::write(self.ctx.record_dir(id).join(RELEASE_FAILED), why);
        }
    }

    /// Makes again the image holds that were unreadable at start, for the containers listed:
    /// from their images, or from the layers their root filesystems' overlays read. (Those
    /// being reclaimed need none: their reclaim's release ends the wait for theirs.) Garbage
    /// collection resumes once none is lost.
    async fn repair_holds(&self) {
        let records: Vec<Arc<ContainerRecord>> =
            self.table().by_id.values().map(|e| e.snapshot()).collect();
        let (ctx, images) = (self.ctx.clone(), self.images.clone());
        let repaired = tokio::task::spawn_blocking(move || {
            let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
            for r in records {
                let rootfs = rootfs::layout(&ctx, &r.id).rootfs;
                let lowerdirs = crate::snapshot::lowerdirs_of(&mountinfo, &rootfs);
                let ours = images.repair_hold(&r.id, &r.image.id, Some(&lowerdirs));
                let volumes = r.image_volumes.values().enumerate().map(|(n, image)| {
                    images.repair_hold(&super::volumes::holder(&r.id, n), image, None)
                });
                for e in std::iter::once(ours).chain(volumes).filter_map(Result::err) {
                    tracing::error!(container_id = %r.id, error = %e, "making an unreadable image hold again");
                }
            }
            if !images.collection_waits() {
                images.collect_garbage().map(drop)
            } else {
                tracing::warn!("image holds still lost: garbage collection waits until crust restarts");
                Ok(())
            }
        })
        .await;
        if let Ok(Err(e)) = repaired {
            tracing::warn!(error = %e, "collecting garbage after making image holds again");
        }
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
                    self.ctx.record_dir(&record.id).join(RELEASE_FAILED),
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
            state_lost: false,
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
    fn remove_orphans(&self, kept: &HashSet<String>) {
        let mut known: HashSet<String> = self.table().by_id.keys().cloned().collect();
        known.extend(kept.iter().cloned());
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
