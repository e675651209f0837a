use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;

use pathrs::flags::OpenFlags;
use pathrs::procfs::{ProcfsBase, ProcfsHandle};
use procfs::ProcError;
use procfs::process::MountInfo;

use super::ControllerType;
use super::controller_type::CONTROLLERS;

#[derive(thiserror::Error, Debug)]
pub enum V1MountPointError {
    #[error("io error: {0}")]
    Io(#[from] std::io::Error),
    #[error("failed to get mountinfo: {0}")]
    MountInfo(ProcError),
    #[error("could not find mountpoint for {subsystem}")]
    NotFound { subsystem: ControllerType },
    #[error(transparent)]
    Pathrs(#[from] pathrs::error::Error),
}

/// List all cgroup v1 subsystem mount points on the system. This can include unsupported
/// subsystems, comounted controllers and named hierarchies.
pub fn list_subsystem_mount_points() -> Result<Vec<PathBuf>, V1MountPointError> {
    let reader = BufReader::new(ProcfsHandle::new()?.open(
        ProcfsBase::ProcSelf,
        "mountinfo",
        OpenFlags::O_RDONLY | OpenFlags::O_CLOEXEC,
    )?);

    reader
        .lines()
        .map(|lr| {
            lr.map_err(V1MountPointError::Io)
                .and_then(|line| MountInfo::from_line(&line).map_err(V1MountPointError::MountInfo))
        })
        .try_fold(Vec::new(), |mut mount_points, r| {
            r.map(|m| {
                if m.fs_type == "cgroup" {
                    mount_points.push(m.mount_point);
                }
                mount_points
            })
        })
}

/// List the mount points of all currently supported cgroup subsystems.
pub fn list_supported_mount_points() -> Result<HashMap<ControllerType, PathBuf>, V1MountPointError>
{
    let mut mount_paths = HashMap::with_capacity(CONTROLLERS.len());

    for controller in CONTROLLERS {
        if let Ok(mount_point) = get_subsystem_mount_point(controller) {
            mount_paths.insert(controller.to_owned(), mount_point);
        }
    }

    Ok(mount_paths)
}

/// The mount point of `subsystem`'s hierarchy. crust: the mount table is read once per process
/// and the answer kept (see third_party/libcgroups/CRUST.md): the hierarchies do not move while
/// a runtime runs, and on a node with hundreds of containers each read of
/// /proc/self/mountinfo costs milliseconds, a dozen times per cgroup manager.
pub fn get_subsystem_mount_point(subsystem: &ControllerType) -> Result<PathBuf, V1MountPointError> {
    static MOUNT_POINTS: std::sync::OnceLock<HashMap<ControllerType, PathBuf>> =
        std::sync::OnceLock::new();
    let points = match MOUNT_POINTS.get() {
        Some(points) => points,
        None => {
            // A failed read is not kept: the next call reads again.
            let read = read_subsystem_mount_points()?;
            MOUNT_POINTS.get_or_init(|| read)
        }
    };
    points
        .get(subsystem)
        .cloned()
        .ok_or(V1MountPointError::NotFound {
            subsystem: *subsystem,
        })
}

/// Every supported subsystem's mount point, from one read of the mount table: for each, the
/// first `cgroup` mount that holds it, as the per-subsystem search found it before.
fn read_subsystem_mount_points() -> Result<HashMap<ControllerType, PathBuf>, V1MountPointError> {
    let reader = BufReader::new(ProcfsHandle::new()?.open(
        ProcfsBase::ProcSelf,
        "mountinfo",
        OpenFlags::O_RDONLY | OpenFlags::O_CLOEXEC,
    )?);
    let mut points = HashMap::with_capacity(CONTROLLERS.len());
    for line in reader.lines() {
        let line = line.map_err(V1MountPointError::Io)?;
        let m = MountInfo::from_line(&line).map_err(V1MountPointError::MountInfo)?;
        if m.fs_type != "cgroup" {
            continue;
        }
        for subsystem in CONTROLLERS {
            if !points.contains_key(subsystem) && holds(&m.mount_point, subsystem) {
                points.insert(*subsystem, m.mount_point.clone());
            }
        }
    }
    Ok(points)
}

/// Whether a cgroup mount at `mount_point` is `subsystem`'s hierarchy, by its name.
fn holds(mount_point: &std::path::Path, subsystem: &ControllerType) -> bool {
    let subsystem_name = subsystem.to_string();
    // Some systems mount net_prio and net_cls in the same directory
    // other systems mount them in their own directories. This
    // should handle both cases.
    match subsystem_name.as_str() {
        "net_cls" => ["net_cls,net_prio", "net_prio,net_cls", "net_cls"]
            .iter()
            .any(|s| mount_point.ends_with(s)),
        "net_prio" => ["net_cls,net_prio", "net_prio,net_cls", "net_prio"]
            .iter()
            .any(|s| mount_point.ends_with(s)),
        "cpu" => ["cpu,cpuacct", "cpu"]
            .iter()
            .any(|s| mount_point.ends_with(s)),
        "cpuacct" => ["cpu,cpuacct", "cpuacct"]
            .iter()
            .any(|s| mount_point.ends_with(s)),
        _ => mount_point.ends_with(&subsystem_name),
    }
}
