//! Resource statistics for pods and containers, as plain values the CRI adapter encodes: a
//! cgroup's cpu, memory, swap, pressure and task count (`cgroup.rs`, read straight from the
//! cgroup files, v1 or v2), a network namespace's interface counters (`/proc/<pid>/net/dev` of
//! a process inside it), the disk usage of a directory tree and its filesystem (`disk.rs`), open
//! files of processes (`process.rs`), and the cAdvisor-named metrics kubelet serves on
//! `/metrics/cadvisor` (`cadvisor.rs`).
//!
//! kubelet reads CPU as a rate (`usage_nano_cores`, for eviction and autoscaling), which needs
//! the previous sample: [`CpuRates`] keeps the last one per pod or container, as containerd does.

pub mod cadvisor;
mod cgroup;
mod disk;
mod process;

use std::collections::HashMap;
use std::sync::Mutex;

pub use cgroup::{CgroupDirs, Detail, oom_kills, read as read_cgroup, tasks};
pub use disk::{
    Filesystem, block_device_name, disk_usage, filesystem, filesystem_id, filesystem_usage,
};
pub use process::{OpenFiles, open_files, open_files_limit};

/// One reading of a cgroup.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CgroupSample {
    /// Nanoseconds since the epoch.
    pub timestamp: i64,
    /// Cumulative CPU time, nanoseconds.
    pub cpu_usage_ns: u64,
    /// CPU rate in nanocores since the previous sample; None for the first.
    pub cpu_nano_cores: Option<u64>,
    pub memory: Memory,
    /// None without swap accounting.
    pub swap: Option<Swap>,
    /// Tasks (threads) in the cgroup, `pids.current`: read for pods and metrics only.
    pub processes: u64,
    /// Pressure stall information (cgroup v2 with PSI only).
    pub pressure: Option<Pressure>,
    /// What only the metrics need ([`Detail::Metrics`]).
    pub extra: Option<Box<Extended>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Memory {
    /// Usage minus inactive file cache: what the kernel cannot easily reclaim.
    pub working_set: u64,
    /// The limit minus the working set; None without a limit.
    pub available: Option<u64>,
    /// The effective limit (on v1 the lowest of the cgroup's and its ancestors'); None: none.
    pub limit: Option<u64>,
    pub usage: u64,
    /// Anonymous memory (and swap cache).
    pub rss: u64,
    pub page_faults: u64,
    pub major_page_faults: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Swap {
    pub usage: u64,
    /// The swap limit minus the usage; None without a limit.
    pub available: Option<u64>,
}

/// Pressure stall information of a cgroup's cpu, memory and io (each None when absent).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pressure {
    pub cpu: Option<Psi>,
    pub memory: Option<Psi>,
    pub io: Option<Psi>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Psi {
    /// Some task stalled.
    pub some: PsiData,
    /// Every task stalled.
    pub full: PsiData,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct PsiData {
    /// Cumulative stall time, microseconds.
    pub total_us: u64,
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
}

/// The rest of a cgroup's statistics, for the metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extended {
    pub cpu_user_ns: u64,
    pub cpu_system_ns: u64,
    pub cfs_periods: u64,
    pub cfs_throttled_periods: u64,
    pub cfs_throttled_ns: u64,
    pub cache: u64,
    pub mapped_file: u64,
    pub kernel: u64,
    /// The highest usage seen (v1; v2 kernels with `memory.peak`).
    pub max_usage: Option<u64>,
    /// Times the usage hit the limit (v2: `max` events).
    pub failcnt: u64,
    /// `memory.events`' `high` (throttled over memory.high) and `max` counts; v2 only, 0 on
    /// v1 as in cAdvisor.
    pub events_high: u64,
    pub events_max: u64,
    pub active_file: u64,
    pub inactive_file: u64,
    /// Page faults of this cgroup alone (v1; on v2 the same as the hierarchy's).
    pub own_page_faults: u64,
    pub own_major_page_faults: u64,
    pub oom_kills: u64,
    /// `pids.max`; None without a limit.
    pub threads_max: Option<u64>,
    /// The processes (thread group leaders) in the cgroup.
    pub procs: Vec<i32>,
    pub io: Vec<DeviceIo>,
    pub spec: Spec,
}

/// Block I/O of a cgroup on one device.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceIo {
    pub major: u64,
    pub minor: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub reads: u64,
    pub writes: u64,
}

/// The cgroup's limits as set (cAdvisor's `container_spec_*`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spec {
    /// CFS period, microseconds.
    pub cpu_period: u64,
    /// CFS quota, microseconds; None: unlimited.
    pub cpu_quota: Option<u64>,
    /// v1 shares (v2's weight converted).
    pub cpu_shares: u64,
    pub memory_limit: Option<u64>,
    pub memory_reservation: Option<u64>,
    /// Memory and swap together, as v1's memsw limit.
    pub swap_limit: Option<u64>,
}

/// Counters of one network interface.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub rx_errors: u64,
    pub rx_dropped: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_errors: u64,
    pub tx_dropped: u64,
}

/// The previous CPU reading per key (a pod or container id), to turn cumulative usage into a
/// rate.
#[derive(Debug, Default)]
pub struct CpuRates {
    last: Mutex<HashMap<String, (i64, u64)>>,
}

impl CpuRates {
    /// Records `sample` under `key` and fills in its rate since the previous one.
    pub fn rate(&self, key: &str, sample: &mut CgroupSample) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let now = (sample.timestamp, sample.cpu_usage_ns);
        if let Some((t0, u0)) = last.insert(key.to_owned(), now) {
            let (dt, du) = (now.0 - t0, now.1.checked_sub(u0));
            if let (true, Some(du)) = (dt > 0, du) {
                sample.cpu_nano_cores = Some((u128::from(du) * 1_000_000_000 / dt as u128) as u64);
            }
        }
    }

    /// Forgets `key` (its pod is gone).
    pub fn forget(&self, key: &str) {
        self.last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    /// Forgets every key `keep` refuses (containers removed since the last listing).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|k, _| keep(k));
    }
}

/// Interface counters of the network namespace `pid` is in, loopback left out.
pub fn interfaces(pid: i32) -> std::io::Result<Vec<Interface>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/net/dev"))?;
    Ok(parse_net_dev(&text))
}

/// Parses `/proc/net/dev`: two header lines, then `name: rx(8 fields) tx(8 fields)`.
fn parse_net_dev(text: &str) -> Vec<Interface> {
    text.lines()
        .skip(2)
        .filter_map(|line| {
            let (name, counters) = line.split_once(':')?;
            let f: Vec<u64> = counters
                .split_whitespace()
                .map(|v| v.parse().unwrap_or(0))
                .collect();
            let name = name.trim();
            (f.len() >= 16 && name != "lo").then(|| Interface {
                name: name.to_owned(),
                rx_bytes: f[0],
                rx_packets: f[1],
                rx_errors: f[2],
                rx_dropped: f[3],
                tx_bytes: f[8],
                tx_packets: f[9],
                tx_errors: f[10],
                tx_dropped: f[11],
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn net_dev_counters_without_loopback() {
        let text = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     100       1    0    0    0     0          0         0      100       1    0    0    0     0       0          0
  eth0:    1234      10    2    1    0     0          0         0      567       5    3    4    0     0       0          0
";
        assert_eq!(
            parse_net_dev(text),
            [Interface {
                name: "eth0".into(),
                rx_bytes: 1234,
                rx_packets: 10,
                rx_errors: 2,
                rx_dropped: 1,
                tx_bytes: 567,
                tx_packets: 5,
                tx_errors: 3,
                tx_dropped: 4,
            }]
        );
    }

    #[test]
    fn cpu_rate_from_the_previous_sample() {
        let rates = CpuRates::default();
        let sample = |timestamp, cpu_usage_ns| CgroupSample {
            timestamp,
            cpu_usage_ns,
            ..Default::default()
        };
        let mut a = sample(1_000_000_000, 5_000_000);
        rates.rate("p", &mut a);
        assert_eq!(a.cpu_nano_cores, None, "no rate from one sample");
        let mut b = sample(1_500_000_000, 255_000_000);
        rates.rate("p", &mut b);
        assert_eq!(b.cpu_nano_cores, Some(500_000_000), "half a core");
        rates.forget("p");
        let mut c = sample(2_000_000_000, 300_000_000);
        rates.rate("p", &mut c);
        assert_eq!(c.cpu_nano_cores, None);
    }
}
