//! The boundary between the streaming protocols and containers. `src/stream` knows nothing of
//! containers: it calls a `StreamBackend` with a plain request and live byte channels, and the
//! container runtime implements it.
//!
//! Contract for implementations:
//! - `validate_*` answer at RPC time (before a URL is handed out): `NotFound` for an unknown
//!   container, `NotRunning` for one that is not running, `Invalid` for a combination it
//!   cannot serve (e.g. attach with stdin to a container created without stdin). The protocol
//!   checks (an id is given, tty excludes stderr, one of stdin/stdout/stderr) are done before.
//! - `exec` runs `cmd` in the container and resolves with its exit code once it has exited
//!   and its output has been written to `io.stdout`/`io.stderr`. With `tty`, the process gets
//!   a terminal: stdout carries its output (there is no stderr) and each size from
//!   `io.resize` is applied to it.
//! - `attach` joins the container's own stdio and resolves when the container exits or the
//!   container's output ends; several attachers at once each see all output.
//! - Both must drop (or shut down) `io.stdout` and `io.stderr` when they resolve: the server
//!   forwards output until those writers are gone, then sends the exit status.
//! - `io.stdin` reaches EOF when the client closes its stdin (v5 close signal, SPDY FIN) or
//!   goes away; the process should then see EOF on its stdin (for attach: only when the
//!   container was created with `stdin_once`).
//! - Dropping the returned future means the client is gone or the session timed out: an exec
//!   must then kill its process (nothing may outlive its stream); an attach just detaches.

use std::future::Future;
use std::pin::Pin;

use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

/// Bytes from the client.
pub type Input = Box<dyn AsyncRead + Send + Unpin>;
/// Bytes to the client.
pub type Output = Box<dyn AsyncWrite + Send + Unpin>;
pub type BackendFuture<T> = Pin<Box<dyn Future<Output = Result<T, BackendError>> + Send>>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecRequest {
    pub container_id: String,
    pub cmd: Vec<String>,
    pub tty: bool,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachRequest {
    pub container_id: String,
    pub tty: bool,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
}

/// The live channels of one exec or attach. Each is present exactly when the request asked
/// for it (`resize` when it asked for a tty and the protocol can resize).
pub struct StreamIo {
    pub stdin: Option<Input>,
    pub stdout: Option<Output>,
    pub stderr: Option<Output>,
    pub resize: Option<mpsc::Receiver<TerminalSize>>,
}

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum BackendError {
    #[error("container {0:?} not found")]
    NotFound(String),
    #[error("container {0} is not running")]
    NotRunning(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Failed(String),
}

pub trait StreamBackend: Send + Sync + 'static {
    fn validate_exec(&self, req: &ExecRequest) -> Result<(), BackendError>;
    fn validate_attach(&self, req: &AttachRequest) -> Result<(), BackendError>;
    /// Runs the command; resolves with its exit code.
    fn exec(&self, req: ExecRequest, io: StreamIo) -> BackendFuture<i32>;
    /// Joins the container's stdio until it exits or its output ends.
    fn attach(&self, req: AttachRequest, io: StreamIo) -> BackendFuture<()>;
}

/// A terminal's size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct TerminalSize {
    #[serde(rename = "Width", alias = "width")]
    pub width: u16,
    #[serde(rename = "Height", alias = "height")]
    pub height: u16,
}
