//! crust's `RuntimeDefault` seccomp profile: an allow-list in the spirit of Docker's and
//! containerd's defaults. Anything not listed fails with EPERM. What the list leaves out is
//! what lets a process reach past its container: kernel modules, kexec, the kernel keyring,
//! mounting, new namespaces, raw I/O ports, clock setting, BPF, perf, io_uring and obsolete
//! calls. Some of those come back when the container holds the capability that legitimately
//! guards them (CAP_SYS_ADMIN brings mount, unshare, setns, keyctl...), following the
//! container's own capability set, so adding a capability is enough to use what it grants.
//!
//! Three calls are filtered by argument: `personality` only to the Linux personalities a
//! program legitimately asks for; `clone` only without namespace flags (unless
//! CAP_SYS_ADMIN), and `clone3`, whose flags seccomp cannot see, fails with ENOSYS so that
//! libc falls back to `clone`.
//!
//! Unknown names are harmless: libcontainer skips syscalls its libseccomp cannot resolve.

use std::collections::HashSet;

use oci_spec::runtime::{Capability, LinuxSeccomp, LinuxSeccompAction, LinuxSyscall};

use super::seccomp::{equal, masked_eq, native_arches, syscall};

/// Files, directories, descriptors and extended attributes.
const FILES: &[&str] = &[
    "_llseek",
    "access",
    "chdir",
    "chmod",
    "chown",
    "chown32",
    "close",
    "close_range",
    "copy_file_range",
    "creat",
    "dup",
    "dup2",
    "dup3",
    "faccessat",
    "faccessat2",
    "fadvise64",
    "fadvise64_64",
    "fallocate",
    "fchdir",
    "fchmod",
    "fchmodat",
    "fchmodat2",
    "fchown",
    "fchown32",
    "fchownat",
    "fcntl",
    "fcntl64",
    "fdatasync",
    "fgetxattr",
    "flistxattr",
    "flock",
    "fremovexattr",
    "fsetxattr",
    "fstat",
    "fstat64",
    "fstatat64",
    "fstatfs",
    "fstatfs64",
    "fsync",
    "ftruncate",
    "ftruncate64",
    "futimesat",
    "getcwd",
    "getdents",
    "getdents64",
    "getxattr",
    "getxattrat",
    "lchown",
    "lchown32",
    "lgetxattr",
    "link",
    "linkat",
    "listxattr",
    "listxattrat",
    "llistxattr",
    "lremovexattr",
    "lseek",
    "lsetxattr",
    "lstat",
    "lstat64",
    "mkdir",
    "mkdirat",
    "mknod",
    "mknodat",
    "newfstatat",
    "open",
    "openat",
    "openat2",
    "readahead",
    "readlink",
    "readlinkat",
    "removexattr",
    "removexattrat",
    "rename",
    "renameat",
    "renameat2",
    "rmdir",
    "setxattr",
    "setxattrat",
    "stat",
    "stat64",
    "statfs",
    "statfs64",
    "statx",
    "symlink",
    "symlinkat",
    "sync",
    "sync_file_range",
    "syncfs",
    "truncate",
    "truncate64",
    "umask",
    "unlink",
    "unlinkat",
    "utime",
    "utimensat",
    "utimensat_time64",
    "utimes",
    "cachestat",
];

/// Reading, writing, asynchronous I/O and waiting for events.
const IO: &[&str] = &[
    "read",
    "readv",
    "pread64",
    "preadv",
    "preadv2",
    "write",
    "writev",
    "pwrite64",
    "pwritev",
    "pwritev2",
    "sendfile",
    "sendfile64",
    "splice",
    "tee",
    "vmsplice",
    "pipe",
    "pipe2",
    "ioctl",
    "io_setup",
    "io_destroy",
    "io_submit",
    "io_cancel",
    "io_getevents",
    "io_pgetevents",
    "io_pgetevents_time64",
    "poll",
    "ppoll",
    "ppoll_time64",
    "select",
    "_newselect",
    "pselect6",
    "pselect6_time64",
    "epoll_create",
    "epoll_create1",
    "epoll_ctl",
    "epoll_ctl_old",
    "epoll_wait",
    "epoll_wait_old",
    "epoll_pwait",
    "epoll_pwait2",
    "eventfd",
    "eventfd2",
    "signalfd",
    "signalfd4",
    "timerfd_create",
    "timerfd_gettime",
    "timerfd_gettime64",
    "timerfd_settime",
    "timerfd_settime64",
    "inotify_init",
    "inotify_init1",
    "inotify_add_watch",
    "inotify_rm_watch",
];

/// Address space.
const MEMORY: &[&str] = &[
    "brk",
    "mmap",
    "mmap2",
    "munmap",
    "mremap",
    "mprotect",
    "msync",
    "mincore",
    "madvise",
    "mlock",
    "mlock2",
    "munlock",
    "mlockall",
    "munlockall",
    "membarrier",
    "memfd_create",
    "pkey_alloc",
    "pkey_free",
    "pkey_mprotect",
    "remap_file_pages",
    "get_mempolicy",
    "map_shadow_stack",
    "mseal",
];

/// Processes, threads, scheduling, limits and identity.
const PROCESSES: &[&str] = &[
    "arch_prctl",
    "capget",
    "capset",
    "execve",
    "execveat",
    "exit",
    "exit_group",
    "fork",
    "vfork",
    "wait4",
    "waitid",
    "waitpid",
    "getpid",
    "getppid",
    "gettid",
    "getpgid",
    "getpgrp",
    "getsid",
    "setpgid",
    "setsid",
    "set_tid_address",
    "set_robust_list",
    "get_robust_list",
    "set_thread_area",
    "get_thread_area",
    "rseq",
    "futex",
    "futex_time64",
    "futex_waitv",
    "futex_wait",
    "futex_wake",
    "futex_requeue",
    "prctl",
    "ptrace",
    "prlimit64",
    "getrlimit",
    "ugetrlimit",
    "setrlimit",
    "getrusage",
    "getpriority",
    "setpriority",
    "sched_yield",
    "sched_getaffinity",
    "sched_setaffinity",
    "sched_getattr",
    "sched_setattr",
    "sched_getparam",
    "sched_setparam",
    "sched_getscheduler",
    "sched_setscheduler",
    "sched_get_priority_max",
    "sched_get_priority_min",
    "sched_rr_get_interval",
    "sched_rr_get_interval_time64",
    "ioprio_get",
    "ioprio_set",
    "getcpu",
    "pidfd_open",
    "pidfd_send_signal",
    "getuid",
    "getuid32",
    "geteuid",
    "geteuid32",
    "getgid",
    "getgid32",
    "getegid",
    "getegid32",
    "getgroups",
    "getgroups32",
    "getresuid",
    "getresuid32",
    "getresgid",
    "getresgid32",
    "setuid",
    "setuid32",
    "setgid",
    "setgid32",
    "setreuid",
    "setreuid32",
    "setregid",
    "setregid32",
    "setresuid",
    "setresuid32",
    "setresgid",
    "setresgid32",
    "setfsuid",
    "setfsuid32",
    "setfsgid",
    "setfsgid32",
    "setgroups",
    "setgroups32",
    "seccomp",
    "landlock_create_ruleset",
    "landlock_add_rule",
    "landlock_restrict_self",
    "lsm_get_self_attr",
    "lsm_list_modules",
];

/// Signals, timers and clocks (reading them; setting the clock needs CAP_SYS_TIME).
const SIGNALS_AND_TIME: &[&str] = &[
    "kill",
    "tkill",
    "tgkill",
    "rt_sigaction",
    "rt_sigprocmask",
    "rt_sigreturn",
    "rt_sigpending",
    "rt_sigsuspend",
    "rt_sigtimedwait",
    "rt_sigtimedwait_time64",
    "rt_sigqueueinfo",
    "rt_tgsigqueueinfo",
    "sigaction",
    "signal",
    "sigprocmask",
    "sigreturn",
    "sigpending",
    "sigsuspend",
    "sigaltstack",
    "pause",
    "alarm",
    "getitimer",
    "setitimer",
    "clock_gettime",
    "clock_gettime64",
    "clock_getres",
    "clock_getres_time64",
    "clock_nanosleep",
    "clock_nanosleep_time64",
    "nanosleep",
    "gettimeofday",
    "time",
    "times",
    "timer_create",
    "timer_delete",
    "timer_getoverrun",
    "timer_gettime",
    "timer_gettime64",
    "timer_settime",
    "timer_settime64",
    "restart_syscall",
];

/// Sockets and System V / POSIX IPC (namespaced by the pod's network and IPC namespaces).
const NETWORK_AND_IPC: &[&str] = &[
    "socket",
    "socketpair",
    "socketcall",
    "bind",
    "listen",
    "connect",
    "accept",
    "accept4",
    "getsockname",
    "getpeername",
    "getsockopt",
    "setsockopt",
    "sendto",
    "sendmsg",
    "sendmmsg",
    "recvfrom",
    "recvmsg",
    "recvmmsg",
    "recvmmsg_time64",
    "shutdown",
    "shmget",
    "shmat",
    "shmdt",
    "shmctl",
    "semget",
    "semop",
    "semctl",
    "semtimedop",
    "semtimedop_time64",
    "msgget",
    "msgsnd",
    "msgrcv",
    "msgctl",
    "ipc",
    "mq_open",
    "mq_unlink",
    "mq_timedsend",
    "mq_timedsend_time64",
    "mq_timedreceive",
    "mq_timedreceive_time64",
    "mq_notify",
    "mq_getsetattr",
];

/// System information.
const SYSTEM: &[&str] = &["uname", "sysinfo", "getrandom", "uretprobe"];

/// Calls a capability makes legitimate: allowed when the container holds it.
const BY_CAPABILITY: &[(Capability, &[&str])] = &[
    (
        Capability::SysAdmin,
        &[
            "mount",
            "umount",
            "umount2",
            "mount_setattr",
            "move_mount",
            "open_tree",
            "fsopen",
            "fsconfig",
            "fsmount",
            "fspick",
            "pivot_root",
            "unshare",
            "setns",
            "clone3",
            "sethostname",
            "setdomainname",
            "quotactl",
            "quotactl_fd",
            "swapon",
            "swapoff",
            "lookup_dcookie",
            "fanotify_init",
            "fanotify_mark",
            "name_to_handle_at",
            "userfaultfd",
            "keyctl",
            "add_key",
            "request_key",
            "bpf",
            "perf_event_open",
            "process_madvise",
            "lsm_set_self_attr",
            "listmount",
            "statmount",
        ],
    ),
    (Capability::SysChroot, &["chroot"]),
    (
        Capability::SysBoot,
        &["reboot", "kexec_load", "kexec_file_load"],
    ),
    (
        Capability::SysModule,
        &["init_module", "finit_module", "delete_module"],
    ),
    (Capability::SysPacct, &["acct"]),
    (
        Capability::SysPtrace,
        &[
            "kcmp",
            "pidfd_getfd",
            "process_vm_readv",
            "process_vm_writev",
            "process_madvise",
        ],
    ),
    (Capability::SysRawio, &["iopl", "ioperm"]),
    (
        Capability::SysTime,
        &[
            "settimeofday",
            "stime",
            "clock_settime",
            "clock_settime64",
            "adjtimex",
            "clock_adjtime",
            "clock_adjtime64",
        ],
    ),
    (Capability::SysTtyConfig, &["vhangup"]),
    (
        Capability::SysNice,
        &[
            "mbind",
            "set_mempolicy",
            "set_mempolicy_home_node",
            "migrate_pages",
            "move_pages",
        ],
    ),
    (Capability::Syslog, &["syslog"]),
    (Capability::Bpf, &["bpf"]),
    (Capability::Perfmon, &["perf_event_open"]),
    (Capability::DacReadSearch, &["open_by_handle_at"]),
];

/// `personality(2)` values a program legitimately sets: Linux, 32-bit Linux, each with
/// UNAME26, and 0xffffffff, which only queries.
const PERSONALITIES: &[u64] = &[0x0, 0x0008, 0x2_0000, 0x2_0008, 0xffff_ffff];

/// CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER |
/// CLONE_NEWPID | CLONE_NEWNET.
const CLONE_NAMESPACE_FLAGS: u64 =
    0x0002_0000 | 0x0200_0000 | 0x0400_0000 | 0x0800_0000 | 0x1000_0000 | 0x2000_0000 | 0x4000_0000;

const EPERM: u32 = 1;
const ENOSYS: u32 = 38;

/// The default profile for a container holding `caps` (its effective set).
pub(crate) fn default_profile(caps: &HashSet<Capability>) -> LinuxSeccomp {
    use LinuxSeccompAction::{ScmpActAllow as Allow, ScmpActErrno as Errno};

    let mut always: Vec<&str> = [FILES, IO, MEMORY, PROCESSES, SIGNALS_AND_TIME]
        .into_iter()
        .chain([NETWORK_AND_IPC, SYSTEM])
        .flatten()
        .copied()
        .collect();
    let mut granted: Vec<&str> = BY_CAPABILITY
        .iter()
        .filter(|(cap, _)| caps.contains(cap))
        .flat_map(|(_, names)| names.iter().copied())
        .filter(|name| !always.contains(name))
        .collect();
    granted.sort_unstable();
    granted.dedup();
    always.sort_unstable();

    let mut rules: Vec<LinuxSyscall> = vec![syscall(&always, Allow, None, vec![])];
    if !granted.is_empty() {
        rules.push(syscall(&granted, Allow, None, vec![]));
    }
    for &persona in PERSONALITIES {
        rules.push(syscall(
            &["personality"],
            Allow,
            None,
            vec![equal(0, persona)],
        ));
    }
    if caps.contains(&Capability::SysAdmin) {
        rules.push(syscall(&["clone"], Allow, None, vec![]));
    } else {
        // x86 and arm take clone's flags as the first argument (s390 as the second).
        let no_namespaces = masked_eq(0, CLONE_NAMESPACE_FLAGS, 0);
        rules.push(syscall(&["clone"], Allow, None, vec![no_namespaces]));
        rules.push(syscall(&["clone3"], Errno, Some(ENOSYS), vec![]));
    }

    let mut seccomp = LinuxSeccomp::default();
    seccomp
        .set_default_action(Errno)
        .set_default_errno_ret(Some(EPERM))
        .set_architectures(Some(native_arches()).filter(|a| !a.is_empty()))
        .set_syscalls(Some(rules));
    seccomp
}

#[cfg(test)]
mod tests {
    use super::super::seccomp::verdict;
    use super::*;
    use LinuxSeccompAction::{ScmpActAllow as Allow, ScmpActErrno as Errno};

    const CLONE_NEWNS: u64 = 0x0002_0000;
    const CLONE_NEWUSER: u64 = 0x1000_0000;
    /// What glibc's fork() passes: CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD.
    const FORK_FLAGS: u64 = 0x0120_0011;
    /// What pthread_create passes (VM, FS, FILES, SIGHAND, THREAD, SYSVSEM, SETTLS, ...).
    const THREAD_FLAGS: u64 = 0x003d_0f00;

    fn caps(list: &[Capability]) -> HashSet<Capability> {
        list.iter().copied().collect()
    }

    fn args0(first: u64) -> [u64; 6] {
        [first, 0, 0, 0, 0, 0]
    }

    #[test]
    fn blocks_escapes_without_capabilities_and_allows_normal_calls() {
        let none = caps(&[]);
        let admin = caps(&[Capability::SysAdmin]);
        let eperm = (Errno, Some(EPERM));
        let allow = (Allow, None);
        /// name, capabilities, syscall, its arguments, what the filter does.
        struct Case<'a>(&'a str, &'a HashSet<Capability>, &'a str, [u64; 6], Verdict);
        type Verdict = (LinuxSeccompAction, Option<u32>);
        let table = vec![
            Case("read", &none, "read", args0(0), allow),
            Case("openat", &none, "openat", args0(0), allow),
            Case("execve", &none, "execve", args0(0), allow),
            Case("socket", &none, "socket", args0(2), allow),
            Case("fork", &none, "clone", args0(FORK_FLAGS), allow),
            Case("threads", &none, "clone", args0(THREAD_FLAGS), allow),
            Case(
                "clone new mount ns",
                &none,
                "clone",
                args0(FORK_FLAGS | CLONE_NEWNS),
                eperm,
            ),
            Case(
                "clone new user ns",
                &none,
                "clone",
                args0(CLONE_NEWUSER),
                eperm,
            ),
            Case(
                "clone3 falls back",
                &none,
                "clone3",
                args0(0),
                (Errno, Some(ENOSYS)),
            ),
            Case("unshare", &none, "unshare", args0(CLONE_NEWNS), eperm),
            Case("mount", &none, "mount", args0(0), eperm),
            Case("umount2", &none, "umount2", args0(0), eperm),
            Case("setns", &none, "setns", args0(0), eperm),
            Case("keyctl", &none, "keyctl", args0(0), eperm),
            Case("add_key", &none, "add_key", args0(0), eperm),
            Case("request_key", &none, "request_key", args0(0), eperm),
            Case("sethostname", &none, "sethostname", args0(0), eperm),
            Case("bpf", &none, "bpf", args0(0), eperm),
            Case("init_module", &none, "init_module", args0(0), eperm),
            Case("kexec_load", &none, "kexec_load", args0(0), eperm),
            Case("chroot without cap", &none, "chroot", args0(0), eperm),
            Case("io_uring", &none, "io_uring_setup", args0(0), eperm),
            Case(
                "process_vm_readv",
                &none,
                "process_vm_readv",
                args0(0),
                eperm,
            ),
            Case("personality linux", &none, "personality", args0(0), allow),
            Case(
                "personality query",
                &none,
                "personality",
                args0(0xffff_ffff),
                allow,
            ),
            Case(
                "personality odd",
                &none,
                "personality",
                args0(0x0040_0000),
                eperm,
            ),
            Case("admin mount", &admin, "mount", args0(0), allow),
            Case(
                "admin unshare",
                &admin,
                "unshare",
                args0(CLONE_NEWNS),
                allow,
            ),
            Case("admin keyctl", &admin, "keyctl", args0(0), allow),
            Case("admin clone ns", &admin, "clone", args0(CLONE_NEWNS), allow),
            Case("admin clone3", &admin, "clone3", args0(0), allow),
            Case(
                "admin still no modules",
                &admin,
                "init_module",
                args0(0),
                eperm,
            ),
        ];
        for Case(name, caps, call, args, want) in table {
            let profile = default_profile(caps);
            assert_eq!(verdict(&profile, call, args), want, "{name}");
        }
        let chroot = default_profile(&caps(&[Capability::SysChroot]));
        assert_eq!(verdict(&chroot, "chroot", args0(0)), allow);
        let ptrace = default_profile(&caps(&[Capability::SysPtrace]));
        assert_eq!(verdict(&ptrace, "process_vm_readv", args0(0)), allow);
        let module = default_profile(&caps(&[Capability::SysModule]));
        assert_eq!(verdict(&module, "finit_module", args0(0)), allow);
    }

    #[test]
    fn covers_compat_architectures_and_lists_each_call_once() {
        let profile = default_profile(&caps(&[Capability::SysAdmin, Capability::Perfmon]));
        if cfg!(target_arch = "x86_64") {
            let arches = profile.architectures().clone().unwrap();
            assert_eq!(arches, native_arches());
            assert_eq!(arches.len(), 3);
        }
        let rules = profile.syscalls().as_ref().unwrap();
        let unconditional: Vec<&String> = rules
            .iter()
            .filter(|r| r.args().is_none() && r.action() == Allow)
            .flat_map(|r| r.names())
            .collect();
        let unique: HashSet<_> = unconditional.iter().collect();
        assert_eq!(unique.len(), unconditional.len(), "a name is listed twice");
    }

    /// Runs `check` in a forked child after libcontainer itself loaded `profile` there.
    fn in_filtered_child(
        profile: LinuxSeccomp,
        check: impl FnOnce() -> Result<(), String> + std::panic::UnwindSafe,
    ) {
        use libcontainer::test_utils::{TestCallbackError, test_in_child_process};
        let result = test_in_child_process(move || {
            nix::sys::prctl::set_no_new_privs()
                .map_err(|err| TestCallbackError::Custom(format!("no_new_privs: {err}")))?;
            libcontainer::seccomp::initialize_seccomp(&profile)
                .map_err(|err| TestCallbackError::Custom(format!("loading the filter: {err}")))?;
            check().map_err(TestCallbackError::Custom)
        });
        assert!(result.is_ok(), "{result:?}");
    }

    /// Pins how libcontainer reads `masked_eq` (see `seccomp::masked_eq`): a filter refusing
    /// unshare(2) only when no namespace flag is set must refuse CLONE_FILES alone.
    #[test]
    fn libcontainer_reads_masked_comparisons_as_crust_writes_them() {
        let rule = syscall(
            &["unshare"],
            Errno,
            Some(ENOSYS),
            vec![masked_eq(0, CLONE_NAMESPACE_FLAGS, 0)],
        );
        let mut profile = LinuxSeccomp::default();
        profile
            .set_default_action(Allow)
            .set_syscalls(Some(vec![rule]));
        in_filtered_child(profile, || {
            match nix::sched::unshare(nix::sched::CloneFlags::CLONE_FILES) {
                Err(nix::errno::Errno::ENOSYS) => Ok(()),
                other => Err(format!("unshare(CLONE_FILES) gave {other:?}, not ENOSYS")),
            }
        });
    }

    /// The default profile, loaded by libcontainer: spawning a process still works (glibc
    /// falls back from clone3 to clone) while unshare is refused.
    #[test]
    fn libcontainer_runs_processes_under_the_default_profile() {
        in_filtered_child(default_profile(&caps(&[])), || {
            let status = std::process::Command::new("/bin/sh")
                .args(["-c", "exit 7"])
                .status()
                .map_err(|err| format!("spawning /bin/sh: {err}"))?;
            if status.code() != Some(7) {
                return Err(format!("/bin/sh ended with {status}"));
            }
            match nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS) {
                Err(nix::errno::Errno::EPERM) => Ok(()),
                other => Err(format!("unshare(CLONE_NEWNS) gave {other:?}, not EPERM")),
            }
        });
    }
}
