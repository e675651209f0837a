//! Daemon restarts with containers: SIGKILL while containers run, exit, wait to start and are
//! being created. After the restart every container shows its true state, exits during the
//! downtime are there with their code, log lines written meanwhile are complete, and a
//! container half created is either fully there or fully gone.

mod common;

use std::time::Duration;

use common::workload::{Env, alive};
use common::*;
use crust::cri::pb;

#[tokio::test]
async fn containers_keep_running_and_exits_are_kept_across_a_daemon_sigkill() {
    let mut e = Env::start().await;
    let pod = e.pod("survivor").await;
    let ticker = e
        .run(
            &pod,
            e.config(
                "ticker",
                &[
                    "sh",
                    "-c",
                    "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.05; done",
                ],
            ),
        )
        .await;
    let quitter = e
        .run(&pod, e.config("quitter", &["sh", "-c", "sleep 2; exit 5"]))
        .await;
    let waiting = e
        .create(&pod, e.config("waiting", &["sleep", "600"]))
        .await
        .unwrap();
    let pid = e.info(&ticker).await["pid"].as_i64().unwrap();

    e.d.kill9();
    // The quitter exits while no daemon runs; the ticker keeps logging.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(alive(pid), "a daemon crash does not touch containers");
    e.relaunch().await;

    let s = e.status(&ticker).await;
    assert_eq!(s.state, pb::ContainerState::ContainerRunning as i32);
    assert_eq!(e.info(&ticker).await["pid"].as_i64().unwrap(), pid);
    let s = e.wait_exit(&quitter, Duration::from_secs(5)).await;
    assert_eq!((s.exit_code, s.reason.as_str()), (5, "Error"));
    assert!(s.finished_at > s.started_at);
    assert_eq!(
        e.status(&waiting).await.state,
        pb::ContainerState::ContainerCreated as i32
    );
    // Created before the crash, started after it.
    e.c.start_container(pb::StartContainerRequest {
        container_id: waiting.clone(),
    })
    .await
    .unwrap();
    assert_eq!(e.sh(&waiting, "echo up").await, "up\n");

    // No tick is missing from the log: the monitor wrote them while the daemon was down.
    let ticks: Vec<u64> = e
        .log_records(&pod, "ticker")
        .iter()
        .filter_map(|l| l.strip_prefix("stdout F tick "))
        .map(|n| n.parse().unwrap())
        .collect();
    assert!(ticks.len() > 40, "{} ticks", ticks.len());
    assert!(
        ticks.windows(2).all(|w| w[1] == w[0] + 1),
        "ticks are consecutive across the restart"
    );
    e.stop(&ticker, 0).await;
    assert!(!alive(pid));
    e.end_pod(&pod.0).await;
}

#[tokio::test]
async fn a_container_half_created_when_the_daemon_died_is_all_there_or_all_gone() {
    let mut e = Env::start().await;
    let pod = e.pod("half").await;
    // Kill the daemon at several points of CreateContainer.
    for (n, delay_ms) in [2u64, 8, 20, 40, 80].into_iter().enumerate() {
        let name = format!("c{n}");
        let config = e.config(&name, &["sleep", "600"]);
        let mut c = e.d.client().await;
        let (id, sandbox) = (pod.0.clone(), pod.1.clone());
        let create = tokio::spawn(async move {
            c.create_container(pb::CreateContainerRequest {
                pod_sandbox_id: id,
                config: Some(config),
                sandbox_config: Some(sandbox),
            })
            .await
        });
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        e.d.kill9();
        let _ = create.await;
        e.relaunch().await;
        let listed = e.listed().await;
        let here: Vec<&pb::Container> = listed
            .iter()
            .filter(|c| c.metadata.as_ref().unwrap().name == name)
            .collect();
        // Whatever exists on disk belongs to a container that is listed whole.
        let ids: Vec<String> = listed.iter().map(|c| c.id.clone()).collect();
        for dir in [
            e.d.root.join("containers"),
            e.d.state.join("containers"),
            e.d.state.join("runtime"),
        ] {
            for entry in Daemon::entries(&dir) {
                assert!(
                    ids.contains(&entry),
                    "{} holds {entry}, which no listed container owns (killed after {delay_ms} ms)",
                    dir.display()
                );
            }
        }
        if let Some(c) = here.first() {
            assert_eq!(c.state, pb::ContainerState::ContainerCreated as i32);
            let id = c.id.clone();
            e.c.start_container(pb::StartContainerRequest {
                container_id: id.clone(),
            })
            .await
            .unwrap();
            assert_eq!(e.sh(&id, "echo whole").await, "whole\n");
        }
        // The name is free again, or taken by the listed container.
        let again = e.create(&pod, e.config(&name, &["sleep", "600"])).await;
        assert_eq!(again.is_ok(), here.is_empty(), "{again:?}");
    }
    e.end_pod(&pod.0).await;
}

/// The daemon killed while the pod's monitor creates a container, with the creation held open
/// (a pausing failpoint in the monitor, before its runtime worker starts): the restarted daemon's
/// recovery must not release the half-created container until the monitor's creation has ended.
/// Releasing it while libcontainer still writes its state made `remove_dir_all` of
/// `<state>/runtime/<id>` fail (a file appeared as it emptied the directory), so the release kept
/// the container's directory for ever: the "state/containers holds <id>, which no listed
/// container owns" of a cold, loaded machine, where the monitor's creation still ran when the
/// daemon came back. The monitor now makes Forget (and Shutdown) wait for a creation under way.
// Multi-threaded: the test waits on files with blocking sleeps while its CreateContainer runs.
#[tokio::test(flavor = "multi_thread")]
async fn recovery_releases_a_half_created_container_only_once_its_monitor_is_done() {
    let mut e = Env::start().await;
    let marker = e.relaunch_paused_at("monitor.create.before_worker").await;
    let pod = e.pod("held").await;
    let mut c = e.d.client().await;
    let (id, sandbox) = (pod.0.clone(), pod.1.clone());
    let config = e.config("c", &["sleep", "600"]);
    let create = tokio::spawn(async move {
        c.create_container(pb::CreateContainerRequest {
            pod_sandbox_id: id,
            config: Some(config),
            sandbox_config: Some(sandbox),
        })
        .await
    });
    wait_for(
        || marker("reached").exists(),
        "the monitor's creation to pause",
    );
    e.d.kill9();
    let _ = create.await;
    e.d.launch_unwaited(&[]);
    let monitor_log = e.d.sandbox_dir(&pod.0).join("monitor.log");
    wait_for(
        || {
            assert!(
                !e.d.serving(),
                "the daemon finished its recovery while the monitor still created the container"
            );
            std::fs::read_to_string(&monitor_log)
                .unwrap_or_default()
                .contains("waiting for its creation to end")
        },
        "recovery to wait for the monitor's creation",
    );
    std::fs::write(marker("release"), b"").unwrap();
    e.d.wait_serving();
    assert!(
        marker("done").exists(),
        "the creation ended before the daemon served"
    );
    e.c = e.d.client().await;
    let listed = e.listed().await;
    assert!(listed.is_empty(), "rolled back: {listed:?}");
    assert!(
        e.container_leftovers().is_empty(),
        "{:?}",
        e.container_leftovers()
    );
    // The name is free, and the pod works: a container made now runs.
    let id = e.run(&pod, e.config("c", &["sleep", "600"])).await;
    assert_eq!(e.sh(&id, "echo whole").await, "whole\n");
    e.end_pod(&pod.0).await;
}

/// A rollback at start that fails (here: a mount left inside the container's directory, so it
/// cannot be removed) keeps the container listed, exited with the reason, says so in `crust
/// check`, and RemoveContainer finishes it once the cause is gone.
#[tokio::test]
async fn a_rollback_that_fails_at_start_stays_listed_with_its_reason() {
    let mut e = Env::start().await;
    let pod = e.pod("kept").await;
    e.d.kill9();
    // Killed right after CreateContainer saved its Creating record (the record's directory,
    // the state directory, a temp file, its planned copy, the rename).
    e.d.launch_with(&[("CRUST_CRASH", "CreateContainer:5")]);
    e.c = e.d.client().await;
    let err = e.create(&pod, e.config("c", &["sleep", "600"])).await;
    assert!(err.is_err(), "{err:?}");
    let dirs = Daemon::entries(&e.d.state.join("containers"));
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let dir = e.d.state.join("containers").join(&dirs[0]);
    let blocker = dir.join("blocker");
    std::fs::create_dir(&blocker).unwrap();
    nix::mount::mount(
        Some("tmpfs"),
        &blocker,
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .unwrap();
    let _ = e.d.child.take().map(|mut c| c.wait());
    e.relaunch().await;
    let listed = e.listed().await;
    assert_eq!(listed.len(), 1, "kept listed: {listed:?}");
    let s = e.status(&listed[0].id).await;
    assert_eq!(s.state, pb::ContainerState::ContainerExited as i32);
    assert!(s.message.contains("undoing it failed"), "{}", s.message);
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_crust"))
        .args(["check", "--state"])
        .arg(&e.d.state)
        .arg("--root")
        .arg(&e.d.root)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&check.stdout);
    let line = said
        .lines()
        .find(|l| l.contains("leftovers"))
        .unwrap_or_default()
        .to_owned();
    assert!(
        line.starts_with("warn") && line.contains(&listed[0].id),
        "crust check names it: {said}"
    );
    nix::mount::umount2(&blocker, nix::mount::MntFlags::MNT_DETACH).unwrap();
    e.remove(&listed[0].id).await;
    e.wait_reclaimed(&listed[0].id).await;
    assert!(
        e.container_leftovers().is_empty(),
        "{:?}",
        e.container_leftovers()
    );
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_crust"))
        .args(["check", "--state"])
        .arg(&e.d.state)
        .arg("--root")
        .arg(&e.d.root)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&check.stdout);
    assert!(
        said.lines()
            .any(|l| l.starts_with("ok") && l.contains("leftovers")),
        "{said}"
    );
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
    e.d.assert_clean();
}

/// RemoveContainer returns before the reclaim of what the container held (held open here by
/// a pausing failpoint): the container is gone for clients at once, while its mount, writable
/// layer, cgroup and image hold stay until the reclaim ends. Its image may be removed
/// meanwhile, but the layers its overlay reads from stay until the overlay is unmounted; and
/// RemovePodSandbox waits for the reclaim, so a removed pod leaves nothing behind.
// Multi-threaded: the test waits on files with blocking sleeps while its RemovePodSandbox runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_removal_returns_before_its_reclaim_which_the_pods_removal_waits_for() {
    let mut e = Env::start().await;
    let marker = e.relaunch_paused_at("container.reclaim.started").await;
    let pod = e.pod("deferred").await;
    let id = e.run(&pod, e.config("c", &["sleep", "600"])).await;
    e.stop(&id, 0).await;
    e.remove(&id).await;
    wait_for(|| marker("reached").exists(), "the reclaim to start");
    let err =
        e.c.container_status(pb::ContainerStatusRequest {
            container_id: id.clone(),
            verbose: false,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
    let listed = e.listed().await;
    assert!(listed.is_empty(), "{listed:?}");
    let left = e.leftovers_of(&id);
    for what in ["mount ", "cgroup ", "image hold "] {
        assert!(
            left.iter().any(|l| l.starts_with(what)),
            "{what}still there while the reclaim is held: {left:?}"
        );
    }
    // The image goes, its layers stay while the container's overlay reads them.
    let layers = e.d.root.join("images/layers");
    let before = Daemon::entries(&layers);
    e.d.images()
        .await
        .remove_image(pb::RemoveImageRequest {
            image: Some(pb::ImageSpec {
                image: e.image.clone(),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    assert_eq!(Daemon::entries(&layers), before, "held layers stay");
    let rootfs = e.d.root.join("containers").join(&id).join("rootfs");
    assert!(
        std::fs::read_to_string(rootfs.join("etc/group"))
            .unwrap()
            .contains("extra:x:3000"),
        "the mounted root filesystem still reads the image's layer"
    );
    // RemovePodSandbox waits for the reclaim, which ends before it returns.
    let mut c = e.d.client().await;
    let pod_id = pod.0.clone();
    let removing = tokio::spawn(async move {
        stop_pod(&mut c, &pod_id).await;
        remove_pod(&mut c, &pod_id).await;
    });
    wait_for(
        || {
            e.d.log()
                .contains("waiting for the reclaims of the pod's removed containers")
        },
        "the pod's removal to wait for the reclaim",
    );
    assert!(!removing.is_finished(), "the pod went before the reclaim");
    std::fs::write(marker("release"), b"").unwrap();
    removing.await.unwrap();
    assert!(
        marker("done").exists(),
        "the reclaim ended before the pod's removal returned"
    );
    assert!(
        e.container_leftovers().is_empty(),
        "{:?}",
        e.container_leftovers()
    );
    e.d.assert_clean();
    let holds = Daemon::entries(&e.d.root.join("images/holds"));
    assert!(holds.is_empty(), "image holds left: {holds:?}");
    assert!(
        Daemon::entries(&layers).is_empty(),
        "the removed image's layers went with the last hold: {:?}",
        Daemon::entries(&layers)
    );
}

/// The daemon killed (a failpoint) in the middle of a removed container's reclaim, after the
/// call returned or while it ran: the restarted daemon never lists the container again,
/// finishes the reclaim (no mount, writable layer, cgroup, image hold or directory is left),
/// and the container's name is free.
#[tokio::test]
async fn a_removal_killed_during_its_reclaim_is_finished_at_the_next_start() {
    let mut e = Env::start().await;
    let pod = e.pod("reclaimed").await;
    // Before anything was reclaimed, and after the root filesystem went (the holds have not).
    for (point, still) in [
        (
            "container.reclaim.started",
            &["mount ", "cgroup ", "image hold "][..],
        ),
        ("container.teardown.after_rootfs", &["image hold "][..]),
    ] {
        e.d.kill9();
        e.d.launch_with(&[("CRUST_FAILPOINT", point)]);
        e.c = e.d.client().await;
        let id = e.run(&pod, e.config("c", &["sleep", "600"])).await;
        e.stop(&id, 0).await;
        // The call returns before the reclaim, or the kill cuts it short.
        let _ =
            e.c.remove_container(pb::RemoveContainerRequest {
                container_id: id.clone(),
            })
            .await;
        crash::assert_killed_at(&mut e, point, &format!("failpoint {point} reached"));
        let left = e.leftovers_of(&id);
        for what in still {
            assert!(
                left.iter().any(|l| l.starts_with(what)),
                "{point}: {what}still there at the kill: {left:?}"
            );
        }
        e.relaunch().await;
        let listed = e.listed().await;
        assert!(listed.is_empty(), "{point}: listed again: {listed:?}");
        e.wait_reclaimed(&id).await;
        // The name is free: the next round makes a container of the same name.
    }
    let id = e.run(&pod, e.config("c", &["sleep", "600"])).await;
    assert_eq!(e.sh(&id, "echo whole").await, "whole\n");
    e.end_pod(&pod.0).await;
}

/// Polls `ready` until it holds, failing after 60 s with `what`.
fn wait_for(mut ready: impl FnMut() -> bool, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(
            std::time::Instant::now() < deadline,
            "waited 60 s for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[tokio::test]
async fn containers_of_a_pod_whose_monitor_died_end_as_killed() {
    let mut e = Env::start().await;
    let pod = e.pod("orphaned").await;
    let id = e.run(&pod, e.config("main", &["sleep", "600"])).await;
    let pid = e.info(&id).await["pid"].as_i64().unwrap();
    let monitor = monitor_pid(&mut e.c, &pod.0).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(monitor),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let s = e.wait_exit(&id, Duration::from_secs(10)).await;
    assert_eq!(s.exit_code, 137);
    assert!(s.message.contains("monitor"), "{}", s.message);
    assert!(
        !alive(pid),
        "the container's process did not outlive its monitor"
    );
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
    assert!(
        e.container_leftovers().is_empty(),
        "{:?}",
        e.container_leftovers()
    );
}
