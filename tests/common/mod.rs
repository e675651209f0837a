//! Shared helpers for the integration tests.
#![allow(dead_code)]

pub mod containerd_peer;
pub mod crash;
pub mod daemon;
pub mod forward;
pub mod kubelet;
pub mod oci_build;
pub mod registry;
pub mod tools;
pub mod workload;

pub use daemon::Daemon;

use crust::cri::pb;

pub type Client = pb::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;

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

/// A PullImageRequest for `image`, with no credentials or sandbox config.
pub fn pull_request(image: &str) -> pb::PullImageRequest {
    pb::PullImageRequest {
        image: Some(pb::ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
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

/// Runs a pod and returns its id; panics with the status when it fails.
pub async fn run_pod(c: &mut Client, config: pb::PodSandboxConfig) -> String {
    c.run_pod_sandbox(run_request(config))
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id
}

/// A pod's verbose status: the status and the parsed `info` JSON.
pub async fn status(c: &mut Client, id: &str) -> (pb::PodSandboxStatus, serde_json::Value) {
    let r = c
        .pod_sandbox_status(pb::PodSandboxStatusRequest {
            pod_sandbox_id: id.into(),
            verbose: true,
        })
        .await
        .unwrap()
        .into_inner();
    (
        r.status.unwrap(),
        serde_json::from_str(&r.info["info"]).unwrap(),
    )
}

/// The pid of the pod's monitor, from the verbose status.
pub async fn monitor_pid(c: &mut Client, id: &str) -> i32 {
    let (_, info) = status(c, id).await;
    info["monitor"]["pid"]
        .as_i64()
        .expect("verbose info names the monitor pid") as i32
}

pub async fn stop_pod(c: &mut Client, id: &str) {
    c.stop_pod_sandbox(pb::StopPodSandboxRequest {
        pod_sandbox_id: id.into(),
    })
    .await
    .unwrap();
}

pub async fn remove_pod(c: &mut Client, id: &str) {
    c.remove_pod_sandbox(pb::RemovePodSandboxRequest {
        pod_sandbox_id: id.into(),
    })
    .await
    .unwrap();
}

/// Sets the pod's namespace modes (network, pid, ipc).
pub fn with_namespaces(
    config: &mut pb::PodSandboxConfig,
    network: pb::NamespaceMode,
    pid: pb::NamespaceMode,
    ipc: pb::NamespaceMode,
) {
    let linux = config.linux.get_or_insert_with(Default::default);
    linux
        .security_context
        .get_or_insert_with(Default::default)
        .namespace_options = Some(pb::NamespaceOption {
        network: network as i32,
        pid: pid as i32,
        ipc: ipc as i32,
        ..Default::default()
    });
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub use registry::free_port;

/// `crust diagnose TARGET` on daemon `d`'s directories: (success, stdout, stderr).
pub fn diagnose(d: &Daemon, target: &str, json: bool) -> (bool, String, String) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_crust"));
    cmd.arg("diagnose").arg(target);
    if json {
        cmd.arg("--json");
    }
    let out = cmd
        .arg("--config")
        .arg(&d.config)
        .arg("--state")
        .arg(&d.state)
        .arg("--root")
        .arg(&d.root)
        .output()
        .expect("crust runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The first line of `crust diagnose TARGET` (which must succeed), and the whole report.
pub fn diagnose_cause(d: &Daemon, target: &str) -> (String, String) {
    let (ok, out, err) = diagnose(d, target, false);
    assert!(ok, "crust diagnose {target} failed: {err}\n{out}");
    (out.lines().next().unwrap_or_default().to_owned(), out)
}

/// Waits, polling every 20 ms, until `done` holds; panics naming `what` after `within`.
pub async fn eventually(what: &str, within: std::time::Duration, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + within;
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within {within:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
