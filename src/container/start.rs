//! StartContainer: the pod's monitor lets the created process run.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::monitor_of;
use super::{ContainerError, Containers, Phase, detached};
use crate::history::Fact;

impl Containers {
    pub async fn start(self: &Arc<Self>, id: &str) -> Result<(), ContainerError> {
        let (me, id) = (self.clone(), id.to_owned());
        detached(async move {
            let held = me.hold_existing(&id).await?;
            let record = held.entry.snapshot();
            if record.phase != Phase::Created {
                return Err(ContainerError::State {
                    id: held.id.clone(),
                    state: record.state_name(),
                    what: "start it (only a created container starts)",
                });
            }
            let pod = me.sandboxes.get(&record.pod_id)?;
            let monitor = monitor_of(&pod)?;
            // Before the process runs: a plugin may refuse the start.
            pod_nri(&me).start_container(&held.id).await?;
            held.entry.starting.store(true, Ordering::SeqCst);
            let (started, ended) = match monitor.start(&held.id, me.ctx.monitor_timeout).await {
                Ok(at) => (Ok(at), None),
                Err(failed) => {
                    let e = ContainerError::monitor(&held.id, "starting it")(failed.error);
                    (Err(e), failed.exit)
                }
            };
            crate::failpoint!("container.start.after_start");
            // The exit may already have been recorded (a command that ends at once): the
            // container then stays exited, now with its start time.
            let committed = started.and_then(|started_at| {
                held.entry.commit(&me.ctx, |r| {
                    r.started_at = started_at;
                    if r.phase == Phase::Created {
                        r.phase = Phase::Running;
                    }
                })
            });
            held.entry.starting.store(false, Ordering::SeqCst);
            let (name, attempt) = (&record.spec.metadata.name, record.spec.metadata.attempt);
            let record = match committed {
                Ok(record) => record,
                Err(e) => {
                    let fact = Fact::ContainerStartFailed {
                        container: held.id.clone(),
                        name: name.clone(),
                        attempt,
                        error: e.to_string(),
                    };
                    me.note(&record.pod_id, fact);
                    match ended {
                        // The monitor's account of the exit, with the failure as its reason,
                        // in place of what its event stream may have held back.
                        Some(exit) => me.exit_of_failed_start(&held.id, &held.entry, exit),
                        None => me.take_pending_exit(&held.id, &held.entry),
                    }
                    return Err(e);
                }
            };
            crate::failpoint!("container.start.after_record");
            tracing::info!("container started");
            let fact = Fact::ContainerStarted {
                container: held.id.clone(),
                name: record.spec.metadata.name.clone(),
                attempt: record.spec.metadata.attempt,
            };
            me.note(&record.pod_id, fact);
            pod_nri(&me)
                .post_start(&held.id, &super::plugins::status(&record))
                .await;
            me.publish(&held.id, super::EventKind::Started, &record.pod_id);
            me.take_pending_exit(&held.id, &held.entry);
            Ok(())
        })
        .await
    }
}

fn pod_nri(c: &Containers) -> &Arc<crate::nri::Nri> {
    &c.sandboxes.context().nri
}
