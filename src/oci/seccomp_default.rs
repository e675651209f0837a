//! crust's `RuntimeDefault` seccomp profile: containerd's own, as data. `seccomp_default.json`
//! holds the profile of containerd's `contrib/seccomp/seccomp_default.go` (the containerd
//! module `hack/tools/containerd/go.mod` pins) in the Docker format `Localhost` profiles use:
//! an allow-list, refusing anything else with EPERM, whose rules a capability of the container
//! adds (`includes.caps`: CAP_SYS_ADMIN brings mount, unshare, setns...; CAP_SYS_PTRACE kcmp,
//! pidfd_getfd...) or removes (`excludes.caps`: the `clone` flag filter and the ENOSYS answer
//! to `clone3` go with CAP_SYS_ADMIN), and whose architecture rules apply on their own
//! architecture (`includes.arches`). Parsed once, it is resolved for each container's
//! capabilities like any node profile, so a container gets exactly the filter containerd
//! would give it; `tests/seccomp_default.rs` checks that rule by rule against containerd's
//! code for every capability set, so a change there fails a test rather than drifting.
//!
//! Where containerd decides by kernel version (`ptrace` and `process_vm_readv`/`writev` from
//! 4.8 on), the data holds what it decides on every kernel crust runs on.
//!
//! Unknown names are harmless: libcontainer skips syscalls its libseccomp cannot resolve.

use std::collections::HashSet;
use std::sync::LazyLock;

use oci_spec::runtime::{Capability, LinuxSeccomp};

use super::SpecError;
use super::seccomp::{SeccompProfile, parse_seccomp_profile};

/// The profile, in the Docker format (see the module docs).
const PROFILE_JSON: &str = include_str!("seccomp_default.json");

static PROFILE: LazyLock<Result<SeccompProfile, String>> = LazyLock::new(|| {
    parse_seccomp_profile("seccomp_default.json", PROFILE_JSON).map_err(|e| e.to_string())
});

/// The default profile for a container holding `caps` (its effective set, which crust makes
/// its bounding set too: containerd decides by the bounding set).
pub fn default_profile(caps: &HashSet<Capability>) -> Result<LinuxSeccomp, SpecError> {
    match &*PROFILE {
        Ok(profile) => Ok(profile.resolve(caps)),
        Err(why) => Err(SpecError::Bug(format!(
            "crust's built-in RuntimeDefault seccomp profile does not parse: {why}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use oci_spec::runtime::LinuxSeccompAction;

    use super::super::seccomp::{masked_eq, native_arches, syscall, verdict};
    use super::*;
    use LinuxSeccompAction::{ScmpActAllow as Allow, ScmpActErrno as Errno};

    const ENOSYS: u32 = 38;
    const CLONE_NEWNS: u64 = 0x0002_0000;
    const CLONE_NEWUSER: u64 = 0x1000_0000;
    /// CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER |
    /// CLONE_NEWPID | CLONE_NEWNET.
    const CLONE_NAMESPACE_FLAGS: u64 = 0x7e02_0000;
    /// What glibc's fork() passes: CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD.
    const FORK_FLAGS: u64 = 0x0120_0011;
    /// What pthread_create passes (VM, FS, FILES, SIGHAND, THREAD, SYSVSEM, SETTLS, ...).
    const THREAD_FLAGS: u64 = 0x003d_0f00;
    const AF_INET: u64 = 2;
    const AF_ALG: u64 = 38;
    const AF_VSOCK: u64 = 40;
    const AF_XDP: u64 = 44;

    fn caps(list: &[Capability]) -> HashSet<Capability> {
        list.iter().copied().collect()
    }

    fn args0(first: u64) -> [u64; 6] {
        [first, 0, 0, 0, 0, 0]
    }

    fn profile(list: &[Capability]) -> LinuxSeccomp {
        default_profile(&caps(list)).unwrap()
    }

    /// What a container may call under the default profile, with the capabilities that
    /// change it; the rows of issue 29 (adjtimex, name_to_handle_at, process_vm_readv and
    /// get_mempolicy) among them.
    #[test]
    fn allows_what_containerd_allows_and_refuses_the_escapes() {
        use Capability::{SysAdmin, SysChroot, SysModule, SysNice, SysPtrace, SysTime};
        let eperm = (Errno, None);
        let allow = (Allow, None);
        /// name, capabilities, syscall, its first argument, what the filter does.
        struct Case(
            &'static str,
            &'static [Capability],
            &'static str,
            u64,
            Verdict,
        );
        type Verdict = (LinuxSeccompAction, Option<u32>);
        let table = [
            Case("read", &[], "read", 0, allow),
            Case("execve", &[], "execve", 0, allow),
            Case("inet socket", &[], "socket", AF_INET, allow),
            Case("xdp socket", &[], "socket", AF_XDP, allow),
            Case("no AF_ALG", &[], "socket", AF_ALG, eperm),
            Case("no AF_VSOCK", &[], "socket", AF_VSOCK, eperm),
            Case("fork", &[], "clone", FORK_FLAGS, allow),
            Case("threads", &[], "clone", THREAD_FLAGS, allow),
            Case(
                "clone mount ns",
                &[],
                "clone",
                FORK_FLAGS | CLONE_NEWNS,
                eperm,
            ),
            Case("clone user ns", &[], "clone", CLONE_NEWUSER, eperm),
            Case("clone3 falls back", &[], "clone3", 0, (Errno, Some(ENOSYS))),
            Case("unshare", &[], "unshare", CLONE_NEWNS, eperm),
            Case("mount", &[], "mount", 0, eperm),
            Case("setns", &[], "setns", 0, eperm),
            Case("keyctl", &[], "keyctl", 0, eperm),
            Case("bpf", &[], "bpf", 0, eperm),
            Case("io_uring", &[], "io_uring_setup", 0, eperm),
            Case("kexec", &[], "kexec_load", 0, eperm),
            Case("chroot", &[], "chroot", 0, eperm),
            Case("adjtimex", &[], "adjtimex", 0, allow),
            Case("clock_adjtime", &[], "clock_adjtime", 0, allow),
            Case("settimeofday", &[], "settimeofday", 0, eperm),
            Case("name_to_handle_at", &[], "name_to_handle_at", 0, allow),
            Case("open_by_handle_at", &[], "open_by_handle_at", 0, eperm),
            Case("process_vm_readv", &[], "process_vm_readv", 0, allow),
            Case("process_vm_writev", &[], "process_vm_writev", 0, allow),
            Case("ptrace", &[], "ptrace", 0, allow),
            Case("kcmp", &[], "kcmp", 0, eperm),
            Case("get_mempolicy", &[], "get_mempolicy", 0, eperm),
            Case("personality linux", &[], "personality", 0, allow),
            Case("personality query", &[], "personality", 0xffff_ffff, allow),
            Case("personality odd", &[], "personality", 0x0040_0000, eperm),
            Case("admin mount", &[SysAdmin], "mount", 0, allow),
            Case("admin unshare", &[SysAdmin], "unshare", CLONE_NEWNS, allow),
            Case("admin clone ns", &[SysAdmin], "clone", CLONE_NEWNS, allow),
            Case("admin clone3", &[SysAdmin], "clone3", 0, allow),
            Case("admin still no keyctl", &[SysAdmin], "keyctl", 0, eperm),
            Case(
                "admin still no modules",
                &[SysAdmin],
                "init_module",
                0,
                eperm,
            ),
            Case("nice get_mempolicy", &[SysNice], "get_mempolicy", 0, allow),
            Case("chroot cap", &[SysChroot], "chroot", 0, allow),
            Case("module cap", &[SysModule], "finit_module", 0, allow),
            Case("ptrace cap", &[SysPtrace], "kcmp", 0, allow),
            Case("time cap", &[SysTime], "settimeofday", 0, allow),
        ];
        for Case(name, caps, call, first, want) in table {
            assert_eq!(verdict(&profile(caps), call, args0(first)), want, "{name}");
        }
    }

    #[test]
    fn the_embedded_profile_parses_and_covers_compat_architectures() {
        let profile = profile(&[Capability::SysAdmin, Capability::Perfmon]);
        assert_eq!(profile.default_action(), Errno);
        assert_eq!(
            profile.default_errno_ret(),
            None,
            "EPERM, as runc and libcontainer read it"
        );
        if cfg!(target_arch = "x86_64") {
            let arches = profile.architectures().clone().unwrap();
            assert_eq!(arches, native_arches());
            assert_eq!(arches.len(), 3);
        }
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
    /// falls back from clone3 to clone) while unshare and AF_ALG sockets are refused.
    #[test]
    fn libcontainer_runs_processes_under_the_default_profile() {
        in_filtered_child(profile(&[]), || {
            let status = std::process::Command::new("/bin/sh")
                .args(["-c", "exit 7"])
                .status()
                .map_err(|err| format!("spawning /bin/sh: {err}"))?;
            if status.code() != Some(7) {
                return Err(format!("/bin/sh ended with {status}"));
            }
            match nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS) {
                Err(nix::errno::Errno::EPERM) => {}
                other => return Err(format!("unshare(CLONE_NEWNS) gave {other:?}, not EPERM")),
            }
            let alg = nix::sys::socket::socket(
                nix::sys::socket::AddressFamily::Alg,
                nix::sys::socket::SockType::SeqPacket,
                nix::sys::socket::SockFlag::empty(),
                None,
            );
            match alg {
                Err(nix::errno::Errno::EPERM) => Ok(()),
                other => Err(format!("socket(AF_ALG) gave {other:?}, not EPERM")),
            }
        });
    }

    /// With every capability, rules repeat a call (bpf under CAP_SYS_ADMIN and CAP_BPF), as
    /// containerd's do: libcontainer still loads the filter.
    #[test]
    fn libcontainer_loads_the_profile_of_every_capability() {
        let all: Vec<Capability> = super::super::capabilities::ALL_CAPABILITIES
            .iter()
            .map(|(_, cap)| *cap)
            .collect();
        in_filtered_child(profile(&all), || Ok(()));
    }
}
