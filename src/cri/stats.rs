//! PodSandboxStats, ListPodSandboxStats and StreamPodSandboxStats encoding: the domain's plain
//! samples as CRI's Linux stats (every value wrapped, absent where crust has no reading).

use super::convert::metadata;
use super::pb;
use crate::sandbox::{PodStats, SandboxFilter};
use crate::stats::Interface;

fn value(v: u64) -> Option<pb::UInt64Value> {
    Some(pb::UInt64Value { value: v })
}

pub fn pod_stats(s: &PodStats) -> pb::PodSandboxStats {
    let r = &s.record;
    let c = &s.cgroup;
    let m = &c.memory;
    let t = c.timestamp;
    pb::PodSandboxStats {
        attributes: Some(pb::PodSandboxAttributes {
            id: r.id.clone(),
            metadata: Some(metadata(&r.spec.metadata)),
            labels: r.spec.labels.clone().into_iter().collect(),
            annotations: r.spec.annotations.clone().into_iter().collect(),
        }),
        linux: Some(pb::LinuxPodSandboxStats {
            cpu: Some(pb::CpuUsage {
                timestamp: t,
                usage_core_nano_seconds: value(c.cpu_usage_ns),
                usage_nano_cores: c.cpu_nano_cores.and_then(value),
                psi: None,
            }),
            memory: Some(pb::MemoryUsage {
                timestamp: t,
                working_set_bytes: value(m.working_set),
                available_bytes: m.available.and_then(value),
                usage_bytes: value(m.usage),
                rss_bytes: value(m.rss),
                page_faults: value(m.page_faults),
                major_page_faults: value(m.major_page_faults),
                psi: None,
            }),
            network: s.interfaces.as_ref().map(|all| pb::NetworkUsage {
                timestamp: t,
                default_interface: all.first().map(interface),
                interfaces: all.iter().map(interface).collect(),
            }),
            process: Some(pb::ProcessUsage {
                timestamp: t,
                process_count: value(c.processes),
            }),
            containers: vec![],
            io: None,
        }),
        windows: None,
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

pub fn stats_filter(f: Option<pb::PodSandboxStatsFilter>) -> SandboxFilter {
    let f = f.unwrap_or_default();
    SandboxFilter {
        id: (!f.id.is_empty()).then_some(f.id),
        ready: None,
        labels: f.label_selector.into_iter().collect(),
    }
}
