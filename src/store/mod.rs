//! Persisted records. A record is a JSON document wrapped in a versioned envelope and written
//! atomically (temp file, fsync, rename, fsync of the directory), so a crash at any instant leaves
//! either the old record or the new one, never a torn file. Records are plain data, separate from
//! the live objects (processes, mounts) they describe; each owning module converts between them.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("writing {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("decoding {path}: {source}")]
    Decode { path: PathBuf, source: serde_json::Error },
    #[error("{path}: record version {found} is newer than this crust understands ({supported})")]
    Version { path: PathBuf, found: u32, supported: u32 },
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
    let bytes = serde_json::to_vec_pretty(&Envelope { version: T::VERSION, record })
        .expect("records serialize");
    write_atomic(path, &bytes)
}

/// Reads a record written by `save`.
pub fn load<T: Record>(path: &Path) -> Result<T, StoreError> {
    let bytes =
        fs::read(path).map_err(|source| StoreError::Read { path: path.to_owned(), source })?;
    let env: Envelope<serde_json::Value> = serde_json::from_slice(&bytes)
        .map_err(|source| StoreError::Decode { path: path.to_owned(), source })?;
    if env.version > T::VERSION {
        return Err(StoreError::Version {
            path: path.to_owned(),
            found: env.version,
            supported: T::VERSION,
        });
    }
    serde_json::from_value(env.record)
        .map_err(|source| StoreError::Decode { path: path.to_owned(), source })
}

/// Replaces `path` with `bytes` so that readers see the old or the new content, never a mix.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let err = |source| StoreError::Write { path: path.to_owned(), source };
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("record")
    ));
    let mut f = File::create(&tmp).map_err(err)?;
    f.write_all(bytes).map_err(err)?;
    f.sync_all().map_err(err)?;
    drop(f);
    fs::rename(&tmp, path).map_err(err)?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(err)
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
        save(&p, &Thing { name: "a".into(), n: 1 }).unwrap();
        save(&p, &Thing { name: "b".into(), n: 2 }).unwrap();
        assert_eq!(load::<Thing>(&p).unwrap(), Thing { name: "b".into(), n: 2 });
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["thing.json"], "no temp file is left behind");
    }

    #[test]
    fn newer_versions_and_garbage_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("thing.json");
        fs::write(&p, r#"{"version":3,"record":{"name":"x","n":0}}"#).unwrap();
        assert!(matches!(load::<Thing>(&p), Err(StoreError::Version { found: 3, .. })));
        fs::write(&p, "{\"vers").unwrap();
        assert!(matches!(load::<Thing>(&p), Err(StoreError::Decode { .. })));
    }
}
