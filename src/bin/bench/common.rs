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

/// RSS of every process whose command line or cgroup names the sandbox.
pub fn pod_rss_kib(id: &str) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(id) || cgroup.contains(id) {
            total += rss_kib(pid).unwrap_or(0);
        }
    }
    total
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
