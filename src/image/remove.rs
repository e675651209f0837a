//! RemoveImage and garbage collection of content no image, hold or pull in progress uses.

use std::collections::HashSet;
use std::fs;

use super::StorePaths;
use super::digest::Digest;
use super::store::records::Table;
use super::{ImageError, Images, lock};

/// What one garbage collection deleted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct GcStats {
    pub blobs: usize,
    pub layers: usize,
}

impl Images {
    /// Removes the image `spec` names (by id, tag or digest: the whole image, with all its
    /// names, as containerd does). Removing an image that is not there succeeds. Returns the
    /// removed id. Blocking (file system work); call from a blocking context.
    pub fn remove(&self, spec: &str) -> Result<Option<Digest>, ImageError> {
        let Some(record) = self.find(spec)? else {
            return Ok(None);
        };
        let id = record.id.clone();
        self.with_store_lock(|table| {
            let mut t = table.clone();
            if t.remove(&id).is_none() {
                return Ok(());
            }
            super::remove_file(self.paths.record(&id))?;
            self.publish(t)?;
            let stats = self.gc(&self.table())?;
            tracing::info!(id = %id, blobs = stats.blobs, layers = stats.layers, "image removed");
            Ok(())
        })?;
        Ok(Some(id))
    }

    /// Deletes content nothing uses. Blocking.
    pub fn collect_garbage(&self) -> Result<GcStats, ImageError> {
        self.with_store_lock(|table| self.gc(table))
    }

    /// For `open`, which already holds the store lock.
    pub(super) fn collect_garbage_locked(&self) -> Result<GcStats, ImageError> {
        self.gc(&self.table())
    }

    /// Deletes blobs and layers that no record in `table`, no hold and no pin keeps. The
    /// decision and the unlinks/renames happen under the pins lock, so a pull that pins
    /// content and then finds it present can rely on it staying.
    fn gc(&self, table: &Table) -> Result<GcStats, ImageError> {
        let io =
            |what, path: std::path::PathBuf| move |source| ImageError::Io { what, path, source };
        let mut stats = GcStats::default();
        let mut trash = Vec::new();
        {
            let pins = lock(&self.pins);
            if !pins.unknown.is_empty() {
                tracing::info!(unknown = ?pins.unknown, "garbage collection skipped: records this crust cannot read may keep content");
                return Ok(stats);
            }
            let mut keep: HashSet<&Digest> = HashSet::new();
            for r in table.all() {
                keep.extend(r.blobs.iter());
                keep.extend(r.layers.iter().map(|l| &l.chain_id));
            }
            keep.extend(pins.in_flight.keys());
            keep.extend(pins.holds.values().flat_map(|h| h.keys.iter()));
            for alg in ["sha256", "sha512"] {
                let dir = self.paths.blobs_dir().join(alg);
                for e in fs::read_dir(&dir)
                    .map_err(io("reading", dir.clone()))?
                    .flatten()
                {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let keep_it = format!("{alg}:{name}")
                        .parse::<Digest>()
                        .is_ok_and(|d| keep.contains(&d));
                    if !keep_it {
                        crate::durable::remove_file(e.path()).map_err(io("removing", e.path()))?;
                        stats.blobs += 1;
                    }
                }
            }
            let dir = self.paths.layers_dir();
            for e in fs::read_dir(&dir)
                .map_err(io("reading", dir.clone()))?
                .flatten()
            {
                let name = e.file_name();
                if name.as_encoded_bytes().starts_with(b".") {
                    continue;
                }
                // Any algorithm: a first layer's chain id is its diff id, which may be sha512.
                let chain = StorePaths::layer_chain(&name);
                if chain.as_ref().is_some_and(|d| keep.contains(d)) {
                    continue;
                }
                let t = dir.join(format!(".tmp-trash-{}", name.to_string_lossy()));
                crate::durable::rename(e.path(), &t).map_err(io("removing", e.path()))?;
                trash.push(t);
                if let Some(c) = chain {
                    lock(&self.layer_usage).remove(&c);
                }
                stats.layers += 1;
            }
        }
        for t in trash {
            super::store::content::remove_tree(&t).map_err(io("removing", t.clone()))?;
        }
        Ok(stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::LayerRef;
    use crate::image::digest::Algorithm;
    use crate::image::store::records::tests::record;

    #[test]
    fn layers_named_by_sha512_chain_ids_are_kept_while_used() {
        let dir = tempfile::tempdir().unwrap();
        let images = Images::open_for_test(dir.path());
        let used = Digest::compute(Algorithm::Sha512, b"used layer");
        let unused = Digest::compute(Algorithm::Sha512, b"unused layer");
        let mut r = record(b"img", &["docker.io/library/x:1"]);
        r.layers = vec![LayerRef {
            blob: Digest::of(b"blob"),
            media_type: String::new(),
            size: 1,
            diff_id: used.clone(),
            chain_id: used.clone(),
        }];
        for c in [&used, &unused] {
            fs::create_dir_all(images.paths.layer_fs(c)).unwrap();
        }
        images
            .with_store_lock(|t| {
                let mut t = t.clone();
                t.add(r.clone());
                crate::store::save(&images.paths.record(&r.id), &r)?;
                images.publish(t)
            })
            .unwrap();
        let stats = images.collect_garbage().unwrap();
        assert_eq!(stats.layers, 1);
        assert!(
            images.paths.layer_dir(&used).is_dir(),
            "a used sha512 layer is kept"
        );
        assert!(!images.paths.layer_dir(&unused).exists());
    }

    #[tokio::test]
    async fn pull_tasks_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let images = Images::open_for_test(dir.path());
        let mut slots = Vec::new();
        for _ in 0..crate::image::MAX_PULL_TASKS {
            slots.push(images.pull_slot("x").await.unwrap());
        }
        let wait = std::time::Duration::from_millis(50);
        assert!(
            tokio::time::timeout(wait, images.pull_slot("x"))
                .await
                .is_err(),
            "one pull past the limit waits"
        );
        slots.pop();
        assert!(
            tokio::time::timeout(wait, images.pull_slot("x"))
                .await
                .is_ok()
        );
    }
}
