//! Talking to registries: which endpoints to try for a host (configured mirrors in order, then
//! the host itself), the HTTP client for each (`http.rs`: every answer read with a cap, blobs
//! streamed), the token flow (`token.rs`), credentials from the CRI request, and turning
//! registry failures into `PullError`s that say what was wrong in one line.
//!
//! Credentials from a request are sent only to the image's own registry, never to a mirror.
//! Credentials configured for a host (`registry.configs.<host>.auth`, the node's own) are sent
//! to that host, mirror or registry, when the request has none for it.
//! They are never logged: `Credentials` redacts itself in `Debug`.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;

mod credentials;
mod endpoint;
mod hosts;
pub mod http;
pub mod manifest;
pub mod reference;
mod token;

pub use credentials::Credentials;
pub use endpoint::Endpoint;

use self::credentials::Auth;
use self::http::{AuthHeader, FetchError, Tls};
use self::manifest::{ACCEPTED_MANIFESTS, Descriptor};
use self::reference::{DEFAULT_DOMAIN, ImageRef};
use crate::config::{RegistryConfig, endpoint_parts};
use crate::image::digest::{Algorithm, Digest};
use crate::image::{ImageSettings, PullError, local, lock};

/// A blob's bytes as they arrive.
pub type BlobStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<Bytes, reqwest::Error>> + Send>>;

pub struct Registries {
    /// Replaced whole by a configuration reload; a pull under way keeps the sessions it opened.
    config: std::sync::RwLock<std::sync::Arc<RegistryConfig>>,
    timeout: Duration,
    /// Clients per endpoint, kept for their connection pools.
    clients: Mutex<HashMap<String, reqwest::Client>>,
}

/// rustls needs one crypto provider per process; crust uses ring.
fn install_crypto_provider() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

impl Registries {
    pub fn new(settings: &ImageSettings) -> Registries {
        install_crypto_provider();
        Registries {
            config: std::sync::RwLock::new(std::sync::Arc::new(settings.registry.clone())),
            timeout: settings.progress_timeout,
            clients: Mutex::new(HashMap::new()),
        }
    }

    fn config(&self) -> std::sync::Arc<RegistryConfig> {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Uses `config` for the pulls that start from now on. The cached clients go with the old
    /// one: their TLS settings may not hold any more.
    pub fn set_config(&self, config: RegistryConfig) {
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = std::sync::Arc::new(config);
        lock(&self.clients).clear();
    }

    /// The endpoints of `domain`'s host directory (`registry.config_path`, `hosts.rs`), when
    /// it has one; then the mirrors configured for `domain` (then those for `*`); then
    /// `domain` itself unless one of them already is it.
    pub fn endpoints(&self, domain: &str) -> Result<Vec<Endpoint>, PullError> {
        let config = self.config();
        let roots = config.host_dirs();
        // A few small files read per pull, as containerd does: an edit applies to the next
        // pull without a reload.
        let mut out = hosts::endpoints(&roots, domain)
            .map_err(|e| PullError::Invalid(e.to_string()))?
            .unwrap_or_default();
        for key in [domain, "*"] {
            for e in config
                .mirrors
                .get(key)
                .map(|m| m.endpoints.as_slice())
                .unwrap_or_default()
            {
                let Some((host, path)) = endpoint_parts(e) else {
                    continue;
                };
                let ep = Endpoint::mirror(host, path, e.starts_with("http://"), domain);
                if !out.iter().any(|o| o.to_string() == ep.to_string()) {
                    out.push(ep);
                }
            }
        }
        if !out.iter().any(|e| e.upstream) {
            out.push(Endpoint::upstream(domain, false));
            // A registry on this node often speaks plain HTTP (a developer's, a node-local
            // cache): tried when HTTPS to it cannot connect, without a mirror entry. Every
            // other host stays HTTPS unless a mirror entry says http://.
            if endpoint::is_local(domain) {
                out.push(Endpoint::upstream(domain, true));
            }
        }
        Ok(out)
    }

    /// `ep`'s TLS settings: its own (a host directory's), else `registry.configs` for its host.
    fn tls(&self, ep: &Endpoint) -> Result<Tls, PullError> {
        if let Some(own) = &ep.tls {
            return read_tls(own);
        }
        let config = self.config();
        let Some(c) = config.configs.get(&ep.host) else {
            return Ok(Tls::default());
        };
        read_tls(&endpoint::HostTls {
            ca_files: c.ca_file.iter().cloned().collect(),
            client: c.cert_file.clone().zip(c.key_file.clone().map(Some)),
            skip_verify: Some(c.insecure_skip_verify),
        })
    }

    /// The client for `ep` (kept per endpoint for its connection pool; no token lives in it).
    fn client(&self, ep: &Endpoint) -> Result<reqwest::Client, PullError> {
        let key = ep.to_string();
        if let Some(http) = lock(&self.clients).get(&key) {
            return Ok(http.clone());
        }
        let tls = self.tls(ep)?;
        let http = http::client(&tls, self.timeout).map_err(|e| PullError::Registry {
            registry: ep.to_string(),
            detail: format!("could not be set up: {e}"),
        })?;
        lock(&self.clients).insert(key, http.clone());
        Ok(http)
    }

    /// Opens a session for `image` on `ep`, authenticating first when credentials apply.
    pub async fn session(
        &self,
        ep: &Endpoint,
        image: &ImageRef,
        creds: &Credentials,
    ) -> Result<Session, PullError> {
        let (auth, credentials_from) = self.auth_for(ep, image, creds)?;
        let http = self.client(ep)?;
        // A host directory's `server` may put the registry itself on another host.
        let elsewhere = !ep.upstream || ep.host != image.domain;
        let reference = image.to_oci(elsewhere.then_some(ep.host.as_str()));
        let session = Session {
            http,
            reference,
            anonymous: true,
            header: AuthHeader::None,
            endpoint: ep.clone(),
            registry: ep.to_string(),
            credentials_from,
            timeout: self.timeout,
        };
        session.authenticate(auth).await
    }

    /// What `ep` is sent, and where it came from (for messages): the request's credentials on
    /// the image's own registry when they apply to it, else the node's credentials configured
    /// for the endpoint host, else nothing.
    fn auth_for(
        &self,
        ep: &Endpoint,
        image: &ImageRef,
        creds: &Credentials,
    ) -> Result<(Auth, String), PullError> {
        if ep.upstream && creds.applies_to(&image.domain) && !creds.is_anonymous() {
            return Ok((creds.auth()?, "from the request".into()));
        }
        let config = self.config();
        let configured = config.configs.get(&ep.host);
        match configured.and_then(|c| c.auth.as_ref()) {
            Some(node) => Ok((
                Credentials::from(node).auth()?,
                format!("from registry.configs.{:?}.auth", ep.host),
            )),
            None => Ok((Auth::Anonymous, String::new())),
        }
    }
}

/// A client bound to one repository on one endpoint.
pub struct Session {
    http: reqwest::Client,
    reference: oci_client::Reference,
    /// No credentials were sent (for messages: a 401 then asks for some).
    anonymous: bool,
    /// What the session's requests send (the registry's token, or basic credentials).
    header: AuthHeader,
    endpoint: Endpoint,
    /// The endpoint as messages name it (`https://host`).
    pub registry: String,
    /// Where the credentials sent came from, for messages (empty when none were sent).
    credentials_from: String,
    timeout: Duration,
}

impl Session {
    /// Authenticates with the registry's token flow (`token::authorize`) and keeps what the
    /// session's requests then send.
    async fn authenticate(mut self, auth: Auth) -> Result<Session, PullError> {
        let basic = match auth {
            Auth::Anonymous => None,
            Auth::Basic(u, p) => Some((u, p)),
            Auth::Bearer(t) => return Ok(self.with(AuthHeader::Bearer(t))),
            Auth::Identity(t) => {
                let what = format!("exchanging the identity token at {}", self.registry);
                let exchange =
                    token::exchange(&self.http, &self.endpoint, self.reference.repository(), &t);
                let token = self.within(&what, exchange).await??;
                return Ok(self.with(AuthHeader::Bearer(token)));
            }
        };
        self.anonymous = basic.is_none();
        let what = format!("authenticating to {}", self.registry);
        let ping = format!("{}{}", self.base_url(), self.endpoint.ping_path());
        let asked = token::authorize(
            &self.http,
            &ping,
            self.reference.repository(),
            basic.as_ref().map(|(u, p)| (u.as_str(), p.as_str())),
        );
        let header = match self.within(&what, asked).await? {
            Ok(token::Authorized::Token(t)) => AuthHeader::Bearer(t),
            Ok(token::Authorized::NoToken) => match basic {
                Some((u, p)) => AuthHeader::Basic(u, p),
                None => AuthHeader::None,
            },
            Ok(token::Authorized::Refused { status, body }) => {
                return Err(self.token_refused(status, &body));
            }
            Err(e) => return Err(self.token_failed(e)),
        };
        self.header = header;
        Ok(self)
    }

    fn with(mut self, header: AuthHeader) -> Session {
        self.anonymous = false;
        self.header = header;
        self
    }

    /// The token endpoint answered with an error.
    fn token_refused(&self, status: u16, body: &[u8]) -> PullError {
        if self.anonymous || status != 401 && status != 403 {
            return match status {
                401 => self.no_auth(),
                _ => self.status_error(status, body, "a token"),
            };
        }
        let reason = http::brief(body);
        let refused = format!("rejected the credentials {}", self.credentials_from);
        PullError::Unauthenticated {
            registry: self.registry.clone(),
            detail: if reason.is_empty() {
                refused
            } else {
                format!("{refused}: {reason}")
            },
        }
    }

    fn token_failed(&self, e: token::AuthorizeError) -> PullError {
        let detail = match e {
            token::AuthorizeError::Transport(t) => return self.stream_error(&t, "authenticating"),
            token::AuthorizeError::TooLarge { realm } => token::too_large(&realm),
            token::AuthorizeError::NoToken => "answered the token request without a token".into(),
        };
        PullError::Registry {
            registry: self.registry.clone(),
            detail,
        }
    }

    /// The progress timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Runs `f`, failing with `Stalled` when it takes longer than the progress timeout.
    pub async fn within<T>(&self, what: &str, f: impl Future<Output = T>) -> Result<T, PullError> {
        tokio::time::timeout(self.timeout, f)
            .await
            .map_err(|_| PullError::Stalled {
                what: what.to_owned(),
                secs: self.timeout.as_secs(),
            })
    }

    /// Fetches the manifest or index named by `tag_or_digest`; returns its bytes, digest
    /// (verified against the digest when one was asked for, and against the registry's
    /// `Docker-Content-Digest`) and Content-Type. Bodies over `MAX_MANIFEST_BYTES` are refused.
    pub async fn manifest(
        &self,
        tag_or_digest: &str,
    ) -> Result<(Bytes, Digest, Option<String>), PullError> {
        let repo = self.reference.repository();
        let wanted: Option<Digest> = tag_or_digest.parse().ok();
        let what = match &wanted {
            Some(d) => format!("{repo}@{d}"),
            None => format!("{repo}:{tag_or_digest}"),
        };
        let url = format!(
            "{}/{repo}/manifests/{tag_or_digest}{}",
            self.api_url(),
            self.reference
                .namespace()
                .map(|ns| format!("?ns={ns}"))
                .unwrap_or_default(),
        );
        let rb = self
            .http
            .get(url)
            .header(reqwest::header::ACCEPT, ACCEPTED_MANIFESTS.join(", "));
        let fetch = http::fetch(self.header.apply(rb), http::MAX_MANIFEST_BYTES);
        let fetched = self
            .within(&format!("fetching {what} from {}", self.registry), fetch)
            .await?
            .map_err(|e| match e {
                FetchError::Transport(t) => self.unreachable(&t),
                FetchError::TooLarge { limit } => PullError::Invalid(format!(
                    "{} sent a manifest for {what} larger than {} MiB",
                    self.registry,
                    limit >> 20
                )),
            })?;
        if !fetched.status.is_success() {
            return Err(self.status_error(fetched.status.as_u16(), &fetched.body, &what));
        }
        let claimed: Option<Digest> = fetched.digest.as_deref().and_then(|d| d.parse().ok());
        let expected = wanted.or(claimed);
        let algorithm = expected
            .as_ref()
            .map_or(Algorithm::Sha256, Digest::algorithm);
        let actual = Digest::compute(algorithm, &fetched.body);
        if let Some(expected) = expected {
            if actual != expected {
                return Err(PullError::DigestMismatch {
                    what: format!("manifest {what}"),
                    expected: expected.to_string(),
                    actual: actual.to_string(),
                });
            }
        }
        Ok((fetched.body, actual, fetched.content_type))
    }

    /// Where the endpoint's registry API is: `scheme://host/v2`, or the API root its path names.
    fn api_url(&self) -> String {
        format!("{}{}", self.base_url(), self.endpoint.api_root)
    }

    /// `scheme://host` of the endpoint (Docker Hub's API host for docker.io).
    fn base_url(&self) -> String {
        let scheme = if self.endpoint.plain_http {
            "http"
        } else {
            "https"
        };
        format!("{scheme}://{}", self.reference.resolve_registry())
    }

    /// Starts streaming a blob. Its digest is verified by whoever stores it (`Ingest`).
    pub async fn blob(&self, desc: &Descriptor) -> Result<BlobStream, PullError> {
        let repo = self.reference.repository();
        let what = format!("blob {}", desc.digest);
        let url = format!(
            "{}/{repo}/blobs/{}{}",
            self.api_url(),
            desc.digest,
            self.reference
                .namespace()
                .map(|ns| format!("?ns={ns}"))
                .unwrap_or_default(),
        );
        let open = http::open(self.header.apply(self.http.get(url)));
        let doing = format!("fetching {what} from {}", self.registry);
        match self.within(&doing, open).await? {
            Ok(Ok(response)) => Ok(Box::pin(response.bytes_stream())),
            Ok(Err(failed)) => Err(self.status_error(failed.status.as_u16(), &failed.body, &what)),
            Err(FetchError::Transport(e)) => Err(self.stream_error(&e, &doing)),
            Err(FetchError::TooLarge { .. }) => Err(PullError::Internal(format!(
                "{doing}: an error body was refused as too large"
            ))),
        }
    }

    /// A 401: no credentials sent, or these ones refused.
    fn no_auth(&self) -> PullError {
        let detail = if !self.anonymous {
            format!(
                "rejected the credentials {} (HTTP 401)",
                self.credentials_from
            )
        } else if self.reference.registry() == DEFAULT_DOMAIN {
            // Docker Hub answers 401, not 404, for repositories that do not exist.
            "requires authentication and the request carried no credentials (or the repository does not exist)".into()
        } else {
            format!(
                "requires authentication and neither the request nor registry.configs.{:?}.auth gave credentials",
                self.endpoint.host
            )
        };
        PullError::Unauthenticated {
            registry: self.registry.clone(),
            detail,
        }
    }

    /// What an HTTP error status (with its OCI error body) means for the user.
    fn status_error(&self, status: u16, body: &[u8], what: &str) -> PullError {
        let code = http::error_code(body);
        let detail = http::brief(body);
        let suffix = |d: &str| {
            if d.is_empty() {
                String::new()
            } else {
                format!(": {d}")
            }
        };
        let registry = self.registry.clone();
        match (status, code.as_deref()) {
            (404, _)
            | (_, Some("MANIFEST_UNKNOWN" | "NAME_UNKNOWN" | "BLOB_UNKNOWN" | "NOT_FOUND")) => {
                PullError::NotFound {
                    registry,
                    what: what.to_owned(),
                }
            }
            (401, _) | (_, Some("UNAUTHORIZED")) => self.no_auth(),
            (403, _) | (_, Some("DENIED")) => PullError::Denied {
                registry,
                detail: if detail.is_empty() {
                    "HTTP 403".into()
                } else {
                    detail
                },
            },
            (429, _) | (_, Some("TOOMANYREQUESTS")) => PullError::Registry {
                registry,
                detail: format!("is limiting pulls (HTTP 429){}", suffix(&detail)),
            },
            (s, _) => PullError::Registry {
                registry,
                detail: format!("answered HTTP {s} for {what}{}", suffix(&detail)),
            },
        }
    }

    /// A blob stream that broke off: the read timeout (no data for the progress timeout) is a
    /// stall, anything else a lost connection.
    pub fn stream_error(&self, e: &(dyn std::error::Error + 'static), doing: &str) -> PullError {
        if http::is_timeout(e) {
            return PullError::Stalled {
                what: doing.to_owned(),
                secs: self.timeout.as_secs(),
            };
        }
        self.unreachable(e)
    }

    fn unreachable(&self, e: &(dyn std::error::Error + 'static)) -> PullError {
        PullError::Unreachable {
            registry: self.registry.clone(),
            detail: http::transport(e, &self.endpoint),
        }
    }
}

/// TLS settings with their files read now (a new client reads them anew, as containerd does).
fn read_tls(own: &endpoint::HostTls) -> Result<Tls, PullError> {
    let mut ca = Vec::new();
    for f in &own.ca_files {
        ca.extend(std::fs::read(f).map_err(local("reading CA file", f))?);
        ca.push(b'\n');
    }
    let identity_pem = match &own.client {
        None => None,
        Some((cert, key)) => {
            let mut pem = std::fs::read(cert).map_err(local("reading client certificate", cert))?;
            if let Some(key) = key {
                pem.push(b'\n');
                pem.extend(std::fs::read(key).map_err(local("reading client key", key))?);
            }
            Some(pem)
        }
    };
    Ok(Tls {
        ca_pem: (!ca.is_empty()).then_some(ca),
        identity_pem,
        insecure_skip_verify: own.skip_verify.unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use base64::Engine;

    use super::*;
    use crate::config::MirrorConfig;

    fn registries(mirrors: &[(&str, &[&str])]) -> Registries {
        let mut config = RegistryConfig::default();
        for (host, eps) in mirrors {
            config.mirrors.insert(
                host.to_string(),
                MirrorConfig {
                    endpoints: eps.iter().map(|s| s.to_string()).collect(),
                },
            );
        }
        Registries {
            config: std::sync::RwLock::new(std::sync::Arc::new(config)),
            timeout: Duration::from_secs(1),
            clients: Mutex::new(HashMap::new()),
        }
    }

    #[test]
    fn mirrors_come_first_and_upstream_last() {
        let r = registries(&[
            ("docker.io", &["http://127.0.0.1:5000", "https://m.example"]),
            ("*", &["https://all.example"]),
        ]);
        let eps: Vec<String> = r
            .endpoints("docker.io")
            .unwrap()
            .iter()
            .map(|e| e.to_string())
            .collect();
        assert_eq!(
            eps,
            [
                "http://127.0.0.1:5000",
                "https://m.example",
                "https://all.example",
                "https://docker.io"
            ]
        );
        let eps = r.endpoints("quay.io").unwrap();
        assert_eq!(eps.len(), 2);
        assert!(eps[1].upstream && !eps[1].plain_http);
    }

    #[test]
    fn a_host_named_as_its_own_mirror_is_tried_once_over_http() {
        let r = registries(&[("127.0.0.1:5001", &["http://127.0.0.1:5001"])]);
        let eps = r.endpoints("127.0.0.1:5001").unwrap();
        assert_eq!(
            eps,
            [Endpoint::mirror(
                "127.0.0.1:5001",
                "",
                true,
                "127.0.0.1:5001"
            )]
        );
    }

    #[test]
    fn a_registry_on_this_node_falls_back_to_plain_http_and_no_other_does() {
        let r = registries(&[]);
        let eps: Vec<(String, bool)> = r
            .endpoints("localhost:5000")
            .unwrap()
            .iter()
            .map(|e| (e.to_string(), e.fallback))
            .collect();
        assert_eq!(
            eps,
            [
                ("https://localhost:5000".to_owned(), false),
                ("http://localhost:5000".to_owned(), true)
            ]
        );
        assert_eq!(r.endpoints("[::1]:5000").unwrap().len(), 2);
        let eps = r.endpoints("10.0.0.1:5000").unwrap();
        assert_eq!(eps.len(), 1);
        assert!(!eps[0].plain_http);
        // An https mirror entry for the local host is the operator's choice: no fallback.
        let r = registries(&[("127.0.0.1:5000", &["https://127.0.0.1:5000"])]);
        assert_eq!(r.endpoints("127.0.0.1:5000").unwrap().len(), 1);
    }

    #[test]
    fn credentials_decode_and_redact() {
        let c = Credentials {
            auth: base64::engine::general_purpose::STANDARD.encode("u:p:w"),
            ..Default::default()
        };
        assert!(matches!(c.auth(), Ok(Auth::Basic(u, p)) if u == "u" && p == "p:w"));
        let c = Credentials {
            auth: "!!".into(),
            ..Default::default()
        };
        assert!(matches!(c.auth(), Err(PullError::BadCredentials(_))));
        let c = Credentials {
            username: "me".into(),
            password: "secret".into(),
            ..Default::default()
        };
        assert!(!format!("{c:?}").contains("secret"));
        assert!(Credentials::default().is_anonymous());
    }

    #[test]
    fn credentials_go_only_to_the_registry_they_name() {
        let for_addr = |a: &str| Credentials {
            server_address: a.into(),
            ..Default::default()
        };
        assert!(for_addr("").applies_to("reg.example:5000"));
        assert!(for_addr("reg.example:5000").applies_to("reg.example:5000"));
        assert!(for_addr("https://reg.example:5000/v2/").applies_to("reg.example:5000"));
        assert!(for_addr("https://index.docker.io/v1/").applies_to("docker.io"));
        assert!(!for_addr("https://index.docker.io/v1/").applies_to("quay.io"));
        assert!(!for_addr("reg.example").applies_to("reg.example:5000"));
    }
}
