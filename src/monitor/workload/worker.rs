//! Runtime workers: for each libcontainer call that clones processes (creating a container,
//! starting an exec), the monitor forks a worker, which makes the call and exits. For a
//! handler with an OCI runtime binary (`../../oci_cli.rs`) the worker runs the binary's
//! `create`, `exec --detach` or `start` instead and waits for it.
//!
//! Why a process of its own: libcontainer changes the process that calls it (it writes
//! `oom_score_adj`, makes it non-dumpable, changes directory, allocates) and clones the
//! container's processes as its children. In a worker all of that dies with the worker, the
//! monitor's memory stays small, and its serving loop never blocks on a clone. The container's
//! process is a child of the worker until the worker exits, then it is reparented to the
//! monitor (the pod's child subreaper), which reaps it: its pid cannot be reused meanwhile,
//! since an unreaped child keeps its pid.
//!
//! Protocol: the worker writes one JSON [`Outcome`] line on its result pipe, then exits. The
//! runtime's own diagnostics (libcontainer logs through `tracing`) go to the container's
//! runtime log, which the container's init also writes to until it execs.

use std::fs::File;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use libcontainer::container::builder::ContainerBuilder;
use libcontainer::syscall::syscall::SyscallType;
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncBufReadExt;

use super::exec_seccomp::SeccompExecutor;
use crate::model::OciRuntime;
use crate::monitor::oci_cli::{self, Streams};
use crate::monitor::{CreateRequest, Fault};
use crate::sys::{self, ForkResult};

/// The three standard streams of the process a worker creates.
pub struct Stdio {
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

/// `/dev/null`, for a stream of a process that has no use for it.
pub fn dev_null() -> std::io::Result<OwnedFd> {
    Ok(File::options()
        .read(true)
        .write(true)
        .open("/dev/null")?
        .into())
}

/// What a worker is to do.
pub enum Job {
    Create {
        req: CreateRequest,
        stdio: Stdio,
        /// Where the container's init sends its tty master, for a tty container.
        console_socket: Option<PathBuf>,
    },
    Exec {
        id: String,
        runtime_root: PathBuf,
        process: Box<oci_spec::runtime::Process>,
        stdio: Stdio,
        /// Where the process's tty master is sent, for a process with a terminal.
        console_socket: Option<PathBuf>,
        /// The binary that runs the container; `None`: libcontainer.
        runtime: Option<OciRuntime>,
        /// crust's directory for the container (the binary's log, process and pid files).
        dir: PathBuf,
    },
    /// `<runtime> start`, for a container an OCI runtime binary created (libcontainer's start
    /// is a write the monitor makes itself).
    Start {
        runtime: OciRuntime,
        id: String,
        dir: PathBuf,
    },
    /// `<runtime> kill --pid`: an exec's process inside a sandboxing binary's sandbox.
    KillInner {
        runtime: OciRuntime,
        id: String,
        dir: PathBuf,
        inner: i32,
    },
    /// `<runtime> create` and `start` of the pod's infra container, for a binary that makes a
    /// sandbox per pod (`infra.rs`): `dir` is its bundle.
    Infra {
        runtime: OciRuntime,
        id: String,
        dir: PathBuf,
    },
}

/// A worker's answer: the pid of the process it created, or why it could not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Pid(i32),
    /// The job is done and made no process (`Start`).
    Done,
    Failed {
        fault: Fault,
        error: String,
    },
}

/// A worker that runs: its pid and the read end of its result pipe.
pub struct Spawned {
    pub pid: Pid,
    result: OwnedFd,
}

/// Forks a worker for `job`, its runtime diagnostics going to `log`. The job's descriptors
/// are the child's to use; the parent's copies are closed when this returns.
pub fn spawn(job: Job, log: &Path) -> std::io::Result<Spawned> {
    // A fork is only sound when no other thread can hold a lock the child would need.
    if !sys::is_single_threaded() {
        return Err(std::io::Error::other(
            "the monitor has more than one thread; refusing to fork",
        ));
    }
    know_cgroup_mounts();
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    match sys::fork_single_threaded()? {
        ForkResult::Child => {
            drop(read);
            child_main(job, write, log)
        }
        ForkResult::Parent { child } => Ok(Spawned {
            pid: child,
            result: read,
        }),
    }
}

impl Spawned {
    /// Reads the worker's answer: one line, not the whole stream, since the container's init
    /// (a clone of the worker) keeps the pipe open until it execs. A worker that exits
    /// without an answer died (see the runtime log).
    pub async fn outcome(self) -> Outcome {
        let read = async {
            let pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(self.result)?;
            let mut text = String::new();
            tokio::io::BufReader::new(pipe).read_line(&mut text).await?;
            Ok::<_, std::io::Error>(text)
        };
        match read.await {
            Ok(text) => serde_json::from_str(text.trim()).unwrap_or_else(|_| Outcome::Failed {
                fault: Fault::Failed,
                error: format!("the runtime worker {} ended without an answer", self.pid),
            }),
            Err(e) => Outcome::Failed {
                fault: Fault::Failed,
                error: format!("reading the runtime worker's answer: {e}"),
            },
        }
    }
}

/// Accepts the container init's connection on the console socket and takes the tty master
/// it sends.
pub async fn receive_console(listener: Option<tokio::net::UnixListener>) -> Option<OwnedFd> {
    let listener = listener?;
    let accepted = tokio::time::timeout(Duration::from_secs(30), listener.accept()).await;
    let (stream, _) = accepted.ok()?.ok()?;
    let stream = stream.into_std().ok()?;
    stream.set_nonblocking(false).ok()?;
    sys::receive_fd(&stream).ok()
}

/// On cgroup v1, makes sure the monitor knows where the hierarchies are mounted before it forks
/// a worker: libcgroups keeps the answer (third_party/libcgroups/CRUST.md), so the worker and
/// the intermediate and init processes libcontainer clones from it inherit it. Each of them
/// read the whole mount table for itself before (twice per container), milliseconds each on a
/// node with hundreds of overlays, a large share of a burst of pods' CPU. The daemon's list
/// (`MonitorConfig::cgroup_v1_mounts`) is taken at the monitor's start; without it the monitor
/// reads the table once here. A failed read is left to the processes that need it, which fail
/// as before.
fn know_cgroup_mounts() {
    static KNOWN: std::sync::Once = std::sync::Once::new();
    KNOWN.call_once(|| {
        let setup = libcgroups::common::get_cgroup_setup();
        if matches!(setup, Ok(libcgroups::common::CgroupSetup::Unified)) {
            return;
        }
        let cpu = libcgroups::v1::ControllerType::Cpu;
        let _ = libcgroups::v1::util::get_subsystem_mount_point(&cpu);
    });
}

fn child_main(job: Job, result: OwnedFd, log: &Path) -> ! {
    sys::reset_signals();
    // libcontainer writes the container's state to each OCI hook's stdin; a hook that does not
    // read it (most) would kill the worker with SIGPIPE. A handler, not SIG_IGN: the container's
    // own program still starts with SIGPIPE at its default (exec resets handled signals, not
    // ignored ones).
    let _ = sys::catch_signal(nix::sys::signal::Signal::SIGPIPE);
    init_tracing(log);
    let outcome = match job {
        Job::Create {
            req,
            stdio,
            console_socket,
        } => match &req.runtime {
            Some(runtime) if runtime.sandbox => by_pid(super::standin::create(
                runtime,
                &req,
                stdio.into(),
                console_socket.as_deref(),
            )),
            Some(runtime) => by_pid(oci_cli::create(
                runtime,
                &req.id,
                &req.bundle,
                &req.dir,
                stdio.into(),
                console_socket.as_deref(),
            )),
            None if req.restore.is_some() => by_pid(super::restore::restore(
                &req,
                [stdio.stdin, stdio.stdout, stdio.stderr],
            )),
            None => create(&req, stdio, console_socket),
        },
        Job::Exec {
            id,
            runtime_root,
            process,
            stdio,
            console_socket,
            runtime,
            dir,
        } => match runtime {
            Some(runtime) => by_pid(oci_cli::exec(
                &runtime,
                &id,
                &dir,
                &process,
                stdio.into(),
                console_socket.as_deref(),
            )),
            None => exec(&id, &runtime_root, &process, stdio, console_socket),
        },
        Job::Start { runtime, id, dir } => done(if runtime.sandbox {
            super::standin::start(&dir)
        } else {
            oci_cli::start(&runtime, &id, &dir)
        }),
        Job::KillInner {
            runtime,
            id,
            dir,
            inner,
        } => done(oci_cli::kill_inner(&runtime, &id, &dir, inner)),
        Job::Infra { runtime, id, dir } => {
            done(oci_cli::create_and_start(&runtime, &id, &dir, &dir))
        }
    };
    let mut line = serde_json::to_vec(&outcome).unwrap_or_default();
    line.push(b'\n');
    let _ = File::from(result).write_all(&line);
    sys::exit_now(0)
}

impl From<Stdio> for Streams {
    fn from(s: Stdio) -> Streams {
        Streams {
            stdin: s.stdin,
            stdout: s.stdout,
            stderr: s.stderr,
        }
    }
}

/// A binary's answer to a job that makes no process.
fn done(result: Result<(), String>) -> Outcome {
    match result {
        Ok(()) => Outcome::Done,
        Err(error) => Outcome::Failed {
            fault: classify(&error),
            error,
        },
    }
}

/// A binary's answer as a worker's: the pid, or its failure with what it logged.
fn by_pid(result: Result<i32, String>) -> Outcome {
    match result {
        Ok(pid) => Outcome::Pid(pid),
        Err(error) => Outcome::Failed {
            fault: classify(&error),
            error,
        },
    }
}

/// The reply to a worker that answered `Done` where a pid was due (a bug).
pub(in crate::monitor) fn no_pid() -> crate::monitor::Reply {
    crate::monitor::state::err(
        Fault::Failed,
        "the runtime worker made no process".to_owned(),
    )
}

/// libcontainer reports through `tracing`; its warnings and errors (and those of the
/// container's init, a clone of this process) land in the container's runtime log.
fn init_tracing(log: &Path) {
    let Ok(file) = File::options().create(true).append(true).open(log) else {
        return;
    };
    let _ = tracing_subscriber::fmt()
        .with_writer(std::sync::Mutex::new(file))
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .try_init();
}

fn create(req: &CreateRequest, stdio: Stdio, console_socket: Option<PathBuf>) -> Outcome {
    let builder = match ContainerBuilder::new(req.id.clone(), SyscallType::default())
        .with_root_path(&req.runtime_root)
    {
        Ok(b) => b,
        Err(e) => return failed(&e),
    };
    let built = builder
        .with_stdin(stdio.stdin)
        .with_stdout(stdio.stdout)
        .with_stderr(stdio.stderr)
        .with_console_socket(console_socket)
        .as_init(&req.bundle)
        .with_systemd(req.systemd)
        .with_detach(true)
        .build();
    match built {
        Ok(container) => match container.pid() {
            Some(pid) => match dev_as_runc_makes_it(pid.as_raw(), &req.bundle) {
                Ok(()) => Outcome::Pid(pid.as_raw()),
                Err(error) => Outcome::Failed {
                    fault: Fault::Failed,
                    error,
                },
            },
            None => Outcome::Failed {
                fault: Fault::Failed,
                error: "libcontainer created the container but reported no pid".into(),
            },
        },
        Err(e) => failed(&e),
    }
}

/// Where libcontainer's /dev differs from runc's, made runc's while the container's init
/// still waits for StartContainer: the directories a device node needs (/dev/net of
/// /dev/net/tun, and many for a privileged container's host devices) are 0755, not the 0777
/// libcontainer gives them (it clears the umask for the nodes). /dev is a tmpfs libcontainer
/// just made, and every name in it is opened relative to it without following links, so no
/// image or process can redirect this. (The link to /proc/kcore, /dev/core as runc names it,
/// is made by crust's libcontainer itself: renaming it from here failed with EOVERFLOW in a
/// pod with a user namespace, whose tmpfs does not map the node's root.)
fn dev_as_runc_makes_it(pid: i32, bundle: &Path) -> Result<(), String> {
    use rustix::fs::{Mode, OFlags};
    let spec_path = bundle.join("config.json");
    let spec = oci_spec::runtime::Spec::load(&spec_path)
        .map_err(|e| format!("reading {}: {e}", spec_path.display()))?;
    let mut dirs: Vec<PathBuf> = spec
        .linux()
        .as_ref()
        .and_then(|l| l.devices().as_ref())
        .into_iter()
        .flatten()
        .filter_map(|d| {
            d.path()
                .strip_prefix("/dev")
                .ok()?
                .parent()
                .map(Path::to_owned)
        })
        .flat_map(|dir| dir.ancestors().map(Path::to_owned).collect::<Vec<_>>())
        .filter(|dir| !dir.as_os_str().is_empty())
        .collect();
    dirs.sort();
    dirs.dedup();
    let dev_path = format!("/proc/{pid}/root/dev");
    let flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::RDONLY;
    let dev = rustix::fs::open(&dev_path, flags, Mode::empty())
        .map_err(|e| format!("opening {dev_path}: {e}"))?;
    for dir in dirs {
        let mut fd = rustix::fs::openat(&dev, ".", flags, Mode::empty())
            .map_err(|e| format!("opening {dev_path}: {e}"))?;
        for part in dir.components() {
            fd = rustix::fs::openat(&fd, part.as_os_str(), flags, Mode::empty())
                .map_err(|e| format!("opening {dev_path}/{}: {e}", dir.display()))?;
        }
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o755))
            .map_err(|e| format!("chmod {dev_path}/{}: {e}", dir.display()))?;
    }
    Ok(())
}

fn exec(
    id: &str,
    runtime_root: &Path,
    process: &oci_spec::runtime::Process,
    stdio: Stdio,
    console_socket: Option<PathBuf>,
) -> Outcome {
    // The tenant builder reads the process from a file; one per worker, gone afterwards.
    let file = runtime_root
        .join(id)
        .join(format!("exec-{}.json", std::process::id()));
    let mut process = process.clone();
    let (seccomp, init) = match container_facts(runtime_root, id) {
        Ok(facts) => facts,
        Err(error) => {
            return Outcome::Failed {
                fault: Fault::Failed,
                error,
            };
        }
    };
    let executor = seccomp.map(|seccomp| SeccompExecutor::new(seccomp, &mut process));
    if let Some(init) = init {
        join_named_systemd_of(init);
    }
    if let Err(e) = std::fs::write(&file, serde_json::to_vec(&process).unwrap_or_default()) {
        return Outcome::Failed {
            fault: Fault::Failed,
            error: format!("writing {}: {e}", file.display()),
        };
    }
    let built = ContainerBuilder::new(id.to_owned(), SyscallType::default())
        .with_root_path(runtime_root)
        .map(|b| {
            let b = b
                .with_stdin(stdio.stdin)
                .with_stdout(stdio.stdout)
                .with_stderr(stdio.stderr)
                .with_console_socket(console_socket);
            let b = match executor {
                Some(e) => b.with_executor(e),
                None => b,
            };
            b.as_tenant()
                .with_process(Some(&file))
                .with_detach(true)
                .build()
        });
    let _ = std::fs::remove_file(&file);
    match built {
        Ok(Ok(pid)) => Outcome::Pid(pid.as_raw()),
        Ok(Err(e)) | Err(e) => failed(&e),
    }
}

/// What the runtime logged as errors (the container's init reports its own failures there,
/// and libcontainer's error values often say less): the first few (the cause comes first, the
/// wrappers after it), each once, on one line.
pub fn logged_errors(log: &Path) -> String {
    const TAIL: u64 = 64 * 1024;
    let text = sys::read_tail(log, TAIL).unwrap_or_default();
    let mut seen: Vec<&str> = Vec::new();
    for line in text.lines().filter(|l| l.contains(" ERROR ")) {
        // `<time> ERROR <target>: <message>`
        let message = line
            .split_once(" ERROR ")
            .and_then(|(_, rest)| rest.split_once(": "))
            .map_or(line, |(_, m)| m)
            .trim();
        if !seen.contains(&message) {
            seen.push(message);
        }
    }
    seen.truncate(3);
    seen.join("; ")
}

/// The seccomp filter of the container's own process, from its bundle, and that process's
/// pid.
fn container_facts(
    runtime_root: &Path,
    id: &str,
) -> Result<(Option<oci_spec::runtime::LinuxSeccomp>, Option<i32>), String> {
    let container = libcontainer::container::Container::load(runtime_root.join(id))
        .map_err(|e| format!("loading container {id}: {}", render(&e)))?;
    let path = container.bundle().join("config.json");
    let spec = oci_spec::runtime::Spec::load(&path)
        .map_err(|e| format!("reading {}: {e}", path.display()))?;
    let seccomp = spec.linux().as_ref().and_then(|l| l.seccomp().clone());
    Ok((seccomp, container.pid().map(Pid::as_raw)))
}

/// runc moves an exec into each cgroup of its container, systemd's named v1 hierarchy among
/// them; libcontainer's tenant builder moves it into the controllers' only. So the worker
/// joins the container's own cgroup there first, and the process it clones starts in it.
/// Best effort: that hierarchy holds no limit, and on v2 hosts there is none.
fn join_named_systemd_of(init: i32) {
    let Ok(cgroups) = std::fs::read_to_string(format!("/proc/{init}/cgroup")) else {
        return;
    };
    let Some(path) = cgroups
        .lines()
        .find_map(|l| l.split_once(":name=systemd:").map(|(_, path)| path))
    else {
        return;
    };
    let procs = Path::new("/sys/fs/cgroup/systemd")
        .join(path.trim_start_matches('/'))
        .join("cgroup.procs");
    if let Err(e) = std::fs::write(&procs, std::process::id().to_string()) {
        tracing::warn!(path = %procs.display(), error = %e, "joining the container's name=systemd cgroup");
    }
}

fn failed(e: &libcontainer::error::LibcontainerError) -> Outcome {
    let error = render(e);
    Outcome::Failed {
        fault: classify(&error),
        error,
    }
}

/// The error and its causes on one line, each said once.
fn render(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = cause.source();
    }
    out
}

/// Whether libcontainer's failure is the request's fault: a command or working directory
/// that the image does not have is something the user fixes, not the node.
pub(in crate::monitor) fn classify(error: &str) -> Fault {
    // libcontainer's, then runc's and crun's words for a working directory that is not there.
    // runsc's, whose joining containers find their command at the start.
    const REQUEST_FAULTS: [&str; 6] = [
        "not found in $PATH",
        "error finding executable",
        "PATH environment variable is not set",
        "failed to chdir",
        "set in config.json failed",
        "chdir to `",
    ];
    // The container's init reports to the worker in text: the errno's own words are all
    // that is left of a full disk by then (as `Display` and in libcontainer's `Debug`).
    const NO_ROOM: [&str; 2] = ["No space left on device", "Disk quota exceeded"];
    if REQUEST_FAULTS.iter().any(|f| error.contains(f)) {
        Fault::Invalid
    } else if NO_ROOM.iter().any(|f| error.contains(f)) {
        Fault::NoRoom
    } else {
        Fault::Failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_command_is_the_request_s_fault() {
        assert_eq!(
            classify("failed to create container: executable 'nope' not found in $PATH"),
            Fault::Invalid
        );
        assert_eq!(classify("failed to mount proc: EPERM"), Fault::Failed);
        let runc = "runc create failed: unable to start container process: chdir to cwd \
                    (\"/nope\") set in config.json failed: no such file or directory";
        assert_eq!(classify(runc), Fault::Invalid);
        let crun = "chdir to `/nope`: No such file or directory";
        assert_eq!(classify(crun), Fault::Invalid);
        let runsc = "starting sub-container [nope]: error finding executable \"nope\" in PATH \
                     [/bin]: no such file or directory";
        assert_eq!(classify(runsc), Fault::Invalid);
        assert_eq!(
            classify(
                "mkdirat sys: Os { code: 28, kind: StorageFull, message: \"No space left on device\" }"
            ),
            Fault::NoRoom
        );
    }

    #[test]
    fn causes_are_chained_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] std::io::Error);
        let e = Outer(std::io::Error::other("inner"));
        assert_eq!(render(&e), "outer: inner");
    }
}
