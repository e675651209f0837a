//! Faults: a full state disk, CNI plugins that flood, print garbage or crash, a rollback that
//! fails across a restart, two daemons started at once, hostile requests. Each ends with the
//! true gRPC code, a daemon still serving, and nothing left behind.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use crust::cri::pb;
use tonic::Code;

/// Mounts a tmpfs of `size` on `dir`: a small disk to fill.
fn small_tmpfs(dir: &Path, size: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let opts = format!("size={size},mode=0711");
    sh(
        "mount",
        &["-t", "tmpfs", "-o", &opts, "tmpfs", dir.to_str().unwrap()],
    );
}

/// Fills the file system holding `dir` to its last page; returns the file that does it.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("fill");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![0x55u8; 1 << 16];
    let err = loop {
        if let Err(e) = f.write_all(&chunk) {
            break e;
        }
    };
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    path
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !done() {
        assert!(Instant::now() < deadline, "{what} never happened");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The state directory full (the pod's directory cannot be made), then the root's disk full
/// while CNI ADD runs (the pod's record, on disk, cannot be saved as Ready).
#[tokio::test]
async fn a_full_state_disk_is_resource_exhausted_naming_it_and_leaks_nothing() {
    let d = Daemon::prepare();
    // ADD sleeps a second after bridge allocated the IP: time to fill the disk mid-run.
    d.write_bridge_network(&[r#"{"type":"crust-test-slow","sleepSeconds":1}"#]);
    small_tmpfs(&d.state, "4m");
    small_tmpfs(&d.root, "4m");
    let d = d.spawn();
    let mut c = d.client().await;
    let (state, root) = (d.state.display().to_string(), d.root.display().to_string());

    // Full before the request: the sandbox directory cannot be written.
    let full = fill(&d.state);
    let err = c
        .run_pod_sandbox(run_request(pod_config("full")))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(
        err.message().contains(&state),
        "names the directory: {err:?}"
    );
    d.assert_clean();
    std::fs::remove_file(&full).unwrap();

    // Full while CNI ADD runs: monitor, netns, IP and cgroup exist when the record's last save
    // fails; all of them are undone.
    let mut c2 = d.client().await;
    let run =
        tokio::spawn(async move { c2.run_pod_sandbox(run_request(pod_config("filled"))).await });
    wait_for("bridge ADD", || !d.allocated_ips().is_empty()).await;
    let full = fill(&d.root);
    let err = run.await.unwrap().unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(
        err.message().contains("save sandbox record") && err.message().contains(&root),
        "names the step and the directory: {err:?}"
    );
    assert!(
        !err.message().contains("undoing it failed"),
        "the rollback needs no disk: {err:?}"
    );
    d.assert_clean();
    let pods = c
        .list_pod_sandbox(pb::ListPodSandboxRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(pods.items.is_empty(), "{:?}", pods.items);

    // With room again, the same pod runs.
    std::fs::remove_file(&full).unwrap();
    let id = run_pod(&mut c, pod_config("filled")).await;
    remove_pod(&mut c, &id).await;
    d.assert_clean();
}

#[tokio::test]
async fn broken_cni_plugins_are_unavailable_with_their_words_and_rolled_back() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let cases = [
        ("flood", "printed more than 1048576 bytes"),
        ("garbage", "unreadable result"),
        ("crash", "SIGSEGV"),
    ];
    for (i, (mode, want)) in cases.into_iter().enumerate() {
        // The padding changes the file's size: the cached config is reloaded for each case.
        let plugin = format!(
            r#"{{"type":"crust-test-bad","mode":"{mode}","pad":"{}"}}"#,
            "x".repeat(i)
        );
        d.write_bridge_network(&[&plugin]);
        let err = c
            .run_pod_sandbox(run_request(pod_config(mode)))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unavailable, "{mode}: {err:?}");
        assert!(
            err.message().contains("set up the pod network") && err.message().contains(want),
            "{mode}: {err:?}"
        );
        assert!(err.message().len() < 4096, "{mode}: the message is bounded");
        d.assert_clean();
    }
    c.version(pb::VersionRequest::default()).await.unwrap();
}

#[tokio::test]
async fn a_rollback_that_fails_after_a_restart_keeps_the_sandbox_listed() {
    let mut d = Daemon::prepare();
    let refuse = d.dir.join("refuse-del");
    std::fs::write(&refuse, "").unwrap();
    let plugin = format!(
        r#"{{"type":"crust-test-nodel","sleepSeconds":3,"failDelWhile":"{}"}}"#,
        refuse.display()
    );
    d.write_bridge_network(&[&plugin]);
    d.launch();
    let mut c = d.client().await;
    let run =
        tokio::spawn(async move { c.run_pod_sandbox(run_request(pod_config("stuck"))).await });
    wait_for("bridge ADD", || !d.allocated_ips().is_empty()).await;
    d.kill9();
    assert!(run.await.unwrap().is_err());

    // The restart's rollback fails at CNI DEL: the sandbox stays listed, not ready, saying why.
    d.launch();
    let mut c = d.client().await;
    let pods = c
        .list_pod_sandbox(pb::ListPodSandboxRequest::default())
        .await
        .unwrap()
        .into_inner()
        .items;
    assert_eq!(pods.len(), 1, "{pods:?}");
    assert_eq!(pods[0].state, pb::PodSandboxState::SandboxNotready as i32);
    let (_, info) = status(&mut c, &pods[0].id).await;
    let problem = info["problem"].as_str().unwrap_or_default().to_owned();
    assert!(
        problem.contains("fixture plugin refuses DEL"),
        "the reason is shown: {info}"
    );
    assert_eq!(
        Daemon::entries(&d.state.join("sandboxes")),
        [pods[0].id.clone()],
        "its record is kept for the retry"
    );

    // Once the plugin lets go, Remove finishes the job.
    std::fs::remove_file(&refuse).unwrap();
    remove_pod(&mut c, &pods[0].id).await;
    d.assert_clean();
}

#[tokio::test]
async fn of_two_daemons_started_at_once_one_serves_and_one_mount_is_made() {
    let d = Daemon::prepare();
    d.write_bridge_network(&[]);
    let start = |socket: &Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_crust"))
            .arg("serve")
            .arg("--config")
            .arg(&d.config)
            .arg("--listen")
            .arg(socket)
            .arg("--root")
            .arg(&d.root)
            .arg("--state")
            .arg(&d.state)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let sockets = [d.dir.join("a.sock"), d.dir.join("b.sock")];
    let mut children: Vec<_> = sockets.iter().map(|s| start(s)).collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    let (loser, winner) = loop {
        assert!(Instant::now() < deadline, "neither daemon gave up");
        if let Some(i) = children
            .iter_mut()
            .position(|c| c.try_wait().unwrap().is_some())
        {
            break (children.remove(i), children.remove(0));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let out = loser.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("another crust is serving"), "{err}");
    let state = d.state.display().to_string();
    let mounts = d.mounts().iter().filter(|m| **m == state).count();
    let mut winner = winner;
    let alive = winner.try_wait().unwrap().is_none();
    let _ = winner.kill();
    let _ = winner.wait();
    assert!(alive, "the other daemon serves");
    assert_eq!(mounts, 1, "one tmpfs on the state dir");
}

/// RunPodSandboxRequest's first field (config, a message) sent as a varint: bytes that are not
/// a RunPodSandboxRequest.
#[derive(Clone, PartialEq, prost::Message)]
struct Mangled {
    #[prost(uint64, tag = "1")]
    config: u64,
}

#[tokio::test]
async fn hostile_requests_get_their_codes_and_the_daemon_stays_up() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let up = |c: &mut Client| {
        let mut c = c.clone();
        async move {
            c.version(pb::VersionRequest::default()).await.unwrap();
        }
    };

    // Up to kubelet's 16 MiB limit a message is taken (tonic's default stops at 4 MiB); over
    // it, it is refused before it is decoded.
    let mut large = pod_config("large");
    large.annotations.insert("a".into(), "x".repeat(5 << 20));
    let id = run_pod(&mut c, large).await;
    remove_pod(&mut c, &id).await;
    let mut big = pod_config("big");
    big.annotations
        .insert("a".into(), "x".repeat(crust::cri::MAX_MESSAGE + 1));
    let err = c.run_pod_sandbox(run_request(big)).await.unwrap_err();
    assert_eq!(err.code(), Code::OutOfRange, "{err:?}");
    assert!(err.message().contains("too large"), "{err:?}");
    up(&mut c).await;

    // Bytes that do not decode.
    let channel = crust::cri::client::channel(d.socket.to_str().unwrap())
        .await
        .unwrap();
    let mut raw = tonic::client::Grpc::new(channel);
    raw.ready().await.unwrap();
    let codec = tonic_prost::ProstCodec::<Mangled, pb::RunPodSandboxResponse>::default();
    let path = "/runtime.v1.RuntimeService/RunPodSandbox".parse().unwrap();
    let err = raw
        .unary(tonic::Request::new(Mangled { config: 7 }), path, codec)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Internal, "{err:?}");
    assert!(err.message().contains("wire type"), "{err:?}");
    up(&mut c).await;

    // Names that would smuggle CNI_ARGS pairs, and out-of-range numbers.
    let mut smuggle = pod_config("x");
    smuggle.metadata.as_mut().unwrap().name = "x;K8S_POD_NAMESPACE=kube-system".into();
    let mut ports = pod_config("ports");
    ports.port_mappings = vec![pb::PortMapping {
        container_port: 80,
        host_port: -1,
        ..Default::default()
    }];
    let mut ns = pod_config("ns");
    ns.linux = Some(pb::LinuxPodSandboxConfig {
        security_context: Some(pb::LinuxSandboxSecurityContext {
            namespace_options: Some(pb::NamespaceOption {
                network: 99,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    for config in [smuggle, ports, ns] {
        let err = c.run_pod_sandbox(run_request(config)).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        up(&mut c).await;
    }
    d.assert_clean();
}

/// Processes whose command line is exactly `cmd` (NULs as spaces).
fn processes(cmd: &str) -> Vec<i32> {
    daemon::procfs_pids()
        .into_iter()
        .filter(|p| {
            let line = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&line).replace('\0', " ").trim() == cmd
        })
        .collect()
}

#[tokio::test]
async fn a_hanging_cni_plugin_is_killed_at_its_deadline_and_a_retry_works() {
    let d = Daemon::prepare();
    let (hang_add, hang_del) = (d.dir.join("hang-add"), d.dir.join("hang-del"));
    let plugin = format!(
        r#"{{"type":"crust-test-hang","hangAddWhile":"{}","hangDelWhile":"{}"}}"#,
        hang_add.display(),
        hang_del.display()
    );
    d.write_bridge_network(&[&plugin]);
    d.append_config("plugin_timeout_ms = 1500\n");
    let d = d.spawn();
    let mut c = d.client().await;

    // ADD hangs: the deadline's code and the plugin's name; the plugin and its child killed;
    // the bridge's IP, veth, namespaces and cgroup undone.
    std::fs::write(&hang_add, "").unwrap();
    let started = Instant::now();
    let err = c
        .run_pod_sandbox(run_request(pod_config("hang")))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert!(
        err.message()
            .contains("crust-test-hang ADD timed out after 1.5s"),
        "{err:?}"
    );
    assert!(took < Duration::from_secs(10), "answered in {took:?}");
    wait_for("the hanging plugin's child killed", || {
        processes("sleep 4321").is_empty()
    })
    .await;
    d.assert_clean();

    // DEL hangs: StopPodSandbox gives up at the deadline with its code and the plugin's
    // name, and keeps what it could not release for the retry, which succeeds.
    std::fs::remove_file(&hang_add).unwrap();
    let id = run_pod(&mut c, pod_config("hang")).await;
    std::fs::write(&hang_del, "").unwrap();
    let started = Instant::now();
    let err = c
        .stop_pod_sandbox(pb::StopPodSandboxRequest {
            pod_sandbox_id: id.clone(),
        })
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10), "{err:?}");
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(
        err.message()
            .contains("crust-test-hang DEL timed out after 1.5s"),
        "{err:?}"
    );
    let (s, info) = status(&mut c, &id).await;
    assert_eq!(s.state, pb::PodSandboxState::SandboxNotready as i32);
    let problem = info["problem"].as_str().unwrap_or_default();
    assert!(
        problem.contains("DEL timed out"),
        "the reason is shown: {info}"
    );
    std::fs::remove_file(&hang_del).unwrap();
    stop_pod(&mut c, &id).await;
    remove_pod(&mut c, &id).await;
    d.assert_clean();
}

#[tokio::test]
async fn a_full_root_disk_fails_pulls_and_creates_with_resource_exhausted_and_leaves_nothing() {
    use common::oci_build::{Comp, file, image, tar};
    use common::workload::{Env, test_image_layer};
    let mut env = Env::start_with(|d| small_tmpfs(&d.root, "32m")).await;
    let own = tar(&[file("full/marker", &vec![7u8; 256 << 10])]);
    let img = image(
        &[(tar(&test_image_layer()), Comp::Gzip), (own, Comp::Gzip)],
        serde_json::json!({"Env": ["PATH=/bin"], "Cmd": ["sh"]}),
        "amd64",
    );
    env.reg.push("busybox", "2", &img).await;
    let image2 = format!("{}/busybox:2", env.reg.addr);
    let mut images = env.d.images().await;
    let request = |image: &str| pb::PullImageRequest {
        image: Some(pb::ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let root = env.d.root.display().to_string();
    let store = |env: &Env| -> Vec<String> {
        ["blobs/sha256", "layers", "ingest", "records"]
            .iter()
            .flat_map(|s| Daemon::entries(&env.d.root.join("images").join(s)))
            .collect()
    };
    let before = store(&env);
    let pod = env.pod("full").await;
    let full = fill(&env.d.root);

    // PullImage: refused before or while writing, naming the directory; no partial content.
    let err = images.pull_image(request(&image2)).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(
        err.message().contains(&root),
        "names the directory: {err:?}"
    );
    assert_eq!(store(&env), before, "nothing half-stored");

    // CreateContainer: its writable layer cannot be made.
    let config = env.config("c", &["sleep", "60"]);
    let err = env.create(&pod, config.clone()).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(
        err.message().contains(&root),
        "names the directory: {err:?}"
    );
    let left = env.container_leftovers();
    assert!(left.is_empty(), "half-made container: {left:?}");

    // With room again, both work.
    std::fs::remove_file(&full).unwrap();
    images.pull_image(request(&image2)).await.unwrap();
    let id = env.run(&pod, config).await;
    env.remove(&id).await;
    stop_pod(&mut env.c, &pod.0).await;
    remove_pod(&mut env.c, &pod.0).await;
    env.d.assert_clean();
}

/// Uses up the inodes of the file system holding `dir` with empty files; returns them, so a
/// test can give inodes back one at a time.
fn use_up_inodes(dir: &Path) -> Vec<PathBuf> {
    let fill = dir.join("inodes");
    std::fs::create_dir(&fill).unwrap();
    let mut files = Vec::new();
    loop {
        let path = fill.join(files.len().to_string());
        match std::fs::File::create(&path) {
            Ok(_) => files.push(path),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
                return files;
            }
        }
    }
}

/// A root out of inodes while CreateContainer runs, at each of its steps in turn: one inode
/// given back after each refusal walks the failure through the image hold, the writable layer
/// (upper, work, rootfs), overlayfs' own work directory and the bundle. Each refusal is
/// ResourceExhausted naming the root and leaves nothing; the container that finally gets made
/// has a writable root (overlayfs mounts read-only, silently, when it cannot make its work
/// directory: that must be a failure, not a read-only container).
#[tokio::test]
async fn a_root_out_of_inodes_fails_each_step_of_create_container_cleanly() {
    use common::workload::Env;
    let mut env = Env::start_with(|d| {
        std::fs::create_dir_all(&d.root).unwrap();
        let opts = "size=256m,nr_inodes=4000,mode=0711";
        sh(
            "mount",
            &["-t", "tmpfs", "-o", opts, "tmpfs", d.root.to_str().unwrap()],
        );
    })
    .await;
    let root = env.d.root.display().to_string();
    let pod = env.pod("inodes").await;
    let config = env.config("c", &["sleep", "60"]);
    let mut spare = use_up_inodes(&env.d.root);
    let mut steps = Vec::new();
    let id = loop {
        match env.create(&pod, config.clone()).await {
            Ok(id) => break id,
            Err(err) => {
                assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
                assert!(err.message().contains(&root), "names the root: {err:?}");
                let left = env.container_leftovers();
                assert!(left.is_empty(), "half-made container: {left:?}");
                steps.push(err.message().to_owned());
                let file = spare.pop().expect("inodes left to give back");
                std::fs::remove_file(file).unwrap();
            }
        }
    };
    eprintln!("refusals, one inode apart:\n{}", steps.join("\n"));
    // The image hold, the writable layer's directories, overlayfs' work directory, and what
    // libcontainer makes in the root (mount points, /etc/hosts and the like).
    for step in [
        "images/holds",
        "/upper",
        "overlayfs could not make its work directory",
        "creating it in the pod's monitor",
    ] {
        assert!(
            steps.iter().any(|m| m.contains(step)),
            "no refusal at {step:?}: {steps:#?}"
        );
    }
    env.c
        .start_container(pb::StartContainerRequest {
            container_id: id.clone(),
        })
        .await
        .unwrap();
    // Room for what the container writes; its root must take it.
    spare
        .drain(..)
        .for_each(|f| std::fs::remove_file(f).unwrap());
    let r = env.exec(&id, &["touch", "/written"]).await;
    assert_eq!(r.exit_code, 0, "{}", String::from_utf8_lossy(&r.stderr));
    env.remove(&id).await;
    stop_pod(&mut env.c, &pod.0).await;
    remove_pod(&mut env.c, &pod.0).await;
    env.d.assert_clean();
}
