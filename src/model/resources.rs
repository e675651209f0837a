//! The resources of a container or a pod, as CRI's `LinuxContainerResources` gives them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HugepageLimit {
    /// e.g. `2MB`, `1GB`.
    pub page_size: String,
    pub limit: u64,
}

/// CRI `LinuxContainerResources`; zero means "not set", as in the protobuf.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    pub cpu_period: i64,
    pub cpu_quota: i64,
    pub cpu_shares: i64,
    pub memory_limit: i64,
    /// memory + swap, as CRI's `memory_swap_limit_in_bytes` (-1: unlimited swap).
    pub memory_swap_limit: i64,
    pub oom_score_adj: i64,
    pub cpuset_cpus: String,
    pub cpuset_mems: String,
    pub hugepage_limits: Vec<HugepageLimit>,
    /// cgroup v2 files and values, applied verbatim.
    pub unified: BTreeMap<String, String>,
}

impl Resources {
    /// These resources with an UpdateContainerResources request laid over them, as containerd
    /// and CRI-O merge one: each figure the update sets replaces the stored one, and a zero or
    /// empty field keeps it. kubelet's CPU manager (static policy) sends `cpuset_cpus` alone to
    /// every shared-pool container, and those keep their CPU and memory limits. A new memory
    /// limit without a swap figure limits swap to it, as at CreateContainer; `unified` keys and
    /// hugepage sizes are replaced one by one.
    pub fn updated_by(&self, update: &Resources) -> Resources {
        let pick = |new: i64, old: i64| if new != 0 { new } else { old };
        let text = |new: &String, old: &String| if new.is_empty() { old } else { new }.clone();
        let memory_swap_limit = match (update.memory_limit, update.memory_swap_limit) {
            (_, swap) if swap != 0 => swap,
            (limit, _) if limit != 0 => 0,
            _ => self.memory_swap_limit,
        };
        let mut hugepage_limits = self.hugepage_limits.clone();
        for limit in &update.hugepage_limits {
            hugepage_limits.retain(|h| h.page_size != limit.page_size);
            hugepage_limits.push(limit.clone());
        }
        let mut unified = self.unified.clone();
        unified.extend(update.unified.clone());
        Resources {
            cpu_period: pick(update.cpu_period, self.cpu_period),
            cpu_quota: pick(update.cpu_quota, self.cpu_quota),
            cpu_shares: pick(update.cpu_shares, self.cpu_shares),
            memory_limit: pick(update.memory_limit, self.memory_limit),
            memory_swap_limit,
            oom_score_adj: pick(update.oom_score_adj, self.oom_score_adj),
            cpuset_cpus: text(&update.cpuset_cpus, &self.cpuset_cpus),
            cpuset_mems: text(&update.cpuset_mems, &self.cpuset_mems),
            hugepage_limits,
            unified,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limited() -> Resources {
        Resources {
            cpu_period: 100_000,
            cpu_quota: 50_000,
            cpu_shares: 512,
            memory_limit: 64 << 20,
            memory_swap_limit: 128 << 20,
            oom_score_adj: 900,
            cpuset_cpus: "0-1".into(),
            cpuset_mems: "0".into(),
            hugepage_limits: vec![HugepageLimit {
                page_size: "2MB".into(),
                limit: 1 << 21,
            }],
            unified: [("memory.high".to_string(), "max".to_string())].into(),
        }
    }

    #[test]
    fn a_cpuset_only_update_keeps_every_other_figure() {
        let update = Resources {
            cpuset_cpus: "1".into(),
            ..Default::default()
        };
        let want = Resources {
            cpuset_cpus: "1".into(),
            ..limited()
        };
        assert_eq!(limited().updated_by(&update), want);
        assert_eq!(limited().updated_by(&Resources::default()), limited());
    }

    #[test]
    fn set_figures_replace_and_maps_merge_key_by_key() {
        let update = Resources {
            cpu_quota: 20_000,
            memory_limit: 96 << 20,
            hugepage_limits: vec![
                HugepageLimit {
                    page_size: "2MB".into(),
                    limit: 0,
                },
                HugepageLimit {
                    page_size: "1GB".into(),
                    limit: 1 << 30,
                },
            ],
            unified: [("memory.low".to_string(), "1024".to_string())].into(),
            ..Default::default()
        };
        let merged = limited().updated_by(&update);
        assert_eq!((merged.cpu_quota, merged.cpu_period), (20_000, 100_000));
        // A new memory limit alone: swap follows it (0 means "as much as memory").
        assert_eq!(
            (merged.memory_limit, merged.memory_swap_limit),
            (96 << 20, 0)
        );
        assert_eq!(merged.hugepage_limits, update.hugepage_limits);
        assert_eq!(merged.unified.len(), 2);
        let swap = Resources {
            memory_swap_limit: -1,
            ..Default::default()
        };
        assert_eq!(limited().updated_by(&swap).memory_swap_limit, -1);
        assert_eq!(limited().updated_by(&swap).memory_limit, 64 << 20);
    }
}
