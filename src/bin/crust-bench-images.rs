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

#[path = "bench/image_content.rs"]
mod image_content;
#[path = "bench/image_push.rs"]
mod image_push;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use crust::cri::pb;
use crust::cri::pb::image_service_client::ImageServiceClient;
use image_push::{LARGE, LARGE_TAG};
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
        Cmd::Push { registry } => rt.block_on(image_push::push_all(&registry)),
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
