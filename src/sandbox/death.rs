//! Why a pod's monitor died, as far as the node can tell afterwards. The monitor is not the
//! daemon's child (it outlives daemon restarts), so its wait status is nobody's to read; what
//! is left is its own cgroup's OOM kill count and the last thing its log says.

use std::path::Path;

use super::CgroupSettings;
use super::model::SandboxRecord;

/// How a pod's monitor ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MonitorDeath {
    /// The kernel's OOM killer took it: the monitor is out of the pod's cgroup, so the node,
    /// or a cgroup above crust's, ran out of memory.
    OomKilled,
    /// It panicked: the panic's line from its log.
    Panicked(String),
    /// Neither is on record: a signal from outside (a SIGKILL) or a crash its log does not
    /// tell.
    Unexplained,
}

impl std::fmt::Display for MonitorDeath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MonitorDeath::OomKilled => f.write_str(
                "was OOM killed (the node, or a cgroup above the monitor's, ran out of memory)",
            ),
            MonitorDeath::Panicked(line) => write!(f, "panicked: {line}"),
            MonitorDeath::Unexplained => f.write_str(
                "was killed by a signal or crashed (its log shows no panic, and the kernel \
                 counted no OOM kill)",
            ),
        }
    }
}

/// What is known of the death of `record`'s monitor, read from its cgroup and its log.
pub fn monitor_death(cgroups: &CgroupSettings, record: &SandboxRecord) -> MonitorDeath {
    // A record without a cgroup of the monitor's own (an older crust's) counts the pod's
    // kills there: they are not the monitor's.
    if record.monitor_cgroup.is_some() {
        let dirs = cgroups.stat_dirs(record.monitor_cgroup());
        if crate::stats::oom_kills(&dirs) > 0 {
            return MonitorDeath::OomKilled;
        }
    }
    match panic_in_log(&record.dir.join(crate::monitor::LOG)) {
        Some(line) => MonitorDeath::Panicked(line),
        None => MonitorDeath::Unexplained,
    }
}

/// The last panic a log's tail reports: Rust's hook writes `thread '...' panicked at
/// <file>:<line>:<col>:` and the message on the next line.
fn panic_in_log(log: &Path) -> Option<String> {
    let text = crate::sys::read_tail(log, 8192).ok()?;
    panic_in(&text)
}

fn panic_in(text: &str) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let at = lines.iter().rposition(|l| l.contains(" panicked at "))?;
    let message = lines
        .get(at + 1)
        .filter(|l| !l.trim().is_empty() && !l.starts_with("note: "))
        .map(|l| format!(" {}", l.trim()))
        .unwrap_or_default();
    let line = format!("{}{message}", lines[at].trim());
    Some(line.chars().take(500).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_read_with_its_message() {
        let log = "INFO ready\nthread 'main' panicked at src/monitor/server.rs:12:5:\n\
                   index out of bounds\nnote: run with `RUST_BACKTRACE=1` to see a backtrace\n";
        assert_eq!(
            panic_in(log).as_deref(),
            Some("thread 'main' panicked at src/monitor/server.rs:12:5: index out of bounds")
        );
        assert_eq!(panic_in("INFO ready\nINFO container started\n"), None);
    }

    #[test]
    fn each_death_reads_as_a_sentence_after_the_monitor() {
        assert_eq!(
            format!("the monitor {}", MonitorDeath::Panicked("boom".into())),
            "the monitor panicked: boom"
        );
        assert!(
            MonitorDeath::OomKilled
                .to_string()
                .starts_with("was OOM killed")
        );
        assert!(
            MonitorDeath::Unexplained
                .to_string()
                .contains("no OOM kill")
        );
    }
}
