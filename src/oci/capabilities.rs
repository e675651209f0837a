//! A container's capability sets from its CRI request. They start from the set containerd gives
//! every container; `ALL` in `add` or `drop` applies first, then the individual names, so
//! `add: [ALL], drop: [CHOWN]` is everything but CAP_CHOWN and `drop: [ALL], add: [NET_ADMIN]`
//! is CAP_NET_ADMIN alone. A privileged container gets every capability.

use std::collections::HashSet;

use oci_spec::runtime::Capability;

use super::SpecError;
use crate::model::Capabilities;

/// Every capability crust knows, by its kernel name.
pub(crate) const ALL_CAPABILITIES: &[(&str, Capability)] = &[
    ("CAP_AUDIT_CONTROL", Capability::AuditControl),
    ("CAP_AUDIT_READ", Capability::AuditRead),
    ("CAP_AUDIT_WRITE", Capability::AuditWrite),
    ("CAP_BLOCK_SUSPEND", Capability::BlockSuspend),
    ("CAP_BPF", Capability::Bpf),
    ("CAP_CHECKPOINT_RESTORE", Capability::CheckpointRestore),
    ("CAP_CHOWN", Capability::Chown),
    ("CAP_DAC_OVERRIDE", Capability::DacOverride),
    ("CAP_DAC_READ_SEARCH", Capability::DacReadSearch),
    ("CAP_FOWNER", Capability::Fowner),
    ("CAP_FSETID", Capability::Fsetid),
    ("CAP_IPC_LOCK", Capability::IpcLock),
    ("CAP_IPC_OWNER", Capability::IpcOwner),
    ("CAP_KILL", Capability::Kill),
    ("CAP_LEASE", Capability::Lease),
    ("CAP_LINUX_IMMUTABLE", Capability::LinuxImmutable),
    ("CAP_MAC_ADMIN", Capability::MacAdmin),
    ("CAP_MAC_OVERRIDE", Capability::MacOverride),
    ("CAP_MKNOD", Capability::Mknod),
    ("CAP_NET_ADMIN", Capability::NetAdmin),
    ("CAP_NET_BIND_SERVICE", Capability::NetBindService),
    ("CAP_NET_BROADCAST", Capability::NetBroadcast),
    ("CAP_NET_RAW", Capability::NetRaw),
    ("CAP_PERFMON", Capability::Perfmon),
    ("CAP_SETFCAP", Capability::Setfcap),
    ("CAP_SETGID", Capability::Setgid),
    ("CAP_SETPCAP", Capability::Setpcap),
    ("CAP_SETUID", Capability::Setuid),
    ("CAP_SYSLOG", Capability::Syslog),
    ("CAP_SYS_ADMIN", Capability::SysAdmin),
    ("CAP_SYS_BOOT", Capability::SysBoot),
    ("CAP_SYS_CHROOT", Capability::SysChroot),
    ("CAP_SYS_MODULE", Capability::SysModule),
    ("CAP_SYS_NICE", Capability::SysNice),
    ("CAP_SYS_PACCT", Capability::SysPacct),
    ("CAP_SYS_PTRACE", Capability::SysPtrace),
    ("CAP_SYS_RAWIO", Capability::SysRawio),
    ("CAP_SYS_RESOURCE", Capability::SysResource),
    ("CAP_SYS_TIME", Capability::SysTime),
    ("CAP_SYS_TTY_CONFIG", Capability::SysTtyConfig),
    ("CAP_WAKE_ALARM", Capability::WakeAlarm),
];

/// What every unprivileged container starts with (containerd's and Docker's set).
pub(super) const DEFAULT_CAPABILITIES: &[Capability] = &[
    Capability::Chown,
    Capability::DacOverride,
    Capability::Fsetid,
    Capability::Fowner,
    Capability::Mknod,
    Capability::NetRaw,
    Capability::Setgid,
    Capability::Setuid,
    Capability::Setfcap,
    Capability::Setpcap,
    Capability::NetBindService,
    Capability::SysChroot,
    Capability::Kill,
    Capability::AuditWrite,
];

/// Keeps only what crust can hand out: "everything" (privileged, ALL) means everything crust
/// holds, while a capability asked for by name that crust lacks is an error naming it.
pub(super) fn limit_to(
    caps: &mut HashSet<Capability>,
    available: &HashSet<Capability>,
    request: &Capabilities,
) -> Result<(), SpecError> {
    for name in request.add.iter().chain(&request.add_ambient) {
        if name.trim().eq_ignore_ascii_case("ALL") {
            continue;
        }
        let cap = parse_capability(name)?;
        if !available.contains(&cap) {
            return Err(SpecError::HostLacks(format!(
                "capabilities.add: {name}: crust itself does not hold this capability, so it \
                 cannot give it to a container"
            )));
        }
    }
    caps.retain(|c| available.contains(c));
    Ok(())
}

/// A capability by name, with or without `CAP_`, in any case.
pub fn parse_capability(name: &str) -> Result<Capability, SpecError> {
    let upper = name.trim().to_ascii_uppercase();
    let full = if upper.starts_with("CAP_") {
        upper
    } else {
        format!("CAP_{upper}")
    };
    ALL_CAPABILITIES
        .iter()
        .find(|(known, _)| *known == full)
        .map(|(_, cap)| *cap)
        .ok_or_else(|| SpecError::Invalid(format!("unknown capability {name:?}")))
}

/// A name in a capability list: one capability, or `ALL`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Named {
    All,
    One(Capability),
}

fn named(field: &str, names: &[String]) -> Result<Vec<Named>, SpecError> {
    names
        .iter()
        .map(|name| {
            if name.trim().eq_ignore_ascii_case("ALL") {
                return Ok(Named::All);
            }
            parse_capability(name).map(Named::One).map_err(|_| {
                SpecError::Invalid(format!("capabilities.{field}: unknown capability {name:?}"))
            })
        })
        .collect()
}

fn ones(names: &[Named]) -> impl Iterator<Item = Capability> + '_ {
    names.iter().filter_map(|n| match n {
        Named::One(cap) => Some(*cap),
        Named::All => None,
    })
}

/// The bounding/effective/permitted set, and the ambient (and so inheritable) set.
pub(super) fn capability_sets(
    request: &Capabilities,
    privileged: bool,
) -> Result<(HashSet<Capability>, HashSet<Capability>), SpecError> {
    let add = named("add", &request.add)?;
    let drop = named("drop", &request.drop)?;
    let ambient_names = named("add_ambient", &request.add_ambient)?;
    if ambient_names.contains(&Named::All) {
        return Err(SpecError::Invalid(
            "capabilities.add_ambient: ALL is not allowed".into(),
        ));
    }
    let ambient: HashSet<Capability> = ones(&ambient_names).collect();
    let all = || ALL_CAPABILITIES.iter().map(|(_, cap)| *cap).collect();
    let mut caps: HashSet<Capability> = if privileged {
        all()
    } else {
        let mut caps = DEFAULT_CAPABILITIES.iter().copied().collect();
        if add.contains(&Named::All) {
            caps = all();
        }
        if drop.contains(&Named::All) {
            caps.clear();
        }
        caps.extend(ones(&add));
        for cap in ones(&drop) {
            caps.remove(&cap);
        }
        caps
    };
    // An ambient capability must also be permitted; asking for it is asking for both.
    caps.extend(&ambient);
    Ok((caps, ambient))
}
