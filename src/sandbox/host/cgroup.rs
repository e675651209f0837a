//! Pod and container cgroups, through libcgroups (the library libcontainer uses, so crust has
//! one cgroup implementation), on cgroup v1, hybrid or v2 (detected, never assumed).
//!
//! Layout with the cgroupfs driver: the pod cgroup is `<parent>/crust-<pod id>`, each
//! container in `<pod cgroup>/<container id>`, so the pod cgroup holds (and its statistics and
//! limits cover) the pod's containers, and on cgroup v2 no process sits in a cgroup that has
//! children (the "no internal processes" rule). With the systemd driver each container's scope
//! is `crust-<container id>.scope`, side by side in the parent slice, as kubelet's systemd
//! driver expects (scopes cannot nest).
//!
//! The pod's monitor (and the init of a shared PID namespace) is crust's, not the pod's: it
//! lives outside the pod's cgroup, in `<default parent>/monitors/<pod id>` (cgroupfs) or the
//! scope `crust-<pod id>.scope` of the default slice (systemd), as containerd's shims live in
//! containerd's cgroup rather than the pod's. So the kernel's OOM killer, when the pod reaches
//! its memory limit, picks among the pod's containers and never the process that holds the
//! pod's namespaces and is the parent of its containers; and the monitor's memory is counted
//! as the runtime's, not against the pod's limit.

use std::path::{Path, PathBuf};
use std::time::Duration;

use libcgroups::common::{AnyCgroupManager, CgroupConfig, CgroupManager, CgroupSetup};

use crate::config::CgroupDriver;

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("cgroup {path}: {msg}")]
    Manager { path: String, msg: String },
}

#[derive(Debug, Clone)]
pub struct CgroupSettings {
    pub driver: CgroupDriver,
    pub default_parent: String,
    /// The cgroup filesystem root, normally `/sys/fs/cgroup`.
    pub root: PathBuf,
    /// Pure cgroup v2 (else v1 or hybrid: controllers on v1 hierarchies).
    pub unified: bool,
    /// With systemd, containers' scopes are `<prefix>-<id>.scope` (`cgroup_scope_prefix`).
    pub scope_prefix: String,
}

/// Where the monitors live below the default parent, with the cgroupfs driver.
const MONITORS: &str = "monitors";

impl CgroupSettings {
    /// Settings for the hierarchy mounted at `root`.
    pub fn detect(driver: CgroupDriver, default_parent: String, root: PathBuf) -> CgroupSettings {
        let unified = matches!(
            libcgroups::common::get_cgroup_setup_with_root(&root),
            Ok(CgroupSetup::Unified)
        );
        CgroupSettings {
            driver,
            default_parent,
            root,
            unified,
            scope_prefix: "crust".into(),
        }
    }

    /// These settings with containers' systemd scopes named `<prefix>-<id>.scope`.
    pub fn with_scope_prefix(self, prefix: &str) -> CgroupSettings {
        CgroupSettings {
            scope_prefix: prefix.to_owned(),
            ..self
        }
    }

    /// Where the node's cgroup v1 hierarchies are mounted (empty on cgroup v2, or when the
    /// mount table cannot be read): read once per daemon (libcgroups keeps it) and handed to
    /// each pod's monitor, whose workers would otherwise each read the whole mount table.
    pub fn v1_mounts(&self) -> Vec<PathBuf> {
        if self.unified {
            return Vec::new();
        }
        libcgroups::v1::util::list_subsystem_mount_points().unwrap_or_default()
    }

    /// The pod cgroup's name for `parent` (the request's `cgroup_parent`, maybe empty).
    pub fn pod_path(&self, parent: &str, id: &str) -> String {
        let parent = if parent.is_empty() {
            self.default_parent.as_str()
        } else {
            parent
        };
        match self.driver {
            CgroupDriver::Cgroupfs => format!("{}/crust-{id}", parent.trim_end_matches('/')),
            CgroupDriver::Systemd => {
                let slice = match slice_name(parent) {
                    "" => slice_name(&self.default_parent),
                    slice => slice,
                };
                format!("{slice}:crust:{id}")
            }
        }
    }

    /// The cgroup of container `id` of the pod whose cgroup is `pod`.
    pub fn container_path(&self, pod: &str, id: &str) -> String {
        match self.driver {
            CgroupDriver::Cgroupfs => format!("{pod}/{id}"),
            CgroupDriver::Systemd => {
                let slice = pod.split(':').next().unwrap_or_default();
                format!("{slice}:{}:{id}", self.scope_prefix)
            }
        }
    }

    /// The cgroup of pod `id`'s monitor: crust's own, outside the pod's (see the module doc).
    /// With systemd it is the scope a pod in the default slice is named by.
    pub fn monitor_path(&self, id: &str) -> String {
        match self.driver {
            CgroupDriver::Cgroupfs => format!(
                "{}/{MONITORS}/{id}",
                self.default_parent.trim_end_matches('/')
            ),
            CgroupDriver::Systemd => self.pod_path("", id),
        }
    }

    /// The cgroup's directory relative to a hierarchy root (`/a/b`), as the kernel names it
    /// in `/proc/<pid>/cgroup`.
    pub fn relative_dir(&self, path: &str) -> PathBuf {
        match self.driver {
            CgroupDriver::Cgroupfs => PathBuf::from(path),
            CgroupDriver::Systemd => systemd_dir(path),
        }
    }

    /// The directory of `path` in the hierarchy holding `controller` (on v2, the one
    /// hierarchy).
    pub fn controller_dir(&self, path: &str, controller: &str) -> PathBuf {
        let rel = self.relative_dir(path);
        let rel = rel.strip_prefix("/").unwrap_or(&rel);
        if self.unified {
            self.root.join(rel)
        } else {
            self.root.join(controller).join(rel)
        }
    }

    fn manager(&self, path: &str) -> Result<AnyCgroupManager, CgroupError> {
        // An empty path would make the library pick the daemon's own cgroup.
        if path.is_empty() {
            return Err(err(path, "no cgroup path"));
        }
        let config = CgroupConfig {
            cgroup_path: PathBuf::from(path),
            systemd_cgroup: self.driver == CgroupDriver::Systemd,
            container_name: path.rsplit(':').next().unwrap_or(path).to_owned(),
        };
        libcgroups::common::create_cgroup_manager_with_root(Some(&self.root), config)
            .map_err(|e| err(path, e))
    }

    /// Creates the monitor's cgroup `monitor` with the monitor's `pids` in it, and the empty
    /// pod cgroup `pod` its containers will join (with systemd the pod's cgroup is kubelet's
    /// slice, or the monitor's scope: nothing more to make).
    pub fn create_pod(&self, pod: &str, monitor: &str, pids: &[i32]) -> Result<(), CgroupError> {
        self.create(monitor, pids)?;
        if self.driver == CgroupDriver::Cgroupfs {
            self.create_empty(pod)?;
        }
        Ok(())
    }

    /// Creates cgroup `path` (cgroupfs) with no process in it, in every hierarchy; on v2 its
    /// ancestors and itself hand their controllers down, so its limits can be written and its
    /// children get them (what libcgroups does for a path it moves a process into).
    fn create_empty(&self, path: &str) -> Result<(), CgroupError> {
        let rel = self.relative_dir(path);
        let rel = rel.strip_prefix("/").unwrap_or(&rel);
        if self.unified {
            let mut dir = self.root.clone();
            for part in rel.components() {
                enable_controllers(&dir);
                dir.push(part);
                match crate::durable::create_dir(&dir) {
                    Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                        return Err(err(path, e));
                    }
                    _ => {}
                }
            }
            enable_controllers(&dir);
        } else {
            for root in hierarchy_roots(&self.root) {
                crate::durable::create_dir_all(root.join(rel)).map_err(|e| err(path, e))?;
                inherit_cpuset(&root, rel).map_err(|e| err(path, e))?;
            }
        }
        crate::durable::step("cgroup made", path);
        Ok(())
    }

    /// Creates the cgroup (if needed) and moves `pids` into it.
    pub fn create(&self, path: &str, pids: &[i32]) -> Result<(), CgroupError> {
        let manager = self.manager(path)?;
        let added = pids.iter().try_for_each(|pid| {
            manager
                .add_task(nix::unistd::Pid::from_raw(*pid))
                .map_err(|e| err(path, e))
        });
        crate::durable::step("cgroup made", path);
        added
    }

    /// The directory of cgroup `path` in systemd's named v1 hierarchy (`name=systemd`, at
    /// `<root>/systemd` on v1 and hybrid hosts), with the cgroupfs driver. runc makes one for
    /// every container and moves the container into it, and its containers see it read-only
    /// at /sys/fs/cgroup/systemd (systemd run in a container looks for it); libcgroups knows
    /// only controllers, so crust does the same itself. `None` on v2 (one hierarchy), with
    /// the systemd driver (systemd places its scopes there itself), or where it is not
    /// mounted. Removal needs nothing more: `remove` goes through every mounted hierarchy.
    pub fn named_systemd_dir(&self, path: &str) -> Option<PathBuf> {
        let hierarchy = self.root.join("systemd");
        if self.unified
            || self.driver != CgroupDriver::Cgroupfs
            || !hierarchy.join("cgroup.procs").exists()
        {
            return None;
        }
        let rel = self.relative_dir(path);
        Some(hierarchy.join(rel.strip_prefix("/").unwrap_or(&rel)))
    }

    /// Creates cgroup `path` in systemd's named hierarchy, if the host has one (see
    /// `named_systemd_dir`): it must exist before the container's root is set up.
    pub fn create_named_systemd(&self, path: &str) -> Result<(), CgroupError> {
        match self.named_systemd_dir(path) {
            Some(dir) => crate::durable::create_dir_all(&dir).map_err(|e| err(path, e)),
            None => Ok(()),
        }
    }

    /// Moves `pid` into cgroup `path` of systemd's named hierarchy, if the host has one.
    pub fn join_named_systemd(&self, path: &str, pid: i32) -> Result<(), CgroupError> {
        match self.named_systemd_dir(path) {
            Some(dir) => crate::durable::write(dir.join("cgroup.procs"), pid.to_string())
                .map_err(|e| err(path, format!("name=systemd: {e}"))),
            None => Ok(()),
        }
    }

    /// Kills whatever is left in the cgroup and its children and removes them all; a missing
    /// cgroup is not an error.
    pub fn remove(&self, path: &str) -> Result<(), CgroupError> {
        if path.is_empty() {
            return Ok(());
        }
        // Children first: a cgroup with children cannot be removed, and libcgroups removes
        // one directory.
        if self.driver == CgroupDriver::Cgroupfs {
            for root in hierarchy_roots(&self.root) {
                let rel = self.relative_dir(path);
                let dir = root.join(rel.strip_prefix("/").unwrap_or(&rel));
                remove_children(&dir).map_err(|e| err(path, e))?;
                // What is left in the cgroup itself goes too: a container's init parked before
                // StartContainer when the daemon died mid-create keeps its cgroup busy, and
                // nobody else would ever kill it.
                if dir.is_dir() {
                    kill_and_remove(&dir).map_err(|e| err(path, e))?;
                }
            }
        }
        let removed = self.manager(path)?.remove().map_err(|e| err(path, e));
        crate::durable::step("cgroup removed", path);
        removed
    }

    /// Where the statistics of cgroup `path` are read (`crate::stats::read_cgroup`).
    pub fn stat_dirs(&self, path: &str) -> crate::stats::CgroupDirs {
        self.stat_dirs_at(&self.relative_dir(path))
    }

    /// Where the statistics of everything in pod `pod` are read: its pod cgroup with cgroupfs;
    /// with systemd, the slice its scopes sit in, which kubelet makes per pod (the pod's
    /// cgroup_parent). A pod in the default parent shares that slice, so its monitor's scope is
    /// all it has.
    pub fn pod_stat_dirs(&self, pod: &str) -> crate::stats::CgroupDirs {
        let slice = pod.split(':').next().unwrap_or_default();
        if self.driver != CgroupDriver::Systemd || slice == self.default_parent {
            return self.stat_dirs(pod);
        }
        let scope = systemd_dir(pod);
        self.stat_dirs_at(scope.parent().unwrap_or(Path::new("/")))
    }

    /// The memory cgroups that are pod `pod`'s own, whose limit is the pod's: the one its
    /// statistics are read from (`pod_stat_dirs`) and, with cgroupfs, the parent kubelet made
    /// for it (`cgroup_parent`, when the request named one).
    pub fn pod_memory_dirs(&self, pod: &str, cgroup_parent: &str) -> Vec<PathBuf> {
        let dir = match self.pod_stat_dirs(pod) {
            crate::stats::CgroupDirs::V2(dir) => dir,
            crate::stats::CgroupDirs::V1 { memory, .. } => memory,
        };
        let kubelet_s = (self.driver == CgroupDriver::Cgroupfs && !cgroup_parent.is_empty())
            .then(|| dir.parent().map(Path::to_path_buf))
            .flatten();
        std::iter::once(dir).chain(kubelet_s).collect()
    }

    /// The statistics directories of the cgroup at `rel` (below the hierarchy roots).
    fn stat_dirs_at(&self, rel: &Path) -> crate::stats::CgroupDirs {
        let rel = rel.strip_prefix("/").unwrap_or(rel);
        if self.unified {
            return crate::stats::CgroupDirs::V2(self.root.join(rel));
        }
        let dir = |c: &str| self.root.join(c).join(rel);
        crate::stats::CgroupDirs::V1 {
            cpu: dir("cpu"),
            cpuacct: dir("cpuacct"),
            memory: dir("memory"),
            pids: dir("pids"),
            blkio: dir("blkio"),
        }
    }

    /// Sends SIGKILL to every process in cgroup `path` and its children; returns the pids it
    /// found there (none: the cgroup is empty or gone). On v2 through `cgroup.kill`, which
    /// also takes a process forked meanwhile; on v1 pid by pid, so a caller waiting for the
    /// cgroup to empty calls it again until it finds none.
    pub fn kill_all(&self, path: &str) -> Vec<i32> {
        let pids = self.pids(path);
        if pids.is_empty() {
            return pids;
        }
        let kill_file = self.controller_dir(path, "").join("cgroup.kill");
        if !(self.unified && crate::durable::write(&kill_file, "1").is_ok()) {
            for pid in &pids {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(*pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        pids
    }

    /// Freezes (or thaws) every process of cgroup `path`: the v1 freezer or v2's
    /// `cgroup.freeze`, waiting until the kernel reports the new state.
    pub fn freeze(&self, path: &str, frozen: bool) -> Result<(), CgroupError> {
        let state = if frozen {
            libcgroups::common::FreezerState::Frozen
        } else {
            libcgroups::common::FreezerState::Thawed
        };
        self.manager(path)?.freeze(state).map_err(|e| err(path, e))
    }

    /// The directory whose state freezes cgroup `path` (what CRIU's `--freeze-cgroup` takes).
    pub fn freezer_dir(&self, path: &str) -> PathBuf {
        self.controller_dir(path, "freezer")
    }

    /// The pids in the cgroup (empty when it does not exist).
    pub fn pids(&self, path: &str) -> Vec<i32> {
        self.manager(path)
            .and_then(|m| m.get_all_pids().map_err(|e| err(path, e)))
            .map(|pids| pids.into_iter().map(|p| p.as_raw()).collect())
            .unwrap_or_default()
    }

    /// Applies `resources` to the live cgroup.
    pub fn apply(
        &self,
        path: &str,
        resources: &oci_spec::runtime::LinuxResources,
    ) -> Result<(), CgroupError> {
        let opt = libcgroups::common::ControllerOpt {
            resources,
            freezer_state: None,
            oom_score_adj: None,
            disable_oom_killer: false,
        };
        let applied = self.manager(path)?.apply(&opt).map_err(|e| err(path, e));
        crate::durable::step("cgroup limits written", path);
        applied?;
        self.apply_beyond_systemd(path, resources)
    }

    /// Whether `apply_beyond_systemd` has anything to do here: the systemd driver on cgroup
    /// v2 (libcgroups' systemd manager works on v2 only).
    pub fn writes_beyond_systemd(&self) -> bool {
        self.driver == CgroupDriver::Systemd && self.unified
    }

    /// With the systemd driver: the limits systemd has no unit property for (hugepages, most
    /// `unified` keys), written to the scope's files (see `beyond_systemd`). Called once the
    /// scope exists: after libcontainer created the container, and on every update.
    pub fn apply_beyond_systemd(
        &self,
        path: &str,
        resources: &oci_spec::runtime::LinuxResources,
    ) -> Result<(), CgroupError> {
        if !self.writes_beyond_systemd() {
            return Ok(());
        }
        let scope = self.controller_dir(path, "");
        super::beyond_systemd::write(&self.root, &scope, resources).map_err(|e| err(path, e))
    }
}

/// Enables, best effort, every controller cgroup v2 directory `dir` has for its children (a
/// controller the parent withholds, or one a process inside forbids, stays off: a limit that
/// needs it fails when written, naming it).
fn enable_controllers(dir: &Path) {
    let read = |file: &str| std::fs::read_to_string(dir.join(file)).unwrap_or_default();
    let (available, enabled) = (read("cgroup.controllers"), read("cgroup.subtree_control"));
    for c in available.split_whitespace() {
        if !enabled.split_whitespace().any(|e| e == c) {
            let _ = crate::durable::write(dir.join("cgroup.subtree_control"), format!("+{c}"));
        }
    }
}

/// In v1's cpuset hierarchy (`root`, if it is that one), gives each cgroup from `root` down to
/// `rel` whose CPUs or memory nodes are empty its parent's: a process cannot join a cpuset
/// cgroup without them (what libcgroups does as it moves a process in).
fn inherit_cpuset(root: &Path, rel: &Path) -> std::io::Result<()> {
    if !root.join("cpuset.cpus").exists() {
        return Ok(());
    }
    for file in ["cpuset.cpus", "cpuset.mems"] {
        let mut dir = root.to_owned();
        for part in rel.components() {
            let parent = std::fs::read_to_string(dir.join(file))?;
            dir.push(part);
            if std::fs::read_to_string(dir.join(file))?.trim().is_empty() {
                crate::durable::write(dir.join(file), parent.trim())?;
            }
        }
    }
    Ok(())
}

/// Every mounted cgroup hierarchy under `root`: the controllers' directories on v1 (each
/// controller of a co-mounted pair once), the root itself on v2, both on hybrid hosts.
fn hierarchy_roots(root: &Path) -> Vec<PathBuf> {
    let mut roots = Vec::new();
    if root.join("cgroup.controllers").exists() {
        roots.push(root.to_owned());
        return roots;
    }
    let Ok(entries) = std::fs::read_dir(root) else {
        return roots;
    };
    for e in entries.flatten() {
        let path = e.path();
        // Symlinks (`cpu` -> `cpu,cpuacct`) name a hierarchy already listed.
        let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
        if is_dir && path.join("cgroup.procs").exists() {
            roots.push(path);
        }
    }
    roots
}

/// Removes the child cgroups of `dir`, deepest first, killing what runs in them.
fn remove_children(dir: &Path) -> std::io::Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            let child = e.path();
            remove_children(&child)?;
            kill_and_remove(&child)?;
        }
    }
    Ok(())
}

fn kill_members(dir: &Path) {
    if crate::durable::write(dir.join("cgroup.kill"), "1").is_ok() {
        return;
    }
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Kills the cgroup's members and removes it. A cgroup is busy until the kernel finished the
/// exits of its killed members, and a process still being created there (libcontainer's
/// intermediate process forking the container's init) adds members after a kill, so each
/// retry kills again.
fn kill_and_remove(dir: &Path) -> std::io::Result<()> {
    let mut delay = Duration::from_millis(1);
    for _ in 0..14 {
        kill_members(dir);
        match crate::durable::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(_) => {
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_millis(250));
            }
        }
    }
    kill_members(dir);
    crate::durable::remove_dir(dir)
}

/// `slice:prefix:name` as a directory: the slice expanded into its parents
/// (`a-b.slice` -> `/a.slice/a-b.slice`), then the scope `prefix-name.scope`.
fn systemd_dir(path: &str) -> PathBuf {
    let mut parts = path.splitn(3, ':');
    let (slice, prefix, name) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let mut dir = PathBuf::from("/");
    if let Some(stem) = slice
        .strip_suffix(".slice")
        .filter(|s| *s != "-" && !s.is_empty())
    {
        let mut acc = String::new();
        for part in stem.split('-') {
            if !acc.is_empty() {
                acc.push('-');
            }
            acc.push_str(part);
            dir.push(format!("{acc}.slice"));
        }
    }
    dir.push(format!("{prefix}-{name}.scope"));
    dir
}

/// The slice a systemd-driver parent names. Clients send a slice's name
/// (`kubepods-burstable-pod<uid>.slice`) or its path (`/test.slice` from critest,
/// `/kubepods.slice/kubepods-burstable.slice/...`); a slice's name already holds its parents,
/// so the last part is the slice. Kept as a path, the name would be absolute and libcgroups
/// would make a plain directory named after it instead of a scope.
fn slice_name(parent: &str) -> &str {
    parent
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or_default()
}

fn err(path: &str, e: impl std::fmt::Display) -> CgroupError {
    CgroupError::Manager {
        path: path.to_owned(),
        msg: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(driver: CgroupDriver, unified: bool) -> CgroupSettings {
        CgroupSettings {
            driver,
            default_parent: "/crust".into(),
            root: "/sys/fs/cgroup".into(),
            unified,
            scope_prefix: "crust".into(),
        }
    }

    #[test]
    fn containers_scopes_take_the_configured_prefix_so_agents_recognise_them() {
        let s = settings(CgroupDriver::Systemd, true).with_scope_prefix("cri-containerd");
        let pod = s.pod_path("kubepods-burstable-pod1.slice", "ab");
        let c = s.container_path(&pod, "cd");
        assert_eq!(c, "kubepods-burstable-pod1.slice:cri-containerd:cd");
        assert_eq!(
            s.controller_dir(&c, "memory"),
            Path::new(
                "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/\
                 kubepods-burstable-pod1.slice/cri-containerd-cd.scope"
            )
        );
        // The pod's own scope (its monitor's) stays crust's.
        assert_eq!(pod, "kubepods-burstable-pod1.slice:crust:ab");
        let s = settings(CgroupDriver::Cgroupfs, false).with_scope_prefix("crio");
        assert_eq!(
            s.container_path("/kubepods/pod1/crust-ab", "cd"),
            "/kubepods/pod1/crust-ab/cd"
        );
    }

    #[test]
    fn pod_and_container_paths_per_driver() {
        let s = settings(CgroupDriver::Cgroupfs, false);
        assert_eq!(s.pod_path("", "ab"), "/crust/crust-ab");
        let pod = s.pod_path("/kubepods/pod1/", "ab");
        assert_eq!(pod, "/kubepods/pod1/crust-ab");
        assert_eq!(s.container_path(&pod, "cd"), "/kubepods/pod1/crust-ab/cd");
        // The monitor is out of the pod's cgroup, whatever its parent.
        assert_eq!(s.monitor_path("ab"), "/crust/monitors/ab");
        assert_eq!(
            s.controller_dir(&pod, "memory"),
            Path::new("/sys/fs/cgroup/memory/kubepods/pod1/crust-ab")
        );
        let s = settings(CgroupDriver::Systemd, true);
        let pod = s.pod_path("kubepods-burstable-pod1.slice", "ab");
        assert_eq!(pod, "kubepods-burstable-pod1.slice:crust:ab");
        assert_eq!(
            s.container_path(&pod, "cd"),
            "kubepods-burstable-pod1.slice:crust:cd"
        );
        // A slice given as a path (critest sends `/test.slice`) is named by its last part.
        assert_eq!(s.pod_path("/test.slice", "ab"), "test.slice:crust:ab");
        assert_eq!(
            s.pod_path("/kubepods.slice/kubepods-besteffort.slice/", "ab"),
            "kubepods-besteffort.slice:crust:ab"
        );
        let s = CgroupSettings {
            default_parent: "/crust.slice".into(),
            ..s
        };
        assert_eq!(s.pod_path("/", "ab"), "crust.slice:crust:ab");
        // The monitor's scope is in crust's slice, not in kubelet's slice of the pod.
        assert_eq!(s.monitor_path("ab"), "crust.slice:crust:ab");
        assert_eq!(
            s.controller_dir(&s.container_path(&pod, "cd"), "memory"),
            Path::new(
                "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/\
                 kubepods-burstable-pod1.slice/crust-cd.scope"
            )
        );
    }

    #[test]
    fn systemd_paths_expand_slices() {
        assert_eq!(
            systemd_dir("system.slice:crust:x"),
            Path::new("/system.slice/crust-x.scope")
        );
        assert_eq!(systemd_dir("-.slice:crust:x"), Path::new("/crust-x.scope"));
    }
}
