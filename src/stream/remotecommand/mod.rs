//! Exec and attach (Kubernetes' "remote command"): the client's stdin, stdout, stderr, error
//! and resize streams, over SPDY (`spdy`: one stream each, told apart by their `streamType`
//! header) or WebSocket (`websocket`: channels of one connection), joined to a
//! `StreamBackend` call through in-memory pipes. The backend sees only readers, writers and
//! sizes; the transports see only bytes.
//!
//! Order at the end of a command: the backend resolves and drops its writers, the output
//! pipes drain to the client, then the exit status goes on the error stream and the
//! connection closes. A client that goes away first drops the backend's future.

mod resize;
pub mod spdy;
mod status;
pub mod websocket;

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, DuplexStream};
use tokio::sync::mpsc;

pub use super::backend::TerminalSize;
pub use resize::{ResizeDecoder, ResizeError};
pub use status::{Outcome, error_stream_payload, status_json};

use super::backend::{AttachRequest, ExecRequest, StreamBackend, StreamIo};

/// Bytes an output or input pipe holds before its writer waits.
const PIPE_BYTES: usize = 64 * 1024;
/// How long output may take to drain after the command ended before the status is sent anyway
/// (a backend that leaks a writer must not hold the session open).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// SPDY protocols for exec and attach, newest first.
pub const SPDY_PROTOCOLS: &[&str] = &[
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
];

/// Which streams a command uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

#[derive(Debug, Clone)]
pub enum Command {
    Exec(ExecRequest),
    Attach(AttachRequest),
}

impl Command {
    pub fn options(&self) -> Options {
        match self {
            Command::Exec(r) => Options {
                stdin: r.stdin,
                stdout: r.stdout,
                stderr: r.stderr && !r.tty,
                tty: r.tty,
            },
            Command::Attach(r) => Options {
                stdin: r.stdin,
                stdout: r.stdout,
                stderr: r.stderr && !r.tty,
                tty: r.tty,
            },
        }
    }

    /// Runs the command on `backend`.
    pub async fn run(self, backend: Arc<dyn StreamBackend>, io: StreamIo) -> Outcome {
        match self {
            Command::Exec(r) => match backend.exec(r, io).await {
                Ok(code) => Outcome::from_exit_code(code),
                Err(e) => Outcome::Error(e.to_string()),
            },
            Command::Attach(r) => match backend.attach(r, io).await {
                Ok(()) => Outcome::Success,
                Err(e) => Outcome::Error(e.to_string()),
            },
        }
    }
}

/// The pipes between a transport and the backend.
pub struct Pipes {
    /// What the backend gets.
    pub io: StreamIo,
    /// The transport writes the client's stdin here (drop it for EOF).
    pub stdin: Option<DuplexStream>,
    /// The transport reads the command's output here, to EOF.
    pub stdout: Option<DuplexStream>,
    pub stderr: Option<DuplexStream>,
    /// The transport sends terminal sizes here.
    pub resize: Option<mpsc::Sender<TerminalSize>>,
}

impl Pipes {
    pub fn new(opts: Options, resize: bool) -> Pipes {
        let pair = |on: bool| on.then(|| tokio::io::duplex(PIPE_BYTES));
        let stdin = pair(opts.stdin);
        let stdout = pair(opts.stdout);
        let stderr = pair(opts.stderr);
        let (resize_tx, resize_rx) = match resize && opts.tty {
            true => {
                let (tx, rx) = mpsc::channel(8);
                (Some(tx), Some(rx))
            }
            false => (None, None),
        };
        let (stdin_backend, stdin_transport) = stdin.unzip();
        let (stdout_backend, stdout_transport) = stdout.unzip();
        let (stderr_backend, stderr_transport) = stderr.unzip();
        Pipes {
            io: StreamIo {
                stdin: stdin_backend.map(|s| Box::new(s) as _),
                stdout: stdout_backend.map(|s| Box::new(s) as _),
                stderr: stderr_backend.map(|s| Box::new(s) as _),
                resize: resize_rx,
            },
            stdin: stdin_transport,
            stdout: stdout_transport,
            stderr: stderr_transport,
            resize: resize_tx,
        }
    }
}

/// Reads an output pipe to EOF, handing each chunk to `send`; stops early when `send` fails.
pub async fn drain_output<F, Fut>(mut pipe: DuplexStream, mut send: F) -> std::io::Result<()>
where
    F: FnMut(bytes::Bytes) -> Fut,
    Fut: Future<Output = std::io::Result<()>>,
{
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        let n = pipe.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        send(bytes::Bytes::copy_from_slice(&buf[..n])).await?;
    }
}

/// Waits for the output pumps to finish, at most `DRAIN_TIMEOUT`; then stops them.
pub async fn await_drained(pumps: Vec<tokio::task::JoinHandle<()>>) {
    let aborts: Vec<_> = pumps.iter().map(|p| p.abort_handle()).collect();
    let all = futures_util::future::join_all(pumps);
    if tokio::time::timeout(DRAIN_TIMEOUT, all).await.is_err() {
        tracing::warn!("command output still open {DRAIN_TIMEOUT:?} after it ended");
        aborts.iter().for_each(tokio::task::AbortHandle::abort);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tty_drops_stderr_and_brings_resize() {
        let c = Command::Exec(ExecRequest {
            container_id: "c".into(),
            cmd: vec![],
            tty: true,
            stdin: true,
            stdout: true,
            stderr: true,
        });
        let o = c.options();
        assert!(o.tty && o.stdin && o.stdout && !o.stderr);
        let p = Pipes::new(o, true);
        assert!(p.io.stderr.is_none() && p.io.resize.is_some() && p.stdin.is_some());
        let p = Pipes::new(o, false);
        assert!(p.io.resize.is_none());
    }
}
