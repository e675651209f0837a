//! Releasing everything a sandbox holds: its processes (through the monitor), its network (CNI
//! DEL), its namespace pins and its cgroup. Every step tolerates a resource that is already
//! gone, so the same function serves Stop, Remove, the rollback of a failed Run and recovery of
//! a half-created sandbox. All steps run even when one fails; the failures are reported together.

use std::path::Path;

use nix::mount::{MntFlags, umount2};

use super::SandboxContext;
use super::model::SandboxRecord;
use crate::monitor::{self, MonitorHandle};

pub(super) async fn release(ctx: &SandboxContext, record: &SandboxRecord) -> Result<(), String> {
    // The monitor's pid file covers a crash between its start and the record's next save.
    let identity = record.monitor.or_else(|| monitor::read_pidfile(&record.dir));
    let stop_monitor = async {
        match identity {
            Some(identity) => MonitorHandle { identity, dir: record.dir.clone() }
                .shutdown(ctx.monitor_timeout)
                .await
                .map_err(|e| format!("stop monitor: {e}")),
            None => Ok(()),
        }
    };
    let del_network = async {
        match &record.network {
            Some(net) => {
                let prev = net.result.as_ref().map(|r| &r.raw);
                ctx.cni.del(&net.list, &net.attachment, prev).await.map_err(|e| e.to_string())
            }
            None => Ok(()),
        }
    };
    let (m, n) = tokio::join!(stop_monitor, del_network);
    let mut errors: Vec<String> = [m, n].into_iter().filter_map(Result::err).collect();
    for pin in record.pins.all() {
        if let Err(e) = unpin(pin) {
            errors.push(format!("remove namespace pin {}: {e}", pin.display()));
        }
    }
    let cgroups = ctx.cgroups.clone();
    let path = record.cgroup.clone();
    match tokio::task::spawn_blocking(move || cgroups.remove(&path)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => errors.push(format!("remove pod cgroup: {e}")),
        Err(e) => errors.push(format!("remove pod cgroup: {e}")),
    }
    if errors.is_empty() { Ok(()) } else { Err(errors.join("; ")) }
}

/// Unmounts and deletes one namespace pin; a pin that is not there is fine.
pub(super) fn unpin(pin: &Path) -> std::io::Result<()> {
    match umount2(pin, MntFlags::MNT_DETACH) {
        Ok(()) | Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOENT) => {}
        Err(e) => return Err(e.into()),
    }
    match std::fs::remove_file(pin) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}
