//! PID 1 of a pod's shared PID namespace, started so that it holds nothing a container could use.
//!
//! Every container of a pod that shares its PID namespace sees this process, and one that
//! passes the kernel's ptrace access check against it (CAP_SYS_PTRACE) can read its root, its
//! working directory and its executable through `/proc/1/`, or attach to it and run system
//! calls as it. A plain fork of the monitor would hand it the node's root, every capability
//! and the node's crust binary. So the fork, before it execs:
//! - enters a mount namespace of its own whose root is an empty, read-only tmpfs (pivot_root,
//!   the old root detached), and whose working directory is that root;
//! - points stdin, stdout and stderr at nothing it opened on the node, and marks every other
//!   inherited descriptor close-on-exec;
//! - drops every capability, bounding and ambient sets included, and sets no_new_privs, so the
//!   exec (still as uid 0) gains none back;
//! - execs `pod-init/main.rs` (a no-std program of a few hundred bytes, built by build.rs)
//!   from a sealed memfd, so that `/proc/1/exe` is neither the node's binary nor writable.
//!
//! The program then makes itself non-dumpable, installs a seccomp filter allowing only its
//! reaping loop, and reaps orphans until the monitor kills it or dies (the parent-death signal
//! armed here survives the exec: no credential change, no set-id binary). It stays in the pod's
//! cgroup, which the monitor is in.
//!
//! A failure before the exec is written to a close-on-exec pipe, so the monitor reports the
//! step that failed instead of finding a dead init later; a successful exec closes the pipe.

use std::ffi::CStr;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use caps::CapSet;
use nix::fcntl::{AtFlags, FcntlArg, SealFlag, fcntl};
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, unshare};
use nix::sys::memfd::{MemFdCreateFlag, memfd_create};
use nix::sys::signal::Signal;
use nix::unistd::Pid;

use crate::sys::{self, ForkResult};

/// The program the init execs (see the module docs).
static PROGRAM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/pod-init"));

/// What `ps` shows for the pod's PID 1 (the program sets the same as its thread name).
const NAME: &CStr = c"crust-pod-init";

/// Whose child the init is: the monitor's, started by the monitor itself or, in a pod with a
/// user namespace, by the monitor's child that holds that namespace (only a process inside a
/// user namespace can create a PID namespace it owns; see `process::user_namespaces`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Parent {
    Caller,
    CallersParent,
}

/// Forks and confines the pod's init; `scratch` is any existing directory of the node (it is
/// only covered by the init's tmpfs root inside the init's own mount namespace). Returns the
/// init's pid once it has exec'd its program.
pub fn start(scratch: &Path, parent: Parent) -> std::io::Result<Pid> {
    // The parent-death signal only covers a monitor that dies after the child set it. The
    // usual check (getppid() changed) cannot work here: PID 1 of a new namespace always sees
    // 0. So the child looks at a pidfd of the monitor once the signal is armed.
    let monitor = sys::pidfd_open(match parent {
        Parent::Caller => std::process::id() as i32,
        Parent::CallersParent => nix::unistd::getppid().as_raw(),
    })?;
    let (report_read, report_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let forked = match parent {
        Parent::Caller => sys::fork_single_threaded()?,
        Parent::CallersParent => sys::fork_sibling_single_threaded()?,
    };
    match forked {
        ForkResult::Parent { child } => {
            drop(report_write);
            drop(monitor);
            wait_for_exec(File::from(report_read), child, parent)
        }
        ForkResult::Child => {
            let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
            if sys::pidfd_exited(&monitor) {
                sys::exit_now(0);
            }
            drop(monitor);
            drop(report_read);
            let error = confine_and_exec(scratch);
            let _ = File::from(report_write).write_all(error.as_bytes());
            sys::exit_now(125)
        }
    }
}

/// Reads the child's report: nothing (EOF at its exec) means the program runs.
fn wait_for_exec(mut report: File, child: Pid, parent: Parent) -> std::io::Result<Pid> {
    let mut error = String::new();
    report.read_to_string(&mut error)?;
    if error.is_empty() {
        return Ok(child);
    }
    // A sibling's child is its parent's to reap (the monitor reaps every child it has).
    if parent == Parent::Caller {
        let _ = nix::sys::wait::waitpid(child, None);
    }
    Err(std::io::Error::other(error))
}

/// Runs in the forked child; returns only with what failed.
fn confine_and_exec(scratch: &Path) -> String {
    let program = match sealed_program() {
        Ok(fd) => fd,
        Err(e) => return format!("copy the init program into a sealed memfd: {e}"),
    };
    if let Err(e) = empty_stdio() {
        return format!("point stdio at /dev/null: {e}");
    }
    sys::cloexec_inherited_fds();
    if let Err(e) = empty_root(scratch) {
        return format!("give the init an empty root: {e}");
    }
    if let Err(e) = drop_privileges() {
        return format!("drop the init's capabilities: {e}");
    }
    let argv = [NAME];
    let env: [&CStr; 0] = [];
    let Err(e) = nix::unistd::execveat(
        Some(program.as_raw_fd()),
        c"",
        &argv,
        &env,
        AtFlags::AT_EMPTY_PATH,
    );
    format!("exec the init program: {e}")
}

/// A memfd holding the program, sealed against every change, so that no one who reaches
/// `/proc/1/exe` can write it.
fn sealed_program() -> std::io::Result<OwnedFd> {
    let fd = memfd_create(
        NAME,
        MemFdCreateFlag::MFD_CLOEXEC | MemFdCreateFlag::MFD_ALLOW_SEALING,
    )?;
    let mut file = File::from(fd);
    file.write_all(PROGRAM)?;
    let seals = SealFlag::F_SEAL_SEAL
        | SealFlag::F_SEAL_SHRINK
        | SealFlag::F_SEAL_GROW
        | SealFlag::F_SEAL_WRITE;
    fcntl(file.as_raw_fd(), FcntlArg::F_ADD_SEALS(seals))?;
    Ok(file.into())
}

/// stdin, stdout and stderr on /dev/null: the monitor's stdout is the daemon's pipe (read to
/// EOF), its stderr the pod's monitor log. The program writes nothing.
fn empty_stdio() -> std::io::Result<()> {
    let null = File::options().read(true).write(true).open("/dev/null")?;
    for fd in 0..=2 {
        nix::unistd::dup2(null.as_raw_fd(), fd)?;
    }
    Ok(())
}

/// A new mount namespace whose root is an empty read-only tmpfs, with the node's root
/// detached from it, and the working directory at that root.
fn empty_root(scratch: &Path) -> nix::Result<()> {
    unshare(CloneFlags::CLONE_NEWNS)?;
    // Nothing done here may reach the node's mount namespace.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )?;
    let flags = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount(
        Some("tmpfs"),
        scratch,
        Some("tmpfs"),
        flags,
        Some("size=4k,nr_inodes=1,mode=0555"),
    )?;
    nix::unistd::chdir(scratch)?;
    // The old root lands on top of the new one and is detached at once.
    nix::unistd::pivot_root(".", ".")?;
    umount2(".", MntFlags::MNT_DETACH)?;
    nix::unistd::chdir("/")
}

/// Every capability set emptied (bounding first, while CAP_SETPCAP is still held) and
/// no_new_privs set: an exec as uid 0 then computes an empty permitted set.
fn drop_privileges() -> Result<(), String> {
    for set in [
        CapSet::Bounding,
        CapSet::Ambient,
        CapSet::Inheritable,
        CapSet::Effective,
        CapSet::Permitted,
    ] {
        caps::clear(None, set).map_err(|e| format!("clear {set:?}: {e}"))?;
    }
    nix::sys::prctl::set_no_new_privs().map_err(|e| format!("set no_new_privs: {e}"))
}
