//! What a reload changed, and which of it the running daemon takes live.
//!
//! A configuration is compared as its leaves: every key, by dotted path, with its value as TOML
//! text (secrets redacted as everywhere they are shown; a changed credential is still a
//! change). Keys under [`LIVE`] are applied to the running daemon by a reload (SIGHUP); a
//! change to any other key waits for a restart and is said so, never dropped silently.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Config;
use super::layers::{Loaded, Origin, join_key};

/// Keys (or tables of keys) a reload applies live: logging, registries, the CNI configuration.
/// Everything else is fixed for the daemon's life: directories, the socket, the cgroup driver,
/// the stream and metrics servers, handlers, iptables rules made at start, the image store's
/// limits.
pub const LIVE: &[&str] = &[
    "log_level",
    "log_format",
    "registry",
    "network.conf_dir",
    "network.conf_template",
    "network.bin_dirs",
    "network.plugin_timeout_ms",
];

/// Whether a reload applies `key` to the running daemon.
pub fn is_live(key: &str) -> bool {
    LIVE.iter()
        .any(|l| key == *l || key.strip_prefix(l).is_some_and(|r| r.starts_with('.')))
}

/// One key whose value differs between two configurations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub key: String,
    /// The value as TOML text; None: the key is not set (an optional key, a map entry).
    pub old: Option<String>,
    pub new: Option<String>,
    /// Where the new value comes from.
    pub origin: Origin,
    pub live: bool,
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "(not set)".into());
        write!(
            f,
            "{} {} -> {} ({})",
            self.key,
            show(&self.old),
            show(&self.new),
            self.origin
        )
    }
}

/// Every key of `config` with its value as TOML text; an empty table is a key of its own.
pub fn leaves(config: &Config) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Ok(toml::Value::Table(t)) = toml::Value::try_from(config) {
        flatten(&t, "", &mut out);
    }
    out
}

fn flatten(table: &toml::Table, prefix: &str, out: &mut BTreeMap<String, String>) {
    for (k, v) in table {
        let key = join_key(prefix, k);
        match v {
            toml::Value::Table(t) if !t.is_empty() => flatten(t, &key, out),
            other => {
                out.insert(key, other.to_string());
            }
        }
    }
}

/// The keys whose values differ between `old` and `new`.
pub fn between(old: &Loaded, new: &Loaded) -> Vec<Change> {
    let (a, b) = (leaves(&old.config), leaves(&new.config));
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut changes: Vec<Change> = keys
        .into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        // An empty table that gained keys (or lost its last ones) is told by those keys.
        .filter(
            |k| !matches!((a.get(*k), b.get(*k)), (None, Some(v)) | (Some(v), None) if v == "{}"),
        )
        .map(|k| change(k, a.get(k).cloned(), b.get(k).cloned(), new))
        .collect();
    // Credentials show redacted: compare them as they are.
    let (ca, cb) = (&old.config.registry.configs, &new.config.registry.configs);
    for (host, c) in cb {
        let before = ca.get(host).and_then(|o| o.auth.as_ref());
        let key = join_key(&join_key("registry.configs", host), "auth");
        if before != c.auth.as_ref() && !changes.iter().any(|ch| ch.key.starts_with(&key)) {
            let redacted = Some("<redacted>".to_owned());
            let marker = Some("<redacted, changed>".to_owned());
            changes.push(change(
                &key,
                before.and(redacted),
                c.auth.as_ref().and(marker),
                new,
            ));
        }
    }
    changes
}

fn change(key: &str, old: Option<String>, new: Option<String>, loaded: &Loaded) -> Change {
    Change {
        key: key.to_owned(),
        old,
        new,
        origin: loaded.origin(key),
        live: is_live(key),
    }
}

/// What the daemon runs after reloading `new` over `old`: `new`'s live keys, `old`'s others.
pub fn running(old: &Loaded, new: &Loaded) -> Loaded {
    let mut c = old.config.clone();
    let n = &new.config;
    c.log_level = n.log_level.clone();
    c.log_format = n.log_format;
    c.registry = n.registry.clone();
    c.network.conf_dir = n.network.conf_dir.clone();
    c.network.conf_template = n.network.conf_template.clone();
    c.network.bin_dirs = n.network.bin_dirs.clone();
    c.network.plugin_timeout_ms = n.network.plugin_timeout_ms;
    let mut origins: BTreeMap<String, Origin> = old
        .origins
        .iter()
        .filter(|(k, _)| !is_live(k))
        .map(|(k, o)| (k.clone(), o.clone()))
        .collect();
    origins.extend(
        new.origins
            .iter()
            .filter(|(k, _)| is_live(k))
            .map(|(k, o)| (k.clone(), o.clone())),
    );
    Loaded {
        config: c,
        origins,
        files: new.files.clone(),
        request: new.request.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::layers::LoadRequest;
    use crate::config::{LogFormat, MirrorConfig, RegistryCredentials, RegistryHostConfig};

    fn loaded(config: Config, from: &str) -> Loaded {
        let origins = leaves(&config)
            .into_keys()
            .map(|k| (k, Origin::File(from.into())))
            .collect();
        Loaded {
            config,
            origins,
            files: vec![from.into()],
            request: LoadRequest::default(),
        }
    }

    /// A configuration with every key changed from the default.
    fn everything_changed() -> Config {
        let mut c: Config = toml::from_str(
            r#"
            listen = "/x.sock"
            root = "/r"
            state = "/s"
            log_level = "debug"
            log_format = "json"
            cgroup_driver = "systemd"
            default_cgroup_parent = "x.slice"
            default_runtime_handler = "h"
            runtime_handlers = ["h"]
            cdi_spec_dirs = ["/cdi"]
            [network]
            conf_dir = "/n"
            conf_template = "/t"
            bin_dirs = ["/b"]
            plugin_timeout_ms = 1
            masquerade_subnets = []
            [image]
            max_concurrent_downloads = 1
            pull_progress_timeout_secs = 1
            pull_min_kib_per_sec = 1
            min_free_percent = 1
            [stream]
            address = "::"
            port = 1
            tls_cert = "/c"
            tls_key = "/k"
            idle_timeout_secs = 1
            max_sessions = 1
            [metrics]
            address = "127.0.0.1:1"
            "#,
        )
        .unwrap();
        c.registry.mirrors.insert(
            "docker.io".into(),
            MirrorConfig {
                endpoints: vec!["http://127.0.0.1:5000".into()],
            },
        );
        c
    }

    #[test]
    fn a_reload_takes_the_live_keys_and_keeps_the_others() {
        let old = loaded(Config::default(), "old.toml");
        let new = loaded(everything_changed(), "new.toml");
        let changes = between(&old, &new);
        let (a, b) = (leaves(&old.config), leaves(&new.config));
        let run = running(&old, &new);
        let r = leaves(&run.config);
        for c in &changes {
            let want = if c.live { b.get(&c.key) } else { a.get(&c.key) };
            assert_eq!(r.get(&c.key), want, "{c}");
            assert_eq!(
                run.origin(&c.key),
                if c.live {
                    new.origin(&c.key)
                } else {
                    old.origin(&c.key)
                },
                "{c}"
            );
        }
        let live: Vec<&str> = changes
            .iter()
            .filter(|c| c.live)
            .map(|c| c.key.as_str())
            .collect();
        assert_eq!(
            live,
            [
                "log_format",
                "log_level",
                "network.bin_dirs",
                "network.conf_dir",
                "network.conf_template",
                "network.plugin_timeout_ms",
                "registry.mirrors.\"docker.io\".endpoints",
            ],
        );
        assert!(changes.iter().any(|c| c.key == "cgroup_driver" && !c.live));
        assert_eq!(run.config.log_format, LogFormat::Json);
    }

    #[test]
    fn changed_credentials_are_a_change_shown_redacted() {
        let with = |password: &str| {
            let mut c = Config::default();
            c.registry.configs.insert(
                "m.example".into(),
                RegistryHostConfig {
                    auth: Some(RegistryCredentials {
                        username: "u".into(),
                        password: password.into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            );
            loaded(c, "f.toml")
        };
        let changes = between(&with("one"), &with("two"));
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert!(changes[0].live);
        let shown = changes[0].to_string();
        assert!(!shown.contains("one") && !shown.contains("two"), "{shown}");
        assert!(between(&with("one"), &with("one")).is_empty());
    }
}
