//! containerd's registry host directories (`config_path`, docs/hosts.md of containerd): for a
//! registry `host[:port]`, the first of `<root>/<host[:port]>`, `<root>/<host>_<port>_` and
//! `<root>/_default` that exists holds a `hosts.toml` or, without one, Docker's certificate
//! files (`*.crt` CAs, `*.cert` client certificates with their `*.key`). k3s, RKE2, Talos and
//! node-local caches (Spegel, Dragonfly) write these; crust reads them as containerd's
//! `core/remotes/docker/config/hosts.go` does, on every pull, so an edit needs no reload.
//!
//! A `hosts.toml`: `[host."<url>"]` tables, tried in the file's order, then `server` (the
//! registry itself when absent). Each may set `capabilities` (a host lacking `pull` or
//! `resolve` is not used: crust resolves tags and fetches blobs from the same endpoint), `ca`,
//! `client`, `skip_verify` and `override_path` (the URL's path is the API root as given;
//! without it `/v2` is appended unless the path ends with it). `header` and `dial_timeout`
//! are not supported and refused by name, so that a file relying on them fails loudly.

use std::path::{Path, PathBuf};

use toml::Value;

use super::endpoint::{Endpoint, HostTls};

/// A host directory that could not be read, or a `hosts.toml` crust cannot follow.
#[derive(Debug, thiserror::Error)]
#[error("registry host file {path}: {msg}")]
pub struct HostsError {
    pub path: PathBuf,
    pub msg: String,
}

/// The endpoints the host directory of `domain` under one of `roots` names, in order (the
/// first root with a directory for it wins); None when no root has one.
pub fn endpoints(roots: &[PathBuf], domain: &str) -> Result<Option<Vec<Endpoint>>, HostsError> {
    for root in roots {
        let Some(dir) = host_dir(root, domain) else {
            continue;
        };
        let file = dir.join("hosts.toml");
        return match std::fs::read_to_string(&file) {
            Ok(text) if !text.trim().is_empty() => parse(&file, &text, domain).map(Some),
            Ok(_) => cert_files(&dir, domain).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                cert_files(&dir, domain).map(Some)
            }
            Err(e) => Err(HostsError {
                path: file,
                msg: e.to_string(),
            }),
        };
    }
    Ok(None)
}

fn host_dir(root: &Path, domain: &str) -> Option<PathBuf> {
    let mut names = vec![domain.to_owned()];
    if let Some((host, port)) = domain.rsplit_once(':') {
        names.push(format!("{host}_{port}_"));
    }
    names.push("_default".into());
    names.into_iter().map(|n| root.join(n)).find(|p| p.is_dir())
}

/// Docker's layout: the registry itself with the directory's CAs and client certificates.
fn cert_files(dir: &Path, domain: &str) -> Result<Vec<Endpoint>, HostsError> {
    let unreadable = |e: std::io::Error| HostsError {
        path: dir.to_owned(),
        msg: e.to_string(),
    };
    let mut tls = HostTls::default();
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(unreadable)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    names.sort();
    for p in names {
        match p.extension().and_then(|e| e.to_str()) {
            Some("crt") => tls.ca_files.push(p),
            Some("cert") if tls.client.is_none() => {
                let key = p.with_extension("key");
                tls.client = Some((p, key.is_file().then_some(key)));
            }
            _ => {}
        }
    }
    Ok(vec![upstream(domain, tls)])
}

fn upstream(domain: &str, tls: HostTls) -> Endpoint {
    Endpoint {
        tls: Some(std::sync::Arc::new(tls)),
        ..Endpoint::upstream(domain, false)
    }
}

fn parse(file: &Path, text: &str, domain: &str) -> Result<Vec<Endpoint>, HostsError> {
    let bad = |msg: String| HostsError {
        path: file.to_owned(),
        msg,
    };
    let doc: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| bad(e.to_string()))?;
    let base = file.parent().unwrap_or(Path::new("/"));
    let hosts = doc.get("host").and_then(Value::as_table);
    let mut out = Vec::new();
    for url in table_order(text) {
        let Some(entry) = hosts.and_then(|h| h.get(&url)).and_then(Value::as_table) else {
            continue;
        };
        if let Some(ep) =
            host(&url, entry, base, domain, false).map_err(|m| bad(format!("host {url:?}: {m}")))?
        {
            out.push(ep);
        }
    }
    let server = doc.get("server").and_then(Value::as_str);
    let root = host(server.unwrap_or(""), &doc, base, domain, true)
        .map_err(|m| bad(format!("server: {m}")))?;
    out.extend(root);
    Ok(out)
}

/// One endpoint from a host table (or the file's top level for `server`, `url` empty for the
/// registry itself); None when its capabilities leave pulls out.
fn host(
    url: &str,
    t: &toml::Table,
    base: &Path,
    domain: &str,
    is_server: bool,
) -> Result<Option<Endpoint>, String> {
    for unsupported in ["header", "dial_timeout"] {
        if t.contains_key(unsupported) {
            return Err(format!("{unsupported} is not supported by crust"));
        }
    }
    let caps = match t.get("capabilities") {
        None => vec!["pull".to_owned(), "resolve".to_owned()],
        Some(v) => strings(v).ok_or("capabilities is not a list of strings")?,
    };
    for c in &caps {
        if !matches!(c.to_ascii_lowercase().as_str(), "pull" | "resolve" | "push") {
            return Err(format!("unknown capability {c:?}"));
        }
    }
    let has = |c: &str| caps.iter().any(|x| x.eq_ignore_ascii_case(c));
    if !(has("pull") && has("resolve")) {
        return Ok(None);
    }
    let tls = tls_of(t, base)?;
    let override_path = t
        .get("override_path")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if url.is_empty() {
        return Ok(Some(upstream(domain, tls)));
    }
    let url = if url.starts_with("http") {
        url.to_owned()
    } else {
        format!("https://{url}")
    };
    let (host, path) = crate::config::endpoint_parts(&url)
        .ok_or("not a URL http[s]://host[:port][/path] crust can follow")?;
    let api_root = match (path.is_empty(), override_path) {
        (true, false) => "/v2".to_owned(),
        (_, true) => path.to_owned(),
        (false, false) if path.ends_with("/v2") => path.to_owned(),
        (false, false) => format!("{path}/v2"),
    };
    Ok(Some(Endpoint {
        host: host.to_owned(),
        path: path.to_owned(),
        api_root,
        plain_http: url.starts_with("http://"),
        // `server` is the registry itself, wherever the file says it is.
        upstream: is_server || host == domain && path.is_empty(),
        fallback: false,
        tls: Some(std::sync::Arc::new(tls)),
    }))
}

fn tls_of(t: &toml::Table, base: &Path) -> Result<HostTls, String> {
    let abs = |p: &str| {
        let p = Path::new(p);
        if p.is_absolute() {
            p.to_owned()
        } else {
            base.join(p)
        }
    };
    let mut tls = HostTls {
        skip_verify: t.get("skip_verify").and_then(Value::as_bool),
        ..HostTls::default()
    };
    if let Some(ca) = t.get("ca") {
        let list = match ca {
            Value::String(s) => vec![s.clone()],
            v => strings(v).ok_or("ca is neither a path nor a list of paths")?,
        };
        tls.ca_files = list.iter().map(|p| abs(p)).collect();
    }
    // A path (certificate and key in one file), a list of such paths, or [cert, key] pairs;
    // one client certificate is presented, the first.
    tls.client = match t.get("client") {
        None => None,
        Some(Value::String(s)) => Some((abs(s), None)),
        Some(Value::Array(items)) => match items.first() {
            None => None,
            Some(Value::String(s)) => Some((abs(s), None)),
            Some(pair @ Value::Array(_)) => match strings(pair).as_deref() {
                Some([cert, key]) => Some((abs(cert), Some(abs(key)))),
                _ => return Err("a client pair is not [certificate, key]".into()),
            },
            Some(_) => return Err("client is not a path, a list of paths or of pairs".into()),
        },
        Some(_) => return Err("client is not a path, a list of paths or of pairs".into()),
    };
    Ok(tls)
}

fn strings(v: &Value) -> Option<Vec<String>> {
    v.as_array()?
        .iter()
        .map(|x| x.as_str().map(str::to_owned))
        .collect()
}

/// The `[host."<url>"]` tables in the order the file has them (a TOML table has none): the
/// order is the order of trial.
fn table_order(text: &str) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let Some(inner) = line
            .strip_prefix("[host.")
            .and_then(|l| l.split(']').next())
        else {
            continue;
        };
        let key = match inner.strip_prefix('"') {
            Some(rest) => rest.split('"').next().unwrap_or_default(),
            None => inner.split('.').next().unwrap_or_default(),
        };
        if !key.is_empty() && !seen.iter().any(|k| k == key) {
            seen.push(key.to_owned());
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::create_dir_all(dir.join(name)).unwrap();
        std::fs::write(dir.join(name).join("hosts.toml"), text).unwrap();
    }

    #[test]
    fn hosts_are_tried_in_file_order_then_the_server() {
        let root = tempfile::tempdir().unwrap();
        write(
            root.path(),
            "docker.io",
            r#"server = "https://registry-1.docker.io"
[host."https://harbor.example/v2/hub-proxy"]
  capabilities = ["pull", "resolve"]
  override_path = true
  ca = "harbor-ca.pem"
[host."http://10.0.0.9:5000"]
  capabilities = ["pull", "resolve"]
  client = [["/etc/c.cert", "/etc/c.key"]]
  skip_verify = true
[host."https://push-only.example"]
  capabilities = ["push"]
[host."https://nexus.example/repository/hub"]
"#,
        );
        let eps = endpoints(&[root.path().to_owned()], "docker.io")
            .unwrap()
            .unwrap();
        let seen: Vec<(String, String, bool)> = eps
            .iter()
            .map(|e| (e.to_string(), e.api_root.clone(), e.upstream))
            .collect();
        assert_eq!(
            seen,
            [
                (
                    "https://harbor.example/v2/hub-proxy".into(),
                    "/v2/hub-proxy".into(),
                    false
                ),
                ("http://10.0.0.9:5000".into(), "/v2".into(), false),
                (
                    "https://nexus.example/repository/hub".into(),
                    "/repository/hub/v2".into(),
                    false
                ),
                ("https://registry-1.docker.io".into(), "/v2".into(), true),
            ]
        );
        let harbor = eps[0].tls.as_ref().unwrap();
        assert_eq!(
            harbor.ca_files,
            [root.path().join("docker.io/harbor-ca.pem")]
        );
        let lan = eps[1].tls.as_ref().unwrap();
        assert_eq!(lan.skip_verify, Some(true));
        assert_eq!(
            lan.client,
            Some(("/etc/c.cert".into(), Some("/etc/c.key".into())))
        );
    }

    #[test]
    fn the_port_form_and_default_directories_and_docker_cert_files() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "_default", "[host.\"https://cache.lan\"]\n");
        write(root.path(), "reg.lan_5000_", "");
        std::fs::write(root.path().join("reg.lan_5000_/ca.crt"), "x").unwrap();
        std::fs::write(root.path().join("reg.lan_5000_/node.cert"), "x").unwrap();
        std::fs::write(root.path().join("reg.lan_5000_/node.key"), "x").unwrap();
        let roots = [root.path().to_owned()];
        let eps = endpoints(&roots, "reg.lan:5000").unwrap().unwrap();
        assert_eq!(eps.len(), 1);
        assert!(eps[0].upstream && eps[0].host == "reg.lan:5000");
        let tls = eps[0].tls.as_ref().unwrap();
        assert_eq!(tls.ca_files, [root.path().join("reg.lan_5000_/ca.crt")]);
        assert!(tls.client.as_ref().unwrap().1.is_some());
        let eps = endpoints(&roots, "quay.io").unwrap().unwrap();
        assert_eq!(eps[0].to_string(), "https://cache.lan");
        assert!(eps[1].upstream && eps[1].host == "quay.io");
        assert!(
            endpoints(&[root.path().join("none")], "quay.io")
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn what_crust_cannot_follow_is_refused_by_name() {
        let root = tempfile::tempdir().unwrap();
        for (text, says) in [
            (
                "[host.\"https://m\"]\n  [host.\"https://m\".header]\n  x = \"1\"\n",
                "header",
            ),
            (
                "[host.\"https://m\"]\ncapabilities = [\"fly\"]\n",
                "unknown capability",
            ),
            ("[host.\"https://m\"]\nclient = [[\"a\"]]\n", "client pair"),
            ("server = \"https://m/a/../b\"\n", "server"),
            ("[host.\"https://m\"\n", "hosts.toml"),
        ] {
            write(root.path(), "r.example", text);
            let e = endpoints(&[root.path().to_owned()], "r.example").unwrap_err();
            assert!(e.to_string().contains(says), "{text}: {e}");
        }
    }
}
