//! The pod cgroup, through libcgroups (the library libcontainer uses, so crust has one cgroup
//! implementation). With the cgroupfs driver the pod cgroup is `<parent>/crust-<id>`; with the
//! systemd driver it is the scope `crust-<id>.scope` in the parent slice.

use std::path::PathBuf;

use libcgroups::common::{AnyCgroupManager, CgroupConfig, CgroupManager};

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
}

impl CgroupSettings {
    /// The pod cgroup's name for `parent` (the request's `cgroup_parent`, maybe empty).
    pub fn pod_path(&self, parent: &str, id: &str) -> String {
        let parent = if parent.is_empty() {
            self.default_parent.as_str()
        } else {
            parent
        };
        match self.driver {
            CgroupDriver::Cgroupfs => format!("{}/crust-{id}", parent.trim_end_matches('/')),
            CgroupDriver::Systemd => format!("{parent}:crust:{id}"),
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

    /// Creates the cgroup (if needed) and moves `pids` into it.
    pub fn create(&self, path: &str, pids: &[i32]) -> Result<(), CgroupError> {
        let manager = self.manager(path)?;
        for pid in pids {
            manager
                .add_task(nix::unistd::Pid::from_raw(*pid))
                .map_err(|e| err(path, e))?;
        }
        Ok(())
    }

    /// Kills whatever is left in the cgroup and removes it; a missing cgroup is not an error.
    pub fn remove(&self, path: &str) -> Result<(), CgroupError> {
        if path.is_empty() {
            return Ok(());
        }
        self.manager(path)?.remove().map_err(|e| err(path, e))
    }

    /// The cgroup's cpu, memory and pids statistics.
    pub fn stats(&self, path: &str) -> Result<libcgroups::stats::Stats, CgroupError> {
        self.manager(path)?.stats().map_err(|e| err(path, e))
    }

    /// The pids in the cgroup (empty when it does not exist).
    pub fn pids(&self, path: &str) -> Vec<i32> {
        self.manager(path)
            .and_then(|m| m.get_all_pids().map_err(|e| err(path, e)))
            .map(|pids| pids.into_iter().map(|p| p.as_raw()).collect())
            .unwrap_or_default()
    }
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

    #[test]
    fn pod_paths_per_driver() {
        let mut s = CgroupSettings {
            driver: CgroupDriver::Cgroupfs,
            default_parent: "/crust".into(),
            root: "/sys/fs/cgroup".into(),
        };
        assert_eq!(s.pod_path("", "ab"), "/crust/crust-ab");
        assert_eq!(
            s.pod_path("/kubepods/pod1/", "ab"),
            "/kubepods/pod1/crust-ab"
        );
        s.driver = CgroupDriver::Systemd;
        assert_eq!(
            s.pod_path("kubepods-pod1.slice", "ab"),
            "kubepods-pod1.slice:crust:ab"
        );
    }
}
