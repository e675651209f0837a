//! Exec and attach through crust's stream server, end to end with client-go's executors (the
//! code kubectl and crictl run), over SPDY (v4 down to v1) and WebSocket (v5, v4, base64).
//! Containers do not exist yet, so the backend is a test double: `sh -c` on the host with
//! pipes, and for attach a fake container whose stdin lines every attacher sees.

#[path = "common/tools.rs"]
mod tools;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use crust::stream::backend::{
    AttachRequest, BackendError, BackendFuture, ExecRequest, StreamBackend, StreamIo,
};
use crust::stream::{ServerSettings, StreamServer, Streams};
use futures_util::StreamExt;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::broadcast;

#[derive(Clone, Default)]
struct HostBackend(Arc<State>);

#[derive(Default)]
struct State {
    /// The fake container's output, seen by every attacher.
    container: Mutex<Option<broadcast::Sender<Bytes>>>,
    attached: std::sync::atomic::AtomicUsize,
}

impl State {
    fn output(&self) -> broadcast::Sender<Bytes> {
        self.container
            .lock()
            .unwrap()
            .get_or_insert_with(|| broadcast::channel(64).0)
            .clone()
    }
}

fn check(id: &str, stdin: bool) -> Result<(), BackendError> {
    match id {
        "missing" => Err(BackendError::NotFound(id.into())),
        "stopped" => Err(BackendError::NotRunning(id.into())),
        "no-stdin" if stdin => Err(BackendError::Invalid(
            "container was not created with stdin".into(),
        )),
        _ => Ok(()),
    }
}

impl StreamBackend for HostBackend {
    fn validate_exec(&self, req: &ExecRequest) -> Result<(), BackendError> {
        check(&req.container_id, req.stdin)
    }

    fn validate_attach(&self, req: &AttachRequest) -> Result<(), BackendError> {
        check(&req.container_id, req.stdin)
    }

    fn exec(&self, req: ExecRequest, io: StreamIo) -> BackendFuture<i32> {
        Box::pin(run_sh(req, io))
    }

    fn attach(&self, _req: AttachRequest, io: StreamIo) -> BackendFuture<()> {
        let out = self.0.output();
        let this = self.0.clone();
        Box::pin(async move {
            let mut rx = out.subscribe();
            this.attached
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if let Some(stdin) = io.stdin {
                // The container echoes every line it reads; "exit" ends it.
                let out = out.clone();
                tokio::spawn(async move {
                    let mut lines = tokio::io::BufReader::new(stdin).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        let _ = out.send(Bytes::from(format!("{line}\n")));
                        if line == "exit" {
                            break;
                        }
                    }
                });
            }
            let mut stdout = io.stdout.expect("attach with stdout");
            while let Ok(b) = rx.recv().await {
                stdout
                    .write_all(&b)
                    .await
                    .map_err(|e| BackendError::Failed(e.to_string()))?;
                if b.as_ref() == b"exit\n" {
                    break;
                }
            }
            Ok(())
        })
    }
}

/// `sh -c` with pipes; `resize-report N` prints the first N terminal sizes instead.
async fn run_sh(req: ExecRequest, mut io: StreamIo) -> Result<i32, BackendError> {
    let fail = |e: std::io::Error| BackendError::Failed(e.to_string());
    if let Some(n) = req
        .cmd
        .first()
        .and_then(|c| c.strip_prefix("resize-report "))
    {
        let (mut resize, mut out) = (io.resize.take().unwrap(), io.stdout.take().unwrap());
        for _ in 0..n.parse::<usize>().unwrap() {
            let s = resize.recv().await.unwrap();
            out.write_all(format!("{}x{}\n", s.width, s.height).as_bytes())
                .await
                .map_err(fail)?;
        }
        return Ok(0);
    }
    let script = if req.tty {
        format!("exec 2>&1; {}", req.cmd.join(" "))
    } else {
        req.cmd.join(" ")
    };
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(if io.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(fail)?;
    if let (Some(mut from), Some(mut to)) = (io.stdin.take(), child.stdin.take()) {
        tokio::spawn(async move {
            let _ = tokio::io::copy(&mut from, &mut to).await;
        });
    }
    let copy = |from: Option<Box<dyn tokio::io::AsyncRead + Send + Unpin>>,
                to: Option<crust::stream::backend::Output>| async move {
        if let (Some(mut from), Some(mut to)) = (from, to) {
            let _ = tokio::io::copy(&mut from, &mut to).await;
            let _ = to.shutdown().await;
        }
    };
    let out = copy(
        child.stdout.take().map(|s| Box::new(s) as _),
        io.stdout.take(),
    );
    let err = copy(
        child.stderr.take().map(|s| Box::new(s) as _),
        io.stderr.take(),
    );
    let (status, (), ()) = tokio::join!(child.wait(), out, err);
    Ok(status.map_err(fail)?.code().unwrap_or(128))
}

async fn server(backend: HostBackend) -> Streams {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let settings = ServerSettings {
        address: "127.0.0.1".parse().unwrap(),
        port: 0,
        tls: None,
        idle_timeout: Duration::from_secs(60),
        max_sessions: 100,
    };
    let (server, streams) = StreamServer::bind(settings, Some(Arc::new(backend)))
        .await
        .unwrap();
    tokio::spawn(server.serve());
    streams
}

fn exec_req(cmd: &str, stdin: bool, tty: bool) -> ExecRequest {
    ExecRequest {
        container_id: "c1".into(),
        cmd: vec![cmd.into()],
        tty,
        stdin,
        stdout: true,
        stderr: !tty,
    }
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Whether `pid` has exited (gone, or a zombie not reaped yet).
fn exited(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit(") ").next().is_some_and(|r| r.starts_with('Z')))
        .unwrap_or(true)
}

/// Runs the client-go stream client on `url`.
async fn client(url: &str, args: &[&str], input: &[u8]) -> Run {
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
    let out = match tokio::time::timeout(Duration::from_secs(30), child.wait_with_output()).await {
        Ok(out) => out.unwrap(),
        Err(_) => panic!("stream client {args:?} on {url} did not finish"),
    };
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

const TRANSPORTS: &[&[&str]] = &[
    &["-transport", "spdy"],
    &["-transport", "websocket"],
    &["-transport", "websocket", "-protocols", "v4.channel.k8s.io"],
];

#[tokio::test(flavor = "multi_thread")]
async fn exit_codes_stdout_and_stderr_reach_the_client() {
    let streams = server(HostBackend::default()).await;
    for args in TRANSPORTS {
        for (cmd, code) in [
            ("echo out; echo err >&2; exit 3", 3),
            ("echo out; echo err >&2", 0),
        ] {
            let url = streams.exec(exec_req(cmd, false, false)).unwrap();
            let r = client(&url, args, b"").await;
            assert_eq!(r.code, code, "{args:?} {cmd}: {}", r.stderr);
            assert_eq!(r.stdout, "out\n", "{args:?}");
            assert!(r.stderr.starts_with("err\n"), "{args:?}: {}", r.stderr);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn older_spdy_protocols_still_run_commands() {
    let streams = server(HostBackend::default()).await;
    for proto in ["v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io"] {
        let url = streams.exec(exec_req("echo old", false, false)).unwrap();
        let r = client(&url, &["-protocols", proto], b"").await;
        assert_eq!(
            (r.code, r.stdout.as_str()),
            (0, "old\n"),
            "{proto}: {}",
            r.stderr
        );
        // Before v4 a failure is only a message: the client sees an error, not the code
        // (v1 clients stop reading at the end of output, so they may miss it).
        let url = streams.exec(exec_req("exit 4", false, false)).unwrap();
        let r = client(&url, &["-protocols", proto], b"").await;
        if proto != "channel.k8s.io" {
            assert_ne!(r.code, 0, "{proto}");
            assert!(
                r.stderr.contains("non-zero exit code"),
                "{proto}: {}",
                r.stderr
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn stdin_reaches_the_command_and_its_end_is_eof() {
    let streams = server(HostBackend::default()).await;
    let input: Vec<u8> = (0..300_000).map(|i| b'a' + (i % 26) as u8).collect();
    for args in TRANSPORTS {
        // v4 over WebSocket cannot say "end of stdin" (v5's close signal can): read a known
        // length there.
        let cmd = match args.len() {
            2 => "wc -c; exit 7",
            _ => "head -c 300000 | wc -c; exit 7",
        };
        let url = streams.exec(exec_req(cmd, true, false)).unwrap();
        let mut a = args.to_vec();
        a.push("-stdin");
        let r = client(&url, &a, &input).await;
        assert_eq!(r.code, 7, "{args:?}: {}", r.stderr);
        assert_eq!(r.stdout.trim(), "300000", "{args:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tty_output_and_resize_events() {
    let streams = server(HostBackend::default()).await;
    for args in TRANSPORTS {
        let url = streams
            .exec(exec_req("echo on a tty >&2", false, true))
            .unwrap();
        let mut a = args.to_vec();
        a.push("-tty");
        let r = client(&url, &a, b"").await;
        assert_eq!(
            (r.code, r.stdout.as_str()),
            (0, "on a tty\n"),
            "{args:?}: {}",
            r.stderr
        );
        let url = streams
            .exec(exec_req("resize-report 2", false, true))
            .unwrap();
        a.extend(["-resize", "80x24,120x40"]);
        let r = client(&url, &a, b"").await;
        assert_eq!(r.stdout, "80x24\n120x40\n", "{args:?}: {}", r.stderr);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn several_attachers_see_the_same_output() {
    let backend = HostBackend::default();
    let streams = server(backend.clone()).await;
    let attach = |stdin| AttachRequest {
        container_id: "c1".into(),
        tty: false,
        stdin,
        stdout: true,
        stderr: false,
    };
    let watcher_url = streams.attach(attach(false)).unwrap();
    let watcher =
        tokio::spawn(async move { client(&watcher_url, &["-transport", "websocket"], b"").await });
    while backend.0.attached.load(std::sync::atomic::Ordering::SeqCst) < 1 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let url = streams.attach(attach(true)).unwrap();
    let typist = client(&url, &["-stdin"], b"hello\nexit\n").await;
    let watcher = watcher.await.unwrap();
    for r in [&typist, &watcher] {
        assert_eq!(
            (r.code, r.stdout.as_str()),
            (0, "hello\nexit\n"),
            "{}",
            r.stderr
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn validation_goes_through_the_backend_and_tokens_are_single_use() {
    use crust::stream::StreamError;
    let streams = server(HostBackend::default()).await;
    let mut req = exec_req("true", false, false);
    req.container_id = "missing".into();
    assert!(matches!(
        streams.exec(req.clone()),
        Err(StreamError::Backend(BackendError::NotFound(_)))
    ));
    req.container_id = "stopped".into();
    assert!(matches!(
        streams.exec(req),
        Err(StreamError::Backend(BackendError::NotRunning(_)))
    ));
    let mut tty_stderr = exec_req("true", false, true);
    tty_stderr.stderr = true;
    assert!(matches!(
        streams.exec(tty_stderr),
        Err(StreamError::Invalid(_))
    ));
    let url = streams.exec(exec_req("echo once", false, false)).unwrap();
    assert_eq!(client(&url, &[], b"").await.stdout, "once\n");
    let again = client(&url, &[], b"").await;
    assert_eq!(again.code, 125);
    assert!(
        again.stderr.contains("used or expired stream token"),
        "{}",
        again.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_goes_away_takes_its_process_with_it() {
    let streams = server(HostBackend::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let cmd = format!("echo $$ > {}; exec sleep 1000", pidfile.display());
    for args in TRANSPORTS {
        let _ = std::fs::remove_file(&pidfile);
        let url = streams.exec(exec_req(&cmd, false, false)).unwrap();
        let mut child = tokio::process::Command::new(tools::stream_client())
            .arg("-url")
            .arg(&url)
            .args(*args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pid = loop {
            if let Ok(p) = std::fs::read_to_string(&pidfile) {
                if let Ok(p) = p.trim().parse::<i32>() {
                    break p;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        child.kill().await.unwrap();
        let gone = async {
            while !exited(pid) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), gone)
            .await
            .unwrap_or_else(|_| panic!("{args:?}: exec'd process {pid} outlived its client"));
    }
}

/// The base64 and plain v4 WebSocket protocols, with a bare WebSocket client.
#[tokio::test(flavor = "multi_thread")]
async fn websocket_base64_and_v4_framing() {
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let streams = server(HostBackend::default()).await;
    for proto in [
        "base64.channel.k8s.io",
        "v4.base64.channel.k8s.io",
        "v4.channel.k8s.io",
    ] {
        let url = streams
            .exec(exec_req("printf hi; exit 2", false, false))
            .unwrap();
        let mut req = url
            .replace("http://", "ws://")
            .into_client_request()
            .unwrap();
        req.headers_mut()
            .insert("sec-websocket-protocol", proto.parse().unwrap());
        let tcp = tokio::net::TcpStream::connect(req.uri().authority().unwrap().as_str())
            .await
            .unwrap();
        let (mut ws, resp) = tokio_tungstenite::client_async(req, tcp).await.unwrap();
        assert_eq!(resp.headers()["sec-websocket-protocol"], proto);
        let mut got: Vec<(u8, Vec<u8>)> = Vec::new();
        while let Some(Ok(m)) = ws.next().await {
            let (ch, data) = match m {
                Message::Text(t) => {
                    use base64::Engine;
                    let b = t.as_bytes();
                    let data = base64::engine::general_purpose::STANDARD
                        .decode(&b[1..])
                        .unwrap();
                    (b[0] - b'0', data)
                }
                Message::Binary(b) => (b[0], b[1..].to_vec()),
                Message::Close(_) => break,
                _ => continue,
            };
            got.push((ch, data));
        }
        let _ = ws.close(None).await;
        assert_eq!(got[0], (1, vec![]), "{proto}: ready signal on stdout first");
        let out: Vec<u8> = got
            .iter()
            .filter(|(c, _)| *c == 1)
            .flat_map(|(_, d)| d.clone())
            .collect();
        assert_eq!(out, b"hi", "{proto}");
        let status: Vec<u8> = got
            .iter()
            .filter(|(c, _)| *c == 3)
            .flat_map(|(_, d)| d.clone())
            .collect();
        let status = String::from_utf8(status).unwrap();
        if proto.starts_with("v4") {
            let v: serde_json::Value = serde_json::from_str(&status).unwrap();
            assert_eq!(v["details"]["causes"][0]["message"], "2", "{proto}");
        } else {
            assert!(status.contains("exit status 2"), "{proto}: {status}");
        }
    }
}

/// A stream idle past the timeout is closed, and its process with it.
#[tokio::test(flavor = "multi_thread")]
async fn idle_streams_are_closed() {
    let settings = ServerSettings {
        address: "127.0.0.1".parse().unwrap(),
        port: 0,
        tls: None,
        idle_timeout: Duration::from_millis(700),
        max_sessions: 2,
    };
    let backend = HostBackend::default();
    let (server, streams) = StreamServer::bind(settings, Some(Arc::new(backend)))
        .await
        .unwrap();
    tokio::spawn(server.serve());
    for args in [&["-transport", "spdy"][..], &["-transport", "websocket"]] {
        let url = streams.exec(exec_req("sleep 30", false, false)).unwrap();
        let started = std::time::Instant::now();
        // The session ends (what the client makes of a closed connection is its own affair).
        let r = client(&url, args, b"").await;
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{args:?}: {}",
            r.stderr
        );
    }
}

/// With `tls`, the server speaks HTTPS: its URLs say so, and client-go's executors connect
/// over both transports trusting the server's CA.
#[tokio::test(flavor = "multi_thread")]
async fn tls_serves_https() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let out = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-days", "1", "-subj", "/CN=crust-stream"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl makes the test certificate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let settings = ServerSettings {
        address: "127.0.0.1".parse().unwrap(),
        port: 0,
        tls: Some((cert.clone(), key)),
        idle_timeout: Duration::from_secs(60),
        max_sessions: 10,
    };
    let (server, streams) = StreamServer::bind(settings, Some(Arc::new(HostBackend::default())))
        .await
        .unwrap();
    tokio::spawn(server.serve());
    for transport in ["spdy", "websocket"] {
        let url = streams
            .exec(exec_req("echo secret; exit 5", false, false))
            .unwrap();
        assert!(url.starts_with("https://127.0.0.1:"), "{url}");
        let args = ["-transport", transport, "-ca", cert.to_str().unwrap()];
        let r = client(&url, &args, b"").await;
        assert_eq!(
            (r.code, r.stdout.as_str()),
            (5, "secret\n"),
            "{transport}: {}",
            r.stderr
        );
        // Without the CA the client refuses the server.
        let url = streams.exec(exec_req("true", false, false)).unwrap();
        let r = client(&url, &["-transport", transport], b"").await;
        assert_eq!(r.code, 125, "{transport}");
        assert!(
            r.stderr.contains("certificate"),
            "{transport}: {}",
            r.stderr
        );
    }
}

/// A hundred execs at once over WebSocket (v4, binary): each gets its own output and status,
/// and none leaves a descriptor or a process behind.
#[tokio::test(flavor = "multi_thread")]
async fn a_hundred_concurrent_execs() {
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let streams = server(HostBackend::default()).await;
    // The descriptors are this test process's, which other tests share: on a cold cache one
    // of them is building the Go client (its pipes open for minutes). Waiting for that build
    // (tools builds one at a time) keeps them out of the count.
    tools::stream_client();
    let fds = || std::fs::read_dir("/proc/self/fd").unwrap().count();
    let before = fds();
    let mut runs = Vec::new();
    for i in 0..100 {
        let url = streams
            .exec(exec_req(&format!("echo {i}"), false, false))
            .unwrap();
        runs.push(tokio::spawn(async move {
            let mut req = url
                .replace("http://", "ws://")
                .into_client_request()
                .unwrap();
            req.headers_mut().insert(
                "sec-websocket-protocol",
                "v4.channel.k8s.io".parse().unwrap(),
            );
            let tcp = tokio::net::TcpStream::connect(req.uri().authority().unwrap().as_str())
                .await
                .unwrap();
            let (mut ws, _) = tokio_tungstenite::client_async(req, tcp).await.unwrap();
            let (mut out, mut status) = (Vec::new(), Vec::new());
            while let Some(Ok(m)) = ws.next().await {
                match m {
                    Message::Binary(b) if b[0] == 1 => out.extend_from_slice(&b[1..]),
                    Message::Binary(b) if b[0] == 3 => status.extend_from_slice(&b[1..]),
                    Message::Close(_) => break,
                    _ => {}
                }
            }
            assert_eq!(out, format!("{i}\n").as_bytes());
            assert_eq!(status, br#"{"status":"Success"}"#);
        }));
    }
    for r in runs {
        r.await.unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while fds() > before {
        assert!(
            std::time::Instant::now() < deadline,
            "{} fds, {before} before",
            fds()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
