//! The only module where `unsafe` is allowed. Each wrapper here turns one raw system call into a
//! safe function: file descriptors come back as `OwnedFd` from the statement that checks them,
//! and every block says why it is sound.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub use nix::unistd::ForkResult;

pub mod arp;
pub mod userns;

/// Opens a pidfd for `pid`: a handle that keeps naming this process even after the pid is reused,
/// and becomes readable when the process exits.
pub fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    use rustix::process::{Pid, PidfdFlags};
    let pid = Pid::from_raw(pid).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    Ok(rustix::process::pidfd_open(pid, PidfdFlags::empty())?)
}

/// Sends `signal` to the process behind `pidfd` (never to a process that reused its pid).
pub fn pidfd_send_signal(pidfd: &OwnedFd, signal: nix::sys::signal::Signal) -> io::Result<()> {
    let signal = rustix::process::Signal::from_named_raw(signal as i32)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    Ok(rustix::process::pidfd_send_signal(pidfd, signal)?)
}

/// Whether the process behind `pidfd` has exited already (its pidfd is readable); no waiting.
pub fn pidfd_exited(pidfd: &OwnedFd) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
}

/// Waits until the process behind `pidfd` exits (its pidfd becomes readable), or `timeout`
/// passes; returns whether it exited. Needs a tokio runtime.
pub async fn pidfd_wait(pidfd: OwnedFd, timeout: Option<std::time::Duration>) -> io::Result<bool> {
    use tokio::io::{Interest, unix::AsyncFd};
    // SAFETY: `pidfd` is an OwnedFd moved into the AsyncFd, so it stays open and names the same
    // file description until the AsyncFd drops it.
    let afd = unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE) }
        .map_err(|e| io::Error::other(e.to_string()))?;
    match timeout {
        None => afd.readable().await.map(|_| true),
        Some(t) => match tokio::time::timeout(t, afd.readable()).await {
            Ok(r) => r.map(|_| true),
            Err(_) => Ok(false),
        },
    }
}

/// A value that owns the file descriptor it reports (so the descriptor stays open, and names
/// the same file, for as long as the value lives).
pub trait OwnsFd: AsRawFd {}
impl OwnsFd for OwnedFd {}
impl OwnsFd for nix::sys::signalfd::SignalFd {}

/// Registers an owned descriptor with the tokio reactor, for readiness. Needs a runtime.
pub fn async_fd<T: OwnsFd>(fd: T) -> io::Result<tokio::io::unix::AsyncFd<T>> {
    use tokio::io::{Interest, unix::AsyncFd};
    // SAFETY: `T: OwnsFd` owns its descriptor, which the AsyncFd now owns with it: it stays
    // open and names the same file description until the AsyncFd drops it.
    unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE | Interest::WRITABLE) }
        .map_err(|e| io::Error::other(e.to_string()))
}

/// Drops this process's resident pages of read-only file mappings: the executable code of the
/// crust binary and its libraries, and their read-only data (constants, unwind tables, the
/// relocation table the loader read once). A long-lived, mostly idle process (the monitor)
/// then holds only the pages it touches again, not everything start-up or its last request
/// touched. Such pages are clean copies of the files, so the kernel maps any page needed
/// later back from the page cache (which the daemon, running the same code, keeps warm);
/// nothing is lost. Never dropped: writable mappings, and any mapping holding a page of the
/// process's own, resident (`Anonymous` in smaps) or swapped out (`Swap`), such as the
/// relocated read-only-after-relocation data, whose copies the file does not have.
///
/// The list of mappings is read before the pages are dropped, so it must still hold then. In
/// a process of one thread (the monitor) it does: only the caller could change a mapping. With
/// other threads running (the daemon) it may not: a thread loading a library (glibc's NSS
/// modules) first reserves the whole file as one read-only mapping, then maps its writable
/// segment over part of it and relocates that, so a range listed read-only and clean may hold
/// written data a moment later. There only the executable's own mappings are dropped: the
/// kernel and the loader set them up before `main`, and nothing maps over them or unmaps them.
///
/// The pages are also marked random-access, so a page that must come back from disk comes
/// alone, without read-ahead. (The kernel still maps the cached pages around a faulting one,
/// up to 64 KiB: each fault brings back several pages.)
pub fn trim_file_pages() {
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return;
    };
    let only = if single_threaded() {
        None
    } else {
        // Not knowing which file is the executable, nothing is dropped.
        let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
            return;
        };
        Some(exe.to_string_lossy().into_owned())
    };
    for (start, end) in droppable_mappings(&smaps, only.as_deref()) {
        for advice in [libc::MADV_RANDOM, libc::MADV_DONTNEED] {
            // SAFETY: the range is exactly one private, read-only file mapping of this process
            // (from /proc/self/smaps) that holds no page of the process's own, resident or
            // swapped: every page it maps is the file's, unmodified. It is still that mapping:
            // either no other thread exists, or it is the executable's, which nothing remaps
            // (see above). Dropping the pages discards nothing: the next access maps the file's
            // page again.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, advice) };
        }
    }
}

/// Whether the calling thread is the process's only one (`Threads:` in /proc/self/status).
fn single_threaded() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .is_some_and(|n| n.trim() == "1")
    })
}

/// The address ranges `trim_file_pages` may drop, from the text of /proc/self/smaps; with
/// `only`, those of that file alone.
fn droppable_mappings(smaps: &str, only: Option<&str>) -> Vec<(usize, usize)> {
    /// A read-only file mapping being read, and what its lines said so far.
    struct Candidate {
        range: (usize, usize),
        /// `Anonymous` and `Swap` were seen, at zero: a mapping is dropped only on their word.
        clean: [bool; 2],
    }
    let mut out = Vec::new();
    let mut current: Option<Candidate> = None;
    let mut done = |current: Option<Candidate>| {
        if let Some(c) = current.filter(|c| c.clean == [true, true]) {
            out.push(c.range);
        }
    };
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(first), Some(second)) = (fields.next(), fields.next()) else {
            continue;
        };
        if let Some(field) = first.strip_suffix(':') {
            let slot = match field {
                "Anonymous" => 0,
                "Swap" => 1,
                _ => continue,
            };
            match (&mut current, second) {
                (Some(c), "0") => c.clean[slot] = true,
                _ => current = None,
            }
            continue;
        }
        // A mapping's header: `start-end perms offset dev inode [path]`; the path is the rest
        // of the line, from its first '/' (the fields before it have none).
        done(current.take());
        let path = line.find('/').map(|at| &line[at..]);
        let wanted = path.is_some_and(|p| only.is_none_or(|only| p == only));
        if !wanted || !matches!(second, "r-xp" | "r--p") {
            continue;
        }
        let range = first.split_once('-').and_then(|(start, end)| {
            Some((
                usize::from_str_radix(start, 16).ok()?,
                usize::from_str_radix(end, 16).ok()?,
            ))
        });
        current = range.map(|range| Candidate {
            range,
            clean: [false; 2],
        });
    }
    done(current);
    out
}

/// Keeps glibc's allocator from holding on to memory in a long-running daemon: at most two
/// arenas (tokio's worker threads would otherwise each get one and keep it), and a fixed mmap
/// threshold (glibc raises it after the first large free, so later large buffers land in
/// arenas that are never returned).
pub fn tune_allocator() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only changes allocator parameters; called once at start, before the
    // runtime's threads exist.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

/// Returns free heap memory at the top of the arenas to the kernel.
pub fn release_free_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim is thread-safe and only releases memory the allocator holds free.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Forks the calling process.
///
/// Callers must be single-threaded (the monitor process is: it never starts a runtime or a
/// thread), so the child cannot inherit a lock held by another thread.
pub fn fork_single_threaded() -> nix::Result<ForkResult> {
    // SAFETY: see the function contract: the only callers run in single-threaded processes.
    unsafe { nix::unistd::fork() }
}

/// Forks the calling process into a sibling: the child's parent is the caller's parent
/// (CLONE_PARENT), which reaps it and receives its SIGCHLD. For a child that must be created
/// by the caller (in the caller's namespaces) but belong to the caller's parent.
///
/// Callers must be single-threaded, as for [`fork_single_threaded`].
pub fn fork_sibling_single_threaded() -> nix::Result<ForkResult> {
    // SAFETY: clone without a new stack behaves as fork (the child returns here on a copy of
    // the caller's stack); the caller is single-threaded, so no lock is held by a thread the
    // child lacks. The raw syscall skips libc's fork handlers, which a single-threaded
    // process without them does not need.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::CLONE_PARENT as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    match rc {
        -1 => Err(nix::errno::Errno::last()),
        0 => Ok(ForkResult::Child),
        pid => Ok(ForkResult::Parent {
            child: nix::unistd::Pid::from_raw(pid as i32),
        }),
    }
}

/// In a freshly forked child that will run no more of the parent's code: points stdin and
/// stdout at /dev/null and closes every descriptor above stderr, so the child holds none of
/// the parent's pipes (whose readers wait for EOF) or namespace handles.
pub fn detach_inherited_fds() {
    if let Ok(null) = std::fs::File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        let _ = nix::unistd::dup2(null.as_raw_fd(), 0);
        let _ = nix::unistd::dup2(null.as_raw_fd(), 1);
    }
    // SAFETY: close_range only closes descriptors; the caller's contract is that no live Rust
    // value of this process owns one above stderr any more (the child never returns to them).
    unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
}

/// In a freshly forked child that is about to exec: marks every descriptor above stderr
/// close-on-exec, so the program it execs inherits none of the parent's pipes or handles while
/// the child may still use them until then.
pub fn cloexec_inherited_fds() {
    // SAFETY: CLOSE_RANGE_CLOEXEC only sets a flag on descriptors; nothing is closed, so no
    // Rust value's descriptor becomes invalid.
    unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
}

/// Puts every signal back to its default disposition and unblocks them all: a process forked
/// from the monitor (which blocks SIGCHLD, and whose Rust runtime ignores SIGPIPE) must not hand
/// either down to a container, since both survive exec.
pub fn reset_signals() {
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
    let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    for signal in Signal::iterator() {
        if matches!(signal, Signal::SIGKILL | Signal::SIGSTOP) {
            continue;
        }
        // SAFETY: installing SIG_DFL runs no code of ours in signal context.
        let _ = unsafe { sigaction(signal, &default) };
    }
    let _ = SigSet::all().thread_unblock();
}

/// Makes `stdio` this process's descriptors 0, 1 and 2 and `extra` its descriptor 3, and
/// closes every other one; answers descriptor 3. For a long-lived process forked from the
/// monitor, which must hold none of the monitor's descriptors.
pub fn keep_only_fds(stdio: [OwnedFd; 3], extra: OwnedFd) -> io::Result<OwnedFd> {
    use std::os::fd::IntoRawFd;
    // Above every target first, so that no move overwrites a descriptor still to be moved.
    let mut high = Vec::with_capacity(4);
    for fd in stdio.iter().chain([&extra]) {
        high.push(nix::fcntl::fcntl(
            fd.as_raw_fd(),
            nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(10),
        )?);
    }
    for (target, fd) in high.into_iter().enumerate() {
        nix::unistd::dup2(fd, target as RawFd)?;
    }
    // Closed by close_range below (or now one of 0-3, which stay).
    for fd in stdio.into_iter().chain([extra]) {
        let _ = fd.into_raw_fd();
    }
    // SAFETY: close_range only closes descriptors; the caller owns nothing above 3 any more.
    if unsafe { libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: descriptor 3 was just made a copy of `extra`, and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(3) })
}

/// Blocks `signals` (numbers: real-time signals too) in the calling thread and answers a
/// non-blocking signalfd that reads them.
pub fn block_into_signalfd(signals: &[i32]) -> io::Result<nix::sys::signalfd::SignalFd> {
    use nix::sys::signalfd::{SfdFlags, SignalFd};
    let mut raw = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initializes the set; sigaddset only adds valid numbers to it.
    let set = unsafe {
        libc::sigemptyset(raw.as_mut_ptr());
        for &s in signals {
            if libc::sigaddset(raw.as_mut_ptr(), s) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        raw.assume_init()
    };
    // SAFETY: `set` is an initialized sigset_t; the old mask is not asked for.
    if unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `set` was made by sigemptyset and sigaddset.
    let set = unsafe { nix::sys::signal::SigSet::from_sigset_t_unchecked(set) };
    Ok(SignalFd::with_flags(
        &set,
        SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC,
    )?)
}

/// Sends signal number `signo` to `pid`, any signal the kernel knows (real-time ones too,
/// which `nix`'s `Signal` does not name).
pub fn signal_raw(pid: i32, signo: i32) -> io::Result<()> {
    // SAFETY: kill(2) only sends a signal; no memory is involved.
    if unsafe { libc::kill(pid, signo) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Ends the calling process at once, without running exit handlers or flushing buffers that
/// belong to the process it was forked from.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit only ends the process; it never returns and touches no Rust state.
    unsafe { libc::_exit(code) }
}

/// Whether the calling process has a single thread, the condition for `fork_single_threaded`.
pub fn is_single_threaded() -> bool {
    std::fs::read_dir("/proc/self/task").is_ok_and(|d| d.count() == 1)
}

/// Receives one file descriptor sent over `stream` with SCM_RIGHTS (how a container's init
/// hands over its tty master).
pub fn receive_fd(stream: &std::os::unix::net::UnixStream) -> io::Result<OwnedFd> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    let mut data = [0u8; 256];
    let mut iov = [io::IoSliceMut::new(&mut data)];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let msg = recvmsg::<()>(
        stream.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    for cmsg in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(fds) = cmsg {
            if let Some(&fd) = fds.first() {
                // SAFETY: the kernel just installed this descriptor in our table for us; no
                // one else owns it. (Any further ones are closed below.)
                let owned = unsafe { OwnedFd::from_raw_fd(fd) };
                for &extra in &fds[1..] {
                    // SAFETY: as above; these are ours to close.
                    drop(unsafe { OwnedFd::from_raw_fd(extra) });
                }
                return Ok(owned);
            }
        }
    }
    Err(io::Error::other("no file descriptor in the message"))
}

/// Whether the kernel has mount_setattr(2) (Linux 5.12), which recursive read-only mounts
/// need: probed with arguments it must refuse, telling ENOSYS from the refusal.
pub fn has_mount_setattr() -> bool {
    // SAFETY: an invalid descriptor and a null attribute pointer of size 0: the kernel checks
    // them and returns an error without reading or writing memory.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            -1,
            c"".as_ptr(),
            0,
            std::ptr::null::<libc::c_void>(),
            0usize,
        )
    };
    rc == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ENOSYS)
}

/// Sends `data` with the descriptors `fds` attached (SCM_RIGHTS) on a unix stream socket.
/// Non-blocking sockets may answer WouldBlock, like any write.
pub fn send_with_fds(socket: &impl AsRawFd, data: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
    let iov = [io::IoSlice::new(data)];
    let cmsg = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &cmsg };
    Ok(sendmsg::<()>(
        socket.as_raw_fd(),
        &iov,
        cmsgs,
        MsgFlags::MSG_NOSIGNAL,
        None,
    )?)
}

/// Receives bytes into `buf` and any descriptors sent with them (SCM_RIGHTS, at most 8).
pub fn receive_with_fds(
    socket: &impl AsRawFd,
    buf: &mut [u8],
) -> io::Result<(usize, Vec<OwnedFd>)> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    let mut iov = [io::IoSliceMut::new(buf)];
    let mut space = nix::cmsg_space!([RawFd; 8]);
    let msg = recvmsg::<()>(
        socket.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    let mut fds = Vec::new();
    for cmsg in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(raw) = cmsg {
            for fd in raw {
                // SAFETY: the kernel just installed this descriptor in our table for us; no
                // one else owns it.
                fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }
    Ok((msg.bytes, fds))
}

/// Sets the window size of the terminal behind `fd` (a pty master or slave).
pub fn set_window_size(fd: &impl AsRawFd, rows: u16, cols: u16) -> io::Result<()> {
    let size = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads a winsize from the pointer, which lives for the whole call.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &size) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets the IFF_UP flag on the interface `name` in the caller's network namespace.
pub fn set_link_up(name: &str) -> io::Result<()> {
    let mut req = ifreq_named(name)?;
    // SAFETY: socket() takes integers and returns a new fd or -1.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the fd was just returned by socket() and is owned by nothing else.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: SIOCGIFFLAGS reads the name from and writes the flags into `req`, which lives for
    // the whole call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the union member ifru_flags is the one SIOCGIFFLAGS just filled in.
    unsafe { req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
    // SAFETY: as above; SIOCSIFFLAGS only reads `req`.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The last `max` bytes of the file at `path` (all of it when shorter), as text: a log's tail.
/// Invalid UTF-8, such as a character cut in two where the tail starts, becomes U+FFFD.
pub fn read_tail(path: &std::path::Path, max: u64) -> io::Result<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(max)))?;
    let mut bytes = Vec::new();
    f.take(max).read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// An `ifreq` naming the interface `name`, the rest zero, for the SIOCGIF*/SIOCSIF* ioctls.
pub fn ifreq_named(name: &str) -> io::Result<libc::ifreq> {
    let cname = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    if cname.as_bytes_with_nul().len() > libc::IFNAMSIZ {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(cname.as_bytes_with_nul()) {
        *dst = *src as libc::c_char;
    }
    Ok(req)
}

/// Runs `f` inside the network namespace pinned at `pin` (a netns bind mount), on a thread of
/// its own named `name` that ends right after: entering the namespace on a thread of the async
/// runtime or the blocking pool would leave that thread in the pod's network for whatever it
/// runs next. Blocks for the thread's short life.
pub fn in_netns<T: Send + 'static>(
    pin: &std::path::Path,
    name: &str,
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    let pin = pin.to_owned();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || -> io::Result<T> {
            let ns = std::fs::File::open(&pin)?;
            nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)?;
            f()
        })?
        .join()
        .map_err(|_| io::Error::other("the network namespace thread panicked"))?
}

/// Creates an unconnected TCP socket inside the network namespace pinned at `pin` (see
/// `in_netns`). A socket stays in the namespace it was created in, so the caller can connect
/// it from anywhere.
pub fn tcp_socket_in_netns(pin: &std::path::Path, ipv6: bool) -> io::Result<OwnedFd> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socket};
    in_netns(pin, "netns-socket", move || {
        let family = if ipv6 {
            AddressFamily::Inet6
        } else {
            AddressFamily::Inet
        };
        Ok(socket(
            family,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            None,
        )?)
    })
}

/// Installs a handler for `signal` that does nothing, so that the signal interrupts blocking
/// calls (and `pause`) instead of being ignored or killing the process.
pub fn catch_signal(signal: nix::sys::signal::Signal) -> nix::Result<()> {
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, sigaction};
    extern "C" fn noop(_: libc::c_int) {}
    let action = SigAction::new(
        SigHandler::Handler(noop),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    // SAFETY: the handler is async-signal-safe (it does nothing).
    unsafe { sigaction(signal, &action) }.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pidfd_of_self_and_of_nonexistent_pid() {
        assert!(pidfd_open(std::process::id() as i32).is_ok());
        let err = pidfd_open(i32::MAX).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ESRCH));
    }

    #[test]
    fn netns_sockets_need_a_namespace_pin() {
        let err = tcp_socket_in_netns(std::path::Path::new("/nonexistent/pin"), false);
        assert_eq!(err.unwrap_err().kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn link_names_are_checked() {
        assert!(set_link_up("a-name-that-is-far-too-long").is_err());
        assert!(set_link_up("bad\0name").is_err());
    }
}
#[cfg(test)]
mod trim_tests {
    use super::droppable_mappings;

    #[test]
    fn the_executables_trimmed_code_is_marked_random_access() {
        // With the harness's threads or without, the executable's mappings are trimmed.
        super::trim_file_pages();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let exe = exe.to_str().unwrap();
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut in_text = false;
        let mut marked = 0;
        for line in smaps.lines() {
            // A field's line starts with its name and a colon; a mapping's does not.
            let is_header = line
                .split_whitespace()
                .next()
                .is_some_and(|f| !f.ends_with(':'));
            if is_header {
                in_text = line.contains(" r-xp ") && line.ends_with(exe);
            } else if in_text && line.starts_with("VmFlags:") {
                assert!(line.contains(" rr"), "{line}");
                marked += 1;
            }
        }
        assert!(marked > 0);
    }

    const SMAPS: &str = "\
1000-3000 r--p 00000000 08:01 42                         /usr/bin/crust
Rss:                   8 kB
Anonymous:             0 kB
Swap:                  0 kB
VmFlags: rd mr mw me sd
3000-5000 r-xp 00002000 08:01 42                         /usr/bin/crust
Anonymous:             0 kB
Swap:                  0 kB
5000-6000 r--p 00004000 08:01 42                         /usr/bin/crust
Anonymous:             4 kB
Swap:                  0 kB
6000-7000 rw-p 00005000 08:01 42                         /usr/bin/crust
Anonymous:             4 kB
Swap:                  0 kB
7000-8000 rw-p 00000000 00:00 0                          [heap]
Anonymous:             4 kB
Swap:                  0 kB
8000-9000 r-xp 00000000 00:00 0                          [vdso]
Anonymous:             0 kB
Swap:                  0 kB
9000-a000 r--p 00000000 08:01 43                         /usr/lib/libc.so.6
Anonymous:             0 kB
Swap:                  0 kB
a000-b000 r--p 00001000 08:01 43                         /usr/lib/libc.so.6
Anonymous:             0 kB
Swap:                  4 kB
b000-c000 r--p 00000000 08:01 44                         /usr/lib/no fields.so
c000-d000 r--p 00000000 08:01 45                         /usr/lib/libgcc_s.so.1
Anonymous:             0 kB
Swap:                  0 kB
";

    #[test]
    fn only_read_only_file_mappings_without_pages_of_their_own_are_dropped() {
        // Not the one with an anonymous page, nor the one with a swapped-out page, nor one
        // whose smaps said neither.
        assert_eq!(
            droppable_mappings(SMAPS, None),
            vec![
                (0x1000, 0x3000),
                (0x3000, 0x5000),
                (0x9000, 0xa000),
                (0xc000, 0xd000)
            ]
        );
    }

    #[test]
    fn with_other_threads_only_the_executables_mappings_are_dropped() {
        assert_eq!(
            droppable_mappings(SMAPS, Some("/usr/bin/crust")),
            vec![(0x1000, 0x3000), (0x3000, 0x5000)]
        );
        assert_eq!(
            droppable_mappings(SMAPS, Some("/usr/lib/no fields.so")),
            vec![]
        );
    }
}

/// Makes `fd` the child's descriptor 3 when `cmd` is spawned (NRI's pre-connected plugin
/// socket): the child gets its own copy without close-on-exec; the parent's stays as it is, so
/// no other child the daemon starts at the same time inherits it.
pub fn pass_fd_as_3(cmd: &mut std::process::Command, fd: OwnedFd) {
    use std::os::unix::process::CommandExt;
    let raw = fd.as_raw_fd();
    // SAFETY: the closure runs in the forked child before exec and calls only dup2 and fcntl,
    // which are async-signal-safe; it allocates nothing. `fd` is moved into the closure, which
    // the Command keeps until it is dropped, so the descriptor stays open until the spawn.
    unsafe {
        cmd.pre_exec(move || {
            let _keep = &fd;
            if raw == 3 {
                // dup2 onto itself would leave close-on-exec set: clear it instead.
                let flags = libc::fcntl(3, libc::F_GETFD);
                if flags < 0 || libc::fcntl(3, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(io::Error::last_os_error());
                }
            } else if libc::dup2(raw, 3) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
