//! Image benchmark against any CRI image endpoint (crust, containerd, ...).
//!
//! `crust-bench-images push --registry 127.0.0.1:PORT` builds and pushes the benchmark images
//! into a local registry: `bench/big:1`, about 50 MB in 5 gzip layers of incompressible files,
//! and `bench/small:0..99`, 100 one-layer images.
//!
//! `crust-bench-images run --endpoint unix:///sock --host HOST` then measures, through the CRI
//! ImageService of the endpoint: cold pulls of HOST/bench/big:1 (RemoveImage before each), warm
//! pulls (image present), and, with the 100 small images stored, ListImages and ImageStatus
//! latency. It prints one line per measurement with the median and p95.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use crust::cri::pb;
use crust::cri::pb::image_service_client::ImageServiceClient;
use sha2::Digest as _;
use tonic::transport::Channel;

#[derive(Parser)]
#[command(about = "Image pull / list / status benchmark for a CRI image endpoint")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Build and push the benchmark images into a registry (plain http).
    Push {
        #[arg(long)]
        registry: String,
    },
    /// Measure an endpoint.
    Run {
        /// unix:///path/to/cri.sock
        #[arg(long)]
        endpoint: String,
        /// Registry host the endpoint resolves bench images from (a mirror may stand behind it).
        #[arg(long)]
        host: String,
        /// A label for the output lines.
        #[arg(long, default_value = "runtime")]
        name: String,
        #[arg(long, default_value_t = 5)]
        cold: usize,
        #[arg(long, default_value_t = 10)]
        warm: usize,
        #[arg(long, default_value_t = 200)]
        queries: usize,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    match cli.command {
        Cmd::Push { registry } => rt.block_on(push_all(&registry)),
        Cmd::Run {
            endpoint,
            host,
            name,
            cold,
            warm,
            queries,
        } => rt.block_on(run(&endpoint, &host, &name, cold, warm, queries)),
    }
}

// ---------------------------------------------------------------- images

/// Deterministic incompressible bytes (xorshift), so every run pushes the same digests.
fn noise(seed: u64, len: usize) -> Vec<u8> {
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

fn digest(b: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(b)))
}

/// (compressed layer, diff id) of a layer with `files` files of `size` bytes under `dir`.
fn layer(dir: &str, files: usize, size: usize, seed: u64) -> anyhow::Result<(Vec<u8>, String)> {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_ustar();
    h.set_entry_type(tar::EntryType::Directory);
    h.set_mode(0o755);
    h.set_size(0);
    h.set_mtime(1_704_067_200);
    b.append_data(&mut h, dir, &[][..])?;
    for i in 0..files {
        let data = noise(seed * 1_000_003 + i as u64, size);
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        h.set_mtime(1_704_067_200);
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
        layers: Vec<(Vec<u8>, String)>,
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

async fn push_all(registry: &str) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let p = Pusher {
        client: reqwest::Client::new(),
        registry: registry.to_owned(),
    };
    // ~50 MB: 5 layers x 100 files x 100 kB, incompressible.
    let mut layers = Vec::new();
    for l in 0..5u64 {
        layers.push(layer(&format!("layer{l}"), 100, 100_000, l + 1)?);
    }
    let total: usize = layers.iter().map(|(b, _)| b.len()).sum();
    p.image("bench/big", "1", layers, "big").await?;
    let shared = layer("base", 4, 4096, 999)?;
    for i in 0..100 {
        p.image(
            "bench/small",
            &i.to_string(),
            vec![shared.clone()],
            &format!("small-{i}"),
        )
        .await?;
    }
    println!(
        "pushed bench/big:1 ({:.1} MB compressed) and bench/small:0..99 to {registry}",
        total as f64 / 1e6
    );
    Ok(())
}

// ---------------------------------------------------------------- measuring

async fn connect(endpoint: &str) -> anyhow::Result<ImageServiceClient<Channel>> {
    let path = endpoint
        .strip_prefix("unix://")
        .unwrap_or(endpoint)
        .to_owned();
    let ch = tonic::transport::Endpoint::try_from("http://[::]:50051")?
        .connect_with_connector(tower::service_fn(move |_| {
            let p = path.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(p).await?,
                ))
            }
        }))
        .await?;
    Ok(ImageServiceClient::new(ch).max_decoding_message_size(64 << 20))
}

fn spec(image: &str) -> Option<pb::ImageSpec> {
    Some(pb::ImageSpec {
        image: image.into(),
        ..Default::default()
    })
}

fn report(name: &str, what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let median = ms(samples[samples.len() / 2]);
    let p95 = ms(samples[((samples.len() * 95).div_ceil(100))
        .saturating_sub(1)
        .min(samples.len() - 1)]);
    println!(
        "{name:<12} {what:<28} n={:<4} median={median:>9.3} ms  p95={p95:>9.3} ms",
        samples.len()
    );
}

async fn pull(c: &mut ImageServiceClient<Channel>, image: &str) -> anyhow::Result<Duration> {
    let t = Instant::now();
    c.pull_image(pb::PullImageRequest {
        image: spec(image),
        ..Default::default()
    })
    .await
    .with_context(|| format!("pulling {image}"))?;
    Ok(t.elapsed())
}

async fn remove_all(c: &mut ImageServiceClient<Channel>) -> anyhow::Result<()> {
    let images = c
        .list_images(pb::ListImagesRequest::default())
        .await?
        .into_inner()
        .images;
    for i in images {
        c.remove_image(pb::RemoveImageRequest { image: spec(&i.id) })
            .await?;
    }
    Ok(())
}

async fn run(
    endpoint: &str,
    host: &str,
    name: &str,
    cold: usize,
    warm: usize,
    queries: usize,
) -> anyhow::Result<()> {
    let mut c = connect(endpoint).await?;
    let big = format!("{host}/bench/big:1");
    remove_all(&mut c).await?;
    let mut samples = Vec::new();
    for _ in 0..cold {
        c.remove_image(pb::RemoveImageRequest { image: spec(&big) })
            .await?;
        samples.push(pull(&mut c, &big).await?);
    }
    report(name, "cold pull 50MB/5 layers", samples);
    let mut samples = Vec::new();
    for _ in 0..warm {
        samples.push(pull(&mut c, &big).await?);
    }
    report(name, "warm pull (image present)", samples);
    remove_all(&mut c).await?;
    for i in 0..100 {
        pull(&mut c, &format!("{host}/bench/small:{i}")).await?;
    }
    let n = c
        .list_images(pb::ListImagesRequest::default())
        .await?
        .into_inner()
        .images
        .len();
    if n != 100 {
        bail!("expected 100 images stored, the endpoint lists {n}");
    }
    let mut samples = Vec::new();
    for _ in 0..queries {
        let t = Instant::now();
        c.list_images(pb::ListImagesRequest::default()).await?;
        samples.push(t.elapsed());
    }
    report(name, "ListImages (100 images)", samples);
    let mut samples = Vec::new();
    for i in 0..queries {
        let t = Instant::now();
        let r = c
            .image_status(pb::ImageStatusRequest {
                image: spec(&format!("{host}/bench/small:{}", i % 100)),
                verbose: false,
            })
            .await?;
        samples.push(t.elapsed());
        if r.into_inner().image.is_none() {
            bail!("ImageStatus found no image");
        }
    }
    report(name, "ImageStatus (100 images)", samples);
    remove_all(&mut c).await?;
    Ok(())
}
