//! What the benchmark clients share: percentiles, result lines, process memory.

#![allow(dead_code)]

use std::time::Duration;

use anyhow::Context;

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

pub fn report(label: &str, what: &str, samples: &[Duration]) {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    if ms.is_empty() {
        return;
    }
    println!(
        "{label:<12} {what:<34} n={:<4} median={:>8.2} ms  p95={:>8.2} ms",
        ms.len(),
        percentile(&ms, 0.5),
        percentile(&ms, 0.95)
    );
}

pub fn report_mem(label: &str, what: &str, kib: &[u64]) {
    let mut v: Vec<f64> = kib.iter().map(|k| *k as f64 / 1024.0).collect();
    v.sort_by(f64::total_cmp);
    println!(
        "{label:<12} {what:<34} n={:<4} median={:>8.2} MiB max={:>6.2} MiB",
        v.len(),
        percentile(&v, 0.5),
        v[v.len() - 1]
    );
}

pub fn rss_kib(pid: i32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .context("no VmRSS")
}

/// Resident memory of one or more processes, in KiB: RSS counts every page a process maps in
/// full (a page shared by ten processes is counted ten times), PSS divides each page among the
/// processes that map it, so PSS adds up to what the processes cost the machine.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Mem {
    pub rss: u64,
    pub pss: u64,
}

impl std::ops::Add for Mem {
    type Output = Mem;
    fn add(self, o: Mem) -> Mem {
        Mem {
            rss: self.rss + o.rss,
            pss: self.pss + o.pss,
        }
    }
}

impl Mem {
    /// What `self` holds beyond `base`, divided among `n` (the cost of each of n things).
    pub fn per(self, base: Mem, n: u64) -> Mem {
        Mem {
            rss: self.rss.saturating_sub(base.rss) / n.max(1),
            pss: self.pss.saturating_sub(base.pss) / n.max(1),
        }
    }
}

/// RSS and PSS of `pid`, from /proc/<pid>/smaps_rollup.
pub fn mem_kib(pid: i32) -> anyhow::Result<Mem> {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))?;
    let field = |name: &str| {
        rollup
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            .with_context(|| format!("no {name} in smaps_rollup of {pid}"))
    };
    Ok(Mem {
        rss: field("Rss:")?,
        pss: field("Pss:")?,
    })
}

/// Medians of RSS and PSS, in MiB.
pub fn report_mem_pss(label: &str, what: &str, samples: &[Mem]) {
    if samples.is_empty() {
        return;
    }
    let median = |f: fn(&Mem) -> u64| {
        let mut v: Vec<f64> = samples.iter().map(|m| f(m) as f64 / 1024.0).collect();
        v.sort_by(f64::total_cmp);
        percentile(&v, 0.5)
    };
    println!(
        "{label:<12} {what:<34} n={:<4} rss={:>7.2} MiB pss={:>7.2} MiB",
        samples.len(),
        median(|m| m.rss),
        median(|m| m.pss)
    );
}

/// One process as `runtime_processes` looks at it.
pub struct Proc {
    pub pid: i32,
    cmdline: String,
    cgroups: Vec<String>,
}

/// Every process now, with its command line and cgroups.
pub fn processes() -> Vec<Proc> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        out.push(Proc {
            pid,
            cmdline: String::from_utf8_lossy(&cmdline).into_owned(),
            cgroups: cgroup
                .lines()
                .filter_map(|l| Some(l.splitn(3, ':').nth(2)?.to_owned()))
                .collect(),
        });
    }
    out
}

/// The runtime's own processes for pod `id`, not its containers' workloads: those naming the pod
/// in their command line (crust's monitor; containerd's shim) or sitting in a cgroup named
/// after the pod (containerd's pause, `.../<id>` or `...-<id>.scope`; crust's monitor and pod
/// init, `.../monitors/<id>`). A container's cgroup is below the pod's and named after the
/// container, so its processes are not counted.
pub fn runtime_processes<'a>(all: &'a [Proc], id: &'a str) -> impl Iterator<Item = i32> + 'a {
    let own = move |path: &str| {
        let path = path.strip_suffix(".scope").unwrap_or(path);
        path.ends_with(id)
    };
    all.iter()
        .filter(move |p| p.cmdline.contains(id) || p.cgroups.iter().any(|c| own(c)))
        .map(|p| p.pid)
}

/// RSS and PSS of the runtime's own processes for pod `id` (see `runtime_processes`).
pub fn pod_mem_kib(all: &[Proc], id: &str) -> Mem {
    runtime_processes(all, id)
        .filter_map(|pid| mem_kib(pid).ok())
        .fold(Mem::default(), |a, b| a + b)
}

/// Throughputs of `samples` moving `bytes` each; the median's time against `baseline`'s median
/// time (how many times longer the same transfer took), when there is one.
pub fn report_rate(
    label: &str,
    what: &str,
    bytes: usize,
    samples: &[Duration],
    baseline: &[Duration],
) {
    let rates = |s: &[Duration]| {
        let mut v: Vec<f64> = s
            .iter()
            .map(|d| bytes as f64 / (1 << 20) as f64 / d.as_secs_f64())
            .collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let v = rates(samples);
    if v.is_empty() {
        return;
    }
    let median = percentile(&v, 0.5);
    let ratio = match rates(baseline) {
        b if b.is_empty() => String::new(),
        b => format!(
            "  {:.2}x the plain copy's time",
            percentile(&b, 0.5) / median
        ),
    };
    println!(
        "{label:<12} {what:<34} n={:<4} median={median:>8.1} MiB/s min={:>7.1} MiB/s{ratio}",
        v.len(),
        v[0]
    );
}
