//! Failpoints: named places in the daemon's verbs where a debug build can be made to die as if
//! SIGKILLed, to prove that a crash after any step leaves a state that recovery, Stop and
//! Remove finish (`tests/failpoints.rs`). Only debug builds have them: in a release build
//! `failpoint!` expands to nothing and nothing here is compiled in.
//!
//! `crust serve` reads `CRUST_FAILPOINT` once at start: `name` kills the daemon at the first
//! hit of that failpoint, `name@N` at the Nth. Every name used must be listed in [`NAMES`]
//! or [`MONITOR_NAMES`] (checked at compile time), and the tests walk those lists: a new
//! failpoint cannot be left out of them.

/// Every failpoint, in the order a pod's life reaches them (pull, run, create, start, remove,
/// stop, remove pod).
#[cfg(debug_assertions)]
pub const NAMES: &[&str] = &[
    "image.pull.after_blob",
    "image.pull.after_layer",
    "image.pull.before_record",
    "image.pull.after_record",
    "sandbox.run.after_creating_record",
    "sandbox.run.after_monitor",
    "sandbox.run.after_cni_add",
    "sandbox.run.after_cgroup",
    "sandbox.run.after_ready_record",
    "container.create.after_creating_record",
    "container.create.after_image_hold",
    "container.create.after_rootfs",
    "container.create.after_bundle",
    "container.create.after_libcontainer_create",
    "container.create.after_created_record",
    "container.start.after_start",
    "container.start.after_record",
    "container.remove.after_stop",
    "container.teardown.after_forget",
    "container.teardown.after_cgroup",
    "container.teardown.after_rootfs",
    "container.teardown.after_image_release",
    "sandbox.teardown.after_monitor",
    "sandbox.teardown.after_cgroup",
    "sandbox.teardown.after_cni_del",
    "sandbox.stop.before_record",
    "sandbox.remove.after_record_deleted",
    "sandbox.remove.after_dir",
];

/// Failpoints in the pod monitor (`crust monitor`, which inherits the daemon's environment):
/// the monitor dies there, the daemon lives on and must report and undo.
#[cfg(debug_assertions)]
pub const MONITOR_NAMES: &[&str] = &[
    "monitor.before_ready",
    "monitor.create.after_libcontainer",
    "monitor.start.after_start",
];

/// Kills the daemon here when `CRUST_FAILPOINT` names this place (debug builds only).
#[macro_export]
macro_rules! failpoint {
    ($name:literal) => {
        #[cfg(debug_assertions)]
        {
            const _: () = assert!(
                $crate::failpoint::known($name),
                concat!("failpoint ", $name, " is not listed in failpoint::NAMES")
            );
            $crate::failpoint::hit($name);
        }
    };
}

#[cfg(debug_assertions)]
mod armed {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// The armed failpoint and the hit that fires it.
    static ARMED: OnceLock<Option<(String, u32)>> = OnceLock::new();
    static HITS: AtomicU32 = AtomicU32::new(0);

    /// Reads `CRUST_FAILPOINT` (`name` or `name@N`); an unknown name is refused, so a typo
    /// cannot make a test pass without the crash it asked for.
    pub fn arm() -> Result<(), String> {
        let Ok(spec) = std::env::var("CRUST_FAILPOINT") else {
            let _ = ARMED.set(None);
            return Ok(());
        };
        let (name, nth) = match spec.split_once('@') {
            Some((n, k)) => (
                n,
                k.parse()
                    .map_err(|_| format!("bad hit count in {spec:?}"))?,
            ),
            None => (spec.as_str(), 1),
        };
        if !super::NAMES.contains(&name) && !super::MONITOR_NAMES.contains(&name) {
            return Err(format!("unknown failpoint {name:?}"));
        }
        tracing::warn!(failpoint = name, hit = nth, "failpoint armed");
        let _ = ARMED.set(Some((name.to_owned(), nth)));
        Ok(())
    }

    pub fn hit(name: &str) {
        let Some(Some((armed, nth))) = ARMED.get() else {
            return;
        };
        if armed != name || HITS.fetch_add(1, Ordering::SeqCst) + 1 != *nth {
            return;
        }
        eprintln!("crust: failpoint {name} reached: killing this process");
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        std::process::abort();
    }
}

#[cfg(debug_assertions)]
pub use armed::{arm, hit};

/// Whether `name` is in [`NAMES`]; const, so `failpoint!` checks its name at compile time.
#[cfg(debug_assertions)]
pub const fn known(name: &str) -> bool {
    listed(NAMES, name) || listed(MONITOR_NAMES, name)
}

#[cfg(debug_assertions)]
const fn listed(names: &[&str], name: &str) -> bool {
    let mut i = 0;
    while i < names.len() {
        if eq(names[i].as_bytes(), name.as_bytes()) {
            return true;
        }
        i += 1;
    }
    false
}

#[cfg(debug_assertions)]
const fn eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}
