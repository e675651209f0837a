//! Checks on a RunPodSandbox request before anything is created. Each failure names the field
//! and what is wrong with it; nothing from the request reaches a file path unchecked (ids do,
//! names never do).

use std::net::IpAddr;

use super::model::SandboxSpec;
use crate::model::NamespaceMode;

/// Longest name, uid or namespace accepted (a Kubernetes DNS subdomain's limit).
pub const MAX_NAME_LEN: usize = 253;
/// Linux HOST_NAME_MAX.
pub const MAX_HOSTNAME_LEN: usize = 64;

pub fn spec(spec: &SandboxSpec) -> Result<(), String> {
    let m = &spec.metadata;
    name_field("metadata.name", &m.name)?;
    name_field("metadata.uid", &m.uid)?;
    name_field("metadata.namespace", &m.namespace)?;
    hostname(&spec.hostname)?;
    if !spec.log_directory.is_empty() && !spec.log_directory.starts_with('/') {
        return Err(format!(
            "log_directory {:?} must be an absolute path",
            spec.log_directory
        ));
    }
    if spec.cgroup_parent.split('/').any(|c| c == "..") || has_control(&spec.cgroup_parent) {
        return Err(format!(
            "cgroup_parent {:?} is not a valid cgroup path",
            spec.cgroup_parent
        ));
    }
    namespaces(spec)?;
    if let Some(dns) = &spec.dns {
        for s in &dns.servers {
            s.parse::<IpAddr>()
                .map_err(|_| format!("dns_config.servers: {s:?} is not an IP address"))?;
        }
        for (field, list) in [("searches", &dns.searches), ("options", &dns.options)] {
            if let Some(bad) = list
                .iter()
                .find(|v| v.is_empty() || v.contains(char::is_whitespace))
            {
                return Err(format!(
                    "dns_config.{field}: {bad:?} is empty or has white space"
                ));
            }
        }
    }
    for p in &spec.port_mappings {
        if !(1..=65535).contains(&p.container_port) {
            return Err(format!(
                "port_mappings: container_port {} is out of range",
                p.container_port
            ));
        }
        if !(0..=65535).contains(&p.host_port) {
            return Err(format!(
                "port_mappings: host_port {} is out of range",
                p.host_port
            ));
        }
        if !p.host_ip.is_empty() && p.host_ip.parse::<IpAddr>().is_err() {
            return Err(format!(
                "port_mappings: host_ip {:?} is not an IP address",
                p.host_ip
            ));
        }
    }
    for (key, value) in &spec.sysctls {
        sysctl(spec, key, value)?;
    }
    Ok(())
}

fn name_field(field: &str, v: &str) -> Result<(), String> {
    if v.is_empty() {
        return Err(format!("{field} is required"));
    }
    if v.len() > MAX_NAME_LEN {
        return Err(format!(
            "{field} is {} bytes long; at most {MAX_NAME_LEN} are allowed",
            v.len()
        ));
    }
    // These flow into CNI_ARGS (`K=V;K=V`) and into log and cgroup names: only what a
    // Kubernetes name or uid can hold is let through.
    if !v.chars().all(name_char) || v.contains("..") {
        return Err(format!(
            "{field} {v:?} may hold only letters, digits, '-', '.' and '_' \
             (not '/', '..', ';', '=', white space or a control character)"
        ));
    }
    Ok(())
}

fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')
}

fn hostname(v: &str) -> Result<(), String> {
    if v.len() > MAX_HOSTNAME_LEN {
        return Err(format!(
            "hostname is {} bytes long; at most {MAX_HOSTNAME_LEN} are allowed",
            v.len()
        ));
    }
    if has_control(v) || v.contains('/') || v.contains(char::is_whitespace) {
        return Err(format!(
            "hostname {v:?} contains '/', white space or a control character"
        ));
    }
    Ok(())
}

fn has_control(v: &str) -> bool {
    v.chars().any(char::is_control)
}

fn namespaces(spec: &SandboxSpec) -> Result<(), String> {
    let ns = &spec.namespaces;
    if matches!(ns.network, NamespaceMode::Container | NamespaceMode::Target) {
        return Err("namespace_options.network must be POD or NODE for a pod".into());
    }
    if matches!(ns.ipc, NamespaceMode::Container | NamespaceMode::Target) {
        return Err("namespace_options.ipc must be POD or NODE for a pod".into());
    }
    if ns.pid == NamespaceMode::Target {
        return Err("namespace_options.pid TARGET applies to containers, not pods".into());
    }
    if spec.user_namespace {
        return Err(
            "namespace_options.userns_options: user namespaces are not supported yet".into(),
        );
    }
    Ok(())
}

/// Only namespaced sysctls are accepted, and only for namespaces the pod owns: anything else
/// would change the host.
fn sysctl(spec: &SandboxSpec, key: &str, value: &str) -> Result<(), String> {
    let path = sysctl_path(key);
    let bad_key = path.is_empty()
        || path
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
        || has_control(key);
    if bad_key {
        return Err(format!("sysctl {key:?} is not a valid sysctl name"));
    }
    if value.is_empty() || has_control(value) {
        return Err(format!(
            "sysctl {key}: value {value:?} is empty or has control characters"
        ));
    }
    let ns = &spec.namespaces;
    let ipc = path.starts_with("kernel/shm")
        || path.starts_with("kernel/msg")
        || path == "kernel/sem"
        || path.starts_with("fs/mqueue/");
    let owned = if ipc {
        ns.ipc != NamespaceMode::Node
    } else if path.starts_with("net/") || path == "kernel/hostname" || path == "kernel/domainname" {
        // The UTS namespace follows the network one: host network means host UTS.
        !ns.host_network()
    } else {
        return Err(format!(
            "sysctl {key} is not namespaced; setting it would change the host"
        ));
    };
    if !owned {
        return Err(format!(
            "sysctl {key} would change the host: the pod shares that namespace"
        ));
    }
    Ok(())
}

/// `net.ipv4.ip_forward` -> `net/ipv4/ip_forward`; names written with '/' already stay as they
/// are (so an interface name with a dot, `net/ipv4/conf/eth0.100/...`, keeps its dot).
pub fn sysctl_path(key: &str) -> String {
    if key.contains('/') {
        key.to_owned()
    } else {
        key.replace('.', "/")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::model::{PodMetadata, PortMapping, Protocol};

    fn good() -> SandboxSpec {
        SandboxSpec {
            metadata: PodMetadata {
                name: "web".into(),
                uid: "0d2f4c2e".into(),
                namespace: "default".into(),
                attempt: 0,
            },
            hostname: "web-1".into(),
            ..Default::default()
        }
    }

    fn err(f: impl FnOnce(&mut SandboxSpec)) -> String {
        let mut s = good();
        f(&mut s);
        spec(&s).unwrap_err()
    }

    #[test]
    fn good_spec_passes() {
        let mut s = good();
        s.sysctls
            .insert("kernel.shm_rmid_forced".into(), "1".into());
        s.sysctls
            .insert("net.ipv4.ip_unprivileged_port_start".into(), "0".into());
        s.sysctls.insert("fs.mqueue.msg_max".into(), "100".into());
        spec(&s).unwrap();
    }

    #[test]
    fn metadata_is_checked() {
        assert!(err(|s| s.metadata.name.clear()).contains("metadata.name is required"));
        assert!(err(|s| s.metadata.uid = "x".repeat(254)).contains("254 bytes"));
        assert!(err(|s| s.metadata.namespace = "a/b".into()).contains("'/'"));
        assert!(err(|s| s.metadata.name = "..".into()).contains("'..'"));
        assert!(err(|s| s.metadata.name = "a\nb".into()).contains("control"));
        // CNI_ARGS is `K=V;K=V`: a name must not add or split pairs.
        for bad in ["a;K8S_POD_NAME=b", "a=b", "a b", "a,b", "ä", "a:b"] {
            assert!(
                err(|s| s.metadata.name = bad.into()).contains("metadata.name"),
                "{bad}"
            );
            assert!(
                err(|s| s.metadata.uid = bad.into()).contains("metadata.uid"),
                "{bad}"
            );
            assert!(
                err(|s| s.metadata.namespace = bad.into()).contains("namespace"),
                "{bad}"
            );
        }
        let mut ok = good();
        ok.metadata.name = "kube-proxy-node_1.example".into();
        ok.metadata.uid = "6B29FC40-CA47-1067-B31D-00DD010662DA".into();
        spec(&ok).unwrap();
    }

    #[test]
    fn sysctls_must_be_namespaced_and_owned() {
        assert!(
            err(|s| {
                s.sysctls.insert("vm.swappiness".into(), "1".into());
            })
            .contains("not namespaced")
        );
        assert!(
            err(|s| {
                s.namespaces.network = NamespaceMode::Node;
                s.sysctls.insert("net.ipv4.ip_forward".into(), "1".into());
            })
            .contains("shares that namespace")
        );
        assert!(
            err(|s| {
                s.sysctls.insert("net/../../etc".into(), "1".into());
            })
            .contains("not a valid")
        );
        assert_eq!(
            sysctl_path("net/ipv4/conf/eth0.100/forwarding"),
            "net/ipv4/conf/eth0.100/forwarding"
        );
    }

    #[test]
    fn ports_dns_and_namespaces() {
        let pm = PortMapping {
            protocol: Protocol::Tcp,
            container_port: 0,
            host_port: 80,
            host_ip: String::new(),
        };
        assert!(err(|s| s.port_mappings.push(pm)).contains("container_port 0"));
        assert!(
            err(|s| s.dns = Some(crate::sandbox::model::DnsConfig {
                servers: vec!["8.8.8.8\nnameserver 1.1.1.1".into()],
                ..Default::default()
            }))
            .contains("not an IP")
        );
        assert!(err(|s| s.namespaces.network = NamespaceMode::Target).contains("network"));
        assert!(err(|s| s.user_namespace = true).contains("user namespaces"));
    }
}
