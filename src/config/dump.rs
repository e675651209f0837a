//! `crust config dump`: an effective configuration as TOML, each value followed by where it came
//! from (a file, a flag, or the default), secrets redacted. The running daemon keeps the one it
//! runs in its state directory ([`RunningConfig`], rewritten at start and at each reload), so
//! the dump of a running crust is what it uses, not what the files say now.

use std::fmt::Write;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::changes::Change;
use super::layers::{Loaded, Origin, join_key};

/// The file in the state directory that holds the running daemon's configuration.
pub const RUNNING_FILE: &str = "config.json";

/// The configuration a running daemon uses, with where each value came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunningConfig {
    pub pid: u32,
    /// When the daemon loaded it (at start, or its last reload), nanoseconds since the epoch.
    pub loaded_at: i64,
    pub files: Vec<PathBuf>,
    /// Every key, in dump order, with its value (TOML text) and origin.
    pub entries: Vec<(String, String, Origin)>,
    /// Changes the files made that wait for a restart.
    pub pending: Vec<Change>,
    /// How the last reload went.
    pub last_reload: Option<ReloadOutcome>,
}

impl crate::store::Record for RunningConfig {
    const VERSION: u32 = 1;
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReloadOutcome {
    /// Nanoseconds since the epoch.
    pub at: i64,
    /// None: applied; else why the running configuration was kept.
    pub error: Option<String>,
    /// What it changed live.
    pub applied: Vec<Change>,
}

impl RunningConfig {
    pub fn new(loaded: &Loaded, pending: Vec<Change>, last_reload: Option<ReloadOutcome>) -> Self {
        RunningConfig {
            pid: std::process::id(),
            loaded_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as i64)
                .unwrap_or_default(),
            files: loaded.files.clone(),
            entries: entries(loaded),
            pending,
            last_reload,
        }
    }
}

/// Every key of `loaded` with its value and origin, in the order the dump prints them: the
/// top-level keys, then each table's.
pub fn entries(loaded: &Loaded) -> Vec<(String, String, Origin)> {
    let mut out = Vec::new();
    if let Ok(toml::Value::Table(t)) = toml::Value::try_from(&loaded.config) {
        walk(&t, "", loaded, &mut out);
    }
    out
}

fn walk(
    table: &toml::Table,
    prefix: &str,
    loaded: &Loaded,
    out: &mut Vec<(String, String, Origin)>,
) {
    let is_section = |v: &toml::Value| matches!(v, toml::Value::Table(t) if !t.is_empty());
    for (k, v) in table.iter().filter(|(_, v)| !is_section(v)) {
        let key = join_key(prefix, k);
        let origin = loaded.origin(&key);
        out.push((key, v.to_string(), origin));
    }
    for (k, v) in table.iter().filter(|(_, v)| is_section(v)) {
        if let toml::Value::Table(t) = v {
            walk(t, &join_key(prefix, k), loaded, out);
        }
    }
}

/// The entries as TOML: a `[table]` header where the table changes, each `key = value` with
/// its origin in a comment at the end of the line.
pub fn render(entries: &[(String, String, Origin)]) -> String {
    let mut out = String::new();
    let mut section = String::new();
    for (key, value, origin) in entries {
        let (table, name) = split_last(key);
        if table != section {
            let _ = writeln!(out, "\n[{table}]");
            section = table.to_owned();
        }
        let line = format!("{name} = {value}");
        let _ = writeln!(out, "{line:<47} # {origin}");
    }
    out
}

/// What `crust config dump` prints: the running daemon's configuration when one runs (what it
/// loaded, its last reload, what waits for a restart, where the files now differ), else the one
/// the files and flags give (`from_files`).
pub fn report(from_files: &Loaded, running: Option<&RunningConfig>) -> String {
    match running {
        Some(r) => report_running(r, Ok(from_files)),
        None => {
            let mut out = format!(
                "# crust is not running: the configuration {} and the flags give.\n",
                files(&from_files.files)
            );
            out.push_str(&render(&entries(from_files)));
            out
        }
    }
}

fn files(list: &[PathBuf]) -> String {
    if list.is_empty() {
        "no file (defaults and flags)".to_owned()
    } else {
        let names: Vec<String> = list.iter().map(|f| f.display().to_string()).collect();
        names.join(", ")
    }
}

/// The running daemon's configuration, against what the files give now (or why they do not
/// load).
pub fn report_running(r: &RunningConfig, from_files: Result<&Loaded, &str>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# The configuration of the running crust (pid {}), loaded at {} from {}.",
        r.pid,
        crate::clock::rfc3339_millis(r.loaded_at),
        files(&r.files)
    );
    if let Some(reload) = &r.last_reload {
        let at = crate::clock::rfc3339_millis(reload.at);
        match &reload.error {
            Some(e) => {
                let _ = writeln!(
                    out,
                    "# The reload at {at} failed; it runs on as before: {e}"
                );
            }
            None => {
                let keys: Vec<&str> = reload.applied.iter().map(|c| c.key.as_str()).collect();
                let what = if keys.is_empty() {
                    "nothing live changed".to_owned()
                } else {
                    format!("applied {}", keys.join(", "))
                };
                let _ = writeln!(out, "# The reload at {at} {what}.");
            }
        }
    }
    for c in &r.pending {
        let _ = writeln!(out, "# Waits for a restart of crust: {c}");
    }
    let now = match from_files {
        Ok(loaded) => entries(loaded),
        Err(why) => {
            let _ = writeln!(
                out,
                "# The files do not load now (a reload would fail): {why}"
            );
            Vec::new()
        }
    };
    let differ: Vec<&str> = r
        .entries
        .iter()
        .filter(|(k, v, o)| {
            !matches!(o, Origin::Flag(_))
                && !r.pending.iter().any(|c| &c.key == k)
                && now
                    .iter()
                    .find(|(n, _, _)| n == k)
                    .is_some_and(|(_, nv, no)| nv != v && !matches!(no, Origin::Flag(_)))
        })
        .map(|(k, _, _)| k.as_str())
        .collect();
    if !differ.is_empty() {
        let _ = writeln!(
            out,
            "# The files now say otherwise for {} (`crust config dump --files` shows them; \
             a reload, systemctl reload crust, applies what can change live).",
            differ.join(", ")
        );
    }
    out.push_str(&render(&r.entries));
    out
}

/// `("a.b", "c")` of `a.b.c`, minding quoted keys (`registry.mirrors."docker.io".endpoints`).
fn split_last(key: &str) -> (&str, &str) {
    let mut quoted = false;
    let mut last = None;
    for (i, c) in key.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '.' if !quoted => last = Some(i),
            _ => {}
        }
    }
    match last {
        Some(i) => (&key[..i], &key[i + 1..]),
        None => ("", key),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::config::layers::LoadRequest;

    #[test]
    fn a_dump_is_the_configuration_it_shows_with_each_origin() {
        let mut config = Config {
            log_level: "debug".into(),
            ..Default::default()
        };
        config.registry.mirrors.insert(
            "docker.io".into(),
            crate::config::MirrorConfig {
                endpoints: vec!["http://127.0.0.1:5000".into()],
            },
        );
        let drop_in = Origin::File("/etc/crust/config.d/50-x.toml".into());
        let loaded = Loaded {
            config: config.clone(),
            origins: [
                ("log_level".to_owned(), Origin::Flag("--log-level".into())),
                ("registry.mirrors.\"docker.io\"".to_owned(), drop_in.clone()),
            ]
            .into(),
            files: vec![],
            request: LoadRequest::default(),
        };
        let text = render(&entries(&loaded));
        assert!(
            text.lines().any(
                |l| l.starts_with("log_level = \"debug\"") && l.ends_with("# flag --log-level")
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "[registry.mirrors.\"docker.io\"]\nendpoints = [\"http://127.0.0.1:5000\"]"
            ),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with("endpoints")
                    && l.ends_with("# /etc/crust/config.d/50-x.toml")),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with("state = ") && l.ends_with("# default"))
        );
        // What it prints reads back as the same configuration.
        let back = Config::parse(&text).unwrap();
        assert_eq!(
            serde_json::to_value(&back).unwrap(),
            serde_json::to_value(&config).unwrap()
        );
    }

    #[test]
    fn quoted_keys_split_at_the_last_bare_dot() {
        assert_eq!(
            split_last("registry.mirrors.\"docker.io\".endpoints"),
            ("registry.mirrors.\"docker.io\"", "endpoints")
        );
        assert_eq!(split_last("listen"), ("", "listen"));
    }
}
