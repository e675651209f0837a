//! The facts of a report, each read from one place: records, history, cgroup files, logs and
//! the node. What could not be read stays `None` (and out of the text).

use std::path::Path;

use serde::Serialize;

use super::{Inputs, Records, Subject};
use crate::container::{ContainerRecord, Phase as ContainerPhase};
use crate::history::{Entry, Fact};
use crate::sandbox::{Phase as PodPhase, SandboxRecord};

/// Log lines shown per container.
const LOG_LINES: usize = 5;
/// kubelet's default hard eviction thresholds (`imagefs.available<15%`, `pid.available`
/// is not set by default): the figures an operator compares against.
pub const KUBELET_IMAGEFS_EVICTION_PERCENT: f64 = 15.0;

#[derive(Debug, Serialize)]
pub struct Report {
    /// The cause, in one sentence: the report's first line.
    pub verdict: Verdict,
    #[serde(flatten)]
    pub facts: Facts,
}

/// Everything read about the subject.
#[derive(Debug, Serialize)]
pub struct Facts {
    pub pod: PodFacts,
    pub containers: Vec<ContainerFacts>,
    /// The pod's history, oldest first.
    pub timeline: Vec<Entry>,
    pub node: NodeFacts,
    pub runtime: RuntimeFacts,
}

#[derive(Debug, Serialize)]
pub struct Verdict {
    /// A stable word for scripts: healthy, sandbox_failed, network_failed, monitor_died,
    /// oom_killed, crash_loop, exited, completed, stopped, start_failed, created, pod_stopped.
    pub kind: &'static str,
    pub summary: String,
}

#[derive(Debug, Serialize)]
pub struct PodFacts {
    /// `namespace/name`.
    pub name: String,
    pub uid: Option<String>,
    /// The newest sandbox's id, when a record holds it.
    pub sandbox: Option<String>,
    /// ready, not ready, stopped, creating; none when no record is left.
    pub state: Option<&'static str>,
    pub created_at: Option<i64>,
    pub ip: Option<String>,
    pub problem: Option<String>,
    /// RunPodSandbox calls that failed, as the history has them.
    pub failed_runs: usize,
    pub cgroup: Option<CgroupFacts>,
    /// The memory cgroups whose limit is the pod's (see `CgroupSettings::pod_memory_dirs`).
    pub memory_cgroups: Vec<std::path::PathBuf>,
}

#[derive(Debug, Serialize)]
pub struct ContainerFacts {
    pub id: String,
    pub name: String,
    pub attempt: u32,
    pub state: &'static str,
    pub image: String,
    pub started_at: i64,
    pub exit: Option<crate::container::ExitInfo>,
    /// Its own memory limit in bytes, when it has one.
    pub memory_limit: Option<u64>,
    /// Times a container of this name exited by itself (not stopped by a client), in the
    /// history.
    pub exits_by_itself: usize,
    /// StopContainer's timeout, when a client stopped this container.
    pub stopped_by_client: Option<u64>,
    pub cgroup: Option<CgroupFacts>,
    pub log_path: Option<std::path::PathBuf>,
    pub log_tail: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct CgroupFacts {
    pub dir: String,
    pub memory_usage: u64,
    pub memory_working_set: u64,
    pub memory_limit: Option<u64>,
    pub tasks: u64,
    /// avg10 of `some` pressure, percent (cgroup v2 with PSI only).
    pub cpu_pressure: Option<f64>,
    pub memory_pressure: Option<f64>,
    pub io_pressure: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct NodeFacts {
    pub image_fs: Option<FsFacts>,
    /// Processes on the node and `kernel.pid_max`.
    pub pids: Option<(u64, u64)>,
    /// `MemAvailable` and `MemTotal` in bytes.
    pub memory: Option<(u64, u64)>,
}

#[derive(Debug, Serialize)]
pub struct FsFacts {
    pub path: std::path::PathBuf,
    pub capacity: u64,
    pub available: u64,
    pub available_percent: f64,
    /// crust refuses pulls below this (image.min_free_percent).
    pub crust_min_free_percent: u8,
}

#[derive(Debug, Serialize)]
pub struct RuntimeFacts {
    pub daemon_running: bool,
    /// Why the network is not ready (NetworkReady false), if it is not.
    pub network_problem: Option<String>,
}

pub(super) fn gather(inputs: &Inputs, records: &Records, subject: &Subject) -> Facts {
    let timeline = crate::history::read(&inputs.state, &subject.pod);
    let sandbox = subject.sandbox.clone().or_else(|| {
        records
            .pods
            .iter()
            .filter(|p| super::pod_name(p) == subject.pod)
            .max_by_key(|p| p.created_at)
            .cloned()
    });
    let mut containers: Vec<ContainerFacts> = records
        .containers
        .iter()
        .filter(|c| sandbox.as_ref().is_some_and(|s| s.id == c.pod_id))
        .filter(|c| subject.container.as_ref().is_none_or(|id| *id == c.id))
        .map(|c| container(inputs, c, &timeline))
        .collect();
    containers.sort_by_key(|c| (c.name.clone(), std::cmp::Reverse(c.attempt)));
    let pod = pod(inputs, &subject.pod, sandbox.as_ref(), &timeline);
    let runtime = RuntimeFacts {
        daemon_running: crate::daemon::daemon_running(&inputs.state),
        network_problem: crate::network::Cni::new(inputs.network.clone())
            .ready_now()
            .err()
            .map(|e| e.to_string()),
    };
    Facts {
        pod,
        containers,
        timeline,
        node: node(inputs),
        runtime,
    }
}

fn pod(inputs: &Inputs, name: &str, s: Option<&SandboxRecord>, timeline: &[Entry]) -> PodFacts {
    let failed_runs = timeline
        .iter()
        .filter(|e| matches!(e.fact, Fact::SandboxFailed { .. }))
        .count();
    let uid = s.map(|s| s.spec.metadata.uid.clone()).or_else(|| {
        timeline.iter().rev().find_map(|e| match &e.fact {
            Fact::SandboxReady { uid, .. } | Fact::SandboxFailed { uid, .. } => Some(uid.clone()),
            _ => None,
        })
    });
    PodFacts {
        name: name.to_owned(),
        uid,
        sandbox: s.map(|s| s.id.clone()),
        state: s.map(|s| match s.phase {
            PodPhase::Ready => "ready",
            PodPhase::Exited => "not ready",
            PodPhase::Stopped => "stopped",
            PodPhase::Creating => "creating",
        }),
        created_at: s.map(|s| s.created_at),
        ip: s.and_then(|s| s.ips().first().map(ToString::to_string)),
        problem: s.and_then(|s| s.problem.clone()),
        failed_runs,
        cgroup: s
            .filter(|s| s.phase.holds_resources())
            .and_then(|s| cgroup(inputs.cgroups.pod_stat_dirs(&s.cgroup))),
        memory_cgroups: s.map_or(Vec::new(), |s| {
            inputs
                .cgroups
                .pod_memory_dirs(&s.cgroup, &s.spec.cgroup_parent)
        }),
    }
}

fn container(inputs: &Inputs, c: &ContainerRecord, timeline: &[Entry]) -> ContainerFacts {
    let name = &c.spec.metadata.name;
    let stops: Vec<&str> = timeline
        .iter()
        .filter(|e| matches!(e.fact, Fact::StopRequested { .. }))
        .filter_map(|e| e.fact.container())
        .collect();
    let exits_by_itself = timeline
        .iter()
        .filter(|e| matches!(&e.fact, Fact::ContainerExited { name: n, .. } if n == name))
        .filter(|e| e.fact.container().is_some_and(|id| !stops.contains(&id)))
        .count();
    let stopped_by_client = timeline.iter().rev().find_map(|e| match &e.fact {
        Fact::StopRequested {
            container,
            timeout_secs,
            ..
        } if *container == c.id => Some(*timeout_secs),
        _ => None,
    });
    let limit = c.spec.resources.memory_limit;
    ContainerFacts {
        id: c.id.clone(),
        name: name.clone(),
        attempt: c.spec.metadata.attempt,
        state: c.state_name(),
        image: c.image.name.clone(),
        started_at: c.started_at,
        exit: c.exit.clone(),
        memory_limit: (limit > 0).then_some(limit as u64),
        exits_by_itself,
        stopped_by_client,
        cgroup: (c.phase == ContainerPhase::Running)
            .then(|| cgroup(inputs.cgroups.stat_dirs(&c.cgroup)))
            .flatten(),
        log_path: c.log_path.clone(),
        log_tail: c.log_path.as_deref().map(log_tail).unwrap_or_default(),
    }
}

fn cgroup(dirs: crate::stats::CgroupDirs) -> Option<CgroupFacts> {
    let sample = crate::stats::read_cgroup(&dirs, crate::stats::Detail::Stats, 0).ok()?;
    let dir = match &dirs {
        crate::stats::CgroupDirs::V2(d) => d.display().to_string(),
        crate::stats::CgroupDirs::V1 { memory, .. } => memory.display().to_string(),
    };
    let pressure = sample.pressure.as_ref();
    let avg10 = |p: Option<&crate::stats::Psi>| p.map(|p| p.some.avg10);
    Some(CgroupFacts {
        dir,
        memory_usage: sample.memory.usage,
        memory_working_set: sample.memory.working_set,
        memory_limit: sample.memory.limit,
        tasks: crate::stats::tasks(&dirs),
        cpu_pressure: pressure.and_then(|p| avg10(p.cpu.as_ref())),
        memory_pressure: pressure.and_then(|p| avg10(p.memory.as_ref())),
        io_pressure: pressure.and_then(|p| avg10(p.io.as_ref())),
    })
}

/// The last lines of a CRI log file (`<time> <stream> <tag> <text>`), as their text.
fn log_tail(path: &Path) -> Vec<String> {
    const TAIL_BYTES: u64 = 16 * 1024;
    let Ok(text) = crate::sys::read_tail(path, TAIL_BYTES) else {
        return Vec::new();
    };
    let lines: Vec<String> = text
        .lines()
        .filter_map(|l| l.splitn(4, ' ').nth(3).map(str::to_owned))
        .collect();
    lines[lines.len().saturating_sub(LOG_LINES)..].to_vec()
}

fn node(inputs: &Inputs) -> NodeFacts {
    let image_fs = crate::stats::filesystem(&inputs.root)
        .ok()
        .map(|f| FsFacts {
            path: inputs.root.clone(),
            capacity: f.capacity,
            available: f.available,
            available_percent: percent(f.available, f.capacity),
            crust_min_free_percent: inputs.min_free_percent,
        });
    let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let running = std::fs::read_dir("/proc").ok().map(|d| {
        d.flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .bytes()
                    .all(|b| b.is_ascii_digit())
            })
            .count() as u64
    });
    NodeFacts {
        image_fs,
        pids: running.zip(pid_max),
        memory: meminfo(),
    }
}

fn meminfo() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    };
    Some((field("MemAvailable:")?, field("MemTotal:")?))
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        return 0.0;
    }
    (part as f64) * 100.0 / (whole as f64)
}
