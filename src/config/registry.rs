//! Registry access: mirrors (endpoints with an optional path), per-host TLS and node
//! credentials, and containerd's host directories (`config_path`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Registry access, read by the image service.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RegistryConfig {
    /// Mirrors per registry host (`docker.io`, `registry.k8s.io`, or `*` for every host), tried
    /// in order before the host itself. Plain `http://` is used only for endpoints named here.
    pub mirrors: BTreeMap<String, MirrorConfig>,
    /// TLS settings per endpoint host (`host[:port]`).
    pub configs: BTreeMap<String, RegistryHostConfig>,
    /// containerd's registry host directories (`hosts.toml`, `:`-separated roots such as
    /// `/etc/containerd/certs.d`), read on every pull before `mirrors`; empty for none.
    pub config_path: String,
}

impl RegistryConfig {
    /// The roots `config_path` names, in order.
    pub fn host_dirs(&self) -> Vec<PathBuf> {
        self.config_path
            .split(':')
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .collect()
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MirrorConfig {
    /// `http://host[:port][/path]` or `https://host[:port][/path]` (see `endpoint_api_root`
    /// for what a path means).
    pub endpoints: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RegistryHostConfig {
    /// PEM file of extra CA certificates trusted for this host.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate (chain) presented to a registry that asks for one (mTLS), with
    /// its private key in `key_file` (containerd's `registry.configs.<host>.tls.cert_file`).
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// Accept any certificate (testing only).
    pub insecure_skip_verify: bool,
    /// Credentials sent to this host when a pull carries none for it: node-level credentials,
    /// for a private mirror or registry (containerd's `registry.configs.<host>.auth`).
    pub auth: Option<RegistryCredentials>,
}

/// Node-level registry credentials: `username` + `password`, or `auth` (base64 of
/// `username:password`), or an `identity_token`. Never logged or shown: `Debug` and
/// `Serialize` (which `crictl info` reads) redact every secret.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RegistryCredentials {
    pub username: String,
    pub password: String,
    pub auth: String,
    pub identity_token: String,
}

impl RegistryCredentials {
    fn redacted(&self) -> BTreeMap<&'static str, &str> {
        let mut m = BTreeMap::new();
        if !self.username.is_empty() {
            m.insert("username", self.username.as_str());
        }
        for (key, value) in [
            ("password", &self.password),
            ("auth", &self.auth),
            ("identity_token", &self.identity_token),
        ] {
            if !value.is_empty() {
                m.insert(key, "<redacted>");
            }
        }
        m
    }

    /// Exactly one way to authenticate, and `auth` decodes to `username:password`.
    pub(super) fn validate(&self) -> Result<(), String> {
        let basic = !self.username.is_empty() || !self.password.is_empty();
        let ways = [
            basic,
            !self.auth.is_empty(),
            !self.identity_token.is_empty(),
        ];
        match ways.iter().filter(|w| **w).count() {
            0 => return Err("set username and password, auth, or identity_token".into()),
            1 => {}
            _ => return Err("set only one of username/password, auth, identity_token".into()),
        }
        if basic && (self.username.is_empty() || self.password.is_empty()) {
            return Err("username and password go together".into());
        }
        if !self.auth.is_empty() && decode_basic_auth(&self.auth).is_none() {
            return Err("auth is not base64 of username:password".into());
        }
        Ok(())
    }
}

/// The username and password in a docker-style `auth` value (base64 of `username:password`).
pub fn decode_basic_auth(auth: &str) -> Option<(String, String)> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(auth.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (u, p) = text.split_once(':')?;
    Some((u.to_owned(), p.to_owned()))
}

impl std::fmt::Debug for RegistryCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.redacted()).finish()
    }
}

impl Serialize for RegistryCredentials {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.redacted().serialize(s)
    }
}

/// The `host[:port]` of a mirror endpoint `scheme://host[:port][/]`, or None when malformed.
pub fn endpoint_host(endpoint: &str) -> Option<&str> {
    endpoint_parts(endpoint).map(|(host, _)| host)
}

/// The host and the path (without a trailing `/`, empty when there is none) of a mirror
/// endpoint `http[s]://host[:port][/path]`; None when it is not one. A path is how pull-through
/// caches behind one host tell their upstreams apart (Harbor's proxy-cache projects, Artifactory
/// and Nexus remotes): see `endpoint_api_root`.
pub fn endpoint_parts(endpoint: &str) -> Option<(&str, &str)> {
    let rest = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))?;
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = path.trim_end_matches('/');
    let host_ok = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b));
    // A path of plain segments: no query, fragment, escape, `.` or `..` to reinterpret.
    let path_ok = path.split('/').skip(1).all(|seg| {
        !seg.is_empty()
            && seg != "."
            && seg != ".."
            && seg
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
    });
    (host_ok && path_ok).then_some((host, path))
}

/// The path of the registry API (what `/v2` is on a plain registry) on a mirror endpoint, as
/// containerd's hosts.toml reads a host URL: a path with a `v2` segment is the API root as
/// given (containerd's `override_path = true`: `https://harbor.example/v2/hub-proxy`, whose
/// requests go to `/v2/hub-proxy/<repository>/manifests/...`); any other path has `/v2`
/// appended (`https://nexus.example/repository/hub` serves `/repository/hub/v2/...`).
pub fn endpoint_api_root(path: &str) -> String {
    if path.split('/').any(|seg| seg == "v2") {
        path.to_owned()
    } else {
        format!("{path}/v2")
    }
}
