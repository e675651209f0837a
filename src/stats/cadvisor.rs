//! The cAdvisor-named series kubelet serves on `/metrics/cadvisor` when it takes them from the
//! runtime (`PodAndContainerStatsFromCRI`): the descriptors ListMetricDescriptors answers, and the
//! series of one pod or container cgroup ListPodSandboxMetrics answers, as plain values.
//!
//! Names, types and label keys are cAdvisor's, so dashboards and recording rules read the same
//! series whichever side produces them: every series carries `container`, `id` (the cgroup
//! path), `image`, `name` (the container id), `namespace` and `pod`, in that (cAdvisor's sorted)
//! order, then its own labels (`cpu`, `interface`, `device`, ...). A pod's own cgroup has
//! `container=""`, as cAdvisor's pod series do, and carries the pod's network series.
//!
//! CRI carries every value as an unsigned integer: seconds are whole seconds (the cumulative
//! CPU counters lose their fraction, as with every CRI runtime), and a series whose value would
//! be negative or unknown is left out.

use super::{CgroupSample, DeviceIo, Extended, Filesystem, Interface, OpenFiles};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

/// One metric family.
#[derive(Debug)]
pub struct Descriptor {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    /// Label keys after [`BASE_LABELS`].
    pub extra: &'static [&'static str],
}

/// The labels of every series, in order.
pub const BASE_LABELS: [&str; 6] = ["container", "id", "image", "name", "namespace", "pod"];

impl Descriptor {
    pub fn label_keys(&self) -> Vec<String> {
        BASE_LABELS
            .iter()
            .chain(self.extra)
            .map(|k| (*k).to_owned())
            .collect()
    }
}

const fn d(
    name: &'static str,
    kind: Kind,
    extra: &'static [&'static str],
    help: &'static str,
) -> Descriptor {
    Descriptor {
        name,
        help,
        kind,
        extra,
    }
}

use Kind::{Counter as C, Gauge as G};

const DEV: &[&str] = &["device"];
const IFACE: &[&str] = &["interface"];

/// Every family crust serves.
#[rustfmt::skip]
pub const DESCRIPTORS: &[Descriptor] = &[
    d("container_cpu_usage_seconds_total", C, &["cpu"], "Cumulative cpu time consumed in seconds."),
    d("container_cpu_user_seconds_total", C, &[], "Cumulative user cpu time consumed in seconds."),
    d("container_cpu_system_seconds_total", C, &[], "Cumulative system cpu time consumed in seconds."),
    d("container_cpu_cfs_periods_total", C, &[], "Number of elapsed enforcement period intervals."),
    d("container_cpu_cfs_throttled_periods_total", C, &[], "Number of throttled period intervals."),
    d("container_cpu_cfs_throttled_seconds_total", C, &[], "Total time duration the container has been throttled."),
    d("container_memory_cache", G, &[], "Number of bytes of page cache memory."),
    d("container_memory_rss", G, &[], "Size of RSS in bytes."),
    d("container_memory_kernel_usage", G, &[], "Size of kernel memory allocated in bytes."),
    d("container_memory_mapped_file", G, &[], "Size of memory mapped files in bytes."),
    d("container_memory_swap", G, &[], "Container swap usage in bytes."),
    d("container_memory_failcnt", C, &[], "Number of memory usage hits limits."),
    d("container_memory_events_high_total", C, &[], "Cumulative count of memory.high throttle events for the container"),
    d("container_memory_events_max_total", C, &[], "Cumulative count of memory.max limit hit events for the container"),
    d("container_memory_usage_bytes", G, &[], "Current memory usage in bytes, including all memory regardless of when it was accessed."),
    d("container_memory_max_usage_bytes", G, &[], "Maximum memory usage recorded in bytes."),
    d("container_memory_working_set_bytes", G, &[], "Current working set in bytes."),
    d("container_memory_total_active_file_bytes", G, &[], "Current total active file in bytes."),
    d("container_memory_total_inactive_file_bytes", G, &[], "Current total inactive file in bytes."),
    d("container_memory_failures_total", C, &["failure_type", "scope"], "Cumulative count of memory allocation failures."),
    d("container_oom_events_total", C, &[], "Count of out of memory events observed for the container."),
    d("container_network_receive_bytes_total", C, IFACE, "Cumulative count of bytes received."),
    d("container_network_receive_packets_total", C, IFACE, "Cumulative count of packets received."),
    d("container_network_receive_packets_dropped_total", C, IFACE, "Cumulative count of packets dropped while receiving."),
    d("container_network_receive_errors_total", C, IFACE, "Cumulative count of errors encountered while receiving."),
    d("container_network_transmit_bytes_total", C, IFACE, "Cumulative count of bytes transmitted."),
    d("container_network_transmit_packets_total", C, IFACE, "Cumulative count of packets transmitted."),
    d("container_network_transmit_packets_dropped_total", C, IFACE, "Cumulative count of packets dropped while transmitting."),
    d("container_network_transmit_errors_total", C, IFACE, "Cumulative count of errors encountered while transmitting."),
    d("container_fs_inodes_free", G, DEV, "Number of available Inodes."),
    d("container_fs_inodes_total", G, DEV, "Number of Inodes."),
    d("container_fs_limit_bytes", G, DEV, "Number of bytes that can be consumed by the container on this filesystem."),
    d("container_fs_usage_bytes", G, DEV, "Number of bytes that are consumed by the container on this filesystem."),
    d("container_fs_reads_bytes_total", C, DEV, "Cumulative count of bytes read."),
    d("container_fs_reads_total", C, DEV, "Cumulative count of reads completed."),
    d("container_fs_writes_bytes_total", C, DEV, "Cumulative count of bytes written."),
    d("container_fs_writes_total", C, DEV, "Cumulative count of writes completed."),
    d("container_blkio_device_usage_total", C, &["device", "major", "minor", "operation"], "Blkio device bytes usage."),
    d("container_processes", G, &[], "Number of processes running inside the container."),
    d("container_file_descriptors", G, &[], "Number of open file descriptors for the container."),
    d("container_sockets", G, &[], "Number of open sockets for the container."),
    d("container_threads", G, &[], "Number of threads running inside the container."),
    d("container_threads_max", G, &[], "Maximum number of threads allowed inside the container, infinity if value is zero."),
    d("container_ulimits_soft", G, &["ulimit"], "Soft ulimit values for the container root process."),
    d("container_last_seen", G, &[], "Last time a container was seen by the exporter."),
    d("container_start_time_seconds", G, &[], "Start time of the container since unix epoch in seconds."),
    d("container_spec_cpu_period", G, &[], "CPU period of the container."),
    d("container_spec_cpu_quota", G, &[], "CPU quota of the container."),
    d("container_spec_cpu_shares", G, &[], "CPU share of the container."),
    d("container_spec_memory_limit_bytes", G, &[], "Memory limit for the container."),
    d("container_spec_memory_reservation_limit_bytes", G, &[], "Memory reservation limit for the container."),
    d("container_spec_memory_swap_limit_bytes", G, &[], "Memory swap limit for the container."),
    d("container_pressure_cpu_stalled_seconds_total", C, &[], "Total time duration no tasks in the container could make progress due to CPU congestion."),
    d("container_pressure_cpu_waiting_seconds_total", C, &[], "Total time duration tasks in the container have waited due to CPU congestion."),
    d("container_pressure_memory_stalled_seconds_total", C, &[], "Total time duration no tasks in the container could make progress due to memory congestion."),
    d("container_pressure_memory_waiting_seconds_total", C, &[], "Total time duration tasks in the container have waited due to memory congestion."),
    d("container_pressure_io_stalled_seconds_total", C, &[], "Total time duration no tasks in the container could make progress due to IO congestion."),
    d("container_pressure_io_waiting_seconds_total", C, &[], "Total time duration tasks in the container have waited due to IO congestion."),
];

/// One value of one series.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metric {
    pub name: &'static str,
    pub kind: Kind,
    /// Values for the descriptor's label keys, in order.
    pub labels: Vec<String>,
    pub value: u64,
    /// Nanoseconds since the epoch: when the value was read.
    pub timestamp: i64,
}

/// What a series is about: the values of [`BASE_LABELS`].
#[derive(Debug, Clone, Default)]
pub struct Subject {
    /// The container's name in its pod; empty for the pod's own cgroup.
    pub container: String,
    /// The cgroup, as the kernel names it (`/crust/crust-<pod>/<container>`).
    pub id: String,
    pub image: String,
    /// The container id; empty for the pod.
    pub name: String,
    pub namespace: String,
    pub pod: String,
}

/// What was read of one cgroup, and what goes with it.
pub struct Observed<'a> {
    /// Read with `Detail::Metrics`.
    pub sample: &'a CgroupSample,
    pub open_files: OpenFiles,
    /// The soft RLIMIT_NOFILE of the main process, when known.
    pub open_files_limit: Option<u64>,
    /// When the container started (the pod: was created), nanoseconds since the epoch.
    pub started_at: i64,
    /// The pod's interfaces (a container's traffic is its pod's).
    pub interfaces: &'a [Interface],
    /// The writable layer's bytes and inodes, and its filesystem.
    pub layer: Option<(u64, u64, &'a Filesystem)>,
    /// The device name of a block device (`/dev/vda`) for the I/O series.
    pub device_name: &'a dyn Fn(u64, u64) -> String,
}

/// The series of one cgroup, at `now` (nanoseconds since the epoch, for `container_last_seen`).
pub fn series(subject: &Subject, o: &Observed, now: i64) -> Vec<Metric> {
    let mut out = Out {
        base: vec![
            subject.container.clone(),
            subject.id.clone(),
            subject.image.clone(),
            subject.name.clone(),
            subject.namespace.clone(),
            subject.pod.clone(),
        ],
        timestamp: o.sample.timestamp,
        metrics: Vec::with_capacity(64),
    };
    let s = o.sample;
    out.push(
        "container_last_seen",
        (now / 1_000_000_000).max(0) as u64,
        &[],
    );
    out.push(
        "container_start_time_seconds",
        (o.started_at / 1_000_000_000).max(0) as u64,
        &[],
    );
    out.push(
        "container_cpu_usage_seconds_total",
        secs(s.cpu_usage_ns),
        &["total"],
    );
    memory(&mut out, s);
    out.push("container_threads", s.processes, &[]);
    out.push("container_file_descriptors", o.open_files.fds, &[]);
    out.push("container_sockets", o.open_files.sockets, &[]);
    if let Some(limit) = o.open_files_limit {
        out.push("container_ulimits_soft", limit, &["max_open_files"]);
    }
    if let Some(x) = &s.extra {
        extended(&mut out, x, o.device_name);
    }
    pressure(&mut out, s);
    for i in o.interfaces {
        network(&mut out, i);
    }
    if let Some((bytes, _inodes, fs)) = o.layer {
        let dev = [fs.device.as_str()];
        out.push("container_fs_usage_bytes", bytes, &dev);
        out.push("container_fs_limit_bytes", fs.capacity, &dev);
        out.push("container_fs_inodes_total", fs.inodes, &dev);
        out.push("container_fs_inodes_free", fs.inodes_free, &dev);
    }
    out.metrics
}

struct Out {
    base: Vec<String>,
    timestamp: i64,
    metrics: Vec<Metric>,
}

impl Out {
    fn push(&mut self, name: &'static str, value: u64, extra: &[&str]) {
        let Some(d) = DESCRIPTORS.iter().find(|d| d.name == name) else {
            debug_assert!(false, "no descriptor for {name}");
            return;
        };
        debug_assert_eq!(d.extra.len(), extra.len(), "labels of {name}");
        let mut labels = self.base.clone();
        labels.extend(extra.iter().map(|v| (*v).to_owned()));
        self.metrics.push(Metric {
            name,
            kind: d.kind,
            labels,
            value,
            timestamp: self.timestamp,
        });
    }
}

fn secs(ns: u64) -> u64 {
    ns / 1_000_000_000
}

fn memory(out: &mut Out, s: &CgroupSample) {
    let m = &s.memory;
    out.push("container_memory_usage_bytes", m.usage, &[]);
    out.push("container_memory_working_set_bytes", m.working_set, &[]);
    out.push("container_memory_rss", m.rss, &[]);
    // No swap accounting: nothing can be told apart, cAdvisor says 0 too.
    out.push(
        "container_memory_swap",
        s.swap.as_ref().map_or(0, |w| w.usage),
        &[],
    );
    for (kind, value) in [
        ("pgfault", m.page_faults),
        ("pgmajfault", m.major_page_faults),
    ] {
        out.push(
            "container_memory_failures_total",
            value,
            &[kind, "hierarchy"],
        );
    }
}

fn extended(out: &mut Out, x: &Extended, device_name: &dyn Fn(u64, u64) -> String) {
    out.push("container_cpu_user_seconds_total", secs(x.cpu_user_ns), &[]);
    out.push(
        "container_cpu_system_seconds_total",
        secs(x.cpu_system_ns),
        &[],
    );
    out.push("container_cpu_cfs_periods_total", x.cfs_periods, &[]);
    out.push(
        "container_cpu_cfs_throttled_periods_total",
        x.cfs_throttled_periods,
        &[],
    );
    out.push(
        "container_cpu_cfs_throttled_seconds_total",
        secs(x.cfs_throttled_ns),
        &[],
    );
    out.push("container_memory_cache", x.cache, &[]);
    out.push("container_memory_mapped_file", x.mapped_file, &[]);
    out.push("container_memory_kernel_usage", x.kernel, &[]);
    // Unknown (a v2 kernel without memory.peak) reads 0, as in cAdvisor.
    out.push(
        "container_memory_max_usage_bytes",
        x.max_usage.unwrap_or(0),
        &[],
    );
    out.push("container_memory_failcnt", x.failcnt, &[]);
    out.push("container_memory_events_high_total", x.events_high, &[]);
    out.push("container_memory_events_max_total", x.events_max, &[]);
    out.push(
        "container_memory_total_active_file_bytes",
        x.active_file,
        &[],
    );
    out.push(
        "container_memory_total_inactive_file_bytes",
        x.inactive_file,
        &[],
    );
    out.push(
        "container_memory_failures_total",
        x.own_page_faults,
        &["pgfault", "container"],
    );
    out.push(
        "container_memory_failures_total",
        x.own_major_page_faults,
        &["pgmajfault", "container"],
    );
    out.push("container_oom_events_total", x.oom_kills, &[]);
    out.push("container_processes", x.procs.len() as u64, &[]);
    out.push("container_threads_max", x.threads_max.unwrap_or(0), &[]);
    let spec = &x.spec;
    out.push("container_spec_cpu_period", spec.cpu_period, &[]);
    if let Some(q) = spec.cpu_quota {
        out.push("container_spec_cpu_quota", q, &[]);
    }
    out.push("container_spec_cpu_shares", spec.cpu_shares, &[]);
    // No limit reads 0, as in cAdvisor.
    out.push(
        "container_spec_memory_limit_bytes",
        spec.memory_limit.unwrap_or(0),
        &[],
    );
    out.push(
        "container_spec_memory_reservation_limit_bytes",
        spec.memory_reservation.unwrap_or(0),
        &[],
    );
    out.push(
        "container_spec_memory_swap_limit_bytes",
        spec.swap_limit.unwrap_or(0),
        &[],
    );
    for io in &x.io {
        block_io(out, io, &device_name(io.major, io.minor));
    }
}

fn block_io(out: &mut Out, io: &DeviceIo, device: &str) {
    let dev = [device];
    out.push("container_fs_reads_bytes_total", io.read_bytes, &dev);
    out.push("container_fs_writes_bytes_total", io.write_bytes, &dev);
    out.push("container_fs_reads_total", io.reads, &dev);
    out.push("container_fs_writes_total", io.writes, &dev);
    let (major, minor) = (io.major.to_string(), io.minor.to_string());
    for (op, v) in [("Read", io.read_bytes), ("Write", io.write_bytes)] {
        out.push(
            "container_blkio_device_usage_total",
            v,
            &[device, &major, &minor, op],
        );
    }
}

fn pressure(out: &mut Out, s: &CgroupSample) {
    let Some(p) = &s.pressure else { return };
    for (what, psi) in [("cpu", &p.cpu), ("memory", &p.memory), ("io", &p.io)] {
        let Some(psi) = psi else { continue };
        // cAdvisor's names: "stalled" is PSI's `full`, "waiting" its `some`.
        let (stalled, waiting) = match what {
            "cpu" => (
                "container_pressure_cpu_stalled_seconds_total",
                "container_pressure_cpu_waiting_seconds_total",
            ),
            "memory" => (
                "container_pressure_memory_stalled_seconds_total",
                "container_pressure_memory_waiting_seconds_total",
            ),
            _ => (
                "container_pressure_io_stalled_seconds_total",
                "container_pressure_io_waiting_seconds_total",
            ),
        };
        out.push(stalled, psi.full.total_us / 1_000_000, &[]);
        out.push(waiting, psi.some.total_us / 1_000_000, &[]);
    }
}

fn network(out: &mut Out, i: &Interface) {
    let name = [i.name.as_str()];
    for (metric, value) in [
        ("container_network_receive_bytes_total", i.rx_bytes),
        ("container_network_receive_packets_total", i.rx_packets),
        (
            "container_network_receive_packets_dropped_total",
            i.rx_dropped,
        ),
        ("container_network_receive_errors_total", i.rx_errors),
        ("container_network_transmit_bytes_total", i.tx_bytes),
        ("container_network_transmit_packets_total", i.tx_packets),
        (
            "container_network_transmit_packets_dropped_total",
            i.tx_dropped,
        ),
        ("container_network_transmit_errors_total", i.tx_errors),
    ] {
        out.push(metric, value, &name);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::stats::{Memory, Pressure, Psi, PsiData, Spec, Swap};

    fn full_sample() -> CgroupSample {
        let psi = Some(Psi {
            some: PsiData {
                total_us: 3_000_000,
                ..Default::default()
            },
            full: PsiData::default(),
        });
        CgroupSample {
            timestamp: 5,
            cpu_usage_ns: 2_500_000_000,
            memory: Memory {
                working_set: 10,
                usage: 20,
                ..Default::default()
            },
            swap: Some(Swap::default()),
            processes: 3,
            pressure: Some(Pressure {
                cpu: psi.clone(),
                memory: psi.clone(),
                io: psi,
            }),
            extra: Some(Box::new(Extended {
                procs: vec![1, 2],
                io: vec![DeviceIo {
                    major: 8,
                    ..Default::default()
                }],
                max_usage: Some(30),
                spec: Spec {
                    cpu_quota: Some(20000),
                    memory_reservation: Some(1),
                    ..Default::default()
                },
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    fn observe<'a>(
        sample: &'a CgroupSample,
        interfaces: &'a [Interface],
        fs: &'a Filesystem,
        name: &'a dyn Fn(u64, u64) -> String,
    ) -> Observed<'a> {
        Observed {
            sample,
            open_files: OpenFiles { fds: 4, sockets: 1 },
            open_files_limit: Some(1024),
            started_at: 7_000_000_000,
            interfaces,
            layer: Some((100, 2, fs)),
            device_name: name,
        }
    }

    /// What critest checks: every descriptor has a series, with as many label values as keys.
    #[test]
    fn every_descriptor_has_series_with_its_labels() {
        let sample = full_sample();
        let ifaces = [Interface {
            name: "eth0".into(),
            ..Default::default()
        }];
        let fs = Filesystem {
            device: "/dev/vda".into(),
            ..Default::default()
        };
        let name = |_, _| "/dev/sda".to_owned();
        let all = series(
            &Subject::default(),
            &observe(&sample, &ifaces, &fs, &name),
            9,
        );
        let mut by_name: BTreeMap<&str, usize> = BTreeMap::new();
        for m in &all {
            let d = DESCRIPTORS.iter().find(|d| d.name == m.name).unwrap();
            assert_eq!(m.labels.len(), d.label_keys().len(), "{}", m.name);
            assert_eq!(m.kind, d.kind);
            *by_name.entry(m.name).or_default() += 1;
        }
        for d in DESCRIPTORS {
            assert!(by_name.contains_key(d.name), "no series for {}", d.name);
            assert!(!d.help.is_empty());
        }
        let names: std::collections::HashSet<_> = DESCRIPTORS.iter().map(|d| d.name).collect();
        assert_eq!(
            names.len(),
            DESCRIPTORS.len(),
            "a descriptor is listed twice"
        );
    }

    #[test]
    fn values_labels_and_units() {
        let sample = full_sample();
        let fs = Filesystem {
            device: "/dev/vda".into(),
            capacity: 1000,
            ..Default::default()
        };
        let name = |ma, mi| format!("dev{ma}:{mi}");
        let subject = Subject {
            container: "web".into(),
            id: "/crust/crust-p/c".into(),
            image: "busybox:1".into(),
            name: "c".into(),
            namespace: "ns".into(),
            pod: "p".into(),
        };
        let all = series(&subject, &observe(&sample, &[], &fs, &name), 9_900_000_000);
        let find = |n: &str| all.iter().find(|m| m.name == n).unwrap();
        let cpu = find("container_cpu_usage_seconds_total");
        assert_eq!(
            cpu.labels,
            [
                "web",
                "/crust/crust-p/c",
                "busybox:1",
                "c",
                "ns",
                "p",
                "total"
            ]
        );
        assert_eq!((cpu.value, cpu.timestamp, cpu.kind), (2, 5, Kind::Counter));
        assert_eq!(find("container_last_seen").value, 9);
        assert_eq!(find("container_start_time_seconds").value, 7);
        assert_eq!(find("container_processes").value, 2);
        assert_eq!(find("container_threads").value, 3);
        assert_eq!(
            find("container_pressure_cpu_waiting_seconds_total").value,
            3
        );
        let usage = find("container_fs_usage_bytes");
        assert_eq!((usage.value, usage.labels[6].as_str()), (100, "/dev/vda"));
        assert_eq!(find("container_fs_limit_bytes").value, 1000);
        assert_eq!(find("container_fs_reads_total").labels[6], "dev8:0");
        assert!(
            all.iter()
                .all(|m| m.name != "container_network_receive_bytes_total")
        );
    }
}
