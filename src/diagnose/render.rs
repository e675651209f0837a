//! The text report: the cause, then the pod, its containers, the timeline, the node and the
//! runtime, one fact per line, only the facts that were read.

use std::fmt::Write;

use super::facts::{CgroupFacts, ContainerFacts, NodeFacts, PodFacts, Report, RuntimeFacts};
use super::verdict::{describe_exit, mib, short};
use crate::clock::rfc3339_millis;
use crate::history::{Entry, Fact};

pub(super) fn text(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", r.verdict.summary);
    let _ = writeln!(out);
    let f = &r.facts;
    pod(&mut out, &f.pod);
    for c in &f.containers {
        container(&mut out, c);
    }
    if !f.timeline.is_empty() {
        let _ = writeln!(out, "timeline (crust's history of the pod):");
        for e in &f.timeline {
            let _ = writeln!(out, "  {} {}", rfc3339_millis(e.at), line(e));
        }
    }
    node(&mut out, &f.node);
    runtime(&mut out, &f.runtime);
    out
}

fn pod(out: &mut String, p: &PodFacts) {
    let uid = p
        .uid
        .as_deref()
        .map(|u| format!(" (uid {u})"))
        .unwrap_or_default();
    let _ = writeln!(out, "pod {}{uid}", p.name);
    if let (Some(id), Some(state)) = (&p.sandbox, p.state) {
        let since = p
            .created_at
            .map(|t| format!(", created {}", rfc3339_millis(t)))
            .unwrap_or_default();
        let _ = writeln!(out, "  sandbox {}: {state}{since}", short(id));
    } else {
        let _ = writeln!(out, "  no sandbox record");
    }
    if let Some(ip) = &p.ip {
        let _ = writeln!(out, "  ip {ip}");
    }
    if let Some(problem) = &p.problem {
        let _ = writeln!(out, "  problem: {problem}");
    }
    if p.failed_runs > 0 {
        let _ = writeln!(out, "  RunPodSandbox failed {} time(s)", p.failed_runs);
    }
    if let Some(cg) = &p.cgroup {
        cgroup(out, cg);
    }
}

fn container(out: &mut String, c: &ContainerFacts) {
    let _ = writeln!(
        out,
        "container {} ({}, attempt {}): {}, image {}",
        c.name,
        short(&c.id),
        c.attempt,
        c.state,
        c.image
    );
    if let Some(exit) = &c.exit {
        let _ = writeln!(
            out,
            "  exited {}: {}",
            rfc3339_millis(exit.finished_at),
            describe_exit(exit, c.started_at)
        );
    }
    if c.exits_by_itself > 0 {
        let _ = writeln!(
            out,
            "  exits by itself (all attempts): {}",
            c.exits_by_itself
        );
    }
    if let Some(t) = c.stopped_by_client {
        let _ = writeln!(out, "  stopped by the client: StopContainer, timeout {t} s");
    }
    if let Some(limit) = c.memory_limit {
        let _ = writeln!(out, "  memory limit {}", mib(limit));
    }
    if let Some(cg) = &c.cgroup {
        cgroup(out, cg);
    }
    if let Some(path) = &c.log_path {
        let _ = writeln!(out, "  log {}", path.display());
        for l in &c.log_tail {
            let _ = writeln!(out, "  | {l}");
        }
    }
}

fn cgroup(out: &mut String, cg: &CgroupFacts) {
    let limit = cg
        .memory_limit
        .map(mib)
        .unwrap_or_else(|| "no limit".into());
    let _ = writeln!(
        out,
        "  cgroup {}: memory {} (working set {}) of {limit}, {} tasks",
        cg.dir,
        mib(cg.memory_usage),
        mib(cg.memory_working_set),
        cg.tasks
    );
    let psi: Vec<String> = [
        ("cpu", cg.cpu_pressure),
        ("memory", cg.memory_pressure),
        ("io", cg.io_pressure),
    ]
    .iter()
    .filter_map(|(n, v)| v.map(|v| format!("{n} {v:.2}%")))
    .collect();
    if !psi.is_empty() {
        let _ = writeln!(out, "  pressure (some, avg10): {}", psi.join(", "));
    }
}

fn line(e: &Entry) -> String {
    let sandbox = short(&e.sandbox);
    match &e.fact {
        Fact::SandboxReady { ip, attempt, .. } => {
            let ip = ip
                .as_deref()
                .map(|i| format!(", ip {i}"))
                .unwrap_or_default();
            format!("sandbox {sandbox} ready (attempt {attempt}{ip})")
        }
        Fact::SandboxFailed {
            step,
            error,
            attempt,
            ..
        } => {
            format!("RunPodSandbox (attempt {attempt}) failed at \"{step}\": {error}")
        }
        Fact::SandboxStopped => format!("sandbox {sandbox} stopped"),
        Fact::MonitorDied { pid, cause } if cause.is_empty() => {
            format!("sandbox {sandbox}: its monitor (pid {pid}) exited")
        }
        Fact::MonitorDied { pid, cause } => {
            format!("sandbox {sandbox}: its monitor (pid {pid}) {cause}")
        }
        Fact::SandboxRemoved => format!("sandbox {sandbox} removed"),
        Fact::StateLost { cause } => format!("sandbox {sandbox} ended: {cause}"),
        Fact::ContainerCreated {
            container,
            name,
            attempt,
            image,
            ..
        } => {
            format!(
                "container {name} created ({}, attempt {attempt}, image {image})",
                short(container)
            )
        }
        Fact::ContainerCreateFailed {
            name,
            attempt,
            error,
        } => {
            format!("container {name} (attempt {attempt}) could not be created: {error}")
        }
        Fact::ContainerStarted {
            container, name, ..
        } => {
            format!("container {name} started ({})", short(container))
        }
        Fact::ContainerStartFailed {
            container,
            name,
            error,
            ..
        } => {
            format!(
                "container {name} ({}) failed to start: {error}",
                short(container)
            )
        }
        Fact::StopRequested {
            container,
            name,
            timeout_secs,
        } => format!(
            "StopContainer {name} ({}), timeout {timeout_secs} s",
            short(container)
        ),
        Fact::ContainerExited {
            container,
            name,
            started_at,
            exit,
            ..
        } => format!(
            "container {name} ({}) exited: {}",
            short(container),
            describe_exit(exit, *started_at)
        ),
    }
}

fn node(out: &mut String, n: &NodeFacts) {
    let _ = writeln!(out, "node:");
    if let Some(fs) = &n.image_fs {
        let _ = writeln!(
            out,
            "  image filesystem {}: {:.1}% free ({} of {}); kubelet evicts under {:.0}% free by \
             default, crust refuses pulls under {}%",
            fs.path.display(),
            fs.available_percent,
            gib(fs.available),
            gib(fs.capacity),
            super::facts::KUBELET_IMAGEFS_EVICTION_PERCENT,
            fs.crust_min_free_percent
        );
    }
    if let Some((running, max)) = n.pids {
        let _ = writeln!(out, "  processes {running} of kernel.pid_max {max}");
    }
    if let Some((available, total)) = n.memory {
        let _ = writeln!(
            out,
            "  memory {} available of {}",
            gib(available),
            gib(total)
        );
    }
}

fn runtime(out: &mut String, r: &RuntimeFacts) {
    let daemon = if r.daemon_running {
        "crust is running"
    } else {
        "crust is not running: this report is read from its records alone"
    };
    let _ = writeln!(out, "runtime:\n  {daemon}");
    match &r.network_problem {
        None => {
            let _ = writeln!(
                out,
                "  network ready (a CNI configuration loads; a CNI 1.1 list's plugins pass STATUS)"
            );
        }
        Some(p) => {
            let _ = writeln!(out, "  network not ready: {p}");
        }
    }
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1024.0 * 1024.0 * 1024.0))
}
