//! Records crust cannot read when it starts. A damaged one (truncated here, as a torn disk
//! would leave it) is set aside under `<root>/records/damaged`, named in the log, in `crust
//! check` and in `crust diagnose`, and the object it described is ended whole from what else
//! is known (the record's planned copy, the monitor's pid file, the container's mounts): its
//! processes are killed, then its mounts, IP and cgroup released. One a newer crust wrote (a
//! downgrade) is left alone with everything it describes, and is adopted whole once a crust
//! that reads it starts. An unreadable image hold neither stops the daemon nor lets the
//! layers it kept go while its container runs.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::workload::{Env, alive};
use common::*;
use crust::cri::pb;

/// The files recovery set aside.
fn damaged(d: &Daemon) -> Vec<String> {
    Daemon::entries(&d.records().join("damaged"))
}

fn truncate(path: &Path) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.set_len(7).unwrap();
}

/// Rewrites the version of the record at `path` (its envelope's first key).
fn set_version(path: &Path, from: u32, to: u32) {
    let text = std::fs::read_to_string(path).unwrap();
    let old = format!("\"version\": {from},");
    assert!(text.contains(&old), "{path:?}: {text}");
    std::fs::write(path, text.replacen(&old, &format!("\"version\": {to},"), 1)).unwrap();
}

fn pid_of(v: &serde_json::Value) -> i32 {
    v["pid"].as_i64().expect("verbose info has a pid") as i32
}

async fn pods(e: &mut Env) -> Vec<pb::PodSandbox> {
    e.c.list_pod_sandbox(pb::ListPodSandboxRequest::default())
        .await
        .unwrap()
        .into_inner()
        .items
}

fn check(d: &Daemon) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_crust"))
        .args(["check", "--state"])
        .arg(&d.state)
        .arg("--root")
        .arg(&d.root)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn a_truncated_sandbox_record_ends_its_pod_whole() {
    let mut e = Env::start().await;
    let pod = e.pod("torn").await;
    let ctr = e.run(&pod, e.config("app", &["sleep", "600"])).await;
    let monitor = monitor_pid(&mut e.c, &pod.0).await;
    let pid = pid_of(&e.info(&ctr).await);
    assert_eq!(e.d.allocated_ips().len(), 1);

    e.d.kill9();
    truncate(&e.d.sandbox_record_dir(&pod.0).join("sandbox.json"));
    e.relaunch().await;

    assert!(!alive(monitor.into()), "the pod's monitor is stopped");
    assert!(!alive(pid.into()), "its container's process is killed");
    assert!(pods(&mut e).await.is_empty(), "the pod is not listed");
    assert!(e.listed().await.is_empty(), "nor its container");
    e.d.assert_clean();
    let left = e.container_leftovers();
    assert!(
        left.is_empty(),
        "writable layer and mount released: {left:?}"
    );
    let set_aside = damaged(&e.d);
    assert_eq!(set_aside.len(), 1, "{set_aside:?}");
    assert!(set_aside[0].starts_with(&format!("sandbox-{}-", pod.0)));
    let kept = std::fs::read(e.d.records().join("damaged").join(&set_aside[0])).unwrap();
    assert_eq!(kept.len(), 7, "kept as it was found");
    assert!(
        e.d.log().contains("unreadable sandbox record set aside"),
        "the log says so"
    );
    let (ok, out, err) = diagnose(&e.d, &pod.0, false);
    assert!(!ok, "{out}");
    assert!(
        err.contains("could not be read") && err.contains(&set_aside[0]),
        "crust diagnose names it: {err}"
    );
    let said = check(&e.d);
    assert!(
        said.lines().any(|l| l.starts_with("warn")
            && l.contains("leftovers")
            && l.contains(&pod.0)
            && l.contains("unreadable")),
        "crust check names it: {said}"
    );
    // The pod can be made again.
    let mut again = pod.1.clone();
    again.metadata.as_mut().unwrap().attempt = 1;
    let id = run_pod(&mut e.c, again).await;
    e.end_pod(&id).await;
}

#[tokio::test]
async fn a_truncated_container_record_ends_that_container_alone() {
    let mut e = Env::start().await;
    let pod = e.pod("halftorn").await;
    let torn = e.run(&pod, e.config("torn", &["sleep", "600"])).await;
    let whole = e.run(&pod, e.config("whole", &["sleep", "600"])).await;
    let torn_pid = pid_of(&e.info(&torn).await);
    let layer = e.d.root.join("containers").join(&torn);
    assert!(
        layer.join("rootfs/bin").exists(),
        "its root filesystem is mounted"
    );

    e.d.kill9();
    truncate(&e.d.container_record_dir(&torn).join("container.json"));
    e.relaunch().await;

    assert!(!alive(torn_pid.into()), "its process is killed");
    let left = e.leftovers_of(&torn);
    assert!(
        left.is_empty(),
        "mount, layer, cgroup and hold released: {left:?}"
    );
    assert!(!layer.exists());
    let listed: Vec<String> = e.listed().await.into_iter().map(|c| c.id).collect();
    assert_eq!(
        listed,
        std::slice::from_ref(&whole),
        "only the whole one is listed"
    );
    let (status, _) = status(&mut e.c, &pod.0).await;
    assert_eq!(status.state, pb::PodSandboxState::SandboxReady as i32);
    assert_eq!(e.sh(&whole, "echo still here").await, "still here\n");
    let set_aside = damaged(&e.d);
    assert_eq!(set_aside.len(), 1, "{set_aside:?}");
    assert!(set_aside[0].starts_with(&format!("container-{torn}-")));
    let (ok, _, err) = diagnose(&e.d, &torn, false);
    assert!(
        !ok && err.contains("container") && err.contains("set it aside"),
        "{err}"
    );
    e.end_pod(&pod.0).await;
}

#[tokio::test]
async fn records_of_a_newer_crust_are_left_alone_with_what_they_describe() {
    let mut e = Env::start().await;
    let pod = e.pod("future").await;
    let ctr = e.run(&pod, e.config("app", &["sleep", "600"])).await;
    let monitor = monitor_pid(&mut e.c, &pod.0).await;
    let pid = pid_of(&e.info(&ctr).await);
    let sandbox_record = e.d.sandbox_record_dir(&pod.0).join("sandbox.json");
    let container_record = e.d.container_record_dir(&ctr).join("container.json");

    e.d.kill9();
    set_version(&sandbox_record, 1, 2);
    set_version(&container_record, 1, 2);
    e.relaunch().await;

    assert!(pods(&mut e).await.is_empty(), "not listed");
    assert!(e.listed().await.is_empty(), "not listed");
    assert!(
        alive(monitor.into()) && alive(pid.into()),
        "nothing was stopped"
    );
    assert_eq!(e.d.allocated_ips().len(), 1, "its IP is still held");
    assert!(
        e.d.root
            .join("containers")
            .join(&ctr)
            .join("rootfs/bin")
            .exists(),
        "its root filesystem is still mounted"
    );
    assert!(damaged(&e.d).is_empty(), "nothing was set aside");
    assert!(
        e.d.log().contains("a newer crust wrote"),
        "the log says why"
    );

    // A crust that reads them adopts the pod and its container whole.
    e.d.kill9();
    set_version(&sandbox_record, 2, 1);
    set_version(&container_record, 2, 1);
    e.relaunch().await;
    let (status, _) = status(&mut e.c, &pod.0).await;
    assert_eq!(status.state, pb::PodSandboxState::SandboxReady as i32);
    assert_eq!(pid_of(&e.info(&ctr).await), pid);
    assert_eq!(e.sh(&ctr, "echo adopted").await, "adopted\n");
    e.end_pod(&pod.0).await;
}

/// The hold files, by path.
fn holds(d: &Daemon) -> Vec<PathBuf> {
    let dir = d.root.join("images/holds");
    Daemon::entries(&dir)
        .into_iter()
        .filter(|n| n.ends_with(".json"))
        .map(|n| dir.join(n))
        .collect()
}

fn layers(d: &Daemon) -> Vec<String> {
    Daemon::entries(&d.root.join("images/layers"))
}

#[tokio::test]
async fn an_unreadable_hold_neither_stops_the_daemon_nor_lets_its_layers_go() {
    let mut e = Env::start().await;
    let pod = e.pod("held").await;
    let ctr = e.run(&pod, e.config("app", &["sleep", "600"])).await;
    // Only the hold keeps the layers now.
    let spec = Some(pb::ImageSpec {
        image: e.image.clone(),
        ..Default::default()
    });
    let mut images = e.d.images().await;
    images
        .remove_image(pb::RemoveImageRequest { image: spec })
        .await
        .unwrap();
    let kept = layers(&e.d);
    assert!(!kept.is_empty());
    let hold = holds(&e.d);
    assert_eq!(hold.len(), 1, "{hold:?}");

    e.d.kill9();
    truncate(&hold[0]);
    e.relaunch().await;

    assert_eq!(layers(&e.d), kept, "the layers its container reads stay");
    assert_eq!(e.sh(&ctr, "echo readable").await, "readable\n");
    assert_eq!(holds(&e.d).len(), 1, "its hold is made again");
    assert!(
        damaged(&e.d).iter().any(|n| n.starts_with("hold-")),
        "{:?}",
        damaged(&e.d)
    );
    // Once the container goes, so do the layers.
    e.end_pod(&pod.0).await;
    eventually("the layers are collected", Duration::from_secs(10), || {
        layers(&e.d).is_empty()
    })
    .await;
    assert!(holds(&e.d).is_empty());
}

#[tokio::test]
async fn an_unreadable_image_record_is_set_aside_and_the_daemon_serves() {
    let mut e = Env::start().await;
    let records = e.d.root.join("images/records");
    let names: Vec<String> = Daemon::entries(&records)
        .into_iter()
        .filter(|n| n.ends_with(".json"))
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    e.d.kill9();
    truncate(&records.join(&names[0]));
    e.relaunch().await;
    let listed =
        e.d.images()
            .await
            .list_images(pb::ListImagesRequest::default())
            .await
            .unwrap()
            .into_inner()
            .images;
    assert!(listed.is_empty(), "{listed:?}");
    assert!(
        damaged(&e.d).iter().any(|n| n.starts_with("image-")),
        "{:?}",
        damaged(&e.d)
    );
    // Pulled again, it runs.
    e.d.images()
        .await
        .pull_image(pull_request(&e.image))
        .await
        .unwrap();
    let pod = e.pod("again").await;
    let ctr = e.run(&pod, e.config("app", &["sleep", "600"])).await;
    assert_eq!(e.sh(&ctr, "echo ok").await, "ok\n");
    e.end_pod(&pod.0).await;
}
