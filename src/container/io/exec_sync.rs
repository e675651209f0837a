//! ExecSync: a command in a running container, with the container's namespaces, cgroup, user
//! and security settings (the container's own process template with other args), through the
//! pod's monitor. Output is bounded; a timeout kills the command and says so.

use std::sync::Arc;
use std::time::Duration;

use crate::container::monitor_of;
use crate::container::{ContainerError, Containers, Phase, prepare};
use crate::monitor::{ExecOutput, ExecRequest};

impl Containers {
    pub async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Option<Duration>,
    ) -> Result<ExecOutput, ContainerError> {
        if cmd.is_empty() {
            return Err(ContainerError::Invalid("cmd is required".into()));
        }
        let (id, entry) = self.entry(id)?;
        let record = entry.snapshot();
        if record.phase != Phase::Running {
            return Err(ContainerError::State {
                id,
                state: record.state_name(),
                what: "exec in it (it is not running)",
            });
        }
        let template = self.exec_template(&id, &entry)?;
        let process = crate::oci::exec_process(&template, &cmd, false);
        let pod = self.sandboxes.get(&record.pod_id)?;
        let req = ExecRequest {
            id: id.clone(),
            runtime_root: self.ctx.runtime_root.clone(),
            process,
            timeout_ms: timeout.map(|t| t.as_millis() as u64),
            max_output: self.ctx.max_exec_output,
        };
        // The monitor enforces the exec's timeout; this one only bounds a monitor that hangs.
        let wait = timeout.unwrap_or(Duration::from_secs(24 * 3600)) + self.ctx.monitor_timeout;
        let out = monitor_of(&pod)?
            .exec(req, wait)
            .await
            .map_err(ContainerError::monitor(&id, "running the command"))?;
        if out.timed_out {
            return Err(ContainerError::ExecTimeout {
                id,
                cmd: cmd.join(" "),
                timeout: timeout.unwrap_or_default(),
            });
        }
        if out.truncated {
            return Err(ContainerError::ExecOutputTooLarge {
                id,
                cmd: cmd.join(" "),
                limit: self.ctx.max_exec_output,
            });
        }
        Ok(out)
    }

    pub(in crate::container) fn exec_template(
        &self,
        id: &str,
        entry: &crate::container::Entry,
    ) -> Result<Arc<oci_spec::runtime::Process>, ContainerError> {
        let mut cached = entry
            .exec_template
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(t) = cached.as_ref() {
            return Ok(t.clone());
        }
        let process = Arc::new(prepare::load_process(&self.ctx.container_dir(id))?);
        *cached = Some(process.clone());
        Ok(process)
    }
}
