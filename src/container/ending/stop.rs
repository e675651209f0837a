//! StopContainer: the stop signal, then SIGKILL (to everything in the container's cgroup)
//! once the timeout passes; a timeout of 0 kills at once. Idempotent: stopping an exited or
//! unknown container succeeds (kubelet retries stops). Returns once the monitor recorded the
//! exit.

use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::exits::Gone;
use crate::container::monitor_of;
use crate::container::{ContainerError, Containers, Held, Phase, detached};
use crate::monitor::MonitorError;

/// How long a container may take to die after SIGKILL before stopping it is an error.
const KILL_GRACE: Duration = Duration::from_secs(10);

impl Containers {
    pub async fn stop(self: &Arc<Self>, id: &str, timeout: Duration) -> Result<(), ContainerError> {
        let (me, id) = (self.clone(), id.to_owned());
        detached(async move {
            match me.hold(&id).await? {
                Some(held) => me.stop_held(&held, timeout).await,
                None => Ok(()),
            }
        })
        .await
    }

    pub(in crate::container) async fn stop_held(
        &self,
        held: &Held,
        timeout: Duration,
    ) -> Result<(), ContainerError> {
        // A start that failed after the monitor started the container may have left its exit.
        self.take_pending_exit(&held.id, &held.entry);
        let record = held.entry.snapshot();
        if matches!(record.phase, Phase::Exited | Phase::Creating) {
            return Ok(());
        }
        let pod = self.sandboxes.get(&record.pod_id)?;
        let asked = crate::history::Fact::StopRequested {
            container: held.id.clone(),
            name: record.spec.metadata.name.clone(),
            timeout_secs: timeout.as_secs(),
        };
        self.sandboxes.context().note(&pod, asked);
        let Ok(monitor) = monitor_of(&pod) else {
            // The pod's monitor is gone: its containers end without it.
            return self.end_without_monitor(held, &record.pod_id).await;
        };
        let mut exited = held.entry.exited.subscribe();
        let signal = |sig: Signal, all: bool| {
            let monitor = monitor.clone();
            let id = held.id.clone();
            let t = self.ctx.monitor_timeout;
            async move { monitor.signal(&id, sig, all, t).await }
        };
        // A monitor that dies under the call (killed, out of memory): the containers end
        // without it, as when it was found gone.
        let died = |r: &Result<(), MonitorError>| matches!(r, Err(MonitorError::Died(_)));
        if !timeout.is_zero() && record.phase == Phase::Running {
            let sig = Signal::try_from(record.stop_signal).unwrap_or(Signal::SIGTERM);
            let sent = signal(sig, false).await;
            if died(&sent) {
                return self.end_without_monitor(held, &record.pod_id).await;
            }
            sent.map_err(ContainerError::monitor(&held.id, "sending the stop signal"))?;
            if wait_exit(&mut exited, timeout).await {
                self.stopped_for_plugins(held).await;
                return Ok(());
            }
            tracing::info!(?timeout, "container outlived its stop timeout; killing it");
        }
        let sent = signal(Signal::SIGKILL, true).await;
        if died(&sent) {
            return self.end_without_monitor(held, &record.pod_id).await;
        }
        sent.map_err(ContainerError::monitor(&held.id, "killing it"))?;
        if wait_exit(&mut exited, KILL_GRACE).await {
            self.stopped_for_plugins(held).await;
            Ok(())
        } else {
            Err(ContainerError::Unkillable {
                id: held.id.clone(),
                timeout: KILL_GRACE,
            })
        }
    }
}

impl Containers {
    /// Ends the container whose pod's monitor is gone: once none of its processes remain.
    async fn end_without_monitor(&self, held: &Held, pod: &str) -> Result<(), ContainerError> {
        match self.monitor_gone(pod, Gone::Died).await {
            true => Ok(()),
            false => Err(ContainerError::Unkillable {
                id: held.id.clone(),
                timeout: KILL_GRACE,
            }),
        }
    }

    /// StopContainer returns once plugins heard the stop (the exit's own announcement and this
    /// one go out once between them), so that a RemoveContainer after it reaches them after.
    async fn stopped_for_plugins(&self, held: &Held) {
        let record = held.entry.snapshot();
        let nri = &self.sandboxes.context().nri;
        nri.stop_container(&held.id, &crate::container::plugins::status(&record))
            .await;
    }
}

async fn wait_exit(exited: &mut tokio::sync::watch::Receiver<bool>, timeout: Duration) -> bool {
    matches!(
        tokio::time::timeout(timeout, exited.wait_for(|e| *e)).await,
        Ok(Ok(_))
    )
}
