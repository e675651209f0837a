//! Releasing everything a sandbox holds: its processes (through the monitor), its network (CNI
//! DEL), its namespace pins and its cgroup. Every step tolerates a resource that is already
//! gone, so the same function serves Stop, Remove, the rollback of a failed Run and recovery of
//! a half-created sandbox. All steps run even when one fails; the failures are reported together.

use std::path::Path;

use crate::durable::umount2;
use nix::mount::MntFlags;

use crate::monitor::{self, MonitorHandle};
use crate::sandbox::SandboxContext;
use crate::sandbox::model::SandboxRecord;

pub(in crate::sandbox) async fn release(
    ctx: &SandboxContext,
    record: &SandboxRecord,
) -> Result<(), String> {
    // Two independent tracks: the processes (then what needs them gone: the cgroup, and the
    // pins CNI does not use), and the network (CNI DEL needs the netns, so its pin goes last).
    let (mut errors, network) =
        tokio::join!(release_processes(ctx, record), release_network(ctx, record));
    errors.extend(network);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

async fn release_processes(ctx: &SandboxContext, record: &SandboxRecord) -> Vec<String> {
    let mut errors = Vec::new();
    // The monitor's pid file covers a crash between its start and the record's next save.
    if let Some(identity) = record
        .monitor
        .or_else(|| monitor::read_pidfile(&record.dir))
    {
        let _t = Timed::start("monitor stopped");
        let handle = MonitorHandle {
            identity,
            dir: record.dir.clone(),
        };
        if let Err(e) = handle.shutdown(ctx.monitor_timeout).await {
            errors.push(format!("stop monitor: {e}"));
        }
        crate::failpoint!("sandbox.teardown.after_monitor");
    }
    if let Some(e) = delete_infra(record).await {
        errors.push(e);
    }
    if let Err(e) = crate::sandbox::host::files::unmount_shm(&record.dir) {
        errors.push(format!("unmount the pod's /dev/shm: {e}"));
    }
    let pins = &record.pins;
    for pin in [&pins.ipc, &pins.uts, &pins.pid, &pins.user]
        .into_iter()
        .flatten()
    {
        if let Err(e) = unpin(pin) {
            errors.push(format!("remove namespace pin {}: {e}", pin.display()));
        }
    }
    let cgroups = ctx.cgroups.clone();
    let path = record.cgroup.clone();
    // The monitor's own cgroup, when it has one apart from the pod's (see `monitor_cgroup`).
    let monitor_path = Some(record.monitor_cgroup().to_owned()).filter(|m| *m != path);
    let span = tracing::Span::current();
    let removed = tokio::task::spawn_blocking(move || {
        let _in = span.enter();
        let _t = Timed::start("pod cgroup removed");
        let pod = cgroups.remove(&path);
        let monitor = monitor_path.map_or(Ok(()), |m| cgroups.remove(&m));
        pod.and(monitor).map_err(|e| e.to_string())
    });
    if let Err(e) = removed.await.map_err(|e| e.to_string()).and_then(|r| r) {
        errors.push(format!("remove pod cgroup: {e}"));
    }
    crate::failpoint!("sandbox.teardown.after_cgroup");
    errors
}

/// `<runtime> delete --force` of the pod's infra container, for a handler whose binary made a
/// sandbox for the pod (`monitor/workload/infra.rs`): it ends the sandbox and what runs in it.
async fn delete_infra(record: &SandboxRecord) -> Option<String> {
    let runtime = record.runtime.clone().filter(|r| r.sandbox)?;
    let id = record.id.clone();
    let log = record
        .dir
        .join(monitor::INFRA_DIR)
        .join(monitor::RUNTIME_LOG);
    let deleted =
        tokio::task::spawn_blocking(move || monitor::oci_cli::delete(&runtime, &id, &log)).await;
    match deleted {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(format!("delete the pod's sandbox: {e}")),
        Err(e) => Some(format!("delete the pod's sandbox: {e}")),
    }
}

async fn release_network(ctx: &SandboxContext, record: &SandboxRecord) -> Vec<String> {
    let mut errors = Vec::new();
    if let Some(net) = &record.network {
        let _t = Timed::start("CNI DEL done");
        let prev = net.result.as_ref().map(|r| &r.raw);
        if let Err(e) = ctx.cni.del(&net.list, &net.attachment, prev).await {
            errors.push(e.to_string());
        }
        crate::failpoint!("sandbox.teardown.after_cni_del");
    }
    if let Some(pin) = &record.pins.net {
        if let Err(e) = unpin(pin) {
            errors.push(format!("remove namespace pin {}: {e}", pin.display()));
        }
    }
    errors
}

/// Unmounts and deletes one namespace pin; a pin that is not there is fine.
pub(in crate::sandbox) fn unpin(pin: &Path) -> std::io::Result<()> {
    match umount2(pin, MntFlags::MNT_DETACH) {
        Ok(()) | Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOENT) => {}
        Err(e) => return Err(e.into()),
    }
    match crate::durable::remove_file(pin) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Logs how long a step took when dropped (at debug level, for finding slow steps).
pub(crate) struct Timed(&'static str, std::time::Instant);

impl Timed {
    pub(crate) fn start(what: &'static str) -> Timed {
        Timed(what, std::time::Instant::now())
    }
}

impl Drop for Timed {
    fn drop(&mut self) {
        tracing::debug!(elapsed = ?self.1.elapsed(), "{}", self.0);
    }
}
