//! An OCI runtime binary that runs a RuntimeClass handler's containers (`[runtimes.<handler>]`
//! resolved): what the monitor needs to drive it through the OCI runtime command line.

use std::ffi::OsString;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A runtime binary speaking the OCI runtime command line (runc's: `create`, `start`,
/// `exec`, `delete`, `features`), as one handler configures it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OciRuntime {
    /// The handler's name (RuntimeClass `handler`).
    pub handler: String,
    /// The binary (`runtime_path`).
    pub path: PathBuf,
    /// Its state root (`--root`), one of crust's own so that no other user of the binary
    /// sees crust's containers.
    pub root: PathBuf,
    /// `--systemd-cgroup`: the cgroups path is `slice:prefix:name`.
    pub systemd_cgroup: bool,
    /// Global options given before every command (`runtime_args`).
    pub args: Vec<String>,
    /// The binary runs each pod in a sandbox of its own (gVisor's `runsc`): the pod's first
    /// container is an infra container that makes it, the others join it, and a container's
    /// processes are no host processes (see `monitor/workload/standin.rs`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sandbox: bool,
}

impl OciRuntime {
    /// The command line up to the command: `<args> --root <root> [--systemd-cgroup]`.
    pub fn global_args(&self) -> Vec<OsString> {
        let mut out: Vec<OsString> = self.args.iter().map(OsString::from).collect();
        out.push("--root".into());
        out.push(self.root.clone().into());
        if self.systemd_cgroup {
            out.push("--systemd-cgroup".into());
        }
        out
    }

    /// Its state directory for one container (runc's and crun's layout).
    pub fn state_dir(&self, id: &str) -> PathBuf {
        self.root.join(id)
    }

    /// Whether the binary holds state for container `id`: runc's and crun's directory
    /// `<root>/<id>`, or runsc's file `<root>/<id>_sandbox:<sandbox>.state`.
    pub fn has_state(&self, id: &str) -> bool {
        if !self.sandbox {
            return self.state_dir(id).exists();
        }
        let prefix = format!("{id}_sandbox:");
        std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                name.starts_with(&prefix) && name.ends_with(".state")
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_options_come_before_the_command() {
        let r = OciRuntime {
            handler: "crun".into(),
            path: "/usr/bin/crun".into(),
            root: "/run/crust/runtimes/crun".into(),
            systemd_cgroup: true,
            args: vec!["--debug".into()],
            sandbox: false,
        };
        let args: Vec<String> = r
            .global_args()
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        assert_eq!(
            args,
            [
                "--debug",
                "--root",
                "/run/crust/runtimes/crun",
                "--systemd-cgroup"
            ]
        );
    }
}
