//! The benchmark images built into tar+gzip layers and pushed into a registry (plain http),
//! each only when the registry does not hold it already.

use std::io::Write;
use std::time::Instant;

use anyhow::{Context, bail};
use sha2::Digest as _;

use crate::image_content::{Kind, Rng, content, noise};

/// Writes through to `inner`, hashing what it writes: the tar stream's sha256 is its diff id.
struct Hashing<W> {
    inner: W,
    hash: sha2::Sha256,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(b)?;
        self.hash.update(&b[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn header(kind: tar::EntryType, mode: u32, size: usize) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size as u64);
    h.set_mtime(1_704_067_200);
    h
}

/// (compressed layer, diff id) of a layer of about `bytes` bytes of files under `dir`, as a real
/// image's are: most files small (a few kB), some of tens of kB, a few of a MB or two, in
/// directories of 100; their kinds mixed as in [`Kind`]. gzip at its default level, as images are
/// built.
pub fn mixed_layer(dir: &str, bytes: usize, seed: u64) -> anyhow::Result<Layer> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut b = tar::Builder::new(Hashing {
        inner: gz,
        hash: sha2::Sha256::new(),
    });
    let mut r = Rng::new(seed);
    let (mut written, mut i) = (0, 0);
    while written < bytes {
        if i % 100 == 0 {
            let mut h = header(tar::EntryType::Directory, 0o755, 0);
            b.append_data(&mut h, format!("{dir}/d{:03}", i / 100), &[][..])?;
        }
        let size = match r.below(100, false) {
            0..70 => 256 + r.below(8 << 10, false),
            70..95 => (8 << 10) + r.below(120 << 10, false),
            _ => (128 << 10) + r.below(2 << 20, false),
        }
        .min(bytes - written);
        let kind = match r.below(100, false) {
            0..45 => Kind::Text,
            45..90 => Kind::Code,
            _ => Kind::Packed,
        };
        let data = content(kind, &mut r, size);
        let mut h = header(tar::EntryType::Regular, 0o644, size);
        b.append_data(&mut h, format!("{dir}/d{:03}/f{i:05}", i / 100), &data[..])?;
        written += size;
        i += 1;
    }
    let h = b.into_inner()?;
    Ok((
        h.inner.finish()?,
        format!("sha256:{}", hex::encode(h.hash.finalize())),
    ))
}

/// A built layer: its compressed bytes and its diff id.
pub type Layer = (Vec<u8>, String);

fn digest(b: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(b)))
}

/// (compressed layer, diff id) of a layer with `files` files of `size` bytes under `dir`.
fn layer(dir: &str, files: usize, size: usize, seed: u64) -> anyhow::Result<Layer> {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = header(tar::EntryType::Directory, 0o755, 0);
    b.append_data(&mut h, dir, &[][..])?;
    for i in 0..files {
        let data = noise(seed * 1_000_003 + i as u64, size);
        let mut h = header(tar::EntryType::Regular, 0o644, data.len());
        b.append_data(&mut h, format!("{dir}/f{i:04}"), &data[..])?;
    }
    let tar = b.into_inner()?;
    let diff = digest(&tar);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar)?;
    Ok((gz.finish()?, diff))
}

struct Pusher {
    client: reqwest::Client,
    registry: String,
}

impl Pusher {
    /// The layers' count and compressed size of repo:tag, if the registry holds it.
    async fn held(&self, repo: &str, tag: &str) -> anyhow::Result<Option<(usize, u64)>> {
        let r = self
            .client
            .get(format!(
                "http://{}/v2/{repo}/manifests/{tag}",
                self.registry
            ))
            .header("accept", "application/vnd.oci.image.manifest.v1+json")
            .send()
            .await?;
        if !r.status().is_success() {
            return Ok(None);
        }
        let m: serde_json::Value = r.json().await?;
        let layers = m["layers"]
            .as_array()
            .context("a manifest without layers")?;
        let size = layers.iter().filter_map(|l| l["size"].as_u64()).sum();
        Ok(Some((layers.len(), size)))
    }

    async fn blob(&self, repo: &str, bytes: Vec<u8>) -> anyhow::Result<String> {
        let d = digest(&bytes);
        let head = self
            .client
            .head(format!("http://{}/v2/{repo}/blobs/{d}", self.registry))
            .send()
            .await?;
        if head.status().is_success() {
            return Ok(d);
        }
        let r = self
            .client
            .post(format!("http://{}/v2/{repo}/blobs/uploads/", self.registry))
            .send()
            .await?;
        let loc = r
            .headers()
            .get("location")
            .context("no upload location")?
            .to_str()?
            .to_owned();
        let loc = if loc.starts_with("http") {
            loc
        } else {
            format!("http://{}{loc}", self.registry)
        };
        let sep = if loc.contains('?') { '&' } else { '?' };
        let r = self
            .client
            .put(format!("{loc}{sep}digest={d}"))
            .body(bytes)
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("uploading {d}: {}", r.status());
        }
        Ok(d)
    }

    async fn image(
        &self,
        repo: &str,
        tag: &str,
        layers: Vec<Layer>,
        label: &str,
    ) -> anyhow::Result<()> {
        let mut descs = Vec::new();
        let mut diffs = Vec::new();
        for (bytes, diff) in layers {
            let size = bytes.len();
            let d = self.blob(repo, bytes).await?;
            descs.push(serde_json::json!({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": d, "size": size}));
            diffs.push(diff);
        }
        let config = serde_json::json!({
            "architecture": "amd64", "os": "linux",
            "config": {"Cmd": ["sh"], "Labels": {"bench": label}},
            "rootfs": {"type": "layers", "diff_ids": diffs},
        });
        let cbytes = serde_json::to_vec(&config)?;
        let csize = cbytes.len();
        let cd = self.blob(repo, cbytes).await?;
        let manifest = serde_json::json!({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": csize},
            "layers": descs,
        });
        let r = self
            .client
            .put(format!(
                "http://{}/v2/{repo}/manifests/{tag}",
                self.registry
            ))
            .header("content-type", "application/vnd.oci.image.manifest.v1+json")
            .body(serde_json::to_vec(&manifest)?)
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("pushing {repo}:{tag}: {}", r.status());
        }
        Ok(())
    }
}

/// The 500 MB images: (repository, layers). Their tag names the generation of their content:
/// change [`mixed_layer`] or [`content`] and it must change too, or a kept registry serves the
/// old bytes.
pub const LARGE: [(&str, usize); 2] = [("bench/large10", 10), ("bench/large1", 1)];
pub const LARGE_TAG: &str = "1";
const LARGE_BYTES: usize = 500_000_000;

/// Builds the layers of a large image, the layers shared out between two threads.
fn large_layers(repo: &str, count: usize) -> anyhow::Result<Vec<Layer>> {
    let seed = if count == 1 { 1_000 } else { 2_000 };
    let one = |l: usize| mixed_layer(&format!("layer{l}"), LARGE_BYTES / count, seed + l as u64);
    let halves: Vec<anyhow::Result<Vec<(usize, Layer)>>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|w| s.spawn(move || (w..count).step_by(2).map(|l| Ok((l, one(l)?))).collect()))
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a layer builder panicked"))
            .collect()
    });
    let mut layers = Vec::new();
    for h in halves {
        layers.extend(h.with_context(|| format!("building {repo}"))?);
    }
    layers.sort_by_key(|(l, _)| *l);
    Ok(layers.into_iter().map(|(_, layer)| layer).collect())
}

pub async fn push_all(registry: &str) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let p = Pusher {
        client: reqwest::Client::new(),
        registry: registry.to_owned(),
    };
    if p.held("bench/small", "99").await?.is_none() {
        let shared = layer("base", 4, 4096, 999)?;
        for i in 0..100 {
            let label = format!("small-{i}");
            p.image("bench/small", &i.to_string(), vec![shared.clone()], &label)
                .await?;
        }
    }
    if p.held("bench/big", "1").await?.is_none() {
        // ~50 MB: 5 layers x 100 files x 100 kB, incompressible.
        let mut layers = Vec::new();
        for l in 0..5u64 {
            layers.push(layer(&format!("layer{l}"), 100, 100_000, l + 1)?);
        }
        p.image("bench/big", "1", layers, "big").await?;
    }
    for (repo, count) in LARGE {
        if p.held(repo, LARGE_TAG).await?.is_none() {
            let t = Instant::now();
            let layers = tokio::task::block_in_place(|| large_layers(repo, count))?;
            p.image(repo, LARGE_TAG, layers, repo).await?;
            println!(
                "built {repo}:{LARGE_TAG} in {:.0} s",
                t.elapsed().as_secs_f64()
            );
        }
    }
    let mut held = Vec::new();
    for (repo, tag) in [("bench/big", "1")]
        .into_iter()
        .chain(LARGE.map(|(r, _)| (r, LARGE_TAG)))
    {
        let (layers, size) = p.held(repo, tag).await?.context("an image not pushed")?;
        let s = if layers == 1 { "" } else { "s" };
        let mb = size as f64 / 1e6;
        held.push(format!(
            "{repo}:{tag} ({layers} layer{s}, {mb:.1} MB compressed)"
        ));
    }
    println!("{registry} holds {} and bench/small:0..99", held.join(", "));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image_content::{Kind, Rng, content};

    fn ratio(data: &[u8]) -> f64 {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(data).unwrap();
        data.len() as f64 / gz.finish().unwrap().len() as f64
    }

    #[test]
    fn mixed_content_compresses_like_an_image() {
        let text = ratio(&content(Kind::Text, &mut Rng::new(5), 2 << 20));
        let code = ratio(&content(Kind::Code, &mut Rng::new(5), 2 << 20));
        let packed = ratio(&content(Kind::Packed, &mut Rng::new(5), 1 << 20));
        assert!((3.0..4.5).contains(&text), "text {text:.2}");
        assert!((2.0..3.0).contains(&code), "code {code:.2}");
        assert!(packed < 1.01, "packed {packed:.2}");
        let (gz, _) = mixed_layer("x", 16 << 20, 3).unwrap();
        let mixed = (16 << 20) as f64 / gz.len() as f64;
        assert!((2.2..3.2).contains(&mixed), "mixed {mixed:.2}");
    }

    #[test]
    fn layers_are_deterministic() {
        assert_eq!(
            mixed_layer("x", 1 << 20, 7).unwrap(),
            mixed_layer("x", 1 << 20, 7).unwrap()
        );
    }
}
