//! crust's HTTP requests to registries: manifests and token responses (read with a size cap:
//! oci-client reads any body whole, so a broken or hostile registry or token realm could make
//! the daemon buffer gigabytes), blobs (streamed into the content store, which verifies their
//! digest as it writes them) and error bodies (their first 64 KiB). Also turns what goes wrong
//! on the wire into one short sentence a user can act on.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use reqwest::StatusCode;

use super::endpoint::Endpoint;

/// The largest manifest or index accepted (what distribution registries accept on push).
pub const MAX_MANIFEST_BYTES: usize = 4 << 20;
/// How much of an error response is read to explain it.
const MAX_ERROR_BODY: usize = 64 << 10;
/// How much of a registry's own error text goes into a message.
const MAX_DETAIL_CHARS: usize = 160;

/// The `Authorization` a session sends on its own requests. Never printed.
#[derive(Clone)]
pub enum AuthHeader {
    None,
    Basic(String, String),
    Bearer(String),
}

impl AuthHeader {
    pub fn apply(&self, rb: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self {
            AuthHeader::None => rb,
            AuthHeader::Basic(u, p) => rb.basic_auth(u, Some(p)),
            AuthHeader::Bearer(t) => rb.bearer_auth(t),
        }
    }
}

/// TLS settings of one endpoint.
#[derive(Clone, Default)]
pub struct Tls {
    /// PEM of extra CA certificates.
    pub ca_pem: Option<Vec<u8>>,
    /// PEM of the client certificate (chain) followed by its private key, for mTLS.
    pub identity_pem: Option<Vec<u8>>,
    pub insecure_skip_verify: bool,
}

/// A plain reqwest client with the endpoint's TLS settings and crust's timeouts.
pub fn client(tls: &Tls, timeout: Duration) -> Result<reqwest::Client, reqwest::Error> {
    let mut b = reqwest::Client::builder()
        .connect_timeout(timeout)
        .read_timeout(timeout)
        .user_agent(concat!("crust/", env!("CARGO_PKG_VERSION")))
        .tls_danger_accept_invalid_certs(tls.insecure_skip_verify);
    if let Some(pem) = &tls.ca_pem {
        b = b.tls_certs_merge(reqwest::Certificate::from_pem_bundle(pem)?);
    }
    if let Some(pem) = &tls.identity_pem {
        b = b.identity(reqwest::Identity::from_pem(pem)?);
    }
    b.build()
}

/// A response read whole, within a size limit.
pub struct Fetched {
    pub status: StatusCode,
    pub content_type: Option<String>,
    /// `Docker-Content-Digest`, when the registry sent it.
    pub digest: Option<String>,
    pub body: Bytes,
}

#[derive(Debug)]
pub enum FetchError {
    Transport(reqwest::Error),
    /// A successful response with a body over `limit` bytes.
    TooLarge {
        limit: usize,
    },
}

/// Sends `rb` and hands back a successful response unread, for its body to be streamed (a
/// blob), or reads a failure's body as `fetch` does.
pub async fn open(
    rb: reqwest::RequestBuilder,
) -> Result<Result<reqwest::Response, Fetched>, FetchError> {
    let resp = rb.send().await.map_err(FetchError::Transport)?;
    if resp.status().is_success() {
        return Ok(Ok(resp));
    }
    read(resp, 0).await.map(Err)
}

/// Sends `rb` and reads the body: at most `limit` bytes of a success (more is an error), and
/// at most `MAX_ERROR_BODY` bytes of a failure (the rest is dropped unread).
pub async fn fetch(rb: reqwest::RequestBuilder, limit: usize) -> Result<Fetched, FetchError> {
    read(rb.send().await.map_err(FetchError::Transport)?, limit).await
}

async fn read(mut resp: reqwest::Response, limit: usize) -> Result<Fetched, FetchError> {
    let status = resp.status();
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (content_type, digest) = (header("content-type"), header("docker-content-digest"));
    let cap = if status.is_success() {
        limit
    } else {
        MAX_ERROR_BODY
    };
    if status.is_success() && resp.content_length().is_some_and(|n| n > cap as u64) {
        return Err(FetchError::TooLarge { limit });
    }
    let mut body = BytesMut::new();
    while let Some(chunk) = resp.chunk().await.map_err(FetchError::Transport)? {
        if body.len() + chunk.len() > cap {
            if status.is_success() {
                return Err(FetchError::TooLarge { limit });
            }
            body.extend_from_slice(&chunk[..cap - body.len()]);
            break;
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Fetched {
        status,
        content_type,
        digest,
        body: body.freeze(),
    })
}

/// The useful part of a registry's error body, on one short line: the messages of an OCI
/// error envelope, a `details`/`error` field, or the first line of plain text. HTML pages
/// (proxies, captive portals) say nothing useful and give an empty string.
pub fn brief(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(text) {
        let mut parts: Vec<String> = Vec::new();
        if let Some(errors) = v.get("errors").and_then(|e| e.as_array()) {
            for e in errors {
                let code = e.get("code").and_then(|c| c.as_str()).unwrap_or_default();
                let msg = e.get("message").and_then(|m| m.as_str()).unwrap_or(code);
                parts.push(msg.to_owned());
            }
        }
        for key in ["details", "error_description", "error", "message"] {
            if let Some(s) = v.get(key).and_then(|s| s.as_str()) {
                parts.push(s.to_owned());
            }
        }
        parts.dedup();
        return clip(&parts.join("; "));
    }
    if text.starts_with('<') {
        return String::new();
    }
    clip(text.lines().next().unwrap_or_default())
}

/// The first OCI error code in an error body (`MANIFEST_UNKNOWN`, `DENIED`, ...).
pub fn error_code(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v.get("errors")?
        .as_array()?
        .first()?
        .get("code")?
        .as_str()
        .map(str::to_owned)
}

/// `s` cut to `MAX_DETAIL_CHARS` characters, control characters replaced.
pub fn clip(s: &str) -> String {
    let mut out: String = s
        .chars()
        .take(MAX_DETAIL_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if s.chars().nth(MAX_DETAIL_CHARS).is_some() {
        out.push('…');
    }
    out.trim().to_owned()
}

/// Why a request to `ep` never got an answer, in a few words: DNS, refused, timeout, TLS (with
/// what to configure), or the innermost cause. reqwest and hyper nest the reason four deep
/// ("error sending request for url (...): client error (Connect): dns error: ...").
pub fn transport(e: &(dyn std::error::Error + 'static), ep: &Endpoint) -> String {
    let mut dns = false;
    let mut io_kind = None;
    let mut tls: Option<&rustls::Error> = None;
    let mut timeout = false;
    let mut root = e.to_string();
    // The host actually asked (Docker Hub's API host for docker.io), else the endpoint's.
    let mut host = ep.host.clone();
    for c in causes(e) {
        root = c.to_string();
        dns |= root.starts_with("dns error");
        if let Some(r) = c.downcast_ref::<reqwest::Error>() {
            timeout |= r.is_timeout();
            if let Some(h) = r.url().and_then(|u| u.host_str()) {
                h.clone_into(&mut host);
            }
        }
        tls = tls.or_else(|| c.downcast_ref::<rustls::Error>());
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            io_kind = io_kind.or(Some(io.kind()));
        }
    }
    if let Some(t) = tls {
        return tls_problem(t, ep);
    }
    if dns {
        let why = root.rsplit(": ").next().unwrap_or_default();
        return format!("cannot resolve {host} ({why})");
    }
    match io_kind {
        Some(std::io::ErrorKind::ConnectionRefused) => "connection refused".into(),
        Some(std::io::ErrorKind::ConnectionReset) => "connection reset".into(),
        Some(std::io::ErrorKind::TimedOut) => "timed out".into(),
        _ if timeout => "timed out".into(),
        _ => clip(&root),
    }
}

/// Whether `e` (or an error under it) is a timeout.
pub fn is_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    causes(e).iter().any(|c| {
        c.downcast_ref::<reqwest::Error>()
            .is_some_and(reqwest::Error::is_timeout)
            || c.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
    })
}

/// `e` and every error under it. `io::Error::source` skips the error an io::Error wraps (it
/// returns that error's source), so wrapped errors are visited through `get_ref` instead.
fn causes<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> Vec<&'a (dyn std::error::Error + 'static)> {
    let mut out = Vec::new();
    let mut cur = Some(e);
    while let Some(c) = cur {
        out.push(c);
        cur = match c
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => c.source(),
        };
        if out.len() > 16 {
            break;
        }
    }
    out
}

fn tls_problem(t: &rustls::Error, ep: &Endpoint) -> String {
    let host = &ep.host;
    match t {
        rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType)
            if ep.upstream =>
        {
            format!(
                "TLS handshake failed: the server does not speak TLS; if it is a plain-http \
                 registry, list \"http://{host}\" under [registry.mirrors.\"{host}\"] in the config"
            )
        }
        rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType) => {
            "TLS handshake failed: the server does not speak TLS (is the endpoint http://?)".into()
        }
        // The registry wants a client certificate (TLS 1.3 says so; 1.2 only fails the
        // handshake, after asking for one).
        rustls::Error::AlertReceived(
            rustls::AlertDescription::CertificateRequired
            | rustls::AlertDescription::BadCertificate
            | rustls::AlertDescription::HandshakeFailure,
        ) => format!(
            "TLS handshake refused ({t}): the registry asks for a client certificate; give one \
             as cert_file and key_file under [registry.configs.\"{host}\"] in the config"
        ),
        rustls::Error::InvalidCertificate(_) => format!(
            "TLS certificate not trusted ({t}); give its CA as ca_file under \
             [registry.configs.\"{host}\"] in the config"
        ),
        other => format!("TLS handshake failed: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_become_one_short_line() {
        let env = br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown","detail":{"Tag":"x"}}]}"#;
        assert_eq!(brief(env), "manifest unknown");
        assert_eq!(error_code(env).as_deref(), Some("MANIFEST_UNKNOWN"));
        assert_eq!(
            brief(br#"{"details":"invalid credentials"}"#),
            "invalid credentials"
        );
        assert_eq!(brief(b"<html><body>502 Bad Gateway</body></html>"), "");
        assert_eq!(brief(b"first line\nsecond\n"), "first line");
        let long = brief("x".repeat(10_000).as_bytes());
        assert!(long.chars().count() <= MAX_DETAIL_CHARS + 1 && long.ends_with('…'));
        assert_eq!(clip("a\tb\u{1b}[31m"), "a b [31m");
        assert!(error_code(b"not json").is_none());
    }
}
