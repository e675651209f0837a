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
/// subsystems, comounted controllers and named hierarchies. crust: from the mount table read
/// once per process, as `get_subsystem_mount_point`.
pub fn list_subsystem_mount_points() -> Result<Vec<PathBuf>, V1MountPointError> {
    Ok(cgroup_mounts()?.all.clone())
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
    cgroup_mounts()?
        .by_subsystem
        .get(subsystem)
        .cloned()
        .ok_or(V1MountPointError::NotFound {
            subsystem: *subsystem,
        })
}

/// The `cgroup` mounts of the mount table, as one read found them.
struct CgroupMounts {
    /// Every one, in the table's order.
    all: Vec<PathBuf>,
    /// Each supported subsystem's: the first that holds it.
    by_subsystem: HashMap<ControllerType, PathBuf>,
}

/// The `cgroup` mounts, read once per process. A process that reads them before it forks
/// (crust's pod monitor) spares its children the read. A failed read is not kept: the next
/// call reads again.
fn cgroup_mounts() -> Result<&'static CgroupMounts, V1MountPointError> {
    let kept = cgroup_mounts_kept();
    if let Some(mounts) = kept.get() {
        return Ok(mounts);
    }
    let read = read_cgroup_mounts()?;
    Ok(kept.get_or_init(|| read))
}

fn cgroup_mounts_kept() -> &'static std::sync::OnceLock<CgroupMounts> {
    static MOUNTS: std::sync::OnceLock<CgroupMounts> = std::sync::OnceLock::new();
    &MOUNTS
}

/// crust: takes `all`, the `cgroup` mounts in the mount table's order as another process read
/// them (`list_subsystem_mount_points`), in place of this process's own read. No effect once
/// they are known.
pub fn know_cgroup_mounts(all: Vec<PathBuf>) {
    let mut mounts = CgroupMounts {
        all: Vec::new(),
        by_subsystem: HashMap::with_capacity(CONTROLLERS.len()),
    };
    for mount_point in all {
        mounts.add(mount_point);
    }
    let _ = cgroup_mounts_kept().set(mounts);
}

fn read_cgroup_mounts() -> Result<CgroupMounts, V1MountPointError> {
    let reader = BufReader::new(ProcfsHandle::new()?.open(
        ProcfsBase::ProcSelf,
        "mountinfo",
        OpenFlags::O_RDONLY | OpenFlags::O_CLOEXEC,
    )?);
    let mut mounts = CgroupMounts {
        all: Vec::new(),
        by_subsystem: HashMap::with_capacity(CONTROLLERS.len()),
    };
    for line in reader.lines() {
        let line = line.map_err(V1MountPointError::Io)?;
        let m = MountInfo::from_line(&line).map_err(V1MountPointError::MountInfo)?;
        if m.fs_type == "cgroup" {
            mounts.add(m.mount_point);
        }
    }
    Ok(mounts)
}

impl CgroupMounts {
    /// The next `cgroup` mount in the table's order.
    fn add(&mut self, mount_point: PathBuf) {
        for subsystem in CONTROLLERS {
            if !self.by_subsystem.contains_key(subsystem) && holds(&mount_point, subsystem) {
                self.by_subsystem.insert(*subsystem, mount_point.clone());
            }
        }
        self.all.push(mount_point);
    }
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
