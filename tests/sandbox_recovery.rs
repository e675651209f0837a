//! Daemon restarts: SIGKILL at any point, graceful stop, monitors that die, half-created pods.

mod common;

use std::time::Duration;

use common::*;
use crust::cri::pb;

#[tokio::test]
async fn sigkilled_daemon_recovers_every_pod_with_its_state_and_ip() {
    let mut d = Daemon::start();
    let mut c = d.client().await;
    let a = run_pod(&mut c, pod_config("a")).await;
    let b = run_pod(&mut c, pod_config("b")).await;
    stop_pod(&mut c, &b).await;
    let (before, info) = status(&mut c, &a).await;
    let monitor = info["monitor"]["pid"].as_i64().unwrap() as i32;

    d.kill9();
    assert!(!exited(monitor), "a daemon crash does not touch pods");
    d.launch();
    let mut c = d.client().await;
    let (after, _) = status(&mut c, &a).await;
    assert_eq!(after.state, pb::PodSandboxState::SandboxReady as i32);
    assert_eq!(after.network, before.network, "same IP after restart");
    assert_eq!(after.created_at, before.created_at);
    let (b_after, _) = status(&mut c, &b).await;
    assert_eq!(b_after.state, pb::PodSandboxState::SandboxNotready as i32);
    // The name is still taken.
    let err = c
        .run_pod_sandbox(run_request(pod_config("a")))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::AlreadyExists);
    // Stopping and removing after the restart frees everything.
    for id in [&a, &b] {
        stop_pod(&mut c, id).await;
        remove_pod(&mut c, id).await;
    }
    assert!(exited(monitor));
    d.assert_clean();
}

// Multi-threaded, so the dropped client's connection closes while this thread waits on the
// daemon's exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_gracefully_and_pods_keep_running() {
    let mut d = Daemon::start();
    let mut c = d.client().await;
    let id = run_pod(&mut c, pod_config("stay")).await;
    let (_, info) = status(&mut c, &id).await;
    let monitor = info["monitor"]["pid"].as_i64().unwrap() as i32;
    drop(c);
    assert!(
        d.terminate().success(),
        "clean exit on SIGTERM; log:\n{}",
        d.log()
    );
    assert!(!d.socket.exists(), "socket removed on a clean stop");
    assert!(!exited(monitor), "pods outlive the daemon");
    d.launch();
    let mut c = d.client().await;
    assert_eq!(
        status(&mut c, &id).await.0.state,
        pb::PodSandboxState::SandboxReady as i32
    );
    remove_pod(&mut c, &id).await;
    d.assert_clean();
}

/// A StopPodSandbox that a crash cut short right after it unmounted the pod's network
/// namespace pin (found by the crash-point sweep: the pin stays as a plain file) finishes on the
/// next call: CNI DEL gets an empty netns, as containerd sends, and releases the pod's address.
#[tokio::test]
async fn a_stop_cut_short_after_the_netns_pin_went_finishes_on_the_next_call() {
    let mut d = Daemon::start();
    let mut c = d.client().await;
    let id = run_pod(&mut c, pod_config("unpinned")).await;
    assert_eq!(d.allocated_ips().len(), 1);
    let pin = d.ns_dir().join(format!("{id}.net"));
    assert!(pin.exists(), "{}", pin.display());
    d.kill9();
    nix::mount::umount2(&pin, nix::mount::MntFlags::MNT_DETACH).unwrap();
    assert!(pin.is_file(), "the pin stays as a plain file");
    d.launch();
    let mut c = d.client().await;
    stop_pod(&mut c, &id).await;
    assert!(d.allocated_ips().is_empty(), "{:?}", d.allocated_ips());
    assert!(!pin.exists(), "the pin file is gone too");
    remove_pod(&mut c, &id).await;
    d.assert_clean();
}

#[tokio::test]
async fn a_dead_monitor_makes_the_pod_not_ready_and_stop_still_cleans_up() {
    let mut d = Daemon::start();
    let mut c = d.client().await;
    let id = run_pod(&mut c, pod_config("victim")).await;
    let (_, info) = status(&mut c, &id).await;
    let monitor = info["monitor"]["pid"].as_i64().unwrap() as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(monitor),
        nix::sys::signal::SIGKILL,
    )
    .unwrap();
    let mut state = 0;
    for _ in 0..100 {
        state = status(&mut c, &id).await.0.state;
        if state == pb::PodSandboxState::SandboxNotready as i32 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        state,
        pb::PodSandboxState::SandboxNotready as i32,
        "noticed while running"
    );

    // A monitor that dies while the daemon is down is noticed at start.
    let id2 = run_pod(&mut c, pod_config("victim2")).await;
    let (_, info) = status(&mut c, &id2).await;
    let monitor2 = info["monitor"]["pid"].as_i64().unwrap() as i32;
    d.kill9();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(monitor2),
        nix::sys::signal::SIGKILL,
    )
    .unwrap();
    d.launch();
    let mut c = d.client().await;
    assert_eq!(
        status(&mut c, &id2).await.0.state,
        pb::PodSandboxState::SandboxNotready as i32
    );
    for id in [id, id2] {
        stop_pod(&mut c, &id).await;
        remove_pod(&mut c, &id).await;
    }
    d.assert_clean();
}

#[tokio::test]
async fn a_sandbox_half_created_when_the_daemon_died_is_rolled_back() {
    // The second plugin sleeps in ADD: the daemon is killed after bridge has allocated an IP,
    // created a veth and the monitor has pinned namespaces.
    let mut d = Daemon::start_with_plugins(&[r#"{"type":"crust-test-slow","sleepSeconds":3}"#]);
    let c = d.client().await;
    let run = tokio::spawn(async move {
        let mut c = c;
        c.run_pod_sandbox(run_request(pod_config("half"))).await
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while d.allocated_ips().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "bridge ADD never happened"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    d.kill9();
    assert!(run.await.unwrap().is_err());
    assert!(
        !d.monitors().is_empty() && !d.allocated_ips().is_empty(),
        "half a pod exists"
    );
    d.write_bridge_network(&[]);
    d.launch();
    d.assert_clean();
    assert!(Daemon::entries(&d.state.join("sandboxes")).is_empty());
    let mut c = d.client().await;
    assert!(
        c.list_pod_sandbox(pb::ListPodSandboxRequest::default())
            .await
            .unwrap()
            .into_inner()
            .items
            .is_empty()
    );
    // The name was never committed.
    let id = run_pod(&mut c, pod_config("half")).await;
    remove_pod(&mut c, &id).await;
    d.assert_clean();
}

#[tokio::test]
async fn one_daemon_per_socket_and_stale_sockets_are_replaced() {
    let mut d = Daemon::start();
    // A second daemon on the same state and socket refuses to start and says why.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_crust"))
        .args(["serve", "--listen"])
        .arg(&d.socket)
        .arg("--root")
        .arg(&d.root)
        .arg("--state")
        .arg(&d.state)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("another crust is serving"), "{err}");
    // After a SIGKILL the socket file stays behind; the next start replaces it.
    d.kill9();
    assert!(d.socket.exists());
    d.launch();
    let mut c = d.client().await;
    c.version(pb::VersionRequest::default()).await.unwrap();
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&d.socket).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o660);
}

#[tokio::test]
async fn a_cancelled_request_still_finishes_its_work() {
    // kubelet and crictl cancel requests that take too long; the work must not stop half way.
    let d = Daemon::start_with_plugins(&[r#"{"type":"crust-test-slow","sleepSeconds":1}"#]);
    let mut c = d.client().await;
    let cancelled = tokio::time::timeout(
        Duration::from_millis(300),
        c.run_pod_sandbox(run_request(pod_config("impatient"))),
    )
    .await;
    assert!(cancelled.is_err(), "the client gave up first");
    let mut pods = vec![];
    for _ in 0..100 {
        pods = c
            .list_pod_sandbox(pb::ListPodSandboxRequest::default())
            .await
            .unwrap()
            .into_inner()
            .items;
        if !pods.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        pods.len(),
        1,
        "the sandbox was completed, not left half made"
    );
    assert_eq!(pods[0].state, pb::PodSandboxState::SandboxReady as i32);
    remove_pod(&mut c, &pods[0].id).await;
    d.assert_clean();
}

#[tokio::test]
async fn the_state_dir_becomes_a_tmpfs_but_never_hides_existing_state() {
    let mut d = Daemon::start();
    let state = d.state.to_string_lossy().into_owned();
    assert!(
        d.mounts().contains(&state),
        "an empty state dir gets a tmpfs"
    );
    d.kill9();
    // A state dir with content on a plain file system (left by an older crust, say) is used as
    // it is: mounting over it would hide the records of running pods.
    let mut d2 = Daemon::prepare();
    std::fs::create_dir_all(&d2.state).unwrap();
    std::fs::write(d2.state.join("keep"), "x").unwrap();
    d2.write_bridge_network(&[]);
    d2.launch();
    let state2 = d2.state.to_string_lossy().into_owned();
    assert!(
        !d2.mounts().contains(&state2),
        "no tmpfs over existing state"
    );
    assert!(d2.state.join("keep").exists());
}
