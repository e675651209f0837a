//! RuntimeClass handlers whose containers an OCI runtime binary runs (`[runtimes.<handler>]`),
//! with Debian's real crun and runc: a pod under each runs containers with logs, a tty, exec
//! (sync and streaming), attach, statistics and OOM kills as under the default handler, its
//! containers survive a restart of crust, and stopping and removing leave nothing (state,
//! cgroups, mounts, processes). Status reports each handler's own features.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::workload::{self, Env, tail};
use common::*;
use crust::cri::pb;

/// Where Debian installs the binary, if it does.
fn binary(handler: &str) -> PathBuf {
    let path = ["/usr/bin", "/usr/sbin"]
        .iter()
        .map(|d| Path::new(d).join(handler))
        .find(|p| p.exists());
    path.unwrap_or_else(|| panic!("{handler} is not installed (apt-get install {handler})"))
}

/// A hybrid cgroup host (v1 controllers, a v2 hierarchy beside them) whose v2 hierarchy holds
/// a controller.
fn hybrid_with_v2_controllers() -> bool {
    std::fs::read_to_string("/sys/fs/cgroup/unified/cgroup.controllers")
        .is_ok_and(|c| !c.trim().is_empty())
}

/// Waits until the container's log holds `record` (`stdout F hello`).
async fn wait_logged(e: &Env, pod: &(String, pb::PodSandboxConfig), name: &str, record: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !e.log_records(pod, name).iter().any(|r| r == record) {
        assert!(
            Instant::now() < deadline,
            "{record:?} not in {name}'s log: {:?}",
            e.log_records(pod, name)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until a record of the container's log contains `text` (10 s).
async fn wait_log_holds(e: &Env, pod: &(String, pb::PodSandboxConfig), name: &str, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !e.log_records(pod, name).iter().any(|r| r.contains(text)) {
        assert!(
            Instant::now() < deadline,
            "{text:?} not in {name}'s log: {:?}",
            e.log_records(pod, name)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The answer to `GET /index.html` on 127.0.0.1:`port`, asked until the server answers (10 s).
fn http_get(port: u16) -> String {
    use std::io::{Read, Write};
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = std::net::TcpStream::connect(("127.0.0.1", port)).and_then(|mut s| {
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            s.write_all(b"GET /index.html HTTP/1.0\r\n\r\n")?;
            let mut text = String::new();
            s.read_to_string(&mut text)?;
            Ok(text)
        });
        match answer {
            Ok(text) if text.starts_with("HTTP/1.") => return text,
            other => assert!(Instant::now() < deadline, "no page: {other:?}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A container named `web` serving `/index.html` ("served") on port 8080.
fn web_server(e: &Env) -> pb::ContainerConfig {
    let script = "mkdir -p /www && echo served > /www/index.html && exec httpd -f -p 8080 -h /www";
    e.config("web", &["sh", "-c", script])
}

/// The page `web_server` serves, fetched through `crictl port-forward` (SPDY) into pod `pod`.
async fn forwarded_page(e: &Env, pod: &str) -> String {
    let local = free_port();
    let _forward = forward::crictl_forward(&e.d, pod, "spdy", local, 8080);
    tokio::task::spawn_blocking(move || http_get(local))
        .await
        .unwrap()
}

/// The binary's state directories of crust's containers under `handler`.
fn runtime_state(e: &Env, handler: &str) -> Vec<String> {
    Daemon::entries(&e.d.state.join("runtimes").join(handler))
}

async fn handler_features(e: &mut Env, handler: &str) -> pb::RuntimeHandlerFeatures {
    let status =
        e.c.status(pb::StatusRequest { verbose: false })
            .await
            .unwrap()
            .into_inner();
    let h = status
        .runtime_handlers
        .into_iter()
        .find(|h| h.name == handler);
    h.unwrap_or_else(|| panic!("Status lists no handler {handler}"))
        .features
        .unwrap()
}

async fn a_pod_runs_under(handler: &str) {
    let path = binary(handler);
    let mut e = Env::start_with(|d| {
        d.append_config(&format!(
            "\n[runtimes.{handler}]\nruntime_path = {path:?}\n"
        ))
    })
    .await;
    // crust check names the handler's binary and its version.
    let text = e.d.check();
    let version = Command::new(&path).arg("--version").output().unwrap();
    let version = String::from_utf8_lossy(&version.stdout);
    let line = text
        .lines()
        .find(|l| l.contains(" handler ") && l.contains(&format!(": {} (", path.display())));
    let line = line.unwrap_or_else(|| panic!("no handler line for {handler}: {text}"));
    assert!(line.contains(version.lines().next().unwrap()), "{line}");

    // The binary's own features, not the default handler's.
    let features = handler_features(&mut e, handler).await;
    let reported = Command::new(&path).arg("features").output().unwrap();
    if !reported.status.success() {
        assert!(!features.recursive_read_only_mounts && !features.user_namespaces);
    }
    if !features.user_namespaces {
        // kubelet sends no such pod to this handler (Status says so); a client that does
        // learns why.
        let mut config = pod_config("userns");
        let ns = config
            .linux
            .get_or_insert_with(Default::default)
            .security_context
            .get_or_insert_with(Default::default)
            .namespace_options
            .get_or_insert_with(Default::default);
        let range = vec![pb::IdMapping {
            host_id: 1 << 30,
            container_id: 0,
            length: 65536,
        }];
        ns.userns_options = Some(pb::UserNamespace {
            mode: pb::NamespaceMode::Pod as i32,
            uids: range.clone(),
            gids: range,
        });
        let mut req = run_request(config);
        req.runtime_handler = handler.into();
        let err = e.c.run_pod_sandbox(req).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
        assert!(err.message().contains("user namespaces"), "{err:?}");
    }
    let pod = e.pod_under("cli", handler).await;

    // A container with output, run by the binary: its state is under crust's root for it.
    let created = e
        .create(
            &pod,
            e.config("main", &["sh", "-c", "echo hello; exec sleep 600"]),
        )
        .await;
    let main = match created {
        Ok(id) => id,
        Err(status) if hybrid_with_v2_controllers() && status.message().contains("hybrid") => {
            // crun before 1.9 refuses a hybrid host whose v2 hierarchy has a controller (this
            // test machine's has hugetlb): the binary's own words reach the client, and the
            // failed create leaves nothing behind.
            assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
            assert!(status.message().contains(&format!("{}", path.display())));
            assert!(
                e.container_leftovers().is_empty(),
                "{:?}",
                e.container_leftovers()
            );
            assert!(runtime_state(&e, handler).is_empty());
            eprintln!(
                "{handler} cannot run containers on this host: {}",
                status.message()
            );
            e.end_pod(&pod.0).await;
            return;
        }
        Err(status) => panic!("{handler}: {status:?}"),
    };
    e.c.start_container(pb::StartContainerRequest {
        container_id: main.clone(),
    })
    .await
    .unwrap();
    wait_logged(&e, &pod, "main", "stdout F hello").await;
    assert_eq!(runtime_state(&e, handler), std::slice::from_ref(&main));
    let listed = Command::new(&path)
        .arg("--root")
        .arg(e.d.state.join("runtimes").join(handler))
        .arg("list")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&listed.stdout).contains(&main));

    // ExecSync, its exit codes, and a missing command said as the request's fault.
    // A command the image does not have is the request's fault, in the binary's words.
    let err = e
        .create(&pod, e.config("missing", &["no-such-command"]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("no-such-command"), "{err:?}");
    assert_eq!(runtime_state(&e, handler), std::slice::from_ref(&main));

    let info = e.info(&main).await;
    assert_eq!(info["runtime"]["handler"], handler, "{info}");
    assert_eq!(info["runtime"]["path"], path.display().to_string());
    assert_eq!(e.sh(&main, "echo in; id -u").await, "in\n0\n");
    assert_eq!(e.exec(&main, &["sh", "-c", "exit 3"]).await.exit_code, 3);
    let err =
        e.c.exec_sync(pb::ExecSyncRequest {
            container_id: main.clone(),
            cmd: vec!["no-such-command".into()],
            timeout: 10,
        })
        .await;
    match err {
        Err(status) => assert!(status.message().contains("no-such-command"), "{status:?}"),
        Ok(r) => assert_ne!(r.into_inner().exit_code, 0),
    }

    // Streaming exec: output, stdin, and a tty.
    let (code, out, err) = e.crictl(&["exec", &main, "sh", "-c", "echo out; exit 4"], "");
    assert_eq!(out, "out\n", "{err}");
    assert_ne!(code, 0);
    let (code, out, err) = e.crictl(&["exec", "-i", &main, "cat"], "from stdin\n");
    assert_eq!((code, out.as_str()), (0, "from stdin\n"), "{err}");
    let text = e.crictl_tty_exec(&main, "tty; echo in-tty");
    assert!(
        text.contains("/dev/pts/") && text.contains("in-tty"),
        "{text}"
    );

    // A tty container: its terminal comes back from the binary on the console socket.
    let mut config = e.config("tty", &["sh", "-c", "tty; exec sleep 600"]);
    config.tty = true;
    let tty = e.run(&pod, config).await;
    wait_log_holds(&e, &pod, "tty", "/dev/pts/").await;

    // Attach with stdin to a shell that ends when its stdin does.
    let mut config = e.config("shell", &["sh"]);
    config.stdin = true;
    config.stdin_once = true;
    let shell = e.run(&pod, config).await;
    let (code, out, err) = e.crictl(&["attach", "-i", &shell], "echo hello from attach\n");
    assert_eq!((code, out.as_str()), (0, "hello from attach\n"), "{err}");
    assert_eq!(
        e.wait_exit(&shell, Duration::from_secs(10)).await.exit_code,
        0
    );

    // Port-forward into the pod's network namespace, which the monitor holds.
    let web = e.run(&pod, web_server(&e)).await;
    let page = forwarded_page(&e, &pod.0).await;
    assert!(page.ends_with("served\n"), "{page}");

    // Statistics from the container's cgroup.
    let stats =
        e.c.container_stats(pb::ContainerStatsRequest {
            container_id: main.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .stats
        .unwrap();
    let memory = stats.memory.unwrap().working_set_bytes.unwrap().value;
    assert!(memory > 0, "{handler}: no memory figure");

    // An OOM kill reads OOMKilled.
    let hog = e.run(&pod, e.memory_hog("hog")).await;
    let s = e.wait_exit(&hog, Duration::from_secs(60)).await;
    assert_eq!((s.exit_code, s.reason.as_str()), (137, "OOMKilled"));

    // crust restarts; the containers keep running and answer as before.
    let pid = e.info(&main).await["pid"].as_i64().unwrap();
    e.d.kill9();
    e.relaunch().await;
    assert!(workload::alive(pid), "main died with crust");
    assert_eq!(
        e.status(&main).await.state,
        pb::ContainerState::ContainerRunning as i32
    );
    assert_eq!(e.sh(&main, "echo again").await, "again\n");

    // Stop and remove: nothing of the containers is left, the binary's state included.
    e.stop(&main, 0).await;
    assert!(!workload::alive(pid));
    for id in [&main, &tty, &shell, &hog, &web] {
        e.remove(id).await;
        e.wait_reclaimed(id).await;
    }
    assert!(
        runtime_state(&e, handler).is_empty(),
        "{:?}; daemon log:\n{}",
        runtime_state(&e, handler),
        tail(&e.d.log(), 30)
    );
    e.end_pod(&pod.0).await;
}

/// Processes whose command line names `root` (a runtime binary's state root): runsc's
/// sandbox and gofer carry it.
fn processes_naming(root: &Path) -> Vec<String> {
    let root = root.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&root))
        .collect()
}

/// Runs `script` in `id` until it prints `want` (10 s).
async fn wait_sh(e: &mut Env, id: &str, script: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = e.sh(id, script).await;
        if got == want {
            return;
        }
        assert!(Instant::now() < deadline, "{script}: {got:?}, not {want:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// gVisor's runsc, which runs each pod in a sandbox of its own (its Sentry, a kernel in user
/// space): crust makes the sandbox with an infra container, every container joins it, and
/// their processes are the sandbox's, so exits and signals go through the binary.
#[tokio::test]
async fn a_pod_runs_under_runsc_in_a_sandbox_of_its_own() {
    let path = tools::runsc();
    let mut e = Env::start_with(|d| {
        d.append_config(&format!("\n[runtimes.runsc]\nruntime_path = {path:?}\n"))
    })
    .await;
    let root = e.d.state.join("runtimes").join("runsc");
    // crust check names the binary, its version and that it makes a sandbox per pod.
    let text = e.d.check();
    let line = text
        .lines()
        .find(|l| l.contains(" handler ") && l.contains(&format!(": {} (", path.display())));
    let line = line.unwrap_or_else(|| panic!("no handler line for runsc: {text}"));
    assert!(
        line.contains("runsc version") && line.contains("a sandbox per pod"),
        "{line}"
    );
    // runsc says it has user namespaces, but its gofer cannot join the pod's: Status says
    // none for it, so kubelet sends it no hostUsers: false pod.
    let features = handler_features(&mut e, "runsc").await;
    assert!(!features.user_namespaces, "{features:?}");
    let pod = e.pod_under("gvisor", "runsc").await;

    // Output, under gVisor's kernel rather than the node's.
    let main = e
        .run(
            &pod,
            e.config("main", &["sh", "-c", "echo hello; dmesg; exec sleep 600"]),
        )
        .await;
    wait_logged(&e, &pod, "main", "stdout F hello").await;
    wait_log_holds(&e, &pod, "main", "gVisor").await;

    // Exec, with its output and exit codes.
    assert_eq!(e.sh(&main, "echo in; id -u").await, "in\n0\n");
    assert_eq!(e.exec(&main, &["sh", "-c", "exit 3"]).await.exit_code, 3);
    let (code, out, err) = e.crictl(&["exec", "-i", &main, "cat"], "from stdin\n");
    assert_eq!((code, out.as_str()), (0, "from stdin\n"), "{err}");
    // An exec past its timeout is killed inside the sandbox, not only its runsc-exec.
    let timed_out =
        e.c.exec_sync(pb::ExecSyncRequest {
            container_id: main.clone(),
            cmd: vec!["sleep".into(), "31".into()],
            timeout: 1,
        })
        .await;
    assert!(timed_out.is_err(), "{timed_out:?}");
    wait_sh(
        &mut e,
        &main,
        "ps -o args | grep '[s]leep 31' | wc -l",
        "0\n",
    )
    .await;

    // A second container joins the same sandbox: one sandbox process for the pod, and the
    // pod's network shared (the server answers on the sandbox's loopback).
    let web = e.run(&pod, web_server(&e)).await;
    wait_sh(
        &mut e,
        &main,
        "wget -qO- http://127.0.0.1:8080/index.html",
        "served\n",
    )
    .await;
    // Port-forward reaches the server through the sandbox's network stack.
    let page = forwarded_page(&e, &pod.0).await;
    assert!(page.ends_with("served\n"), "{page}");
    let sandboxes: Vec<String> = processes_naming(&root)
        .into_iter()
        .filter(|c| c.starts_with("runsc-sandbox"))
        .collect();
    assert_eq!(sandboxes.len(), 1, "{sandboxes:?}");

    // Statistics answer (kubelet asks every 10 s); the sandbox's memory is charged to the
    // pod, whose figures show it.
    e.c.container_stats(pb::ContainerStatsRequest {
        container_id: main.clone(),
    })
    .await
    .unwrap();
    let pod_stats =
        e.c.pod_sandbox_stats(pb::PodSandboxStatsRequest {
            pod_sandbox_id: pod.0.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .stats
        .unwrap();
    let memory = pod_stats.linux.unwrap().memory.unwrap();
    assert!(memory.working_set_bytes.unwrap().value > 0, "{memory:?}");

    // A command the image does not have: runsc finds out at the start, and says so.
    let missing = e
        .create(&pod, e.config("missing", &["no-such-command"]))
        .await
        .unwrap();
    let err =
        e.c.start_container(pb::StartContainerRequest {
            container_id: missing.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("no-such-command"), "{err:?}");
    // Ended by then, as containerd's: the answer to the start waits for the exit's record.
    let status = e.status(&missing).await;
    assert_eq!(
        (status.state, status.exit_code, status.reason.as_str()),
        (
            pb::ContainerState::ContainerExited as i32,
            128,
            "StartError"
        )
    );
    assert!(
        status.message.starts_with("failed to start: ")
            && status.message.contains("no-such-command"),
        "{status:?}"
    );

    // A container that ends: its exit code, as the sandbox tells it.
    let ends = e
        .run(&pod, e.config("ends", &["sh", "-c", "echo bye; exit 7"]))
        .await;
    assert_eq!(
        e.wait_exit(&ends, Duration::from_secs(10)).await.exit_code,
        7
    );
    wait_logged(&e, &pod, "ends", "stdout F bye").await;

    // StopContainer's SIGTERM reaches the process inside the sandbox.
    let script = "trap 'echo term; exit 5' TERM; echo ready; while true; do sleep 0.1; done";
    let trap = e.run(&pod, e.config("trap", &["sh", "-c", script])).await;
    wait_logged(&e, &pod, "trap", "stdout F ready").await;
    e.stop(&trap, 30).await;
    assert_eq!(e.status(&trap).await.exit_code, 5);
    wait_logged(&e, &pod, "trap", "stdout F term").await;

    // crust restarts; the containers keep running in the sandbox and answer as before.
    e.d.kill9();
    e.relaunch().await;
    assert_eq!(
        e.status(&main).await.state,
        pb::ContainerState::ContainerRunning as i32
    );
    assert_eq!(e.sh(&main, "echo again").await, "again\n");

    // A stop past its timeout kills (SIGKILL, which the sandbox delivers).
    e.stop(&main, 0).await;
    assert_eq!(e.status(&main).await.exit_code, 137);

    // Removing the pod ends the sandbox: no runsc state, no sandbox or gofer process.
    for id in [&main, &web, &ends, &trap, &missing] {
        e.remove(id).await;
        e.wait_reclaimed(id).await;
    }
    e.end_pod(&pod.0).await;
    // runsc's one `null-netns`, a file it keeps for all sandboxes, stays.
    let left: Vec<String> = Daemon::entries(&root)
        .into_iter()
        .filter(|e| e != "null-netns")
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(
        processes_naming(&root).is_empty(),
        "{:?}",
        processes_naming(&root)
    );
}

#[tokio::test]
async fn a_pod_runs_under_crun() {
    a_pod_runs_under("crun").await;
}

#[tokio::test]
async fn a_pod_runs_under_runc() {
    a_pod_runs_under("runc").await;
}

#[tokio::test]
async fn an_unknown_handler_is_refused_and_a_missing_binary_stops_the_start() {
    let mut e = Env::start().await;
    let mut req = run_request(pod_config("nope"));
    req.runtime_handler = "nope".into();
    let err = e.c.run_pod_sandbox(req).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("nope"), "{err:?}");

    e.d.terminate();
    e.d.append_config("\n[runtimes.gone]\nruntime_path = \"/nonexistent/gone\"\n");
    let out = Command::new(env!("CARGO_BIN_EXE_crust"))
        .args(["serve", "--config"])
        .arg(&e.d.config)
        .arg("--listen")
        .arg(&e.d.socket)
        .arg("--root")
        .arg(&e.d.root)
        .arg("--state")
        .arg(&e.d.state)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("runtimes.gone.runtime_path"), "{text}");
}

/// A pod keeps the binary its handler named when it was made: after a restart without the
/// table, its new containers still run under runc (a handler never switches runtimes under a
/// running pod), and they go as they should.
#[tokio::test]
async fn a_pod_keeps_its_binary_across_a_configuration_change() {
    let table = "\n[runtimes.runc]\nruntime_path = \"/usr/sbin/runc\"\n";
    let mut e = Env::start_with(|d| d.append_config(table)).await;
    let pod = e.pod_under("kept", "runc").await;
    let before = e.run(&pod, e.config("before", &["sleep", "600"])).await;
    e.d.kill9();
    let text = std::fs::read_to_string(&e.d.config).unwrap();
    std::fs::write(&e.d.config, text.replace(table, "")).unwrap();
    e.relaunch().await;
    let after = e.run(&pod, e.config("after", &["sleep", "600"])).await;
    for id in [&before, &after] {
        let info = e.info(id).await;
        assert_eq!(info["runtime"]["path"], "/usr/sbin/runc", "{info}");
    }
    let mut state = runtime_state(&e, "runc");
    state.sort();
    let mut want = vec![before.clone(), after.clone()];
    want.sort();
    assert_eq!(state, want);
    assert_eq!(e.sh(&after, "echo still").await, "still\n");
    e.end_pod(&pod.0).await;
    assert!(
        runtime_state(&e, "runc").is_empty(),
        "{:?}",
        runtime_state(&e, "runc")
    );
}
