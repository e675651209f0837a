//! The HTTP side of the streaming server: `/exec/<token>`, `/attach/<token>` and
//! `/portforward/<token>` (GET or POST, as kubelet serves them), plain or TLS. A request takes
//! its token out first (so a token never serves twice, whatever follows), then is upgraded to
//! SPDY/3.1 (`X-Stream-Protocol-Version` negotiated) or WebSocket (`Sec-WebSocket-Protocol`
//! negotiated) and handed to the protocol on a task of its own.
//!
//! Bounds: at most `max_sessions` upgraded connections at once (others get 429 before their
//! token is spent); request heads must arrive within `HEAD_TIMEOUT`; at most `MAX_UNUPGRADED`
//! connections are open and not yet upgraded, and a new one past that closes the oldest
//! (`crate::accept`: a peer holding silent connections cannot take the daemon's descriptors
//! nor keep kubelet out); every session closes after `idle_timeout` without traffic.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming as Body;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::{Role as WsRole, WebSocketConfig};

use super::backend::StreamBackend;
use super::channel::{ChannelProtocol, SPDY_TUNNEL_PORTFORWARD};
use super::idle::Idle;
use super::remotecommand::{self, Command, SPDY_PROTOCOLS};
use super::sessions::{MAX_WAITING, Pending, Sessions, TOKEN_TTL};
use super::spdy::{self, Role};
use super::tunnel::{self, Tunnel};
use super::{StreamError, Streams, portforward};

const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
const TLS_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections accepted and not yet upgraded (nor ended), at once. kubelet or the API server
/// opens one per stream and sends its request at once.
pub const MAX_UNUPGRADED: usize = 128;
const PROTOCOL_HEADER: &str = "x-stream-protocol-version";
const ACCEPTED_HEADER: &str = "x-accepted-stream-protocol-versions";
const PORTFORWARD_PROTOCOL: &str = "portforward.k8s.io";
/// WebSocket messages and frames over this are refused (a client sends 32 KiB at a time).
const MAX_WS_MESSAGE: usize = 1 << 20;

#[derive(Debug, Clone)]
pub struct ServerSettings {
    pub address: IpAddr,
    pub port: u16,
    /// PEM certificate chain and key: serve HTTPS.
    pub tls: Option<(PathBuf, PathBuf)>,
    pub idle_timeout: Duration,
    pub max_sessions: usize,
}

impl ServerSettings {
    pub fn from_config(c: &crate::config::StreamConfig) -> ServerSettings {
        ServerSettings {
            // Validated at start (config::StreamConfig::validate).
            address: c.address.parse().unwrap_or(IpAddr::from([127, 0, 0, 1])),
            port: c.port,
            tls: c.tls_cert.clone().zip(c.tls_key.clone()),
            idle_timeout: Duration::from_secs(c.idle_timeout_secs),
            max_sessions: c.max_sessions,
        }
    }
}

struct Shared {
    sessions: Arc<Sessions>,
    backend: Option<Arc<dyn StreamBackend>>,
    sessions_open: Arc<Semaphore>,
    idle_timeout: Duration,
    spdy: spdy::Settings,
}

pub struct StreamServer {
    listener: TcpListener,
    admitted: crate::accept::Admitted,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shared: Arc<Shared>,
}

impl StreamServer {
    /// Binds the listener; `Streams` hands out URLs on it.
    pub async fn bind(
        settings: ServerSettings,
        backend: Option<Arc<dyn StreamBackend>>,
    ) -> Result<(StreamServer, Streams), StreamError> {
        let addr = SocketAddr::new(settings.address, settings.port);
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| StreamError::Io {
                what: "binding the stream server to",
                addr: addr.to_string(),
                source,
            })?;
        let mut local = listener.local_addr().map_err(|source| StreamError::Io {
            what: "reading the address of",
            addr: addr.to_string(),
            source,
        })?;
        if local.ip().is_unspecified() {
            // Clients reach a wildcard listener through loopback (kubelet's proxy runs on the
            // node); a URL cannot name 0.0.0.0.
            local.set_ip(match local.ip() {
                IpAddr::V4(_) => IpAddr::from([127, 0, 0, 1]),
                IpAddr::V6(_) => IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
            });
        }
        let tls = settings
            .tls
            .as_ref()
            .map(|(c, k)| acceptor(c, k))
            .transpose()?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let sessions = Arc::new(Sessions::new(TOKEN_TTL, MAX_WAITING));
        let streams = Streams {
            sessions: sessions.clone(),
            base_url: format!("{scheme}://{local}"),
            backend: backend.clone(),
        };
        let shared = Arc::new(Shared {
            sessions,
            backend,
            sessions_open: Arc::new(Semaphore::new(settings.max_sessions)),
            idle_timeout: settings.idle_timeout,
            spdy: spdy::Settings {
                idle_timeout: settings.idle_timeout,
                ..spdy::Settings::default()
            },
        });
        let server = StreamServer {
            listener,
            admitted: crate::accept::Admitted::new(MAX_UNUPGRADED),
            tls,
            shared,
        };
        Ok((server, streams))
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts connections until the task is dropped.
    pub async fn serve(self) {
        loop {
            let (tcp, peer) = match self.listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors, most likely: wait rather than spin.
                    tracing::warn!(error = %e, "stream server accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let shared = self.shared.clone();
            let tls = self.tls.clone();
            let mut ticket = self.admitted.admit();
            tokio::spawn(async move {
                let serving = async {
                    match tls {
                        None => serve_http(TokioIo::new(tcp), shared).await,
                        Some(tls) => match tokio::time::timeout(TLS_TIMEOUT, tls.accept(tcp)).await
                        {
                            Ok(Ok(s)) => serve_http(TokioIo::new(s), shared).await,
                            Ok(Err(e)) => Err(e.to_string()),
                            Err(_) => Err("TLS handshake timed out".into()),
                        },
                    }
                };
                // Upgraded, the connection goes on in a task of its own, and the ticket goes.
                let served = tokio::select! {
                    served = serving => served,
                    () = ticket.pushed_out() => Err(format!(
                        "closed before its request: {MAX_UNUPGRADED} newer connections came"
                    )),
                };
                if let Err(e) = served {
                    tracing::debug!(%peer, error = %e, "stream connection ended");
                }
            });
        }
    }
}

fn acceptor(cert: &PathBuf, key: &PathBuf) -> Result<tokio_rustls::TlsAcceptor, StreamError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let tls = |what: &str, e: &dyn std::fmt::Display| StreamError::Tls(format!("{what}: {e}"));
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| tls(&format!("reading {}", cert.display()), &e))?;
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| tls(&format!("reading {}", key.display()), &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls("protocol versions", &e))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| tls("certificate and key", &e))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

async fn serve_http<I>(io: TokioIo<I>, shared: Arc<Shared>) -> Result<(), String>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(handle(req, &shared)) }
    });
    hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .serve_connection(io, service)
        .with_upgrades()
        .await
        .map_err(|e| e.to_string())
}

type Answer = Response<Full<Bytes>>;

fn plain(status: StatusCode, msg: impl Into<String>) -> Answer {
    let mut r = Response::new(Full::new(Bytes::from(msg.into() + "\n")));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn handle(req: Request<Body>, shared: &Arc<Shared>) -> Answer {
    let Some((route, token)) = route(req.uri().path()) else {
        return plain(StatusCode::NOT_FOUND, "not found");
    };
    if req.method() != Method::GET && req.method() != Method::POST {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "use GET or POST");
    }
    let Ok(permit) = shared.sessions_open.clone().try_acquire_owned() else {
        return plain(StatusCode::TOO_MANY_REQUESTS, "too many open streams");
    };
    let Some(pending) = shared.sessions.take(route, token) else {
        return plain(
            StatusCode::NOT_FOUND,
            "unknown, used or expired stream token",
        );
    };
    let headers = req.headers();
    if has_token(headers, header::UPGRADE, "websocket") {
        websocket(req, pending, permit, shared)
    } else if has_token(headers, header::UPGRADE, "spdy/3.1") {
        spdy_upgrade(req, pending, permit, shared)
    } else {
        plain(
            StatusCode::BAD_REQUEST,
            "expected an upgrade to SPDY/3.1 or websocket",
        )
    }
}

/// `/<route>/<token>` with a known route.
fn route(path: &str) -> Option<(&str, &str)> {
    let (route, token) = path.strip_prefix('/')?.split_once('/')?;
    let known = matches!(route, "exec" | "attach" | "portforward");
    (known && !token.is_empty() && !token.contains('/')).then_some((route, token))
}

/// Whether one of the comma-separated values of `name` is `token` (case-insensitive).
fn has_token(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    values(headers, name.as_str())
        .iter()
        .any(|v| v.eq_ignore_ascii_case(token))
}

fn values<'a>(headers: &'a HeaderMap, name: &str) -> Vec<&'a str> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .collect()
}

fn switching(upgrade: &'static str) -> Answer {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static(upgrade));
    r
}

fn command(pending: Pending) -> Option<Command> {
    match pending {
        Pending::Exec(r) => Some(Command::Exec(r)),
        Pending::Attach(r) => Some(Command::Attach(r)),
        Pending::PortForward(_) => None,
    }
}

fn spdy_upgrade(
    mut req: Request<Body>,
    pending: Pending,
    permit: OwnedSemaphorePermit,
    shared: &Arc<Shared>,
) -> Answer {
    let supported: &[&str] = match pending {
        Pending::PortForward(_) => &[PORTFORWARD_PROTOCOL],
        _ => SPDY_PROTOCOLS,
    };
    let offered = values(req.headers(), PROTOCOL_HEADER);
    if offered.is_empty() {
        return plain(
            StatusCode::BAD_REQUEST,
            "unable to upgrade: X-Stream-Protocol-Version is required",
        );
    }
    let Some(protocol) = offered
        .iter()
        .find_map(|o| supported.iter().find(|s| *s == o).copied())
    else {
        let mut r = plain(
            StatusCode::FORBIDDEN,
            format!(
                "unable to negotiate a protocol: client offers {offered:?}, server accepts {supported:?}"
            ),
        );
        for s in supported {
            r.headers_mut()
                .append(ACCEPTED_HEADER, HeaderValue::from_static(s));
        }
        return r;
    };
    let upgrade = hyper::upgrade::on(&mut req);
    let (backend, settings) = (shared.backend.clone(), shared.spdy);
    tokio::spawn(async move {
        let _permit = permit;
        let Ok(upgraded) = upgrade.await else {
            return;
        };
        // On plain HTTP the socket itself: port-forward splices payloads into it.
        let (conn, incoming, _reader) = match upgraded.downcast::<TokioIo<TcpStream>>() {
            Ok(parts) => {
                let tcp = parts.io.into_inner();
                spdy::conn::start_tcp(tcp, parts.read_buf, Role::Server, settings)
            }
            Err(upgraded) => spdy::conn::start(TokioIo::new(upgraded), Role::Server, settings),
        };
        match (pending, backend) {
            (Pending::PortForward(r), _) => {
                portforward::serve(incoming, r.network, r.pod_sandbox_id).await;
                conn.close().await;
            }
            (other, Some(backend)) => {
                if let Some(cmd) = command(other) {
                    remotecommand::spdy::serve(conn, incoming, protocol, cmd, backend).await;
                }
            }
            (_, None) => conn.close().await,
        }
    });
    let mut r = switching("SPDY/3.1");
    r.headers_mut()
        .insert(PROTOCOL_HEADER, HeaderValue::from_static(protocol));
    r
}

fn websocket(
    mut req: Request<Body>,
    pending: Pending,
    permit: OwnedSemaphorePermit,
    shared: &Arc<Shared>,
) -> Answer {
    let headers = req.headers();
    let Some(key) = headers
        .get("sec-websocket-key")
        .map(|k| k.as_bytes().to_vec())
    else {
        return plain(StatusCode::BAD_REQUEST, "Sec-WebSocket-Key is required");
    };
    if headers
        .get("sec-websocket-version")
        .and_then(|v| v.to_str().ok())
        != Some("13")
    {
        let mut r = plain(
            StatusCode::UPGRADE_REQUIRED,
            "WebSocket version 13 is required",
        );
        r.headers_mut()
            .insert("sec-websocket-version", HeaderValue::from_static("13"));
        return r;
    }
    let offered = values(headers, "sec-websocket-protocol");
    let chosen = match &pending {
        Pending::PortForward(_) if offered.contains(&SPDY_TUNNEL_PORTFORWARD) => {
            (None, Some(SPDY_TUNNEL_PORTFORWARD))
        }
        Pending::PortForward(_) => {
            return plain(
                StatusCode::BAD_REQUEST,
                format!(
                    "port forwarding over WebSocket needs the {SPDY_TUNNEL_PORTFORWARD} subprotocol"
                ),
            );
        }
        _ => match ChannelProtocol::negotiate(offered.iter().copied()) {
            Some((p, name)) => (Some(p), name),
            None => {
                return plain(
                    StatusCode::BAD_REQUEST,
                    format!("none of the WebSocket subprotocols {offered:?} is supported"),
                );
            }
        },
    };
    let upgrade = hyper::upgrade::on(&mut req);
    let shared = shared.clone();
    tokio::spawn(async move {
        let _permit = permit;
        let Ok(upgraded) = upgrade.await else {
            return;
        };
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_WS_MESSAGE))
            .max_frame_size(Some(MAX_WS_MESSAGE));
        let ws =
            WebSocketStream::from_raw_socket(TokioIo::new(upgraded), WsRole::Server, Some(config))
                .await;
        match (pending, chosen.0, shared.backend.clone()) {
            (Pending::PortForward(r), _, _) => {
                // The SPDY connection inside keeps the idle timeout.
                let bytes = Tunnel::new(ws);
                let settings = spdy::Settings {
                    max_data_frame: tunnel::FRAME_BYTES,
                    ..shared.spdy
                };
                let (conn, incoming, _reader) = spdy::conn::start(bytes, Role::Server, settings);
                portforward::serve(incoming, r.network, r.pod_sandbox_id).await;
                conn.close().await;
            }
            (other, Some(protocol), Some(backend)) => {
                if let Some(cmd) = command(other) {
                    let idle = Idle::new(shared.idle_timeout);
                    remotecommand::websocket::serve(ws, protocol, cmd, backend, idle).await;
                }
            }
            _ => {}
        }
    });
    let mut r = switching("websocket");
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(&key);
    if let Ok(v) = HeaderValue::from_str(&accept) {
        r.headers_mut().insert("sec-websocket-accept", v);
    }
    if let Some(name) = chosen.1 {
        r.headers_mut()
            .insert("sec-websocket-protocol", HeaderValue::from_static(name));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_need_a_known_verb_and_one_token() {
        assert_eq!(route("/exec/abc"), Some(("exec", "abc")));
        assert_eq!(route("/portforward/x"), Some(("portforward", "x")));
        for bad in [
            "/",
            "/exec",
            "/exec/",
            "/exec/a/b",
            "/shell/abc",
            "exec/abc",
        ] {
            assert_eq!(route(bad), None, "{bad}");
        }
    }
}
