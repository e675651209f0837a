//! A container's OOM kills, seen as the kernel counts them rather than after its exit.
//!
//! With the systemd driver a container's cgroup is a transient scope, which systemd stops and
//! removes as soon as its last process exits: the kernel tells systemd the cgroup is empty
//! before the monitor even gets SIGCHLD, so `memory.events` read at the exit may already be
//! gone and an OOM kill would read as a plain SIGKILL ("Error"). So on cgroup v2 the monitor
//! watches the container's `memory.events` (the kernel notifies every change of it) from its
//! start, and remembers its `oom_kill` count while the file is still there.
//!
//! The watch can still lose: the kernel sends at most one notification per 10 ms for a file,
//! deferring the rest, so the `oom_kill` that follows a burst of `max` events may be announced
//! only after the scope is gone, and a busy monitor may not read in time. The parent's
//! `memory.events` (the pod's slice, which outlives the scope) counts its children's kills
//! too: when the container's own count vanished and it died of SIGKILL, a kill the parent
//! counted since the container's start that no other container of the pod was given is
//! this container's (kubelet gives each pod a slice of its own; pods sharing crust's default
//! parent share its count too).
//!
//! One inotify instance per running container, as containerd's shim has: they count against
//! fs.inotify.max_user_instances, and where none is left the exit reads the files as before.
//!
//! Whose limit a kill enforced (`OomScope`) is read the same way: the cgroup whose limit was
//! reached counts it: `oom` in `memory.events` (v2; `.local` for a cgroup above the
//! container), or on v1 the charges refused at its limit and whether its peak reached it
//! (`own_limit_hits`), compared with their values at the container's start. The closest
//! cgroup whose count rose is named; a kill that none counted is the node's.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use rustix::fs::inotify;
use serde::{Deserialize, Serialize};

/// Whose memory limit the kernel's OOM killer enforced when it killed a container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OomScope {
    /// The container reached its own limit.
    Container,
    /// A cgroup above the container (its pod's, or one kubelet put the pod in) reached its
    /// limit; the container's own was not reached.
    Cgroup {
        /// The memory cgroup's directory.
        dir: PathBuf,
        /// Its limit in bytes, as read at the exit.
        limit: Option<u64>,
    },
    /// No cgroup of the container reached its limit: the node ran out of memory.
    Node,
}

/// The highest counts read from the container's `memory.events` while it was there.
#[derive(Default, Clone, Copy)]
struct Seen {
    kills: u64,
    limit_hits: u64,
}

/// Watches one container's memory counters from its start; stops with the values.
pub struct OomWatch {
    seen: Rc<Cell<Seen>>,
    /// The watch of `memory.events` (cgroup v2, with an inotify instance to be had).
    task: Option<tokio::task::JoinHandle<()>>,
    dir: PathBuf,
    /// The parent's `memory.events`, its `oom_kill` count at the start, and the kills the
    /// pod's other containers had been given by then (cgroup v2).
    parent: Option<(PathBuf, u64, u64)>,
    /// The cgroups above the container, closest first, and the times each had reached its
    /// own limit by the container's start.
    above: Vec<(PathBuf, u64)>,
    /// The parent's count of limits reached below it by then (cgroup v2), for a container
    /// whose scope is gone before its own count could be read.
    below_parent: Option<(PathBuf, u64)>,
}

impl OomWatch {
    /// Starts on the container's memory cgroup `dir`; `attributed` is the pod's count of
    /// kills given to its containers so far. `memory.events` is watched where it exists
    /// (cgroup v2) and an inotify instance is to be had; else the exit reads the files as
    /// before (cgroup v1, whose memory cgroups crust removes itself after reading them).
    pub fn start(dir: &Path, attributed: u64) -> OomWatch {
        // Up to the hierarchy's root, whose files these are not (the limits that matter are
        // kubelet's: the pod's, its QoS class's and kubepods'); bounded against a deep tree.
        let above = dir
            .ancestors()
            .skip(1)
            .take(MAX_DEPTH)
            .map_while(|p| Some((p.to_owned(), own_limit_hits(p, true)?)))
            .collect::<Vec<_>>();
        // The parent's memory.events read once (v2): its kills, and its hierarchical limit
        // count less its local one, which `above` has just read.
        let parent_events = dir
            .parent()
            .and_then(|p| Some((p, std::fs::read_to_string(p.join("memory.events")).ok()?)));
        let local = above.first().map_or(0, |(_, hits)| *hits);
        let below_parent = parent_events
            .as_ref()
            .map(|(p, text)| (p.to_path_buf(), count(text, "oom").saturating_sub(local)));
        let parent = parent_events.map(|(p, text)| {
            (
                p.join("memory.events"),
                count(&text, "oom_kill"),
                attributed,
            )
        });
        let seen = Rc::new(Cell::new(Seen::default()));
        OomWatch {
            task: watch(&dir.join("memory.events"), seen.clone()),
            seen,
            dir: dir.to_owned(),
            parent,
            above,
            below_parent,
        }
    }

    /// The container's OOM kills, decided at its exit: its own count if the file is still
    /// there or was read after a kill; else, for a container killed by SIGKILL, the parent's
    /// new kills no other container of the pod was given (`attributed`: the pod's count now).
    pub fn kills_at_exit(&self, sigkill: bool, attributed: u64) -> u64 {
        let own = events_kill_count(&self.dir.join("memory.events"));
        let seen = self.seen.get().kills.max(own.unwrap_or(0));
        if seen > 0 || own.is_some() || !sigkill {
            return seen;
        }
        let Some((path, before, given_before)) = &self.parent else {
            return 0;
        };
        let now = events_kill_count(path).unwrap_or(*before);
        let others = attributed.saturating_sub(*given_before);
        now.saturating_sub(*before).saturating_sub(others).min(1)
    }

    /// Whose limit an OOM kill of the container enforced: its own if it reached it, else that
    /// of the closest cgroup above it that reached its own since the container's start, else
    /// the node's.
    pub fn scope_at_exit(&self) -> OomScope {
        let own = own_limit_hits(&self.dir, false);
        if own.unwrap_or(0).max(self.seen.get().limit_hits) > 0 {
            return OomScope::Container;
        }
        // A scope gone unread: a limit reached below the parent since the start was its.
        if let (None, Some((parent, before))) = (own, &self.below_parent) {
            if limit_hits_below(parent).is_some_and(|now| now > *before) {
                return OomScope::Container;
            }
        }
        self.above
            .iter()
            .find(|(dir, before)| own_limit_hits(dir, true).unwrap_or(0) > *before)
            .map_or(OomScope::Node, |(dir, _)| OomScope::Cgroup {
                dir: dir.clone(),
                limit: memory_limit(dir),
            })
    }
}

impl Drop for OomWatch {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Follows `events` (inotify tells every change of it) into `seen` until the cgroup is gone.
fn watch(events: &Path, seen: Rc<Cell<Seen>>) -> Option<tokio::task::JoinHandle<()>> {
    let fd = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK).ok()?;
    // Watched before the first read, so no change falls between the two.
    inotify::add_watch(&fd, events, inotify::WatchFlags::MODIFY).ok()?;
    let afd = crate::sys::async_fd(fd).ok()?;
    let path = events.to_owned();
    Some(tokio::task::spawn_local(async move {
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 512];
        loop {
            let Ok(text) = std::fs::read_to_string(&path) else {
                // The cgroup is gone: nothing more will be counted.
                return;
            };
            let was = seen.get();
            seen.set(Seen {
                kills: was.kills.max(count(&text, "oom_kill")),
                limit_hits: was.limit_hits.max(count(&text, "oom")),
            });
            let Ok(mut ready) = afd.readable().await else {
                return;
            };
            let mut reader = inotify::Reader::new(afd.get_ref(), &mut buf);
            while reader.next().is_ok() {}
            ready.clear_ready();
        }
    }))
}

/// The most cgroups above a container whose limits are watched.
const MAX_DEPTH: usize = 8;

/// The memory limit of cgroup `dir`: `memory.max` (v2) or `memory.limit_in_bytes` (v1, where
/// no limit reads as a page-rounded i64::MAX); None without one.
fn memory_limit(dir: &Path) -> Option<u64> {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    let text = read("memory.max").or_else(|| read("memory.limit_in_bytes"))?;
    text.trim().parse().ok().filter(|&l: &u64| l < 1 << 62)
}

/// How many times the memory cgroup `dir` itself reached its limit and had to OOM: `oom` of
/// `memory.events` (v2; `.local` for a cgroup with children, whose plain file counts theirs
/// too). On v1, which has no such count, the charges refused at its own limits
/// (`memory.failcnt`; the kernel does not count them for memory+swap) and one more for each
/// limit its peak usage reached (`max_usage_in_bytes`, which with a swap limit is all there
/// is to read). None where neither can be read.
fn own_limit_hits(dir: &Path, has_children: bool) -> Option<u64> {
    let events = if has_children {
        "memory.events.local"
    } else {
        "memory.events"
    };
    if let Ok(text) = std::fs::read_to_string(dir.join(events)) {
        return Some(count(&text, "oom"));
    }
    let number = |f: &str| -> Option<u64> {
        std::fs::read_to_string(dir.join(f))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let failcnt = number("memory.failcnt")?;
    let reached = |kind: &str| {
        let peak = number(&format!("memory.{kind}max_usage_in_bytes"));
        let limit = number(&format!("memory.{kind}limit_in_bytes"));
        u64::from(matches!((peak, limit), (Some(p), Some(l)) if p >= l))
    };
    Some(failcnt + reached("") + reached("memsw."))
}

/// How many times cgroups below `dir` reached their own limits (cgroup v2: the hierarchical
/// `oom` count less the local one); None on v1 or where the files cannot be read.
fn limit_hits_below(dir: &Path) -> Option<u64> {
    let read = |f: &str| Some(count(&std::fs::read_to_string(dir.join(f)).ok()?, "oom"));
    Some(read("memory.events")?.saturating_sub(read("memory.events.local")?))
}

/// The `oom_kill` count of a `memory.events` file; None when it cannot be read.
fn events_kill_count(events: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(events).ok()?;
    Some(count(&text, "oom_kill"))
}

/// Whether the kernel's OOM killer killed a process of the memory cgroup `dir`: the
/// `oom_kill` counter of `memory.events` (cgroup v2) or `memory.oom_control` (v1).
pub fn oom_kills(dir: &Path) -> bool {
    ["memory.events", "memory.oom_control"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(dir.join(f)).ok())
        .any(|text| count(&text, "oom_kill") > 0)
}

/// The `key` line of a flat-keyed file such as `memory.events` (v2) or `memory.oom_control`
/// (v1); 0 without one.
fn count(text: &str, key: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(dir: &Path, kills: u64) {
        std::fs::create_dir_all(dir).unwrap();
        let text = format!("low 0\nhigh 0\nmax 9\noom 1\noom_kill {kills}\noom_group_kill 0\n");
        std::fs::write(dir.join("memory.events"), text).unwrap();
    }

    /// A scope removed before the exit is read: the pod's slice decides, minus the kills its
    /// other containers were given.
    #[tokio::test(flavor = "current_thread")]
    async fn a_vanished_scope_falls_back_to_the_pod_s_count() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let tmp = tempfile::tempdir().unwrap();
                let (pod, scope) = (tmp.path(), tmp.path().join("c.scope"));
                events(pod, 2);
                events(&scope, 0);
                let w = OomWatch::start(&scope, 5);
                assert_eq!(w.kills_at_exit(true, 5), 0, "nothing counted yet");
                std::fs::remove_dir_all(&scope).unwrap();
                events(pod, 3);
                // Not SIGKILL: not an OOM kill, whatever the pod counted.
                assert_eq!(w.kills_at_exit(false, 5), 0);
                assert_eq!(w.kills_at_exit(true, 5), 1);
                // The pod's new kill went to another container already.
                assert_eq!(w.kills_at_exit(true, 6), 0);
                // While the scope is there its own count decides.
                events(&scope, 0);
                assert_eq!(w.kills_at_exit(true, 5), 0);
                events(&scope, 1);
                assert_eq!(w.kills_at_exit(false, 5), 1);
            })
            .await;
    }

    /// Whose limit: the container's own `oom` count, else the closest cgroup above it whose
    /// own count rose since the start (`.local` on v2, `memory.failcnt` on v1), else the node.
    #[tokio::test(flavor = "current_thread")]
    async fn the_cgroup_that_reached_its_limit_is_named() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let tmp = tempfile::tempdir().unwrap();
                let (qos, pod) = (
                    tmp.path().join("burstable"),
                    tmp.path().join("burstable/pod"),
                );
                let ctr = pod.join("c");
                std::fs::create_dir_all(&ctr).unwrap();
                let write = |dir: &Path, f: &str, text: &str| {
                    std::fs::write(dir.join(f), text).unwrap();
                };
                // cgroup v1 files: failcnt and limit_in_bytes.
                write(&qos, "memory.failcnt", "7\n");
                write(&pod, "memory.failcnt", "2\n");
                write(&pod, "memory.limit_in_bytes", "50331648\n");
                write(&ctr, "memory.failcnt", "0\n");
                let w = OomWatch::start(&ctr, 0);
                assert_eq!(w.scope_at_exit(), OomScope::Node, "no count rose");
                write(&qos, "memory.failcnt", "8\n");
                write(&pod, "memory.failcnt", "3\n");
                let pod_s = OomScope::Cgroup {
                    dir: pod.clone(),
                    limit: Some(48 << 20),
                };
                assert_eq!(w.scope_at_exit(), pod_s, "the closest one wins");
                write(&ctr, "memory.failcnt", "1\n");
                assert_eq!(w.scope_at_exit(), OomScope::Container);
            })
            .await;
    }

    /// cgroup v2, the container's scope removed before its exit was read: a limit reached
    /// below the pod's slice since the start is the container's, one of the slice's own is
    /// the pod's.
    #[tokio::test(flavor = "current_thread")]
    async fn a_vanished_scope_s_limit_is_read_from_its_parent() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let tmp = tempfile::tempdir().unwrap();
                let (slice, scope) = (tmp.path().to_owned(), tmp.path().join("c.scope"));
                let counts = |dir: &Path, hier: u64, local: u64| {
                    std::fs::create_dir_all(dir).unwrap();
                    let text = |n| format!("low 0\nhigh 0\nmax 0\noom {n}\noom_kill 0\n");
                    std::fs::write(dir.join("memory.events"), text(hier)).unwrap();
                    std::fs::write(dir.join("memory.events.local"), text(local)).unwrap();
                };
                counts(&slice, 3, 1);
                counts(&scope, 0, 0);
                let w = OomWatch::start(&scope, 0);
                std::fs::remove_dir_all(&scope).unwrap();
                counts(&slice, 4, 2);
                let slice_s = OomScope::Cgroup {
                    dir: slice.clone(),
                    limit: None,
                };
                assert_eq!(
                    w.scope_at_exit(),
                    slice_s,
                    "only the slice's own count rose"
                );
                counts(&slice, 5, 2);
                assert_eq!(w.scope_at_exit(), OomScope::Container);
            })
            .await;
    }
}
