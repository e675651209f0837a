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

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use rustix::fs::inotify;

/// Watches one container's `memory.events`; stops with the value.
pub struct OomWatch {
    /// The highest `oom_kill` count read while the file was there.
    seen: Rc<Cell<u64>>,
    task: tokio::task::JoinHandle<()>,
    events: PathBuf,
    /// The parent's `memory.events`, its `oom_kill` count at the start, and the kills the
    /// pod's other containers had been given by then.
    parent: Option<(PathBuf, u64, u64)>,
}

impl OomWatch {
    /// Watches `<dir>/memory.events` (cgroup v2); `attributed` is the pod's count of kills
    /// given to its containers so far. None where there is no such file (cgroup v1, whose
    /// memory cgroups crust removes itself after reading them) or no inotify to be had: the
    /// exit then reads the file as before.
    pub fn start(dir: &Path, attributed: u64) -> Option<OomWatch> {
        let events = dir.join("memory.events");
        let fd =
            inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK).ok()?;
        // Watched before the first read, so no change falls between the two.
        inotify::add_watch(&fd, &events, inotify::WatchFlags::MODIFY).ok()?;
        let afd = crate::sys::async_fd(fd).ok()?;
        let parent = dir.parent().map(|p| p.join("memory.events")).and_then(|p| {
            let count = events_kill_count(&p)?;
            Some((p, count, attributed))
        });
        let seen = Rc::new(Cell::new(0));
        let (count, path) = (seen.clone(), events.clone());
        let task = tokio::task::spawn_local(async move {
            let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 512];
            loop {
                match events_kill_count(&path) {
                    Some(n) => count.set(count.get().max(n)),
                    // The cgroup is gone: nothing more will be counted.
                    None => return,
                }
                let Ok(mut ready) = afd.readable().await else {
                    return;
                };
                let mut reader = inotify::Reader::new(afd.get_ref(), &mut buf);
                while reader.next().is_ok() {}
                ready.clear_ready();
            }
        });
        Some(OomWatch {
            seen,
            task,
            events,
            parent,
        })
    }

    /// The container's OOM kills, decided at its exit: its own count if the file is still
    /// there or was read after a kill; else, for a container killed by SIGKILL, the parent's
    /// new kills no other container of the pod was given (`attributed`: the pod's count now).
    pub fn kills_at_exit(&self, sigkill: bool, attributed: u64) -> u64 {
        let own = events_kill_count(&self.events);
        let seen = self.seen.get().max(own.unwrap_or(0));
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
}

impl Drop for OomWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The `oom_kill` count of a `memory.events` file; None when it cannot be read.
fn events_kill_count(events: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(events).ok()?;
    Some(oom_kill_count(&text))
}

/// Whether the kernel's OOM killer killed a process of the memory cgroup `dir`: the
/// `oom_kill` counter of `memory.events` (cgroup v2) or `memory.oom_control` (v1).
pub fn oom_kills(dir: &Path) -> bool {
    ["memory.events", "memory.oom_control"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(dir.join(f)).ok())
        .any(|text| oom_kill_count(&text) > 0)
}

/// The `oom_kill` line of `memory.events` (v2) or `memory.oom_control` (v1); 0 without one.
fn oom_kill_count(text: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .find(|(k, _)| *k == "oom_kill")
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
                let w = OomWatch::start(&scope, 5).unwrap();
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
}
