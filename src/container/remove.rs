//! RemoveContainer: stop the container if it still runs, then release everything it holds and
//! forget it. Idempotent: removing an unknown container succeeds.

use std::sync::Arc;
use std::time::Duration;

use super::{ContainerError, Containers, detached, teardown};

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
            teardown::release(&me, &record)
                .await
                .map_err(|errors| ContainerError::Teardown {
                    id: held.id.clone(),
                    errors,
                })?;
            {
                let mut table = me.table();
                table.by_id.remove(&held.id);
                let key = (record.pod_id.clone(), record.spec.metadata.clone());
                if table.names.get(&key) == Some(&held.id) {
                    table.names.remove(&key);
                }
            }
            me.sandboxes.context().nri.remove_container(&held.id).await;
            tracing::info!("container removed");
            me.publish(&held.id, super::EventKind::Deleted, &record.pod_id);
            Ok(())
        })
        .await
    }
}
