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
