//! `crust image import`: loads images from an OCI image layout directory, an OCI archive (a tar
//! of a layout) or a docker archive (`docker save`), for nodes without registry access. Every
//! blob is verified like a pulled one; names come from the layout's annotations
//! (`io.containerd.image.name`, or `org.opencontainers.image.ref.name`, which may be a bare tag
//! completed with `--name`) or the archive's `RepoTags`.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::digest::Digest;
use super::fetch::{Candidate, Source};
use super::registry::manifest::{
    self, Descriptor, Document, Manifest, ManifestError, Resolved, parse_document, parse_manifest,
};
use super::registry::reference::ImageRef;
use super::store::unpack::Below;
use super::{ImageError, ImageRecord, Images, PullError, UnpackError};

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error(
        "not an OCI layout, OCI archive or docker archive (no oci-layout, index.json or manifest.json)"
    )]
    Format,
    #[error("{0}")]
    Invalid(String),
    #[error("reading the archive: {0}")]
    Archive(#[from] UnpackError),
    #[error("internal error while {0}")]
    Internal(String),
    #[error(transparent)]
    Content(#[from] PullError),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> ImportError + 'a {
    move |source| ImportError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

/// Removes an extracted archive when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = super::store::content::remove_tree(&self.0);
    }
}

impl Images {
    /// Imports every image in `path`. `name` completes bare-tag names (`latest` ->
    /// `<name>:latest`) and names untagged images.
    pub async fn import(
        &self,
        path: &Path,
        name: Option<&str>,
    ) -> Result<Vec<ImageRecord>, ImageError> {
        let wrap = |error| ImageError::Import {
            path: path.display().to_string(),
            error: Box::new(error),
        };
        let base = match name {
            Some(n) => Some(ImageRef::parse(n)?),
            None => None,
        };
        let (_scratch, dir) = if path.is_dir() {
            (None, path.to_owned())
        } else {
            let scratch = self.extract_archive(path).await.map_err(wrap)?;
            let dir = scratch.0.clone();
            (Some(scratch), dir)
        };
        let result = if dir.join("index.json").is_file() {
            self.import_layout(&dir, base.as_ref()).await
        } else if dir.join("manifest.json").is_file() {
            self.import_docker(&dir, base.as_ref()).await
        } else {
            Err(ImportError::Format)
        };
        result.map_err(wrap)
    }

    /// Extracts a (possibly compressed) tar into a scratch directory inside the store.
    async fn extract_archive(&self, path: &Path) -> Result<Scratch, ImportError> {
        let mut rnd = [0u8; 6];
        getrandom::fill(&mut rnd)
            .map_err(|e| ImportError::Internal(format!("naming a scratch directory: {e}")))?;
        let dir = self
            .paths
            .ingest_dir()
            .join(format!("import-{}", hex::encode(rnd)));
        crate::durable::create_dir(&dir).map_err(io("creating", &dir))?;
        let scratch = Scratch(dir.clone());
        let file = fs::File::open(path).map_err(io("opening", path))?;
        let (reserve, ingest) = (self.settings.reserve, self.paths.ingest_dir());
        super::off_thread("extracting an archive", move || {
            super::store::unpack::extract_tar(
                file,
                &dir,
                Below::Ready(super::store::unpack::lower::Lowers::default()),
                None,
                reserve,
                &ingest,
            )
            .map(drop)
            .map_err(ImportError::from)
        })
        .await?;
        Ok(scratch)
    }

    async fn import_layout(
        &self,
        dir: &Path,
        base: Option<&ImageRef>,
    ) -> Result<Vec<ImageRecord>, ImportError> {
        let index_path = dir.join("index.json");
        let bytes = fs::read(&index_path).map_err(io("reading", &index_path))?;
        let index = match parse_document(&bytes, Some(manifest::OCI_INDEX)) {
            Ok(Document::Index(i)) => i,
            _ => {
                return Err(ImportError::Invalid(
                    "index.json is not an image index".into(),
                ));
            }
        };
        let src = Source::Local {
            dir: dir.to_owned(),
            files: HashMap::new(),
        };
        let mut out = Vec::new();
        for desc in &index.manifests {
            let names = layout_names(desc, base)?;
            let (top_bytes, top) = read_blob(dir, &desc.digest)?;
            let invalid = |e: ManifestError| ImportError::Invalid(format!("{}: {e}", desc.digest));
            let resolved = parse_document(&top_bytes, Some(&desc.media_type))
                .and_then(|doc| doc.for_platform(&self.settings.platform))
                .map_err(invalid)?;
            let (m, m_bytes, m_digest, nested) = match resolved {
                Resolved::Manifest(m) => (m, top_bytes, top.clone(), None),
                Resolved::Entry(entry) => {
                    let (b, d) = read_blob(dir, &entry.digest)?;
                    let m = parse_manifest(&b, Some(&entry.media_type)).map_err(invalid)?;
                    (m, b, d, Some((top_bytes, top.clone())))
                }
            };
            let candidate = Candidate {
                manifest: m,
                manifest_bytes: m_bytes.into(),
                manifest_digest: m_digest,
                index: nested.map(|(b, d)| (b.into(), d)),
                repo_tags: names.iter().filter_map(ImageRef::tagged).collect(),
                repo_digests: names.iter().map(|r| r.digested(&top)).collect(),
            };
            out.push(self.install(&src, candidate).await?);
        }
        Ok(out)
    }

    async fn import_docker(
        &self,
        dir: &Path,
        base: Option<&ImageRef>,
    ) -> Result<Vec<ImageRecord>, ImportError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "PascalCase")]
        struct Entry {
            config: String,
            #[serde(default)]
            repo_tags: Option<Vec<String>>,
            layers: Vec<String>,
        }
        let mpath = dir.join("manifest.json");
        let entries: Vec<Entry> =
            serde_json::from_slice(&fs::read(&mpath).map_err(io("reading", &mpath))?)
                .map_err(|e| ImportError::Invalid(format!("manifest.json: {e}")))?;
        let mut out = Vec::new();
        for e in entries {
            let mut files = HashMap::new();
            let config = self
                .describe(dir, &e.config, manifest::DOCKER_CONFIG, &mut files)
                .await?;
            let mut layers = Vec::new();
            for l in &e.layers {
                layers.push(
                    self.describe(
                        dir,
                        l,
                        "application/vnd.docker.image.rootfs.diff.tar",
                        &mut files,
                    )
                    .await?,
                );
            }
            let m = Manifest {
                schema_version: 2,
                media_type: Some(manifest::DOCKER_MANIFEST.into()),
                config,
                layers,
                annotations: Default::default(),
            };
            let bytes = serde_json::to_vec(&m).expect("manifest serializes");
            let mut tags = Vec::new();
            for t in e.repo_tags.unwrap_or_default() {
                tags.extend(
                    ImageRef::parse(&t)
                        .map_err(|err| ImportError::Invalid(err.to_string()))?
                        .tagged(),
                );
            }
            if tags.is_empty() {
                tags.extend(base.and_then(ImageRef::tagged));
            }
            let candidate = Candidate {
                manifest_digest: Digest::of(&bytes),
                manifest: m,
                manifest_bytes: bytes.into(),
                index: None,
                repo_tags: tags,
                repo_digests: vec![],
            };
            let src = Source::Local {
                dir: dir.to_owned(),
                files,
            };
            out.push(self.install(&src, candidate).await?);
        }
        Ok(out)
    }

    /// A descriptor for a file of a docker archive (its digest computed here, verified again
    /// when it is copied into the store).
    async fn describe(
        &self,
        dir: &Path,
        rel: &str,
        media_type: &str,
        files: &mut HashMap<Digest, PathBuf>,
    ) -> Result<Descriptor, ImportError> {
        let comps = super::store::unpack::extract::clean_path(Path::new(rel))
            .map_err(|e| ImportError::Invalid(e.to_string()))?;
        let path: PathBuf = dir.join(comps.iter().collect::<PathBuf>());
        let p = path.clone();
        let (digest, size) = super::off_thread("hashing an archive file", move || {
            let f = fs::File::open(&p).map_err(io("reading", &p))?;
            super::digest::HashingReader::new(f, super::digest::Algorithm::Sha256)
                .finish()
                .map_err(io("reading", &p))
        })
        .await?;
        files.insert(digest.clone(), path);
        Ok(Descriptor {
            media_type: media_type.into(),
            digest,
            size: size as i64,
            platform: None,
            annotations: Default::default(),
        })
    }
}

/// Reads a blob of a layout and checks it against its name.
fn read_blob(dir: &Path, d: &Digest) -> Result<(Vec<u8>, Digest), ImportError> {
    let p = dir.join("blobs").join(d.algorithm().name()).join(d.hex());
    let bytes = fs::read(&p).map_err(io("reading", &p))?;
    let actual = Digest::of(&bytes);
    if &actual != d {
        return Err(ImportError::Content(PullError::DigestMismatch {
            what: format!("blob {d}"),
            expected: d.to_string(),
            actual: actual.to_string(),
        }));
    }
    Ok((bytes, actual))
}

/// The names an index entry of a layout carries.
fn layout_names(desc: &Descriptor, base: Option<&ImageRef>) -> Result<Vec<ImageRef>, ImportError> {
    let bad = |e: super::ReferenceError| ImportError::Invalid(e.to_string());
    if let Some(full) = desc.annotations.get("io.containerd.image.name") {
        return Ok(vec![ImageRef::parse(full).map_err(bad)?]);
    }
    let Some(name) = desc.annotations.get("org.opencontainers.image.ref.name") else {
        return Ok(base.cloned().into_iter().collect());
    };
    if name.contains('/') || name.contains(':') || name.contains('@') {
        return Ok(vec![ImageRef::parse(name).map_err(bad)?]);
    }
    match base {
        Some(b) => Ok(vec![
            ImageRef::parse(&format!("{}:{name}", b.name())).map_err(bad)?,
        ]),
        None => {
            tracing::warn!(tag = %name, "layout names only a tag; give --name to name the image");
            Ok(vec![])
        }
    }
}
