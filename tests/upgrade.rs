//! A live upgrade: the crust of the previous release (tests/fixtures/upgrade/previous, built by
//! hack/build-previous.sh) runs pods, then this build starts over the same root and state and
//! adopts them whole, as containerd's TestUpgrade does across releases. The old pods' monitors
//! keep running the old binary, so every request of this daemon to them crosses the
//! daemon-to-monitor protocol between versions: Ping, Subscribe, Exec, ExecStream, Attach,
//! ReopenLog, Create, Start, Signal, Forget and Shutdown.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::workload::Env;
use common::*;
use crust::cri::pb;

/// The previous release's binary, built once per machine (make test builds it first).
fn previous_release() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("hack/build-previous.sh");
    let out = std::process::Command::new(&script)
        .output()
        .expect("hack/build-previous.sh runs");
    assert!(
        out.status.success(),
        "building the previous release failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// The binary process `pid` runs.
fn exe_of(pid: i32) -> PathBuf {
    std::fs::read_link(format!("/proc/{pid}/exe")).unwrap()
}

async fn pod_state(e: &mut Env, id: &str) -> i32 {
    e.c.pod_sandbox_status(pb::PodSandboxStatusRequest {
        pod_sandbox_id: id.into(),
        verbose: false,
    })
    .await
    .unwrap()
    .into_inner()
    .status
    .unwrap()
    .state
}

#[tokio::test]
async fn pods_of_the_previous_release_are_adopted_whole_and_keep_working() {
    let previous = previous_release();
    let mut e = Env::start_as(Some(&previous), |_| {}).await;
    // What the old daemon leaves: a pod with a running, an exited and a created container, and
    // a stopped pod.
    let pod = e.pod("old").await;
    let app = e
        .run(
            &pod,
            e.config("app", &["sh", "-c", "echo before; exec sleep 600"]),
        )
        .await;
    let done = e.run(&pod, e.config("done", &["sh", "-c", "exit 3"])).await;
    e.wait_exit(&done, Duration::from_secs(10)).await;
    let created = e
        .create(&pod, e.config("created", &["sleep", "600"]))
        .await
        .unwrap();
    // A shell reading its stdin, attached to after the upgrade.
    let mut config = e.config("shell", &["sh"]);
    config.stdin = true;
    config.stdin_once = true;
    let shell = e.run(&pod, config).await;
    let gone = e.pod("gone").await;
    e.run(&gone, e.config("app", &["sleep", "600"])).await;
    stop_pod(&mut e.c, &gone.0).await;
    eventually("the old app logs", Duration::from_secs(10), || {
        e.log_records(&pod, "app") == ["stdout F before"]
    })
    .await;
    assert!(
        e.d.sandbox_dir(&pod.0).join("sandbox.json").exists(),
        "the previous release keeps its records in the state directory"
    );
    let monitors = e.d.monitors();
    assert!(!monitors.is_empty());

    // The upgrade: the old daemon stops (its pods keep running), this build starts.
    assert!(e.d.terminate().success(), "{}", e.d.log());
    e.d.exe = PathBuf::from(env!("CARGO_BIN_EXE_crust"));
    e.relaunch().await;

    assert!(
        e.d.sandbox_record_dir(&pod.0).join("sandbox.json").exists()
            && !e.d.sandbox_dir(&pod.0).join("sandbox.json").exists(),
        "the records moved to the disk"
    );
    assert!(
        e.d.container_record_dir(&app)
            .join("container.json")
            .exists()
    );
    for pid in e.d.monitors() {
        assert_eq!(
            exe_of(pid),
            previous,
            "the old pods' monitors run the old binary"
        );
    }
    assert_eq!(
        pod_state(&mut e, &pod.0).await,
        pb::PodSandboxState::SandboxReady as i32
    );
    assert_eq!(
        pod_state(&mut e, &gone.0).await,
        pb::PodSandboxState::SandboxNotready as i32
    );
    let s = e.status(&app).await;
    assert_eq!(
        s.state,
        pb::ContainerState::ContainerRunning as i32,
        "{s:?}"
    );
    let s = e.status(&done).await;
    assert_eq!(
        (s.state, s.exit_code, s.reason.as_str()),
        (pb::ContainerState::ContainerExited as i32, 3, "Error")
    );
    let s = e.status(&created).await;
    assert_eq!(
        s.state,
        pb::ContainerState::ContainerCreated as i32,
        "{s:?}"
    );

    // ExecSync, streamed exec and attach through the old monitor.
    assert_eq!(e.sh(&app, "echo exec").await, "exec\n");
    let (code, out, err) = e.crictl(&["exec", &app, "echo", "streamed"], "");
    assert_eq!((code, out.as_str()), (0, "streamed\n"), "{err}");
    let (code, out, err) = e.crictl(&["attach", "-i", &shell], "echo attached\n");
    assert_eq!((code, out.as_str()), (0, "attached\n"), "{err}");
    assert_eq!(
        e.wait_exit(&shell, Duration::from_secs(10)).await.exit_code,
        0
    );
    // The log: what the old daemon's container wrote, then what it writes now, through a
    // ReopenContainerLog as kubelet's rotation sends it.
    e.sh(&app, "echo after > /proc/1/fd/1").await;
    eventually(
        "the app logs after the upgrade",
        Duration::from_secs(10),
        || e.log_records(&pod, "app") == ["stdout F before", "stdout F after"],
    )
    .await;
    let log = e.log_path(&pod, "app");
    std::fs::rename(&log, log.with_extension("log.1")).unwrap();
    e.c.reopen_container_log(pb::ReopenContainerLogRequest {
        container_id: app.clone(),
    })
    .await
    .unwrap();
    e.sh(&app, "echo rotated > /proc/1/fd/1").await;
    eventually(
        "the app logs to the reopened file",
        Duration::from_secs(10),
        || e.log_records(&pod, "app") == ["stdout F rotated"],
    )
    .await;

    // The created container starts; a new container is created and started in the old pod;
    // the app is stopped and started again as kubelet restarts it (attempt 1).
    e.c.start_container(pb::StartContainerRequest {
        container_id: created.clone(),
    })
    .await
    .unwrap();
    assert_eq!(
        e.status(&created).await.state,
        pb::ContainerState::ContainerRunning as i32
    );
    let new = e.run(&pod, e.config("new", &["sleep", "600"])).await;
    assert_eq!(e.sh(&new, "echo new").await, "new\n");
    e.stop(&app, 0).await;
    let s = e.status(&app).await;
    assert_eq!(
        (s.state, s.exit_code),
        (pb::ContainerState::ContainerExited as i32, 137)
    );
    e.remove(&app).await;
    e.wait_reclaimed(&app).await;
    let mut again = e.config("app", &["sleep", "600"]);
    again.metadata.as_mut().unwrap().attempt = 1;
    let app = e.run(&pod, again).await;
    assert_eq!(e.sh(&app, "echo again").await, "again\n");
    for pid in e.d.monitors() {
        assert_eq!(exe_of(pid), previous, "no monitor was replaced");
    }

    // This build restarted over what it adopted keeps it all too.
    e.d.kill9();
    e.relaunch().await;
    for id in [&created, &new, &app] {
        assert_eq!(
            e.status(id).await.state,
            pb::ContainerState::ContainerRunning as i32
        );
    }
    assert_eq!(e.sh(&new, "echo still").await, "still\n");

    // The leftovers are checked node-wide: the stopped pod goes first.
    remove_pod(&mut e.c, &gone.0).await;
    e.end_pod(&pod.0).await;
    assert!(e.d.monitors().is_empty(), "{:?}", e.d.monitors());
}
