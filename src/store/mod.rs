//! Persisted records. A record is a JSON document wrapped in a versioned envelope and written
//! atomically (temp file, fsync, rename, fsync of the directory), so a crash at any instant leaves
//! either the old record or the new one, never a torn file. Records are plain data, separate from
//! the live objects (processes, mounts) they describe; each owning module converts between them.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use serde::de::DeserializeOwned;

pub mod epoch;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("decoding {path}: {source}")]
    Decode {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{path}: record version {found} is newer than this crust understands ({supported})")]
    Version {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
}

/// A record type with a schema version. Bump `VERSION` when the layout changes incompatibly and
/// teach `load` to upgrade older versions.
pub trait Record: Serialize + DeserializeOwned {
    const VERSION: u32;
}

#[derive(Serialize, serde::Deserialize)]
struct Envelope<T> {
    version: u32,
    record: T,
}

/// Writes `record` to `path` atomically.
pub fn save<T: Record>(path: &Path, record: &T) -> Result<(), StoreError> {
    write_atomic(path, &encode(record))
}

fn encode<T: Record>(record: &T) -> Vec<u8> {
    serde_json::to_vec_pretty(&Envelope {
        version: T::VERSION,
        record,
    })
    .expect("records serialize")
}

/// Reads a record written by `save`.
pub fn load<T: Record>(path: &Path) -> Result<T, StoreError> {
    let bytes = fs::read(path).map_err(|source| StoreError::Read {
        path: path.to_owned(),
        source,
    })?;
    let env: Envelope<serde_json::Value> =
        serde_json::from_slice(&bytes).map_err(|source| StoreError::Decode {
            path: path.to_owned(),
            source,
        })?;
    if env.version > T::VERSION {
        return Err(StoreError::Version {
            path: path.to_owned(),
            found: env.version,
            supported: T::VERSION,
        });
    }
    serde_json::from_value(env.record).map_err(|source| StoreError::Decode {
        path: path.to_owned(),
        source,
    })
}

/// Replaces `path` with `bytes` so that readers see the old or the new content, never a mix.
///
/// Each call writes a temporary file of its own (`.<name>.<pid>.<n>.tmp`, created exclusively):
/// two writers of one record, in this process or another (a monitor and the daemon), never
/// write into each other's file, and the last rename wins whole. On failure the temporary file
/// is removed and `path` is left as it was.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    write_linked(path, None, bytes)
}

/// Writes the first record of an object (`save`) and keeps that same file under `copy` too: a
/// second name for the record as it was before anything was made for the object, which later
/// saves of `path` (each a new file renamed over it) leave alone. Recovery reads it when
/// `path` is damaged, to learn what the object may hold (its cgroup, its network attachment)
/// and release it. The link costs no second write or flush.
pub fn save_with_copy<T: Record>(path: &Path, copy: &Path, record: &T) -> Result<(), StoreError> {
    write_linked(path, Some(copy), &encode(record))
}

fn write_linked(path: &Path, copy: Option<&Path>, bytes: &[u8]) -> Result<(), StoreError> {
    let err = |source| StoreError::Write {
        path: path.to_owned(),
        source,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(temp_name(path));
    let written = (|| {
        let mut f = crate::durable::create_new(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        if let Some(copy) = copy {
            // A copy left by an attempt a crash cut short is replaced.
            if let Err(e) = crate::durable::hard_link(&tmp, copy) {
                if e.kind() != std::io::ErrorKind::AlreadyExists {
                    return Err(e);
                }
                crate::durable::remove_file(copy)?;
                crate::durable::hard_link(&tmp, copy)?;
            }
        }
        crate::durable::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = crate::durable::remove_file(&tmp);
        return Err(err(e));
    }
    File::open(dir).and_then(|d| d.sync_all()).map_err(err)
}

/// Renames the record at `from` to `to` in the same directory (a removed container's record
/// becomes its tombstone): a crash leaves one name or the other, and the new one is durable
/// when this returns.
pub fn rename(from: &Path, to: &Path) -> Result<(), StoreError> {
    let err = |source| StoreError::Write {
        path: to.to_owned(),
        source,
    };
    crate::durable::rename(from, to).map_err(err)?;
    let dir = to.parent().unwrap_or(Path::new("."));
    File::open(dir).and_then(|d| d.sync_all()).map_err(err)
}

/// A temporary name no other writer uses at the same time: the pid tells processes apart, the
/// counter calls within one process.
fn temp_name(path: &Path) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("record");
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!(".{name}.{}.{n}{TEMP_SUFFIX}", std::process::id())
}

pub const TEMP_SUFFIX: &str = ".tmp";

/// The file a sandbox's or container's directory holds when recovery could not remove the
/// object (what failed): the next start tries again, and `crust check` lists them meanwhile.
pub const RELEASE_FAILED: &str = "RELEASE_FAILED";

/// The directory under the root (`--root`, on disk) that holds the pods' and containers'
/// records (`sandboxes/`, `containers/`), their epoch (`epoch`) and what was set aside
/// (`damaged/`).
pub fn records_dir(root: &Path) -> PathBuf {
    root.join("records")
}

/// Moves the record at `from` to `to` on another filesystem (a record an older crust kept in
/// the state directory, to disk): written whole at `to` first, then removed at `from`, so a
/// crash leaves it in one place or both, never in neither. Its bytes move as they are, read
/// or not: recovery at `to` decides what an unreadable one means.
pub fn move_across(from: &Path, to: &Path) -> Result<(), StoreError> {
    let bytes = fs::read(from).map_err(|source| StoreError::Read {
        path: from.to_owned(),
        source,
    })?;
    write_atomic(to, &bytes)?;
    crate::durable::remove_file(from).map_err(|source| StoreError::Write {
        path: from.to_owned(),
        source,
    })
}

/// The subdirectories of `dir` (none when it cannot be read): one per record.
pub fn subdirs(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect()
}

/// The last component of `path` as a string (an object's id, for the directories of records).
pub fn file_name(path: &Path) -> String {
    path.file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_owned()
}

/// Where unreadable records go (`set_aside`), inside the records directory.
pub const DAMAGED_DIR: &str = "damaged";

/// Moves the unreadable record at `path` into `damaged` as `<kind>-<id>-<seconds>.json`, so
/// that recovery goes on without it and an operator can still read what it held (`crust
/// diagnose` and `crust check` name it). Returns its new path.
pub fn set_aside(path: &Path, damaged: &Path, kind: &str, id: &str) -> Result<PathBuf, StoreError> {
    let secs = crate::clock::now_nanos() / 1_000_000_000;
    let to = damaged.join(format!("{kind}-{id}-{secs}.json"));
    crate::durable::create_dir_all(damaged).map_err(|source| StoreError::Write {
        path: damaged.to_owned(),
        source,
    })?;
    rename(path, &to)?;
    Ok(to)
}

/// One record `set_aside` moved, as `crust diagnose` and `crust check` name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damaged {
    pub kind: String,
    pub id: String,
    /// When it was set aside, in seconds since the Unix epoch.
    pub at: i64,
    pub path: PathBuf,
}

/// The records `set_aside` moved into `damaged`, oldest first.
pub fn damaged(damaged: &Path) -> Vec<Damaged> {
    let mut found: Vec<Damaged> = fs::read_dir(damaged)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let stem = name.strip_suffix(".json")?;
            let (rest, at) = stem.rsplit_once('-')?;
            let (kind, id) = rest.split_once('-')?;
            Some(Damaged {
                kind: kind.to_owned(),
                id: id.to_owned(),
                at: at.parse().ok()?,
                path: e.path(),
            })
        })
        .collect();
    found.sort_by_key(|d| d.at);
    found
}

/// Removes from `dir` the temporary files of writers that died mid-write (at start); a file
/// whose writer still runs (a monitor saving an exit while the daemon restarts) is left alone.
/// Returns how many were removed.
pub fn remove_stale_temps(dir: &Path) -> usize {
    let stale = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with('.')
                && name.ends_with(TEMP_SUFFIX)
                && !temp_writer(&name)
                    .is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists())
        });
    stale
        .filter(|e| crate::durable::remove_file(e.path()).is_ok())
        .count()
}

/// The pid in a temporary file's name (`.<name>.<pid>.<n>.tmp`).
fn temp_writer(name: &str) -> Option<u32> {
    let mut parts = name.strip_suffix(TEMP_SUFFIX)?.rsplit('.');
    let _n = parts.next()?;
    parts.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Thing {
        name: String,
        n: u64,
    }
    impl Record for Thing {
        const VERSION: u32 = 2;
    }

    #[test]
    fn round_trip_and_replace() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("thing.json");
        save(
            &p,
            &Thing {
                name: "a".into(),
                n: 1,
            },
        )
        .unwrap();
        save(
            &p,
            &Thing {
                name: "b".into(),
                n: 2,
            },
        )
        .unwrap();
        assert_eq!(
            load::<Thing>(&p).unwrap(),
            Thing {
                name: "b".into(),
                n: 2
            }
        );
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["thing.json"], "no temp file is left behind");
    }

    fn temps(dir: &Path) -> usize {
        fs::read_dir(dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(TEMP_SUFFIX))
            .count()
    }

    #[test]
    fn concurrent_writers_never_share_a_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.json");
        let writers: Vec<_> = (0..8u64)
            .map(|n| {
                let p = p.clone();
                std::thread::spawn(move || {
                    for i in 0..50 {
                        let name = format!("writer {n} round {i} {}", "x".repeat(4096));
                        save(&p, &Thing { name, n }).unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        // Whichever writer renamed last, the record is whole.
        let last = load::<Thing>(&p).unwrap();
        assert!(
            last.name
                .starts_with(&format!("writer {} round 49", last.n))
        );
        assert_eq!(temps(dir.path()), 0, "no temp file is left behind");
    }

    #[test]
    fn a_failed_write_returns_the_error_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        // A directory in the record's place: the rename fails after the temp file was written.
        let p = dir.path().join("r.json");
        fs::create_dir(&p).unwrap();
        fs::write(p.join("x"), "x").unwrap();
        let e = save(
            &p,
            &Thing {
                name: "new".into(),
                n: 2,
            },
        )
        .unwrap_err();
        assert!(
            matches!(&e, StoreError::Write { path, .. } if path == &p),
            "{e}"
        );
        assert_eq!(temps(dir.path()), 0, "the temp file went with the error");
        assert!(p.join("x").exists(), "what was there is untouched");
    }

    #[test]
    fn a_renamed_record_loads_under_its_new_name_only() {
        let dir = tempfile::tempdir().unwrap();
        let (from, to) = (dir.path().join("a.json"), dir.path().join("b.json"));
        let thing = Thing {
            name: "t".into(),
            n: 3,
        };
        save(&from, &thing).unwrap();
        rename(&from, &to).unwrap();
        assert_eq!(load::<Thing>(&to).unwrap(), thing);
        assert!(matches!(load::<Thing>(&from), Err(StoreError::Read { .. })));
        // A record that is not there: an error naming the new name, nothing changed.
        let e = rename(&from, &to).unwrap_err();
        assert!(
            matches!(&e, StoreError::Write { path, .. } if path == &to),
            "{e}"
        );
        assert_eq!(load::<Thing>(&to).unwrap(), thing);
    }

    #[test]
    fn stale_temporary_files_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        // Above the kernel's largest pid_max: this writer cannot be alive.
        fs::write(dir.path().join(".r.json.4194305.0.tmp"), "half").unwrap();
        let live = format!(".r.json.{}.7.tmp", std::process::id());
        fs::write(dir.path().join(&live), "being written").unwrap();
        fs::write(dir.path().join("r.json"), "whole").unwrap();
        assert_eq!(remove_stale_temps(dir.path()), 1);
        assert!(dir.path().join("r.json").exists());
        assert!(dir.path().join(live).exists(), "a live writer's file stays");
    }

    #[test]
    fn newer_versions_and_garbage_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("thing.json");
        fs::write(&p, r#"{"version":3,"record":{"name":"x","n":0}}"#).unwrap();
        assert!(matches!(
            load::<Thing>(&p),
            Err(StoreError::Version { found: 3, .. })
        ));
        fs::write(&p, "{\"vers").unwrap();
        assert!(matches!(load::<Thing>(&p), Err(StoreError::Decode { .. })));
    }

    #[test]
    fn the_first_record_keeps_a_copy_that_later_saves_leave_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (p, copy) = (dir.path().join("r.json"), dir.path().join("planned.json"));
        let first = Thing {
            name: "planned".into(),
            n: 1,
        };
        save_with_copy(&p, &copy, &first).unwrap();
        save(
            &p,
            &Thing {
                name: "later".into(),
                n: 2,
            },
        )
        .unwrap();
        assert_eq!(load::<Thing>(&copy).unwrap(), first);
        assert_eq!(load::<Thing>(&p).unwrap().name, "later");
        // Damage to the record does not reach the copy.
        fs::write(&p, "{\"ver").unwrap();
        assert_eq!(load::<Thing>(&copy).unwrap(), first);
        assert_eq!(temps(dir.path()), 0);
    }

    #[test]
    fn a_record_set_aside_is_listed_with_its_kind_and_id() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sandbox.json");
        fs::write(&p, "{\"vers").unwrap();
        let damaged_dir = dir.path().join(DAMAGED_DIR);
        let to = set_aside(&p, &damaged_dir, "sandbox", "abc123").unwrap();
        assert!(!p.exists());
        assert_eq!(
            fs::read_to_string(&to).unwrap(),
            "{\"vers",
            "kept as it was"
        );
        let found = damaged(&damaged_dir);
        assert_eq!(found.len(), 1);
        assert_eq!(
            (found[0].kind.as_str(), found[0].id.as_str()),
            ("sandbox", "abc123")
        );
        assert_eq!(found[0].path, to);
        assert!(damaged(&dir.path().join("none")).is_empty());
    }
}
