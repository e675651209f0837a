//! PodSandboxStats and ListPodSandboxStats: the pod cgroup's cpu, memory and processes, and the
//! pod network namespace's interfaces (read through the monitor, which lives in it). Only ready
//! pods have stats: a stopped pod has no processes and no network left to measure.

use std::sync::Arc;

use crate::sandbox::model::SandboxRecord;
use crate::sandbox::status::SandboxFilter;
use crate::sandbox::{SandboxError, Sandboxes};
use crate::stats::{CgroupSample, Detail, Interface};

/// One pod's statistics.
pub struct PodStats {
    pub record: Arc<SandboxRecord>,
    pub cgroup: CgroupSample,
    /// The CNI interface first; None for host-network pods (their counters are the node's).
    pub interfaces: Option<Vec<Interface>>,
}

impl Sandboxes {
    pub fn stats(&self, id: &str) -> Result<PodStats, SandboxError> {
        let record = self.get(id)?;
        self.measure(record, Detail::Stats)
    }

    /// Stats of the ready sandboxes matching `filter`; a pod that stops while being measured
    /// is left out. `detail` says how much of the pod cgroup to read.
    pub fn list_stats(&self, filter: &SandboxFilter, detail: Detail) -> Vec<PodStats> {
        let filter = SandboxFilter {
            ready: Some(true),
            ..filter.clone()
        };
        self.list(&filter)
            .into_iter()
            .filter_map(|v| self.measure(v.record, detail).ok())
            .collect()
    }

    fn measure(
        &self,
        record: Arc<SandboxRecord>,
        detail: Detail,
    ) -> Result<PodStats, SandboxError> {
        let monitor = match (&record.monitor, record.phase.is_ready()) {
            (Some(m), true) => m.pid,
            _ => return Err(SandboxError::NotReady(record.id.clone())),
        };
        let timestamp = crate::sandbox::now_nanos();
        let dirs = self.context().cgroups.pod_stat_dirs(&record.cgroup);
        let mut cgroup = crate::stats::read_cgroup(&dirs, detail, timestamp).map_err(|e| {
            SandboxError::Stats {
                id: record.id.clone(),
                error: format!("cgroup {}: {e}", record.cgroup),
            }
        })?;
        if detail == Detail::Stats {
            cgroup.processes = crate::stats::tasks(&dirs);
        }
        self.cpu_rates.rate(&record.id, &mut cgroup);
        let interfaces = match &record.network {
            Some(net) => {
                let mut all = crate::stats::interfaces(monitor)
                    .map_err(|_| SandboxError::NotReady(record.id.clone()))?;
                // The interface CNI set up comes first: CRI's default interface.
                all.sort_by_key(|i| i.name != net.attachment.ifname);
                Some(all)
            }
            None => None,
        };
        Ok(PodStats {
            record,
            cgroup,
            interfaces,
        })
    }
}
