//! Releasing everything a container holds: its process (through the monitor), the runtime
//! binary's state (`<runtime> delete --force`, for a handler that names one), its cgroup,
//! libcontainer's state, its root filesystem and writable layer, its image hold, and last its
//! directories: the state's, then the record's. Every step tolerates what is already gone, so the same function
//! serves RemoveContainer's background reclaim, the rollback of a failed CreateContainer and
//! recovery. All steps run even when one fails; the failures are reported together and the
//! record stays for a retry.

use crate::container::monitor_of;
use crate::container::{ContainerError, ContainerRecord, Containers, rootfs};
use crate::monitor::{Fault, MonitorError};
use crate::sandbox::Timed;

pub(in crate::container) async fn release(
    c: &Containers,
    record: &ContainerRecord,
) -> Result<(), String> {
    let mut errors = Vec::new();
    let forgotten = Timed::start("monitor forgot the container");
    if let Err(e) = forget(c, record).await {
        errors.push(e);
    }
    drop(forgotten);
    crate::failpoint!("container.teardown.after_forget");
    // Its processes are gone: the OCI spec's poststop hooks run now, before anything goes.
    crate::container::poststop::run(&c.ctx.container_dir(&record.id), &record.id).await;
    let (ctx, images, id, cgroup, record) = (
        c.ctx.clone(),
        c.images.clone(),
        record.id.clone(),
        record.cgroup.clone(),
        record.clone(),
    );
    let blocking = tokio::task::spawn_blocking(move || {
        let mut errors = Vec::new();
        if let Some(runtime) = &record.runtime {
            let log = ctx.container_dir(&id).join(crate::monitor::RUNTIME_LOG);
            if let Err(e) = crate::monitor::oci_cli::delete(runtime, &id, &log) {
                errors.push(format!("delete the container in {}: {e}", runtime.handler));
            }
        }
        let t = Timed::start("container cgroup removed");
        if let Err(e) = ctx.cgroups.remove(&cgroup) {
            errors.push(format!("remove cgroup: {e}"));
        }
        drop(t);
        crate::failpoint!("container.teardown.after_cgroup");
        if let Err(e) = rootfs::remove_dir(&ctx.runtime_root.join(&id)) {
            errors.push(e);
        }
        let t = Timed::start("root filesystem unmounted and removed");
        if let Err(e) = rootfs::remove(&rootfs::layout(&ctx, &id)) {
            errors.push(e);
        }
        drop(t);
        crate::failpoint!("container.teardown.after_rootfs");
        if let Err(e) = images.release(&id) {
            errors.push(format!("release the image: {e}"));
        }
        crate::failpoint!("container.teardown.after_image_release");
        errors.extend(crate::container::volumes::release_all(&images, &record));
        // Last the directories: the state's, then the record's (with the tombstone), so that
        // a crash before the end leaves the record for the next start to finish the job.
        if errors.is_empty() {
            if let Err(e) = rootfs::remove_dir(&ctx.container_dir(&id))
                .and_then(|()| rootfs::remove_dir(&ctx.record_dir(&id)))
            {
                errors.push(e);
            }
        }
        errors
    })
    .await;
    match blocking {
        Ok(e) => errors.extend(e),
        Err(e) => errors.push(format!("the release task failed: {e}")),
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// Has the pod's monitor forget the container (killing what is left of it). A monitor that is
/// gone has nothing left to forget.
pub(in crate::container) async fn forget(
    c: &Containers,
    record: &ContainerRecord,
) -> Result<(), String> {
    let Ok(pod) = c.sandboxes.get(&record.pod_id) else {
        return Ok(());
    };
    let Ok(monitor) = monitor_of(&pod) else {
        return Ok(());
    };
    match monitor.forget(&record.id, c.ctx.monitor_timeout).await {
        Ok(()) => Ok(()),
        Err(MonitorError::Refused {
            fault: Fault::NotFound,
            ..
        }) => Ok(()),
        Err(_) if !crate::monitor::is_alive(&monitor.identity) => Ok(()),
        // No socket, or nobody behind it: the monitor is on its way out (it removes its socket
        // as it exits, after its containers are dead).
        Err(MonitorError::Io(e))
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(ContainerError::monitor(&record.id, "forgetting it")(e).to_string()),
    }
}
