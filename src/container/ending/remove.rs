//! RemoveContainer: stop the container if it still runs, bury it, and reclaim what it held in
//! the background. Idempotent: removing an unknown container succeeds.
//!
//! The call does what a client can see: the container's record becomes its tombstone
//! (`container.json` renamed to `removing.json`, on disk first), then it leaves the table, so
//! it is gone from ListContainers, ContainerStatus and the events, and its name is free. What
//! it held (its monitor's bookkeeping, cgroup, libcontainer state, root filesystem mount and
//! writable layer, image volumes and image holds, and last its directory with the tombstone)
//! is released by a background reclaim (`teardown::release`), the slow part: unmounting the
//! overlay and deleting the writable layer take milliseconds to tens of them. Poststop hooks,
//! which the OCI spec wants run before the removal returns, run in the call when the
//! container has any.
//!
//! Invariants:
//! - a container is in the table, or its reclaim is pending here, or both for an instant;
//!   never neither while something of it is left on the node;
//! - a daemon killed before a reclaim ended finds the tombstone at its next start, never
//!   lists the container again, and reclaims it then (`recover.rs`);
//! - image holds go only once the mounts reading the image's layers are gone (the order of
//!   `teardown::release`), so a RemoveImage meanwhile deletes the layers only after that;
//! - StopPodSandbox waits for the pod's running reclaims (both remove cgroups under the pod's),
//!   and RemovePodSandbox retries the failed ones and fails while one still fails: a removed
//!   pod leaves nothing behind;
//! - a reclaim that fails says why in `<dir>/RELEASE_FAILED` (`crust check` lists it) and stays
//!   pending, failed, until RemovePodSandbox or the next start tries again.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::container::{ContainerError, ContainerRecord, Containers, detached, poststop, teardown};
use crate::store::RELEASE_FAILED;

/// What a container's record is renamed to when it is removed.
pub(in crate::container) const TOMBSTONE: &str = "removing.json";

impl Containers {
    pub async fn remove(self: &Arc<Self>, id: &str) -> Result<(), ContainerError> {
        let (me, id) = (self.clone(), id.to_owned());
        detached(async move {
            let Some(held) = me.hold(&id).await? else {
                return Ok(());
            };
            me.stop_held(&held, Duration::ZERO).await?;
            crate::failpoint!("container.remove.after_stop");
            let record = held.entry.snapshot();
            me.poststop_now(&record).await?;
            crate::store::rename(
                &me.ctx.record_path(&held.id),
                &me.ctx.record_dir(&held.id).join(TOMBSTONE),
            )?;
            crate::failpoint!("container.remove.after_tombstone");
            me.reclaims.begin(&record);
            {
                let mut table = me.table();
                table.by_id.remove(&held.id);
                me.changes
                    .fetch_add(1, std::sync::atomic::Ordering::Release);
                let key = (record.pod_id.clone(), record.spec.metadata.clone());
                if table.names.get(&key) == Some(&held.id) {
                    table.names.remove(&key);
                }
            }
            me.spawn_reclaim(record.clone());
            me.sandboxes.context().nri.remove_container(&held.id).await;
            tracing::info!("container removed");
            me.publish(
                &held.id,
                crate::container::EventKind::Deleted,
                &record.pod_id,
            );
            Ok(())
        })
        .await
    }

    /// Runs the container's poststop hooks, if it has any, before the removal returns (as the
    /// OCI spec asks): once its monitor forgot it, so that its processes are gone.
    async fn poststop_now(&self, record: &ContainerRecord) -> Result<(), ContainerError> {
        let dir = self.ctx.container_dir(&record.id);
        if !poststop::pending(&dir) {
            return Ok(());
        }
        teardown::forget(self, record)
            .await
            .map_err(|errors| ContainerError::Teardown {
                id: record.id.clone(),
                errors,
            })?;
        poststop::run(&dir, &record.id).await;
        Ok(())
    }

    /// Reclaims what `record`'s container held, in the background; it is pending already.
    pub(in crate::container) fn spawn_reclaim(self: &Arc<Self>, record: Arc<ContainerRecord>) {
        let me = self.clone();
        let span = tracing::info_span!("reclaim", container_id = %record.id);
        tokio::spawn(tracing::Instrument::instrument(
            async move { me.reclaim(&record).await },
            span,
        ));
    }

    async fn reclaim(&self, record: &ContainerRecord) {
        let released = {
            // A test holding the reclaim here learns it ended before any waiter does.
            let _paused = crate::failpoint_pause!("container.reclaim.started");
            teardown::release(self, record).await
        };
        if let Err(e) = &released {
            tracing::error!(error = %e, "reclaiming a removed container; kept for a retry");
            let why = format!("reclaiming this removed container failed: {e}\n");
            let file = self.ctx.record_dir(&record.id).join(RELEASE_FAILED);
            if let Err(e) = crate::durable::write(file, why) {
                tracing::warn!(error = %e, "recording why the reclaim failed");
            }
        } else {
            tracing::debug!("container reclaimed");
        }
        self.reclaims.end(&record.id, released.err());
    }

    /// Waits until no reclaim of pod `pod_id`'s containers runs (StopPodSandbox: the pod's
    /// teardown removes the cgroups they remove).
    pub(in crate::container) async fn reclaimed(&self, pod_id: &str) {
        self.reclaims.wait(pod_id).await;
    }

    /// Waits for the reclaims of pod `pod_id`'s containers and retries the failed ones once
    /// (RemovePodSandbox): an error if one still fails, so that the pod stays for a retry.
    pub(in crate::container) async fn settle_reclaims(
        self: &Arc<Self>,
        pod_id: &str,
    ) -> Result<(), ContainerError> {
        for failed in self.reclaims.wait(pod_id).await {
            if self.reclaims.retry(&failed.id) {
                self.spawn_reclaim(failed);
            }
        }
        match self.reclaims.wait(pod_id).await.first() {
            None => Ok(()),
            Some(failed) => Err(ContainerError::Teardown {
                id: failed.id.clone(),
                errors: self.reclaims.why(&failed.id).unwrap_or_default(),
            }),
        }
    }

    /// The containers whose reclaim is pending (recovery leaves their files to it).
    pub(in crate::container) fn reclaiming(&self) -> HashSet<String> {
        self.reclaims.ids()
    }
}

/// The reclaims under way or failed, by container id.
#[derive(Default)]
pub(in crate::container) struct Reclaims {
    pending: Mutex<HashMap<String, Pending>>,
    /// Bumped when a reclaim ends, well or not.
    ended: tokio::sync::watch::Sender<u64>,
}

struct Pending {
    record: Arc<ContainerRecord>,
    /// Why its last attempt failed; None while it runs.
    failed: Option<String>,
}

impl Reclaims {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes that `record`'s container is being reclaimed.
    pub(in crate::container) fn begin(&self, record: &Arc<ContainerRecord>) {
        let pending = Pending {
            record: record.clone(),
            failed: None,
        };
        self.lock().insert(record.id.clone(), pending);
    }

    fn end(&self, id: &str, failed: Option<String>) {
        {
            let mut pending = self.lock();
            match failed {
                None => {
                    pending.remove(id);
                }
                Some(why) => {
                    if let Some(p) = pending.get_mut(id) {
                        p.failed = Some(why);
                    }
                }
            }
        }
        self.ended.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Marks a failed reclaim as running again; false if it is not failed (someone else
    /// retries it, or it is done).
    fn retry(&self, id: &str) -> bool {
        match self.lock().get_mut(id) {
            Some(p) if p.failed.is_some() => {
                p.failed = None;
                true
            }
            _ => false,
        }
    }

    fn why(&self, id: &str) -> Option<String> {
        self.lock().get(id).and_then(|p| p.failed.clone())
    }

    fn ids(&self) -> HashSet<String> {
        self.lock().keys().cloned().collect()
    }

    /// Waits until none of pod `pod_id`'s reclaims runs; returns the records of those that
    /// failed.
    async fn wait(&self, pod_id: &str) -> Vec<Arc<ContainerRecord>> {
        // Subscribed before looking: an end after the look wakes the wait.
        let mut ended = self.ended.subscribe();
        loop {
            let (running, failed) = {
                let pending = self.lock();
                let of_pod = pending.values().filter(|p| p.record.pod_id == pod_id);
                let (failed, running): (Vec<&Pending>, Vec<&Pending>) =
                    of_pod.partition(|p| p.failed.is_some());
                let failed: Vec<_> = failed.iter().map(|p| p.record.clone()).collect();
                (running.len(), failed)
            };
            if running == 0 {
                return failed;
            }
            tracing::debug!(
                running,
                "waiting for the reclaims of the pod's removed containers"
            );
            if ended.changed().await.is_err() {
                return failed;
            }
        }
    }
}
