//! crust's pod init: PID 1 of a pod's shared PID namespace, a program of its own.
//!
//! A pod whose containers share one PID namespace needs a process that is PID 1 there and
//! reaps orphans. Every container of such a pod can see that process, and one with
//! CAP_SYS_PTRACE can read its root, its executable and its memory, or attach to it. So it must
//! hold nothing: the monitor forks it, gives it a mount namespace of its own whose root is an
//! empty read-only tmpfs, drops every capability (bounding, ambient, inheritable, permitted,
//! effective), sets no_new_privs and then execs this program from a sealed memfd, so that its
//! executable is neither the node's crust binary nor writable. This program then makes itself
//! non-dumpable, installs a seccomp filter that allows only the calls of the loop below (and
//! exit), and reaps children for ever. It dies with the monitor (the parent-death signal the
//! monitor's fork armed survives the exec) or by the monitor's SIGKILL.
//!
//! It has no standard library and no libc: a few raw system calls, a few hundred bytes of code,
//! so that each pod's memfd copy costs one page. Built by build.rs with `-nostartfiles
//! -static`, embedded in crust with `include_bytes!` (`monitor::pod_init`).
//!
//! The filter allows what the loop calls after it (`wait4`, `rt_sigtimedwait`, the signal
//! return and restart calls, `exit_group`); `rt_sigprocmask`, `prctl` and `seccomp` are called
//! only before it. SIGCHLD arrives blocked (the
//! monitor blocks it for its whole life, and the mask survives fork and exec), so the loop
//! waits for it with `rt_sigtimedwait` instead of a handler.
#![no_std]
#![no_main]

use core::arch::asm;

#[cfg(target_arch = "x86_64")]
mod nr {
    pub const WAIT4: usize = 61;
    pub const RT_SIGTIMEDWAIT: usize = 128;
    pub const RT_SIGRETURN: usize = 15;
    pub const PRCTL: usize = 157;
    pub const RT_SIGPROCMASK: usize = 14;
    pub const EXIT: usize = 60;
    pub const EXIT_GROUP: usize = 231;
    pub const RESTART_SYSCALL: usize = 219;
    pub const SECCOMP: usize = 317;
    /// AUDIT_ARCH_X86_64: EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE.
    pub const AUDIT_ARCH: u32 = 0xc000_003e;
}

#[cfg(target_arch = "aarch64")]
mod nr {
    pub const WAIT4: usize = 260;
    pub const RT_SIGTIMEDWAIT: usize = 137;
    pub const RT_SIGRETURN: usize = 139;
    pub const PRCTL: usize = 167;
    pub const RT_SIGPROCMASK: usize = 135;
    pub const EXIT: usize = 93;
    pub const EXIT_GROUP: usize = 94;
    pub const RESTART_SYSCALL: usize = 128;
    pub const SECCOMP: usize = 277;
    /// AUDIT_ARCH_AARCH64: EM_AARCH64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE.
    pub const AUDIT_ARCH: u32 = 0xc000_00b7;
}

const PR_SET_DUMPABLE: usize = 4;
const PR_SET_NAME: usize = 15;
const SIG_BLOCK: usize = 0;
const PR_SET_NO_NEW_PRIVS: usize = 38;
const SECCOMP_SET_MODE_FILTER: usize = 1;
const WNOHANG: usize = 1;
const SIGCHLD: usize = 17;

/// One raw system call with up to four arguments.
///
/// # Safety
/// The caller passes arguments the kernel may read or write as that call defines.
#[cfg(target_arch = "x86_64")]
unsafe fn syscall4(n: usize, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    // SAFETY: the x86_64 system call convention; rcx and r11 are clobbered by `syscall`.
    unsafe {
        asm!("syscall", inlateout("rax") n as isize => ret, in("rdi") a, in("rsi") b,
             in("rdx") c, in("r10") d, lateout("rcx") _, lateout("r11") _,
             options(nostack));
    }
    ret
}

/// One raw system call with up to four arguments.
///
/// # Safety
/// The caller passes arguments the kernel may read or write as that call defines.
#[cfg(target_arch = "aarch64")]
unsafe fn syscall4(n: usize, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    // SAFETY: the aarch64 system call convention (svc 0, number in x8).
    unsafe {
        asm!("svc 0", in("x8") n, inlateout("x0") a as isize => ret, in("x1") b, in("x2") c,
             in("x3") d, options(nostack));
    }
    ret
}

fn exit(code: usize) -> ! {
    loop {
        // SAFETY: exit_group takes a plain integer and does not return.
        unsafe { syscall4(nr::EXIT_GROUP, code, 0, 0, 0) };
    }
}

/// A classic BPF instruction, as `struct sock_filter`.
#[repr(C)]
struct Insn {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

/// `struct sock_fprog`.
#[repr(C)]
struct Prog {
    len: u16,
    filter: *const Insn,
}

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JEQ_K: u16 = 0x15;
const BPF_RET_K: u16 = 0x06;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ERRNO_EPERM: u32 = 0x0005_0000 | 1;
const RET_ALLOW: u32 = 0x7fff_0000;
/// Offsets in `struct seccomp_data`.
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;

const fn insn(code: u16, jt: u8, jf: u8, k: u32) -> Insn {
    Insn { code, jt, jf, k }
}

/// The calls the loop needs, and exit; anything else (a call made by a process that attached
/// to this one) fails with EPERM. A call of another architecture kills the process.
static FILTER: [Insn; 12] = [
    insn(BPF_LD_W_ABS, 0, 0, DATA_ARCH),
    insn(BPF_JEQ_K, 1, 0, nr::AUDIT_ARCH),
    insn(BPF_RET_K, 0, 0, RET_KILL_PROCESS),
    insn(BPF_LD_W_ABS, 0, 0, DATA_NR),
    // Each jump, when equal, lands on the last instruction (allow).
    insn(BPF_JEQ_K, 6, 0, nr::WAIT4 as u32),
    insn(BPF_JEQ_K, 5, 0, nr::RT_SIGTIMEDWAIT as u32),
    insn(BPF_JEQ_K, 4, 0, nr::RT_SIGRETURN as u32),
    insn(BPF_JEQ_K, 3, 0, nr::RESTART_SYSCALL as u32),
    insn(BPF_JEQ_K, 2, 0, nr::EXIT_GROUP as u32),
    insn(BPF_JEQ_K, 1, 0, nr::EXIT as u32),
    insn(BPF_RET_K, 0, 0, RET_ERRNO_EPERM),
    insn(BPF_RET_K, 0, 0, RET_ALLOW),
];

/// What `ps` shows (the exec of a memfd would name it after the descriptor).
static NAME: &[u8; 16] = b"crust-pod-init\0\0";

fn confine() {
    let set: u64 = 1 << (SIGCHLD - 1);
    // Blocked already when the monitor starts this program; blocking it here keeps the loop
    // correct whoever starts it.
    // SAFETY: `set` is a valid 8-byte sigset_t; no old set is asked for.
    let mask = unsafe {
        syscall4(
            nr::RT_SIGPROCMASK,
            SIG_BLOCK,
            &set as *const u64 as usize,
            0,
            8,
        )
    };
    // SAFETY: PR_SET_NAME reads at most 16 bytes from NAME, which is NUL-terminated.
    let name = unsafe { syscall4(nr::PRCTL, PR_SET_NAME, NAME.as_ptr() as usize, 0, 0) };
    // SAFETY: prctl with integer arguments only.
    let dumpable = unsafe { syscall4(nr::PRCTL, PR_SET_DUMPABLE, 0, 0, 0) };
    // Set by the monitor before the exec already; setting it again is harmless and makes this
    // program safe on its own.
    // SAFETY: as above.
    let nnp = unsafe { syscall4(nr::PRCTL, PR_SET_NO_NEW_PRIVS, 1, 0, 0) };
    let prog = Prog {
        len: FILTER.len() as u16,
        filter: FILTER.as_ptr(),
    };
    // SAFETY: `prog` points at a static filter of `len` instructions; the kernel copies it.
    let filter = unsafe {
        syscall4(
            nr::SECCOMP,
            SECCOMP_SET_MODE_FILTER,
            0,
            &prog as *const Prog as usize,
            0,
        )
    };
    // An init that cannot confine itself must not run: the pod fails to start instead.
    if mask != 0 || name != 0 || dumpable != 0 || nnp != 0 || filter != 0 {
        exit(126);
    }
}

fn reap_forever() -> ! {
    let set: u64 = 1 << (SIGCHLD - 1);
    loop {
        loop {
            // SAFETY: wait4 with no status or rusage buffer (null pointers).
            let r = unsafe { syscall4(nr::WAIT4, usize::MAX, 0, WNOHANG, 0) };
            if r <= 0 {
                break;
            }
        }
        // Returns when SIGCHLD is pending (or at once with EINTR/EAGAIN, which only loops).
        // SAFETY: `set` is a valid 8-byte sigset_t for the whole call; no siginfo, no timeout.
        unsafe { syscall4(nr::RT_SIGTIMEDWAIT, &set as *const u64 as usize, 0, 0, 8) };
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn _start() -> ! {
    confine();
    reap_forever()
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    exit(127)
}
