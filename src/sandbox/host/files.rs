//! The files a pod's containers will mount: `resolv.conf`, `hostname` and `hosts`, written into
//! the sandbox directory when the pod is created.

use std::fmt::Write;
use std::path::Path;

use crate::sandbox::model::{DnsConfig, SandboxSpec};

pub const RESOLV_CONF: &str = "resolv.conf";
pub const HOSTNAME: &str = "hostname";
pub const HOSTS: &str = "hosts";
/// The pod's `/dev/shm`: one tmpfs its containers share (they share its IPC namespace).
pub const SHM: &str = "shm";
/// The size of the pod's /dev/shm, as containerd and Docker give one.
const SHM_SIZE: &str = "size=65536k";

const DEFAULT_HOSTS: &str = "127.0.0.1\tlocalhost\n\
::1\tlocalhost ip6-localhost ip6-loopback\n\
fe00::0\tip6-localnet\n\
fe00::0\tip6-mcastprefix\n\
fe00::1\tip6-allnodes\n\
fe00::2\tip6-allrouters\n";

/// Writes the three files for `spec` into `dir`. `hostname` is the name the pod will carry.
pub fn write(dir: &Path, spec: &SandboxSpec, hostname: &str) -> std::io::Result<()> {
    let resolv = match &spec.dns {
        Some(dns) => resolv_conf(dns),
        // Without a DNS config the pod resolves names like the host, as containerd does.
        None => std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default(),
    };
    crate::durable::write(dir.join(RESOLV_CONF), resolv)?;
    crate::durable::write(dir.join(HOSTNAME), format!("{hostname}\n"))?;
    let hosts = if spec.namespaces.host_network() {
        std::fs::read_to_string("/etc/hosts").unwrap_or_else(|_| DEFAULT_HOSTS.to_owned())
    } else {
        DEFAULT_HOSTS.to_owned()
    };
    crate::durable::write(dir.join(HOSTS), hosts)
}

/// Mounts the pod's /dev/shm tmpfs at `<dir>/shm`.
pub fn mount_shm(dir: &Path) -> std::io::Result<()> {
    use crate::durable::mount;
    use nix::mount::MsFlags;
    let target = dir.join(SHM);
    crate::durable::create_dir_all(&target)?;
    mount(
        Some("shm"),
        &target,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some(format!("mode=1777,{SHM_SIZE}").as_str()),
    )?;
    Ok(())
}

/// Gives the pod's files and its `/dev/shm` to the root of its user namespace (`uid`, `gid`
/// on the host), so that root in the pod may change them as it may elsewhere.
pub fn give_to_pod_root(dir: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    for name in [RESOLV_CONF, HOSTNAME, HOSTS, SHM] {
        match std::os::unix::fs::chown(dir.join(name), Some(uid), Some(gid)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// Unmounts the pod's /dev/shm; one that is not mounted is fine.
pub fn unmount_shm(dir: &Path) -> std::io::Result<()> {
    use nix::errno::Errno;
    match crate::durable::umount2(dir.join(SHM), nix::mount::MntFlags::MNT_DETACH) {
        Ok(()) | Err(Errno::EINVAL | Errno::ENOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

pub fn resolv_conf(dns: &DnsConfig) -> String {
    let mut out = String::new();
    if !dns.searches.is_empty() {
        let _ = writeln!(out, "search {}", dns.searches.join(" "));
    }
    for s in &dns.servers {
        let _ = writeln!(out, "nameserver {s}");
    }
    if !dns.options.is_empty() {
        let _ = writeln!(out, "options {}", dns.options.join(" "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf_from_dns_config() {
        let dns = DnsConfig {
            servers: vec!["10.96.0.10".into(), "fd00::10".into()],
            searches: vec![
                "default.svc.cluster.local".into(),
                "svc.cluster.local".into(),
            ],
            options: vec!["ndots:5".into()],
        };
        assert_eq!(
            resolv_conf(&dns),
            "search default.svc.cluster.local svc.cluster.local\n\
             nameserver 10.96.0.10\nnameserver fd00::10\noptions ndots:5\n"
        );
    }

    #[test]
    fn files_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let spec = SandboxSpec {
            dns: Some(DnsConfig {
                servers: vec!["1.1.1.1".into()],
                ..Default::default()
            }),
            ..Default::default()
        };
        write(dir.path(), &spec, "pod-a").unwrap();
        let read = |f| std::fs::read_to_string(dir.path().join(f)).unwrap();
        assert_eq!(read(HOSTNAME), "pod-a\n");
        assert_eq!(read(RESOLV_CONF), "nameserver 1.1.1.1\n");
        assert!(read(HOSTS).starts_with("127.0.0.1\tlocalhost\n"));
    }
}
