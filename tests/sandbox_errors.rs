//! Bad input, failing plugins and unready networks: the right gRPC code, a message naming what
//! was wrong, and nothing left behind.

mod common;

use common::*;
use crust::cri::pb;
use tonic::Code;

#[tokio::test]
async fn bad_requests_get_invalid_argument_naming_the_field() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let meta = |name: &str, uid: &str, ns: &str| {
        let mut p = pod_config("x");
        p.metadata = Some(pb::PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: ns.into(),
            attempt: 0,
        });
        p
    };
    let long = "n".repeat(300);
    let mut cases: Vec<(pb::PodSandboxConfig, &str)> = vec![
        (meta("", "u", "ns"), "metadata.name is required"),
        (meta("a", "", "ns"), "metadata.uid is required"),
        (meta("a", "u", ""), "metadata.namespace is required"),
        (meta(&long, "u", "ns"), "metadata.name is 300 bytes"),
        (meta("a/b", "u", "ns"), "metadata.name \"a/b\""),
        (meta("..", "u", "ns"), "metadata.name \"..\""),
        (meta("a", "../../etc", "ns"), "metadata.uid"),
        (meta("a\u{7}b", "u", "ns"), "control character"),
        // Each would add or split a CNI_ARGS pair (`K8S_POD_NAME=...;...`).
        (meta("a;K8S_POD_NAMESPACE=x", "u", "ns"), "metadata.name"),
        (meta("a", "u=1", "ns"), "metadata.uid"),
        (meta("a", "u", "ns;IgnoreUnknown=0"), "metadata.namespace"),
        (meta("a b", "u", "ns"), "metadata.name"),
    ];
    let mut no_meta = pod_config("x");
    no_meta.metadata = None;
    cases.push((no_meta, "config.metadata is required"));
    let mut bad_sysctl = pod_config("x");
    bad_sysctl.linux = Some(pb::LinuxPodSandboxConfig {
        sysctls: [("kernel.panic".to_owned(), "1".to_owned())].into(),
        ..Default::default()
    });
    cases.push((bad_sysctl, "sysctl kernel.panic is not namespaced"));
    let mut bad_dns = pod_config("x");
    bad_dns.dns_config = Some(pb::DnsConfig {
        servers: vec!["not-an-ip".into()],
        ..Default::default()
    });
    cases.push((bad_dns, "dns_config.servers"));
    let mut bad_port = pod_config("x");
    bad_port.port_mappings = vec![pb::PortMapping {
        container_port: 70000,
        ..Default::default()
    }];
    cases.push((bad_port, "container_port 70000"));
    let mut bad_host = pod_config("x");
    bad_host.hostname = "h".repeat(65);
    cases.push((bad_host, "hostname is 65 bytes"));
    for (config, want) in cases {
        let err = c.run_pod_sandbox(run_request(config)).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{want}: {err:?}");
        assert!(
            err.message().contains(want),
            "{:?} should mention {want:?}",
            err.message()
        );
    }
    let err = c
        .run_pod_sandbox(pb::RunPodSandboxRequest {
            config: Some(pod_config("h")),
            runtime_handler: "kata".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("unknown runtime handler \"kata\""),
        "{}",
        err.message()
    );
    assert!(
        err.message().contains("runc"),
        "lists the known handlers: {}",
        err.message()
    );
    let err = c
        .run_pod_sandbox(pb::RunPodSandboxRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    d.assert_clean();
}

#[tokio::test]
async fn duplicate_names_and_unknown_ids() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let id = run_pod(&mut c, pod_config("dup")).await;
    let err = c
        .run_pod_sandbox(run_request(pod_config("dup")))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists);
    assert!(
        err.message().contains(&id),
        "names the existing sandbox: {}",
        err.message()
    );
    // Another attempt of the same pod is a different sandbox.
    let mut retry = pod_config("dup");
    retry.metadata.as_mut().unwrap().attempt = 1;
    let id2 = run_pod(&mut c, retry).await;

    let status = |id: &str| pb::PodSandboxStatusRequest {
        pod_sandbox_id: id.into(),
        verbose: false,
    };
    let err = c
        .pod_sandbox_status(status("0123456789abcdef"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(err.message().contains("0123456789abcdef"));
    assert_eq!(
        c.pod_sandbox_status(status("")).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    // Stop and Remove of unknown ids succeed (kubelet and critest rely on it).
    stop_pod(&mut c, "nope").await;
    remove_pod(&mut c, "nope").await;

    remove_pod(&mut c, &id).await;
    // The name is free again once removed.
    let id3 = run_pod(&mut c, pod_config("dup")).await;
    for id in [id2, id3] {
        remove_pod(&mut c, &id).await;
    }
    d.assert_clean();
}

#[tokio::test]
async fn failing_cni_plugin_rolls_everything_back() {
    let d = Daemon::start_with_plugins(&[r#"{"type":"crust-test-fail"}"#]);
    let mut c = d.client().await;
    let err = c
        .run_pod_sandbox(run_request(pod_config("doomed")))
        .await
        .unwrap_err();
    // The plugin refused; a retry may succeed: Unavailable, with the plugin's words.
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    let msg = err.message();
    assert!(
        msg.contains("set up the pod network"),
        "names the step: {msg}"
    );
    assert!(
        msg.contains("fixture plugin refuses ADD"),
        "carries the plugin's words: {msg}"
    );
    // bridge had allocated an IP and created a veth: both undone.
    d.assert_clean();
    let list = c
        .list_pod_sandbox(pb::ListPodSandboxRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(list.items.is_empty());
    // The name was released.
    d.write_bridge_network(&[]);
    let id = run_pod(&mut c, pod_config("doomed")).await;
    remove_pod(&mut c, &id).await;
    d.assert_clean();
}

/// The condition of type `kind` in a Status answer.
fn condition(s: pb::StatusResponse, kind: &str) -> pb::RuntimeCondition {
    s.status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.r#type == kind)
        .unwrap()
}

#[tokio::test]
async fn network_not_ready_is_reported_precisely() {
    let d = Daemon::prepare().spawn();
    let mut c = d.client().await;
    let network_condition = |s| condition(s, "NetworkReady");
    let cond = network_condition(
        c.status(pb::StatusRequest { verbose: false })
            .await
            .unwrap()
            .into_inner(),
    );
    assert!(!cond.status);
    assert_eq!(cond.reason, "NetworkPluginNotReady");
    assert!(
        cond.message.contains(&d.cni_conf.display().to_string()),
        "names the dir: {}",
        cond.message
    );
    let err = c
        .run_pod_sandbox(run_request(pod_config("nonet")))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message().contains("no CNI network configuration"),
        "{}",
        err.message()
    );

    std::fs::write(
        d.cni_conf.join("10-missing.conflist"),
        r#"{"cniVersion":"1.0.0","name":"gone","plugins":[{"type":"no-such-plugin"}]}"#,
    )
    .unwrap();
    let cond = network_condition(
        c.status(pb::StatusRequest { verbose: false })
            .await
            .unwrap()
            .into_inner(),
    );
    assert!(!cond.status);
    assert!(
        cond.message.contains("\"no-such-plugin\""),
        "names the plugin: {}",
        cond.message
    );

    std::fs::remove_file(d.cni_conf.join("10-missing.conflist")).unwrap();
    d.write_bridge_network(&[]);
    let cond = network_condition(
        c.status(pb::StatusRequest { verbose: false })
            .await
            .unwrap()
            .into_inner(),
    );
    assert!(
        cond.status,
        "ready once a usable config appears: {}",
        cond.message
    );
    // Host-network pods need no CNI at all.
    d.assert_clean();
}

#[tokio::test]
async fn the_pod_cidr_from_kubelet_fills_the_cni_template() {
    let d = Daemon::prepare();
    let template = d.dir.join("template.conflist");
    std::fs::write(
        &template,
        format!(
            r#"{{"cniVersion":"1.0.0","name":"from-template","plugins":[
              {{"type":"bridge","bridge":"{}","isGateway":true,"ipMasq":false,
                "ipam":{{"type":"host-local","dataDir":"{}",
                        "ranges":[[{{"subnet":"{{{{.PodCIDR}}}}"}}]]}}}}]}}"#,
            d.bridge,
            d.ipam.display()
        ),
    )
    .unwrap();
    let mut config = std::fs::read_to_string(&d.config).unwrap();
    config.push_str(&format!("conf_template = {template:?}\n"));
    std::fs::write(&d.config, config).unwrap();
    let d = d.spawn();
    let mut c = d.client().await;
    let runtime_status = pb::StatusRequest { verbose: false };
    let ready = |s| condition(s, "NetworkReady").status;
    assert!(!ready(c.status(runtime_status).await.unwrap().into_inner()));

    let cidr = format!("{}.0/24", d.subnet_prefix);
    let update = pb::UpdateRuntimeConfigRequest {
        runtime_config: Some(pb::RuntimeConfig {
            network_config: Some(pb::NetworkConfig {
                pod_cidr: cidr.clone(),
            }),
        }),
    };
    c.update_runtime_config(update).await.unwrap();
    assert!(ready(c.status(runtime_status).await.unwrap().into_inner()));
    let written = std::fs::read_to_string(d.cni_conf.join("10-crust-pod-cidr.conflist")).unwrap();
    assert!(written.contains(&cidr), "{written}");
    let id = run_pod(&mut c, pod_config("templated")).await;
    let (s, _) = status(&mut c, &id).await;
    let ip = s.network.unwrap().ip;
    assert!(
        ip.starts_with(&format!("{}.", d.subnet_prefix)),
        "{ip} in {cidr}"
    );
    remove_pod(&mut c, &id).await;
    d.assert_clean();
}

#[tokio::test]
async fn runtime_not_ready_names_the_read_only_state_dir() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let runtime_condition = |s| condition(s, "RuntimeReady");
    let status = pb::StatusRequest { verbose: false };
    let cond = runtime_condition(c.status(status).await.unwrap().into_inner());
    assert!(cond.status, "{}", cond.message);

    // The state dir's filesystem (crust's tmpfs) goes read-only, as after a disk error.
    let remount = |opts: &str| {
        sh("mount", &["-o", opts, d.state.to_str().unwrap()]);
    };
    remount("remount,bind,ro");
    let cond = runtime_condition(c.status(status).await.unwrap().into_inner());
    let err = c.run_pod_sandbox(run_request(pod_config("ro"))).await;
    remount("remount,bind,rw");
    assert!(!cond.status);
    assert_eq!(cond.reason, "StateNotWritable");
    assert!(
        cond.message.contains(&d.state.display().to_string()) && cond.message.contains("read-only"),
        "{}",
        cond.message
    );
    let err = err.unwrap_err();
    assert!(
        err.message().contains(&d.state.display().to_string())
            && err.message().contains("Read-only"),
        "RunPodSandbox names the directory: {err}"
    );
    let cond = runtime_condition(c.status(status).await.unwrap().into_inner());
    assert!(cond.status, "ready again: {}", cond.message);
    d.assert_clean();
}

#[tokio::test]
async fn every_rpc_is_registered_and_an_empty_request_says_what_it_lacks() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let v = c
        .version(pb::VersionRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (v.runtime_name.as_str(), v.runtime_api_version.as_str()),
        ("crust", "v1")
    );
    let rc = c
        .runtime_config(pb::RuntimeConfigRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        rc.linux.unwrap().cgroup_driver,
        pb::CgroupDriver::Cgroupfs as i32
    );
    let cidr = |s: &str| pb::UpdateRuntimeConfigRequest {
        runtime_config: Some(pb::RuntimeConfig {
            network_config: Some(pb::NetworkConfig { pod_cidr: s.into() }),
        }),
    };
    c.update_runtime_config(cidr("10.244.0.0/24"))
        .await
        .unwrap();
    assert_eq!(
        c.update_runtime_config(cidr("10.244.0.0"))
            .await
            .unwrap_err()
            .code(),
        Code::InvalidArgument
    );
    let err = c
        .create_container(pb::CreateContainerRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("config"), "{}", err.message());
    // The event stream is served, and so is every checkpoint RPC: an empty request is the
    // caller's fault, and says which field.
    c.get_container_events(pb::GetEventsRequest {})
        .await
        .unwrap();
    let errors = [
        c.checkpoint_container(pb::CheckpointContainerRequest::default())
            .await
            .unwrap_err(),
        c.checkpoint_pod(pb::CheckpointPodRequest::default())
            .await
            .unwrap_err(),
        c.restore_pod(pb::RestorePodRequest::default())
            .await
            .unwrap_err(),
    ];
    for (err, field) in errors.iter().zip(["location", "output_path", "config"]) {
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains(field), "{}", err.message());
    }
}
