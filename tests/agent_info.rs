//! What node agents read from the verbose ContainerStatus and PodSandboxStatus, where they look
//! for it: containerd's keys (Falco's container plugin reads `info.config.linux.security_context
//! .privileged`, `info.privileged`, `info.config.envs`, `info.config.image.image` and the pod's
//! `info.cniResult.Interfaces`; Tetragon `info.pid` and `info.runtimeSpec`), through the RPC
//! and through `crictl inspect` / `inspectp`, beside crust's own keys.

mod common;

use common::workload::{Env, alive};
use crust::cri::pb;
use serde_json::{Value, json};

/// A container config as kubelet sends one for a privileged container: no masked or read-only
/// paths, and `GREETING=hello`.
fn privileged(e: &Env, name: &str) -> pb::ContainerConfig {
    let mut config = e.config(name, &["sleep", "1000"]);
    let sc = config
        .linux
        .as_mut()
        .and_then(|l| l.security_context.as_mut())
        .unwrap();
    sc.privileged = true;
    sc.masked_paths.clear();
    sc.readonly_paths.clear();
    config.envs = vec![pb::KeyValue {
        key: "GREETING".into(),
        value: b"hello".to_vec(),
    }];
    config
}

fn inspect(e: &Env, verb: &str, id: &str) -> Value {
    let (code, out, err) = e.crictl(&[verb, id], "");
    assert_eq!(code, 0, "crictl {verb}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("crictl {verb}: {e}: {out}"))
}

#[tokio::test]
async fn verbose_status_has_what_node_agents_read_where_containerd_puts_it() {
    let mut e = Env::start().await;
    let pod = e.pod("agents").await;
    let config = privileged(&e, "privileged");
    let loud = e.run(&pod, config).await;
    let quiet = e.run(&pod, e.config("plain", &["sleep", "1000"])).await;

    let info = e.info(&loud).await;
    assert_eq!(info["privileged"], true, "{info}");
    let config = &info["config"];
    assert_eq!(config["linux"]["security_context"]["privileged"], true);
    assert_eq!(config["metadata"], json!({"name": "privileged"}));
    assert_eq!(config["image"]["image"], e.image.as_str());
    // An env value is CRI `bytes`: base64, as Go's encoding/json writes it for containerd.
    assert_eq!(
        config["envs"],
        json!([{"key": "GREETING", "value": "aGVsbG8="}])
    );
    assert_eq!(config["command"], json!(["sleep", "1000"]));
    assert_eq!(config["log_path"], "privileged.log");
    // The pod's network and IPC modes (POD: 0, left out) and the container's PID mode.
    assert_eq!(
        config["linux"]["security_context"]["namespace_options"],
        json!({"pid": 1})
    );
    let pid = info["pid"].as_i64().unwrap();
    assert!(pid > 0 && alive(pid), "{info}");
    assert_eq!(info["sandboxID"], pod.0.as_str());
    assert!(info["runtimeSpec"]["linux"]["cgroupsPath"].is_string());
    // crust's own record stays beside them.
    assert_eq!(info["crustSpec"]["security"]["privileged"], true);
    assert!(info["cgroup"].is_string());

    let info = e.info(&quiet).await;
    assert_eq!(info["privileged"], false, "{info}");
    // `omitempty`: containerd leaves a false `privileged` out.
    let sc = &info["config"]["linux"]["security_context"];
    assert!(sc.get("privileged").is_none(), "{sc}");
    assert!(sc["masked_paths"].as_array().is_some_and(|p| !p.is_empty()));

    // crictl passes the info on as it is.
    let shown = inspect(&e, "inspect", &loud);
    assert_eq!(
        shown["info"]["config"]["linux"]["security_context"]["privileged"],
        true
    );
    assert_eq!(shown["info"]["privileged"], true);

    let (status, info) = common::status(&mut e.c, &pod.0).await;
    let ip = status.network.unwrap().ip;
    assert!(!ip.is_empty());
    let shown = inspect(&e, "inspectp", &pod.0);
    for info in [&info, &shown["info"]] {
        let eth0 = &info["cniResult"]["Interfaces"]["eth0"];
        assert_eq!(eth0["IPConfigs"][0]["IP"], ip.as_str(), "{info}");
        assert!(eth0["Sandbox"].as_str().is_some_and(|s| !s.is_empty()));
        assert!(info["cniResult"]["DNS"].is_array());
        assert!(info["pid"].as_i64().is_some_and(|p| p > 0 && alive(p)));
        assert_eq!(info["processStatus"], "running");
        assert_eq!(info["netNamespaceClosed"], false);
        assert_eq!(info["config"]["metadata"]["name"], "agents");
        assert_eq!(
            info["config"]["linux"]["security_context"]["namespace_options"],
            json!({"pid": 1})
        );
        // crust's own keys stay.
        assert!(info["cni"]["result"]["ips"].is_array());
        assert_eq!(info["crustSpec"]["metadata"]["name"], "agents");
    }
    // The monitor stands for containerd's pause process: it holds the pod's network namespace.
    let pid = info["pid"].as_i64().unwrap();
    let pinned = info["namespaces"]["net"].as_str().unwrap();
    let ns = |p: &str| std::fs::metadata(p).map(|m| std::os::unix::fs::MetadataExt::ino(&m));
    assert_eq!(
        ns(&format!("/proc/{pid}/ns/net")).unwrap(),
        ns(pinned).unwrap()
    );

    common::stop_pod(&mut e.c, &pod.0).await;
    let (_, info) = common::status(&mut e.c, &pod.0).await;
    assert_eq!(info["pid"], 0, "{info}");
    assert_eq!(info["processStatus"], "stopped");
    assert_eq!(info["netNamespaceClosed"], true);
    assert_eq!(e.info(&loud).await["pid"], 0);
    e.remove_pod_leaving_nothing(&pod.0).await;
}
