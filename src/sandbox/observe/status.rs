//! PodSandboxStatus and ListPodSandbox: copies of records, filtered, plus the verbose info.

use std::collections::BTreeMap;

use serde_json::json;

use crate::sandbox::model::SandboxRecord;
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
    /// The `verbose` info: where the pod's pieces live, for an operator debugging it.
    pub fn info(&self) -> serde_json::Value {
        let r = &self.record;
        json!({
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
            "config": r.spec,
        })
    }
}
