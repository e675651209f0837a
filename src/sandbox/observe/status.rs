//! PodSandboxStatus and ListPodSandbox: copies of records, filtered, plus the verbose info.

use std::collections::BTreeMap;

use serde_json::json;

use crate::model::Resources;
use crate::model::cri_json::{self, GoObject};
use crate::sandbox::model::{Phase, Protocol, SandboxRecord, SandboxSpec};
use crate::sandbox::{SandboxError, Sandboxes};

/// ListPodSandbox's filter; every field set must match.
#[derive(Debug, Default, Clone)]
pub struct SandboxFilter {
    /// A full id or an id prefix.
    pub id: Option<String>,
    pub ready: Option<bool>,
    pub labels: BTreeMap<String, String>,
}

impl SandboxFilter {
    /// Nothing to match: every object is listed.
    pub fn is_empty(&self) -> bool {
        let Self { id, ready, labels } = self;
        id.is_none() && ready.is_none() && labels.is_empty()
    }

    fn matches(&self, r: &SandboxRecord) -> bool {
        self.id
            .as_ref()
            .is_none_or(|id| r.id.starts_with(id.as_str()))
            && self.ready.is_none_or(|ready| r.phase.is_ready() == ready)
            && self
                .labels
                .iter()
                .all(|(k, v)| r.spec.labels.get(k) == Some(v))
    }
}

/// A sandbox as status and list report it.
pub struct SandboxView {
    pub record: std::sync::Arc<SandboxRecord>,
    pub ready: bool,
}

impl Sandboxes {
    pub fn status(&self, id: &str) -> Result<SandboxView, SandboxError> {
        let record = self.get(id)?;
        Ok(SandboxView {
            ready: record.phase.is_ready(),
            record,
        })
    }

    /// Sandboxes matching `filter`, oldest first.
    pub fn list(&self, filter: &SandboxFilter) -> Vec<SandboxView> {
        let entries: Vec<_> = self.table().by_id.values().cloned().collect();
        let mut out: Vec<SandboxView> = entries
            .iter()
            .map(|e| e.snapshot())
            .filter(|r| filter.matches(r))
            .map(|record| SandboxView {
                ready: record.phase.is_ready(),
                record,
            })
            .collect();
        out.sort_by_key(|v| v.record.created_at);
        out
    }
}

impl SandboxView {
    /// The `verbose` info: where the pod's pieces live, for an operator debugging it, beside
    /// the keys node agents read in containerd's (`SandboxInfo`,
    /// `internal/cri/server/podsandbox/types/sandbox_info.go`) that crust has a true value for:
    /// `pid`, `processStatus`, `netNamespaceClosed`, `runtimeHandler`, `config` (the CRI
    /// PodSandboxConfig) and `cniResult` (go-cni's shape). crust's own record of the request is
    /// `crustSpec`; `cni.result` is the CNI result as the plugin printed it.
    pub fn info(&self) -> serde_json::Value {
        let r = &self.record;
        json!({
            "pid": self.pid(),
            "processStatus": process_status(r.phase),
            // As containerd's: the pod's own network namespace is gone (never for host network).
            "netNamespaceClosed": !r.spec.namespaces.host_network()
                && r.pins.net.as_ref().is_none_or(|p| !p.exists()),
            "phase": r.phase,
            "problem": r.problem,
            "runtimeHandler": r.runtime_handler,
            "monitor": r.monitor,
            "namespaces": r.pins,
            "cgroup": r.cgroup,
            "monitorCgroup": r.monitor_cgroup(),
            "sandboxDir": r.dir,
            "cni": r.network.as_ref().map(|n| json!({
                "network": n.list.name,
                "config": n.list.source,
                "netns": n.attachment.netns,
                "portMappings": n.attachment.port_mappings,
                "result": n.result.as_ref().map(|res| &res.raw),
            })),
            "cniResult": r.network.as_ref().and_then(|n| {
                n.result.as_ref().map(|res| res.go_cni(&n.attachment.ifname))
            }),
            "config": cri_config(&r.spec),
            "crustSpec": r.spec,
        })
    }

    /// What stands for containerd's pause process: the monitor, which holds the pod's network,
    /// IPC and UTS namespaces; 0 once it is gone, as containerd's is for a stopped sandbox.
    fn pid(&self) -> i32 {
        match (&self.record.monitor, self.record.phase) {
            (Some(m), Phase::Ready) => m.pid,
            _ => 0,
        }
    }
}

/// containerd's `processStatus`: its sandbox task's status.
fn process_status(phase: Phase) -> &'static str {
    match phase {
        Phase::Creating => "created",
        Phase::Ready => "running",
        Phase::Exited | Phase::Stopped => "stopped",
    }
}

/// CRI `PodSandboxConfig` as containerd shows it (see `crate::model::cri_json`), from what crust
/// recorded: of the pod's security context crust keeps only its namespace options and
/// `privileged`, so the rest (SELinux, run_as_user, seccomp...) is missing.
fn cri_config(spec: &SandboxSpec) -> serde_json::Value {
    let m = &spec.metadata;
    let dns = spec.dns.as_ref().map(|d| {
        GoObject::new()
            .field("servers", json!(d.servers))
            .field("searches", json!(d.searches))
            .field("options", json!(d.options))
    });
    let ports = spec.port_mappings.iter().map(|p| {
        let protocol = match p.protocol {
            Protocol::Tcp => 0,
            Protocol::Udp => 1,
            Protocol::Sctp => 2,
        };
        GoObject::new()
            .field("protocol", protocol)
            .field("container_port", p.container_port)
            .field("host_port", p.host_port)
            .field("host_ip", p.host_ip.as_str())
            .done()
    });
    let ns = &spec.namespaces;
    let namespaces = GoObject::new()
        .field("network", cri_json::namespace_mode(ns.network))
        .field("pid", cri_json::namespace_mode(ns.pid))
        .field("ipc", cri_json::namespace_mode(ns.ipc))
        .maybe("userns_options", spec.userns.as_ref().map(cri_json::userns));
    let sent = |r: &Resources| (*r != Resources::default()).then(|| cri_json::resources(r));
    let linux = GoObject::new()
        .field("cgroup_parent", spec.cgroup_parent.as_str())
        .message(
            "security_context",
            GoObject::new()
                .message("namespace_options", namespaces)
                .field("privileged", spec.privileged),
        )
        .field("sysctls", json!(spec.sysctls))
        .maybe("overhead", sent(&spec.overhead))
        .maybe("resources", sent(&spec.resources));
    GoObject::new()
        .message(
            "metadata",
            GoObject::new()
                .field("name", m.name.as_str())
                .field("uid", m.uid.as_str())
                .field("namespace", m.namespace.as_str())
                .field("attempt", m.attempt),
        )
        .field("hostname", spec.hostname.as_str())
        .field("log_directory", spec.log_directory.as_str())
        .maybe("dns_config", dns)
        .field("port_mappings", serde_json::Value::Array(ports.collect()))
        .field("labels", json!(spec.labels))
        .field("annotations", json!(spec.annotations))
        .message("linux", linux)
        .done()
}
