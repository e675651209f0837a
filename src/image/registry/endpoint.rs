//! An endpoint a pull goes to: a mirror or the image's own registry.

/// One place to pull from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
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

#[cfg(test)]
mod tests {
    use super::*;

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
