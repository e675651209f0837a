//! Exec and Attach into real containers through the streaming server, with the real crictl
//! over both transports (SPDY and WebSocket): output, stdin, exit codes, a tty through a
//! pseudo-terminal, several attachers, stdin_once, and an exec that dies with its client.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::workload::Env;
use common::*;
use crust::cri::pb;

#[tokio::test]
async fn exec_over_both_transports_with_output_stdin_and_exit_codes() {
    let mut e = Env::start().await;
    let pod = e.pod("exec").await;
    let id = e.run(&pod, e.config("main", &["sleep", "600"])).await;
    for transport in ["spdy", "websocket"] {
        let (code, out, err) = e.crictl(
            &[
                "exec",
                "--transport",
                transport,
                &id,
                "sh",
                "-c",
                "echo out; echo err >&2; exit 3",
            ],
            "",
        );
        assert_eq!(out, "out\n", "{transport}: {err}");
        assert!(err.contains("err\n"), "{transport}: {err}");
        assert!(
            err.contains("exit code 3"),
            "{transport}: the exit code reaches the client: {err}"
        );
        assert_ne!(code, 0);
        let (code, out, err) = e.crictl(
            &["exec", "-i", "--transport", transport, &id, "cat"],
            "from stdin\n",
        );
        assert_eq!(
            (code, out.as_str()),
            (0, "from stdin\n"),
            "{transport}: {err}"
        );
    }
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
}

#[tokio::test]
async fn exec_with_a_tty_through_a_pseudo_terminal() {
    let mut e = Env::start().await;
    let pod = e.pod("tty").await;
    let id = e.run(&pod, e.config("main", &["sleep", "600"])).await;
    let text = e.crictl_tty_exec(&id, "tty; echo in-tty");
    assert!(text.contains("/dev/pts/"), "a terminal inside: {text}");
    assert!(text.contains("in-tty"), "{text}");
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
}

#[tokio::test]
async fn an_exec_dies_with_its_client() {
    let mut e = Env::start().await;
    let pod = e.pod("hangup").await;
    let id = e.run(&pod, e.config("main", &["sleep", "600"])).await;
    let mut client = e
        .crictl_cmd(&["exec", &id, "sleep", "777"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let probe = "ps -o args | grep -c '^sleep 777' || true";
    let deadline = Instant::now() + Duration::from_secs(10);
    while e.sh(&id, probe).await.trim() != "1" {
        assert!(Instant::now() < deadline, "the exec never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    client.kill().unwrap();
    client.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while e.sh(&id, probe).await.trim() != "0" {
        assert!(Instant::now() < deadline, "the exec outlived its client");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
}

#[tokio::test]
async fn attachers_share_the_output_and_stdin_once_ends_the_container() {
    let mut e = Env::start().await;
    let pod = e.pod("attach").await;
    let ticker = e
        .run(
            &pod,
            e.config(
                "ticker",
                &["sh", "-c", "while true; do echo tick; sleep 0.1; done"],
            ),
        )
        .await;
    // Two attachers at once, one per transport, each sees the container's output.
    let attach = |transport: &str| {
        e.crictl_cmd(&["attach", "--transport", transport, &ticker])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let (a, b) = (attach("spdy"), attach("websocket"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    e.stop(&ticker, 0).await;
    for child in [a, b] {
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.matches("tick").count() >= 3, "{text}");
    }

    // A shell reading its stdin, which closes when the first attacher's stdin ends.
    let mut config = e.config("shell", &["sh"]);
    config.stdin = true;
    config.stdin_once = true;
    let shell = e.run(&pod, config).await;
    let (code, out, err) = e.crictl(&["attach", "-i", &shell], "echo hello from attach\n");
    assert_eq!((code, out.as_str()), (0, "hello from attach\n"), "{err}");
    let s = e.wait_exit(&shell, Duration::from_secs(10)).await;
    assert_eq!(s.exit_code, 0, "the shell saw its stdin end");
    // Attach needs a running container and, for stdin, one created with it.
    let err =
        e.c.attach(pb::AttachRequest {
            container_id: shell.clone(),
            stdin: true,
            stdout: true,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
}
