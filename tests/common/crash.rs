//! Shared by the crash tests (`failpoints.rs`, `crash_points.rs`): the daemon killed from
//! inside at some point of a verb, restarted, and then checked: everything it lists is usable
//! and removable, and nothing is left on the node once it is all removed.

use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crust::cri::pb;
use serde_json::json;

use super::oci_build::{Comp, file, image, tar};
use super::workload::{Env, test_image_layer};
use super::{Daemon, pod_config, run_request, status};

/// Waits for the daemon to die at `failpoint`: by SIGKILL, saying `said` in its log.
pub fn assert_killed_at(env: &mut Env, failpoint: &str, said: &str) {
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
    assert!(env.d.log().contains(said), "{failpoint}: not where it died");
}

/// Everything the restarted daemon lists is either usable (status, stop, remove) or gone; a
/// second Stop and Remove succeed too. Returns what survived the crash.
pub async fn converge(env: &Env, image: &str, failpoint: &str) -> Vec<String> {
    let mut c = env.d.client().await;
    let mut images = env.d.images().await;
    let mut survived = Vec::new();
    // (Once, ListContainers failed here and the message was lost: each failure now says what
    // the client saw and where the daemon's log ends.)
    let lost = |what: &str, e: tonic::Status| -> ! {
        let log = env.d.log();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        let alive = env.d.serving();
        panic!(
            "{failpoint}: {what} after the restart: {e:?} (socket answers: {alive}); the end of the log:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )
    };
    let ctrs = match c
        .list_containers(pb::ListContainersRequest::default())
        .await
    {
        Ok(r) => r.into_inner().containers,
        Err(e) => lost("ListContainers", e),
    };
    let pods = match c
        .list_pod_sandbox(pb::ListPodSandboxRequest::default())
        .await
    {
        Ok(r) => r.into_inner().items,
        Err(e) => lost("ListPodSandbox", e),
    };
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
pub fn store_listing(root: &Path) -> BTreeSet<String> {
    let store = root.join("images");
    let mut all = BTreeSet::new();
    for sub in ["blobs/sha256", "layers", "records", "ingest", "holds"] {
        for e in Daemon::entries(&store.join(sub)) {
            all.insert(format!("{sub}/{e}"));
        }
    }
    all
}

/// Nothing is left of what the run made. Waits first (30 s at most) for what is left to go:
/// RemoveContainer returns before its reclaim ends, and a reclaim a crash cut short is
/// finished in the background after the next start.
pub fn assert_nothing_left(env: &Env, baseline: &BTreeSet<String>, failpoint: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(env.container_leftovers().is_empty() && &store_listing(&env.d.root) == baseline)
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(10));
    }
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
pub async fn env_with_second_image() -> (Env, String, BTreeSet<String>) {
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

/// One pod's life, each verb once, in the order kubelet drives them; stops at the first error.
pub async fn life(env: &Env, image: &str, name: &str) -> Result<(), tonic::Status> {
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
