//! RemovePodSandbox: stop the pod if it still holds anything, then delete its record and
//! directory and free its name. Idempotent: removing an unknown sandbox succeeds.

use std::sync::Arc;

use std::path::Path;

use crate::sandbox::{SandboxError, Sandboxes};

impl Sandboxes {
    pub async fn remove(self: &Arc<Self>, id: &str) -> Result<(), SandboxError> {
        let (me, id) = (self.clone(), id.to_owned());
        crate::sandbox::detached(async move {
            me.tell_plugins_stop(&id).await;
            let full = me.get(&id).map(|r| r.id.clone());
            me.remove_to_end(&id).await?;
            // Once it is gone, outside its lock.
            if let Ok(full) = full {
                me.ctx.nri.remove_pod(&full).await;
            }
            Ok(())
        })
        .await
    }

    async fn remove_to_end(&self, id: &str) -> Result<(), SandboxError> {
        let Some(held) = self.hold(id).await? else {
            return Ok(());
        };
        self.release_held(&held).await?;
        let record = held.entry.snapshot();
        // The record first: a crash midway leaves a directory without a record, which the
        // next start discards, never a record of a half-deleted sandbox. The record's own
        // directory (its planned copy) goes with it.
        let path = self.ctx.record_path(&record.id);
        let removed = remove_file(&path)
            .and_then(|()| remove_tree(&self.ctx.record_dir(&record.id)))
            .and_then(|()| {
                crate::failpoint!("sandbox.remove.after_record_deleted");
                remove_tree(&record.dir)
            });
        if let Err(errors) = removed {
            return Err(SandboxError::Teardown {
                id: held.id,
                errors,
            });
        }
        crate::failpoint!("sandbox.remove.after_dir");
        self.ctx.note(&record, crate::history::Fact::SandboxRemoved);
        self.cpu_rates.forget(&held.id);
        let mut table = self.table();
        table.by_id.remove(&held.id);
        self.changes
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        if table.names.get(&record.spec.metadata) == Some(&held.id) {
            table.names.remove(&record.spec.metadata);
        }
        Ok(())
    }
}

fn remove_file(path: &Path) -> Result<(), String> {
    match crate::durable::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("remove {}: {e}", path.display()))
        }
        _ => Ok(()),
    }
}

fn remove_tree(dir: &Path) -> Result<(), String> {
    match crate::durable::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("remove {}: {e}", dir.display()))
        }
        _ => Ok(()),
    }
}
