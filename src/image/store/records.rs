//! Image records and the in-memory table built from them.
//!
//! One record per image, named by its id (the config digest), saved with `crate::store`. The
//! table indexes records by every name they carry: `domain/path:tag` and
//! `domain/path@digest`. A name belongs to at most one image: adding an image that carries a
//! name another image has takes it from that image (a tag moved to new content), which keeps
//! its other names and stays listed by id until removed.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::image::digest::Digest;
use crate::image::registry::manifest::ImageConfig;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ImageRecord {
    /// The config digest.
    pub id: Digest,
    pub repo_tags: Vec<String>,
    pub repo_digests: Vec<String>,
    /// Bytes of the image's blobs (manifest, config and compressed layers), as containerd reports.
    pub size: u64,
    /// The platform manifest.
    pub manifest: Digest,
    /// Every blob the image keeps in the content store (index, manifest, config, layers).
    pub blobs: Vec<Digest>,
    pub layers: Vec<LayerRef>,
    pub config: ImageConfig,
    /// Seconds since the epoch when the image was stored.
    pub stored_at: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LayerRef {
    pub blob: Digest,
    pub media_type: String,
    pub size: u64,
    pub diff_id: Digest,
    pub chain_id: Digest,
}

impl crate::store::Record for ImageRecord {
    const VERSION: u32 = 1;
}

impl ImageRecord {
    fn names(&self) -> impl Iterator<Item = &String> {
        self.repo_tags.iter().chain(self.repo_digests.iter())
    }
}

#[derive(Default, Clone)]
pub struct Table {
    by_id: BTreeMap<Digest, ImageRecord>,
    by_name: HashMap<String, Digest>,
}

impl Table {
    /// Builds the table, oldest record first, so that should two records claim a name (they
    /// cannot through `add`, but records come from disk) the newest keeps it, whatever order
    /// the directory lists them in.
    pub fn from_records(records: impl IntoIterator<Item = ImageRecord>) -> Table {
        let mut records: Vec<ImageRecord> = records.into_iter().collect();
        records.sort_by(|a, b| (a.stored_at, &a.id).cmp(&(b.stored_at, &b.id)));
        let mut t = Table::default();
        for r in records {
            t.add(r);
        }
        t
    }

    pub fn get(&self, id: &Digest) -> Option<&ImageRecord> {
        self.by_id.get(id)
    }

    pub fn by_name(&self, name: &str) -> Option<&ImageRecord> {
        self.by_name.get(name).and_then(|id| self.by_id.get(id))
    }

    /// Images whose id hex starts with `prefix`.
    pub fn by_id_prefix(&self, prefix: &str) -> Vec<&ImageRecord> {
        self.by_id
            .values()
            .filter(|r| r.id.hex().starts_with(prefix))
            .collect()
    }

    pub fn all(&self) -> impl Iterator<Item = &ImageRecord> {
        self.by_id.values()
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Adds `record`, merging its names into an existing record with the same id and taking
    /// its names from other images. Returns the ids of every record that changed.
    pub fn add(&mut self, mut record: ImageRecord) -> Vec<Digest> {
        let mut changed = vec![record.id.clone()];
        let names: Vec<String> = record.names().cloned().collect();
        for name in &names {
            if let Some(owner) = self.by_name.get(name).cloned() {
                if owner != record.id {
                    if let Some(old) = self.by_id.get_mut(&owner) {
                        old.repo_tags.retain(|n| n != name);
                        old.repo_digests.retain(|n| n != name);
                        changed.push(owner);
                    }
                }
            }
        }
        if let Some(existing) = self.by_id.get(&record.id) {
            for t in &existing.repo_tags {
                if !record.repo_tags.contains(t) {
                    record.repo_tags.push(t.clone());
                }
            }
            for d in &existing.repo_digests {
                if !record.repo_digests.contains(d) {
                    record.repo_digests.push(d.clone());
                }
            }
            record.stored_at = existing.stored_at;
        }
        record.repo_tags.sort();
        record.repo_digests.sort();
        for name in record.names() {
            self.by_name.insert(name.clone(), record.id.clone());
        }
        self.by_id.insert(record.id.clone(), record);
        changed.sort();
        changed.dedup();
        changed
    }

    pub fn remove(&mut self, id: &Digest) -> Option<ImageRecord> {
        let r = self.by_id.remove(id)?;
        for n in r.names() {
            if self.by_name.get(n) == Some(id) {
                self.by_name.remove(n);
            }
        }
        Some(r)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn record(id: &[u8], tags: &[&str]) -> ImageRecord {
        let d = Digest::of(id);
        ImageRecord {
            id: d.clone(),
            repo_tags: tags.iter().map(|s| s.to_string()).collect(),
            repo_digests: vec![format!(
                "docker.io/library/x@{}",
                Digest::of(&[id, b"m"].concat())
            )],
            size: 10,
            manifest: Digest::of(&[id, b"m"].concat()),
            blobs: vec![d.clone()],
            layers: vec![],
            config: ImageConfig::default(),
            stored_at: 1,
        }
    }

    #[test]
    fn a_moved_tag_leaves_the_old_image() {
        let mut t = Table::default();
        t.add(record(
            b"a",
            &["docker.io/library/x:1", "docker.io/library/x:latest"],
        ));
        let changed = t.add(record(b"b", &["docker.io/library/x:latest"]));
        assert_eq!(changed.len(), 2);
        let a = t.get(&Digest::of(b"a")).unwrap();
        assert_eq!(a.repo_tags, ["docker.io/library/x:1"]);
        assert_eq!(
            t.by_name("docker.io/library/x:latest").unwrap().id,
            Digest::of(b"b")
        );
        assert_eq!(t.by_id_prefix(&Digest::of(b"a").hex()[..5]).len(), 1);
    }

    #[test]
    fn a_name_claimed_twice_on_disk_goes_to_the_newest_record() {
        let mut old = record(b"old", &["docker.io/library/x:1"]);
        old.stored_at = 10;
        let mut new = record(b"new", &["docker.io/library/x:1"]);
        new.stored_at = 20;
        for records in [
            vec![old.clone(), new.clone()],
            vec![new.clone(), old.clone()],
        ] {
            let t = Table::from_records(records);
            assert_eq!(t.by_name("docker.io/library/x:1").unwrap().id, new.id);
            assert!(t.get(&old.id).unwrap().repo_tags.is_empty());
        }
    }

    #[test]
    fn same_id_merges_names_and_remove_forgets_them() {
        let mut t = Table::default();
        t.add(record(b"a", &["docker.io/library/x:1"]));
        t.add(record(b"a", &["docker.io/library/x:2"]));
        assert_eq!(t.len(), 1);
        assert_eq!(t.get(&Digest::of(b"a")).unwrap().repo_tags.len(), 2);
        t.remove(&Digest::of(b"a"));
        assert!(t.by_name("docker.io/library/x:1").is_none());
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn records_round_trip_through_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.json");
        let r = record(b"a", &["docker.io/library/x:1"]);
        crate::store::save(&p, &r).unwrap();
        assert_eq!(crate::store::load::<ImageRecord>(&p).unwrap(), r);
    }
}
