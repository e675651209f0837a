//! RemovePodSandbox: stop the pod if it still holds anything, then delete its record and
//! directory and free its name. Idempotent: removing an unknown sandbox succeeds.

use std::sync::Arc;

use super::{SandboxError, Sandboxes, teardown};

impl Sandboxes {
    pub async fn remove(self: &Arc<Self>, id: &str) -> Result<(), SandboxError> {
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
        if record.phase.holds_resources() {
            if let Some(w) = entry
                .watcher
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
            {
                w.abort();
            }
            teardown::release(&self.ctx, &record)
                .await
                .map_err(|errors| SandboxError::Teardown {
                    id: id.clone(),
                    errors,
                })?;
            // Anyone queued on this sandbox now finds nothing left to release.
            entry.update(|r| r.phase = super::model::Phase::Stopped);
        }
        match std::fs::remove_dir_all(&record.dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(SandboxError::Teardown {
                    id,
                    errors: format!("remove {}: {e}", record.dir.display()),
                });
            }
            _ => {}
        }
        let mut table = self.table();
        table.by_id.remove(&id);
        if table.names.get(&record.spec.metadata) == Some(&id) {
            table.names.remove(&record.spec.metadata);
        }
        Ok(())
    }
}
