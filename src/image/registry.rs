//! Talking to registries: which endpoints to try for a host (configured mirrors in order, then
//! the host itself), the `oci-client` client for each, credentials from the CRI request, and
//! turning registry failures into `PullError`s that say what was wrong.
//!
//! Credentials from a request are sent only to the image's own registry, never to a mirror.
//! They are never logged: `Credentials` redacts itself in `Debug`.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use oci_client::client::{
    Certificate, CertificateEncoding, ClientConfig, ClientProtocol, SizedStream,
};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, RegistryOperation};

use super::digest::Digest;
use super::manifest::{ACCEPTED_MANIFESTS, Descriptor};
use super::reference::ImageRef;
use super::{ImageSettings, PullError};
use crate::config::{RegistryConfig, endpoint_host};

/// Credentials from a PullImage request's AuthConfig.
#[derive(Clone, Default)]
pub struct Credentials {
    pub username: String,
    pub password: String,
    /// base64 of `username:password`.
    pub auth: String,
    /// A refresh token exchanged at the registry's token endpoint for an access token.
    pub identity_token: String,
    /// A bearer token sent to the registry as is.
    pub registry_token: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// How a session authenticates.
enum Auth {
    Anonymous,
    Basic(String, String),
    Bearer(String),
    Identity(String),
}

impl Credentials {
    fn auth(&self) -> Result<Auth, PullError> {
        if !self.registry_token.is_empty() {
            return Ok(Auth::Bearer(self.registry_token.clone()));
        }
        if !self.identity_token.is_empty() {
            return Ok(Auth::Identity(self.identity_token.clone()));
        }
        if !self.auth.is_empty() {
            let bad =
                || PullError::BadCredentials("auth is not base64 of username:password".into());
            let raw = base64::engine::general_purpose::STANDARD
                .decode(self.auth.trim())
                .map_err(|_| bad())?;
            let text = String::from_utf8(raw).map_err(|_| bad())?;
            let (u, p) = text.split_once(':').ok_or_else(bad)?;
            return Ok(Auth::Basic(u.to_owned(), p.to_owned()));
        }
        if !self.username.is_empty() {
            return Ok(Auth::Basic(self.username.clone(), self.password.clone()));
        }
        Ok(Auth::Anonymous)
    }

    pub fn is_anonymous(&self) -> bool {
        matches!(self.auth(), Ok(Auth::Anonymous))
    }
}

/// One place to pull from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub plain_http: bool,
    /// The image's own registry (credentials go only here).
    pub upstream: bool,
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}://{}",
            if self.plain_http { "http" } else { "https" },
            self.host
        )
    }
}

pub struct Registries {
    config: RegistryConfig,
    timeout: Duration,
    /// Anonymous clients per endpoint, kept for their connection pools and tokens.
    anonymous: Mutex<HashMap<String, Client>>,
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
            config: settings.registry.clone(),
            timeout: settings.progress_timeout,
            anonymous: Mutex::new(HashMap::new()),
        }
    }

    /// Mirrors configured for `domain` (then those for `*`), then `domain` itself unless a
    /// mirror already names it.
    pub fn endpoints(&self, domain: &str) -> Vec<Endpoint> {
        let mut out: Vec<Endpoint> = Vec::new();
        for key in [domain, "*"] {
            for e in self
                .config
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
                };
                if !out.contains(&ep) {
                    out.push(ep);
                }
            }
        }
        if !out.iter().any(|e| e.host == domain) {
            out.push(Endpoint {
                host: domain.to_owned(),
                plain_http: false,
                upstream: true,
            });
        }
        out
    }

    fn client(&self, ep: &Endpoint, fresh: bool) -> Result<Client, PullError> {
        let key = ep.to_string();
        if !fresh {
            if let Some(c) = super::lock(&self.anonymous).get(&key) {
                return Ok(c.clone());
            }
        }
        let host_cfg = self
            .config
            .configs
            .get(&ep.host)
            .cloned()
            .unwrap_or_default();
        let mut extra = Vec::new();
        if let Some(ca) = &host_cfg.ca_file {
            let data = std::fs::read(ca).map_err(super::local("reading CA file", ca))?;
            extra.push(Certificate {
                encoding: CertificateEncoding::Pem,
                data,
            });
        }
        let config = ClientConfig {
            protocol: if ep.plain_http {
                ClientProtocol::Http
            } else {
                ClientProtocol::Https
            },
            accept_invalid_certificates: host_cfg.insecure_skip_verify,
            extra_root_certificates: extra,
            connect_timeout: Some(self.timeout),
            read_timeout: Some(self.timeout),
            user_agent: concat!("crust/", env!("CARGO_PKG_VERSION")),
            ..Default::default()
        };
        let client = Client::try_from(config).map_err(|e| PullError::Registry {
            registry: ep.host.clone(),
            detail: format!("setting up the client: {e}"),
        })?;
        if !fresh {
            super::lock(&self.anonymous).insert(key, client.clone());
        }
        Ok(client)
    }

    /// Opens a session for `image` on `ep`, authenticating first when credentials apply.
    pub async fn session(
        &self,
        ep: &Endpoint,
        image: &ImageRef,
        creds: &Credentials,
    ) -> Result<Session, PullError> {
        let auth = if ep.upstream {
            creds.auth()?
        } else {
            Auth::Anonymous
        };
        let anonymous = matches!(auth, Auth::Anonymous);
        let client = self.client(ep, !anonymous)?;
        let mut reference = oci_client::Reference::with_tag(
            image.domain.clone(),
            image.path.clone(),
            "latest".into(),
        );
        if !ep.upstream {
            // Requests then go to the mirror with `?ns=<upstream>`, as containerd sends them.
            reference.set_mirror_registry(ep.host.clone());
        }
        let session = Session {
            client,
            reference,
            auth: RegistryAuth::Anonymous,
            registry: ep.host.clone(),
            timeout: self.timeout,
        };
        session.authenticate(auth, ep, &image.path).await
    }
}

/// A client bound to one repository on one endpoint.
pub struct Session {
    client: Client,
    reference: oci_client::Reference,
    auth: RegistryAuth,
    pub registry: String,
    timeout: Duration,
}

impl Session {
    async fn authenticate(
        mut self,
        auth: Auth,
        ep: &Endpoint,
        repo: &str,
    ) -> Result<Session, PullError> {
        self.auth = match auth {
            Auth::Anonymous => RegistryAuth::Anonymous,
            Auth::Basic(u, p) => RegistryAuth::Basic(u, p),
            Auth::Bearer(t) => RegistryAuth::Bearer(t),
            Auth::Identity(t) => {
                let what = format!("exchanging the identity token at {}", self.registry);
                let token = self
                    .within(&what, super::token::exchange(ep, repo, &t, self.timeout))
                    .await??;
                RegistryAuth::Bearer(token)
            }
        };
        // Anonymous sessions get their (anonymous) token lazily; failures surface as 401s.
        if !matches!(self.auth, RegistryAuth::Anonymous) {
            let what = format!("authenticating to {}", self.registry);
            let r = self
                .client
                .auth(&self.reference, &self.auth, RegistryOperation::Pull);
            self.within(&what, r)
                .await?
                .map_err(|e| self.classify(e, "credentials"))?;
        }
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

    /// Fetches the manifest or index named by `tag_or_digest`; returns its bytes and digest
    /// (verified against the digest when one was asked for).
    pub async fn manifest(&self, tag_or_digest: &str) -> Result<(Bytes, Digest), PullError> {
        let r = if tag_or_digest.contains(':') {
            self.reference.clone_with_digest(tag_or_digest.to_owned())
        } else {
            let mut r = oci_client::Reference::with_tag(
                self.reference.registry().to_owned(),
                self.reference.repository().to_owned(),
                tag_or_digest.to_owned(),
            );
            if let Some(m) = self.mirror() {
                r.set_mirror_registry(m);
            }
            r
        };
        let what = format!("manifest {}:{tag_or_digest}", self.reference.repository());
        let fetch = self
            .client
            .pull_manifest_raw(&r, &self.auth, ACCEPTED_MANIFESTS);
        let (bytes, digest) = self
            .within(&format!("fetching {what} from {}", self.registry), fetch)
            .await?
            .map_err(|e| self.classify(e, &what))?;
        let digest: Digest = digest.parse().map_err(|_| PullError::Registry {
            registry: self.registry.clone(),
            detail: format!("bad manifest digest {digest:?}"),
        })?;
        let actual = Digest::of(&bytes);
        if actual != digest {
            return Err(PullError::DigestMismatch {
                what,
                expected: digest.to_string(),
                actual: actual.to_string(),
            });
        }
        Ok((bytes, digest))
    }

    fn mirror(&self) -> Option<String> {
        let resolved = self.reference.resolve_registry();
        (resolved != self.reference.registry()).then(|| resolved.to_owned())
    }

    /// Starts streaming a blob.
    pub async fn blob(&self, desc: &Descriptor) -> Result<SizedStream, PullError> {
        let d = OciDescriptor {
            media_type: desc.media_type.clone(),
            digest: desc.digest.to_string(),
            size: desc.size,
            ..Default::default()
        };
        let what = format!("blob {}", desc.digest);
        let fetch = self.client.pull_blob_stream(&self.reference, &d);
        self.within(&format!("fetching {what} from {}", self.registry), fetch)
            .await?
            .map_err(|e| self.classify(e, &what))
    }

    /// What an oci-client error means for the user.
    pub fn classify(&self, e: OciDistributionError, what: &str) -> PullError {
        let registry = self.registry.clone();
        let anonymous = matches!(self.auth, RegistryAuth::Anonymous);
        let unauthenticated = |detail: String| PullError::Unauthenticated {
            registry: registry.clone(),
            detail,
        };
        let no_auth = || {
            if anonymous {
                unauthenticated(
                    "requires authentication and the request carried no credentials".into(),
                )
            } else {
                unauthenticated("rejected the credentials (HTTP 401)".into())
            }
        };
        let not_found = || PullError::NotFound {
            registry: registry.clone(),
            what: what.to_owned(),
        };
        match e {
            OciDistributionError::AuthenticationFailure(reason) => {
                unauthenticated(format!("rejected the credentials: {}", reason.trim()))
            }
            OciDistributionError::UnauthorizedError { .. } => no_auth(),
            OciDistributionError::ImageManifestNotFoundError(_) => not_found(),
            OciDistributionError::RegistryError { envelope, .. } => {
                let first = envelope.errors.first();
                let msg = first.map(|e| e.message.clone()).unwrap_or_default();
                match first.map(|e| &e.code) {
                    Some(
                        OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::BlobUnknown
                        | OciErrorCode::NotFound,
                    ) => not_found(),
                    Some(OciErrorCode::Unauthorized) => no_auth(),
                    Some(OciErrorCode::Denied) => PullError::Denied {
                        registry,
                        detail: msg,
                    },
                    _ => PullError::Registry {
                        registry,
                        detail: format!("{what}: {envelope}"),
                    },
                }
            }
            OciDistributionError::ServerError { code, message, .. } => match code {
                404 => not_found(),
                401 => no_auth(),
                403 => PullError::Denied {
                    registry,
                    detail: message,
                },
                _ => PullError::Registry {
                    registry,
                    detail: format!("{what}: HTTP {code}: {}", message.trim()),
                },
            },
            OciDistributionError::DigestError(d) => PullError::DigestMismatch {
                what: what.to_owned(),
                expected: String::new(),
                actual: d.to_string(),
            },
            OciDistributionError::RequestError(r) if r.is_timeout() => PullError::Stalled {
                what: format!("fetching {what} from {registry}"),
                secs: self.timeout.as_secs(),
            },
            OciDistributionError::RequestError(r) => PullError::Unreachable {
                registry,
                detail: error_chain(&r),
            },
            OciDistributionError::IoError(io) => PullError::Unreachable {
                registry,
                detail: io.to_string(),
            },
            OciDistributionError::UnsupportedMediaTypeError(t) => {
                PullError::Unsupported(format!("{what}: unsupported media type {t}"))
            }
            OciDistributionError::UnsupportedSchemaVersionError(v) => PullError::Unsupported(
                format!("{what}: manifest schema version {v} is not supported"),
            ),
            other => PullError::Registry {
                registry,
                detail: format!("{what}: {other}"),
            },
        }
    }
}

/// An error and its causes on one line (reqwest hides the useful part in `source()`).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
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
            config,
            timeout: Duration::from_secs(1),
            anonymous: Mutex::new(HashMap::new()),
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
                upstream: true
            }]
        );
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
}
