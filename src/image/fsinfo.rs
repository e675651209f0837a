//! ImageFsInfo: bytes and inodes used by the image store and, separately, by container
//! writable layers (`<root>/containers`), which kubelet's eviction reads. Layer usage is
//! measured once at unpack and kept in `layer.json`, so a call only stats blobs and reads
//! those small files; container layers change while containers run and are walked each time,
//! without crossing into the root filesystems and image volumes mounted among them.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::StorePaths;
use super::store::unpack;
use super::{ImageError, Images, lock};

/// Usage of one directory tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsUsage {
    pub mountpoint: PathBuf,
    pub bytes: u64,
    pub inodes: u64,
}

impl Images {
    /// (image store, container layers). Blocking.
    pub fn fs_usage(&self) -> Result<(FsUsage, FsUsage), ImageError> {
        let io = |what, path: &Path| {
            let path = path.to_owned();
            move |source| ImageError::Io { what, path, source }
        };
        let (mut bytes, mut inodes) = (0u64, 0u64);
        for dir in [
            self.paths.blobs_dir().join("sha256"),
            self.paths.blobs_dir().join("sha512"),
            self.paths.records_dir(),
        ] {
            for e in fs::read_dir(&dir).map_err(io("reading", &dir))?.flatten() {
                if let Ok(m) = e.metadata() {
                    bytes += m.blocks() * 512;
                    inodes += 1;
                }
            }
        }
        let layers = self.paths.layers_dir();
        for e in fs::read_dir(&layers)
            .map_err(io("reading", &layers))?
            .flatten()
        {
            let Some(chain) = StorePaths::layer_chain(&e.file_name()) else {
                continue;
            };
            let cached = lock(&self.layer_usage).get(&chain).cloned();
            let meta = match cached.or_else(|| unpack::read_meta(&e.path())) {
                Some(m) => m,
                None => continue,
            };
            bytes += meta.bytes;
            inodes += meta.inodes + 2; // plus the layer directory and its layer.json
            lock(&self.layer_usage).insert(chain, meta);
        }
        let images = FsUsage {
            mountpoint: self.paths.root().to_owned(),
            bytes,
            inodes,
        };
        let (cb, ci) = if self.containers_dir.is_dir() {
            crate::stats::disk_usage(&self.containers_dir)
                .map_err(io("measuring", &self.containers_dir))?
        } else {
            (0, 0)
        };
        let containers = FsUsage {
            mountpoint: crate::stats::filesystem_id(&self.containers_dir, self.paths.root()),
            bytes: cb,
            inodes: ci,
        };
        Ok((images, containers))
    }
}
