//! What one tenant of the node can do to crust and to the others, tried as that tenant would
//! (issue 56): an image whose account files are a FIFO or a device node, files under the root
//! and state directories that a local user who is not root tries to read or run, and peers
//! (registries, stream and metrics clients) that send without end or not at all. Each hostile
//! input gets its clear error, and the daemon's memory and its other RPCs stay as they were.

mod common;

use std::time::{Duration, Instant};

use common::oci_build::{Comp, Node, image, tar};
use common::workload::{Env, test_image_layer};
use common::*;
use crust::cri::pb;
use serde_json::json;

/// The daemon's resident memory (VmRSS), in kB.
fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// The test image with `node` in place of its file at `path`, pushed as `<repo>:1` and pulled.
async fn image_with(e: &mut Env, repo: &str, path: &str, node: Node) -> String {
    let mut nodes: Vec<Node> = test_image_layer()
        .into_iter()
        .filter(|n| !matches!(n, Node::File { path: p, .. } if p == path))
        .collect();
    nodes.push(node);
    let img = image(
        &[(tar(&nodes), Comp::Gzip)],
        json!({"Env": ["PATH=/bin"], "Cmd": ["sh"]}),
        "amd64",
    );
    e.reg.push(repo, "1", &img).await;
    let name = format!("{}/{repo}:1", e.reg.addr);
    e.d.images()
        .await
        .pull_image(pull_request(&name))
        .await
        .unwrap();
    name
}

/// Answers Version within a second, or panics naming what the daemon was doing.
async fn answers_promptly(c: &mut Client, during: &str) {
    let asked = Instant::now();
    let v = tokio::time::timeout(
        Duration::from_secs(1),
        c.version(pb::VersionRequest::default()),
    )
    .await
    .unwrap_or_else(|_| panic!("Version did not answer within 1 s {during}"));
    v.unwrap();
    assert!(asked.elapsed() < Duration::from_secs(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_whose_account_files_are_a_fifo_or_a_device_is_refused_and_blocks_nothing() {
    let mut e = Env::start().await;
    let fifo = image_with(
        &mut e,
        "fifo-passwd",
        "etc/passwd",
        Node::Fifo {
            path: "etc/passwd".into(),
        },
    )
    .await;
    // /dev/tty (5:0): opening it on the host would block or give the daemon a controlling
    // terminal; crust must not open it at all.
    let tty = image_with(
        &mut e,
        "tty-group",
        "etc/group",
        Node::Char {
            path: "etc/group".into(),
            major: 5,
            minor: 0,
        },
    )
    .await;
    let mut pods = Vec::new();
    for (name, image) in [("fifo-a", &fifo), ("fifo-b", &fifo), ("tty", &tty)] {
        pods.push((name, image, e.pod(name).await));
    }
    let mut creates = Vec::new();
    for (name, image, pod) in pods {
        let mut config = e.config(name, &["sleep", "600"]);
        config.image.as_mut().unwrap().image = image.clone();
        let mut c = e.c.clone();
        creates.push(tokio::spawn(async move {
            c.create_container(pb::CreateContainerRequest {
                pod_sandbox_id: pod.0.clone(),
                config: Some(config),
                sandbox_config: Some(pod.1.clone()),
            })
            .await
        }));
    }
    // Three creates at once on a daemon with two async workers: each used to hold one.
    answers_promptly(&mut e.c, "while three creates read hostile account files").await;
    let mut errors = Vec::new();
    for c in creates {
        let answer = tokio::time::timeout(Duration::from_secs(10), c)
            .await
            .expect("CreateContainer answered within 10 s")
            .unwrap();
        errors.push(answer.expect_err("a hostile image was created"));
    }
    for (e, what) in errors.iter().zip([
        "/etc/passwd is a FIFO",
        "/etc/passwd is a FIFO",
        "/etc/group is a character device",
    ]) {
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains(what), "{}", e.message());
        assert!(
            e.message().contains("not a regular file"),
            "{}",
            e.message()
        );
    }
    // Nothing of them is left, and a container of the ordinary image still runs.
    assert!(e.listed().await.is_empty());
    let pod = e.pod("ok").await;
    let id = e.run(&pod, e.config("ok", &["sleep", "600"])).await;
    assert_eq!(e.sh(&id, "id -u").await.trim(), "0");
}
