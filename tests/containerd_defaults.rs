//! crust's RuntimeDefault confinement is containerd's, checked against containerd's own code at
//! the version `hack/tools/containerd/go.mod` pins (the benchmarks' and differential tests'
//! peer), through `hack/tools/containerd/runtime-defaults`, so that a containerd bump that
//! changes a default fails here, naming what changed:
//!
//! - seccomp: for every capability set that can change it (none, each of the kernel's
//!   capabilities alone, the default set a container gets, all of them), the filter crust
//!   hands libcontainer holds exactly the rules containerd's `contrib/seccomp` hands runc,
//!   rule by rule (`src/oci/seccomp_default.json` is to follow);
//! - AppArmor: `crust-default` is the text containerd's `contrib/apparmor` generates on this
//!   host for a profile of that name (`src/container/bundle/apparmor.rs` is to follow).
//!
//! Needs Go and the containerd module (the Go module cache, or the module proxy); no root.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::process::Command;

use oci_spec::runtime::Capability;
use serde_json::{Value, json};

/// The kernel's capabilities, as containerd names them in a bounding set.
const ALL: [&str; 41] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

/// What a container gets when its request adds and drops nothing (containerd's and crust's).
const DEFAULT_SET: [&str; 14] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

const EPERM: u64 = 1;

/// containerd's profile for each set, from its own code.
fn containerd_profiles(sets: &[Vec<&str>]) -> Vec<Value> {
    let tool = common::tools::containerd_runtime_defaults();
    let out = Command::new(&tool)
        .arg("seccomp")
        .args(sets.iter().map(|s| s.join(",")))
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", tool.display()));
    assert!(
        out.status.success(),
        "{}: {}",
        tool.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let profiles: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(profiles.len(), sets.len());
    profiles
}

/// crust's profile for a set, as it hands it to libcontainer.
fn crust_profile(set: &[&str]) -> Value {
    let caps: HashSet<Capability> = set
        .iter()
        .map(|name| crust::oci::parse_capability(name).unwrap())
        .collect();
    serde_json::to_value(crust::oci::runtime_default_seccomp(&caps).unwrap()).unwrap()
}

/// A profile as what it means: the default action and errno, the architectures, and each of
/// its rules per call (libseccomp adds a rule naming several calls as one rule per call) as
/// one line: call, action, errno, arguments. `libcontainer` says the masked comparisons are
/// written for libcontainer (mask in valueTwo), and are turned back into runc's reading (mask
/// in value) to compare.
struct Meaning {
    default: String,
    arches: BTreeSet<String>,
    rules: BTreeSet<String>,
}

fn meaning(profile: &Value, libcontainer: bool) -> Meaning {
    let errno_of = |v: &Value, action: &Value| match v.as_u64() {
        Some(errno) => json!(errno),
        // runc and libcontainer both answer an errno action without one with EPERM.
        None if action == "SCMP_ACT_ERRNO" => json!(EPERM),
        None => Value::Null,
    };
    let default = format!(
        "{} {}",
        profile["defaultAction"],
        errno_of(&profile["defaultErrnoRet"], &profile["defaultAction"])
    );
    let arches = profile["architectures"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| a.to_string())
        .collect();
    let mut rules = BTreeSet::new();
    for rule in profile["syscalls"].as_array().into_iter().flatten() {
        let args: Vec<String> = rule["args"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|arg| {
                let (mut value, mut value_two) = (
                    arg["value"].as_u64().unwrap_or(0),
                    arg["valueTwo"].as_u64().unwrap_or(0),
                );
                if libcontainer && arg["op"] == "SCMP_CMP_MASKED_EQ" {
                    (value, value_two) = (value_two, value);
                }
                format!(
                    "arg{} {} {value:#x} {value_two:#x}",
                    arg["index"], arg["op"]
                )
            })
            .collect();
        let errno = errno_of(&rule["errnoRet"], &rule["action"]);
        for name in rule["names"].as_array().into_iter().flatten() {
            let name = name.as_str().unwrap_or_default();
            rules.insert(format!(
                "{name}: {} errno {errno} [{}]",
                rule["action"],
                args.join(", ")
            ));
        }
    }
    Meaning {
        default,
        arches,
        rules,
    }
}

/// Each difference once, with the capability sets it shows in.
#[derive(Default)]
struct Differences(BTreeMap<String, Vec<String>>);

impl Differences {
    fn add(&mut self, what: String, set: &str) {
        self.0.entry(what).or_default().push(set.to_owned());
    }

    fn report(&self) -> String {
        let mut out = Vec::new();
        for (what, sets) in &self.0 {
            let shown = if sets.len() > 4 {
                format!("{} and {} more sets", sets[..4].join(", "), sets.len() - 4)
            } else {
                sets.join(", ")
            };
            out.push(format!("{what}\n    with {shown}"));
        }
        out.join("\n")
    }
}

#[test]
fn runtime_default_is_containerd_s_rule_by_rule_for_every_capability_set() {
    let mut sets: Vec<(String, Vec<&str>)> = vec![("no capability".into(), vec![])];
    sets.extend(ALL.iter().map(|cap| (format!("{cap} alone"), vec![*cap])));
    sets.push(("the default set".into(), DEFAULT_SET.to_vec()));
    sets.push(("every capability".into(), ALL.to_vec()));
    let theirs = containerd_profiles(&sets.iter().map(|(_, s)| s.clone()).collect::<Vec<_>>());

    let mut differences = Differences::default();
    for ((name, set), containerd) in sets.iter().zip(&theirs) {
        let want = meaning(containerd, false);
        let got = meaning(&crust_profile(set), true);
        assert!(
            want.rules.len() >= 300,
            "{name}: containerd's profile has only {} rules: {containerd}",
            want.rules.len()
        );
        if got.default != want.default {
            let what = format!("default {} (containerd: {})", got.default, want.default);
            differences.add(what, name);
        }
        if got.arches != want.arches {
            let what = format!(
                "architectures {:?} (containerd: {:?})",
                got.arches, want.arches
            );
            differences.add(what, name);
        }
        for missing in want.rules.difference(&got.rules) {
            differences.add(format!("crust lacks containerd's rule {missing}"), name);
        }
        for extra in got.rules.difference(&want.rules) {
            differences.add(format!("crust has a rule containerd lacks: {extra}"), name);
        }
    }
    assert!(
        differences.0.is_empty(),
        "crust's RuntimeDefault seccomp profile (src/oci/seccomp_default.json) differs from \
         containerd's:\n{}",
        differences.report()
    );
}

#[test]
fn crust_default_apparmor_profile_is_containerd_s_template_on_this_host() {
    let tool = common::tools::containerd_runtime_defaults();
    let out = Command::new(&tool)
        .args(["apparmor", "crust-default"])
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", tool.display()));
    assert!(
        out.status.success(),
        "{}: {}",
        tool.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs = String::from_utf8(out.stdout).unwrap();
    let ours = crust::container::apparmor::default_profile_of_host();
    if ours != theirs {
        let diff: Vec<String> = ours
            .lines()
            .zip(theirs.lines().chain(std::iter::repeat("")))
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .map(|(i, (a, b))| format!("line {}: crust {a:?}, containerd {b:?}", i + 1))
            .collect();
        panic!(
            "crust-default differs from containerd's profile ({} lines against {}):\n{}",
            ours.lines().count(),
            theirs.lines().count(),
            diff.join("\n")
        );
    }
}
