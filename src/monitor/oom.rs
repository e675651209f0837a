//! A container's OOM kills, seen as the kernel counts them rather than after its exit.
//!
//! With the systemd driver a container's cgroup is a transient scope, which systemd stops and
//! removes as soon as its last process exits: the kernel tells systemd the cgroup is empty
//! before the monitor even gets SIGCHLD, so `memory.events` read at the exit may already be
//! gone and an OOM kill would read as a plain SIGKILL ("Error"). So on cgroup v2 the monitor
//! watches the container's `memory.events` (the kernel notifies every change of it) from its
//! start, and remembers an `oom_kill` count above zero while the file is still there.
//!
//! One inotify instance per running container, as containerd's shim has: they count against
//! fs.inotify.max_user_instances, and where none is left the exit reads the file as before.

use std::cell::Cell;
use std::path::Path;
use std::rc::Rc;

use rustix::fs::inotify;

/// Watches one container's `memory.events`; stops with the value.
pub struct OomWatch {
    seen: Rc<Cell<bool>>,
    task: tokio::task::JoinHandle<()>,
}

impl OomWatch {
    /// Watches `<dir>/memory.events` (cgroup v2). None where there is no such file (cgroup v1,
    /// whose memory cgroups crust removes itself after reading them) or no inotify to be had:
    /// the exit then reads the file as before.
    pub fn start(dir: &Path) -> Option<OomWatch> {
        let events = dir.join("memory.events");
        let fd =
            inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK).ok()?;
        // Watched before the first read, so no change falls between the two.
        inotify::add_watch(&fd, &events, inotify::WatchFlags::MODIFY).ok()?;
        let afd = crate::sys::async_fd(fd).ok()?;
        let seen = Rc::new(Cell::new(false));
        let flag = seen.clone();
        let task = tokio::task::spawn_local(async move {
            let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 512];
            loop {
                match oom_killed(&events) {
                    Some(true) => return flag.set(true),
                    Some(false) => {}
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
        Some(OomWatch { seen, task })
    }

    /// Whether an OOM kill was counted while the container's cgroup was there.
    pub fn seen(&self) -> bool {
        self.seen.get()
    }
}

impl Drop for OomWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether `memory.events` counts an OOM kill; None when it cannot be read.
fn oom_killed(events: &Path) -> Option<bool> {
    let text = std::fs::read_to_string(events).ok()?;
    Some(super::workloads::oom_kill_count(&text) > 0)
}
