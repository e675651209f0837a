//! Months of a node's traffic, compressed: probes and `kubectl exec` by the thousand, attachers
//! that come and go, a container writing fast while its log is rotated under it. Nothing may
//! be lost or leaked: no descriptor, thread, memory or file of the daemon or of the pod's
//! monitor, no log line. `make test` runs each at a size that shows a leak of one per call;
//! `make soak` runs them at thousands (CRUST_SOAK_EXECS, CRUST_SOAK_STREAMS,
//! CRUST_SOAK_ROTATIONS).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::workload::Env;
use common::*;
use crust::cri::pb;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

fn count(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What a process holds: descriptors, threads, resident memory (KiB).
#[derive(Debug, Clone, Copy)]
struct Held {
    fds: usize,
    threads: usize,
    rss_kib: u64,
}

fn held(pid: i32) -> Held {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
    };
    Held {
        fds: std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .count(),
        threads: field("Threads:") as usize,
        rss_kib: field("VmRSS:"),
    }
}

/// Every file under `dir` (the daemon's state and records), for a leak of one per call.
fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            } else {
                out.push(path.display().to_string());
            }
        }
    }
    out.sort();
    out
}

fn monitor_pid(e: &Env, pod: &str) -> i32 {
    let text = std::fs::read(e.d.sandbox_dir(pod).join("monitor.pid")).unwrap();
    let identity: serde_json::Value = serde_json::from_slice(&text).unwrap();
    identity["pid"].as_i64().unwrap() as i32
}

/// Waits until `pid` holds no more descriptors and threads than `base` (what a call left is
/// closed after its answer: a stream's connection, a blocking thread's idle time), then checks
/// that its memory grew by at most a tenth and `slack_kib`.
async fn settles_to(what: &str, pid: i32, base: Held, slack_kib: u64) -> Held {
    let mut now = held(pid);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while now.fds > base.fds || now.threads > base.threads {
        assert!(
            std::time::Instant::now() < deadline,
            "{what} holds more than after the warm-up: {now:?}, then {base:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        now = held(pid);
    }
    assert!(
        now.rss_kib <= base.rss_kib + base.rss_kib / 10 + slack_kib,
        "{what}'s memory grew: {now:?}, after the warm-up {base:?}"
    );
    now
}

/// A streamed call through crust's stream server with client-go's executor.
async fn stream(url: &str, args: &[&str], input: &[u8]) -> (i32, String, String) {
    let mut child = tokio::process::Command::new(tools::stream_client())
        .arg("-url")
        .arg(url)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input).await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("the stream ends")
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Attaches to `id` (a shell echoing its stdin), sends a line, reads it back, and goes away
/// as a client that closes its connection does (kubectl attach interrupted).
async fn attach_once(e: &mut Env, id: &str, n: usize) {
    let url =
        e.c.attach(pb::AttachRequest {
            container_id: id.into(),
            stdin: true,
            stdout: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .url;
    let mut child = tokio::process::Command::new(tools::stream_client())
        .args(["-url", &url, "-stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let line = format!("attach {n}\n");
    child
        .stdin
        .as_mut()
        .unwrap()
        .write_all(line.as_bytes())
        .await
        .unwrap();
    let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap());
    let mut got = String::new();
    // Output from an earlier attacher's line may still be on its way: read up to this one's.
    while got != line {
        got.clear();
        let read = tokio::time::timeout(Duration::from_secs(30), out.read_line(&mut got))
            .await
            .expect("the attached shell answers");
        assert!(
            read.unwrap() > 0,
            "attach {n} ended before its line came back"
        );
    }
    child.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn thousands_of_execs_streams_and_attaches_leak_nothing() {
    let (execs, streams) = (
        count("CRUST_SOAK_EXECS", 600),
        count("CRUST_SOAK_STREAMS", 60),
    );
    let mut e = Env::start().await;
    let pod = e.pod("probed").await;
    let app = e.run(&pod, e.config("app", &["sleep", "3600"])).await;
    let mut config = e.config("shell", &["sh", "-c", "while read l; do echo \"$l\"; done"]);
    config.stdin = true;
    let shell = e.run(&pod, config).await;
    let daemon = e.d.child.as_ref().unwrap().id() as i32;
    let monitor = monitor_pid(&e, &pod.0);

    // A round: ExecSync probes, streamed execs over both transports, attachers.
    async fn round(e: &mut Env, app: &str, shell: &str, execs: usize, streams: usize) {
        for n in 0..execs {
            let out = e.exec(app, &["echo", &n.to_string()]).await;
            assert_eq!(
                (out.exit_code, out.stdout),
                (0, format!("{n}\n").into_bytes())
            );
        }
        for n in 0..streams {
            // Every third one with a terminal (a console socket of its own).
            let tty = n % 3 == 2;
            let url =
                e.c.exec(pb::ExecRequest {
                    container_id: app.into(),
                    cmd: vec!["sh".into(), "-c".into(), format!("echo {n}; exit 3")],
                    stdout: true,
                    tty,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner()
                .url;
            let transport = if n % 2 == 0 { "spdy" } else { "websocket" };
            let mut args = vec!["-transport", transport];
            let mut expected = format!("{n}\n");
            if tty {
                args.push("-tty");
                expected = format!("{n}\r\n");
            }
            let (code, out, err) = stream(&url, &args, b"").await;
            assert_eq!((code, out), (3, expected), "{url}: {err}");
            attach_once(e, shell, n).await;
        }
    }
    // The warm-up: the first calls size the pools and buffers that later calls reuse.
    round(&mut e, &app, &shell, execs / 10, streams / 10).await;
    let base = (
        held(daemon),
        held(monitor),
        files(&e.d.state),
        files(&e.d.root),
    );
    let began = std::time::Instant::now();
    round(&mut e, &app, &shell, execs, streams).await;
    let took = began.elapsed();

    let d = settles_to("the daemon", daemon, base.0, 2048).await;
    let m = settles_to("the pod's monitor", monitor, base.1, 512).await;
    assert_eq!(
        files(&e.d.state),
        base.2,
        "the state directory kept a call's file"
    );
    assert_eq!(files(&e.d.root), base.3, "the root kept a call's file");
    println!(
        "{execs} ExecSync, {streams} streamed execs and {streams} attaches in {took:?}: daemon {:?} -> {d:?}, monitor {:?} -> {m:?}",
        base.0, base.1
    );
    for id in [&app, &shell] {
        assert_eq!(
            e.status(id).await.state,
            pb::ContainerState::ContainerRunning as i32
        );
    }
    e.end_pod(&pod.0).await;
}

/// Sequence numbers in a container's log, in order, across every file it was rotated into.
fn logged_numbers(files: &[std::path::PathBuf]) -> (Vec<u64>, usize) {
    let (mut numbers, mut records) = (Vec::new(), 0);
    let mut partial = String::new();
    for f in files {
        let text = std::fs::read_to_string(f).unwrap();
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "{} ends in a torn record",
            f.display()
        );
        for record in text.lines() {
            records += 1;
            // <RFC 3339 time> <stream> <P|F> <bytes>
            let mut parts = record.splitn(4, ' ');
            let (time, stream, tag) = (parts.next(), parts.next(), parts.next());
            let body = parts.next().unwrap_or("");
            assert!(
                time.is_some_and(|t| t.len() >= 20 && t.contains('T'))
                    && stream == Some("stdout")
                    && matches!(tag, Some("P" | "F")),
                "a torn record in {}: {record:?}",
                f.display()
            );
            partial.push_str(body);
            if tag == Some("F") {
                let line = std::mem::take(&mut partial);
                let (n, pad) = line
                    .split_once(' ')
                    .unwrap_or_else(|| panic!("a torn line: {line:?}"));
                assert_eq!(pad.len(), 200, "a torn line: {line:?}");
                numbers.push(
                    n.parse()
                        .unwrap_or_else(|_| panic!("a torn line: {line:?}")),
                );
            }
        }
    }
    (numbers, records)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_container_writing_fast_while_its_log_rotates_loses_and_repeats_no_line() {
    let rotations = count("CRUST_SOAK_ROTATIONS", 30);
    let mut e = Env::start().await;
    let pod = e.pod("chatty").await;
    // Numbered lines of 200 bytes after the number, as fast as the shell writes them (some MB
    // a second), until /stop exists.
    let script = "pad=$(printf '%0200d' 0); i=0; \
                  while [ ! -e /stop ]; do echo \"$i $pad\"; i=$((i+1)); done; echo \"$i $pad\"";
    let id = e.run(&pod, e.config("writer", &["sh", "-c", script])).await;
    let log = e.log_path(&pod, "writer");
    let mut rotated = Vec::new();
    let began = std::time::Instant::now();
    for n in 0..rotations {
        // As kubelet's rotation does it: the file renamed, then ReopenContainerLog.
        eventually("the writer logs", Duration::from_secs(10), || {
            std::fs::metadata(&log).is_ok_and(|m| m.len() > 64 << 10)
        })
        .await;
        let to = log.with_extension(format!("log.{n}"));
        std::fs::rename(&log, &to).unwrap();
        rotated.push(to);
        e.c.reopen_container_log(pb::ReopenContainerLogRequest {
            container_id: id.clone(),
        })
        .await
        .unwrap();
    }
    e.sh(&id, "touch /stop").await;
    let s = e.wait_exit(&id, Duration::from_secs(30)).await;
    assert_eq!(s.exit_code, 0);
    let took = began.elapsed();
    rotated.push(log);
    let bytes: u64 = rotated
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .sum();
    let (numbers, records) = logged_numbers(&rotated);
    let mut seen = BTreeMap::new();
    for n in &numbers {
        *seen.entry(*n).or_insert(0) += 1;
    }
    let last = *numbers.last().expect("lines were logged");
    assert_eq!(
        numbers,
        (0..=last).collect::<Vec<_>>(),
        "every line once and in order ({} lines seen twice, {} missing)",
        seen.values().filter(|c| **c > 1).count(),
        (last as usize + 1).saturating_sub(seen.len())
    );
    println!(
        "{} lines ({records} records, {} MB) through {rotations} rotations in {took:?}: {:.1} MB/s",
        last + 1,
        bytes >> 20,
        bytes as f64 / took.as_secs_f64() / 1e6
    );
    e.end_pod(&pod.0).await;
}
