//! NetworkReady follows the CNI 1.1 STATUS of the network's plugins, as containerd 2.0.1+ and
//! CRI-O 1.36 have it: a plugin whose agent is down (Cilium's, at boot or during an upgrade)
//! turns the node's network not ready with the plugin's own words, so kubelet keeps pods off
//! the node instead of failing each sandbox on ADD; lists of older versions are never asked.
//! The plugin is tests/fixtures/cni/crust-test-status, whose STATUS fails while a file holds
//! a message.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::kubelet::Kubelet;
use common::workload::Env;
use common::*;
use crust::cri::pb;

/// The daemon's network: one crust-test-status plugin in a list of `version`.
fn write_status_network(d: &Daemon, version: &str) -> PathBuf {
    let file = d.dir.join("cni-status");
    std::fs::write(
        d.cni_conf.join("10-test.conflist"),
        format!(
            r#"{{"cniVersion":"{version}","name":"crust-status","plugins":[{{"type":"crust-test-status","statusFile":"{}","address":"{}.2/24"}}]}}"#,
            file.display(),
            d.subnet_prefix
        ),
    )
    .unwrap();
    file
}

/// The NetworkReady condition: (status, reason, message).
async fn network(c: &mut Client) -> (bool, String, String) {
    let status = c
        .status(pb::StatusRequest { verbose: false })
        .await
        .unwrap()
        .into_inner();
    let cond = status
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.r#type == "NetworkReady")
        .expect("a NetworkReady condition");
    (cond.status, cond.reason, cond.message)
}

/// Asks Status until NetworkReady is `ready` (a STATUS round is reused for a second).
async fn wait_network(c: &mut Client, ready: bool) -> (bool, String, String) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = network(c).await;
        if got.0 == ready {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "NetworkReady still {got:?}, want {ready}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn calls(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file.with_extension("calls"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// crust check's cni line for `d`.
fn check_cni(d: &Daemon) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_crust"))
        .arg("check")
        .arg("--config")
        .arg(&d.config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find(|l| l.contains(" cni "))
        .unwrap_or_else(|| panic!("no cni line in crust check: {text}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_whose_status_fails_makes_the_network_not_ready_with_its_words() {
    let agent_down = "cilium agent not reachable at /var/run/cilium/cilium.sock";
    let mut file = PathBuf::new();
    let mut e = Env::start_with(|d| {
        file = write_status_network(d, "1.1.0");
        std::fs::write(&file, agent_down).unwrap();
    })
    .await;

    let (ready, reason, message) = network(&mut e.c).await;
    assert!(!ready, "a failing STATUS leaves NetworkReady true");
    assert_eq!(reason, "NetworkPluginNotReady");
    assert!(
        message.contains(agent_down)
            && message.contains("crust-test-status")
            && message.contains("crust-status"),
        "the message names the network, the plugin and its words: {message}"
    );
    // STATUS concerns no pod: no container, namespace or interface; the plugin's own config
    // with the list's name and version.
    let seen = calls(&file);
    let first = seen.first().expect("STATUS was run");
    assert!(
        first.starts_with("CNI_CONTAINERID= CNI_NETNS= CNI_IFNAME= "),
        "{first}"
    );
    let conf: serde_json::Value =
        serde_json::from_str(first.splitn(4, ' ').nth(3).unwrap()).unwrap();
    assert_eq!(
        (conf["name"].as_str(), conf["cniVersion"].as_str()),
        (Some("crust-status"), Some("1.1.0"))
    );
    assert!(conf.get("prevResult").is_none(), "{conf}");

    // The operator's view says the same.
    let line = check_cni(&e.d);
    assert!(
        line.starts_with("FAIL") && line.contains(agent_down),
        "{line}"
    );

    // The agent is back: ready again, without a restart or a reload.
    std::fs::write(&file, "").unwrap();
    let (_, reason, message) = wait_network(&mut e.c, true).await;
    assert_eq!((reason.as_str(), message.as_str()), ("", ""));
    let line = check_cni(&e.d);
    assert!(
        line.starts_with("ok") && line.contains("STATUS ok"),
        "{line}"
    );

    // A list of CNI 1.0 is never asked: its plugins predate STATUS.
    std::fs::write(&file, agent_down).unwrap();
    write_status_network(&e.d, "1.0.0");
    let before = calls(&file).len();
    for _ in 0..3 {
        assert!(network(&mut e.c).await.0, "a 1.0.0 list is ready");
    }
    assert_eq!(calls(&file).len(), before, "STATUS ran for a 1.0.0 list");

    // Status asked in a loop (crictl info, kubelet) reuses a round for a second instead of
    // starting every plugin each time.
    write_status_network(&e.d, "1.1.0");
    let before = calls(&file).len();
    let started = Instant::now();
    let mut asked = 0;
    while started.elapsed() < Duration::from_millis(500) {
        assert!(!network(&mut e.c).await.0);
        asked += 1;
    }
    let ran = calls(&file).len() - before;
    assert!(
        asked >= 5 && (1..=2).contains(&ran),
        "{asked} Status calls in 0.5 s ran STATUS {ran} times"
    );
}

fn manifest(name: &str, image: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  \
         terminationGracePeriodSeconds: 0\n  containers:\n  - name: app\n    image: {image}\n    \
         command: [sleep, '3600']\n"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn kubelet_keeps_pods_off_the_node_while_a_plugin_is_not_ready() {
    let agent_down = "agent starting: endpoint regeneration not done";
    let mut file = PathBuf::new();
    let mut e = Env::start_with(|d| {
        file = write_status_network(d, "1.1.0");
        std::fs::write(&file, agent_down).unwrap();
    })
    .await;
    let mut k = Kubelet::start(&e.d);
    k.put("app", &manifest("app", &e.image));

    // kubelet reads the condition and holds the pod back with crust's message: no sandbox.
    let deadline = Instant::now() + Duration::from_secs(120);
    // klog quotes the error (err="network is not ready: ..."), escaping the quotes within.
    let held = |log: String| {
        log.lines().any(|l| {
            l.contains("network is not ready: container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady")
                && l.contains("plugin crust-test-status STATUS")
                && l.contains(agent_down)
        })
    };
    while !held(k.log()) {
        assert!(
            Instant::now() < deadline,
            "kubelet never held the pod back for the network; log:\n{}",
            k.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let sandboxes = |c: &mut Client| {
        let mut c = c.clone();
        async move {
            c.list_pod_sandbox(pb::ListPodSandboxRequest::default())
                .await
                .unwrap()
                .into_inner()
                .items
        }
    };
    assert!(
        sandboxes(&mut e.c).await.is_empty(),
        "a sandbox was made while the network was not ready"
    );

    // The agent is up: kubelet starts the pod on its own.
    std::fs::write(&file, "").unwrap();
    k.wait_pod("app", "running", |s| {
        s["containerStatuses"][0]["state"]["running"].is_object()
    });
    let list = sandboxes(&mut e.c).await;
    assert_eq!(list.len(), 1, "{list:?}");
    k.remove("app");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !sandboxes(&mut e.c).await.is_empty() {
        assert!(Instant::now() < deadline, "the pod was not removed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    k.stop();
}
