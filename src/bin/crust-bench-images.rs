//! Image benchmark against any CRI image endpoint (crust, containerd, ...).
//!
//! `crust-bench-images push --registry 127.0.0.1:PORT` builds and pushes the benchmark images
//! into a local registry: `bench/big:1`, about 50 MB in 5 gzip layers of incompressible files;
//! `bench/large10:1` and `bench/large1:1`, about 500 MB of files that compress like a real
//! image's (text, machine code, already compressed data: see [`Kind`]) in 10 layers and in one;
//! and `bench/small:0..99`, 100 one-layer images. Every image is deterministic (the same digests
//! on every machine and run), and one the registry already holds is not built again, so a
//! registry kept between runs is a cache of the slow ones.
//!
//! `crust-bench-images run --endpoint unix:///sock --host HOST` then measures, through the CRI
//! ImageService of the endpoint: cold pulls of HOST/bench/big:1 (RemoveImage before each), warm
//! pulls (image present), cold pulls of the two 500 MB images, and, with the 100 small images
//! stored, ListImages and ImageStatus latency. It prints one line per measurement with the median
//! and p95, and with `--record FILE` appends each median to FILE (runtime, measurement, n,
//! median, unit; tab-separated), where the bench script adds its memory figures.
//!
//! `crust-bench-images table --record FILE` prints such a file as a markdown table: a row per
//! measurement, a column per runtime in the order they were recorded, and the first runtime's
//! ratio to each of the others.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
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
        /// Cold pulls of each 500 MB image (0 leaves them out).
        #[arg(long, default_value_t = 3)]
        big: usize,
        /// Append each median to this file (tab-separated), for `table`.
        #[arg(long)]
        record: Option<PathBuf>,
    },
    /// Print a file of medians recorded by `run` as a markdown table with ratios.
    Table {
        #[arg(long)]
        record: PathBuf,
    },
}

/// How many of each measurement a run takes.
struct Counts {
    cold: usize,
    warm: usize,
    queries: usize,
    big: usize,
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
            big,
            record,
        } => {
            let out = Report { name, record };
            let n = Counts {
                cold,
                warm,
                queries,
                big,
            };
            rt.block_on(run(&endpoint, &host, &out, &n))
        }
        Cmd::Table { record } => table(&record),
    }
}

// ---------------------------------------------------------------- images

/// A deterministic xorshift generator: every run builds the same bytes, so the same digests.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n`, skewed towards 0 when `skew` (a word's frequency in a text).
    fn below(&mut self, n: usize, skew: bool) -> usize {
        let a = (self.next() % n as u64) as usize;
        if skew {
            a * (self.next() % n as u64) as usize / n
        } else {
            a
        }
    }
}

/// Deterministic incompressible bytes.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut r = Rng::new(seed);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&r.next().to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The kinds of file a real image holds, by how they compress (gzip's default level, this mix
/// as a whole about 2.5 to 1, as a distribution image's layers do): sources, scripts, configs and
/// documents; machine code and libraries; data that is compressed already (archives, images).
#[derive(Clone, Copy)]
enum Kind {
    Text,
    Code,
    Packed,
}

/// Words of sources and configuration files, the commoner first.
const WORDS: &[&str] = &[
    "the",
    "=",
    "if",
    "return",
    "self",
    "0",
    "1",
    "in",
    "for",
    "def",
    "import",
    "from",
    "None",
    "const",
    "int",
    "char",
    "void",
    "static",
    "struct",
    "else",
    "while",
    "true",
    "false",
    "not",
    "and",
    "or",
    "is",
    "a",
    "to",
    "of",
    "this",
    "new",
    "string",
    "value",
    "name",
    "type",
    "data",
    "size",
    "len",
    "error",
    "err",
    "nil",
    "func",
    "package",
    "class",
    "public",
    "private",
    "use",
    "let",
    "mut",
    "fn",
    "impl",
    "match",
    "Some",
    "Ok",
    "Err",
    "config",
    "path",
    "file",
    "buffer",
    "index",
    "count",
    "result",
    "object",
    "list",
    "dict",
    "key",
    "items",
    "args",
    "kwargs",
    "options",
    "default",
    "version",
    "module",
    "export",
    "require",
    "function",
    "var",
    "await",
    "async",
    "try",
    "except",
    "raise",
    "finally",
    "with",
    "as",
    "lambda",
    "yield",
    "assert",
    "unsigned",
    "long",
    "double",
    "float",
    "bool",
    "uint32_t",
    "size_t",
    "NULL",
    "sizeof",
    "include",
    "define",
    "endif",
    "ifdef",
    "http",
    "https",
    "localhost",
    "usr",
    "lib",
    "share",
    "bin",
    "etc",
    "license",
    "copyright",
    "software",
    "without",
    "warranty",
    "GNU",
    "General",
    "Public",
    "License",
    "distributed",
    "permission",
    "notice",
    "provided",
    "conditions",
];
const PUNCT: &[&str] = &[
    " ", " ", " ", ", ", "(", ")", ".", ": ", " = ", "; ", "_", "->", "[", "]",
];

/// `len` bytes of a file of this kind.
fn content(kind: Kind, r: &mut Rng, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 64);
    match kind {
        Kind::Text => {
            // Lines of skewed words; a third of them repeat one of the last 32 lines, as sources
            // and configuration files repeat their phrases.
            let mut lines: Vec<(usize, usize)> = Vec::new();
            while out.len() < len {
                let start = out.len();
                if lines.len() > 32 && r.below(3, false) == 0 {
                    let (a, b) = lines[lines.len() - 1 - r.below(32, false)];
                    out.extend_from_within(a..b);
                } else {
                    out.extend(std::iter::repeat_n(b' ', 4 * r.below(4, true)));
                    for _ in 0..3 + r.below(8, false) {
                        out.extend_from_slice(WORDS[r.below(WORDS.len(), true)].as_bytes());
                        out.extend_from_slice(PUNCT[r.below(PUNCT.len(), true)].as_bytes());
                    }
                    out.push(b'\n');
                }
                lines.push((start, out.len()));
            }
        }
        Kind::Code => {
            // Instructions: an opcode of a small, skewed set, then most often an operand (a
            // register, a small offset, one of a few addresses); functions padded to 16 bytes;
            // now and then a sequence of the last 2 kB again, as compilers repeat theirs.
            while out.len() < len {
                if out.len() > 2048 && r.below(8, false) == 0 {
                    let from = out.len() - 2048 + r.below(2000, false);
                    out.extend_from_within(from..from + 8 + r.below(40, false));
                    continue;
                }
                let op = r.below(48, true) as u8;
                out.extend_from_slice(&[0x40 | (op & 0x0f), 0x80 + op]);
                match r.below(8, false) {
                    0 | 1 => out.push(r.below(16, true) as u8),
                    2 | 3 => out.push((r.below(32, true) * 8) as u8),
                    4 => out.extend_from_slice(
                        &(0x0040_1000 + 16 * r.below(512, true) as u32).to_le_bytes(),
                    ),
                    5 => out.extend_from_slice(&(r.next() as u16).to_le_bytes()),
                    6 if r.below(4, false) == 0 => {
                        out.push(0xc3);
                        out.extend(std::iter::repeat_n(0xcc, 15 - out.len() % 16));
                    }
                    _ => {}
                }
            }
        }
        Kind::Packed => {
            while out.len() < len {
                out.extend_from_slice(&r.next().to_le_bytes());
            }
        }
    }
    out.truncate(len);
    out
}

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
fn mixed_layer(dir: &str, bytes: usize, seed: u64) -> anyhow::Result<Layer> {
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
type Layer = (Vec<u8>, String);

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
const LARGE: [(&str, usize); 2] = [("bench/large10", 10), ("bench/large1", 1)];
const LARGE_TAG: &str = "1";
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

async fn push_all(registry: &str) -> anyhow::Result<()> {
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

/// Where a run's figures go: a line each on stdout, and the medians to the record file if any.
struct Report {
    name: String,
    record: Option<PathBuf>,
}

impl Report {
    fn add(&self, what: &str, mut samples: Vec<Duration>) -> anyhow::Result<()> {
        samples.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let median = ms(samples[samples.len() / 2]);
        let p95 = ms(samples[((samples.len() * 95).div_ceil(100))
            .saturating_sub(1)
            .min(samples.len() - 1)]);
        let (name, n) = (&self.name, samples.len());
        println!("{name:<18} {what:<28} n={n:<4} median={median:>9.3} ms  p95={p95:>9.3} ms");
        if let Some(path) = &self.record {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("opening {}", path.display()))?;
            writeln!(f, "{name}\t{what}\t{n}\t{median:.3}\tms")?;
        }
        Ok(())
    }
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

/// Cold pulls of `image`, RemoveImage before each.
async fn cold_pulls(
    c: &mut ImageServiceClient<Channel>,
    image: &str,
    n: usize,
) -> anyhow::Result<Vec<Duration>> {
    let mut samples = Vec::new();
    for _ in 0..n {
        c.remove_image(pb::RemoveImageRequest { image: spec(image) })
            .await?;
        samples.push(pull(c, image).await?);
    }
    Ok(samples)
}

async fn run(endpoint: &str, host: &str, out: &Report, n: &Counts) -> anyhow::Result<()> {
    let mut c = connect(endpoint).await?;
    let big = format!("{host}/bench/big:1");
    remove_all(&mut c).await?;
    out.add(
        "cold pull 50MB/5 layers",
        cold_pulls(&mut c, &big, n.cold).await?,
    )?;
    let mut samples = Vec::new();
    for _ in 0..n.warm {
        samples.push(pull(&mut c, &big).await?);
    }
    out.add("warm pull (image present)", samples)?;
    if n.big > 0 {
        for (repo, layers) in LARGE {
            remove_all(&mut c).await?;
            let image = format!("{host}/{repo}:{LARGE_TAG}");
            let s = if layers == 1 { "" } else { "s" };
            let what = format!("cold pull 500MB/{layers} layer{s}");
            out.add(&what, cold_pulls(&mut c, &image, n.big).await?)?;
        }
    }
    remove_all(&mut c).await?;
    for i in 0..100 {
        pull(&mut c, &format!("{host}/bench/small:{i}")).await?;
    }
    let stored = c
        .list_images(pb::ListImagesRequest::default())
        .await?
        .into_inner()
        .images
        .len();
    if stored != 100 {
        bail!("expected 100 images stored, the endpoint lists {stored}");
    }
    let mut samples = Vec::new();
    for _ in 0..n.queries {
        let t = Instant::now();
        c.list_images(pb::ListImagesRequest::default()).await?;
        samples.push(t.elapsed());
    }
    out.add("ListImages (100 images)", samples)?;
    let mut samples = Vec::new();
    for i in 0..n.queries {
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
    out.add("ImageStatus (100 images)", samples)?;
    remove_all(&mut c).await?;
    Ok(())
}

// ---------------------------------------------------------------- the table

/// One recorded median.
struct Figure {
    n: String,
    median: f64,
    unit: String,
}

/// Prints the record as a markdown table: measurements as rows in their first order, runtimes
/// as columns, the first runtime's ratio to each other one after that one's column.
fn table(record: &Path) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(record).with_context(|| format!("reading {}", record.display()))?;
    let (mut runtimes, mut rows) = (Vec::<String>::new(), Vec::<String>::new());
    let mut figures = BTreeMap::<(String, String), Figure>::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let f: Vec<&str> = line.split('\t').collect();
        let [runtime, what, n, median, unit] = f[..] else {
            bail!("{}: not 5 fields: {line:?}", record.display());
        };
        if !runtimes.iter().any(|r| r == runtime) {
            runtimes.push(runtime.to_owned());
        }
        if !rows.iter().any(|r| r == what) {
            rows.push(what.to_owned());
        }
        let median = median
            .parse()
            .with_context(|| format!("a median in {line:?}"))?;
        let (n, unit) = (n.to_owned(), unit.to_owned());
        figures.insert(
            (runtime.to_owned(), what.to_owned()),
            Figure { n, median, unit },
        );
    }
    let Some((first, others)) = runtimes.split_first() else {
        bail!("{}: no figures", record.display());
    };
    let mut head = format!("| | n | {first} |");
    for o in others {
        head += &format!(" {o} | {first}/{o} |");
    }
    println!("{head}\n|{}", "---|".repeat(3 + 2 * others.len()));
    for what in &rows {
        let get = |r: &String| figures.get(&(r.clone(), what.clone()));
        let cell =
            |f: Option<&Figure>| f.map_or("-".into(), |f| format!("{} {}", num(f.median), f.unit));
        let n = runtimes.iter().find_map(&get).map_or("", |f| f.n.as_str());
        let mut line = format!("| {what} | {n} | {} |", cell(get(first)));
        for o in others {
            let ratio = match (get(first), get(o)) {
                (Some(a), Some(b)) if b.median > 0.0 => format!("{:.2}x", a.median / b.median),
                _ => "-".into(),
            };
            line += &format!(" {} | {ratio} |", cell(get(o)));
        }
        println!("{line}");
    }
    Ok(())
}

/// A figure with three significant digits or more (1084, 484, 21.7, 0.94).
fn num(v: f64) -> String {
    match v {
        v if v >= 100.0 => format!("{v:.0}"),
        v if v >= 10.0 => format!("{v:.1}"),
        _ => format!("{v:.2}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
