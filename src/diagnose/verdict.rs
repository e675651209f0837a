//! The first line of a report: the cause, decided from the facts gathered, never from a fact
//! that was not read. The pod's own trouble (no sandbox, a dead monitor) comes before its
//! containers'; among containers the worst wins (an OOM kill, then a crash loop, then a
//! failed start or create, then an error exit).

use super::facts::{ContainerFacts, PodFacts, Verdict};
use crate::history::{Entry, Fact};
use crate::monitor::OomScope;

pub(super) fn decide(
    pod: &PodFacts,
    containers: &[ContainerFacts],
    timeline: &[Entry],
    focus: Option<&str>,
) -> Verdict {
    if focus.is_none() {
        if let Some(v) = pod_trouble(pod, timeline) {
            return v;
        }
    }
    let judged = latest_per_name(containers);
    let mut worst: Option<(u8, Verdict)> = judged
        .iter()
        .map(|c| judge(pod, c, timeline))
        .max_by_key(|(rank, _)| *rank);
    if focus.is_none() {
        if let Some(v) = create_failures(pod, containers, timeline) {
            if worst.as_ref().is_none_or(|(rank, _)| *rank < CREATE_FAILED) {
                worst = Some((CREATE_FAILED, v));
            }
        }
    }
    // A stopped pod's containers were stopped with it: the pod's stop is the news.
    let stopped_pod = pod.state == Some("stopped");
    match worst {
        Some((rank, v)) if rank > STOPPED || (rank > RUNNING && !stopped_pod) => v,
        _ => healthy(pod, &judged, focus.is_some()),
    }
}

const RUNNING: u8 = 0;
const CREATED: u8 = 1;
const COMPLETED: u8 = 1;
const STOPPED: u8 = 2;
const EXITED: u8 = 3;
const CREATE_FAILED: u8 = 4;
const START_FAILED: u8 = 4;
const CRASH_LOOP: u8 = 5;
const OOM_KILLED: u8 = 6;

/// Whose limit an OOM kill enforced, as the monitor read it from the cgroups at the exit (an
/// older record without it is told by whether the container had a limit of its own).
fn oom_by(pod: &PodFacts, scope: Option<&OomScope>, limit: Option<u64>) -> String {
    let own = limit.map_or(String::new(), |l| format!(" ({})", mib(l)));
    let not_own = if limit.is_some() {
        format!("its own{own} was not reached")
    } else {
        "it has none of its own".to_owned()
    };
    match scope {
        Some(OomScope::Container) => format!("by its own memory limit{own}"),
        Some(OomScope::Cgroup { dir, limit }) => {
            let whose = if pod.memory_cgroups.contains(dir) {
                "its pod's memory limit".to_owned()
            } else {
                format!("the memory limit of {}, above its pod", dir.display())
            };
            let of = limit.map_or(String::new(), |l| format!(" ({})", mib(l)));
            format!("by {whose}{of}: {not_own}")
        }
        Some(OomScope::Node) => format!(
            "by the node's OOM killer: no memory limit of its own or above it was reached ({not_own})"
        ),
        None if limit.is_some() => format!("by its own memory limit{own}"),
        None => "with no memory limit of its own (at its pod's or the node's limit)".to_owned(),
    }
}

fn verdict(kind: &'static str, summary: String) -> Verdict {
    Verdict { kind, summary }
}

/// A pod without a sandbox, or whose sandbox is not ready.
fn pod_trouble(pod: &PodFacts, timeline: &[Entry]) -> Option<Verdict> {
    let name = &pod.name;
    let last_sandbox_fact = timeline
        .iter()
        .rev()
        .find(|e| e.fact.container_name().is_none());
    match pod.state {
        None => match last_sandbox_fact.map(|e| &e.fact) {
            Some(Fact::SandboxFailed { step, error, .. }) => {
                let runs = pod.failed_runs;
                let times = if runs == 1 {
                    "once".to_owned()
                } else {
                    format!("{runs} times")
                };
                let network = step.contains("network");
                let what = if network {
                    "CNI ADD failed"
                } else {
                    "RunPodSandbox failed"
                };
                let kind = if network {
                    "network_failed"
                } else {
                    "sandbox_failed"
                };
                Some(verdict(
                    kind,
                    format!(
                        "pod {name} has no sandbox: {what} ({times}) at step \"{step}\": {error}"
                    ),
                ))
            }
            Some(Fact::SandboxRemoved) => Some(verdict(
                "removed",
                format!("pod {name} was removed (RemovePodSandbox); what follows is its history"),
            )),
            _ => Some(verdict(
                "unknown",
                format!("pod {name} has no sandbox record"),
            )),
        },
        Some("not ready") => {
            let died = timeline
                .iter()
                .rposition(|e| matches!(e.fact, Fact::MonitorDied { .. }));
            let problem = pod.problem.clone().unwrap_or_default();
            Some(match died {
                Some(at) => verdict("monitor_died", monitor_died(name, timeline, at)),
                None => verdict("not_ready", format!("pod {name} is not ready: {problem}")),
            })
        }
        _ => None,
    }
}

/// The story of a pod whose monitor died (`timeline[at]`): why, as far as is known, and the
/// containers that ended with it: the exits recorded after the death, and those recorded
/// just before it that crust made for that death (the daemon records a container it kills
/// for a dead monitor and the death itself from two tasks, in either order).
fn monitor_died(name: &str, timeline: &[Entry], at: usize) -> String {
    let since = &timeline[at..];
    let Some(Fact::MonitorDied { pid, cause }) = since.first().map(|e| &e.fact) else {
        return format!("pod {name} is not ready");
    };
    let for_this_death = format!("the pod's monitor (pid {pid})");
    let before = timeline[..at].iter().filter(|e| match &e.fact {
        Fact::ContainerExited { exit, .. } => exit.message.contains(&for_this_death),
        _ => false,
    });
    let how = if cause.is_empty() {
        "exited"
    } else {
        cause.as_str()
    };
    let took: Vec<&str> = before
        .chain(since.iter())
        .filter_map(|e| match &e.fact {
            Fact::ContainerExited { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    let with = match took.as_slice() {
        [] => "no container was running".to_owned(),
        names => format!(
            "its containers ended with it, killed by crust once it was gone: {}",
            names.join(", ")
        ),
    };
    format!("pod {name} is not ready: its monitor (pid {pid}) {how}; {with}")
}

/// The newest attempt of each container name (the facts are sorted by name, newest first).
fn latest_per_name(containers: &[ContainerFacts]) -> Vec<&ContainerFacts> {
    let mut out: Vec<&ContainerFacts> = Vec::new();
    for c in containers {
        if out.last().is_none_or(|l| l.name != c.name) {
            out.push(c);
        }
    }
    out
}

fn judge(pod: &PodFacts, c: &ContainerFacts, timeline: &[Entry]) -> (u8, Verdict) {
    let who = format!(
        "container {} ({}) of pod {}",
        c.name,
        short(&c.id),
        pod.name
    );
    let start_failed = timeline.iter().rev().find_map(|e| match &e.fact {
        Fact::ContainerStartFailed {
            container, error, ..
        } if *container == c.id => Some(error),
        _ => None,
    });
    let looping = c.exits_by_itself >= 2 || (c.attempt >= 1 && c.exits_by_itself >= 1);
    let recreated = if c.attempt == 1 {
        "kubelet re-created it once".to_owned()
    } else {
        format!("kubelet re-created it {} times", c.attempt)
    };
    let Some(exit) = &c.exit else {
        if let Some(error) = start_failed {
            return (
                START_FAILED,
                verdict("start_failed", format!("{who} failed to start: {error}")),
            );
        }
        if looping {
            // Between two exits kubelet's next container is created, then running.
            let again = if c.state == "running" {
                "running"
            } else {
                "created"
            };
            let last = last_exit(c, timeline).map(|l| format!("; the last exit: {l}"));
            let summary = format!(
                "{who} is crash looping: {again} again after exiting {} times by itself ({recreated}){}",
                c.exits_by_itself,
                last.unwrap_or_default()
            );
            return (CRASH_LOOP, verdict("crash_loop", summary));
        }
        if c.state == "created" {
            return (
                CREATED,
                verdict("created", format!("{who} is created and was never started")),
            );
        }
        return (RUNNING, verdict("running", format!("{who} is running")));
    };
    let how = describe_exit(exit, c.started_at);
    if exit.oom_killed {
        let by = oom_by(pod, exit.oom_scope.as_ref(), c.memory_limit);
        let again = if looping {
            format!(
                "; it has exited {} times by itself ({recreated})",
                c.exits_by_itself
            )
        } else {
            String::new()
        };
        return (
            OOM_KILLED,
            verdict("oom_killed", format!("{who} was OOM killed {by}{again}")),
        );
    }
    if let Some(timeout) = c.stopped_by_client {
        let summary =
            format!("{who} was stopped by the client (StopContainer, timeout {timeout} s): {how}");
        return (STOPPED, verdict("stopped", summary));
    }
    if looping {
        let summary = format!(
            "{who} is crash looping: it exited {} times by itself ({recreated}); the last exit: {how}",
            c.exits_by_itself
        );
        return (CRASH_LOOP, verdict("crash_loop", summary));
    }
    if exit.code == 0 {
        return (
            COMPLETED,
            verdict("completed", format!("{who} completed: {how}")),
        );
    }
    (
        EXITED,
        verdict("exited", format!("{who} exited by itself: {how}")),
    )
}

/// The last time a container of this name exited, as the history tells it.
fn last_exit(c: &ContainerFacts, timeline: &[Entry]) -> Option<String> {
    timeline.iter().rev().find_map(|e| match &e.fact {
        Fact::ContainerExited {
            name,
            started_at,
            exit,
            ..
        } if *name == c.name => Some(describe_exit(exit, *started_at)),
        _ => None,
    })
}

/// A create that failed for a container name with no newer create.
fn create_failures(
    pod: &PodFacts,
    containers: &[ContainerFacts],
    timeline: &[Entry],
) -> Option<Verdict> {
    let last = timeline.iter().rev().find(|e| {
        matches!(
            e.fact,
            Fact::ContainerCreateFailed { .. } | Fact::ContainerCreated { .. }
        )
    })?;
    let Fact::ContainerCreateFailed { name, error, .. } = &last.fact else {
        return None;
    };
    let created_since = containers
        .iter()
        .any(|c| c.name == *name && c.state != "exited");
    (!created_since).then(|| {
        verdict(
            "create_failed",
            format!(
                "container {name} of pod {} could not be created: {error}",
                pod.name
            ),
        )
    })
}

fn healthy(pod: &PodFacts, judged: &[&ContainerFacts], focused: bool) -> Verdict {
    let name = &pod.name;
    if pod.state == Some("stopped") {
        return verdict(
            "pod_stopped",
            format!("pod {name} is stopped (StopPodSandbox)"),
        );
    }
    let running = judged.iter().filter(|c| c.state == "running").count();
    let summary = match judged {
        [c] if focused && c.state == "running" => {
            format!(
                "container {} ({}) of pod {name} is running",
                c.name,
                short(&c.id)
            )
        }
        _ => format!(
            "pod {name} is healthy: ready, {running} of {} containers running",
            judged.len()
        ),
    };
    verdict("healthy", summary)
}

/// `exit code 1 (Error) after 0.2 s`, with the signal and the monitor's message when there are.
pub(super) fn describe_exit(exit: &crate::container::ExitInfo, started_at: i64) -> String {
    let mut s = format!("exit code {} ({})", exit.code, exit.reason());
    if let Some(sig) = exit.signal {
        let name = nix::sys::signal::Signal::try_from(sig)
            .map(|s| s.as_str().to_owned())
            .unwrap_or_else(|_| format!("signal {sig}"));
        s.push_str(&format!(", killed by {name}"));
    }
    if started_at > 0 && exit.finished_at >= started_at {
        s.push_str(&format!(
            " after {}",
            duration(exit.finished_at - started_at)
        ));
    }
    if !exit.message.is_empty() && !exit.oom_killed {
        s.push_str(&format!(": {}", exit.message));
    }
    s
}

pub(super) fn duration(nanos: i64) -> String {
    let secs = nanos as f64 / 1e9;
    if secs < 10.0 {
        format!("{secs:.1} s")
    } else if secs < 120.0 {
        format!("{secs:.0} s")
    } else if secs < 7200.0 {
        format!("{:.0} min", secs / 60.0)
    } else {
        format!("{:.1} h", secs / 3600.0)
    }
}

pub(super) fn mib(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / (1024.0 * 1024.0))
}

pub(super) fn short(id: &str) -> &str {
    &id[..id.len().min(13)]
}

#[cfg(test)]
mod tests;
