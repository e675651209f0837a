//! The JSON documents of an image: index (manifest list), manifest and config, in both their
//! OCI and Docker schema 2 forms, plus choosing the index entry for this machine's platform.
//! Only the fields crust uses are typed; the rest are ignored on parse.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::image::digest::Digest;

pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";

/// What a registry is asked for, most preferred first.
pub const ACCEPTED_MANIFESTS: &[&str] = &[OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST];

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    #[serde(default)]
    pub media_type: String,
    pub digest: Digest,
    pub size: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Platform {
    pub architecture: String,
    pub os: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

impl Platform {
    /// The platform of the running machine, in OCI's names.
    pub fn current() -> Platform {
        let (architecture, variant) = match std::env::consts::ARCH {
            "x86_64" => ("amd64", None),
            "aarch64" => ("arm64", Some("v8")),
            "arm" => ("arm", Some("v7")),
            "x86" => ("386", None),
            "powerpc64" => ("ppc64le", None),
            "loongarch64" => ("loong64", None),
            other => (other, None),
        };
        Platform {
            architecture: architecture.into(),
            os: std::env::consts::OS.into(),
            variant: variant.map(Into::into),
        }
    }

    /// Whether an index entry for `other` can run here. A missing variant matches the default
    /// one (arm64 is v8); an explicit different variant does not.
    fn accepts(&self, other: &Platform) -> bool {
        let norm = |p: &Platform| match (p.architecture.as_str(), p.variant.as_deref()) {
            ("arm64", None | Some("v8")) | ("amd64", None | Some("v1")) => None,
            (_, v) => v.map(str::to_owned),
        };
        self.os == other.os && self.architecture == other.architecture && norm(self) == norm(other)
    }
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    #[serde(default)]
    pub media_type: Option<String>,
    pub manifests: Vec<Descriptor>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// A parsed top-level document.
pub enum Document {
    Index(Index),
    Manifest(Manifest),
}

/// overlayfs stacks at most this many lower layers (OVL_MAX_STACK), so an image with more can
/// never run.
pub const MAX_LAYERS: usize = 500;
/// An image config is a few kilobytes; it is read whole into memory.
pub const MAX_CONFIG_BYTES: i64 = 8 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("unsupported manifest media type {0:?}")]
    MediaType(String),
    #[error("malformed {what}: {source}")]
    Json {
        what: &'static str,
        source: serde_json::Error,
    },
    #[error(
        "Docker schema 1 manifests are not supported (a deprecated format: push the image again with a current client)"
    )]
    Schema1,
    #[error("manifest schema version {0} is not supported (only 2)")]
    Schema(u32),
    #[error("an image index inside an image index is not supported")]
    NestedIndex,
    #[error("no manifest for platform {wanted} (the index has: {offered})")]
    NoPlatform { wanted: String, offered: String },
    #[error("{0}")]
    Limits(String),
}

/// Parses a manifest or index, telling them apart by the body's `mediaType` (or the
/// `Content-Type` the registry sent, or the presence of `manifests`), and checks the sizes it
/// declares.
pub fn parse_document(bytes: &[u8], content_type: Option<&str>) -> Result<Document, ManifestError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Probe {
        schema_version: Option<serde_json::Value>,
        media_type: Option<String>,
        manifests: Option<serde_json::Value>,
    }
    let probe: Probe = serde_json::from_slice(bytes).map_err(|source| ManifestError::Json {
        what: "manifest",
        source,
    })?;
    let is_schema1 = |t: &str| t.starts_with("application/vnd.docker.distribution.manifest.v1");
    match probe.schema_version.as_ref().and_then(|v| v.as_u64()) {
        Some(1) => return Err(ManifestError::Schema1),
        Some(2) | None => {}
        Some(v) => return Err(ManifestError::Schema(v.min(u32::MAX as u64) as u32)),
    }
    // The body's own mediaType is authoritative; the Content-Type header only breaks ties.
    let declared = probe.media_type.is_some();
    let media_type = probe.media_type.or_else(|| content_type.map(str::to_owned));
    let is_index = match media_type.as_deref() {
        Some(OCI_INDEX | DOCKER_LIST) => true,
        Some(OCI_MANIFEST | DOCKER_MANIFEST) => false,
        Some(t) if is_schema1(t) => return Err(ManifestError::Schema1),
        Some(other) if declared => return Err(ManifestError::MediaType(other.to_owned())),
        _ => probe.manifests.is_some(),
    };
    if is_index {
        let index: Index = serde_json::from_slice(bytes).map_err(|source| ManifestError::Json {
            what: "image index",
            source,
        })?;
        if let Some(d) = index.manifests.iter().find(|d| d.size < 0) {
            return Err(negative(d));
        }
        return Ok(Document::Index(index));
    }
    let m: Manifest = serde_json::from_slice(bytes).map_err(|source| ManifestError::Json {
        what: "image manifest",
        source,
    })?;
    if m.schema_version != 2 {
        return Err(ManifestError::Schema(m.schema_version));
    }
    m.check_limits()?;
    Ok(Document::Manifest(m))
}

/// Parses what an index entry points to, which must be an image manifest.
pub fn parse_manifest(bytes: &[u8], content_type: Option<&str>) -> Result<Manifest, ManifestError> {
    match parse_document(bytes, content_type)? {
        Document::Manifest(m) => Ok(m),
        Document::Index(_) => Err(ManifestError::NestedIndex),
    }
}

fn negative(d: &Descriptor) -> ManifestError {
    ManifestError::Limits(format!("descriptor {} has a negative size", d.digest))
}

impl Manifest {
    /// Sizes are checked before anything is downloaded: a download stops at the declared size,
    /// so a negative one would leave it unbounded.
    fn check_limits(&self) -> Result<(), ManifestError> {
        if let Some(d) = std::iter::once(&self.config)
            .chain(&self.layers)
            .find(|d| d.size < 0)
        {
            return Err(negative(d));
        }
        if self.config.size > MAX_CONFIG_BYTES {
            return Err(ManifestError::Limits(format!(
                "image config is {} bytes; at most {} MiB is accepted",
                self.config.size,
                MAX_CONFIG_BYTES >> 20
            )));
        }
        if self.layers.len() > MAX_LAYERS {
            return Err(ManifestError::Limits(format!(
                "image has {} layers; overlayfs stacks at most {MAX_LAYERS}",
                self.layers.len()
            )));
        }
        Ok(())
    }
}

/// What a top-level document stands for on this machine: the image manifest itself, or the
/// index entry for `platform`, still to be fetched.
pub enum Resolved {
    Manifest(Manifest),
    Entry(Descriptor),
}

impl Document {
    pub fn for_platform(self, platform: &Platform) -> Result<Resolved, ManifestError> {
        match self {
            Document::Manifest(m) => Ok(Resolved::Manifest(m)),
            Document::Index(idx) => match idx.select(platform) {
                Some(d) => Ok(Resolved::Entry(d.clone())),
                None => Err(ManifestError::NoPlatform {
                    wanted: platform.to_string(),
                    offered: idx.platforms(),
                }),
            },
        }
    }
}

impl Index {
    /// The entry for `platform`: the first that matches; an entry without a platform is taken
    /// only when it is the index's sole image manifest.
    pub fn select(&self, platform: &Platform) -> Option<&Descriptor> {
        let images: Vec<&Descriptor> = self
            .manifests
            .iter()
            .filter(|d| {
                matches!(
                    d.media_type.as_str(),
                    OCI_MANIFEST | DOCKER_MANIFEST | OCI_INDEX | DOCKER_LIST | ""
                )
            })
            .collect();
        images
            .iter()
            .find(|d| d.platform.as_ref().is_some_and(|p| platform.accepts(p)))
            .or_else(|| match images.as_slice() {
                [only] if only.platform.is_none() => Some(only),
                _ => None,
            })
            .copied()
    }

    /// The platforms the index offers, for an error message.
    pub fn platforms(&self) -> String {
        let list: Vec<String> = self
            .manifests
            .iter()
            .filter_map(|d| d.platform.as_ref().map(|p| p.to_string()))
            .collect();
        list.join(", ")
    }
}

/// How a layer blob is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    /// From the first bytes of the blob: media types are sometimes wrong, magic numbers are not.
    pub fn sniff(head: &[u8]) -> Compression {
        if head.starts_with(&[0x1f, 0x8b]) {
            Compression::Gzip
        } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Compression::Zstd
        } else {
            Compression::None
        }
    }
}

/// Whether a layer media type is an ocicrypt one (the `+encrypted` suffix,
/// containers/ocicrypt `spec.MediaTypeLayerEnc` and its compressed forms).
pub fn is_encrypted(media_type: &str) -> bool {
    media_type.ends_with("+encrypted")
}

/// Whether a layer media type is one crust can unpack (tar, optionally gzip or zstd).
pub fn is_layer_type(media_type: &str) -> bool {
    media_type.is_empty()
        || media_type.starts_with("application/vnd.oci.image.layer.v1.tar")
        || media_type.starts_with("application/vnd.oci.image.layer.nondistributable.v1.tar")
        || media_type.starts_with("application/vnd.docker.image.rootfs.")
}

/// The image configuration (OCI image-spec `config.json`); Docker's is the same document.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ImageConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub os: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    #[serde(default)]
    pub config: RuntimeConfig,
    #[serde(default)]
    pub rootfs: RootFs,
}

/// What a container started from the image runs and how (the `config` object).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "PascalCase")]
pub struct RuntimeConfig {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub user: String,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub env: Vec<String>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub entrypoint: Vec<String>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub cmd: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub working_dir: String,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub volumes: BTreeMap<String, serde_json::Value>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub exposed_ports: BTreeMap<String, serde_json::Value>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stop_signal: String,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct RootFs {
    #[serde(default, rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub diff_ids: Vec<Digest>,
}

/// `null` in a config (as `"Entrypoint": null`) means the same as absent.
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

pub fn parse_config(bytes: &[u8]) -> Result<ImageConfig, ManifestError> {
    serde_json::from_slice(bytes).map_err(|source| ManifestError::Json {
        what: "image config",
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(arch: &str, variant: Option<&str>) -> Descriptor {
        Descriptor {
            media_type: OCI_MANIFEST.into(),
            digest: Digest::of(arch.as_bytes()),
            size: 1,
            platform: Some(Platform {
                architecture: arch.into(),
                os: "linux".into(),
                variant: variant.map(Into::into),
            }),
            annotations: BTreeMap::new(),
        }
    }

    #[test]
    fn index_selects_the_running_platform() {
        let index = Index {
            media_type: None,
            manifests: vec![
                desc("arm64", Some("v8")),
                desc("amd64", None),
                desc("s390x", None),
            ],
        };
        let amd64 = Platform {
            architecture: "amd64".into(),
            os: "linux".into(),
            variant: None,
        };
        assert_eq!(index.select(&amd64).unwrap().digest, Digest::of(b"amd64"));
        let arm64 = Platform {
            architecture: "arm64".into(),
            os: "linux".into(),
            variant: Some("v8".into()),
        };
        assert_eq!(index.select(&arm64).unwrap().digest, Digest::of(b"arm64"));
        let riscv = Platform {
            architecture: "riscv64".into(),
            os: "linux".into(),
            variant: None,
        };
        assert!(index.select(&riscv).is_none());
        assert!(index.platforms().contains("linux/s390x"));
    }

    #[test]
    fn documents_are_told_apart() {
        let m = format!(
            r#"{{"schemaVersion":2,"config":{{"mediaType":"{DOCKER_CONFIG}","digest":"{}","size":2}},"layers":[]}}"#,
            Digest::of(b"{}")
        );
        assert!(matches!(
            parse_document(m.as_bytes(), None),
            Ok(Document::Manifest(_))
        ));
        let i = r#"{"schemaVersion":2,"manifests":[]}"#;
        assert!(matches!(
            parse_document(i.as_bytes(), None),
            Ok(Document::Index(_))
        ));
        let v1 = r#"{"schemaVersion":1,"name":"x","fsLayers":[]}"#;
        assert!(matches!(
            parse_document(v1.as_bytes(), None),
            Err(ManifestError::Schema1)
        ));
        let neg = m.replace(r#""size":2"#, r#""size":-1"#);
        assert!(matches!(
            parse_document(neg.as_bytes(), None),
            Err(ManifestError::Limits(_))
        ));
        let weird = r#"{"schemaVersion":2,"mediaType":"application/x-thing"}"#;
        assert!(matches!(
            parse_document(weird.as_bytes(), None),
            Err(ManifestError::MediaType(_))
        ));
        assert!(parse_document(b"not json", None).is_err());
    }

    #[test]
    fn config_nulls_are_empty() {
        let c = parse_config(br#"{"architecture":"amd64","os":"linux","config":{"Entrypoint":null,"Cmd":["sh"],"User":"1000"},"rootfs":{"type":"layers","diff_ids":[]}}"#).unwrap();
        assert!(c.config.entrypoint.is_empty());
        assert_eq!(c.config.cmd, ["sh"]);
        assert_eq!(c.config.user, "1000");
    }
}
