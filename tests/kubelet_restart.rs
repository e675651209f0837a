//! kubelet restarted (an upgrade of its own, a crash) while 30 pods start on crust: the new
//! kubelet finds what the old one asked for half done. Each pod must end with one ready
//! sandbox and one running container, whatever the old kubelet's requests left behind is
//! ended by the new one's garbage collection, and once the pods are deleted nothing is held:
//! no IP, cgroup, mount or monitor. `make soak` restarts it CRUST_SOAK_KUBELET_RESTARTS times.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::kubelet::Kubelet;
use common::workload::Env;
use common::*;
use crust::cri::pb;

const PODS: usize = 30;

fn manifest(name: &str, image: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  \
         terminationGracePeriodSeconds: 0\n  containers:\n  - name: app\n    image: {image}\n    \
         command: [sleep, '3600']\n"
    )
}

async fn sandboxes(e: &mut Env) -> Vec<pb::PodSandbox> {
    e.c.list_pod_sandbox(pb::ListPodSandboxRequest::default())
        .await
        .unwrap()
        .into_inner()
        .items
}

/// Pod name -> (ready sandboxes, all sandboxes).
fn by_pod(list: &[pb::PodSandbox]) -> BTreeMap<String, (usize, usize)> {
    let mut out = BTreeMap::new();
    for s in list {
        let name = s.metadata.as_ref().unwrap().name.clone();
        let entry = out.entry(name).or_insert((0, 0));
        entry.1 += 1;
        if s.state == pb::PodSandboxState::SandboxReady as i32 {
            entry.0 += 1;
        }
    }
    out
}

async fn wait_for(e: &mut Env, k: &Kubelet, what: &str, check: impl Fn(&[pb::PodSandbox]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let list = sandboxes(e).await;
        if check(&list) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not in 180 s; sandboxes {:?}\nkubelet log:\n{}",
            by_pod(&list),
            k.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn kubelet_restarted_while_30_pods_start_leaves_each_pod_one_sandbox_and_nothing_after() {
    let rounds = std::env::var("CRUST_SOAK_KUBELET_RESTARTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let mut e = Env::start().await;
    let mut k = Kubelet::start(&e.d);
    for round in 0..rounds {
        let names: Vec<String> = (0..PODS).map(|n| format!("r{round}p{n}")).collect();
        for name in &names {
            k.put(name, &manifest(name, &e.image));
        }
        // Mid-burst: some pods exist, others are still to come.
        wait_for(&mut e, &k, "a sixth of the pods begun", |l| {
            l.len() >= PODS / 6
        })
        .await;
        let begun = sandboxes(&mut e).await.len();
        k.restart(&e.d);
        wait_for(&mut e, &k, "every pod ready", |l| {
            let pods = by_pod(l);
            pods.len() == PODS && pods.values().all(|(ready, _)| *ready == 1)
        })
        .await;
        // kubelet's own view agrees: one running container per pod.
        let deadline = Instant::now() + Duration::from_secs(180);
        while !names.iter().all(|n| {
            k.pod(n).is_some_and(|p| {
                p["status"]["containerStatuses"][0]["state"]["running"].is_object()
            })
        }) {
            assert!(
                Instant::now() < deadline,
                "kubelet does not see every pod running; log:\n{}",
                k.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let running = e
            .listed()
            .await
            .into_iter()
            .filter(|c| c.state == pb::ContainerState::ContainerRunning as i32)
            .count();
        assert_eq!(running, PODS, "one running container per pod");
        let list = sandboxes(&mut e).await;
        println!(
            "round {round}: kubelet restarted with {begun} of {PODS} sandboxes begun; then {} sandboxes for {PODS} pods",
            list.len()
        );

        for name in &names {
            k.remove(name);
        }
        wait_for(&mut e, &k, "every sandbox removed", |l| l.is_empty()).await;
    }
    k.stop();
    eventually("nothing held", Duration::from_secs(30), || {
        e.d.allocated_ips().is_empty() && e.d.monitors().is_empty()
    })
    .await;
    assert!(
        e.container_leftovers().is_empty(),
        "{:?}",
        e.container_leftovers()
    );
    e.d.assert_clean();
}
