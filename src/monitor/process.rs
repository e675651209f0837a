//! The monitor process itself. Single-threaded and synchronous on purpose: it forks (the pod
//! init now, containers later), and a fork is only sound when no other thread can hold a lock.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::path::Path;

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::{SigSet, Signal, kill};
use nix::sys::wait::waitpid;
use nix::unistd::{Pid, setsid};

use super::state::log;
use super::{Identity, MonitorConfig, PIDFILE, Ready, SOCKET};
use crate::sys::{self, ForkResult};

/// Entry point of `crust monitor`; returns the process exit code.
pub fn main() -> i32 {
    // The daemon's environment: a test that arms a monitor failpoint arms every monitor.
    #[cfg(debug_assertions)]
    if let Err(e) = crate::failpoint::arm() {
        return report_failure("arm a failpoint", &e);
    }
    let mut input = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut input) {
        return report_failure("read config", &e.to_string());
    }
    let config: MonitorConfig = match serde_json::from_str(&input) {
        Ok(c) => c,
        Err(e) => return report_failure("read config", &e.to_string()),
    };
    // Fork once more so the monitor is not the daemon's child; the parent leaves at once.
    match sys::fork_single_threaded() {
        Ok(ForkResult::Parent { .. }) => 0,
        Ok(ForkResult::Child) => run(config),
        Err(e) => report_failure("fork", &e.to_string()),
    }
}

fn run(config: MonitorConfig) -> i32 {
    // Before any worker is forked: they and the processes libcontainer clones from them
    // inherit it (third_party/libcgroups/CRUST.md).
    if !config.cgroup_v1_mounts.is_empty() {
        libcgroups::v1::util::know_cgroup_mounts(config.cgroup_v1_mounts.clone());
    }
    // SIGCHLD stays blocked for the monitor's whole life and is read from a signalfd, so no
    // child's exit can slip by between setup and the serve loop. (Runtime workers unblock it
    // before anything of theirs can reach a container.)
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    let _ = mask.thread_block();
    let mut pod = Pod { init: None };
    let identity = match setup(&config, &mut pod) {
        Ok(id) => id,
        Err((step, error)) => {
            undo_pins(&config);
            pod.kill_all();
            return report_failure(step, &error);
        }
    };
    let listener = match super::short_socket_path(&config.dir, SOCKET)
        .and_then(|(_dir, path)| UnixListener::bind(path))
    {
        Ok(l) => l,
        Err(e) => {
            undo_pins(&config);
            pod.kill_all();
            return report_failure("bind control socket", &e.to_string());
        }
    };
    crate::failpoint!("monitor.before_ready");
    report(&Ready::Ok(identity));
    log(&format!(
        "monitor {} ready for sandbox {}",
        identity.pid, config.sandbox_id
    ));
    super::server::run(config, identity, listener, pod.init.take())
}

/// The processes the monitor answers for.
struct Pod {
    init: Option<Pid>,
}

impl Pod {
    fn kill_all(&mut self) {
        if let Some(init) = self.init.take() {
            let _ = kill(init, Signal::SIGKILL);
            let _ = waitpid(init, None);
        }
    }
}

type StepError = (&'static str, String);

fn step<T, E: std::fmt::Display>(name: &'static str, r: Result<T, E>) -> Result<T, StepError> {
    r.map_err(|e| (name, e.to_string()))
}

fn setup(config: &MonitorConfig, pod: &mut Pod) -> Result<Identity, StepError> {
    step("setsid", setsid())?;
    step(
        "become subreaper",
        nix::sys::prctl::set_child_subreaper(true),
    )?;
    let pins = &config.pins;
    // The monitor's own PID namespace, to return to once the pod's init exists (see below).
    let own_pid_ns = step("open own PID namespace", File::open("/proc/self/ns/pid"))?;
    let init_pid = match &config.id_maps {
        None => {
            enter_pod_namespaces(config)?;
            pin_pod_namespaces(config, "/proc/self/ns")?;
            match &pins.pid {
                Some(_) => Some(start_init(config, pod, &own_pid_ns)?),
                None => None,
            }
        }
        Some(maps) => user_namespaces(config, maps, pod)?,
    };
    let pid = std::process::id() as i32;
    let start_time = super::process_start_time(pid).ok_or(("read start time", String::new()))?;
    let identity = Identity {
        pid,
        start_time,
        init_pid,
    };
    let record = serde_json::to_vec(&identity).unwrap_or_default();
    step(
        "write pid file",
        crate::store::write_atomic(&config.dir.join(PIDFILE), &record),
    )?;
    Ok(identity)
}

/// The pod's network, IPC, UTS and PID namespaces (those it does not share with the node),
/// entered by the calling process, with the hostname, `lo` and the sysctls set in them.
fn enter_pod_namespaces(config: &MonitorConfig) -> Result<(), StepError> {
    let pins = &config.pins;
    let mut flags = CloneFlags::empty();
    for (pin, flag) in [
        (&pins.net, CloneFlags::CLONE_NEWNET),
        (&pins.ipc, CloneFlags::CLONE_NEWIPC),
        (&pins.uts, CloneFlags::CLONE_NEWUTS),
        (&pins.pid, CloneFlags::CLONE_NEWPID),
    ] {
        if pin.is_some() {
            flags |= flag;
        }
    }
    step("unshare namespaces", unshare(flags))?;
    if let Some(name) = &config.hostname {
        step("set hostname", nix::unistd::sethostname(name))?;
    }
    if pins.net.is_some() {
        step("bring up lo", sys::set_link_up("lo"))?;
    }
    for (key, value) in &config.sysctls {
        let path = Path::new("/proc/sys").join(key);
        std::fs::write(&path, value).map_err(|e| ("set sysctls", format!("{key}={value}: {e}")))?;
    }
    Ok(())
}

/// Pins the network, IPC and UTS namespaces found under `ns_dir` (`/proc/<pid>/ns`).
fn pin_pod_namespaces(config: &MonitorConfig, ns_dir: &str) -> Result<(), StepError> {
    let pins = &config.pins;
    for (pin, kind) in [(&pins.net, "net"), (&pins.ipc, "ipc"), (&pins.uts, "uts")] {
        if let Some(pin) = pin {
            step(
                "pin namespaces",
                pin_namespace(&format!("{ns_dir}/{kind}"), pin),
            )?;
        }
    }
    Ok(())
}

/// Starts the pod's init as PID 1 of the PID namespace the monitor unshared, pins that
/// namespace, and returns the monitor to its own.
fn start_init(config: &MonitorConfig, pod: &mut Pod, own_pid_ns: &File) -> Result<i32, StepError> {
    let init = step(
        "start pod init",
        super::pod_init::start(&config.dir, super::pod_init::Parent::Caller),
    )?;
    pod.init = Some(init);
    pin_init_pid_ns(config, init)?;
    // Later children (runtime workers, and through them containers) are created in the
    // monitor's own namespace again: a worker must see pids as the monitor does, and
    // libcontainer joins the pod's namespace itself, through its pin.
    step(
        "return to own PID namespace",
        nix::sched::setns(own_pid_ns, CloneFlags::CLONE_NEWPID),
    )?;
    Ok(init.as_raw())
}

fn pin_init_pid_ns(config: &MonitorConfig, init: Pid) -> Result<(), StepError> {
    let pin = config.pins.pid.as_ref();
    let pin = pin.ok_or(("pin namespaces", "no pin for the PID namespace".to_owned()))?;
    step(
        "pin namespaces",
        pin_namespace(&format!("/proc/{init}/ns/pid"), pin),
    )
}

/// A pod with a user namespace: a child (the holder) enters a new user namespace that the
/// monitor maps, then creates the pod's other namespaces there, so that the pod's root owns
/// them (net sysctls, sysfs and a proc of its own need that). A PID namespace has no handle
/// until its first process exists (`/proc/<pid>/ns/pid_for_children` says ENOENT till then),
/// and only a process of the user namespace can create one it owns: so the holder starts the
/// pod's init too, as the monitor's child (CLONE_PARENT), which the monitor reaps and whose
/// parent-death signal follows the monitor. The monitor stays on the node, pins the holder's
/// namespaces and lets it go; returns the init's pid, if the pod has a PID namespace.
fn user_namespaces(
    config: &MonitorConfig,
    maps: &crate::model::IdMaps,
    pod: &mut Pod,
) -> Result<Option<i32>, StepError> {
    let pin = config
        .pins
        .user
        .as_ref()
        .ok_or(("pin namespaces", "no pin for the user namespace".to_owned()))?;
    // The monitor is single-threaded: the holder may allocate.
    let work = || -> Result<Vec<u8>, String> {
        enter_pod_namespaces(config).map_err(|(step, e)| format!("{step}: {e}"))?;
        if config.pins.pid.is_none() {
            return Ok(Vec::new());
        }
        let init = super::pod_init::start(&config.dir, super::pod_init::Parent::CallersParent)
            .map_err(|e| format!("start pod init: {e}"))?;
        Ok(init.as_raw().to_string().into_bytes())
    };
    let holder = step(
        "create the pod's user namespace",
        sys::userns::UserNsChild::spawn(maps, work),
    )?;
    let init = match std::str::from_utf8(holder.answer()).map(str::parse::<i32>) {
        Ok(Ok(pid)) => Some(Pid::from_raw(pid)),
        _ => None,
    };
    pod.init = init;
    step(
        "pin namespaces",
        pin_namespace(&holder.ns_path("user"), pin),
    )?;
    pin_pod_namespaces(config, &format!("/proc/{}/ns", holder.pid()))?;
    if let Some(init) = init {
        pin_init_pid_ns(config, init)?;
    }
    holder.finish();
    Ok(init.map(Pid::as_raw))
}

fn pin_namespace(source: &str, pin: &Path) -> std::io::Result<()> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(pin)?;
    mount(
        Some(source),
        pin,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )?;
    Ok(())
}

fn undo_pins(config: &MonitorConfig) {
    for pin in config.pins.all() {
        let _ = umount2(pin, MntFlags::MNT_DETACH);
        let _ = std::fs::remove_file(pin);
    }
}

fn report(ready: &Ready) {
    let mut line = serde_json::to_vec(ready).unwrap_or_default();
    line.push(b'\n');
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(&line);
    let _ = out.flush();
    // Close stdout for good so the daemon's read ends here; /dev/null takes its place.
    if let Ok(null) = File::options().write(true).open("/dev/null") {
        let _ = nix::unistd::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), 1);
    }
}

fn report_failure(step: &str, error: &str) -> i32 {
    log(&format!("{step}: {error}"));
    report(&Ready::Failed {
        step: step.to_owned(),
        error: error.to_owned(),
    });
    1
}
