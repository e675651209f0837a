//! User namespaces and id-mapped mounts, the kernel side of pods with `hostUsers: false`.
//!
//! A process cannot map ranges of host ids into a user namespace it is already in: the map
//! must be written from the parent namespace, by a process holding CAP_SETUID there. So a
//! forked child enters the new namespace and waits; the caller (still root on the node)
//! writes its `uid_map` and `gid_map`, after which the child may create namespaces the new
//! one owns, and the caller pins or opens whatever of the child's it needs before letting it
//! exit. This is what CRI-O's pinns and containerd do for their pods too.
//!
//! An id-mapped mount (Linux 5.12) shows a file system's ids through a user namespace's map:
//! a file of host uid 1000 appears as uid 0 to a pod whose range starts at host id 1000.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;

use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::waitpid;
use nix::unistd::{ForkResult, Pid, fork};
use rustix::mount::{MoveMountFlags, OpenTreeFlags, move_mount, open_tree};

use crate::model::IdMaps;

/// A child process in a new user namespace whose maps the parent wrote. It runs the work it
/// was given inside the namespace, then waits until it is dropped or [`finish`]ed.
///
/// [`finish`]: UserNsChild::finish
pub struct UserNsChild {
    pid: Pid,
    /// Closing it tells the child to exit.
    hold: Option<OwnedFd>,
    /// What the work answered.
    answer: Vec<u8>,
}

impl UserNsChild {
    /// Forks a child that unshares a user namespace, maps it with `maps` and then runs `work`
    /// in it (creating the namespaces the new one is to own). Returns once `work` succeeded,
    /// with its answer ([`answer`]), or with the step that failed. `work` runs in a forked
    /// child: in a multi-threaded process it must not allocate (a plain system call is fine).
    ///
    /// [`answer`]: UserNsChild::answer
    pub fn spawn(
        maps: &IdMaps,
        work: impl FnOnce() -> Result<Vec<u8>, String>,
    ) -> io::Result<Self> {
        let (from_child, to_parent) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let (hold_read, hold) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        // SAFETY: the child only makes system calls until `work`, whose contract is above.
        match unsafe { fork() }? {
            ForkResult::Child => {
                drop(from_child);
                drop(hold);
                child(to_parent, hold_read, work)
            }
            ForkResult::Parent { child } => {
                drop(to_parent);
                drop(hold_read);
                let mut this = UserNsChild {
                    pid: child,
                    hold: Some(hold),
                    answer: Vec::new(),
                };
                let mut report = File::from(from_child);
                this.map(&mut report, maps)?;
                Ok(this)
            }
        }
    }

    /// Waits for the child to be in its namespace, writes the maps, lets it run its work and
    /// reads how that went: a byte 0 and the work's answer, or the error's text.
    fn map(&mut self, report: &mut File, maps: &IdMaps) -> io::Result<()> {
        let mut byte = [0u8; 1];
        read_step(report, &mut byte, "enter a new user namespace")?;
        let proc = format!("/proc/{}", self.pid);
        let write = |file: &str, line: String| {
            std::fs::write(format!("{proc}/{file}"), line.as_bytes())
                .map_err(|e| io::Error::new(e.kind(), format!("write {file} {line:?}: {e}")))
        };
        write("uid_map", maps.uid.map_line())?;
        write("gid_map", maps.gid.map_line())?;
        if let Some(hold) = &self.hold {
            nix::unistd::write(hold, &[1])?;
        }
        let mut rest = Vec::new();
        report.read_to_end(&mut rest)?;
        match rest.as_slice() {
            [0, answer @ ..] => {
                self.answer = answer.to_vec();
                Ok(())
            }
            [] => Err(io::Error::other("the namespace's child died")),
            text => Err(io::Error::other(String::from_utf8_lossy(text).into_owned())),
        }
    }

    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// What the work answered on success.
    pub fn answer(&self) -> &[u8] {
        &self.answer
    }

    /// `/proc/<child>/ns/<kind>`: a namespace the child created or is in.
    pub fn ns_path(&self, kind: &str) -> String {
        format!("/proc/{}/ns/{kind}", self.pid)
    }

    /// Lets the child exit and reaps it.
    pub fn finish(mut self) {
        self.end();
    }

    fn end(&mut self) {
        if self.hold.take().is_some() {
            let _ = waitpid(self.pid, None);
        }
    }
}

impl Drop for UserNsChild {
    fn drop(&mut self) {
        if self.hold.is_some() {
            let _ = kill(self.pid, Signal::SIGKILL);
        }
        self.end();
    }
}

/// The child's side. `report` carries its steps up: a byte once in the namespace, then 0 and
/// the work's answer, or the work's error, then EOF. `hold` carries the parent's word down: a byte once the maps
/// are written, then EOF when the parent lets go.
fn child(report: OwnedFd, hold: OwnedFd, work: impl FnOnce() -> Result<Vec<u8>, String>) -> ! {
    let mut report = File::from(report);
    let mut hold = File::from(hold);
    if unshare(CloneFlags::CLONE_NEWUSER).is_err() {
        crate::sys::exit_now(1);
    }
    let _ = report.write_all(&[0]);
    // The parent has written the maps when it writes the byte below, or is gone (EOF).
    let mut go = [0u8; 1];
    if !matches!(hold.read(&mut go), Ok(1)) {
        crate::sys::exit_now(1);
    }
    match work() {
        Ok(answer) => {
            let _ = report.write_all(&[0]);
            let _ = report.write_all(&answer);
        }
        Err(e) => {
            let _ = report.write_all(e.as_bytes());
        }
    }
    drop(report);
    // Hold the namespaces until the parent closes its end.
    let _ = hold.read(&mut go);
    crate::sys::exit_now(0)
}

fn read_step(report: &mut File, byte: &mut [u8; 1], step: &str) -> io::Result<()> {
    match report.read(byte) {
        Ok(1) => Ok(()),
        Ok(_) => Err(io::Error::other(format!("{step}: the child exited"))),
        Err(e) => Err(io::Error::new(e.kind(), format!("{step}: {e}"))),
    }
}

/// `struct mount_attr` of mount_setattr(2).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// A detached copy of the mount tree at `source` (recursive when asked), id-mapped through
/// the user namespace `userns`. Attach it with [`attach`]; dropped unattached, it vanishes.
pub fn idmapped_tree(
    source: &Path,
    userns: BorrowedFd<'_>,
    recursive: bool,
) -> io::Result<OwnedFd> {
    let mut flags = OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC;
    if recursive {
        flags |= OpenTreeFlags::AT_RECURSIVE;
    }
    let tree = open_tree(rustix::fs::CWD, source, flags)
        .map_err(|e| io::Error::from_raw_os_error(e.raw_os_error()))?;
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    let at_flags = libc::AT_EMPTY_PATH | if recursive { libc::AT_RECURSIVE } else { 0 };
    // SAFETY: `attr` is a live mount_attr of the size passed; the path is a NUL-terminated
    // empty string with AT_EMPTY_PATH, so the kernel acts on `tree` itself.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            at_flags,
            &attr as *const MountAttr,
            size_of::<MountAttr>(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(tree)
}

/// Attaches a detached mount tree at `target` (an existing file or directory).
pub fn attach(tree: OwnedFd, target: &Path) -> io::Result<()> {
    move_mount(
        tree.as_fd(),
        "",
        rustix::fs::CWD,
        target,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )
    .map_err(|e| io::Error::from_raw_os_error(e.raw_os_error()))
}
