//! ReopenContainerLog: after kubelet renamed the log file away, the monitor opens it anew;
//! lines written meanwhile are in the renamed file, none is lost.

use crate::container::monitor_of;
use crate::container::{ContainerError, Containers, Phase};

impl Containers {
    pub async fn reopen_log(&self, id: &str) -> Result<(), ContainerError> {
        let record = self.get(id)?;
        if record.phase != Phase::Running {
            return Err(ContainerError::State {
                id: record.id.clone(),
                state: record.state_name(),
                what: "reopen its log (it is not running)",
            });
        }
        let pod = self.sandboxes.get(&record.pod_id)?;
        monitor_of(&pod)?
            .reopen_log(&record.id, self.ctx.monitor_timeout)
            .await
            .map_err(ContainerError::monitor(&record.id, "reopening its log"))
    }
}
