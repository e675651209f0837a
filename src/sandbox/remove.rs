//! RemovePodSandbox: stop the pod if it still holds anything, then delete its record and
//! directory and free its name. Idempotent: removing an unknown sandbox succeeds.

use std::sync::Arc;

use super::{SandboxError, Sandboxes};

impl Sandboxes {
    pub async fn remove(self: &Arc<Self>, id: &str) -> Result<(), SandboxError> {
        let (me, id) = (self.clone(), id.to_owned());
        super::detached(async move { me.remove_to_end(&id).await }).await
    }

    async fn remove_to_end(&self, id: &str) -> Result<(), SandboxError> {
        let Some(held) = self.hold(id).await? else {
            return Ok(());
        };
        self.release_held(&held).await?;
        let record = held.entry.snapshot();
        match std::fs::remove_dir_all(&record.dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(SandboxError::Teardown {
                    id: held.id,
                    errors: format!("remove {}: {e}", record.dir.display()),
                });
            }
            _ => {}
        }
        self.cpu_rates.forget(&held.id);
        let mut table = self.table();
        table.by_id.remove(&held.id);
        if table.names.get(&record.spec.metadata) == Some(&held.id) {
            table.names.remove(&record.spec.metadata);
        }
        Ok(())
    }
}
