//! Streaming Exec and Attach in the monitor. The client's bytes never pass through here: the
//! monitor hands the daemon the descriptors themselves (a tty master, or pipe ends) over the
//! request's connection (SCM_RIGHTS), and the daemon moves the bytes. Attach output is the
//! exception, since the monitor already reads the container's output for its log: attached
//! clients get a copy as frames on their connection.
//!
//! A connection's end is the session's end: an exec's process is killed when its client goes
//! (nothing may outlive its stream), an attacher simply detaches (with `stdin_once`, the first
//! attacher with stdin closes the container's stdin as it goes).

use std::os::fd::{AsRawFd, OwnedFd};
use std::rc::Rc;

use nix::sys::wait::WaitStatus;
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use super::worker::{self, Job, Outcome, Stdio};
use crate::monitor::state::{Monitor, err, failed_as_logged};
use crate::monitor::{ExecStreamRequest, Fault, RUNTIME_LOG, Reply, frame};

/// Output chunks an attacher may be behind by before it is detached.
const ATTACH_BACKLOG: usize = 256;

pub async fn exec(
    monitor: &Rc<Monitor>,
    req: ExecStreamRequest,
    mut read: OwnedReadHalf,
    mut write: OwnedWriteHalf,
) {
    let (dir, runtime) = match running_container_dir(monitor, &req.id) {
        Ok(d) => d,
        Err(reply) => return send(&mut write, &reply, &[]).await,
    };
    let tty = req.process.terminal().unwrap_or(false);
    let prepared = if tty {
        console(&dir).map(|(stdio, listener, path)| (stdio, Theirs::Console(listener), Some(path)))
    } else {
        pipes(req.stdin).map(|(stdio, ours)| (stdio, Theirs::Pipes(ours), None))
    };
    let (stdio, ours, console_socket) = match prepared {
        Ok(p) => p,
        Err(e) => {
            let reply = err(Fault::Failed, format!("setting up the exec's stdio: {e}"));
            return send(&mut write, &reply, &[]).await;
        }
    };
    let since = monitor.reap_seq();
    let job = Job::Exec {
        id: req.id.clone(),
        runtime_root: req.runtime_root.clone(),
        process: Box::new(req.process.clone()),
        stdio,
        console_socket: console_socket.clone(),
        runtime: runtime.clone(),
        dir: dir.clone(),
    };
    let spawned = match worker::spawn(job, &dir.join(RUNTIME_LOG)) {
        Ok(s) => s,
        Err(e) => {
            let reply = err(Fault::Failed, format!("starting a runtime worker: {e}"));
            return send(&mut write, &reply, &[]).await;
        }
    };
    drop(monitor.watch(spawned.pid, since));
    let (outcome, fds) = match ours {
        Theirs::Console(listener) => {
            let (outcome, master) =
                tokio::join!(spawned.outcome(), worker::receive_console(Some(listener)));
            (outcome, master.into_iter().collect::<Vec<_>>())
        }
        Theirs::Pipes(fds) => (spawned.outcome().await, fds),
    };
    if let Some(path) = &console_socket {
        let _ = std::fs::remove_file(path);
    }
    let pid = match outcome {
        Outcome::Pid(pid) => Pid::from_raw(pid),
        Outcome::Failed { fault, error } => {
            let logged = worker::logged_errors(&dir.join(RUNTIME_LOG));
            let reply = failed_as_logged(fault, error, &logged);
            return send(&mut write, &reply, &[]).await;
        }
        Outcome::Done => return send(&mut write, &worker::no_pid(), &[]).await,
    };
    let exited = monitor.watch(pid, since);
    send(&mut write, &Reply::Streaming { pid: pid.as_raw() }, &fds).await;
    drop(fds);
    // The client is gone when its connection reads end (it sends nothing more).
    let mut probe = [0u8; 1];
    let status = tokio::select! {
        status = exited => status.ok(),
        _ = read.read(&mut probe) => {
            super::exec::kill(monitor, runtime.as_ref(), &req.id, &dir, pid).await;
            super::exec::ended(&dir, pid);
            return;
        }
    };
    super::exec::ended(&dir, pid);
    let exit_code = match status {
        Some(WaitStatus::Exited(_, code)) => code,
        Some(WaitStatus::Signaled(_, sig, _)) => 128 + sig as i32,
        _ => -1,
    };
    send(&mut write, &Reply::Exited { exit_code }, &[]).await;
}

/// What the monitor keeps of an exec's stdio until it hands it over.
enum Theirs {
    Console(tokio::net::UnixListener),
    Pipes(Vec<OwnedFd>),
}

/// The container's directory and the binary that runs it (`None`: libcontainer), if it is
/// running.
fn running_container_dir(
    monitor: &Monitor,
    id: &str,
) -> Result<(std::path::PathBuf, Option<crate::model::OciRuntime>), Reply> {
    let workloads = monitor.workloads.borrow();
    match workloads.get(id) {
        None => Err(err(
            Fault::NotFound,
            format!("this pod's monitor has no container {id}"),
        )),
        Some(w) if !w.is_alive() => {
            Err(err(Fault::State, format!("container {id} is not running")))
        }
        Some(w) => Ok((w.dir().to_owned(), w.runtime().cloned())),
    }
}

/// A console socket for the exec's tty (in the container's directory, one per exec).
fn console(
    dir: &std::path::Path,
) -> std::io::Result<(Stdio, tokio::net::UnixListener, std::path::PathBuf)> {
    let name = format!(
        "exec-console-{}.sock",
        crate::model::new_id().get(..16).unwrap_or("0")
    );
    let path = dir.join(&name);
    let (_dir, short) = crate::monitor::short_socket_path(dir, &name)?;
    let listener = std::os::unix::net::UnixListener::bind(short)?;
    // The socket file is not needed once the init connected; the listener keeps it alive.
    listener.set_nonblocking(true)?;
    let null = worker::dev_null;
    let stdio = Stdio {
        stdin: null()?,
        stdout: null()?,
        stderr: null()?,
    };
    Ok((stdio, tokio::net::UnixListener::from_std(listener)?, path))
}

/// Pipes for an exec without a tty: the process's ends, and the ones handed to the daemon
/// (stdin's write end when asked for, stdout's and stderr's read ends).
fn pipes(stdin: bool) -> std::io::Result<(Stdio, Vec<OwnedFd>)> {
    let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC);
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let mut ours = Vec::new();
    let theirs_stdin: OwnedFd = if stdin {
        let (r, w) = pipe()?;
        ours.push(w);
        r
    } else {
        std::fs::File::open("/dev/null")?.into()
    };
    ours.push(out_r);
    ours.push(err_r);
    let stdio = Stdio {
        stdin: theirs_stdin,
        stdout: out_w,
        stderr: err_w,
    };
    Ok((stdio, ours))
}

pub async fn attach(
    monitor: &Rc<Monitor>,
    id: &str,
    with_stdin: bool,
    mut read: OwnedReadHalf,
    mut write: OwnedWriteHalf,
) {
    let (tx, mut rx) = tokio::sync::mpsc::channel(ATTACH_BACKLOG);
    let joined = {
        let workloads = monitor.workloads.borrow();
        workloads.get(id).filter(|w| w.is_alive()).map(|w| {
            // A tty's master serves stdin and resizes; without a tty, stdin's write end.
            let fd = if with_stdin || w.tty() {
                w.stdin.as_ref().and_then(|f| f.try_clone().ok())
            } else {
                None
            };
            w.attachers.borrow_mut().push(tx);
            (w.tty(), w.stdin_once(), fd)
        })
    };
    let Some((tty, stdin_once, fd)) = joined else {
        let reply = err(Fault::State, format!("container {id} is not running"));
        return send(&mut write, &reply, &[]).await;
    };
    let fds: Vec<OwnedFd> = fd.into_iter().collect();
    send(&mut write, &Reply::Attached { tty }, &fds).await;
    drop(fds);
    let mut probe = [0u8; 1];
    // With stdin, the client shuts its side down when its stdin ends, and keeps reading; an
    // attacher that is simply gone is noticed when writing to it fails.
    let mut input_open = true;
    loop {
        tokio::select! {
            chunk = rx.recv() => match chunk {
                Some((stream, data)) => {
                    if write.write_all(&frame::encode(stream, &data)).await.is_err() {
                        break;
                    }
                }
                // The container exited and its output is all out.
                None => break,
            },
            _ = read.read(&mut probe), if input_open => {
                input_open = false;
                if with_stdin && stdin_once {
                    close_stdin(monitor, id);
                }
                if !with_stdin {
                    break;
                }
            }
        }
    }
    if with_stdin && stdin_once {
        close_stdin(monitor, id);
    }
}

/// The first attacher with stdin is done with it: the container's stdin closes.
fn close_stdin(monitor: &Monitor, id: &str) {
    if let Some(w) = monitor.workloads.borrow_mut().get_mut(id) {
        w.stdin = None;
    }
}

/// Writes one reply line, with descriptors attached to its first byte.
async fn send(write: &mut OwnedWriteHalf, reply: &Reply, fds: &[OwnedFd]) {
    let mut line = serde_json::to_vec(reply).unwrap_or_default();
    line.push(b'\n');
    if fds.is_empty() {
        let _ = write.write_all(&line).await;
        return;
    }
    let raw: Vec<std::os::fd::RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let stream: &tokio::net::UnixStream = write.as_ref();
    let sent = loop {
        if stream.writable().await.is_err() {
            return;
        }
        match stream.try_io(tokio::io::Interest::WRITABLE, || {
            crate::sys::send_with_fds(stream, &line, &raw)
        }) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            other => break other,
        }
    };
    if let Ok(n) = sent {
        if n < line.len() {
            let _ = write.write_all(&line[n..]).await;
        }
    }
}
