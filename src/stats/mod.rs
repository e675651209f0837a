//! Resource statistics for pods (and, later, containers), as plain values the CRI adapter
//! encodes: a cgroup's cpu, memory and process count (read by libcgroups on v1, from the files
//! themselves on v2) and a network
//! namespace's interface counters (`/proc/<pid>/net/dev` of a process inside it).
//!
//! kubelet reads CPU as a rate (`usage_nano_cores`, for eviction and autoscaling), which needs
//! the previous sample: [`CpuRates`] keeps the last one per pod, as containerd does.

use std::collections::HashMap;
use std::sync::Mutex;

use libcgroups::stats::Stats;

/// Memory limits at or above this are "no limit" (cgroup v1 reports ~2^63 rounded to a page).
const UNLIMITED: u64 = 1 << 62;

/// One reading of a cgroup.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupSample {
    /// Nanoseconds since the epoch.
    pub timestamp: i64,
    /// Cumulative CPU time, nanoseconds.
    pub cpu_usage_ns: u64,
    /// CPU rate in nanocores since the previous sample; None for the first.
    pub cpu_nano_cores: Option<u64>,
    pub memory: Memory,
    pub processes: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Memory {
    /// Usage minus inactive file cache: what the kernel cannot easily reclaim.
    pub working_set: u64,
    /// The limit minus the working set; None without a limit.
    pub available: Option<u64>,
    pub usage: u64,
    /// Anonymous memory (and swap cache).
    pub rss: u64,
    pub page_faults: u64,
    pub major_page_faults: u64,
}

/// Counters of one network interface.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub rx_bytes: u64,
    pub rx_errors: u64,
    pub tx_bytes: u64,
    pub tx_errors: u64,
}

impl CgroupSample {
    /// Plain values from libcgroups' stats; keys differ between v1 (`total_*`, hierarchical)
    /// and v2 memory.stat.
    pub fn from_stats(stats: &Stats, timestamp: i64) -> CgroupSample {
        let m = &stats.memory;
        let key = |v1: &str, v2: &str| m.stats.get(v1).or_else(|| m.stats.get(v2)).copied();
        let inactive_file = key("total_inactive_file", "inactive_file").unwrap_or(0);
        let working_set = m.memory.usage.saturating_sub(inactive_file);
        let limit = m.memory.limit;
        CgroupSample {
            timestamp,
            cpu_usage_ns: stats.cpu.usage.usage_total,
            cpu_nano_cores: None,
            memory: Memory {
                working_set,
                available: (limit > 0 && limit < UNLIMITED)
                    .then(|| limit.saturating_sub(working_set)),
                usage: m.memory.usage,
                rss: key("total_rss", "anon").unwrap_or(0),
                page_faults: key("total_pgfault", "pgfault").unwrap_or(0),
                major_page_faults: key("total_pgmajfault", "pgmajfault").unwrap_or(0),
            },
            processes: stats.pids.current,
        }
    }
}

/// A cgroup v2 directory's sample from its own files (cpu.stat, memory.current, memory.max,
/// memory.stat, pids.current). libcgroups' v2 stats also read every other controller's files
/// and fail where one is not enabled: systemd enables no hugetlb in the slices it makes.
pub fn read_v2(dir: &std::path::Path, timestamp: i64) -> std::io::Result<CgroupSample> {
    let read = |file: &str| std::fs::read_to_string(dir.join(file));
    let number = |text: &str| text.trim().parse::<u64>().unwrap_or(0);
    let keyed = |text: &str, key: &str| {
        text.lines()
            .filter_map(|l| l.split_once(' '))
            .find(|(k, _)| *k == key)
            .map_or(0, |(_, v)| number(v))
    };
    let cpu = read("cpu.stat")?;
    let stat = read("memory.stat")?;
    let usage = number(&read("memory.current")?);
    // "max" is no limit, as is an unreadable file.
    let limit = read("memory.max")
        .ok()
        .and_then(|l| l.trim().parse::<u64>().ok())
        .unwrap_or(u64::MAX);
    let working_set = usage.saturating_sub(keyed(&stat, "inactive_file"));
    Ok(CgroupSample {
        timestamp,
        cpu_usage_ns: keyed(&cpu, "usage_usec").saturating_mul(1000),
        cpu_nano_cores: None,
        memory: Memory {
            working_set,
            available: (limit < UNLIMITED).then(|| limit.saturating_sub(working_set)),
            usage,
            rss: keyed(&stat, "anon"),
            page_faults: keyed(&stat, "pgfault"),
            major_page_faults: keyed(&stat, "pgmajfault"),
        },
        processes: number(&read("pids.current")?),
    })
}

/// The previous CPU reading per key (a pod id), to turn cumulative usage into a rate.
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
                rx_errors: f[2],
                tx_bytes: f[8],
                tx_errors: f[10],
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_files_make_a_sample() {
        let dir = tempfile::tempdir().unwrap();
        let w = |f: &str, t: &str| std::fs::write(dir.path().join(f), t).unwrap();
        w(
            "cpu.stat",
            "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n",
        );
        w("memory.current", "10000\n");
        w("memory.max", "max\n");
        w(
            "memory.stat",
            "anon 4000\nfile 5000\ninactive_file 3000\npgfault 7\npgmajfault 2\n",
        );
        w("pids.current", "3\n");
        let s = read_v2(dir.path(), 42).unwrap();
        assert_eq!(
            (s.timestamp, s.cpu_usage_ns, s.processes),
            (42, 1_500_000, 3)
        );
        let m = &s.memory;
        assert_eq!((m.usage, m.working_set, m.available), (10_000, 7000, None));
        assert_eq!((m.rss, m.page_faults, m.major_page_faults), (4000, 7, 2));
        w("memory.max", "20000\n");
        assert_eq!(
            read_v2(dir.path(), 0).unwrap().memory.available,
            Some(13_000)
        );
        // No hugetlb, io or cpuset file is needed; a missing cpu.stat is an error.
        std::fs::remove_file(dir.path().join("cpu.stat")).unwrap();
        assert!(read_v2(dir.path(), 0).is_err());
    }

    #[test]
    fn net_dev_counters_without_loopback() {
        let text = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     100       1    0    0    0     0          0         0      100       1    0    0    0     0       0          0
  eth0:    1234      10    2    0    0     0          0         0      567       5    3    0    0     0       0          0
";
        assert_eq!(
            parse_net_dev(text),
            [Interface {
                name: "eth0".into(),
                rx_bytes: 1234,
                rx_errors: 2,
                tx_bytes: 567,
                tx_errors: 3,
            }]
        );
    }

    #[test]
    fn memory_from_v1_and_v2_keys() {
        let mut s = Stats::default();
        s.memory.memory.usage = 1000;
        s.memory.memory.limit = u64::MAX - 4095;
        s.memory.stats = [("total_inactive_file", 300), ("total_rss", 500)]
            .map(|(k, v)| (k.to_owned(), v))
            .into();
        s.cpu.usage.usage_total = 42;
        s.pids.current = 3;
        let v1 = CgroupSample::from_stats(&s, 7);
        assert_eq!(
            (v1.memory.working_set, v1.memory.rss, v1.memory.available),
            (700, 500, None)
        );
        assert_eq!((v1.cpu_usage_ns, v1.processes, v1.timestamp), (42, 3, 7));
        s.memory.memory.limit = 2000;
        s.memory.stats = [("inactive_file", 1200), ("anon", 9)]
            .map(|(k, v)| (k.to_owned(), v))
            .into();
        let v2 = CgroupSample::from_stats(&s, 7);
        assert_eq!(
            (v2.memory.working_set, v2.memory.rss, v2.memory.available),
            (0, 9, Some(2000))
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
