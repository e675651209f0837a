//! Credentials for registries: from a PullImage request's AuthConfig or the node's config,
//! which registry they apply to, and how a session authenticates with them. Never logged:
//! `Credentials` redacts itself in `Debug`.

use crate::config::{RegistryCredentials, decode_basic_auth};
use crate::image::PullError;

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
    /// The registry these credentials are for (`https://index.docker.io/v1/`, `reg:5000`);
    /// empty means the image's own registry.
    pub server_address: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// How a session authenticates.
pub(super) enum Auth {
    Anonymous,
    Basic(String, String),
    Bearer(String),
    Identity(String),
}

impl Credentials {
    pub(super) fn auth(&self) -> Result<Auth, PullError> {
        if !self.registry_token.is_empty() {
            return Ok(Auth::Bearer(self.registry_token.clone()));
        }
        if !self.identity_token.is_empty() {
            return Ok(Auth::Identity(self.identity_token.clone()));
        }
        if !self.auth.is_empty() {
            let (u, p) = decode_basic_auth(&self.auth).ok_or_else(|| {
                PullError::BadCredentials("auth is not base64 of username:password".into())
            })?;
            return Ok(Auth::Basic(u, p));
        }
        if !self.username.is_empty() {
            return Ok(Auth::Basic(self.username.clone(), self.password.clone()));
        }
        Ok(Auth::Anonymous)
    }

    /// Whether these credentials may be sent to `domain`: never to a registry other than the
    /// one they name (as containerd does), so a pull cannot leak them elsewhere.
    pub fn applies_to(&self, domain: &str) -> bool {
        let address = self.server_address.trim();
        if address.is_empty() {
            return true;
        }
        let rest = address.split_once("://").map_or(address, |(_, r)| r);
        let host = rest.split('/').next().unwrap_or_default();
        super::reference::same_registry(host, domain)
    }

    pub fn is_anonymous(&self) -> bool {
        matches!(self.auth(), Ok(Auth::Anonymous))
    }
}

impl From<&RegistryCredentials> for Credentials {
    fn from(c: &RegistryCredentials) -> Credentials {
        Credentials {
            username: c.username.clone(),
            password: c.password.clone(),
            auth: c.auth.clone(),
            identity_token: c.identity_token.clone(),
            ..Credentials::default()
        }
    }
}
