//! What this host offers containers, read once at start (AppArmor, SELinux, cgroup v2,
//! mount_setattr, the oom_score_adj crust may set), and the propagation of the mount a host
//! path sits on (read per request, since mounts change).

use std::path::Path;

use crate::oci::{HostFeatures, HostPropagation};

/// CAP_SYS_RESOURCE: lowering oom_score_adj below one's own needs it.
const CAP_SYS_RESOURCE: u32 = 24;

pub fn detect(cgroup_v2: bool, layers_dir: &Path, state_dir: &Path) -> HostFeatures {
    let no_user_namespaces = super::idmap::probe(layers_dir, state_dir).err();
    if let Some(why) = &no_user_namespaces {
        tracing::warn!(reason = %why, "pods with user namespaces (hostUsers: false) are refused");
    }
    HostFeatures {
        no_user_namespaces,
        cgroup_v2,
        apparmor_enabled: super::apparmor::enabled(),
        // SELinux is off unless its filesystem is mounted and enforcing or permissive.
        selinux_enabled: Path::new("/sys/fs/selinux/enforce").exists(),
        mount_setattr: crate::sys::has_mount_setattr(),
        min_oom_score_adj: min_oom_score_adj(
            &std::fs::read_to_string("/proc/self/status").unwrap_or_default(),
            std::fs::read_to_string("/proc/self/oom_score_adj")
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0),
        ),
        max_nofile: max_nofile(),
        available_caps: available_caps(
            &std::fs::read_to_string("/proc/self/status").unwrap_or_default(),
        ),
        cgroup_v1_binds: Vec::new(),
        mount_propagation: Default::default(),
        swap_limit: swap_limit(cgroup_v2),
        hugetlb: hugetlb(cgroup_v2),
        // Decided for each container, once crust's profile is known to be loaded.
        apparmor_default_profile: None,
        // The daemon sets them from its configuration.
        default_ulimits: Vec::new(),
    }
}

/// Whether the memory controller can limit swap (CONFIG_MEMCG_SWAP, and on v1 not disabled
/// by `swapaccount=0`).
fn swap_limit(cgroup_v2: bool) -> bool {
    if !cgroup_v2 {
        return Path::new("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes").exists();
    }
    // The v2 root has no memory files; this process's own cgroup does.
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    own.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .is_some_and(|rel| {
            Path::new("/sys/fs/cgroup")
                .join(rel.trim_start_matches('/'))
                .join("memory.swap.max")
                .exists()
        })
}

/// Whether containers' cgroups have the hugetlb controller: on v1 its own mounted hierarchy
/// (a hybrid host may mount it only in the unified tree); on v2 one the root lists.
fn hugetlb(cgroup_v2: bool) -> bool {
    if cgroup_v2 {
        return std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")
            .is_ok_and(|c| c.split_whitespace().any(|c| c == "hugetlb"));
    }
    Path::new("/sys/fs/cgroup/hugetlb/cgroup.procs").exists()
}

/// Capability names by number, as the kernel numbers them.
const CAPABILITIES: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// The capabilities this process can give its children: its bounding set.
fn available_caps(
    status: &str,
) -> Option<std::collections::HashSet<oci_spec::runtime::Capability>> {
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())?;
    Some(
        CAPABILITIES
            .iter()
            .enumerate()
            .filter(|(bit, _)| mask & (1 << bit) != 0)
            .filter_map(|(_, name)| crate::oci::parse_capability(name).ok())
            .collect(),
    )
}

/// The highest open-files limit this process may give a child: its own hard limit, unless it
/// may raise that (CAP_SYS_RESOURCE) up to the kernel's `nr_open`.
fn max_nofile() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if min_oom_score_adj(&status, 0) == -1000 {
        return std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
    }
    rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .maximum
        .unwrap_or(0)
}

/// The lowest oom_score_adj this process may give a child: anything with CAP_SYS_RESOURCE,
/// else not below its own.
fn min_oom_score_adj(status: &str, own: i64) -> i64 {
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    if effective & (1 << CAP_SYS_RESOURCE) != 0 {
        -1000
    } else {
        own
    }
}

/// The propagation of the mount `path` sits on, from `/proc/self/mountinfo`.
pub fn propagation_of(path: &Path) -> HostPropagation {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    propagation_in(&info, path)
}

fn propagation_in(mountinfo: &str, path: &Path) -> HostPropagation {
    let mut best: Option<(usize, HostPropagation)> = None;
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(mount_point) = fields.get(4) else {
            continue;
        };
        let mount_point = unescape(mount_point);
        if !path.starts_with(&mount_point) {
            continue;
        }
        // Optional fields run from index 6 to the "-" separator.
        let optional = fields
            .iter()
            .skip(6)
            .take_while(|f| **f != "-")
            .collect::<Vec<_>>();
        let propagation = if optional.iter().any(|f| f.starts_with("shared:")) {
            HostPropagation::Shared
        } else if optional.iter().any(|f| f.starts_with("master:")) {
            HostPropagation::Slave
        } else {
            HostPropagation::Private
        };
        // The longest mount point wins; a later line for the same point is mounted over it.
        let len = mount_point.as_os_str().len();
        if best.is_none_or(|(l, _)| len >= l) {
            best = Some((len, propagation));
        }
    }
    best.map_or(HostPropagation::Private, |(_, p)| p)
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(field: &str) -> std::path::PathBuf {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(u8::is_ascii_digit));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                let v = (d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0');
                out.push(v);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    let os: std::ffi::OsString = std::os::unix::ffi::OsStringExt::from_vec(out);
    std::path::PathBuf::from(os)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn available_capabilities_are_the_bounding_set() {
        use oci_spec::runtime::Capability;
        let caps = available_caps("CapBnd:\t000001fffeffffff\n").unwrap();
        assert!(caps.contains(&Capability::SysAdmin));
        assert!(!caps.contains(&Capability::SysResource));
        assert_eq!(caps.len(), 40);
        assert!(available_caps("").is_none());
    }

    #[test]
    fn oom_floor_follows_cap_sys_resource() {
        assert_eq!(min_oom_score_adj("CapEff:\t000001fffeffffff\n", 0), 0);
        assert_eq!(min_oom_score_adj("CapEff:\t000001ffffffffff\n", 0), -1000);
        assert_eq!(min_oom_score_adj("", 300), 300);
    }

    #[test]
    fn propagation_of_the_deepest_mount() {
        let info = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 0:25 / /mnt/private rw - tmpfs tmpfs rw
31 22 0:26 / /mnt/slave rw master:5 - tmpfs tmpfs rw
32 22 0:27 / /mnt/with\\040space rw shared:9 master:4 - tmpfs tmpfs rw
";
        assert_eq!(
            propagation_in(info, Path::new("/var/lib/x")),
            HostPropagation::Shared
        );
        assert_eq!(
            propagation_in(info, Path::new("/mnt/private/a")),
            HostPropagation::Private
        );
        assert_eq!(
            propagation_in(info, Path::new("/mnt/slave")),
            HostPropagation::Slave
        );
        assert_eq!(
            propagation_in(info, Path::new("/mnt/with space/b")),
            HostPropagation::Shared
        );
        assert_eq!(
            propagation_in(info, Path::new("/mnt/privatex")),
            HostPropagation::Shared
        );
    }
}
