//! Failpoints: named places in the daemon's verbs where a debug build can be made to die as if
//! SIGKILLed, to prove that a crash after any step leaves a state that recovery, Stop and
//! Remove finish (`tests/failpoints.rs`). Only debug builds have them: in a release build
//! `failpoint!` expands to nothing and nothing here is compiled in.
//!
//! `crust serve` reads `CRUST_FAILPOINT` once at start: `name` kills the daemon at the first
//! hit of that failpoint, `name@N` at the Nth. Every name used must be listed in [`NAMES`]
//! or [`MONITOR_NAMES`] (checked at compile time), and the tests walk those lists: a new
//! failpoint cannot be left out of them.
//!
//! Crash points come without anyone placing them: every durable step of the daemon
//! (`crate::durable`) is one. `CRUST_CRASH=<Method>:<N>` kills the daemon right after the Nth
//! durable step taken once the first `<Method>` RPC (a CRI method name, as `RunPodSandbox`)
//! arrived; `<Method>:0` kills nowhere and logs every step instead, with where it was taken,
//! so a test learns how many there are and walks them all (`tests/crash_points.rs`).
//!
//! A failpoint written with `failpoint_pause!` can also hold an async step open for a test:
//! `CRUST_FAILPOINT=name:pause` with `CRUST_FAILPOINT_DIR=<dir>` writes `<dir>/<name>.reached`
//! there, waits (without blocking the event loop) until `<dir>/<name>.release` exists, and
//! writes `<dir>/<name>.done` when the step it holds ends. Tests open a race window with it
//! and then wait on those files, never on time.

/// Every failpoint, in the order a pod's life reaches them (pull, run, create, start, remove,
/// stop, remove pod).
#[cfg(debug_assertions)]
pub const NAMES: &[&str] = &[
    "image.pull.blob_verified",
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
    "container.remove.after_tombstone",
    "container.reclaim.started",
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
    "monitor.create.before_worker",
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

/// Holds the async step around it at this place when a test asks (see the module docs); kills
/// like `failpoint!` when the failpoint is armed to kill. Evaluates to a guard: the step ends
/// when it drops.
#[cfg(debug_assertions)]
#[macro_export]
macro_rules! failpoint_pause {
    ($name:literal) => {{
        const _: () = assert!(
            $crate::failpoint::known($name),
            concat!("failpoint ", $name, " is not listed in failpoint::NAMES")
        );
        $crate::failpoint::hit($name);
        $crate::failpoint::pause($name).await
    }};
}

#[cfg(not(debug_assertions))]
#[macro_export]
macro_rules! failpoint_pause {
    ($name:literal) => {
        ()
    };
}

#[cfg(debug_assertions)]
mod armed {
    use std::path::PathBuf;
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// The armed failpoint, the hit that fires it, and whether it pauses instead of killing.
    static ARMED: OnceLock<Option<(String, u32, bool)>> = OnceLock::new();
    static HITS: AtomicU32 = AtomicU32::new(0);

    /// Reads `CRUST_FAILPOINT` (`name`, `name@N` or `name:pause`); an unknown name is refused,
    /// so a typo cannot make a test pass without the crash it asked for.
    pub fn arm() -> Result<(), String> {
        let Ok(spec) = std::env::var("CRUST_FAILPOINT") else {
            let _ = ARMED.set(None);
            return Ok(());
        };
        let (spec, pause) = match spec.strip_suffix(":pause") {
            Some(name) => (name.to_owned(), true),
            None => (spec, false),
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
        if pause && std::env::var_os("CRUST_FAILPOINT_DIR").is_none() {
            return Err("a pausing failpoint needs CRUST_FAILPOINT_DIR".into());
        }
        tracing::warn!(failpoint = name, hit = nth, pause, "failpoint armed");
        let _ = ARMED.set(Some((name.to_owned(), nth, pause)));
        Ok(())
    }

    pub fn hit(name: &str) {
        let Some(Some((armed, nth, false))) = ARMED.get() else {
            return;
        };
        if armed != name || HITS.fetch_add(1, Ordering::SeqCst) + 1 != *nth {
            return;
        }
        eprintln!("crust: failpoint {name} reached: killing this process");
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        std::process::abort();
    }

    /// Ends a paused step: says so in `<dir>/<name>.done`.
    pub struct Paused(Option<PathBuf>);

    impl Drop for Paused {
        fn drop(&mut self) {
            if let Some(done) = self.0.take() {
                let _ = std::fs::write(done, b"");
            }
        }
    }

    /// Waits at `name` while it is armed to pause: `.reached`, then `.release`, as the module
    /// docs say. Polls the release file: the monitor's event loop has one thread to keep.
    pub async fn pause(name: &str) -> Paused {
        let Some(Some((armed, _, true))) = ARMED.get() else {
            return Paused(None);
        };
        let Some(dir) = std::env::var_os("CRUST_FAILPOINT_DIR").map(PathBuf::from) else {
            return Paused(None);
        };
        if armed != name {
            return Paused(None);
        }
        let file = |suffix: &str| dir.join(format!("{name}.{suffix}"));
        let _ = std::fs::write(file("reached"), b"");
        while !file("release").exists() {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        Paused(Some(file("done")))
    }
}

#[cfg(debug_assertions)]
pub use armed::{Paused, arm, hit, pause};

#[cfg(debug_assertions)]
pub use crash::{crash_point, rpc_started};

/// Crash points at durable steps (see the module docs).
#[cfg(debug_assertions)]
mod crash {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    /// The method whose first RPC arms the count, and the step to die after (0: trace).
    static TARGET: OnceLock<Option<(String, u32)>> = OnceLock::new();
    static COUNTING: AtomicBool = AtomicBool::new(false);
    static STEPS: AtomicU32 = AtomicU32::new(0);

    fn target() -> &'static Option<(String, u32)> {
        TARGET.get_or_init(|| {
            let spec = std::env::var("CRUST_CRASH").ok()?;
            let (method, n) = spec.split_once(':')?;
            Some((method.to_owned(), n.parse().ok()?))
        })
    }

    /// An RPC arrived: the first one of the armed method starts the count.
    pub fn rpc_started(method: &str) {
        if target().as_ref().is_some_and(|(m, _)| m == method)
            && !COUNTING.swap(true, Ordering::SeqCst)
        {
            eprintln!("crust: crash points: counting the durable steps of {method}");
        }
    }

    pub fn crash_point(kind: &str, what: &dyn std::fmt::Display, at: &std::panic::Location<'_>) {
        let Some((method, n)) = target() else { return };
        if !COUNTING.load(Ordering::SeqCst) {
            return;
        }
        let step = STEPS.fetch_add(1, Ordering::SeqCst) + 1;
        let place = format!("{}:{}", at.file(), at.line());
        if *n == 0 {
            eprintln!("crust: crash point {method}#{step}: {kind} {what} at {place}");
        } else if step == *n {
            eprintln!(
                "crust: crash point {method}#{step} reached: {kind} {what} at {place}: killing this process"
            );
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
            std::process::abort();
        }
    }
}

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
