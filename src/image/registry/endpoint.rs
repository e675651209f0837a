//! An endpoint a pull goes to: a mirror or the image's own registry.

use std::path::PathBuf;
use std::sync::Arc;

/// One place to pull from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    /// The endpoint's path as configured (`/v2/hub-proxy`, `/repository/hub`), empty for a
    /// plain registry.
    pub path: String,
    /// Where the registry API is on the host: `/v2` on a plain registry.
    pub api_root: String,
    /// TLS settings of its own (a host directory's, `hosts.rs`), in place of those
    /// `registry.configs` has for the host.
    pub tls: Option<Arc<HostTls>>,
    pub plain_http: bool,
    /// The image's own registry (credentials go only here).
    pub upstream: bool,
    /// Plain HTTP to a registry on this node, tried only when HTTPS to it could not connect.
    pub fallback: bool,
}

/// Whether `host` (`name[:port]`, `[v6]:port`) is this node: `localhost` or a loopback address,
/// as containerd decides which registries it may reach over plain HTTP unasked.
pub fn is_local(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(
            host,
            |(h, p)| {
                if p.parse::<u16>().is_ok() { h } else { host }
            },
        ),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// TLS settings from a registry host directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostTls {
    /// Extra CA certificate files.
    pub ca_files: Vec<PathBuf>,
    /// The client certificate and its key (None: the key is in the certificate's file).
    pub client: Option<(PathBuf, Option<PathBuf>)>,
    pub skip_verify: Option<bool>,
}

impl Endpoint {
    /// The image's own registry, at `/v2`.
    pub fn upstream(domain: &str, plain_http: bool) -> Endpoint {
        Endpoint {
            host: domain.to_owned(),
            path: String::new(),
            api_root: "/v2".into(),
            tls: None,
            plain_http,
            upstream: true,
            fallback: plain_http,
        }
    }

    /// A mirror from crust's own configuration (`registry.mirrors`): its path read by
    /// `crate::config::endpoint_api_root`.
    pub fn mirror(host: &str, path: &str, plain_http: bool, domain: &str) -> Endpoint {
        Endpoint {
            host: host.to_owned(),
            path: path.to_owned(),
            api_root: crate::config::endpoint_api_root(path),
            tls: None,
            plain_http,
            upstream: host == domain && path.is_empty(),
            fallback: false,
        }
    }

    /// What the registry's `/v2/` ping (the auth challenge) is on this endpoint: the API root
    /// up to its `v2` segment (`/v2/hub-proxy` pings `/v2/`, `/repository/hub` pings
    /// `/repository/hub/v2/`).
    pub fn ping_path(&self) -> String {
        let root = &self.api_root;
        let end = root
            .match_indices("/v2")
            .map(|(i, m)| i + m.len())
            .find(|&end| root[end..].is_empty() || root[end..].starts_with('/'))
            .unwrap_or(root.len());
        format!("{}/", &root[..end])
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}://{}{}",
            if self.plain_http { "http" } else { "https" },
            self.host,
            self.path
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_moves_the_api_and_its_ping() {
        let ep = |path: &str| Endpoint::mirror("m", path, false, "d");
        let both = |path: &str| (ep(path).api_root.clone(), ep(path).ping_path());
        assert_eq!(both(""), ("/v2".into(), "/v2/".into()));
        assert_eq!(
            both("/v2/hub-proxy"),
            ("/v2/hub-proxy".into(), "/v2/".into())
        );
        assert_eq!(
            both("/repository/hub"),
            ("/repository/hub/v2".into(), "/repository/hub/v2/".into())
        );
        assert_eq!(both("/v2x/a"), ("/v2x/a/v2".into(), "/v2x/a/v2/".into()));
        assert_eq!(
            ep("/repository/hub").to_string(),
            "https://m/repository/hub"
        );
    }

    #[test]
    fn only_this_node_is_local() {
        for local in [
            "localhost",
            "localhost:5000",
            "127.0.0.1:5000",
            "127.1.2.3",
            "[::1]:5000",
            "[::1]",
        ] {
            assert!(is_local(local), "{local}");
        }
        for remote in [
            "registry.example",
            "10.0.0.1:5000",
            "[fd00::1]:5000",
            "localhost.example",
            "127.0.0.1.example:5000",
        ] {
            assert!(!is_local(remote), "{remote}");
        }
    }
}
