//! Seccomp profiles from the node (`Localhost`): parsed from JSON in the OCI format
//! (`architectures`, `syscalls[].names`) or the Docker format that kubelet users and critest
//! write (`archMap`, `syscalls[].name`, `includes` / `excludes` by capability and
//! architecture), then resolved into the `linux.seccomp` of one container once its
//! capabilities are known.
//!
//! One libcontainer quirk lives here too: libcontainer 0.7 hands `SCMP_CMP_MASKED_EQ`
//! arguments to libseccomp as mask = `valueTwo`, datum = `value`, while runc and every
//! profile written for it mean mask = `value`, datum = `valueTwo`. [`masked_eq`] builds an
//! argument the way libcontainer reads it, and resolving a profile swaps its masked
//! comparisons accordingly, so `clone` flag filters keep their meaning.

use std::collections::HashSet;

use oci_spec::runtime::{
    Arch, Capability, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompArg, LinuxSeccompArgBuilder,
    LinuxSeccompFilterFlag, LinuxSeccompOperator, LinuxSyscall,
};
use serde::Deserialize;

use super::SpecError;
use super::capabilities::parse_capability;

/// A parsed node profile, not yet specialised to a container's capabilities.
#[derive(Debug, Clone, PartialEq)]
pub struct SeccompProfile {
    default_action: LinuxSeccompAction,
    default_errno_ret: Option<u32>,
    architectures: Vec<Arch>,
    flags: Vec<LinuxSeccompFilterFlag>,
    rules: Vec<Rule>,
}

#[derive(Debug, Clone, PartialEq)]
struct Rule {
    names: Vec<String>,
    action: LinuxSeccompAction,
    errno_ret: Option<u32>,
    args: Vec<LinuxSeccompArg>,
    includes: Condition,
    excludes: Condition,
}

/// Docker's `includes` / `excludes`: capabilities the container must (not) have and
/// architectures (Go names such as `amd64`) it must (not) run on.
#[derive(Debug, Clone, Default, PartialEq)]
struct Condition {
    caps: Vec<Capability>,
    arches: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProfileJson {
    default_action: LinuxSeccompAction,
    #[serde(default)]
    default_errno_ret: Option<u32>,
    #[serde(default)]
    architectures: Vec<Arch>,
    #[serde(default)]
    arch_map: Vec<ArchMapJson>,
    #[serde(default)]
    flags: Vec<LinuxSeccompFilterFlag>,
    #[serde(default)]
    syscalls: Vec<SyscallJson>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ArchMapJson {
    architecture: Arch,
    #[serde(default)]
    sub_architectures: Vec<Arch>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SyscallJson {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    names: Vec<String>,
    action: LinuxSeccompAction,
    #[serde(default)]
    errno_ret: Option<u32>,
    #[serde(default)]
    args: Vec<LinuxSeccompArg>,
    #[serde(default)]
    includes: ConditionJson,
    #[serde(default)]
    excludes: ConditionJson,
}

#[derive(Deserialize, Default)]
struct ConditionJson {
    #[serde(default)]
    caps: Vec<String>,
    #[serde(default)]
    arches: Vec<String>,
}

/// Parses a node seccomp profile; `path` only names the file in errors.
pub fn parse_seccomp_profile(path: &str, json: &str) -> Result<SeccompProfile, SpecError> {
    let invalid = |why: String| SpecError::Invalid(format!("seccomp profile {path}: {why}"));
    let raw: ProfileJson = serde_json::from_str(json).map_err(|e| invalid(e.to_string()))?;
    if !raw.architectures.is_empty() && !raw.arch_map.is_empty() {
        return Err(invalid("has both architectures and archMap".into()));
    }
    let mut architectures = raw.architectures;
    for entry in &raw.arch_map {
        if native_arches().first() == Some(&entry.architecture) {
            architectures.push(entry.architecture);
            architectures.extend(&entry.sub_architectures);
        }
    }
    if raw.default_action == LinuxSeccompAction::ScmpActNotify {
        return Err(invalid(
            "SCMP_ACT_NOTIFY needs a seccomp agent, which crust does not run".into(),
        ));
    }
    let mut rules = Vec::with_capacity(raw.syscalls.len());
    for (i, call) in raw.syscalls.into_iter().enumerate() {
        if call.action == LinuxSeccompAction::ScmpActNotify {
            return Err(invalid(format!(
                "syscalls[{i}]: SCMP_ACT_NOTIFY needs a seccomp agent, which crust does not run"
            )));
        }
        let mut names = call.names;
        names.extend(call.name);
        if names.is_empty() {
            return Err(invalid(format!("syscalls[{i}] names no syscall")));
        }
        let condition = |c: ConditionJson, field: &str| -> Result<Condition, SpecError> {
            let caps = c.caps.iter().map(|name| {
                parse_capability(name).map_err(|_| {
                    invalid(format!(
                        "syscalls[{i}].{field}.caps: unknown capability {name:?}"
                    ))
                })
            });
            Ok(Condition {
                caps: caps.collect::<Result<_, _>>()?,
                arches: c.arches,
            })
        };
        rules.push(Rule {
            names,
            action: call.action,
            errno_ret: call.errno_ret,
            args: call.args,
            includes: condition(call.includes, "includes")?,
            excludes: condition(call.excludes, "excludes")?,
        });
    }
    Ok(SeccompProfile {
        default_action: raw.default_action,
        default_errno_ret: raw.default_errno_ret,
        architectures,
        flags: raw.flags,
        rules,
    })
}

impl SeccompProfile {
    /// The filter for a container with these (effective) capabilities: Docker-format rules
    /// whose conditions do not hold are left out, and masked comparisons are written the
    /// way libcontainer reads them.
    pub(crate) fn resolve(&self, caps: &HashSet<Capability>) -> LinuxSeccomp {
        let arch = go_arch();
        let applies = |rule: &Rule| {
            let inc = &rule.includes;
            let exc = &rule.excludes;
            inc.caps.iter().all(|c| caps.contains(c))
                && (inc.arches.is_empty() || inc.arches.iter().any(|a| a == arch))
                && !exc.caps.iter().any(|c| caps.contains(c))
                && !exc.arches.iter().any(|a| a == arch)
        };
        let syscalls = self
            .rules
            .iter()
            .filter(|rule| applies(rule))
            .map(|rule| {
                let args = rule.args.iter().map(runc_arg_to_libcontainer).collect();
                syscall(&rule.names, rule.action, rule.errno_ret, args)
            })
            .collect();
        let mut seccomp = LinuxSeccomp::default();
        seccomp
            .set_default_action(self.default_action)
            .set_default_errno_ret(self.default_errno_ret)
            .set_architectures(Some(self.architectures.clone()).filter(|a| !a.is_empty()))
            .set_flags(Some(self.flags.clone()).filter(|f| !f.is_empty()))
            .set_syscalls(Some(syscalls));
        seccomp
    }
}

/// A rule for `names` with `action` (and its errno) under `args` (all must hold).
pub(crate) fn syscall(
    names: &[impl AsRef<str>],
    action: LinuxSeccompAction,
    errno_ret: Option<u32>,
    args: Vec<LinuxSeccompArg>,
) -> LinuxSyscall {
    let mut rule = LinuxSyscall::default();
    rule.set_names(names.iter().map(|n| n.as_ref().to_string()).collect())
        .set_action(action)
        .set_errno_ret(errno_ret)
        .set_args(Some(args).filter(|a| !a.is_empty()));
    rule
}

/// `arg[index] & mask == datum`, written for libcontainer 0.7, which passes `valueTwo` to
/// libseccomp as the mask and `value` as the datum (runc reads them the other way round).
pub(crate) fn masked_eq(index: usize, mask: u64, datum: u64) -> LinuxSeccompArg {
    LinuxSeccompArgBuilder::default()
        .index(index)
        .value(datum)
        .value_two(mask)
        .op(LinuxSeccompOperator::ScmpCmpMaskedEq)
        .build()
        // Cannot fail: every field of the builder has a default.
        .unwrap_or_default()
}

/// The spec's masked comparisons rewritten the way runc and crun read them (mask in `value`,
/// datum in `valueTwo`), for a handler whose containers a runtime binary runs: the spec is
/// built for libcontainer, which reads them the other way round.
pub fn masked_as_runc_reads(spec: &mut oci_spec::runtime::Spec) {
    let Some(seccomp) = spec
        .linux_mut()
        .as_mut()
        .and_then(|l| l.seccomp_mut().as_mut())
    else {
        return;
    };
    let swap = |arg: &LinuxSeccompArg| {
        if arg.op() != LinuxSeccompOperator::ScmpCmpMaskedEq {
            return *arg;
        }
        // libcontainer's: value = datum, valueTwo = mask.
        LinuxSeccompArgBuilder::default()
            .index(arg.index())
            .value(arg.value_two().unwrap_or(0))
            .value_two(arg.value())
            .op(LinuxSeccompOperator::ScmpCmpMaskedEq)
            .build()
            .unwrap_or(*arg)
    };
    let syscalls = seccomp.syscalls().clone().map(|rules| {
        rules
            .into_iter()
            .map(|mut rule| {
                let args = rule.args().as_ref().map(|a| a.iter().map(swap).collect());
                rule.set_args(args);
                rule
            })
            .collect()
    });
    seccomp.set_syscalls(syscalls);
}

/// A profile's argument as runc reads it (mask in `value`), rewritten for libcontainer.
fn runc_arg_to_libcontainer(arg: &LinuxSeccompArg) -> LinuxSeccompArg {
    if arg.op() == LinuxSeccompOperator::ScmpCmpMaskedEq {
        masked_eq(arg.index(), arg.value(), arg.value_two().unwrap_or(0))
    } else {
        *arg
    }
}

/// The architectures a filter covers on this build: the native one first, then the ones
/// its kernel also runs (32-bit x86 and x32 on x86_64), so they cannot bypass the filter.
pub(crate) fn native_arches() -> Vec<Arch> {
    if cfg!(target_arch = "x86_64") {
        vec![Arch::ScmpArchX86_64, Arch::ScmpArchX86, Arch::ScmpArchX32]
    } else if cfg!(target_arch = "aarch64") {
        vec![Arch::ScmpArchAarch64, Arch::ScmpArchArm]
    } else {
        Vec::new()
    }
}

/// This build's architecture as Go (and so Docker profiles) names it.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "x86" => "386",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// What the filter does to one call, evaluated the way libcontainer builds it (rules in
/// order; a rule with arguments needs all of them to hold; masked comparisons with mask =
/// `valueTwo`). For tests of the profiles built here.
#[cfg(test)]
pub(crate) fn verdict(
    seccomp: &LinuxSeccomp,
    name: &str,
    args: [u64; 6],
) -> (LinuxSeccompAction, Option<u32>) {
    let holds = |arg: &LinuxSeccompArg| {
        let x = args[arg.index()];
        let v = arg.value();
        match arg.op() {
            LinuxSeccompOperator::ScmpCmpNe => x != v,
            LinuxSeccompOperator::ScmpCmpLt => x < v,
            LinuxSeccompOperator::ScmpCmpLe => x <= v,
            LinuxSeccompOperator::ScmpCmpEq => x == v,
            LinuxSeccompOperator::ScmpCmpGe => x >= v,
            LinuxSeccompOperator::ScmpCmpGt => x > v,
            LinuxSeccompOperator::ScmpCmpMaskedEq => x & arg.value_two().unwrap_or(0) == v,
        }
    };
    seccomp
        .syscalls()
        .iter()
        .flatten()
        .filter(|rule| rule.names().iter().any(|n| n == name))
        .find(|rule| rule.args().iter().flatten().all(holds))
        .map(|rule| (rule.action(), rule.errno_ret()))
        .unwrap_or((seccomp.default_action(), seccomp.default_errno_ret()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use LinuxSeccompAction::{ScmpActAllow as Allow, ScmpActErrno as Errno};

    /// critest's `seccompBlockHostNameProfile`, verbatim in shape.
    const BLOCK_HOSTNAME: &str = r#"{
     "defaultAction": "SCMP_ACT_ALLOW",
     "syscalls": [ { "names": ["sethostname"], "action": "SCMP_ACT_ERRNO" } ]
}"#;

    const DOCKER_STYLE: &str = r#"{
  "defaultAction": "SCMP_ACT_ERRNO",
  "defaultErrnoRet": 1,
  "archMap": [
    { "architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"] },
    { "architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"] }
  ],
  "syscalls": [
    { "names": ["read", "write"], "action": "SCMP_ACT_ALLOW", "comment": "ignored" },
    { "name": "getpid", "action": "SCMP_ACT_ALLOW" },
    { "names": ["mount"], "action": "SCMP_ACT_ALLOW", "includes": { "caps": ["CAP_SYS_ADMIN"] } },
    { "names": ["ptrace"], "action": "SCMP_ACT_ALLOW", "excludes": { "caps": ["SYS_PTRACE"] } },
    { "names": ["arch_prctl"], "action": "SCMP_ACT_ALLOW", "includes": { "arches": ["amd64"], "minKernel": "4.8" } },
    { "names": ["clone"], "action": "SCMP_ACT_ALLOW",
      "args": [ { "index": 0, "value": 2114060288, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ" } ] }
  ]
}"#;

    fn caps(names: &[&str]) -> HashSet<Capability> {
        names.iter().map(|n| parse_capability(n).unwrap()).collect()
    }

    #[test]
    fn parses_oci_format() {
        let profile = parse_seccomp_profile("/p.json", BLOCK_HOSTNAME).unwrap();
        let seccomp = profile.resolve(&caps(&["SYS_ADMIN"]));
        assert_eq!(seccomp.default_action(), Allow);
        assert_eq!(seccomp.architectures(), &None);
        assert_eq!(verdict(&seccomp, "sethostname", [0; 6]), (Errno, None));
        assert_eq!(verdict(&seccomp, "chmod", [0; 6]), (Allow, None));
    }

    #[test]
    fn parses_docker_format_with_conditions() {
        let profile = parse_seccomp_profile("/d.json", DOCKER_STYLE).unwrap();
        let plain = profile.resolve(&caps(&["CHOWN"]));
        if cfg!(target_arch = "x86_64") {
            assert_eq!(plain.architectures().as_deref(), Some(&native_arches()[..]));
        }
        let table: &[(&HashSet<Capability>, &str, [u64; 6], LinuxSeccompAction)] = &[
            (&caps(&[]), "read", [0; 6], Allow),
            (&caps(&[]), "getpid", [0; 6], Allow),
            (&caps(&[]), "mount", [0; 6], Errno),
            (&caps(&["SYS_ADMIN"]), "mount", [0; 6], Allow),
            (&caps(&[]), "ptrace", [0; 6], Allow),
            (&caps(&["SYS_PTRACE"]), "ptrace", [0; 6], Errno),
            // fork()-style flags pass, CLONE_NEWNS (0x20000) does not.
            (&caps(&[]), "clone", [0x0120_0011, 0, 0, 0, 0, 0], Allow),
            (&caps(&[]), "clone", [0x0002_0000, 0, 0, 0, 0, 0], Errno),
        ];
        for (caps, name, args, want) in table {
            let seccomp = profile.resolve(caps);
            assert_eq!(
                verdict(&seccomp, name, *args).0,
                *want,
                "{name} with {caps:?}"
            );
        }
        let arch_rule = plain
            .syscalls()
            .iter()
            .flatten()
            .any(|s| s.names()[0] == "arch_prctl");
        assert_eq!(arch_rule, go_arch() == "amd64");
    }

    #[test]
    fn masked_comparisons_are_written_for_libcontainer() {
        // clone's first argument rule: its (value, value_two)
        let clone_arg = |seccomp: &LinuxSeccomp| {
            let clone = seccomp
                .syscalls()
                .iter()
                .flatten()
                .find(|s| s.names()[0] == "clone");
            let arg = clone.and_then(|s| s.args().as_ref()).map(|a| a[0]).unwrap();
            (arg.value(), arg.value_two())
        };
        let profile = parse_seccomp_profile("/d.json", DOCKER_STYLE).unwrap();
        let seccomp = profile.resolve(&HashSet::new());
        assert_eq!(clone_arg(&seccomp), (0, Some(2_114_060_288)));
        // And back the way runc and crun read them, for a handler that runs a binary.
        let mut spec = oci_spec::runtime::Spec::default();
        let mut linux = oci_spec::runtime::Linux::default();
        linux.set_seccomp(Some(seccomp));
        spec.set_linux(Some(linux));
        masked_as_runc_reads(&mut spec);
        let seccomp = spec.linux().as_ref().unwrap().seccomp().clone().unwrap();
        assert_eq!(clone_arg(&seccomp), (2_114_060_288, Some(0)));
    }

    #[test]
    fn refuses_bad_profiles() {
        let table = [
            (
                "not json",
                "seccomp profile /x.json: expected ident at line 1 column 2",
            ),
            (
                r#"{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86"],
                   "archMap":[{"architecture":"SCMP_ARCH_X86_64"}]}"#,
                "seccomp profile /x.json: has both architectures and archMap",
            ),
            (
                r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"action":"SCMP_ACT_ERRNO"}]}"#,
                "seccomp profile /x.json: syscalls[0] names no syscall",
            ),
            (
                r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["x"],
                   "action":"SCMP_ACT_NOTIFY"}]}"#,
                "seccomp profile /x.json: syscalls[0]: SCMP_ACT_NOTIFY needs a seccomp agent, \
                 which crust does not run",
            ),
            (
                r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["x"],
                   "action":"SCMP_ACT_ERRNO","includes":{"caps":["CAP_FLY"]}}]}"#,
                "seccomp profile /x.json: syscalls[0].includes.caps: unknown capability \"CAP_FLY\"",
            ),
        ];
        for (json, want) in table {
            let err = parse_seccomp_profile("/x.json", json).unwrap_err();
            assert!(matches!(err, SpecError::Invalid(_)));
            assert_eq!(err.to_string(), want);
        }
        let bad_action = r#"{"defaultAction":"SCMP_ACT_MAYBE"}"#;
        let err = parse_seccomp_profile("/x.json", bad_action)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("seccomp profile /x.json: unknown variant"),
            "{err}"
        );
    }
}
