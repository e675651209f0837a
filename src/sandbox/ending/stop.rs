//! StopPodSandbox: release everything the pod holds and keep its record. Idempotent: stopping a
//! stopped or unknown sandbox succeeds.

use std::sync::Arc;

use crate::sandbox::model::Phase;
use crate::sandbox::{Held, SandboxError, Sandboxes, teardown};

impl Sandboxes {
    pub async fn stop(self: &Arc<Self>, id: &str) -> Result<(), SandboxError> {
        let (me, id) = (self.clone(), id.to_owned());
        crate::sandbox::detached(async move {
            me.tell_plugins_stop(&id).await;
            match me.hold(&id).await? {
                Some(held) => me.release_held(&held).await,
                None => Ok(()),
            }
        })
        .await
    }

    /// NRI's StopPodSandbox, before the pod's lock is taken (a plugin never holds up the pod's
    /// other verbs): after its containers stopped (container/ending/pod.rs), while the pod
    /// still has its namespaces and network; once per pod, however many Stops come.
    pub(in crate::sandbox) async fn tell_plugins_stop(&self, id: &str) {
        if let Ok(record) = self.get(id) {
            if record.phase.holds_resources() {
                self.ctx.nri.stop_pod(&record.id).await;
            }
        }
    }

    /// Releases what a held sandbox still holds and records the outcome: Stopped, or Exited
    /// (not ready, something left) when a step failed, so that the next Stop tries again.
    pub(in crate::sandbox) async fn release_held(&self, held: &Held) -> Result<(), SandboxError> {
        let record = held.entry.snapshot();
        if !record.phase.holds_resources() {
            return Ok(());
        }
        held.entry.stop_watching();
        let released = teardown::release(&self.ctx, &record).await;
        crate::failpoint!("sandbox.stop.before_record");
        self.commit(&held.entry, |r| match &released {
            Ok(()) => {
                r.phase = Phase::Stopped;
                r.problem = None;
            }
            Err(errors) => {
                r.phase = Phase::Exited;
                r.problem = Some(format!("stopping: {errors}"));
            }
        })?;
        if released.is_ok() {
            self.ctx
                .note(&held.entry.snapshot(), crate::history::Fact::SandboxStopped);
        }
        released.map_err(|errors| SandboxError::Teardown {
            id: held.id.clone(),
            errors,
        })
    }
}
