//! What node agents read from the verbose ContainerStatus and PodSandboxStatus, where they look
//! for it: containerd's keys (Falco's container plugin reads `info.config.linux.security_context
//! .privileged`, `info.privileged`, `info.config.envs`, `info.config.image.image` and the pod's
//! `info.cniResult.Interfaces`; Tetragon `info.runtimeSpec.linux.cgroupsPath`), through the RPC
//! and through `crictl inspect` / `inspectp`, beside crust's own keys; and the same keys with
//! the same JSON types as containerd 2.4.2 (the benchmarks' peer) gives them for the same
//! requests.

mod common;

use std::collections::BTreeMap;

use common::containerd_peer::Peer;
use common::oci_build::{Comp, Node, busybox_layer, image, tar};
use common::registry::{Auth, Registry};
use common::workload::{Env, alive};
use common::{Client, Daemon};
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
    // An env value is CRI `bytes`, which cri-api's Go type writes as a string.
    assert_eq!(
        config["envs"],
        json!([{"key": "GREETING", "value": "hello"}])
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

/// Every path under `v` with its JSON type; list items share a path (`[]`).
fn shape(v: &Value, at: &str, out: &mut BTreeMap<String, &'static str>) {
    let kind = match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(items) => {
            for item in items {
                shape(item, &format!("{at}[]"), out);
            }
            "array"
        }
        Value::Object(fields) => {
            for (k, field) in fields {
                shape(field, &format!("{at}.{k}"), out);
            }
            "object"
        }
    };
    out.insert(at.to_owned(), kind);
}

fn shape_of(v: &Value) -> BTreeMap<String, &'static str> {
    let mut out = BTreeMap::new();
    shape(v, "", &mut out);
    out
}

/// One runtime's verbose infos: the privileged container's, the plain one's, the pod's.
struct Seen {
    privileged: Value,
    plain: Value,
    pod: Value,
}

fn pod_config(logs: &std::path::Path, cgroup_parent: &str) -> pb::PodSandboxConfig {
    let mut config = common::pod_config("shapes");
    config.log_directory = logs.join("shapes").display().to_string();
    config.dns_config = Some(pb::DnsConfig {
        servers: vec!["10.96.0.10".into()],
        searches: vec!["shapes.svc.cluster.local".into()],
        options: vec!["ndots:5".into()],
    });
    config.labels.insert("app".into(), "shapes".into());
    common::with_namespaces(
        &mut config,
        pb::NamespaceMode::Pod,
        pb::NamespaceMode::Container,
        pb::NamespaceMode::Pod,
    );
    let linux = config.linux.get_or_insert_with(Default::default);
    linux.cgroup_parent = cgroup_parent.into();
    let sc = linux.security_context.get_or_insert_with(Default::default);
    sc.privileged = true;
    config
}

/// A container config as kubelet sends one, with labels, resources, capabilities, a user, an
/// env and a read-only host mount.
fn container(image: &str, name: &str, privileged: bool, mount: &str) -> pb::ContainerConfig {
    pb::ContainerConfig {
        metadata: Some(pb::ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: Some(pb::ImageSpec {
            image: image.into(),
            user_specified_image: image.into(),
            ..Default::default()
        }),
        command: vec!["sleep".into(), "1000".into()],
        envs: vec![pb::KeyValue {
            key: "GREETING".into(),
            value: b"hello".to_vec(),
        }],
        mounts: vec![pb::Mount {
            container_path: "/data".into(),
            host_path: mount.into(),
            readonly: true,
            ..Default::default()
        }],
        labels: [("io.kubernetes.container.name".to_owned(), name.to_owned())].into(),
        annotations: [(
            "io.kubernetes.container.restartCount".to_owned(),
            "0".to_owned(),
        )]
        .into(),
        log_path: format!("{name}.log"),
        linux: Some(pb::LinuxContainerConfig {
            resources: Some(pb::LinuxContainerResources {
                cpu_shares: 2,
                oom_score_adj: 1000,
                ..Default::default()
            }),
            security_context: Some(pb::LinuxContainerSecurityContext {
                privileged,
                capabilities: (!privileged).then(|| pb::Capability {
                    drop_capabilities: vec!["NET_RAW".into()],
                    ..Default::default()
                }),
                namespace_options: Some(pb::NamespaceOption {
                    pid: pb::NamespaceMode::Container as i32,
                    ..Default::default()
                }),
                run_as_user: Some(pb::Int64Value { value: 0 }),
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

async fn verbose(c: &mut Client, name: &str, id: &str) -> Value {
    let r = c
        .container_status(pb::ContainerStatusRequest {
            container_id: id.into(),
            verbose: true,
        })
        .await
        .unwrap_or_else(|e| panic!("{name}: ContainerStatus: {e}"))
        .into_inner();
    serde_json::from_str(&r.info["info"]).unwrap()
}

async fn seen(
    name: &str,
    c: &mut Client,
    images: &mut pb::image_service_client::ImageServiceClient<tonic::transport::Channel>,
    config: &pb::PodSandboxConfig,
    image: &str,
    mount: &str,
) -> Seen {
    images
        .pull_image(common::pull_request(image))
        .await
        .unwrap_or_else(|e| panic!("{name}: pulling: {e}"));
    std::fs::create_dir_all(&config.log_directory).unwrap();
    let pod = c
        .run_pod_sandbox(common::run_request(config.clone()))
        .await
        .unwrap_or_else(|e| panic!("{name}: RunPodSandbox: {e}"))
        .into_inner()
        .pod_sandbox_id;
    let mut infos = Vec::new();
    for (container_name, privileged) in [("privileged", true), ("plain", false)] {
        let id = c
            .create_container(pb::CreateContainerRequest {
                pod_sandbox_id: pod.clone(),
                config: Some(container(image, container_name, privileged, mount)),
                sandbox_config: Some(config.clone()),
            })
            .await
            .unwrap_or_else(|e| panic!("{name}: CreateContainer: {e}"))
            .into_inner()
            .container_id;
        c.start_container(pb::StartContainerRequest {
            container_id: id.clone(),
        })
        .await
        .unwrap_or_else(|e| panic!("{name}: StartContainer: {e}"));
        infos.push(verbose(c, name, &id).await);
    }
    let (_, pod_info) = common::status(c, &pod).await;
    common::stop_pod(c, &pod).await;
    common::remove_pod(c, &pod).await;
    let plain = infos.pop().unwrap();
    Seen {
        privileged: infos.pop().unwrap(),
        plain,
        pod: pod_info,
    }
}

/// The paths of `v` under `key`, with their types, but those `skip` names (and what is under
/// them).
fn under(v: &Value, key: &str, skip: &[&str]) -> BTreeMap<String, &'static str> {
    shape_of(&v[key])
        .into_iter()
        .filter(|(path, _)| !skip.iter().any(|s| path.starts_with(s)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verbose_keys_agents_read_have_containerd_types() {
    let reg = Registry::start(Auth::None);
    let mut layer = busybox_layer();
    layer.push(Node::Symlink {
        path: "bin/sleep".into(),
        target: "busybox".into(),
    });
    let layers = [(tar(&layer), Comp::Gzip)];
    let workload = image(
        &layers,
        json!({"Env": ["PATH=/bin"], "Cmd": ["sh"]}),
        "amd64",
    );
    reg.push("busybox", "1", &workload).await;
    let pause = image(
        &layers,
        json!({"Entrypoint": ["/bin/sleep", "100000"], "User": "65535:65535"}),
        "amd64",
    );
    reg.push("pause", "1", &pause).await;
    let image_ref = format!("{}/busybox:1", reg.addr);
    let mount = tempfile::tempdir().unwrap();
    let mount = mount.path().to_str().unwrap().to_owned();

    let peer = Peer::start(&reg.addr, &format!("{}/pause:1", reg.addr));
    let d = Daemon::prepare();
    d.write_bridge_network(&[]);
    d.append_config(&format!(
        "\n[registry.mirrors.\"{0}\"]\nendpoints = [\"http://{0}\"]\n",
        reg.addr
    ));
    let d = d.spawn();
    let theirs = seen(
        "containerd",
        &mut peer.client().await,
        &mut peer.images().await,
        &pod_config(&peer.dir.join("logs"), &peer.cgroup_parent),
        &image_ref,
        &mount,
    )
    .await;
    let ours = seen(
        "crust",
        &mut d.client().await,
        &mut d.images().await,
        &pod_config(&d.dir.join("logs"), &d.cgroup_parent),
        &image_ref,
        &mount,
    )
    .await;

    // Both answers, for reading when this fails: target/agent-info/<runtime>-<object>.json.
    let keep = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/agent-info");
    std::fs::create_dir_all(&keep).unwrap();
    for (runtime, seen) in [("crust", &ours), ("containerd", &theirs)] {
        for (what, v) in [
            ("privileged", &seen.privileged),
            ("plain", &seen.plain),
            ("pod", &seen.pod),
        ] {
            let text = serde_json::to_string_pretty(v).unwrap();
            std::fs::write(keep.join(format!("{runtime}-{what}.json")), text).unwrap();
        }
    }

    // The CRI ContainerConfig: every path and type, as containerd marshals the request.
    for (what, t, o) in [
        ("privileged", &theirs.privileged, &ours.privileged),
        ("plain", &theirs.plain, &ours.plain),
    ] {
        assert_eq!(
            under(o, "config", &[]),
            under(t, "config", &[]),
            "{what}: {o} vs {t}"
        );
        assert_eq!(o["config"]["envs"], t["config"]["envs"], "{what}");
        assert_eq!(o["config"]["image"], t["config"]["image"], "{what}");
        assert_eq!(
            o["config"]["linux"]["security_context"], t["config"]["linux"]["security_context"],
            "{what}"
        );
        for key in ["sandboxID", "pid", "runtimeSpec"] {
            assert_eq!(
                shape_of(&o[key])[""],
                shape_of(&t[key])[""],
                "{what}: {key}: {} vs {}",
                o[key],
                t[key]
            );
        }
        for path in [".linux.cgroupsPath", ".annotations", ".process.env"] {
            let (o, t) = (shape_of(&o["runtimeSpec"]), shape_of(&t["runtimeSpec"]));
            assert_eq!(o.get(path), t.get(path), "{what}: runtimeSpec{path}");
        }
    }
    assert_eq!(ours.privileged["privileged"], true);

    // The pod: the request but what crust does not keep of the pod's security context, and
    // the CNI result's interface in the pod.
    let kept = [".linux.security_context.privileged"];
    assert_eq!(
        under(&ours.pod, "config", &kept),
        under(&theirs.pod, "config", &kept)
    );
    // (containerd's handler is under `sandboxMetadata`; crust's own `runtimeHandler` is not
    // containerd's.)
    for key in ["pid", "processStatus", "netNamespaceClosed"] {
        assert_eq!(
            shape_of(&ours.pod[key])[""],
            shape_of(&theirs.pod[key])[""],
            "pod {key}: {} vs {}",
            ours.pod[key],
            theirs.pod[key]
        );
    }
    let eth0 = |v: &Value| shape_of(&v["cniResult"]["Interfaces"]["eth0"]);
    assert_eq!(
        eth0(&ours.pod),
        eth0(&theirs.pod),
        "{} vs {}",
        ours.pod,
        theirs.pod
    );
    for key in ["Interfaces", "DNS"] {
        assert_eq!(
            shape_of(&ours.pod["cniResult"][key])[""],
            shape_of(&theirs.pod["cniResult"][key])[""],
            "cniResult.{key}"
        );
    }
    drop(peer);
}
