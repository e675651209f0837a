//! Exec and Attach for a client on a stream (kubectl exec -it, crictl attach): the pod's
//! monitor starts the process (or joins the container) and hands over its stdio; bytes move
//! between the client's channels and those descriptors here. Every copy runs inside the
//! returned future, so dropping it (the client left) stops them all and closes the monitor
//! connection, which kills an exec's process.

use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::mpsc;

use crate::container::monitor_of;
use crate::container::{ContainerError, ContainerRecord, Containers, Phase};
use crate::monitor::{ExecStreamRequest, Reply, frame};

/// How long output may still come after an exec's process exited (a child it left behind
/// may hold its stdout open for good).
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(1);

pub type Input = Box<dyn AsyncRead + Send + Unpin>;
pub type Output = Box<dyn AsyncWrite + Send + Unpin>;

/// A client's channels: each present when the client asked for it.
pub struct ClientIo {
    pub stdin: Option<Input>,
    pub stdout: Option<Output>,
    pub stderr: Option<Output>,
    /// Terminal sizes as (rows, columns).
    pub resize: Option<mpsc::Receiver<(u16, u16)>>,
}

impl Containers {
    /// The container, if it is running (what Exec and Attach need before handing out a URL).
    pub fn running(&self, id: &str) -> Result<std::sync::Arc<ContainerRecord>, ContainerError> {
        let record = self.get(id)?;
        if record.phase != Phase::Running {
            return Err(ContainerError::State {
                id: record.id.clone(),
                state: record.state_name(),
                what: "exec in or attach to it (it is not running)",
            });
        }
        Ok(record)
    }

    /// Whether an attach can have what it asks for.
    pub fn check_attach(&self, id: &str, stdin: bool) -> Result<(), ContainerError> {
        let record = self.running(id)?;
        if stdin && !record.spec.stdin {
            return Err(ContainerError::Invalid(format!(
                "container {} was created without stdin: attach without stdin",
                record.id
            )));
        }
        Ok(())
    }

    /// Runs `cmd` in the container for a client; resolves with its exit code once it has
    /// exited and its output was written.
    pub async fn exec_interactive(
        &self,
        id: &str,
        cmd: Vec<String>,
        tty: bool,
        io: ClientIo,
    ) -> Result<i32, ContainerError> {
        let record = self.running(id)?;
        let entry = self.entry(&record.id)?.1;
        let template = self.exec_template(&record.id, &entry)?;
        let req = ExecStreamRequest {
            id: record.id.clone(),
            runtime_root: self.ctx.runtime_root.clone(),
            process: crate::oci::exec_process(&template, &cmd, tty),
            stdin: io.stdin.is_some(),
        };
        let pod = self.sandboxes.get(&record.pod_id)?;
        let monitor = monitor_of(&pod)?;
        let mut session = monitor
            .exec_session(req, self.ctx.monitor_timeout)
            .await
            .map_err(ContainerError::monitor(&record.id, "starting the command"))?;
        let fds = std::mem::take(&mut session.fds);
        let wait = async {
            session.exit_code().await.map_err(ContainerError::monitor(
                &record.id,
                "waiting for the command",
            ))
        };
        relay_exec(fds, tty, io, wait).await
    }

    /// Joins the container's stdio for a client until the container exits.
    pub async fn attach(&self, id: &str, tty: bool, io: ClientIo) -> Result<(), ContainerError> {
        let record = self.running(id)?;
        let pod = self.sandboxes.get(&record.pod_id)?;
        let monitor = monitor_of(&pod)?;
        let wants_stdin = io.stdin.is_some();
        let mut session = monitor
            .attach_session(&record.id, wants_stdin, self.ctx.monitor_timeout)
            .await
            .map_err(ContainerError::monitor(&record.id, "attaching"))?;
        let container_tty = matches!(session.reply, Reply::Attached { tty: true });
        let fd = session.fds.pop();
        let ClientIo {
            stdin,
            stdout,
            stderr,
            resize,
        } = io;
        // Open while attached (dropping it shuts it down, which the monitor takes for a
        // detach), shut down when the client's stdin ends.
        let mut writer = session.take_writer();
        let stdin_fd = fd_clone(&fd);
        let input = async {
            if stdin.is_none() {
                return;
            }
            feed_stdin(stdin, stdin_fd).await;
            // The client's stdin ended: the monitor closes the container's if it is
            // `stdin_once`.
            if let Some(w) = writer.as_mut() {
                let _ = w.shutdown().await;
            }
        };
        let sizes = apply_sizes(resize, fd.filter(|_| container_tty || tty));
        let output = async {
            let (mut stdout, mut stderr) = (stdout, stderr);
            while let Some((stream, data)) = session.next_frame().await {
                let out = if stream == frame::STDERR && !container_tty {
                    stderr.as_mut()
                } else {
                    stdout.as_mut()
                };
                if let Some(out) = out {
                    if out.write_all(&data).await.is_err() {
                        break;
                    }
                }
            }
            finish(stdout).await;
            finish(stderr).await;
        };
        tokio::pin!(output, input, sizes);
        let (mut in_done, mut sizes_done) = (false, false);
        // The output ends with the container; stdin and resizes only matter until then.
        loop {
            tokio::select! {
                () = &mut output => break,
                () = &mut input, if !in_done => in_done = true,
                () = &mut sizes, if !sizes_done => sizes_done = true,
            }
        }
        Ok(())
    }
}

/// Moves an exec's bytes until its process exited and its output ended (or the drain time
/// passed), then reports the exit code.
async fn relay_exec(
    mut fds: Vec<OwnedFd>,
    tty: bool,
    io: ClientIo,
    wait: impl Future<Output = Result<i32, ContainerError>>,
) -> Result<i32, ContainerError> {
    let ClientIo {
        stdin,
        stdout,
        stderr,
        resize,
    } = io;
    let io_err = |e: std::io::Error| ContainerError::Io {
        what: "relaying the command's stdio",
        path: "exec".into(),
        source: e,
    };
    let (stdin_fd, stdout_fd, stderr_fd, master) = if tty {
        let master = fds
            .pop()
            .ok_or_else(|| io_err(std::io::Error::other("no tty")))?;
        let (input, output) = (
            master.try_clone().map_err(io_err)?,
            master.try_clone().map_err(io_err)?,
        );
        (Some(input), Some(output), None, Some(master))
    } else {
        let stderr_fd = fds.pop();
        let stdout_fd = fds.pop();
        (fds.pop(), stdout_fd, stderr_fd, None)
    };
    let input = feed_stdin(stdin, stdin_fd);
    let sizes = apply_sizes(resize, master);
    let outputs = async {
        tokio::join!(drain(stdout_fd, stdout), drain(stderr_fd, stderr));
    };
    let drain_deadline = tokio::time::sleep(Duration::from_secs(365 * 24 * 3600));
    tokio::pin!(wait, input, sizes, outputs, drain_deadline);
    let (mut code, mut out_done, mut in_done, mut sizes_done) = (None, false, false, false);
    // Everything moves at once: a process blocked on a full stdout pipe must be drained to
    // exit. Once it exited, output may come for a little while more.
    loop {
        tokio::select! {
            c = &mut wait, if code.is_none() => {
                code = Some(c?);
                drain_deadline.as_mut().reset(tokio::time::Instant::now() + DRAIN_AFTER_EXIT);
            }
            () = &mut outputs, if !out_done => out_done = true,
            () = &mut input, if !in_done => in_done = true,
            () = &mut sizes, if !sizes_done => sizes_done = true,
            () = &mut drain_deadline, if code.is_some() => break,
        }
        if code.is_some() && out_done {
            break;
        }
    }
    code.ok_or_else(|| {
        io_err(std::io::Error::other(
            "the command ended without an exit code",
        ))
    })
}

/// Copies the client's stdin into `fd`, then closes it (the process sees EOF).
async fn feed_stdin(stdin: Option<Input>, fd: Option<OwnedFd>) {
    let (Some(mut stdin), Some(fd)) = (stdin, fd) else {
        return;
    };
    let Ok(mut sink) = FdIo::new(fd) else { return };
    let _ = tokio::io::copy(&mut stdin, &mut sink).await;
    let _ = sink.shutdown().await;
}

/// Applies each terminal size from the client to the tty behind `fd`.
async fn apply_sizes(resize: Option<mpsc::Receiver<(u16, u16)>>, fd: Option<OwnedFd>) {
    let (Some(mut resize), Some(fd)) = (resize, fd) else {
        return;
    };
    while let Some((rows, cols)) = resize.recv().await {
        let _ = crate::sys::set_window_size(&fd, rows, cols);
    }
}

/// Copies `fd` to the client until its end; a read error (a tty whose last writer is gone)
/// is an end too.
async fn drain(fd: Option<OwnedFd>, out: Option<Output>) {
    let (Some(fd), Some(mut out)) = (fd, out) else {
        return;
    };
    let Ok(mut source) = FdIo::new(fd) else {
        return;
    };
    let _ = tokio::io::copy(&mut source, &mut out).await;
    finish(Some(out)).await;
}

fn fd_clone(fd: &Option<OwnedFd>) -> Option<OwnedFd> {
    fd.as_ref().and_then(|f| f.try_clone().ok())
}

async fn finish(out: Option<Output>) {
    if let Some(mut out) = out {
        let _ = out.flush().await;
        let _ = out.shutdown().await;
    }
}

/// A pipe end or tty master as an async reader and writer.
struct FdIo(AsyncFd<OwnedFd>);

impl FdIo {
    fn new(fd: OwnedFd) -> std::io::Result<FdIo> {
        set_nonblocking(&fd)?;
        Ok(FdIo(crate::sys::async_fd(fd)?))
    }
}

fn set_nonblocking(fd: &impl AsFd) -> std::io::Result<()> {
    use rustix::fs::{OFlags, fcntl_getfl, fcntl_setfl};
    let flags = fcntl_getfl(fd)?;
    fcntl_setfl(fd, flags | OFlags::NONBLOCK)?;
    Ok(())
}

impl AsyncRead for FdIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        loop {
            let mut guard = ready!(self.0.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match guard.try_io(|fd| Ok(rustix::io::read(fd.get_ref(), &mut *unfilled)?)) {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                // A tty master reads EIO once the last process holding the tty exited.
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Poll::Ready(Ok(())),
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for FdIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        loop {
            let mut guard = ready!(self.0.poll_write_ready(cx))?;
            match guard.try_io(|fd| Ok(rustix::io::write(fd.get_ref(), data)?)) {
                Ok(result) => return Poll::Ready(result),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
