//! A pod as NRI plugins are told about it (`crate::nri`), from its record.

use super::model::SandboxRecord;
use crate::model::Resources;
use crate::nri::PodInfo;

pub fn pod_info(record: &SandboxRecord) -> PodInfo {
    let m = &record.spec.metadata;
    let pins = &record.pins;
    let namespaces = [
        ("network", &pins.net),
        ("ipc", &pins.ipc),
        ("uts", &pins.uts),
        ("pid", &pins.pid),
        ("user", &pins.user),
    ]
    .into_iter()
    .filter_map(|(kind, pin)| {
        pin.as_ref()
            .map(|p| (kind.to_owned(), p.display().to_string()))
    })
    .collect();
    PodInfo {
        id: record.id.clone(),
        name: m.name.clone(),
        uid: m.uid.clone(),
        namespace: m.namespace.clone(),
        labels: record.spec.labels.clone(),
        annotations: record.spec.annotations.clone(),
        runtime_handler: record.runtime_handler.clone(),
        cgroup_parent: record.spec.cgroup_parent.clone(),
        cgroups_path: record.cgroup.clone(),
        pid: record.monitor.map(|m| m.pid as u32).unwrap_or_default(),
        ips: record
            .network
            .as_ref()
            .and_then(|n| n.result.as_ref())
            .map(|r| r.ips.iter().map(|ip| ip.to_string()).collect())
            .unwrap_or_default(),
        namespaces,
        resources: limits(&record.spec.resources),
        overhead: limits(&record.spec.overhead),
    }
}

/// Figures kubelet gave as OCI resources (none given: `None`). They describe the pod to
/// plugins; the host's controllers do not matter here.
fn limits(r: &Resources) -> Option<oci_spec::runtime::LinuxResources> {
    if *r == Resources::default() {
        return None;
    }
    let any_host = crate::oci::HostFeatures {
        cgroup_v2: true,
        swap_limit: true,
        hugetlb: true,
        ..Default::default()
    };
    crate::oci::container_resources(r, &any_host).ok()
}
