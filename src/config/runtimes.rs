//! `[runtimes.<handler>]`: RuntimeClass handlers that an OCI runtime binary runs, their
//! checks, and the resolved form the daemon and the monitors use.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{CgroupDriver, Config};

/// `[runtimes.<handler>]`: an OCI runtime binary and its options.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeHandlerConfig {
    /// The binary (absolute), e.g. `/usr/bin/crun`.
    pub runtime_path: PathBuf,
    /// Its state root (`--root`); unset: `<state>/runtimes/<handler>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_root: Option<PathBuf>,
    /// `--systemd-cgroup`; unset: as `cgroup_driver` says. It must agree with it, since
    /// crust names the containers' cgroups the driver's way.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub systemd_cgroup: Option<bool>,
    /// Global options given before every command (`--debug`, `--rootless=false`).
    pub runtime_args: Vec<String>,
    /// The binary runs each pod in a sandbox of its own, made by an infra container (gVisor's
    /// `runsc`); unset: true for a binary named `runsc`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<bool>,
}

impl RuntimeHandlerConfig {
    pub(super) fn validate(&self, handler: &str, driver: CgroupDriver) -> Result<(), String> {
        let key = |k: &str| format!("runtimes.{handler}.{k}");
        let valid_name = |c: char| c.is_ascii_alphanumeric() || "._-".contains(c);
        if handler.is_empty() || !handler.chars().all(valid_name) {
            return Err(format!(
                "runtimes: {handler:?} is not a handler name (letters, digits, '.', '_', '-')"
            ));
        }
        if !self.runtime_path.is_absolute() {
            return Err(format!(
                "{} must be an absolute path, got {:?}",
                key("runtime_path"),
                self.runtime_path
            ));
        }
        if let Some(root) = self.runtime_root.as_ref().filter(|r| !r.is_absolute()) {
            return Err(format!(
                "{} must be an absolute path, got {}",
                key("runtime_root"),
                root.display()
            ));
        }
        let systemd = driver == CgroupDriver::Systemd;
        if self.systemd_cgroup.is_some_and(|s| s != systemd) {
            return Err(format!(
                "{} must agree with cgroup_driver ({}): crust names cgroups the driver's way",
                key("systemd_cgroup"),
                if systemd { "systemd" } else { "cgroupfs" }
            ));
        }
        if let Some(a) = self.runtime_args.iter().find(|a| !a.starts_with('-')) {
            return Err(format!(
                "{}: {a:?} is not an option (global options start with '-')",
                key("runtime_args")
            ));
        }
        Ok(())
    }
}

impl Config {
    /// Every handler a pod may name: `runtime_handlers`, then the `runtimes` not among them.
    pub fn handler_names(&self) -> Vec<String> {
        let mut names = self.runtime_handlers.clone();
        for h in self.runtimes.keys() {
            if !names.contains(h) {
                names.push(h.clone());
            }
        }
        names
    }

    /// The handlers an OCI runtime binary runs, resolved (roots under the state directory
    /// where none is set; the systemd flag from the cgroup driver where unset).
    pub fn oci_runtimes(&self) -> BTreeMap<String, crate::model::OciRuntime> {
        self.runtimes
            .iter()
            .map(|(handler, r)| {
                let runtime = crate::model::OciRuntime {
                    handler: handler.clone(),
                    path: r.runtime_path.clone(),
                    root: r
                        .runtime_root
                        .clone()
                        .unwrap_or_else(|| self.state.join("runtimes").join(handler)),
                    systemd_cgroup: self.cgroup_driver == CgroupDriver::Systemd,
                    args: r.runtime_args.clone(),
                    sandbox: r
                        .sandbox
                        .unwrap_or_else(|| r.runtime_path.file_name() == Some("runsc".as_ref())),
                };
                (handler.clone(), runtime)
            })
            .collect()
    }
}
