//! A container's cgroup limits and devices: CPU (shares, quota, period, cpuset), memory
//! (limit, and memory+swap as CRI and the OCI spec both count it), hugepages, the cgroup v2
//! `unified` map, and the device cgroup with the device nodes created in the container.
//!
//! Zero means "not set" in CRI and is left out. With a memory limit and no swap figure, swap
//! is limited to the same value (no swap), as containerd does, where the host can limit swap
//! at all. There is no pids limit per container: kubelet sets it on the pod.
//!
//! The device cgroup denies everything, then allows the standard character devices every
//! container has and the request's devices with their permissions; a privileged container
//! may use every device.

use oci_spec::runtime::{
    LinuxCpu, LinuxDevice, LinuxDeviceCgroup, LinuxDeviceType, LinuxHugepageLimit, LinuxMemory,
    LinuxResources,
};

use crate::model::Resources;

use super::{DeviceNode, HostFeatures, SpecError};

/// The standard devices: /dev/null, zero, full, random, urandom, tty, ptmx, and the pty
/// slaves (any minor of major 136).
const STANDARD_DEVICES: &[(i64, Option<i64>)] = &[
    (1, Some(3)),
    (1, Some(5)),
    (1, Some(7)),
    (1, Some(8)),
    (1, Some(9)),
    (5, Some(0)),
    (5, Some(2)),
    (136, None),
];

/// The cgroup limits of a CRI resources block, without devices: what CreateContainer and
/// UpdateContainerResources apply.
pub fn container_resources(
    r: &Resources,
    host: &HostFeatures,
) -> Result<LinuxResources, SpecError> {
    let mut out = LinuxResources::default();
    out.set_devices(None)
        .set_cpu(cpu(r)?)
        .set_memory(memory(r, host)?)
        .set_hugepage_limits(hugepages(r, host)?)
        .set_unified(unified(r, host)?);
    Ok(out)
}

/// The limits of a whole pod for UpdatePodSandboxResources: `resources` (the sum of its
/// containers', as kubelet computes it) plus the runtime class's `overhead`, each figure left
/// out where the pod sets none. CPU quotas are added at the pod's period (100 ms unless set);
/// a quota of -1 is kubelet's "no CPU limit" (a container of the pod has none), which the
/// overhead cannot change. No swap limit: kubelet limits swap per container, and neither does
/// it on pod cgroups.
pub fn pod_resources(
    resources: &Resources,
    overhead: &Resources,
    cgroup_v2: bool,
) -> Result<LinuxResources, SpecError> {
    let plus = |field: &str, a: i64, b: i64| -> Result<i64, SpecError> {
        if a < 0 || b < 0 {
            return Err(SpecError::Invalid(format!("{field}: a value is negative")));
        }
        Ok(if a == 0 { 0 } else { a.saturating_add(b) })
    };
    let period = if resources.cpu_period > 0 {
        resources.cpu_period
    } else {
        100_000
    };
    let overhead_quota = match overhead.cpu_period {
        p if p > 0 && overhead.cpu_quota > 0 => overhead.cpu_quota.saturating_mul(period) / p,
        _ => overhead.cpu_quota.max(0),
    };
    let quota = match resources.cpu_quota {
        -1 => -1,
        q => plus("cpu_quota", q, overhead_quota)?,
    };
    let sum = Resources {
        cpu_shares: plus("cpu_shares", resources.cpu_shares, overhead.cpu_shares)?,
        cpu_quota: quota,
        cpu_period: if quota > 0 { period } else { 0 },
        memory_limit: plus(
            "memory_limit_in_bytes",
            resources.memory_limit,
            overhead.memory_limit,
        )?,
        cpuset_cpus: resources.cpuset_cpus.clone(),
        cpuset_mems: resources.cpuset_mems.clone(),
        unified: resources.unified.clone(),
        ..Default::default()
    };
    let host = HostFeatures {
        cgroup_v2,
        ..Default::default()
    };
    container_resources(&sum, &host)
}

/// The CRI figures OCI limits stand for, each field left zero (unset) where `r` sets none: the
/// inverse of `container_resources` for what both carry (NRI plugins' updates come as OCI
/// limits, and a container's record keeps CRI figures).
pub fn cri_resources(r: &LinuxResources) -> Resources {
    let cpu = r.cpu().clone().unwrap_or_default();
    let memory = r.memory().unwrap_or_default();
    Resources {
        cpu_period: cpu.period().map_or(0, |p| p as i64),
        cpu_quota: cpu.quota().unwrap_or_default(),
        cpu_shares: cpu.shares().map_or(0, |s| s as i64),
        memory_limit: memory.limit().unwrap_or_default(),
        memory_swap_limit: memory.swap().unwrap_or_default(),
        cpuset_cpus: cpu.cpus().clone().unwrap_or_default(),
        cpuset_mems: cpu.mems().clone().unwrap_or_default(),
        hugepage_limits: r
            .hugepage_limits()
            .iter()
            .flatten()
            .map(|h| crate::model::HugepageLimit {
                page_size: h.page_size().clone(),
                limit: h.limit().max(0) as u64,
            })
            .collect(),
        unified: r
            .unified()
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        ..Default::default()
    }
}

/// The full `linux.resources` of a new container: its limits and its device cgroup.
pub(crate) fn resources(
    r: &Resources,
    devices: &[DeviceNode],
    privileged: bool,
    host: &HostFeatures,
) -> Result<LinuxResources, SpecError> {
    let mut out = container_resources(r, host)?;
    out.set_devices(Some(device_rules(devices, privileged)?));
    Ok(out)
}

fn cpu(r: &Resources) -> Result<Option<LinuxCpu>, SpecError> {
    let non_negative = |field: &str, value: i64| -> Result<Option<u64>, SpecError> {
        match value {
            0 => Ok(None),
            v if v > 0 => Ok(Some(v as u64)),
            v => Err(SpecError::Invalid(format!("{field}: {v} is negative"))),
        }
    };
    let mut cpu = LinuxCpu::default();
    cpu.set_shares(non_negative("cpu_shares", r.cpu_shares)?)
        .set_period(non_negative("cpu_period", r.cpu_period)?)
        .set_quota((r.cpu_quota != 0).then_some(r.cpu_quota))
        .set_cpus(non_empty(&r.cpuset_cpus))
        .set_mems(non_empty(&r.cpuset_mems));
    Ok((cpu != LinuxCpu::default()).then_some(cpu))
}

fn memory(r: &Resources, host: &HostFeatures) -> Result<Option<LinuxMemory>, SpecError> {
    let limit = r.memory_limit;
    let swap = r.memory_swap_limit;
    if limit < 0 {
        return Err(SpecError::Invalid(format!(
            "memory_limit_in_bytes: {limit} is negative"
        )));
    }
    if swap < -1 {
        return Err(SpecError::Invalid(format!(
            "memory_swap_limit_in_bytes: {swap} is below -1 (unlimited)"
        )));
    }
    if limit == 0 {
        // Without a memory limit a memory+swap limit means nothing to either cgroup version.
        return Ok(None);
    }
    if swap > 0 && swap < limit {
        return Err(SpecError::Invalid(format!(
            "memory_swap_limit_in_bytes: {swap} is below memory_limit_in_bytes {limit} \
             (it counts memory plus swap)"
        )));
    }
    let mut memory = LinuxMemory::default();
    memory.set_limit(Some(limit));
    if host.swap_limit {
        memory.set_swap(Some(if swap == 0 { limit } else { swap }));
    }
    Ok(Some(memory))
}

fn hugepages(
    r: &Resources,
    host: &HostFeatures,
) -> Result<Option<Vec<LinuxHugepageLimit>>, SpecError> {
    if r.hugepage_limits.is_empty() {
        return Ok(None);
    }
    let limits = r.hugepage_limits.iter().map(|h| {
        if !is_page_size(&h.page_size) {
            return Err(SpecError::Invalid(format!(
                "hugepage_limits: {:?} is not a page size (a number and KB, MB or GB, as \"2MB\")",
                h.page_size
            )));
        }
        let limit = i64::try_from(h.limit).map_err(|_| {
            SpecError::Invalid(format!(
                "hugepage_limits[{}]: {} is too large",
                h.page_size, h.limit
            ))
        })?;
        let mut out = LinuxHugepageLimit::default();
        out.set_page_size(h.page_size.clone()).set_limit(limit);
        Ok(out)
    });
    let limits = limits.collect::<Result<Vec<_>, _>>()?;
    if !host.hugetlb {
        tracing::debug!("no hugetlb controller for containers: hugepage limits left out");
        return Ok(None);
    }
    Ok(Some(limits))
}

fn unified(
    r: &Resources,
    host: &HostFeatures,
) -> Result<Option<std::collections::HashMap<String, String>>, SpecError> {
    if r.unified.is_empty() {
        return Ok(None);
    }
    if !host.cgroup_v2 {
        let keys: Vec<&str> = r.unified.keys().map(String::as_str).collect();
        return Err(SpecError::HostLacks(format!(
            "unified: cgroup v2 settings ({}) need a cgroup v2 host; this one runs cgroup v1",
            keys.join(", ")
        )));
    }
    if let Some(key) = r.unified.keys().find(|k| !is_unified_key(k)) {
        return Err(SpecError::Invalid(format!(
            "unified: {key:?} is not a cgroup v2 interface file crust may write \
             (a file name as \"memory.high\", none of cgroup.procs, cgroup.threads, \
             cgroup.kill, cgroup.freeze, cgroup.type, cgroup.subtree_control)"
        )));
    }
    Ok(Some(r.unified.clone().into_iter().collect()))
}

/// A page size as the kernel names it in hugetlb files (`2MB`, `1GB`, `64KB`). The size becomes
/// part of a file name in the cgroup, so nothing else may pass.
fn is_page_size(size: &str) -> bool {
    let digits = size.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &size[digits.len()..];
    !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && ["KB", "MB", "GB"].contains(&unit)
}

/// A `unified` key is written as a file of the container's cgroup: a plain interface file
/// name (`controller.file`), never a path out of the cgroup, and none of the files that move,
/// kill or freeze processes or reshape the tree, which belong to the runtime.
fn is_unified_key(key: &str) -> bool {
    const RUNTIME_OWNED: &[&str] = &[
        "cgroup.procs",
        "cgroup.threads",
        "cgroup.kill",
        "cgroup.freeze",
        "cgroup.type",
        "cgroup.subtree_control",
    ];
    let plain = key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    plain && key.contains('.') && !key.starts_with('.') && !RUNTIME_OWNED.contains(&key)
}

/// The device cgroup rules, in order: deny all, then allow.
fn device_rules(
    devices: &[DeviceNode],
    privileged: bool,
) -> Result<Vec<LinuxDeviceCgroup>, SpecError> {
    if privileged {
        return Ok(vec![rule(true, None, None, None, "rwm")]);
    }
    let mut rules = vec![rule(false, None, None, None, "rwm")];
    for &(major, minor) in STANDARD_DEVICES {
        rules.push(rule(
            true,
            Some(LinuxDeviceType::C),
            Some(major),
            minor,
            "rwm",
        ));
    }
    for device in devices {
        let kind = device_type(device)?;
        let access = permissions(device)?;
        rules.push(rule(
            true,
            Some(kind),
            Some(device.major),
            Some(device.minor),
            &access,
        ));
    }
    Ok(rules)
}

/// The device nodes to create in the container's /dev: one per container path, the first
/// listed winning (request devices come before the host's when privileged).
pub(crate) fn linux_devices(devices: &[DeviceNode]) -> Result<Vec<LinuxDevice>, SpecError> {
    let mut out: Vec<LinuxDevice> = Vec::with_capacity(devices.len());
    for device in devices {
        if !device.container_path.starts_with('/') {
            return Err(SpecError::Invalid(format!(
                "devices: container path {:?} is not absolute",
                device.container_path
            )));
        }
        if out
            .iter()
            .any(|d| d.path().as_os_str() == device.container_path.as_str())
        {
            continue;
        }
        let mut node = LinuxDevice::default();
        node.set_path(device.container_path.clone().into())
            .set_typ(device_type(device)?)
            .set_major(device.major)
            .set_minor(device.minor)
            .set_file_mode(Some(device.file_mode & 0o7777))
            .set_uid(Some(device.uid))
            .set_gid(Some(device.gid));
        out.push(node);
    }
    Ok(out)
}

fn device_type(device: &DeviceNode) -> Result<LinuxDeviceType, SpecError> {
    match device.kind {
        'c' => Ok(LinuxDeviceType::C),
        'b' => Ok(LinuxDeviceType::B),
        'u' => Ok(LinuxDeviceType::U),
        'p' => Ok(LinuxDeviceType::P),
        other => Err(SpecError::Invalid(format!(
            "devices[{}]: {} is not a character or block device (type {other:?})",
            device.container_path, device.host_path
        ))),
    }
}

/// The cgroup permissions of a device: a non-empty combination of `r`, `w` and `m`; empty
/// means all three, as kubelet's default.
fn permissions(device: &DeviceNode) -> Result<String, SpecError> {
    let perms = device.permissions.trim();
    if perms.is_empty() {
        return Ok("rwm".into());
    }
    if !perms.chars().all(|c| matches!(c, 'r' | 'w' | 'm')) {
        return Err(SpecError::Invalid(format!(
            "devices[{}]: permissions {perms:?} are not a combination of r, w and m",
            device.container_path
        )));
    }
    Ok(["r", "w", "m"]
        .iter()
        .filter(|p| perms.contains(*p))
        .copied()
        .collect())
}

fn rule(
    allow: bool,
    kind: Option<LinuxDeviceType>,
    major: Option<i64>,
    minor: Option<i64>,
    access: &str,
) -> LinuxDeviceCgroup {
    let mut rule = LinuxDeviceCgroup::default();
    rule.set_allow(allow)
        .set_typ(kind)
        .set_major(major)
        .set_minor(minor)
        .set_access(Some(access.to_string()));
    rule
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::model::HugepageLimit;

    fn v2() -> HostFeatures {
        HostFeatures {
            cgroup_v2: true,
            swap_limit: true,
            hugetlb: true,
            ..Default::default()
        }
    }

    #[test]
    fn cri_figures_come_back_from_the_limits_they_made() {
        let r = Resources {
            cpu_period: 100_000,
            cpu_quota: 50_000,
            cpu_shares: 512,
            memory_limit: 64 << 20,
            memory_swap_limit: 96 << 20,
            cpuset_cpus: "0-1".into(),
            cpuset_mems: "0".into(),
            hugepage_limits: vec![HugepageLimit {
                page_size: "2MB".into(),
                limit: 4 << 20,
            }],
            unified: BTreeMap::from([("memory.high".into(), "max".into())]),
            ..Default::default()
        };
        assert_eq!(cri_resources(&container_resources(&r, &v2()).unwrap()), r);
        // Only what the limits set: a memory limit alone.
        let mut memory = LinuxResources::default();
        memory.set_memory(Some(*LinuxMemory::default().set_limit(Some(1 << 20))));
        let only = cri_resources(&memory);
        assert_eq!((only.memory_limit, only.cpu_shares), (1 << 20, 0));
    }

    #[test]
    fn pod_resources_add_the_overhead() {
        let pod = Resources {
            cpu_shares: 1024,
            cpu_period: 50_000,
            cpu_quota: 100_000,
            memory_limit: 256 << 20,
            ..Default::default()
        };
        let overhead = Resources {
            cpu_shares: 128,
            cpu_period: 100_000,
            cpu_quota: 20_000,
            memory_limit: 32 << 20,
            ..Default::default()
        };
        let r = pod_resources(&pod, &overhead, true).unwrap();
        let cpu = r.cpu().as_ref().unwrap();
        assert_eq!(cpu.shares(), Some(1152));
        assert_eq!((cpu.quota(), cpu.period()), (Some(110_000), Some(50_000)));
        let mem = r.memory().as_ref().unwrap();
        assert_eq!((mem.limit(), mem.swap()), (Some(288 << 20), None));
        // Figures the pod leaves unset stay unset: an overhead alone limits nothing.
        let r = pod_resources(&Resources::default(), &overhead, false).unwrap();
        assert_eq!((r.cpu(), r.memory()), (&None, &None));
        let bad = Resources {
            memory_limit: -1,
            ..Default::default()
        };
        assert!(pod_resources(&bad, &overhead, true).is_err());
        // kubelet's -1 quota: no CPU limit, overhead or not, on either hierarchy.
        let unlimited = Resources {
            cpu_quota: -1,
            cpu_period: 100_000,
            cpu_shares: 2,
            ..Default::default()
        };
        for v2 in [false, true] {
            let r = pod_resources(&unlimited, &overhead, v2).unwrap();
            let cpu = r.cpu().as_ref().unwrap();
            assert_eq!(
                (cpu.quota(), cpu.period(), cpu.shares()),
                (Some(-1), None, Some(130))
            );
        }
        let below = Resources {
            cpu_quota: -2,
            ..Default::default()
        };
        assert!(pod_resources(&below, &overhead, true).is_err());
        // unified needs v2, as for containers.
        let unified = Resources {
            unified: [("memory.high".to_owned(), "1".to_owned())].into(),
            ..Default::default()
        };
        assert!(pod_resources(&unified, &Resources::default(), false).is_err());
        assert!(pod_resources(&unified, &Resources::default(), true).is_ok());
    }

    #[test]
    fn maps_cpu_and_memory() {
        // (name, resources, host, want cpu (shares, quota, period, cpus, mems), want memory (limit, swap))
        type Cpu = Option<(
            Option<u64>,
            Option<i64>,
            Option<u64>,
            Option<&'static str>,
            Option<&'static str>,
        )>;
        type Mem = Option<(Option<i64>, Option<i64>)>;
        let no_swap_host = HostFeatures::default();
        let v2 = v2();
        let table: Vec<(&str, Resources, &HostFeatures, Cpu, Mem)> = vec![
            ("nothing set", Resources::default(), &v2, None, None),
            (
                "cpu",
                Resources {
                    cpu_shares: 512,
                    cpu_quota: 50_000,
                    cpu_period: 100_000,
                    ..Default::default()
                },
                &v2,
                Some((Some(512), Some(50_000), Some(100_000), None, None)),
                None,
            ),
            (
                "cpuset",
                Resources {
                    cpuset_cpus: "0-1".into(),
                    cpuset_mems: "0".into(),
                    ..Default::default()
                },
                &v2,
                Some((None, None, None, Some("0-1"), Some("0"))),
                None,
            ),
            (
                "limit alone means no swap",
                Resources {
                    memory_limit: 15 << 20,
                    ..Default::default()
                },
                &v2,
                None,
                Some((Some(15 << 20), Some(15 << 20))),
            ),
            (
                "memory plus swap",
                Resources {
                    memory_limit: 100,
                    memory_swap_limit: 300,
                    ..Default::default()
                },
                &v2,
                None,
                Some((Some(100), Some(300))),
            ),
            (
                "unlimited swap",
                Resources {
                    memory_limit: 100,
                    memory_swap_limit: -1,
                    ..Default::default()
                },
                &v2,
                None,
                Some((Some(100), Some(-1))),
            ),
            (
                "host cannot limit swap",
                Resources {
                    memory_limit: 100,
                    memory_swap_limit: 300,
                    ..Default::default()
                },
                &no_swap_host,
                None,
                Some((Some(100), None)),
            ),
            (
                "swap without a limit is ignored",
                Resources {
                    memory_swap_limit: 300,
                    ..Default::default()
                },
                &v2,
                None,
                None,
            ),
        ];
        for (name, r, host, want_cpu, want_mem) in table {
            let out = container_resources(&r, host).unwrap();
            let cpu = out.cpu().as_ref().map(|c| {
                (
                    c.shares(),
                    c.quota(),
                    c.period(),
                    c.cpus().clone(),
                    c.mems().clone(),
                )
            });
            let want_cpu =
                want_cpu.map(|(s, q, p, c, m)| (s, q, p, c.map(String::from), m.map(String::from)));
            assert_eq!(cpu, want_cpu, "{name}");
            let mem = out.memory().as_ref().map(|m| (m.limit(), m.swap()));
            assert_eq!(mem, want_mem, "{name}");
            assert_eq!(out.pids(), &None, "{name}");
            assert_eq!(out.devices(), &None, "{name}");
        }
    }

    #[test]
    fn refuses_bad_values() {
        let host = v2();
        let table: Vec<(Resources, &str)> = vec![
            (
                Resources {
                    cpu_shares: -2,
                    ..Default::default()
                },
                "cpu_shares: -2 is negative",
            ),
            (
                Resources {
                    cpu_period: -1,
                    ..Default::default()
                },
                "cpu_period: -1 is negative",
            ),
            (
                Resources {
                    memory_limit: -5,
                    ..Default::default()
                },
                "memory_limit_in_bytes: -5 is negative",
            ),
            (
                Resources {
                    memory_limit: 100,
                    memory_swap_limit: -2,
                    ..Default::default()
                },
                "memory_swap_limit_in_bytes: -2 is below -1 (unlimited)",
            ),
            (
                Resources {
                    memory_limit: 100,
                    memory_swap_limit: 50,
                    ..Default::default()
                },
                "memory_swap_limit_in_bytes: 50 is below memory_limit_in_bytes 100 (it counts memory plus swap)",
            ),
            (
                Resources {
                    hugepage_limits: vec![HugepageLimit {
                        page_size: "2MB".into(),
                        limit: u64::MAX,
                    }],
                    ..Default::default()
                },
                "hugepage_limits[2MB]: 18446744073709551615 is too large",
            ),
        ];
        for (r, want) in table {
            let err = container_resources(&r, &host).unwrap_err();
            assert!(!err.is_host_limit());
            assert_eq!(err.to_string(), want);
        }
    }

    #[test]
    fn hugepages_and_unified() {
        let r = Resources {
            hugepage_limits: vec![HugepageLimit {
                page_size: "2MB".into(),
                limit: 4 << 20,
            }],
            unified: BTreeMap::from([("memory.high".to_string(), "1G".to_string())]),
            ..Default::default()
        };
        let out = container_resources(&r, &v2()).unwrap();
        let huge = out.hugepage_limits().clone().unwrap();
        assert_eq!(
            (huge[0].page_size().as_str(), huge[0].limit()),
            ("2MB", 4 << 20)
        );
        assert_eq!(out.unified().as_ref().unwrap()["memory.high"], "1G");

        // Without a hugetlb controller the limits are left out (kubelet sends them anyway).
        let no_hugetlb = HostFeatures {
            hugetlb: false,
            ..v2()
        };
        let out = container_resources(&r, &no_hugetlb).unwrap();
        assert!(out.hugepage_limits().is_none());

        // Both become file names in the cgroup: nothing that leaves it or takes the
        // runtime's files.
        for key in [
            "../../cgroup.procs",
            "cgroup.procs",
            "memory",
            ".max",
            "a/b.max",
            "",
        ] {
            let bad = Resources {
                unified: BTreeMap::from([(key.to_string(), "1".to_string())]),
                ..Default::default()
            };
            let err = container_resources(&bad, &v2()).unwrap_err();
            assert!(!err.is_host_limit(), "{key}");
            assert!(err.to_string().starts_with("unified: "), "{err}");
        }
        for size in ["", "2", "MB", "2MB/../x", "../2MB", "2mb", "2 MB"] {
            let bad = Resources {
                hugepage_limits: vec![HugepageLimit {
                    page_size: size.into(),
                    limit: 1,
                }],
                ..Default::default()
            };
            let err = container_resources(&bad, &v2()).unwrap_err();
            assert!(err.to_string().starts_with("hugepage_limits: "), "{err}");
        }

        let v1 = HostFeatures::default();
        let err = container_resources(&r, &v1).unwrap_err();
        assert!(err.is_host_limit());
        assert_eq!(
            err.to_string(),
            "unified: cgroup v2 settings (memory.high) need a cgroup v2 host; this one runs cgroup v1"
        );
    }

    fn fuse(perms: &str) -> DeviceNode {
        DeviceNode {
            container_path: "/dev/fuse".into(),
            host_path: "/dev/fuse".into(),
            kind: 'c',
            major: 10,
            minor: 229,
            file_mode: 0o20666,
            uid: 0,
            gid: 0,
            permissions: perms.into(),
        }
    }

    /// allow, type, major, minor, access.
    type RuleSummary = (
        bool,
        Option<LinuxDeviceType>,
        Option<i64>,
        Option<i64>,
        String,
    );

    fn summary(rules: &[LinuxDeviceCgroup]) -> Vec<RuleSummary> {
        rules
            .iter()
            .map(|r| {
                (
                    r.allow(),
                    r.typ(),
                    r.major(),
                    r.minor(),
                    r.access().clone().unwrap_or_default(),
                )
            })
            .collect()
    }

    #[test]
    fn device_cgroup_rules() {
        let plain = device_rules(&[], false).unwrap();
        assert_eq!(
            summary(&plain[..1]),
            vec![(false, None, None, None, "rwm".to_string())]
        );
        assert_eq!(plain.len(), 1 + STANDARD_DEVICES.len());
        assert!(
            plain[1..]
                .iter()
                .all(|r| r.allow() && r.typ() == Some(LinuxDeviceType::C))
        );
        assert!(summary(&plain).contains(&(
            true,
            Some(LinuxDeviceType::C),
            Some(136),
            None,
            "rwm".into()
        )));

        let with_fuse = device_rules(&[fuse("mw r")], false);
        assert!(with_fuse.is_err());
        let with_fuse = device_rules(&[fuse("wr")], false).unwrap();
        assert_eq!(
            summary(&with_fuse).last().cloned(),
            Some((
                true,
                Some(LinuxDeviceType::C),
                Some(10),
                Some(229),
                "rw".to_string()
            ))
        );
        let default_perms = device_rules(&[fuse("")], false).unwrap();
        assert_eq!(
            summary(&default_perms).last().map(|r| r.4.clone()),
            Some("rwm".into())
        );

        let privileged = device_rules(&[fuse("r")], true).unwrap();
        assert_eq!(
            summary(&privileged),
            vec![(true, None, None, None, "rwm".to_string())]
        );
    }

    #[test]
    fn device_nodes() {
        let mut host_fuse = fuse("rwm");
        host_fuse.minor = 999;
        let nodes = linux_devices(&[fuse("r"), host_fuse]).unwrap();
        assert_eq!(nodes.len(), 1, "the first entry for a path wins");
        let node = &nodes[0];
        assert_eq!(
            (
                node.path().to_str(),
                node.typ(),
                node.major(),
                node.minor(),
                node.file_mode()
            ),
            (Some("/dev/fuse"), LinuxDeviceType::C, 10, 229, Some(0o666))
        );
        let mut bad = fuse("r");
        bad.kind = 'x';
        assert_eq!(
            linux_devices(&[bad]).unwrap_err().to_string(),
            "devices[/dev/fuse]: /dev/fuse is not a character or block device (type 'x')"
        );
        let mut relative = fuse("r");
        relative.container_path = "dev/fuse".into();
        assert!(linux_devices(&[relative]).is_err());
    }
}
