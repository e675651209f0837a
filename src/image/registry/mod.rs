//! Talking to registries: which endpoints to try for a host (configured mirrors in order, then
//! the host itself), the `oci-client` client for each (authentication and blobs; manifests go
//! through `http.rs`, which caps their size), credentials from the CRI request, and turning
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
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, RegistryOperation};

mod credentials;
mod endpoint;
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
use crate::config::{RegistryConfig, endpoint_host};
use crate::image::digest::{Algorithm, Digest};
use crate::image::{ImageSettings, PullError, local, lock};

/// A blob's bytes as they arrive.
pub type BlobStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<Bytes, reqwest::Error>> + Send>>;

pub struct Registries {
    /// Replaced whole by a configuration reload; a pull under way keeps the sessions it opened.
    config: std::sync::RwLock<std::sync::Arc<RegistryConfig>>,
    timeout: Duration,
    /// Clients per endpoint, kept for their connection pools and (anonymous) tokens.
    clients: Mutex<HashMap<String, (Client, reqwest::Client)>>,
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
    /// one: their TLS settings and tokens may not hold any more.
    pub fn set_config(&self, config: RegistryConfig) {
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = std::sync::Arc::new(config);
        lock(&self.clients).clear();
    }

    /// Mirrors configured for `domain` (then those for `*`), then `domain` itself unless a
    /// mirror already names it.
    pub fn endpoints(&self, domain: &str) -> Vec<Endpoint> {
        let config = self.config();
        let mut out: Vec<Endpoint> = Vec::new();
        for key in [domain, "*"] {
            for e in config
                .mirrors
                .get(key)
                .map(|m| m.endpoints.as_slice())
                .unwrap_or_default()
            {
                let Some(host) = endpoint_host(e) else {
                    continue;
                };
                let ep = Endpoint {
                    host: host.to_owned(),
                    plain_http: e.starts_with("http://"),
                    upstream: host == domain,
                    fallback: false,
                };
                if !out.contains(&ep) {
                    out.push(ep);
                }
            }
        }
        if !out.iter().any(|e| e.host == domain) {
            let upstream = |plain_http| Endpoint {
                host: domain.to_owned(),
                plain_http,
                upstream: true,
                fallback: plain_http,
            };
            out.push(upstream(false));
            // A registry on this node often speaks plain HTTP (a developer's, a node-local
            // cache): tried when HTTPS to it cannot connect, without a mirror entry. Every
            // other host stays HTTPS unless a mirror entry says http://.
            if endpoint::is_local(domain) {
                out.push(upstream(true));
            }
        }
        out
    }

    fn tls(&self, ep: &Endpoint) -> Result<Tls, PullError> {
        let host_cfg = self
            .config()
            .configs
            .get(&ep.host)
            .cloned()
            .unwrap_or_default();
        let ca_pem = match &host_cfg.ca_file {
            Some(ca) => Some(std::fs::read(ca).map_err(local("reading CA file", ca))?),
            None => None,
        };
        Ok(Tls {
            ca_pem,
            insecure_skip_verify: host_cfg.insecure_skip_verify,
        })
    }

    /// The oci-client client (a new one when `fresh`: an authenticated session must not share
    /// its token cache) and the plain client for `ep`.
    fn clients(&self, ep: &Endpoint, fresh: bool) -> Result<(Client, reqwest::Client), PullError> {
        let key = ep.to_string();
        let cached = lock(&self.clients).get(&key).cloned();
        if let Some((oci, http)) = &cached {
            if !fresh {
                return Ok((oci.clone(), http.clone()));
            }
        }
        let tls = self.tls(ep)?;
        let setup = |e: String| PullError::Registry {
            registry: ep.to_string(),
            detail: format!("could not be set up: {e}"),
        };
        let config = ClientConfig {
            protocol: if ep.plain_http {
                ClientProtocol::Http
            } else {
                ClientProtocol::Https
            },
            accept_invalid_certificates: tls.insecure_skip_verify,
            extra_root_certificates: tls
                .ca_pem
                .iter()
                .map(|pem| Certificate {
                    encoding: CertificateEncoding::Pem,
                    data: pem.clone(),
                })
                .collect(),
            connect_timeout: Some(self.timeout),
            read_timeout: Some(self.timeout),
            user_agent: concat!("crust/", env!("CARGO_PKG_VERSION")),
            ..Default::default()
        };
        let oci = Client::try_from(config).map_err(|e| setup(e.to_string()))?;
        let http = match cached {
            Some((_, http)) => http,
            None => http::client(&tls, self.timeout).map_err(|e| setup(e.to_string()))?,
        };
        if !fresh {
            lock(&self.clients).insert(key, (oci.clone(), http.clone()));
        }
        Ok((oci, http))
    }

    /// Opens a session for `image` on `ep`, authenticating first when credentials apply.
    pub async fn session(
        &self,
        ep: &Endpoint,
        image: &ImageRef,
        creds: &Credentials,
    ) -> Result<Session, PullError> {
        let (auth, credentials_from) = self.auth_for(ep, image, creds)?;
        let (client, http) = self.clients(ep, !matches!(auth, Auth::Anonymous))?;
        let reference = image.to_oci((!ep.upstream).then_some(ep.host.as_str()));
        let session = Session {
            client,
            http,
            reference,
            auth: RegistryAuth::Anonymous,
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
    client: Client,
    http: reqwest::Client,
    reference: oci_client::Reference,
    auth: RegistryAuth,
    /// What crust's own requests send (the token oci-client obtained, or basic credentials).
    header: AuthHeader,
    endpoint: Endpoint,
    /// The endpoint as messages name it (`https://host`).
    pub registry: String,
    /// Where the credentials sent came from, for messages (empty when none were sent).
    credentials_from: String,
    timeout: Duration,
}

impl Session {
    /// Authenticates with oci-client's challenge flow, which caches the token for the blob
    /// requests it makes, and keeps the token for crust's own manifest requests.
    async fn authenticate(mut self, auth: Auth) -> Result<Session, PullError> {
        let mut basic = None;
        self.auth = match auth {
            Auth::Anonymous => RegistryAuth::Anonymous,
            Auth::Basic(u, p) => {
                basic = Some((u.clone(), p.clone()));
                RegistryAuth::Basic(u, p)
            }
            Auth::Bearer(t) => RegistryAuth::Bearer(t),
            Auth::Identity(t) => {
                let what = format!("exchanging the identity token at {}", self.registry);
                let exchange =
                    token::exchange(&self.http, &self.endpoint, self.reference.repository(), &t);
                RegistryAuth::Bearer(self.within(&what, exchange).await??)
            }
        };
        let what = format!("authenticating to {}", self.registry);
        let r = self
            .client
            .auth(&self.reference, &self.auth, RegistryOperation::Pull);
        let token = self
            .within(&what, r)
            .await?
            .map_err(|e| self.classify(e, "credentials"))?;
        self.header = match (token, basic) {
            (Some(t), _) => AuthHeader::Bearer(t),
            (None, Some((u, p))) => AuthHeader::Basic(u, p),
            (None, None) => AuthHeader::None,
        };
        Ok(self)
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
            "{}/v2/{repo}/manifests/{tag_or_digest}{}",
            self.base_url(),
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

    /// `scheme://host` of the endpoint as oci-client addresses it (Docker Hub's API host).
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
            "{}/v2/{repo}/blobs/{}{}",
            self.base_url(),
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

    fn anonymous(&self) -> bool {
        matches!(self.auth, RegistryAuth::Anonymous)
    }

    /// A 401: no credentials sent, or these ones refused.
    fn no_auth(&self) -> PullError {
        let detail = if !self.anonymous() {
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

    /// What an oci-client error means for the user.
    pub fn classify(&self, e: OciDistributionError, what: &str) -> PullError {
        let registry = self.registry.clone();
        match e {
            OciDistributionError::AuthenticationFailure(_) if self.anonymous() => self.no_auth(),
            OciDistributionError::AuthenticationFailure(reason) => {
                let reason = http::brief(reason.as_bytes());
                let refused = format!("rejected the credentials {}", self.credentials_from);
                PullError::Unauthenticated {
                    registry,
                    detail: if reason.is_empty() {
                        refused
                    } else {
                        format!("{refused}: {reason}")
                    },
                }
            }
            OciDistributionError::UnauthorizedError { .. } => self.no_auth(),
            OciDistributionError::ImageManifestNotFoundError(_) => PullError::NotFound {
                registry,
                what: what.to_owned(),
            },
            OciDistributionError::RegistryError { envelope, .. } => {
                let body = serde_json::to_vec(&envelope).unwrap_or_default();
                let status = match envelope.errors.first().map(|e| &e.code) {
                    Some(OciErrorCode::Unauthorized) => 401,
                    Some(OciErrorCode::Denied) => 403,
                    Some(OciErrorCode::Toomanyrequests) => 429,
                    _ => 400,
                };
                self.status_error(status, &body, what)
            }
            OciDistributionError::ServerError { code, message, .. } => {
                self.status_error(code, message.as_bytes(), what)
            }
            OciDistributionError::DigestError(d) => PullError::DigestMismatch {
                what: what.to_owned(),
                expected: String::new(),
                actual: d.to_string(),
            },
            OciDistributionError::RequestError(r) if r.is_timeout() => PullError::Stalled {
                what: format!("fetching {what} from {registry}"),
                secs: self.timeout.as_secs(),
            },
            OciDistributionError::RequestError(r) => self.unreachable(&r),
            OciDistributionError::IoError(io) => self.unreachable(&io),
            OciDistributionError::UnsupportedMediaTypeError(t) => {
                PullError::Unsupported(format!("{what}: unsupported media type {t}"))
            }
            OciDistributionError::UnsupportedSchemaVersionError(v) => PullError::Unsupported(
                format!("{what}: manifest schema version {v} is not supported"),
            ),
            other => PullError::Registry {
                registry,
                detail: http::clip(&format!("failed on {what}: {other}")),
            },
        }
    }
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
        let eps = r.endpoints("quay.io");
        assert_eq!(eps.len(), 2);
        assert!(eps[1].upstream && !eps[1].plain_http);
    }

    #[test]
    fn a_host_named_as_its_own_mirror_is_tried_once_over_http() {
        let r = registries(&[("127.0.0.1:5001", &["http://127.0.0.1:5001"])]);
        let eps = r.endpoints("127.0.0.1:5001");
        assert_eq!(
            eps,
            [Endpoint {
                host: "127.0.0.1:5001".into(),
                plain_http: true,
                upstream: true,
                fallback: false,
            }]
        );
    }

    #[test]
    fn a_registry_on_this_node_falls_back_to_plain_http_and_no_other_does() {
        let r = registries(&[]);
        let eps: Vec<(String, bool)> = r
            .endpoints("localhost:5000")
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
        assert_eq!(r.endpoints("[::1]:5000").len(), 2);
        let eps = r.endpoints("10.0.0.1:5000");
        assert_eq!(eps.len(), 1);
        assert!(!eps[0].plain_http);
        // An https mirror entry for the local host is the operator's choice: no fallback.
        let r = registries(&[("127.0.0.1:5000", &["https://127.0.0.1:5000"])]);
        assert_eq!(r.endpoints("127.0.0.1:5000").len(), 1);
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
