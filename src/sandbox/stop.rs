//! StopPodSandbox: release everything the pod holds and keep its record. Idempotent: stopping a
//! stopped or unknown sandbox succeeds.

use std::sync::Arc;

use super::model::Phase;
use super::{SandboxError, Sandboxes, teardown};

impl Sandboxes {
    pub async fn stop(self: &Arc<Self>, id: &str) -> Result<(), SandboxError> {
        let (id, entry) = match self.entry(id) {
            Ok(found) => found,
            Err(SandboxError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        let _op = entry.op.lock().await;
        if !self.table().by_id.contains_key(&id) {
            return Ok(()); // removed by a concurrent call while we waited
        }
        let record = entry.snapshot();
        if !record.phase.holds_resources() {
            return Ok(());
        }
        if let Some(w) = entry
            .watcher
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            w.abort();
        }
        let released = teardown::release(&self.ctx, &record).await;
        let record = entry.update(|r| {
            r.phase = if released.is_ok() {
                Phase::Stopped
            } else {
                Phase::Exited
            };
        });
        self.save(&record)?;
        released.map_err(|errors| SandboxError::Teardown {
            id: record.id.clone(),
            errors,
        })
    }
}
