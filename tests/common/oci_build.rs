//! Builds test images in memory: layer tars with every entry kind crust must unpack (including
//! whiteouts, opaque markers, devices, xattrs and hostile paths), compressed with gzip, zstd or
//! nothing, plus configs, manifests and indexes, with their digests.

#![allow(dead_code)]

use std::io::Write;

use serde_json::{Value, json};
use sha2::Digest as _;

pub const MTIME: u64 = 1_704_067_200;

pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

/// One tar entry.
#[derive(Clone, Debug)]
pub enum Node {
    Dir {
        path: String,
        mode: u32,
        uid: u64,
        gid: u64,
    },
    File {
        path: String,
        data: Vec<u8>,
        mode: u32,
        uid: u64,
        gid: u64,
        xattrs: Vec<(String, Vec<u8>)>,
    },
    Symlink {
        path: String,
        target: String,
    },
    Hardlink {
        path: String,
        target: String,
    },
    Char {
        path: String,
        major: u32,
        minor: u32,
    },
    Fifo {
        path: String,
    },
    /// A raw name written into the header as is (for hostile paths like `../x`).
    RawFile {
        name: Vec<u8>,
        data: Vec<u8>,
    },
}

pub fn file(path: &str, data: &[u8]) -> Node {
    Node::File {
        path: path.into(),
        data: data.to_vec(),
        mode: 0o644,
        uid: 0,
        gid: 0,
        xattrs: vec![],
    }
}
pub fn dir(path: &str) -> Node {
    Node::Dir {
        path: path.into(),
        mode: 0o755,
        uid: 0,
        gid: 0,
    }
}

fn header(kind: tar::EntryType, mode: u32, uid: u64, gid: u64, size: u64) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_uid(uid);
    h.set_gid(gid);
    h.set_mtime(MTIME);
    h.set_size(size);
    h
}

fn pax_record(key: &str, value: &[u8]) -> Vec<u8> {
    // "<len> <key>=<value>\n" where len counts the whole record, its own digits included.
    let body = key.len() + value.len() + 3;
    let mut len = body + body.to_string().len();
    if len.to_string().len() != body.to_string().len() {
        len += 1;
    }
    let mut r = format!("{len} {key}=").into_bytes();
    r.extend_from_slice(value);
    r.push(b'\n');
    r
}

/// An uncompressed layer tar of `nodes`, in order.
pub fn tar(nodes: &[Node]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for n in nodes {
        match n {
            Node::Dir {
                path,
                mode,
                uid,
                gid,
            } => {
                let mut h = header(tar::EntryType::Directory, *mode, *uid, *gid, 0);
                b.append_data(&mut h, path, &[][..]).unwrap();
            }
            Node::File {
                path,
                data,
                mode,
                uid,
                gid,
                xattrs,
            } => {
                if !xattrs.is_empty() {
                    let mut pax = Vec::new();
                    for (k, v) in xattrs {
                        pax.extend(pax_record(&format!("SCHILY.xattr.{k}"), v));
                    }
                    let mut h = header(tar::EntryType::XHeader, 0o644, 0, 0, pax.len() as u64);
                    b.append_data(&mut h, "PaxHeaders/x", &pax[..]).unwrap();
                }
                let mut h = header(
                    tar::EntryType::Regular,
                    *mode,
                    *uid,
                    *gid,
                    data.len() as u64,
                );
                b.append_data(&mut h, path, &data[..]).unwrap();
            }
            Node::Symlink { path, target } => {
                let mut h = header(tar::EntryType::Symlink, 0o777, 0, 0, 0);
                b.append_link(&mut h, path, target).unwrap();
            }
            Node::Hardlink { path, target } => {
                let mut h = header(tar::EntryType::Link, 0o644, 0, 0, 0);
                b.append_link(&mut h, path, target).unwrap();
            }
            Node::Char { path, major, minor } => {
                let mut h = header(tar::EntryType::Char, 0o666, 0, 0, 0);
                h.set_device_major(*major).unwrap();
                h.set_device_minor(*minor).unwrap();
                b.append_data(&mut h, path, &[][..]).unwrap();
            }
            Node::Fifo { path } => {
                let mut h = header(tar::EntryType::Fifo, 0o600, 0, 0, 0);
                b.append_data(&mut h, path, &[][..]).unwrap();
            }
            Node::RawFile { name, data } => {
                let mut h = header(tar::EntryType::Regular, 0o644, 0, 0, data.len() as u64);
                h.as_mut_bytes()[..100].fill(0);
                h.as_mut_bytes()[..name.len()].copy_from_slice(name);
                h.set_cksum();
                b.append(&h, &data[..]).unwrap();
            }
        }
    }
    b.into_inner().unwrap()
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Comp {
    None,
    Gzip,
    Zstd,
}

pub fn compress(tar: &[u8], c: Comp) -> (Vec<u8>, &'static str) {
    match c {
        Comp::None => (tar.to_vec(), "application/vnd.oci.image.layer.v1.tar"),
        Comp::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(tar).unwrap();
            (
                e.finish().unwrap(),
                "application/vnd.oci.image.layer.v1.tar+gzip",
            )
        }
        Comp::Zstd => (
            ruzstd::encoding::compress_to_vec(tar, ruzstd::encoding::CompressionLevel::Fastest),
            "application/vnd.oci.image.layer.v1.tar+zstd",
        ),
    }
}

/// A blob and its descriptor.
#[derive(Clone, Debug)]
pub struct Blob {
    pub bytes: Vec<u8>,
    pub media_type: String,
}

impl Blob {
    pub fn new(bytes: Vec<u8>, media_type: &str) -> Blob {
        Blob {
            bytes,
            media_type: media_type.into(),
        }
    }
    pub fn digest(&self) -> String {
        digest(&self.bytes)
    }
    pub fn descriptor(&self) -> Value {
        json!({"mediaType": self.media_type, "digest": self.digest(), "size": self.bytes.len()})
    }
}

/// A single-platform image.
#[derive(Clone, Debug)]
pub struct Image {
    pub config: Blob,
    pub layers: Vec<Blob>,
    pub manifest: Blob,
}

impl Image {
    /// The id crust must report: the config digest.
    pub fn id(&self) -> String {
        self.config.digest()
    }
}

/// Builds an image from layer tars; `runtime` is the config's `config` object.
pub fn image(layers: &[(Vec<u8>, Comp)], runtime: Value, arch: &str) -> Image {
    let mut blobs = Vec::new();
    let mut diff_ids = Vec::new();
    for (t, c) in layers {
        diff_ids.push(digest(t));
        let (bytes, mt) = compress(t, *c);
        blobs.push(Blob::new(bytes, mt));
    }
    let config = json!({
        "created": "2024-01-01T00:00:00Z",
        "architecture": arch,
        "os": "linux",
        "config": runtime,
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    });
    let config = Blob::new(
        serde_json::to_vec(&config).unwrap(),
        "application/vnd.oci.image.config.v1+json",
    );
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config.descriptor(),
        "layers": blobs.iter().map(Blob::descriptor).collect::<Vec<_>>(),
    });
    let manifest = Blob::new(
        serde_json::to_vec(&manifest).unwrap(),
        "application/vnd.oci.image.manifest.v1+json",
    );
    Image {
        config,
        layers: blobs,
        manifest,
    }
}

/// An OCI index over `(image, architecture)` pairs.
pub fn index(entries: &[(&Image, &str)]) -> Blob {
    let manifests: Vec<Value> = entries
        .iter()
        .map(|(img, arch)| {
            let mut d = img.manifest.descriptor();
            d["platform"] = json!({"architecture": arch, "os": "linux"});
            d
        })
        .collect();
    let idx = json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": manifests});
    Blob::new(
        serde_json::to_vec(&idx).unwrap(),
        "application/vnd.oci.image.index.v1+json",
    )
}

/// The statically linked busybox from Debian's busybox-static, as a base layer with a shell.
pub fn busybox_layer() -> Vec<Node> {
    let bb = std::fs::read("/bin/busybox").expect(
        "/bin/busybox missing: install Debian's busybox-static (hack/install-deps.sh test)",
    );
    vec![
        dir("bin"),
        Node::File {
            path: "bin/busybox".into(),
            data: bb,
            mode: 0o755,
            uid: 0,
            gid: 0,
            xattrs: vec![],
        },
        Node::Symlink {
            path: "bin/sh".into(),
            target: "busybox".into(),
        },
        dir("etc"),
        file(
            "etc/passwd",
            b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
        ),
        dir("tmp"),
    ]
}

/// Writes `images` as an OCI image layout directory; each gets the ref-name annotation given.
pub fn write_layout(dir: &std::path::Path, images: &[(&Image, Option<&str>)]) {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let mut manifests = Vec::new();
    for (img, name) in images {
        for b in std::iter::once(&img.config)
            .chain(&img.layers)
            .chain(std::iter::once(&img.manifest))
        {
            std::fs::write(blobs.join(&b.digest()[7..]), &b.bytes).unwrap();
        }
        let mut d = img.manifest.descriptor();
        if let Some(n) = name {
            d["annotations"] = json!({"org.opencontainers.image.ref.name": n});
        }
        manifests.push(d);
    }
    std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    std::fs::write(
        dir.join("index.json"),
        serde_json::to_vec(&json!({"schemaVersion": 2, "manifests": manifests})).unwrap(),
    )
    .unwrap();
}

/// A `docker save` style archive of one image (uncompressed layer tars).
pub fn docker_archive(img: &Image, layer_tars: &[Vec<u8>], tag: &str) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut add = |name: &str, data: &[u8]| {
        let mut h = header(tar::EntryType::Regular, 0o644, 0, 0, data.len() as u64);
        b.append_data(&mut h, name, data).unwrap();
    };
    let config_name = format!("{}.json", &img.id()[7..]);
    add(&config_name, &img.config.bytes);
    let mut layers = Vec::new();
    for (i, t) in layer_tars.iter().enumerate() {
        let name = format!("layer{i}/layer.tar");
        add(&name, t);
        layers.push(name);
    }
    let manifest = json!([{"Config": config_name, "RepoTags": [tag], "Layers": layers}]);
    add("manifest.json", &serde_json::to_vec(&manifest).unwrap());
    b.into_inner().unwrap()
}

/// The same image as Docker schema 2 (Docker media types for manifest, config and layers).
pub fn docker(img: &Image) -> Image {
    let config = Blob::new(
        img.config.bytes.clone(),
        "application/vnd.docker.container.image.v1+json",
    );
    let layers: Vec<Blob> = img
        .layers
        .iter()
        .map(|l| {
            Blob::new(
                l.bytes.clone(),
                "application/vnd.docker.image.rootfs.diff.tar.gzip",
            )
        })
        .collect();
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": config.descriptor(),
        "layers": layers.iter().map(Blob::descriptor).collect::<Vec<_>>(),
    });
    let manifest = Blob::new(
        serde_json::to_vec(&manifest).unwrap(),
        "application/vnd.docker.distribution.manifest.v2+json",
    );
    Image {
        config,
        layers,
        manifest,
    }
}

/// `len` bytes that gzip cannot shrink (so a layer's download takes as long as its size says).
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}
