//! Shared helpers for the integration tests.
#![allow(dead_code)]

pub mod daemon;

pub use daemon::Daemon;

use crust::cri::pb;

/// A minimal valid pod config with a unique name.
pub fn pod_config(name: &str) -> pb::PodSandboxConfig {
    pb::PodSandboxConfig {
        metadata: Some(pb::PodSandboxMetadata {
            name: name.into(),
            uid: format!("uid-{name}"),
            namespace: "crust-test".into(),
            attempt: 0,
        }),
        hostname: name.into(),
        ..Default::default()
    }
}

pub fn run_request(config: pb::PodSandboxConfig) -> pb::RunPodSandboxRequest {
    pb::RunPodSandboxRequest {
        config: Some(config),
        runtime_handler: String::new(),
    }
}

/// Runs a command and returns its stdout; panics with its stderr when it fails.
pub fn sh(cmd: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(cmd).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The namespace inode link (`net:[4026531833]`) of `kind` for `pid`.
pub fn ns_of(pid: i32, kind: &str) -> String {
    std::fs::read_link(format!("/proc/{pid}/ns/{kind}"))
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

pub fn ns_of_self(kind: &str) -> String {
    std::fs::read_link(format!("/proc/self/ns/{kind}"))
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// Whether `pid` has exited (gone, or a zombie its new parent has not reaped yet).
pub fn exited(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(") ")
            .next()
            .is_some_and(|rest| rest.starts_with('Z')),
    }
}
