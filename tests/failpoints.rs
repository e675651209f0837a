//! The daemon killed (SIGKILL, from inside: a failpoint of the debug build) after each step of
//! PullImage, RunPodSandbox, CreateContainer, StartContainer, RemoveContainer, StopPodSandbox
//! and RemovePodSandbox: every name in `crust::failpoint::NAMES`, so a new failpoint is tried
//! without anyone listing it here. After a restart without it, every object is either there,
//! answering its status and stopping and removing cleanly, or gone; a second Stop and Remove
//! succeed, and nothing is left: no sandbox or container directory, namespace pin, mount under
//! the root, monitor, pod cgroup (v1 or v2), IP, veth, or half-stored image content.

mod common;

use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::oci_build::{Comp, file, image, tar};
use common::workload::{Env, test_image_layer};
use common::*;
use crust::cri::pb;
use serde_json::json;

/// One pod's life, each verb once, in the order kubelet drives them; stops at the first error.
async fn life(env: &Env, image: &str, name: &str) -> Result<(), tonic::Status> {
    let mut images = env.d.images().await;
    let spec = Some(pb::ImageSpec {
        image: image.into(),
        ..Default::default()
    });
    images
        .pull_image(pb::PullImageRequest {
            image: spec.clone(),
            ..Default::default()
        })
        .await?;
    let mut c = env.d.client().await;
    let mut pod = pod_config(name);
    pod.log_directory = env.d.dir.join("logs").join(name).display().to_string();
    let id = c
        .run_pod_sandbox(run_request(pod.clone()))
        .await?
        .into_inner()
        .pod_sandbox_id;
    let mut config = env.config("c", &["sleep", "60"]);
    config.image = spec.clone();
    let ctr = c
        .create_container(pb::CreateContainerRequest {
            pod_sandbox_id: id.clone(),
            config: Some(config),
            sandbox_config: Some(pod),
        })
        .await?
        .into_inner()
        .container_id;
    c.start_container(pb::StartContainerRequest {
        container_id: ctr.clone(),
    })
    .await?;
    c.remove_container(pb::RemoveContainerRequest { container_id: ctr })
        .await?;
    let pod_id = id.clone();
    c.stop_pod_sandbox(pb::StopPodSandboxRequest { pod_sandbox_id: id })
        .await?;
    c.remove_pod_sandbox(pb::RemovePodSandboxRequest {
        pod_sandbox_id: pod_id,
    })
    .await?;
    images
        .remove_image(pb::RemoveImageRequest { image: spec })
        .await?;
    Ok(())
}

/// Waits for the daemon to die at `failpoint`: by SIGKILL, saying so in its log.
fn assert_killed_at(env: &mut Env, failpoint: &str) {
    let mut child = env.d.child.take().expect("daemon running");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "{failpoint}: the daemon lives on"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "{failpoint}: {status}"
    );
    let said = format!("failpoint {failpoint} reached");
    assert!(
        env.d.log().contains(&said),
        "{failpoint}: not where it died"
    );
}

/// Everything the restarted daemon lists is either usable (status, stop, remove) or gone; a
/// second Stop and Remove succeed too. Returns what survived the crash.
async fn converge(env: &Env, image: &str, failpoint: &str) -> Vec<String> {
    let mut c = env.d.client().await;
    let mut images = env.d.images().await;
    let mut survived = Vec::new();
    let ctrs = c
        .list_containers(pb::ListContainersRequest::default())
        .await
        .unwrap()
        .into_inner()
        .containers;
    let pods = c
        .list_pod_sandbox(pb::ListPodSandboxRequest::default())
        .await
        .unwrap()
        .into_inner()
        .items;
    for ctr in &ctrs {
        let s = c
            .container_status(pb::ContainerStatusRequest {
                container_id: ctr.id.clone(),
                verbose: false,
            })
            .await
            .unwrap_or_else(|e| panic!("{failpoint}: status of container: {e:?}"));
        let state = s.into_inner().status.unwrap().state;
        survived.push(format!(
            "container {}",
            pb::ContainerState::try_from(state).unwrap().as_str_name()
        ));
    }
    for pod in &pods {
        let (s, _) = status(&mut c, &pod.id).await;
        survived.push(format!(
            "pod {}",
            pb::PodSandboxState::try_from(s.state)
                .unwrap()
                .as_str_name()
        ));
    }
    for round in ["first", "second"] {
        for ctr in &ctrs {
            c.remove_container(pb::RemoveContainerRequest {
                container_id: ctr.id.clone(),
            })
            .await
            .unwrap_or_else(|e| panic!("{failpoint}: {round} RemoveContainer: {e:?}"));
        }
        for pod in &pods {
            let id = pod.id.clone();
            c.stop_pod_sandbox(pb::StopPodSandboxRequest {
                pod_sandbox_id: id.clone(),
            })
            .await
            .unwrap_or_else(|e| panic!("{failpoint}: {round} StopPodSandbox: {e:?}"));
            c.remove_pod_sandbox(pb::RemovePodSandboxRequest { pod_sandbox_id: id })
                .await
                .unwrap_or_else(|e| panic!("{failpoint}: {round} RemovePodSandbox: {e:?}"));
        }
    }
    let spec = Some(pb::ImageSpec {
        image: image.into(),
        ..Default::default()
    });
    let held = images
        .image_status(pb::ImageStatusRequest {
            image: spec.clone(),
            verbose: false,
        })
        .await
        .unwrap_or_else(|e| panic!("{failpoint}: ImageStatus: {e:?}"))
        .into_inner()
        .image;
    if held.is_some() {
        survived.push("image".into());
        images
            .remove_image(pb::RemoveImageRequest { image: spec })
            .await
            .unwrap_or_else(|e| panic!("{failpoint}: RemoveImage: {e:?}"));
    }
    survived
}

/// The image store's content: blobs, unpacked layers, records, and anything in progress.
fn store_listing(root: &Path) -> BTreeSet<String> {
    let store = root.join("images");
    let mut all = BTreeSet::new();
    for sub in ["blobs/sha256", "layers", "records", "ingest", "holds"] {
        for e in Daemon::entries(&store.join(sub)) {
            all.insert(format!("{sub}/{e}"));
        }
    }
    all
}

fn assert_nothing_left(env: &Env, baseline: &BTreeSet<String>, failpoint: &str) {
    env.d.assert_clean();
    let left = env.container_leftovers();
    assert!(
        left.is_empty(),
        "{failpoint}: container leftovers: {left:?}"
    );
    let store = store_listing(&env.d.root);
    let extra: Vec<_> = store.difference(baseline).collect();
    let lost: Vec<_> = baseline.difference(&store).collect();
    assert!(extra.is_empty(), "{failpoint}: image store keeps {extra:?}");
    assert!(lost.is_empty(), "{failpoint}: image store lost {lost:?}");
}

/// The daemon with the test image and a second one, `busybox:2`, whose top layer is its own.
async fn env_with_second_image() -> (Env, String, BTreeSet<String>) {
    let env = Env::start().await;
    // The busybox layer is shared with the image the daemon holds already; the layer on top
    // is this image's own, so each pull downloads and unpacks it again.
    let own = tar(&[file("failpoints/marker", b"one layer of its own\n")]);
    let img = image(
        &[(tar(&test_image_layer()), Comp::Gzip), (own, Comp::Gzip)],
        json!({"Env": ["PATH=/bin"], "Cmd": ["sh"]}),
        "amd64",
    );
    env.reg.push("busybox", "2", &img).await;
    let image2 = format!("{}/busybox:2", env.reg.addr);
    let baseline = store_listing(&env.d.root);
    assert!(
        baseline.iter().any(|e| e.starts_with("layers/")),
        "the store holds the first image: {baseline:?}"
    );
    // Without a failpoint the life runs to its end and leaves nothing.
    life(&env, &image2, "calm").await.unwrap();
    assert_nothing_left(&env, &baseline, "no failpoint");
    (env, image2, baseline)
}

#[tokio::test]
async fn the_daemon_killed_after_any_step_of_any_verb_leaves_nothing_half_done() {
    assert!(
        !crust::failpoint::NAMES.is_empty(),
        "a debug build lists its failpoints"
    );
    let (mut env, image2, baseline) = env_with_second_image().await;

    // CRUST_TEST_FAILPOINT narrows the run to one failpoint while debugging.
    let only = std::env::var("CRUST_TEST_FAILPOINT").ok();
    let started = Instant::now();
    let mut tried = 0;
    for (n, &name) in crust::failpoint::NAMES.iter().enumerate() {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        env.d.kill9();
        env.d.launch_with(&[("CRUST_FAILPOINT", name)]);
        let result = life(&env, &image2, &format!("fp{n}")).await;
        assert!(result.is_err(), "{name}: never reached");
        assert_killed_at(&mut env, name);
        env.d.launch();
        let survived = converge(&env, &image2, name).await;
        assert_nothing_left(&env, &baseline, name);
        eprintln!("{name}: killed; after restart: {survived:?}; nothing left");
        tried += 1;
    }
    eprintln!(
        "failpoints: {tried} crashes survived in {:?}, leaks found: 0",
        started.elapsed()
    );
    assert!(tried > 0, "no failpoint was tried");
}

/// A pod's monitor killed (SIGKILL) while the pod starts, while a container is created in it
/// and while one starts: the verb fails with a code that says why and names its step, the
/// daemon serves on, and everything is undone or removable.
#[tokio::test]
async fn a_monitor_killed_mid_start_fails_the_verb_cleanly_and_leaks_nothing() {
    let (mut env, image2, baseline) = env_with_second_image().await;
    for (n, &name) in crust::failpoint::MONITOR_NAMES.iter().enumerate() {
        env.d.kill9();
        env.d.launch_with(&[("CRUST_FAILPOINT", name)]);
        let err = life(&env, &image2, &format!("mon{n}"))
            .await
            .expect_err(name);
        eprintln!("{name}: {:?}: {}", err.code(), err.message());
        assert!(
            !matches!(err.code(), tonic::Code::Internal | tonic::Code::Unknown),
            "{name}: {err:?}"
        );
        assert!(
            err.message().contains("monitor"),
            "{name}: the message names the monitor: {err:?}"
        );
        let child = env.d.child.as_mut().expect("daemon running");
        assert!(
            child.try_wait().unwrap().is_none(),
            "{name}: the daemon lives"
        );
        let survived = converge(&env, &image2, name).await;
        assert_nothing_left(&env, &baseline, name);
        eprintln!("{name}: then {survived:?}; nothing left");
    }
    env.d.kill9();
    env.d.launch();
    life(&env, &image2, "after").await.unwrap();
    assert_nothing_left(&env, &baseline, "after");
}
