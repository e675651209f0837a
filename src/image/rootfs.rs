//! What the container module uses: an image's ordered lowerdirs and runtime config, held so
//! that removing the image (RemoveImage) keeps its layers until every container using it is
//! gone. Holds are persisted (`<root>/images/holds`, one record per holder, written before
//! `acquire` returns) and loaded before the start-up garbage collection, so a container whose
//! image was removed keeps its layers across daemon restarts too.

use std::path::PathBuf;

use super::digest::Digest;
use super::registry::manifest::RuntimeConfig;
use super::store::locking::Hold;
use super::store::records::ImageRecord;
use super::{ImageError, Images, lock};

/// An image a container uses.
#[derive(Debug, Clone)]
pub struct ImageUse {
    pub id: Digest,
    /// overlayfs lowerdirs, topmost layer first (the order `lowerdir=` wants). Empty for an
    /// image without layers.
    pub lowerdirs: Vec<PathBuf>,
    /// User, Env, Entrypoint, Cmd, WorkingDir, Volumes, StopSignal, Labels.
    pub config: RuntimeConfig,
}

impl Images {
    /// overlayfs lowerdirs of `record`, topmost first.
    pub fn lowerdirs(&self, record: &ImageRecord) -> Vec<PathBuf> {
        record
            .layers
            .iter()
            .rev()
            .map(|l| self.paths.layer_fs(&l.chain_id))
            .collect()
    }

    /// Resolves `image` (id, tag, digest) and holds its content for `holder` (a container id)
    /// until `release(holder)`. Acquiring again for the same holder replaces its hold.
    pub fn acquire(&self, holder: &str, image: &str) -> Result<ImageUse, ImageError> {
        let record = self
            .find(image)?
            .ok_or_else(|| ImageError::NotFound(image.to_owned()))?;
        let hold = Hold {
            holder: holder.to_owned(),
            image: record.id.clone(),
            keys: record
                .blobs
                .iter()
                .cloned()
                .chain(record.layers.iter().map(|l| l.chain_id.clone()))
                .collect(),
        };
        {
            let mut pins = lock(&self.pins);
            // Content deletion decides under this same lock, so once the hold is in, the
            // layers stay; check they were not deleted just before.
            if let Some(missing) = record
                .layers
                .iter()
                .find(|l| !self.paths.layer_dir(&l.chain_id).is_dir())
            {
                return Err(ImageError::NotFound(format!(
                    "{image} (layer {} is gone)",
                    missing.chain_id
                )));
            }
            pins.holds.insert(holder.to_owned(), hold.clone());
        }
        // On disk before it is relied on; a failed write takes the hold back.
        if let Err(e) = crate::store::save(&self.paths.hold(holder), &hold) {
            lock(&self.pins).holds.remove(holder);
            return Err(e.into());
        }
        Ok(ImageUse {
            id: record.id.clone(),
            lowerdirs: self.lowerdirs(&record),
            config: record.config.config,
        })
    }

    /// Whether a hold was unreadable at start and is not made again yet (`repair_hold`).
    pub fn holds_lost(&self) -> bool {
        lock(&self.pins)
            .unknown
            .iter()
            .any(|k| k.starts_with("hold "))
    }

    /// Whether garbage collection waits for records this crust cannot read (`Pins::unknown`).
    pub fn collection_waits(&self) -> bool {
        !lock(&self.pins).unknown.is_empty()
    }

    /// Everyone holding an image (container ids).
    pub fn holders(&self) -> Vec<String> {
        lock(&self.pins).holds.keys().cloned().collect()
    }

    /// Drops `holder`'s hold, deleting content only it kept (its image was removed meanwhile).
    pub fn release(&self, holder: &str) -> Result<(), ImageError> {
        super::remove_file(self.paths.hold(holder))?;
        let released = {
            let mut pins = lock(&self.pins);
            // A hold lost at start needs no repair once its holder lets go.
            pins.unknown
                .remove(&format!("hold {}", Digest::of(holder.as_bytes()).hex()));
            pins.holds.remove(holder)
        };
        if let Some(h) = released {
            if self.table().get(&h.image).is_none() {
                self.collect_garbage()?;
            }
        }
        Ok(())
    }

    /// Loads the persisted holds (when the store is opened, before any garbage collection). A
    /// hold that cannot be read keeps garbage collection from deleting anything until its
    /// container's hold is made again (`repair_hold`): collecting without it could delete a
    /// running container's root filesystem. With `set_aside` (the daemon's start) a damaged
    /// one is moved out of the way (`store::set_aside`); a newer crust's stays where it is.
    pub(super) fn load_holds(&self, set_aside: bool) -> Result<(), ImageError> {
        let dir = self.paths.holds_dir();
        let io = |what, path: &std::path::Path| {
            let path = path.to_owned();
            move |source| ImageError::Io { what, path, source }
        };
        let mut loaded = Vec::new();
        for e in std::fs::read_dir(&dir)
            .map_err(io("reading", &dir))?
            .flatten()
        {
            let path = e.path();
            if path.extension().is_none_or(|x| x != "json") {
                continue;
            }
            match crate::store::load::<Hold>(&path) {
                Ok(h) => loaded.push(h),
                Err(err) => self.unreadable(&path, "hold", &err, set_aside),
            }
        }
        let mut pins = lock(&self.pins);
        for h in loaded {
            pins.holds.insert(h.holder.clone(), h);
        }
        Ok(())
    }

    /// Takes note of a hold or image record this crust cannot read: garbage collection waits
    /// (see `Pins::unknown`); a damaged one is set aside when `set_aside`.
    pub(super) fn unreadable(
        &self,
        path: &std::path::Path,
        kind: &str,
        err: &crate::store::StoreError,
        set_aside: bool,
    ) {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let newer = matches!(err, crate::store::StoreError::Version { .. });
        if set_aside && !newer {
            let damaged =
                crate::store::records_dir(&self.settings.root).join(crate::store::DAMAGED_DIR);
            match crate::store::set_aside(path, &damaged, kind, &stem) {
                Ok(to) => {
                    tracing::error!(error = %err, moved_to = %to.display(), "unreadable image {kind} set aside")
                }
                Err(e) => tracing::error!(error = %err, set_aside = %e, "unreadable image {kind}"),
            }
        } else {
            tracing::error!(error = %err, "image {kind} this crust cannot read; garbage collection waits");
        }
        // A damaged image record's content is kept by nobody any more (the image is gone), but
        // a newer crust's record, or any hold, may keep content that is in use.
        if kind == "hold" || newer {
            lock(&self.pins).unknown.insert(format!("{kind} {stem}"));
        }
    }

    /// Holds `holder`'s image again when its hold was set aside as unreadable (at start, for
    /// each container recovered): from its image's record if the image is still here, else
    /// from the layers its root filesystem's overlay reads (`lowerdirs`). Once every unreadable
    /// hold is made again, garbage collection resumes. False when `holder` had no lost hold.
    /// Without `lowerdirs` (an image volume's holder), only its image's record can make the
    /// hold again; if the image is gone too, garbage collection keeps waiting.
    pub fn repair_hold(
        &self,
        holder: &str,
        image: &str,
        lowerdirs: Option<&[PathBuf]>,
    ) -> Result<bool, ImageError> {
        let key = format!("hold {}", Digest::of(holder.as_bytes()).hex());
        if !lock(&self.pins).unknown.contains(&key) {
            return Ok(false);
        }
        if self.find(image)?.is_some() {
            self.acquire(holder, image)?;
        } else if let Some(lowerdirs) = lowerdirs {
            let layers = self.paths.layers_dir();
            let keys: Vec<Digest> = lowerdirs
                .iter()
                .filter_map(|d| d.strip_prefix(&layers).ok())
                .filter_map(|rel| super::StorePaths::layer_chain(rel.iter().next()?))
                .collect();
            let hold = Hold {
                holder: holder.to_owned(),
                image: image
                    .parse()
                    .unwrap_or_else(|_| Digest::of(image.as_bytes())),
                keys,
            };
            crate::store::save(&self.paths.hold(holder), &hold)?;
            lock(&self.pins).holds.insert(holder.to_owned(), hold);
        } else {
            return Ok(false);
        }
        let mut pins = lock(&self.pins);
        pins.unknown.remove(&key);
        tracing::info!(
            holder,
            left = pins.unknown.len(),
            "made an unreadable image hold again"
        );
        Ok(true)
    }

    /// The image ids currently held, by holder.
    pub fn holds(&self) -> Vec<(String, Digest)> {
        lock(&self.pins)
            .holds
            .iter()
            .map(|(k, h)| (k.clone(), h.image.clone()))
            .collect()
    }
}

/// The annotations a checkpoint image carries in its manifest: CRI-O's and checkpointctl's
/// names for the container it was made from. An image with either is a checkpoint, whose one
/// layer holds the archive's files.
const CHECKPOINT_ANNOTATIONS: [&str; 2] = [
    "org.criu.checkpoint.container.name",
    "io.kubernetes.cri-o.annotations.checkpoint.name",
];

impl Images {
    /// When `image` is in the store and is a checkpoint image (one of the annotations above in
    /// its manifest): the directory of its topmost layer, where the archive's files are.
    pub fn checkpoint_layer(&self, image: &str) -> Result<Option<PathBuf>, ImageError> {
        let Some(record) = self.find(image)? else {
            return Ok(None);
        };
        let manifest =
            std::fs::read(self.paths.blob(&record.manifest)).map_err(|source| ImageError::Io {
                what: "reading the manifest",
                path: self.paths.blob(&record.manifest),
                source,
            })?;
        let manifest: serde_json::Value = serde_json::from_slice(&manifest).unwrap_or_default();
        let annotated = CHECKPOINT_ANNOTATIONS
            .iter()
            .any(|k| manifest["annotations"][k].is_string());
        Ok(annotated
            .then(|| self.lowerdirs(&record).into_iter().next())
            .flatten())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::image::store::records::tests::record;
    use crate::image::{ImageSettings, LayerRef, Platform};

    #[test]
    fn a_held_image_keeps_its_layers_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let open = || {
            let settings = ImageSettings {
                root: dir.path().to_owned(),
                registry: Default::default(),
                max_concurrent_downloads: 1,
                progress_timeout: Duration::from_secs(1),
                min_download_rate: 0,
                platform: Platform::current(),
                reserve: crate::image::Reserve::new(0),
                pinned_images: Vec::new(),
            };
            Images::open(settings, true).unwrap()
        };
        let images = open();
        let mut r = record(b"img", &["docker.io/library/x:1"]);
        let chain = Digest::of(b"layer");
        r.layers = vec![LayerRef {
            blob: Digest::of(b"blob"),
            media_type: String::new(),
            size: 1,
            diff_id: chain.clone(),
            chain_id: chain.clone(),
        }];
        std::fs::create_dir_all(images.paths.layer_fs(&chain)).unwrap();
        std::fs::write(images.paths.blob(&Digest::of(b"blob")), b"blob").unwrap();
        r.blobs.push(Digest::of(b"blob"));
        images
            .with_store_lock(|t| {
                let mut t = t.clone();
                t.add(r.clone());
                crate::store::save(&images.paths.record(&r.id), &r)?;
                images.publish(t)
            })
            .unwrap();

        let used = images.acquire("ctr1", "x:1").unwrap();
        assert_eq!(used.lowerdirs, [images.paths.layer_fs(&chain)]);
        assert_eq!(images.remove("x:1").unwrap(), Some(r.id.clone()));
        assert!(images.find("x:1").unwrap().is_none());
        assert!(
            images.paths.layer_dir(&chain).is_dir(),
            "held layer survives RemoveImage"
        );
        assert!(images.paths.has_blob(&Digest::of(b"blob")));
        assert_eq!(images.holds().len(), 1);
        // A restart (with its start-up garbage collection) keeps the hold.
        drop(images);
        let images = open();
        assert_eq!(images.holds(), [("ctr1".to_owned(), r.id.clone())]);
        assert!(
            images.paths.layer_dir(&chain).is_dir(),
            "held across a restart"
        );
        assert!(images.paths.has_blob(&Digest::of(b"blob")));
        images.release("ctr1").unwrap();
        assert!(images.holds().is_empty());
        assert_eq!(
            std::fs::read_dir(images.paths.holds_dir()).unwrap().count(),
            0
        );
        assert!(
            !images.paths.layer_dir(&chain).exists(),
            "released layer is collected"
        );
        assert!(!images.paths.has_blob(&Digest::of(b"blob")));
        images.release("ctr1").unwrap();
        assert!(matches!(
            images.acquire("ctr2", "x:1"),
            Err(ImageError::NotFound(_))
        ));
    }
}
