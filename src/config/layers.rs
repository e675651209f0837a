//! The configuration as operators manage it: the main file, then the drop-ins of `config.d`
//! beside it in lexical order, then the flags, each layer winning over the ones before it key
//! by key, with the origin of every value kept for `crust config dump`.
//!
//! Each file is checked alone before it is merged (its syntax, its keys, its `version`), so an
//! error names the file that holds it. Tables merge key by key; any other value (an array too)
//! replaces the earlier one whole: a drop-in that sets `bin_dirs` sets the whole list.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Config, ConfigError, DEFAULT_CONFIG_PATH, Overrides};

/// The directory of drop-ins, beside the main file.
pub const DROP_IN_DIR: &str = "config.d";

/// The format version this crust writes and reads; files of later versions are refused.
pub const CURRENT_VERSION: u32 = 1;

/// Where one value of the effective configuration came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    Default,
    File(PathBuf),
    /// A command-line flag (`--log-level`).
    Flag(String),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::File(p) => write!(f, "{}", p.display()),
            Origin::Flag(flag) => write!(f, "flag {flag}"),
        }
    }
}

/// A configuration as loaded, with where it came from.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    /// The origin of every key a file or a flag set, by dotted path (`network.conf_dir`,
    /// `registry.mirrors."docker.io".endpoints`); keys not here are defaults.
    pub origins: BTreeMap<String, Origin>,
    /// The files read, in the order they were applied.
    pub files: Vec<PathBuf>,
    /// What the load was asked for, so a reload reads the same places.
    pub request: LoadRequest,
}

/// The main file named (or none: the default path, when it exists) and the flags.
#[derive(Debug, Clone, Default)]
pub struct LoadRequest {
    pub path: Option<PathBuf>,
    pub overrides: Overrides,
}

impl Loaded {
    /// The origin of the value at `key` (a dotted path).
    pub fn origin(&self, key: &str) -> Origin {
        // A key no layer named itself takes the origin of the nearest table a layer set: every
        // key in a table a file brought in came from that file.
        let within = |k: &&String| {
            key.len() > k.len() && key.starts_with(k.as_str()) && key.as_bytes()[k.len()] == b'.'
        };
        self.origins
            .get(key)
            .or_else(|| {
                self.origins
                    .iter()
                    .filter(|(k, _)| within(k))
                    .max_by_key(|(k, _)| k.len())
                    .map(|(_, o)| o)
            })
            .cloned()
            .unwrap_or(Origin::Default)
    }
}

/// The files a load reads: the main file (when it exists or was named) and its drop-ins.
pub fn files(path: Option<&Path>) -> Result<Vec<PathBuf>, ConfigError> {
    let main = match path {
        Some(p) => Some(p.to_owned()),
        None => Some(PathBuf::from(DEFAULT_CONFIG_PATH)).filter(|p| p.exists()),
    };
    let dir = path
        .unwrap_or(Path::new(DEFAULT_CONFIG_PATH))
        .parent()
        .unwrap_or(Path::new("/"))
        .join(DROP_IN_DIR);
    let mut drop_ins: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| is_drop_in(p))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(source) => return Err(ConfigError::Read { path: dir, source }),
    };
    // Lexical order of the names, as systemd and sysctl.d order theirs.
    drop_ins.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    Ok(main.into_iter().chain(drop_ins).collect())
}

/// A `*.toml` file that is not hidden (editors' and dpkg's temporary files are skipped).
fn is_drop_in(p: &Path) -> bool {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    !name.starts_with('.') && name.ends_with(".toml") && p.is_file()
}

/// Loads the layers `request` names, applies the flags and validates the result.
pub fn load(request: LoadRequest) -> Result<Loaded, ConfigError> {
    let files = files(request.path.as_deref())?;
    let mut merged = toml::Table::new();
    let mut origins = BTreeMap::new();
    for file in &files {
        let table = read_layer(file)?;
        merge(
            &mut merged,
            table,
            "",
            &Origin::File(file.clone()),
            &mut origins,
        );
    }
    let mut config: Config = toml::Value::Table(merged)
        .try_into()
        .map_err(|e| ConfigError::Invalid(format!("the files together ({}): {e}", list(&files))))?;
    for (key, flag) in config.apply(request.overrides.clone()) {
        origins.insert(key.to_owned(), Origin::Flag(flag.to_owned()));
    }
    config.version = CURRENT_VERSION;
    config.validate()?;
    Ok(Loaded {
        config,
        origins,
        files,
        request,
    })
}

fn list(files: &[PathBuf]) -> String {
    if files.is_empty() {
        return "none".into();
    }
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    names.join(", ")
}

/// One file, checked alone: TOML, known keys with values of the right type, a version this
/// crust reads (migrated to the current one).
fn read_layer(file: &Path) -> Result<toml::Table, ConfigError> {
    let text = std::fs::read_to_string(file).map_err(|source| ConfigError::Read {
        path: file.to_owned(),
        source,
    })?;
    let parse = |e: toml::de::Error| ConfigError::Parse {
        path: file.to_owned(),
        msg: one_line(&e, &text),
    };
    let table: toml::Table = toml::from_str(&text).map_err(parse)?;
    let version = match table.get("version") {
        None => CURRENT_VERSION,
        Some(toml::Value::Integer(v)) if *v >= 1 => u32::try_from(*v).unwrap_or(u32::MAX),
        Some(other) => {
            return Err(ConfigError::Invalid(format!(
                "{}: version must be a positive integer, got {other}",
                file.display()
            )));
        }
    };
    if version > CURRENT_VERSION {
        return Err(ConfigError::Invalid(format!(
            "{}: version {version} is newer than this crust reads ({CURRENT_VERSION}); \
             upgrade crust or write the file for version {CURRENT_VERSION}",
            file.display()
        )));
    }
    let table = migrate(table, version);
    // Alone over the defaults: an unknown key or a bad type is this file's.
    toml::Value::Table(table.clone())
        .try_into::<Config>()
        .map_err(parse)?;
    Ok(table)
}

/// A TOML error as one line: where (line and column, when it says) and what.
fn one_line(e: &toml::de::Error, text: &str) -> String {
    let what = e.message().trim().replace('\n', " ");
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("line {line}, column {column}: {what}")
        }
        None => what,
    }
}

/// Brings a file of an older format version to the current one. Version 1 is the first: a
/// later format adds its step here (renamed or moved keys), so older files keep working.
fn migrate(table: toml::Table, version: u32) -> toml::Table {
    debug_assert!(version <= CURRENT_VERSION);
    table
}

/// Merges `layer` into `into` key by key, recording `origin` for every value it sets.
fn merge(
    into: &mut toml::Table,
    layer: toml::Table,
    prefix: &str,
    origin: &Origin,
    origins: &mut BTreeMap<String, Origin>,
) {
    for (key, value) in layer {
        let path = join_key(prefix, &key);
        match (into.get_mut(&key), value) {
            (Some(toml::Value::Table(existing)), toml::Value::Table(table)) => {
                merge(existing, table, &path, origin, origins);
            }
            (_, toml::Value::Table(table)) => {
                // A new table (an empty one too): every key in it comes from this layer.
                let mut fresh = toml::Table::new();
                origins.insert(path.clone(), origin.clone());
                merge(&mut fresh, table, &path, origin, origins);
                into.insert(key, toml::Value::Table(fresh));
            }
            (_, value) => {
                // Whatever an earlier layer set below this key is replaced.
                origins.retain(|k, _| !k.starts_with(&format!("{path}.")));
                origins.insert(path, origin.clone());
                into.insert(key, value);
            }
        }
    }
}

/// `prefix.key`, the key quoted when it is not a bare TOML key (`registry.mirrors."docker.io"`).
pub fn join_key(prefix: &str, key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    let key = if bare {
        key.to_owned()
    } else {
        format!("{key:?}")
    };
    if prefix.is_empty() {
        key
    } else {
        format!("{prefix}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }

    fn load_at(main: &Path, overrides: Overrides) -> Result<Loaded, ConfigError> {
        load(LoadRequest {
            path: Some(main.to_owned()),
            overrides,
        })
    }

    #[test]
    fn drop_ins_apply_in_lexical_order_key_by_key_and_flags_last() {
        let tmp = tempfile::tempdir().unwrap();
        let main = write(
            tmp.path(),
            "config.toml",
            "log_level = \"warn\"\n[network]\nconf_dir = \"/a\"\nplugin_timeout_ms = 5\n\
             [registry.mirrors.\"docker.io\"]\nendpoints = [\"http://127.0.0.1:5000\"]\n",
        );
        let d = tmp.path().join(DROP_IN_DIR);
        let late = write(&d, "20-late.toml", "[network]\nconf_dir = \"/c\"\n");
        let early = write(
            &d,
            "10-early.toml",
            "[network]\nconf_dir = \"/b\"\nbin_dirs = [\"/x\"]\n\
             [registry.mirrors.\"quay.io\"]\nendpoints = [\"https://m.example\"]\n",
        );
        write(&d, ".20-late.toml.swp", "garbage = ");
        write(&d, "README", "not toml");
        let l = load_at(
            &main,
            Overrides {
                log_level: Some("debug".into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(l.files, [main.clone(), early.clone(), late.clone()]);
        let c = &l.config;
        assert_eq!(c.network.conf_dir, PathBuf::from("/c"));
        assert_eq!(c.network.bin_dirs, [PathBuf::from("/x")]);
        assert_eq!(c.network.plugin_timeout_ms, 5);
        assert_eq!(c.log_level, "debug");
        assert_eq!(c.registry.mirrors.len(), 2, "maps merge key by key");
        assert_eq!(l.origin("network.conf_dir"), Origin::File(late));
        assert_eq!(l.origin("network.bin_dirs"), Origin::File(early.clone()));
        assert_eq!(l.origin("network.plugin_timeout_ms"), Origin::File(main));
        assert_eq!(l.origin("log_level"), Origin::Flag("--log-level".into()));
        assert_eq!(l.origin("state"), Origin::Default);
        assert_eq!(
            l.origin("registry.mirrors.\"quay.io\".endpoints"),
            Origin::File(early)
        );
    }

    #[test]
    fn an_error_names_its_file_and_newer_versions_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let main = write(tmp.path(), "config.toml", "version = 1\n");
        let d = tmp.path().join(DROP_IN_DIR);
        let bad = write(&d, "50-bad.toml", "[network]\nconf_dri = \"/typo\"\n");
        let e = load_at(&main, Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&bad.display().to_string()) && e.contains("conf_dri"),
            "{e}"
        );
        std::fs::write(&bad, "log_level = \n").unwrap();
        let e = load_at(&main, Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("50-bad.toml"), "{e}");
        std::fs::write(&bad, "version = 2\n").unwrap();
        let e = load_at(&main, Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("50-bad.toml") && e.contains("newer"), "{e}");
        std::fs::remove_file(&bad).unwrap();
        // A value valid alone but not together with the rest is the files' together.
        write(&d, "60-root.toml", "root = \"/run/crust\"\n");
        let e = load_at(&main, Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("root and state"), "{e}");
    }

    #[test]
    fn a_missing_main_file_named_is_an_error_and_no_files_mean_defaults() {
        let tmp = tempfile::tempdir().unwrap();
        let e = load_at(&tmp.path().join("nope.toml"), Overrides::default()).unwrap_err();
        assert!(matches!(e, ConfigError::Read { .. }), "{e}");
        let l = load(LoadRequest::default());
        // The host may or may not have /etc/crust; either way the defaults load.
        if !Path::new(DEFAULT_CONFIG_PATH).exists()
            && !Path::new("/etc/crust").join(DROP_IN_DIR).exists()
        {
            let l = l.unwrap();
            assert!(l.files.is_empty() && l.origins.is_empty());
        }
    }

    #[test]
    fn a_scalar_replacing_a_table_drops_the_origins_below_it() {
        let mut into = toml::Table::new();
        let mut origins = BTreeMap::new();
        let a = Origin::File("a".into());
        let b = Origin::File("b".into());
        merge(
            &mut into,
            toml::from_str("[x]\ny = 1\nz = 2").unwrap(),
            "",
            &a,
            &mut origins,
        );
        merge(
            &mut into,
            toml::from_str("x = 3").unwrap(),
            "",
            &b,
            &mut origins,
        );
        assert_eq!(origins.len(), 1, "{origins:?}");
        assert_eq!(origins["x"], b);
        assert_eq!(
            join_key("registry.mirrors", "docker.io"),
            "registry.mirrors.\"docker.io\""
        );
    }
}
