//! Statistics and metrics: the domain's plain samples become CRI's Linux stats (every value
//! wrapped, absent where crust has no reading), cAdvisor-named metrics and their descriptors;
//! the stats filters become the domain's.

use super::metadata;
use crate::container::{ContainerFilter, ContainerStats, PodMetrics, PodUsage};
use crate::cri::pb;
use crate::sandbox::SandboxFilter;
use crate::stats::cadvisor::{self, Kind, Metric};
use crate::stats::{CgroupSample, Interface, Psi};

pub fn metric_descriptors() -> pb::ListMetricDescriptorsResponse {
    pb::ListMetricDescriptorsResponse {
        descriptors: cadvisor::DESCRIPTORS
            .iter()
            .map(|d| pb::MetricDescriptor {
                name: d.name.into(),
                help: d.help.into(),
                label_keys: d.label_keys(),
            })
            .collect(),
    }
}

pub fn pod_metrics(p: &PodMetrics) -> pb::PodSandboxMetrics {
    pb::PodSandboxMetrics {
        pod_sandbox_id: p.pod_id.clone(),
        metrics: p.metrics.iter().map(metric).collect(),
        container_metrics: p
            .containers
            .iter()
            .map(|(id, metrics)| pb::ContainerMetrics {
                container_id: id.clone(),
                metrics: metrics.iter().map(metric).collect(),
            })
            .collect(),
    }
}

fn metric(m: &Metric) -> pb::Metric {
    let kind = match m.kind {
        Kind::Counter => pb::MetricType::Counter,
        Kind::Gauge => pb::MetricType::Gauge,
    };
    pb::Metric {
        name: m.name.into(),
        timestamp: m.timestamp,
        metric_type: kind as i32,
        label_values: m.labels.clone(),
        value: value(m.value),
    }
}

fn value(v: u64) -> Option<pb::UInt64Value> {
    Some(pb::UInt64Value { value: v })
}

pub fn pod_stats(u: &PodUsage) -> pb::PodSandboxStats {
    let s = &u.pod;
    let r = &s.record;
    let c = &s.cgroup;
    let t = c.timestamp;
    pb::PodSandboxStats {
        attributes: Some(pb::PodSandboxAttributes {
            id: r.id.clone(),
            metadata: Some(metadata(&r.spec.metadata)),
            labels: super::string_map(&r.spec.labels),
            annotations: super::string_map(&r.spec.annotations),
        }),
        linux: Some(pb::LinuxPodSandboxStats {
            cpu: Some(cpu(c)),
            memory: Some(memory(c)),
            // kubelet reads the default interface of any network usage it is given (a nil
            // one crashes its stats provider, v1.37 `criInterfaceToSummary`): a pod whose
            // namespace holds no interface but loopback reports no network usage at all.
            network: s.interfaces.as_ref().and_then(|all| {
                Some(pb::NetworkUsage {
                    timestamp: t,
                    default_interface: Some(interface(all.first()?)),
                    interfaces: all.iter().map(interface).collect(),
                })
            }),
            process: Some(pb::ProcessUsage {
                timestamp: t,
                process_count: value(c.processes),
            }),
            containers: u.containers.iter().map(container_stats).collect(),
            io: io(c),
        }),
        windows: None,
    }
}

pub fn container_stats(s: &ContainerStats) -> pb::ContainerStats {
    let r = &s.record;
    let c = &s.cgroup;
    pb::ContainerStats {
        attributes: Some(pb::ContainerAttributes {
            id: r.id.clone(),
            metadata: Some(pb::ContainerMetadata {
                name: r.spec.metadata.name.clone(),
                attempt: r.spec.metadata.attempt,
            }),
            labels: super::string_map(&r.spec.labels),
            annotations: super::string_map(&r.spec.annotations),
        }),
        cpu: Some(cpu(c)),
        memory: Some(memory(c)),
        writable_layer: s.writable_layer.as_ref().map(|l| pb::FilesystemUsage {
            timestamp: l.timestamp,
            fs_id: Some(pb::FilesystemIdentifier {
                mountpoint: l.mountpoint.display().to_string(),
            }),
            used_bytes: value(l.bytes),
            inodes_used: value(l.inodes),
        }),
        swap: c.swap.as_ref().map(|w| pb::SwapUsage {
            timestamp: c.timestamp,
            swap_available_bytes: w.available.and_then(value),
            swap_usage_bytes: value(w.usage),
        }),
        io: io(c),
    }
}

fn cpu(c: &CgroupSample) -> pb::CpuUsage {
    pb::CpuUsage {
        timestamp: c.timestamp,
        usage_core_nano_seconds: value(c.cpu_usage_ns),
        usage_nano_cores: c.cpu_nano_cores.and_then(value),
        psi: c.pressure.as_ref().and_then(|p| p.cpu.as_ref()).map(psi),
    }
}

fn memory(c: &CgroupSample) -> pb::MemoryUsage {
    let m = &c.memory;
    pb::MemoryUsage {
        timestamp: c.timestamp,
        working_set_bytes: value(m.working_set),
        available_bytes: m.available.and_then(value),
        usage_bytes: value(m.usage),
        rss_bytes: value(m.rss),
        page_faults: value(m.page_faults),
        major_page_faults: value(m.major_page_faults),
        psi: c.pressure.as_ref().and_then(|p| p.memory.as_ref()).map(psi),
    }
}

/// CRI's I/O usage is pressure only: absent without PSI.
fn io(c: &CgroupSample) -> Option<pb::IoUsage> {
    let p = c.pressure.as_ref()?.io.as_ref()?;
    Some(pb::IoUsage {
        timestamp: c.timestamp,
        psi: Some(psi(p)),
    })
}

fn psi(p: &Psi) -> pb::PsiStats {
    let data = |d: &crate::stats::PsiData| pb::PsiData {
        total: d.total_us,
        avg10: d.avg10,
        avg60: d.avg60,
        avg300: d.avg300,
    };
    pb::PsiStats {
        full: Some(data(&p.full)),
        some: Some(data(&p.some)),
    }
}

fn interface(i: &Interface) -> pb::NetworkInterfaceUsage {
    pb::NetworkInterfaceUsage {
        name: i.name.clone(),
        rx_bytes: value(i.rx_bytes),
        rx_errors: value(i.rx_errors),
        tx_bytes: value(i.tx_bytes),
        tx_errors: value(i.tx_errors),
    }
}

pub fn pod_stats_filter(f: Option<pb::PodSandboxStatsFilter>) -> SandboxFilter {
    let f = f.unwrap_or_default();
    SandboxFilter {
        id: (!f.id.is_empty()).then_some(f.id),
        ready: None,
        labels: f.label_selector.into_iter().collect(),
    }
}

pub fn container_stats_filter(f: Option<pb::ContainerStatsFilter>) -> ContainerFilter {
    let f = f.unwrap_or_default();
    ContainerFilter {
        id: (!f.id.is_empty()).then_some(f.id),
        pod_id: (!f.pod_sandbox_id.is_empty()).then_some(f.pod_sandbox_id),
        state: None,
        labels: f.label_selector.into_iter().collect(),
    }
}
