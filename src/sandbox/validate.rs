//! Checks on a RunPodSandbox request before anything is created. Each failure names the field
//! and what is wrong with it; nothing from the request reaches a file path unchecked (ids do,
//! names never do).

use std::net::IpAddr;

use super::model::SandboxSpec;
use crate::model::{NamespaceMode, UserNsRequest};

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
    if let Some(userns) = &spec.userns {
        user_namespace(spec, userns)?;
    }
    Ok(())
}

/// A pod's user namespace: NODE takes no ranges; POD takes one uid and one gid range, from
/// container id 0, that fit in 32 bits, and its own network, IPC and PID (a namespace of the
/// node is owned by the node's user namespace: the pod's root would not own it).
fn user_namespace(spec: &SandboxSpec, u: &UserNsRequest) -> Result<(), String> {
    const FIELD: &str = "namespace_options.userns_options";
    match u.mode {
        NamespaceMode::Node if u.uids.is_empty() && u.gids.is_empty() => return Ok(()),
        NamespaceMode::Node => return Err(format!("{FIELD}: mode NODE takes no uids or gids")),
        NamespaceMode::Container | NamespaceMode::Target => {
            return Err(format!(
                "{FIELD}: mode {:?} is not supported; a pod's user namespace is POD or NODE",
                u.mode
            ));
        }
        NamespaceMode::Pod => {}
    }
    for (kind, list) in [("uids", &u.uids), ("gids", &u.gids)] {
        let [range] = list.as_slice() else {
            return Err(format!(
                "{FIELD}.{kind}: mode POD needs exactly one mapping, got {}",
                list.len()
            ));
        };
        if range.container != 0 {
            return Err(format!(
                "{FIELD}.{kind}: the mapping must start at container id 0, not {}",
                range.container
            ));
        }
        if range.size == 0 || range.host.checked_add(range.size).is_none() {
            return Err(format!(
                "{FIELD}.{kind}: length {} from host id {} is empty or past 2^32",
                range.size, range.host
            ));
        }
    }
    let ns = &spec.namespaces;
    // The node's network is allowed (KEP-5607, `user_namespaces_host_network`): the pod's
    // processes use it with no capability over it, and /sys is the node's, bound
    // (`oci::mounts`). Sharing the node's PID or IPC namespace would undo the isolation.
    for (kind, mode) in [("pid", ns.pid), ("ipc", ns.ipc)] {
        if mode == NamespaceMode::Node {
            return Err(format!(
                "{FIELD}: a pod in a user namespace cannot use the node's {kind} namespace"
            ));
        }
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
    }

    #[test]
    fn user_namespaces() {
        use crate::model::IdRange;
        let range = |container, host, size| IdRange {
            container,
            host,
            size,
        };
        let pod = |uids: Vec<IdRange>, gids: Vec<IdRange>| UserNsRequest {
            mode: NamespaceMode::Pod,
            uids,
            gids,
        };
        let one = || vec![range(0, 1000, 100000)];
        let with = |u: UserNsRequest| move |s: &mut SandboxSpec| s.userns = Some(u);
        let mut ok = good();
        ok.userns = Some(pod(one(), one()));
        spec(&ok).unwrap();
        ok.userns = Some(UserNsRequest::default());
        ok.userns.as_mut().unwrap().mode = NamespaceMode::Node;
        spec(&ok).unwrap();
        let two = vec![range(0, 1000, 100000), range(0, 2000, 100000)];
        assert!(err(with(pod(two.clone(), two))).contains("exactly one mapping, got 2"));
        assert!(err(with(pod(vec![range(1, 1000, 10)], one()))).contains("container id 0, not 1"));
        assert!(err(with(pod(one(), vec![range(0, 1000, 0)]))).contains("gids: length 0"));
        assert!(err(with(pod(one(), vec![range(0, u32::MAX, 2)]))).contains("past 2^32"));
        for mode in [NamespaceMode::Container, NamespaceMode::Target] {
            let u = UserNsRequest {
                mode,
                ..Default::default()
            };
            assert!(err(with(u)).contains("is not supported"));
        }
        let node_with_ranges = UserNsRequest {
            mode: NamespaceMode::Node,
            uids: one(),
            gids: vec![],
        };
        assert!(err(with(node_with_ranges)).contains("NODE takes no uids"));
        let host_pid = |s: &mut SandboxSpec| {
            s.userns = Some(pod(one(), one()));
            s.namespaces.pid = NamespaceMode::Node;
        };
        assert!(err(host_pid).contains("node's pid namespace"));
    }
}
