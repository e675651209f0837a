//! `crust diagnose` against a real daemon: each situation is made the way kubelet makes it
//! (a CNI ADD that fails and is retried, a container that exits and is re-created with the
//! next attempt, a container over its memory limit, a StopContainer), and the report's first
//! line must give the cause. The daemon killed, the same report is read from its records.

mod common;

use std::time::Duration;

use common::workload::Env;
use common::{Daemon, diagnose, diagnose_cause as cause, pod_config, run_pod, run_request};
use crust::cri::pb;

#[tokio::test]
async fn a_pod_whose_cni_add_failed_is_explained_by_the_plugin() {
    let d = Daemon::start_with_plugins(&[r#"{"type":"crust-test-fail"}"#]);
    let mut c = d.client().await;
    // kubelet retries a RunPodSandbox that failed.
    for _ in 0..2 {
        let err = c
            .run_pod_sandbox(run_request(pod_config("doomed")))
            .await
            .unwrap_err();
        assert!(
            err.message().contains("fixture plugin refuses ADD"),
            "{err:?}"
        );
    }
    let (first, out) = cause(&d, "crust-test/doomed");
    assert!(
        first.starts_with(
            "pod crust-test/doomed has no sandbox: CNI ADD failed (2 times) at step \"set up the \
             pod network\""
        ),
        "{out}"
    );
    assert!(first.contains("fixture plugin refuses ADD"), "{out}");
    assert!(out.contains("no sandbox record"), "{out}");
    d.assert_clean();

    // Fixed, the pod runs; the report says so, with the failures still in the timeline.
    d.write_bridge_network(&[]);
    let id = run_pod(&mut c, pod_config("doomed")).await;
    let (first, out) = cause(&d, "crust-test/doomed");
    assert_eq!(
        first, "pod crust-test/doomed is healthy: ready, 0 of 0 containers running",
        "{out}"
    );
    assert_eq!(
        out.matches("failed at \"set up the pod network\"").count(),
        2,
        "{out}"
    );
    assert!(
        out.contains(&format!("sandbox {} ready", &id[..13])),
        "{out}"
    );
    // The sandbox id works as the target too, and an unknown one is an error.
    assert_eq!(cause(&d, &id[..8]).0, first);
    let (ok, _, err) = diagnose(&d, "no-such-thing", false);
    assert!(
        !ok && err.contains("no pod or container \"no-such-thing\""),
        "{err}"
    );
}

#[tokio::test]
async fn a_crash_looping_container_names_its_exits_and_its_log() {
    let mut e = Env::start().await;
    let pod = e.pod("looper").await;
    // As kubelet does: each exit is followed by a new container of the next attempt, the
    // dead one removed.
    let mut last = String::new();
    for attempt in 0..3 {
        if !last.is_empty() {
            e.remove(&last).await;
        }
        let mut config = e.config(
            "app",
            &["sh", "-c", "echo cannot open /etc/app.conf; exit 3"],
        );
        config.metadata.as_mut().unwrap().attempt = attempt;
        last = e.run(&pod, config).await;
        let s = e.wait_exit(&last, Duration::from_secs(30)).await;
        assert_eq!(s.exit_code, 3);
    }
    let (first, out) = cause(&e.d, &last[..10]);
    let want = format!(
        "container app ({}) of pod crust-test/looper is crash looping: it exited 3 times by \
         itself (kubelet re-created it 2 times); the last exit: exit code 3 (Error)",
        &last[..13]
    );
    assert!(first.starts_with(&want), "{out}");
    assert!(
        out.contains("| cannot open /etc/app.conf"),
        "the log's last lines: {out}"
    );
    // The pod as a whole has the same cause.
    assert_eq!(cause(&e.d, "crust-test/looper").0, first);
    let (ok, json, err) = diagnose(&e.d, &last, true);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["verdict"]["kind"], "crash_loop", "{json}");
    assert_eq!(v["containers"][0]["exits_by_itself"], 3, "{json}");
    assert_eq!(v["containers"][0]["exit"]["code"], 3, "{json}");
    let exits = v["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["fact"] == "container_exited")
        .count();
    assert_eq!(exits, 3, "{json}");
}

#[tokio::test]
async fn an_oom_killed_container_is_blamed_on_its_own_limit() {
    let mut e = Env::start().await;
    let pod = e.pod("hog").await;
    let id = e.run(&pod, e.memory_hog("hog")).await;
    let s = e.wait_exit(&id, Duration::from_secs(30)).await;
    assert_eq!(s.reason, "OOMKilled");
    let (first, out) = cause(&e.d, "crust-test/hog");
    assert_eq!(
        first,
        format!(
            "container hog ({}) of pod crust-test/hog was OOM killed by its own memory limit \
             (32 MiB)",
            &id[..13]
        ),
        "{out}"
    );
}

/// A container with no limit of its own in a pod whose cgroup is limited (kubelet's
/// UpdatePodSandboxResources): the pod's limit killed it, and the report says so.
#[tokio::test]
async fn an_oom_kill_at_the_pod_s_limit_is_blamed_on_the_pod() {
    let mut e = Env::start().await;
    let pod = e.pod("podhog").await;
    e.c.update_pod_sandbox_resources(pb::UpdatePodSandboxResourcesRequest {
        pod_sandbox_id: pod.0.clone(),
        resources: Some(pb::LinuxContainerResources {
            memory_limit_in_bytes: 48 << 20,
            ..Default::default()
        }),
        overhead: None,
    })
    .await
    .unwrap();
    let mut hog = e.memory_hog("hog");
    hog.linux.as_mut().unwrap().resources = None;
    let id = e.run(&pod, hog).await;
    let s = e.wait_exit(&id, Duration::from_secs(30)).await;
    assert_eq!(s.reason, "OOMKilled");
    let (first, out) = cause(&e.d, "crust-test/podhog");
    assert_eq!(
        first,
        format!(
            "container hog ({}) of pod crust-test/podhog was OOM killed by its pod's memory \
             limit (48 MiB): it has none of its own",
            &id[..13]
        ),
        "{out}"
    );
}

#[tokio::test]
async fn a_healthy_pod_then_a_stopped_container_then_a_dead_daemon() {
    let mut e = Env::start().await;
    let pod = e.pod("web").await;
    let id = e.run(&pod, e.config("server", &["sleep", "600"])).await;
    let (first, out) = cause(&e.d, "crust-test/web");
    assert_eq!(
        first, "pod crust-test/web is healthy: ready, 1 of 1 containers running",
        "{out}"
    );
    // Facts read from the running container's cgroup, and the daemon's conditions.
    assert!(out.contains("  cgroup /sys/fs/cgroup/"), "{out}");
    // Pressure where the kernel gives it: cgroup v2 (hack/cgroupv2-tests.sh runs this there).
    let v2 = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    assert_eq!(
        out.matches("  pressure (some, avg10): cpu ").count(),
        if v2 { 2 } else { 0 },
        "the pod's and the container's: {out}"
    );
    assert!(
        out.contains(" 1 tasks") || out.contains(" 2 tasks"),
        "{out}"
    );
    assert!(out.contains("crust is running"), "{out}");
    assert!(out.contains("network ready"), "{out}");
    assert!(out.contains("image filesystem"), "{out}");

    // Killed by the daemon's own stop, not by itself.
    e.stop(&id, 1).await;
    let (first, out) = cause(&e.d, &id);
    assert!(
        first.starts_with(&format!(
            "container server ({}) of pod crust-test/web was stopped by the client \
             (StopContainer, timeout 1 s): exit code 137 (Error), killed by SIGKILL",
            &id[..13]
        )),
        "{out}"
    );

    // With the daemon down the records tell the same, and the report says where it read.
    let second = e.run(&pod, e.config("sidecar", &["sleep", "600"])).await;
    e.d.kill9();
    let (first, out) = cause(&e.d, &second);
    assert_eq!(
        first,
        format!(
            "container sidecar ({}) of pod crust-test/web is running",
            &second[..13]
        ),
        "{out}"
    );
    assert!(
        out.contains("crust is not running: this report is read from its records alone"),
        "{out}"
    );
    e.relaunch().await;
    e.stop(&second, 0).await;
}
