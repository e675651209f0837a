//! The streaming server: exec, attach and port-forward over SPDY/3.1 and WebSocket, as
//! kubelet, kubectl and crictl speak them.
//!
//! The CRI Exec, Attach and PortForward RPCs call `Streams`, which validates the request,
//! keeps it under a one-shot token (`sessions`) and answers the URL to use. The HTTP server
//! (`server`) takes the token out of the first request naming it, upgrades the connection and
//! runs the protocol:
//! - `spdy`: SPDY/3.1 codecs and connection state (crust's own);
//! - `channel`: the WebSocket channel protocols (`v5.channel.k8s.io` ...);
//! - `remotecommand`: exec and attach on either transport, joined to a `StreamBackend`;
//! - `portforward` and `tunnel`: port forwarding over SPDY, direct or inside WebSocket.
//!
//! Containers are behind `backend::StreamBackend`; nothing here knows how they run. Until a
//! backend is given, Exec and Attach answer Unimplemented; port-forward needs only the pod's
//! network namespace.

pub mod backend;
pub mod channel;
mod idle;
pub mod portforward;
pub mod remotecommand;
pub mod server;
pub mod sessions;
pub mod spdy;
pub mod tunnel;

use std::sync::Arc;
use std::time::Duration;

use backend::{AttachRequest, BackendError, ExecRequest, StreamBackend};
use sessions::{Pending, Sessions};

pub use server::{ServerSettings, StreamServer};

#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0} is not implemented by this version of crust")]
    NoBackend(&'static str),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Sandbox(#[from] crate::sandbox::SandboxError),
    #[error("pod sandbox {0} is not ready")]
    PodNotReady(String),
    #[error("pod sandbox {0} has no network namespace")]
    NoNetwork(String),
    #[error(transparent)]
    TooManyWaiting(#[from] sessions::TooManyWaiting),
    #[error("{what} {addr}: {source}")]
    Io {
        what: &'static str,
        addr: String,
        source: std::io::Error,
    },
    #[error("stream TLS: {0}")]
    Tls(String),
}

/// What the CRI adapters call: validation, tokens and URLs.
pub struct Streams {
    sessions: Arc<Sessions>,
    /// `http://host:port` or `https://host:port`, without a trailing slash.
    base_url: String,
    backend: Option<Arc<dyn StreamBackend>>,
}

impl Streams {
    /// The URL of a stream server with no server behind it (tests of the adapters).
    pub fn detached(base_url: &str, backend: Option<Arc<dyn StreamBackend>>) -> Streams {
        Streams {
            sessions: Arc::new(Sessions::new(sessions::TOKEN_TTL, sessions::MAX_WAITING)),
            base_url: base_url.trim_end_matches('/').to_owned(),
            backend,
        }
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    pub fn exec(&self, req: ExecRequest) -> Result<String, StreamError> {
        let backend = self
            .backend
            .as_ref()
            .ok_or(StreamError::NoBackend("Exec"))?;
        check_stdio(
            &req.container_id,
            req.tty,
            req.stdin,
            req.stdout,
            req.stderr,
        )?;
        if req.cmd.is_empty() {
            return Err(StreamError::Invalid("cmd is required".into()));
        }
        backend.validate_exec(&req)?;
        self.url(Pending::Exec(req))
    }

    pub fn attach(&self, req: AttachRequest) -> Result<String, StreamError> {
        let backend = self
            .backend
            .as_ref()
            .ok_or(StreamError::NoBackend("Attach"))?;
        check_stdio(
            &req.container_id,
            req.tty,
            req.stdin,
            req.stdout,
            req.stderr,
        )?;
        backend.validate_attach(&req)?;
        self.url(Pending::Attach(req))
    }

    /// The URL for forwarding ports of the pod `req` names (see `portforward::pod_network`).
    pub fn port_forward(
        &self,
        req: portforward::PortForwardRequest,
    ) -> Result<String, StreamError> {
        self.url(Pending::PortForward(req))
    }

    fn url(&self, req: Pending) -> Result<String, StreamError> {
        let route = req.route();
        let token = self.sessions.insert(req)?;
        Ok(format!("{}/{route}/{token}", self.base_url))
    }
}

/// The checks kubelet's streaming server makes of every exec and attach.
fn check_stdio(
    id: &str,
    tty: bool,
    stdin: bool,
    stdout: bool,
    stderr: bool,
) -> Result<(), StreamError> {
    if id.is_empty() {
        return Err(StreamError::Invalid("container_id is required".into()));
    }
    if tty && stderr {
        return Err(StreamError::Invalid(
            "tty and stderr cannot both be true".into(),
        ));
    }
    if !stdin && !stdout && !stderr {
        return Err(StreamError::Invalid(
            "one of stdin, stdout and stderr must be set".into(),
        ));
    }
    Ok(())
}

/// The defaults kubelet uses.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(4 * 3600);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_backend_exec_and_attach_are_unimplemented() {
        let s = Streams::detached("http://127.0.0.1:1/", None);
        let e = s
            .exec(ExecRequest {
                container_id: "c".into(),
                cmd: vec!["sh".into()],
                tty: false,
                stdin: false,
                stdout: true,
                stderr: false,
            })
            .unwrap_err();
        assert!(matches!(e, StreamError::NoBackend("Exec")), "{e}");
        let url = s
            .port_forward(portforward::PortForwardRequest {
                pod_sandbox_id: "p".into(),
                network: portforward::PodNetwork::Host,
            })
            .unwrap();
        assert!(url.starts_with("http://127.0.0.1:1/portforward/"), "{url}");
    }

    #[test]
    fn stdio_combinations_are_checked() {
        assert!(check_stdio("", false, true, false, false).is_err());
        assert!(check_stdio("c", true, false, true, true).is_err());
        assert!(check_stdio("c", false, false, false, false).is_err());
        assert!(check_stdio("c", true, true, true, false).is_ok());
    }
}
