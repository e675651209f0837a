//! The stand-in: the host process that is a container of a sandboxing runtime (gVisor's
//! `runsc`, `sandbox = true`) to the monitor, whose container processes run inside the
//! runtime's sandbox and are no host processes the monitor could reap or signal.
//!
//! A runtime worker forks it once `<runtime> create` has made the container; it holds the
//! container's standard streams, since runsc gives a pod's second and later containers the
//! streams of `runsc start`, not of `create`. Like a libcontainer init it waits for the start
//! (a connection on `<dir>/start.sock`), runs `<runtime> start` with those streams and answers
//! how it went, then drops them and waits for the container through `<runtime> wait`, and
//! exits with the container's exit code. So the monitor reaps, records and relays it exactly
//! as any container's process.
//!
//! Signals the monitor sends it are forwarded with `<runtime> kill`; SIGKILL, which no process
//! can catch, comes as [`KILL_ALL`] and becomes `kill --all <id> KILL`.

use std::io::{BufRead, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::Signal;
use nix::sys::signalfd::SignalFd;

use crate::model::OciRuntime;
use crate::monitor::oci_cli::{self, Streams};
use crate::sys::{self, ForkResult};

/// The socket a start connects to, in the container's directory.
pub const START_SOCKET: &str = "start.sock";

/// What the monitor sends a stand-in for SIGKILL (which would end the stand-in, not the
/// container): the first real-time signal, which nothing else sends it.
pub fn kill_all() -> i32 {
    libc::SIGRTMIN()
}

/// The exit code of a container whose sandbox could not say how it ended (`runsc wait`
/// failed: the sandbox died).
const UNKNOWN_EXIT: i32 = 255;

/// In the runtime worker: `<runtime> create` of the container, then its stand-in, whose pid
/// is the container's to the monitor. The container is deleted again when the stand-in
/// cannot be made.
pub fn create(
    runtime: &OciRuntime,
    req: &crate::monitor::CreateRequest,
    stdio: Streams,
    console_socket: Option<&Path>,
) -> Result<i32, String> {
    let unused = Streams::null()?;
    oci_cli::create(
        runtime,
        &req.id,
        &req.bundle,
        &req.dir,
        unused,
        console_socket,
    )?;
    spawn(runtime, &req.id, &req.dir, stdio).inspect_err(|_| {
        let _ = oci_cli::delete(runtime, &req.id, &req.dir.join(crate::monitor::RUNTIME_LOG));
    })
}

/// Forks the stand-in of container `id`, which `runtime` created; answers its pid. The
/// streams are the stand-in's to hand to `runtime start`.
fn spawn(runtime: &OciRuntime, id: &str, dir: &Path, stdio: Streams) -> Result<i32, String> {
    let path = dir.join(START_SOCKET);
    let _ = std::fs::remove_file(&path);
    let (_handle, short) = crate::monitor::short_socket_path(dir, START_SOCKET)
        .map_err(|e| format!("opening {}: {e}", dir.display()))?;
    let listener =
        UnixListener::bind(&short).map_err(|e| format!("binding {}: {e}", path.display()))?;
    match sys::fork_single_threaded().map_err(|e| format!("forking the stand-in: {e}"))? {
        ForkResult::Child => {
            let code = stand_in(runtime, id, dir, stdio, listener);
            sys::exit_now(code)
        }
        ForkResult::Parent { child } => Ok(child.as_raw()),
    }
}

/// Asks the stand-in in `dir` to start its container: `Ok` once `<runtime> start` succeeded.
pub fn start(dir: &Path) -> Result<(), String> {
    let path = dir.join(START_SOCKET);
    let (_handle, short) = crate::monitor::short_socket_path(dir, START_SOCKET)
        .map_err(|e| format!("opening {}: {e}", dir.display()))?;
    let mut stream = std::os::unix::net::UnixStream::connect(&short).map_err(|e| {
        format!(
            "reaching the container's stand-in at {}: {e}",
            path.display()
        )
    })?;
    let _ = std::fs::remove_file(&path);
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .map_err(|e| format!("reading the stand-in's answer: {e}"))?;
    match answer.trim() {
        "ok" => Ok(()),
        "" => Err("the container's stand-in ended without an answer".into()),
        why => Err(why.to_owned()),
    }
}

/// The stand-in's life; answers its exit code.
fn stand_in(
    runtime: &OciRuntime,
    id: &str,
    dir: &Path,
    stdio: Streams,
    listener: UnixListener,
) -> i32 {
    // The monitor's descriptors (other containers' pipes, its sockets) are no business of a
    // process that lives as long as the container: a copy held here would keep a stdin open
    // that the monitor closed. Kept: the streams as 0-2, the listener as 3.
    let kept = sys::keep_only_fds([stdio.stdin, stdio.stdout, stdio.stderr], listener.into());
    let listener = match kept {
        Ok(fd) => UnixListener::from(fd),
        Err(e) => {
            note(
                dir,
                &format!("stand-in of {id}: arranging its descriptors: {e}"),
            );
            return UNKNOWN_EXIT;
        }
    };
    let mut forwarded: Vec<i32> = [
        Signal::SIGHUP,
        Signal::SIGINT,
        Signal::SIGQUIT,
        Signal::SIGTERM,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGALRM,
        Signal::SIGWINCH,
    ]
    .into_iter()
    .map(|s| s as i32)
    .collect();
    forwarded.push(kill_all());
    let signals = match sys::block_into_signalfd(&forwarded) {
        Ok(s) => s,
        Err(e) => {
            note(dir, &format!("stand-in of {id}: blocking signals: {e}"));
            return UNKNOWN_EXIT;
        }
    };
    match await_start(runtime, id, dir, &listener, &signals) {
        Ok(()) => {}
        Err(code) => return code,
    }
    drop(listener);
    if let Err(e) = streams_to_null() {
        note(dir, &format!("stand-in of {id}: dropping the streams: {e}"));
    }
    wait_for_exit(runtime, id, dir, &signals)
}

/// Waits for the start, or for a signal that ends the container before it ran.
fn await_start(
    runtime: &OciRuntime,
    id: &str,
    dir: &Path,
    listener: &UnixListener,
    signals: &SignalFd,
) -> Result<(), i32> {
    loop {
        let mut fds = [
            PollFd::new(listener.as_fd(), PollFlags::POLLIN),
            PollFd::new(signals.as_fd(), PollFlags::POLLIN),
        ];
        if poll(&mut fds, PollTimeout::NONE).is_err() {
            continue;
        }
        if let Some(signo) = next_signal(signals) {
            // Nothing runs yet to take it: a signal that ends a process ends the container.
            if signo == kill_all() || ends_a_process(signo) {
                return Err(128 + signo_kill(signo));
            }
            continue;
        }
        let Ok((mut stream, _)) = listener.accept() else {
            continue;
        };
        let started = run_start(runtime, id, dir);
        let answer = match &started {
            Ok(()) => "ok\n".to_owned(),
            Err(why) => format!("{why}\n"),
        };
        let _ = stream.write_all(answer.as_bytes());
        // As runc and runsc end a start that failed.
        return started.map_err(|_| crate::monitor::START_FAILED_CODE);
    }
}

/// SIGKILL's number for the stand-in's own kill signal, the signal's own otherwise.
fn signo_kill(signo: i32) -> i32 {
    if signo == kill_all() {
        Signal::SIGKILL as i32
    } else {
        signo
    }
}

fn ends_a_process(signo: i32) -> bool {
    !matches!(Signal::try_from(signo), Ok(Signal::SIGWINCH) | Err(_))
}

/// `<runtime> start <id>` with the container's streams (this process's 0, 1 and 2).
fn run_start(runtime: &OciRuntime, id: &str, dir: &Path) -> Result<(), String> {
    let dup = |fd: std::os::fd::BorrowedFd<'_>| -> Result<OwnedFd, String> {
        fd.try_clone_to_owned()
            .map_err(|e| format!("duplicating the container's streams: {e}"))
    };
    let streams = Streams {
        stdin: dup(std::io::stdin().as_fd())?,
        stdout: dup(std::io::stdout().as_fd())?,
        stderr: dup(std::io::stderr().as_fd())?,
    };
    let args: [&std::ffi::OsStr; 2] = ["start".as_ref(), id.as_ref()];
    oci_cli::run(
        runtime,
        &dir.join(crate::monitor::RUNTIME_LOG),
        &args,
        Some(streams),
    )
}

/// Puts /dev/null in place of the container's streams: the sandbox holds its own copies, and
/// the monitor's relays see their end when the container's processes are gone.
fn streams_to_null() -> Result<(), String> {
    let null = Streams::null()?;
    for (fd, target) in [(null.stdin, 0), (null.stdout, 1), (null.stderr, 2)] {
        nix::unistd::dup2(fd.as_raw_fd(), target).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Runs `<runtime> wait <id>`, forwarding signals meanwhile; answers the container's exit
/// code.
fn wait_for_exit(runtime: &OciRuntime, id: &str, dir: &Path, signals: &SignalFd) -> i32 {
    let log = dir.join(crate::monitor::RUNTIME_LOG);
    let child = Command::new(&runtime.path)
        .args(runtime.global_args())
        .arg("--log")
        .arg(&log)
        .arg("--log-format")
        .arg("json")
        .args(["wait", id])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            note(
                dir,
                &format!("running {} wait {id}: {e}", runtime.path.display()),
            );
            return UNKNOWN_EXIT;
        }
    };
    let Some(out) = child.stdout.take() else {
        return UNKNOWN_EXIT;
    };
    loop {
        let mut fds = [
            PollFd::new(out.as_fd(), PollFlags::POLLIN),
            PollFd::new(signals.as_fd(), PollFlags::POLLIN),
        ];
        if poll(&mut fds, PollTimeout::NONE).is_err() {
            continue;
        }
        let answered = fds[0].revents().is_some_and(|r| !r.is_empty());
        if let Some(signo) = next_signal(signals) {
            forward(runtime, id, dir, signo);
        }
        if answered {
            break;
        }
    }
    let mut line = String::new();
    let _ = std::io::BufReader::new(out).read_line(&mut line);
    let _ = child.wait();
    match exit_status(&line) {
        Some(code) => code,
        None => {
            let why = oci_cli::logged_errors(&log, 0);
            note(
                dir,
                &format!(
                    "{} wait {id} told no exit status: {why}",
                    runtime.path.display()
                ),
            );
            UNKNOWN_EXIT
        }
    }
}

/// `{"id":"...","exitStatus":N}`, runsc's answer to `wait`.
fn exit_status(line: &str) -> Option<i32> {
    let doc: serde_json::Value = serde_json::from_str(line.trim()).ok()?;
    doc["exitStatus"]
        .as_i64()
        .and_then(|c| i32::try_from(c).ok())
}

fn next_signal(signals: &SignalFd) -> Option<i32> {
    match signals.read_signal() {
        Ok(Some(info)) => i32::try_from(info.ssi_signo).ok(),
        _ => None,
    }
}

/// `<runtime> kill <id> <signal>`, or `kill --all <id> KILL` for [`kill_all`].
fn forward(runtime: &OciRuntime, id: &str, dir: &Path, signo: i32) {
    let (all, signo) = if signo == kill_all() {
        (true, Signal::SIGKILL as i32)
    } else {
        (false, signo)
    };
    let number = signo.to_string();
    let mut args: Vec<&std::ffi::OsStr> = vec!["kill".as_ref()];
    if all {
        args.push("--all".as_ref());
    }
    args.push(id.as_ref());
    args.push(number.as_ref());
    let log = dir.join(crate::monitor::RUNTIME_LOG);
    if let Err(e) = oci_cli::run(runtime, &log, &args, None) {
        note(dir, &e);
    }
}

/// Appends an error of the stand-in's own to the runtime log, in the binary's JSON format.
fn note(dir: &Path, msg: &str) {
    let path: PathBuf = dir.join(crate::monitor::RUNTIME_LOG);
    let line = serde_json::json!({ "level": "error", "msg": msg });
    if let Ok(mut f) = std::fs::File::options()
        .append(true)
        .create(true)
        .open(path)
    {
        let _ = writeln!(f, "{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_status_is_runsc_s_answer() {
        assert_eq!(
            exit_status("{\"id\":\"c1\",\"exitStatus\":137}\n"),
            Some(137)
        );
        assert_eq!(exit_status("{\"id\":\"c1\",\"exitStatus\":0}"), Some(0));
        assert_eq!(exit_status(""), None);
        assert_eq!(exit_status("loading container: not found"), None);
    }
}
