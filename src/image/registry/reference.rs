//! Image references: parsing and normalisation the way kubelet and containerd do it
//! (`busybox` -> `docker.io/library/busybox:latest`), following the grammar of the distribution
//! project's `reference` package: `[domain/]path[:tag][@digest]`.
//!
//! The one parser of references and the one place that knows Docker Hub's three names: the
//! registry client's own reference type is built from an `ImageRef` (`to_oci`), never parsed
//! again, so the two cannot disagree on the repository, the host or the mirror namespace.

use std::fmt;

use crate::image::digest::Digest;

/// The registry a reference without a domain points at.
pub const DEFAULT_DOMAIN: &str = "docker.io";
const LEGACY_DEFAULT_DOMAIN: &str = "index.docker.io";
/// Docker Hub's registry API host (containerd's resolver uses it too).
const DOCKER_HUB_API: &str = "registry-1.docker.io";
const OFFICIAL_REPO_PREFIX: &str = "library/";
const DEFAULT_TAG: &str = "latest";
const MAX_NAME_LEN: usize = 255;
const MAX_TAG_LEN: usize = 128;
/// How much of a rejected reference an error message repeats.
const SHOWN_CHARS: usize = 100;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid image reference {reference:?}: {reason}")]
pub struct ReferenceError {
    pub reference: String,
    pub reason: &'static str,
}

/// A normalised reference: always a domain, and a tag or a digest (or both).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ImageRef {
    /// Registry host, with port if any (`docker.io`, `127.0.0.1:5000`).
    pub domain: String,
    /// Repository path inside the registry (`library/busybox`).
    pub path: String,
    pub tag: Option<String>,
    pub digest: Option<Digest>,
}

impl ImageRef {
    /// Parses `s`, filling in the docker.io domain and the `latest` tag when absent.
    pub fn parse(s: &str) -> Result<ImageRef, ReferenceError> {
        let err = |reason| ReferenceError {
            reference: shown(s),
            reason,
        };
        if s.is_empty() {
            return Err(err("empty"));
        }
        if s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(err("a 64-character hex string is an image id, not a name"));
        }
        let (rest, digest) = match s.split_once('@') {
            Some((r, d)) => (r, Some(d.parse::<Digest>().map_err(|_| err("bad digest"))?)),
            None => (s, None),
        };
        // A tag follows the last ':' that comes after the last '/' (a ':' before it is a port).
        let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
            None => (rest, None),
        };
        if let Some(t) = tag {
            if t.len() > MAX_TAG_LEN {
                return Err(err("tag longer than 128 characters"));
            }
            if !valid_tag(t) {
                return Err(err("bad tag"));
            }
        }
        let (domain, path) = split_domain(name);
        if !valid_domain(&domain) {
            return Err(err("bad registry host"));
        }
        if path.is_empty() || !path.split('/').all(valid_component) {
            return Err(err(if path.bytes().any(|b| b.is_ascii_uppercase()) {
                "repository name must be lowercase"
            } else {
                "bad repository name"
            }));
        }
        if domain.len() + 1 + path.len() > MAX_NAME_LEN {
            return Err(err("name longer than 255 characters"));
        }
        let tag = match (tag, &digest) {
            (None, None) => Some(DEFAULT_TAG.to_owned()),
            (t, _) => t.map(str::to_owned),
        };
        Ok(ImageRef {
            domain,
            path,
            tag,
            digest,
        })
    }

    /// `domain/path`, the repository's full name.
    pub fn name(&self) -> String {
        format!("{}/{}", self.domain, self.path)
    }

    /// `domain/path:tag`, when the reference has a tag.
    pub fn tagged(&self) -> Option<String> {
        self.tag.as_ref().map(|t| format!("{}:{t}", self.name()))
    }

    /// `domain/path@digest` for the given digest (the manifest a tag resolved to).
    pub fn digested(&self, digest: &Digest) -> String {
        format!("{}@{digest}", self.name())
    }
}

impl ImageRef {
    /// This reference in oci-client's type, for the requests it makes. Sent to `mirror` when
    /// given (the requests then carry `?ns=<domain>`, as containerd's do), else to the
    /// registry's API host.
    pub fn to_oci(&self, mirror: Option<&str>) -> oci_client::Reference {
        let registry = match mirror {
            Some(_) => self.domain.clone(),
            None => api_host(&self.domain).to_owned(),
        };
        let tag = self.tag.clone().unwrap_or_else(|| DEFAULT_TAG.to_owned());
        let mut r = match &self.digest {
            Some(d) => oci_client::Reference::with_tag_and_digest(
                registry,
                self.path.clone(),
                tag,
                d.to_string(),
            ),
            None => oci_client::Reference::with_tag(registry, self.path.clone(), tag),
        };
        if let Some(m) = mirror {
            r.set_mirror_registry(m.to_owned());
        }
        r
    }
}

/// The host that serves the registry API for `domain`: Docker Hub's lives apart.
pub fn api_host(domain: &str) -> &str {
    if is_docker_hub(domain) {
        DOCKER_HUB_API
    } else {
        domain
    }
}

fn is_docker_hub(host: &str) -> bool {
    [DEFAULT_DOMAIN, LEGACY_DEFAULT_DOMAIN, DOCKER_HUB_API]
        .iter()
        .any(|h| h.eq_ignore_ascii_case(host))
}

/// Whether two registry host names name the same registry (Docker Hub goes by three).
pub fn same_registry(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b) || (is_docker_hub(a) && is_docker_hub(b))
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name())?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

/// A reference as an error repeats it: at most `SHOWN_CHARS` characters.
fn shown(s: &str) -> String {
    match s.char_indices().nth(SHOWN_CHARS) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// The first component is a domain when it looks like a host: it has a `.` or a `:`, or is
/// `localhost`, or has uppercase letters (which repository names never have).
fn split_domain(name: &str) -> (String, String) {
    let (domain, path) = match name.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first.bytes().any(|b| b.is_ascii_uppercase()) =>
        {
            (first.to_owned(), rest.to_owned())
        }
        _ => (DEFAULT_DOMAIN.to_owned(), name.to_owned()),
    };
    let domain = if domain == LEGACY_DEFAULT_DOMAIN {
        DEFAULT_DOMAIN.to_owned()
    } else {
        domain
    };
    let path = if domain == DEFAULT_DOMAIN && !path.contains('/') {
        format!("{OFFICIAL_REPO_PREFIX}{path}")
    } else {
        path
    };
    (domain, path)
}

/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`
fn valid_component(c: &str) -> bool {
    let b = c.as_bytes();
    let alnum = |x: u8| x.is_ascii_lowercase() || x.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-');
        if !ok {
            return false;
        }
    }
    true
}

/// `[\w][\w.-]{0,127}`
fn valid_tag(t: &str) -> bool {
    let word = |x: u8| x.is_ascii_alphanumeric() || x == b'_';
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_TAG_LEN
        && word(b[0])
        && b.iter().all(|&x| word(x) || x == b'.' || x == b'-')
}

/// A DNS name (labels of letters, digits and inner dashes) or a bracketed IPv6 address,
/// with an optional numeric port.
fn valid_domain(d: &str) -> bool {
    let (host, port) = if let Some(rest) = d.strip_prefix('[') {
        match rest.split_once(']') {
            Some((v6, tail)) if v6.parse::<std::net::Ipv6Addr>().is_ok() => {
                ("v6", tail.strip_prefix(':'))
            }
            _ => return false,
        }
    } else {
        match d.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (d, None),
        }
    };
    if let Some(p) = port {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) || p.parse::<u16>().is_err() {
            return false;
        }
    }
    !host.is_empty()
        && host.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter().all(|&x| x.is_ascii_alphanumeric() || x == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(s: &str) -> String {
        ImageRef::parse(s).unwrap().to_string()
    }

    #[test]
    fn docker_hub_short_names_are_normalised() {
        assert_eq!(norm("busybox"), "docker.io/library/busybox:latest");
        assert_eq!(norm("busybox:1.36"), "docker.io/library/busybox:1.36");
        assert_eq!(norm("library/busybox"), "docker.io/library/busybox:latest");
        assert_eq!(norm("user/app:v1"), "docker.io/user/app:v1");
        assert_eq!(
            norm("index.docker.io/busybox"),
            "docker.io/library/busybox:latest"
        );
        assert_eq!(
            norm("docker.io/busybox"),
            "docker.io/library/busybox:latest"
        );
    }

    #[test]
    fn domains_ports_and_digests() {
        assert_eq!(
            norm("registry.k8s.io/pause:3.9"),
            "registry.k8s.io/pause:3.9"
        );
        assert_eq!(norm("localhost/app"), "localhost/app:latest");
        assert_eq!(norm("127.0.0.1:5000/a/b/c"), "127.0.0.1:5000/a/b/c:latest");
        assert_eq!(norm("[::1]:5000/app:1"), "[::1]:5000/app:1");
        let d = format!("sha256:{}", "b".repeat(64));
        let r = ImageRef::parse(&format!("quay.io/x/y@{d}")).unwrap();
        assert_eq!(r.tag, None);
        assert_eq!(r.digest.unwrap().to_string(), d);
        let r = ImageRef::parse(&format!("x:1@{d}")).unwrap();
        assert_eq!(r.tag.as_deref(), Some("1"));
        assert_eq!(r.tagged().unwrap(), "docker.io/library/x:1");
    }

    #[test]
    fn malformed_references_are_rejected() {
        for bad in [
            "",
            "Busybox",
            "busybox:",
            "busybox:-x",
            "busybox@sha256:abc",
            "a//b",
            "-a",
            "a-",
            "a..b",
            "host:port/x",
            "UPPER.io:99999/x",
            "busybox:tag with space",
            &"a".repeat(64).replace('a', "f"),
            &format!("x/{}", "a".repeat(300)),
            "a/b:c:d",
        ] {
            assert!(ImageRef::parse(bad).is_err(), "{bad:?} should be rejected");
        }
        let long = format!("x:{}", "t".repeat(10_000));
        let e = ImageRef::parse(&long).unwrap_err();
        assert_eq!(e.reason, "tag longer than 128 characters");
        assert!(e.to_string().len() < 200, "{e}");
    }

    #[test]
    fn the_registry_client_sees_the_same_reference() {
        let d = format!("sha256:{}", "c".repeat(64));
        for s in [
            "busybox".to_owned(),
            "library/busybox:1.36".to_owned(),
            "docker.io/foo/bar:x".to_owned(),
            "index.docker.io/foo/bar".to_owned(),
            "quay.io/a/b/c:v1".to_owned(),
            format!("127.0.0.1:5000/x/y@{d}"),
            "localhost/x:1".to_owned(),
        ] {
            let ours = ImageRef::parse(&s).unwrap();
            let theirs: oci_client::Reference = s.parse().unwrap();
            assert!(same_registry(&ours.domain, theirs.registry()), "{s}");
            assert_eq!(ours.path, theirs.repository(), "{s}");
            let direct = ours.to_oci(None);
            assert_eq!(direct.repository(), ours.path, "{s}");
            assert_eq!(direct.resolve_registry(), api_host(&ours.domain), "{s}");
            assert_eq!(direct.namespace(), None);
            assert_eq!(direct.digest(), theirs.digest(), "{s}");
            let mirrored = ours.to_oci(Some("127.0.0.1:5001"));
            assert_eq!(mirrored.resolve_registry(), "127.0.0.1:5001");
            assert_eq!(mirrored.namespace(), Some(ours.domain.as_str()), "{s}");
        }
        assert_eq!(api_host("docker.io"), "registry-1.docker.io");
        assert!(same_registry("index.docker.io", "docker.io"));
        assert!(!same_registry("quay.io", "docker.io"));
    }
}
