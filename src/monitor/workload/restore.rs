//! A container restored from a checkpoint, in a runtime worker: CRIU recreates its processes
//! where libcontainer would have created its init, and leaves them stopped until StartContainer
//! lets them go on (`continue_restored`), so a restored container passes through CREATED like
//! any other.
//!
//! What the dump left outside comes back from the new container's spec:
//! - the pod's network (and shared PID) namespace: an open descriptor of it, inherited under
//!   the key the dump gave it (`extRootNetNS`, `extRootPidNS`); its IPC and UTS namespaces are
//!   joined (runc's way), so two containers of the pod still share them;
//! - each bind mount from the host, by its destination, from the new spec's source;
//! - stdin, stdout and stderr: the pipes of the dump (`descriptors.json`) are replaced by the
//!   monitor's new ones, so the log relay carries the restored output;
//! - the cgroup: the worker joins the container's cgroup (made and limited from the spec)
//!   before CRIU runs, and the restored processes are born in it.
//!
//! libcontainer's state for the container is written as its create would have written it, so
//! exec, attach and removal work on the restored container unchanged.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;

use libcgroups::common::{CgroupConfig, CgroupManager, ControllerOpt};
use oci_spec::runtime::{LinuxNamespaceType as Ns, Spec};

use crate::monitor::CreateRequest;

/// CRIU's log and pid file, in the container's directory.
pub const LOG: &str = "restore.log";
const PIDFILE: &str = "restore.pid";

/// The runtime worker's job for a restored container (`stdio`: its new stdin, stdout and
/// stderr): its pid once CRIU is done.
pub fn restore(req: &CreateRequest, stdio: [OwnedFd; 3]) -> Result<i32, String> {
    let r = req.restore.as_ref().ok_or("no restore was asked")?;
    let spec_path = req.bundle.join("config.json");
    let spec =
        Spec::load(&spec_path).map_err(|e| format!("reading {}: {e}", spec_path.display()))?;
    join_cgroup(req, &spec)?;
    let mut args = Args::new(req, &r.images_dir, &spec)?;
    args.namespaces(&spec)?;
    args.mounts(&spec);
    args.streams(&r.images_dir, stdio)?;
    let _ = std::fs::remove_file(req.dir.join(PIDFILE));
    let status = Command::new(&r.criu)
        .args(&args.list)
        .status()
        .map_err(|e| format!("running {}: {e}", r.criu.display()))?;
    drop(args.inherited);
    if !status.success() {
        return Err(format!(
            "criu restore failed ({status}): {}",
            crate::criu::log_errors(&req.dir.join(LOG))
        ));
    }
    let pid: i32 = std::fs::read_to_string(req.dir.join(PIDFILE))
        .ok()
        .and_then(|p| p.trim().parse().ok())
        .ok_or("criu restore wrote no pid")?;
    save_state(req, &spec, pid).map_err(|e| format!("recording the restored container: {e}"))?;
    Ok(pid)
}

/// Moves this worker into the container's cgroup, made and limited as the spec says.
fn join_cgroup(req: &CreateRequest, spec: &Spec) -> Result<(), String> {
    let linux = spec.linux().clone().unwrap_or_default();
    let path = linux
        .cgroups_path()
        .clone()
        .ok_or("the spec names no cgroup")?;
    let manager = libcgroups::common::create_cgroup_manager(CgroupConfig {
        cgroup_path: path.clone(),
        systemd_cgroup: req.systemd,
        container_name: req.id.clone(),
    })
    .map_err(|e| format!("cgroup {}: {e}", path.display()))?;
    manager
        .add_task(nix::unistd::Pid::this())
        .map_err(|e| format!("joining cgroup {}: {e}", path.display()))?;
    if let Some(resources) = linux.resources() {
        let opt = ControllerOpt {
            resources,
            freezer_state: None,
            oom_score_adj: None,
            disable_oom_killer: false,
        };
        manager
            .apply(&opt)
            .map_err(|e| format!("limiting cgroup {}: {e}", path.display()))?;
    }
    Ok(())
}

/// CRIU's command line, and the descriptors it inherits (kept open until it is done).
struct Args {
    list: Vec<String>,
    inherited: Vec<OwnedFd>,
}

impl Args {
    fn new(req: &CreateRequest, images: &Path, spec: &Spec) -> Result<Args, String> {
        let root = spec.root().as_ref().ok_or("the spec has no root")?.path();
        let root = if root.is_absolute() {
            root.clone()
        } else {
            req.bundle.join(root)
        };
        let list = [
            "restore",
            "--images-dir",
            &images.display().to_string(),
            "--work-dir",
            &req.dir.display().to_string(),
            "--log-file",
            LOG,
            "-v4",
            "--pidfile",
            PIDFILE,
            "--restore-detached",
            "--leave-stopped",
            "--tcp-established",
            "--file-locks",
            "--manage-cgroups=ignore",
            "--root",
            &root.display().to_string(),
        ]
        .map(str::to_owned)
        .to_vec();
        Ok(Args {
            list,
            inherited: Vec::new(),
        })
    }

    fn push(&mut self, flag: &str, value: String) {
        self.list.push(flag.to_owned());
        self.list.push(value);
    }

    /// `fd` handed to CRIU under `key`.
    fn inherit(&mut self, fd: OwnedFd, key: &str) -> Result<(), String> {
        nix::fcntl::fcntl(
            fd.as_raw_fd(),
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
        )
        .map_err(|e| format!("passing {key} to CRIU: {e}"))?;
        self.push(
            "--inherit-fd",
            format!("fd[{}]:{key}", fd.as_fd().as_raw_fd()),
        );
        self.inherited.push(fd);
        Ok(())
    }

    fn namespaces(&mut self, spec: &Spec) -> Result<(), String> {
        let linux = spec.linux().clone().unwrap_or_default();
        for ns in linux.namespaces().clone().unwrap_or_default() {
            let Some(path) = ns.path() else { continue };
            let open = |p: &PathBuf| {
                std::fs::File::open(p)
                    .map(OwnedFd::from)
                    .map_err(|e| format!("opening namespace {}: {e}", p.display()))
            };
            match ns.typ() {
                Ns::Network => self.inherit(open(path)?, "extRootNetNS")?,
                Ns::Pid => self.inherit(open(path)?, "extRootPidNS")?,
                Ns::Ipc => self.push("--join-ns", format!("ipc:{}", path.display())),
                Ns::Uts => self.push("--join-ns", format!("uts:{}", path.display())),
                _ => {}
            }
        }
        Ok(())
    }

    /// Each bind mount the dump left outside, keyed by its destination, from its new source.
    fn mounts(&mut self, spec: &Spec) {
        for m in spec.mounts().iter().flatten() {
            let bind = m.typ().as_deref() == Some("bind")
                || m.options()
                    .iter()
                    .flatten()
                    .any(|o| o == "bind" || o == "rbind");
            if let (true, Some(source)) = (bind, m.source()) {
                let map = format!("{}:{}", m.destination().display(), source.display());
                self.push("--ext-mount-map", map);
            }
        }
    }

    /// The monitor's new pipes in place of the dump's.
    fn streams(&mut self, images: &Path, stdio: [OwnedFd; 3]) -> Result<(), String> {
        let path = images.join(crate::criu::DESCRIPTORS);
        let was: Vec<String> = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| format!("the checkpoint has no readable {}", path.display()))?;
        for (fd, key) in stdio.into_iter().zip(was) {
            if key.starts_with("pipe:") {
                self.inherit(fd, &key)?;
            }
        }
        Ok(())
    }
}

/// libcontainer's record of the container, as its create writes it.
fn save_state(req: &CreateRequest, spec: &Spec, pid: i32) -> Result<(), String> {
    use libcontainer::container::{Container, ContainerStatus};
    let root = req.runtime_root.join(&req.id);
    std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    let mut c = Container::new(
        &req.id,
        ContainerStatus::Created,
        Some(pid),
        &req.bundle,
        &root,
    )
    .map_err(|e| e.to_string())?;
    c.set_systemd(req.systemd);
    c.save().map_err(|e| e.to_string())?;
    libcontainer::config::YoukiConfig::from_spec(spec, &req.id)
        .and_then(|y| y.save(&root))
        .map_err(|e| e.to_string())
}

/// StartContainer on a restored container: every process CRIU left stopped goes on, and
/// libcontainer's record says it runs.
pub fn continue_restored(cgroup_procs: Option<&Path>, runtime_dir: &Path) -> Result<(), String> {
    let procs = cgroup_procs.ok_or("the container has no cgroup to find its processes in")?;
    let text =
        std::fs::read_to_string(procs).map_err(|e| format!("reading {}: {e}", procs.display()))?;
    for pid in text.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGCONT,
        );
    }
    let mut c = libcontainer::container::Container::load(runtime_dir.to_owned())
        .map_err(|e| e.to_string())?;
    c.set_status(libcontainer::container::ContainerStatus::Running);
    c.save().map_err(|e| e.to_string())
}
