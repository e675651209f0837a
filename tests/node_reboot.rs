//! A node's reboot, simulated (`Daemon::simulate_reboot`: every process killed, every mount
//! gone, the state tmpfs emptied, the disk kept). crust's records live on disk, so the pods it
//! ran come back listed NotReady with their containers exited (code 255, reason
//! `NodeRebooted`), as containerd lists them and kubelet needs to keep restart counts; what they
//! held outside the lost state is released on its own (host-local's IPs, cgroups), and their
//! Stop and Remove leave nothing.

mod common;

use std::time::Duration;

use common::workload::Env;
use common::*;
use crust::cri::pb;

/// Pods running when the node reboots: ids of the pod and of its container.
struct Ran {
    pod: (String, pb::PodSandboxConfig),
    running: String,
}

#[tokio::test]
async fn after_a_reboot_pods_are_not_ready_containers_exited_and_nothing_is_held() {
    let mut e = Env::start().await;
    let mut ran = Vec::new();
    for n in 0..5 {
        let pod = e.pod(&format!("boot{n}")).await;
        let mut config = e.config("app", &["sleep", "600"]);
        // The restart count kubelet keeps is the attempt of a pod's newest container.
        config.metadata.as_mut().unwrap().attempt = n;
        let running = e.run(&pod, config).await;
        ran.push(Ran { pod, running });
    }
    // A container that had exited before the reboot keeps how it really ended.
    let done = e
        .run(&ran[0].pod, e.config("done", &["sh", "-c", "exit 3"]))
        .await;
    e.wait_exit(&done, Duration::from_secs(10)).await;
    assert_eq!(e.d.allocated_ips().len(), 5);

    e.d.simulate_reboot();
    assert_eq!(
        e.d.allocated_ips().len(),
        5,
        "host-local keeps its files on disk"
    );
    e.relaunch().await;

    let pods =
        e.c.list_pod_sandbox(pb::ListPodSandboxRequest::default())
            .await
            .unwrap()
            .into_inner()
            .items;
    assert_eq!(pods.len(), 5, "every pod is listed again: {pods:?}");
    for p in &pods {
        assert_eq!(
            p.state,
            pb::PodSandboxState::SandboxNotready as i32,
            "{p:?}"
        );
    }
    for (n, r) in ran.iter().enumerate() {
        let s = e.status(&r.running).await;
        assert_eq!(s.state, pb::ContainerState::ContainerExited as i32);
        assert_eq!((s.exit_code, s.reason.as_str()), (255, "NodeRebooted"));
        assert!(s.message.contains("emptied"), "says why: {}", s.message);
        assert!(s.finished_at >= s.started_at && s.started_at > 0, "{s:?}");
        assert_eq!(s.metadata.unwrap().attempt, n as u32, "its attempt is kept");
    }
    let s = e.status(&done).await;
    assert_eq!((s.exit_code, s.reason.as_str()), (3, "Error"));

    // Released on their own, without a Stop: the IPs (CNI DEL with no network namespace) and
    // the pod cgroups.
    eventually(
        "the old pods' IPs are released",
        Duration::from_secs(30),
        || e.d.allocated_ips().is_empty(),
    )
    .await;
    eventually(
        "the old pods' cgroups are removed",
        Duration::from_secs(30),
        || e.d.pod_cgroups().is_empty(),
    )
    .await;
    let (old, info) = status(&mut e.c, &ran[1].pod.0).await;
    assert_eq!(old.state, pb::PodSandboxState::SandboxNotready as i32);
    let problem = info["problem"].as_str().unwrap_or_default();
    assert!(problem.contains("emptied"), "the pod says why: {info}");

    // kubelet's next steps: a new sandbox of the same pod, which gets an address; the old one
    // stopped and removed with its containers.
    let mut again = ran[1].pod.1.clone();
    again.metadata.as_mut().unwrap().attempt = 1;
    let new_pod = run_pod(&mut e.c, again).await;
    let (new, _) = status(&mut e.c, &new_pod).await;
    assert_eq!(new.state, pb::PodSandboxState::SandboxReady as i32);
    assert_eq!(e.d.allocated_ips().len(), 1, "{:?}", e.d.allocated_ips());
    for r in &ran {
        stop_pod(&mut e.c, &r.pod.0).await;
        remove_pod(&mut e.c, &r.pod.0).await;
    }
    for id in ran.iter().map(|r| &r.running).chain([&done]) {
        e.wait_reclaimed(id).await;
    }
    end_pod(&mut e, &new_pod).await;
    e.d.assert_clean();
    let left = e.container_leftovers();
    assert!(left.is_empty(), "{left:?}");
}

async fn end_pod(e: &mut Env, id: &str) {
    stop_pod(&mut e.c, id).await;
    remove_pod(&mut e.c, id).await;
}
