//! Port forwarding through the real daemon's stream server into a pod's network namespace:
//! crictl 1.37 over SPDY and over WebSocket, crust's own SPDY client for what crictl cannot
//! show (a refused port beside a working one, many streams), and hostile input.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::forward::{crictl_forward, echo_in_netns, round_trip, serve_in_netns};
use common::*;
use crust::cri::pb;
use crust::stream::spdy::headers::HeaderBlock;
use crust::stream::spdy::{self, Role};

async fn pod_with_echo(d: &Daemon, name: &str) -> (Client, String, u16) {
    let mut c = d.client().await;
    let id = run_pod(&mut c, pod_config(name)).await;
    let (_, info) = status(&mut c, &id).await;
    let pin = PathBuf::from(info["namespaces"]["net"].as_str().unwrap());
    (c, id.clone(), echo_in_netns(pin))
}

async fn port_forward_url(c: &mut Client, id: &str) -> String {
    c.port_forward(pb::PortForwardRequest {
        pod_sandbox_id: id.into(),
        port: vec![],
    })
    .await
    .unwrap()
    .into_inner()
    .url
}

fn daemon_fds(d: &Daemon) -> usize {
    let pid = d.child.as_ref().unwrap().id();
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Waits until the daemon holds no more descriptors than `baseline` (sockets close a little
/// after their connection ends).
fn assert_fds_back(d: &Daemon, baseline: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while daemon_fds(d) > baseline {
        assert!(
            Instant::now() < deadline,
            "daemon holds {} fds, {baseline} before",
            daemon_fds(d)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn crictl_forwards_over_spdy_and_websocket() {
    let d = Daemon::start();
    let (_c, id, port) = pod_with_echo(&d, "pf-crictl").await;
    let baseline = daemon_fds(&d);
    for transport in ["spdy", "websocket"] {
        let local = free_port();
        let _fwd = crictl_forward(&d, &id, transport, local, port);
        tokio::task::spawn_blocking(move || {
            round_trip(local, b"hello through the pod's loopback");
            // 4 MiB both ways, and ten connections at once on the one stream connection.
            let big: Vec<u8> = (0..4 << 20).map(|i| (i * 7 % 251) as u8).collect();
            round_trip(local, &big);
            let many: Vec<_> = (0..10)
                .map(|i| std::thread::spawn(move || round_trip(local, &[i as u8; 100_000])))
                .collect();
            many.into_iter().for_each(|t| t.join().unwrap());
        })
        .await
        .unwrap();
    }
    assert_fds_back(&d, baseline);
}

/// A SPDY client connection to a stream URL, upgraded by hand.
async fn spdy_connect(url: &str, protocol: &str) -> (spdy::Connection, spdy::Incoming) {
    let (status, tcp) = upgrade(url, protocol, "SPDY/3.1").await;
    assert_eq!(status, 101);
    let (conn, incoming, _) = spdy::conn::start(tcp, Role::Client, spdy::Settings::default());
    (conn, incoming)
}

/// Sends an upgrade request for `url`; answers the status code and the connection.
async fn upgrade(url: &str, protocol: &str, to: &str) -> (u16, tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let mut tcp = tokio::net::TcpStream::connect(host).await.unwrap();
    let req = format!(
        "POST /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: {to}\r\n\
         X-Stream-Protocol-Version: {protocol}\r\nContent-Length: 0\r\n\r\n"
    );
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        if tcp.read(&mut b).await.unwrap() == 0 {
            break;
        }
        head.push(b[0]);
    }
    let text = String::from_utf8_lossy(&head);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, tcp)
}

fn pf_headers(kind: &str, port: u16, request: u32) -> HeaderBlock {
    let mut h = HeaderBlock::new();
    h.insert("streamType", kind);
    h.insert("port", port.to_string());
    h.insert("requestID", request.to_string());
    h
}

/// Reads a stream to its end.
async fn read_all(rx: &mut spdy::RecvHalf) -> Vec<u8> {
    let mut all = Vec::new();
    while let Ok(Some(b)) = rx.recv().await {
        all.extend_from_slice(&b);
    }
    all
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_port_fails_only_its_own_request() {
    let d = Daemon::start();
    let (mut c, id, port) = pod_with_echo(&d, "pf-refused").await;
    let url = port_forward_url(&mut c, &id).await;
    let (conn, _incoming) = spdy_connect(&url, "portforward.k8s.io").await;
    // Request 0: a port nothing listens on.
    let refused = free_port();
    let err0 = conn.open(pf_headers("error", refused, 0)).await.unwrap();
    let data0 = conn.open(pf_headers("data", refused, 0)).await.unwrap();
    let (mut err0_rx, _e) = err0.into_split();
    let msg = String::from_utf8(read_all(&mut err0_rx).await).unwrap();
    assert!(msg.contains("refused"), "{msg}");
    drop(data0);
    // Request 1, on the same connection, still works; so do 50 more at once.
    let mut pairs = Vec::new();
    for request in 1..=50 {
        let e = conn.open(pf_headers("error", port, request)).await.unwrap();
        let data = conn.open(pf_headers("data", port, request)).await.unwrap();
        pairs.push((e, data));
    }
    let mut checks = Vec::new();
    for (request, (e, data)) in pairs.into_iter().enumerate() {
        checks.push(tokio::spawn(async move {
            let (mut rx, tx) = data.into_split();
            let payload = format!("request {request}").repeat(1000);
            tx.send(payload.as_bytes()).await.unwrap();
            tx.close().await.unwrap();
            assert_eq!(read_all(&mut rx).await, payload.as_bytes());
            let (mut erx, _etx) = e.into_split();
            assert!(read_all(&mut erx).await.is_empty());
        }));
    }
    for c in checks {
        c.await.unwrap();
    }
    conn.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn tokens_are_single_use_and_bad_input_changes_nothing() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let d = Daemon::start();
    let (mut c, id, port) = pod_with_echo(&d, "pf-hostile").await;
    let baseline = daemon_fds(&d);

    // A used, an unknown and a misrouted token open nothing.
    let url = port_forward_url(&mut c, &id).await;
    let (conn, _) = spdy_connect(&url, "portforward.k8s.io").await;
    assert_eq!(upgrade(&url, "portforward.k8s.io", "SPDY/3.1").await.0, 404);
    let base = url.rsplit_once("/portforward/").unwrap().0;
    let unknown = format!("{base}/portforward/AAAAAAAAAAAAAAAAAAAAAAAA");
    assert_eq!(
        upgrade(&unknown, "portforward.k8s.io", "SPDY/3.1").await.0,
        404
    );
    let url2 = port_forward_url(&mut c, &id).await;
    let misrouted = url2.replace("/portforward/", "/exec/");
    assert_eq!(
        upgrade(&misrouted, "v4.channel.k8s.io", "SPDY/3.1").await.0,
        404
    );
    assert_eq!(
        upgrade(&url2, "portforward.k8s.io", "SPDY/3.1").await.0,
        404
    );
    // An unknown protocol is refused (and spends the token).
    let url3 = port_forward_url(&mut c, &id).await;
    assert_eq!(upgrade(&url3, "v9.bogus", "SPDY/3.1").await.0, 403);

    // A client that disconnects in the middle of a transfer.
    let e = conn.open(pf_headers("error", port, 0)).await.unwrap();
    let data = conn.open(pf_headers("data", port, 0)).await.unwrap();
    data.send.send(&vec![1u8; 300_000]).await.unwrap();
    drop((e, data));
    conn.close().await;

    // Garbage after the upgrade, and a frame far over the limit: the server hangs up.
    for junk in [
        b"GET / HTTP/1.1\r\n\r\nthis is not SPDY at all".to_vec(),
        vec![0, 0, 0, 1, 0, 0xff, 0xff, 0xff],
        vec![0x80, 3, 0, 1, 0, 0, 0, 10, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0],
        vec![0x80, 2, 0, 6, 0, 0, 0, 4, 1, 2, 3, 4],
    ] {
        let url = port_forward_url(&mut c, &id).await;
        let (status, mut tcp) = upgrade(&url, "portforward.k8s.io", "SPDY/3.1").await;
        assert_eq!(status, 101);
        tcp.write_all(&junk).await.unwrap();
        let mut sink = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut sink));
        assert!(
            closed.await.is_ok(),
            "server kept a connection after {junk:?}"
        );
        // The server's opening SETTINGS (20 bytes) and WINDOW_UPDATE (16), then at most a
        // GOAWAY (16): nothing else answers garbage.
        assert!(sink.len() <= 20 + 16 + 16, "{sink:?}");
    }
    // Half-finished upgrades from clients that then vanish.
    for _ in 0..20 {
        let url = port_forward_url(&mut c, &id).await;
        let (_, tcp) = upgrade(&url, "portforward.k8s.io", "SPDY/3.1").await;
        drop(tcp);
    }

    // The daemon still serves, forwards, and holds no more descriptors than before.
    let url = port_forward_url(&mut c, &id).await;
    let (conn, _) = spdy_connect(&url, "portforward.k8s.io").await;
    let _e = conn.open(pf_headers("error", port, 0)).await.unwrap();
    let data = conn.open(pf_headers("data", port, 0)).await.unwrap();
    let (mut rx, tx) = data.into_split();
    tx.send(b"still here").await.unwrap();
    tx.close().await.unwrap();
    assert_eq!(read_all(&mut rx).await, b"still here");
    drop((rx, tx));
    conn.close().await;
    c.version(pb::VersionRequest::default()).await.unwrap();
    assert_fds_back(&d, baseline);
}

/// A host-network pod's ports are the host's loopback, as with kubelet.
#[tokio::test(flavor = "multi_thread")]
async fn host_network_pods_forward_to_the_hosts_loopback() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let mut config = pod_config("pf-hostnet");
    with_namespaces(
        &mut config,
        pb::NamespaceMode::Node,
        pb::NamespaceMode::Pod,
        pb::NamespaceMode::Pod,
    );
    let id = run_pod(&mut c, config).await;
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let (mut conn, _) = l.accept().unwrap();
        conn.write_all(b"from the host").unwrap();
    });
    let url = port_forward_url(&mut c, &id).await;
    let (conn, _) = spdy_connect(&url, "portforward.k8s.io").await;
    let _e = conn.open(pf_headers("error", port, 0)).await.unwrap();
    let data = conn.open(pf_headers("data", port, 0)).await.unwrap();
    let (mut rx, _tx) = data.into_split();
    assert_eq!(read_all(&mut rx).await, b"from the host");
    conn.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn port_forward_needs_a_ready_pod() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let err = c
        .port_forward(pb::PortForwardRequest {
            pod_sandbox_id: "nonexistent".into(),
            port: vec![],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "{err}");
    let err = c
        .port_forward(pb::PortForwardRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    let id = run_pod(&mut c, pod_config("pf-stopped")).await;
    stop_pod(&mut c, &id).await;
    let err = c
        .port_forward(pb::PortForwardRequest {
            pod_sandbox_id: id.clone(),
            port: vec![],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err}");
    // Exec of a container that does not exist names it.
    let err = c
        .exec(pb::ExecRequest {
            container_id: "c".into(),
            cmd: vec!["true".into()],
            stdout: true,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "{err}");
    assert!(err.message().contains("\"c\""), "{err}");
}

/// A discard server inside the namespace pinned at `pin`: reads each connection to its end,
/// then answers the byte count (8 bytes, big-endian).
fn counter_in_netns(pin: PathBuf) -> u16 {
    serve_in_netns(pin, 100, |mut conn| {
        let n = std::io::copy(&mut conn, &mut std::io::sink()).unwrap_or(0);
        let _ = conn.write_all(&n.to_be_bytes());
    })
}

/// Sends `total` bytes to a counter server through `connect()` and returns MiB/s.
fn push(total: usize, connect: impl FnOnce() -> TcpStream) -> f64 {
    let chunk = vec![7u8; 256 * 1024];
    let started = Instant::now();
    let mut s = connect();
    let mut left = total;
    while left > 0 {
        let n = left.min(chunk.len());
        s.write_all(&chunk[..n]).unwrap();
        left -= n;
    }
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut count = [0u8; 8];
    s.read_exact(&mut count).unwrap();
    assert_eq!(u64::from_be_bytes(count) as usize, total);
    total as f64 / (1 << 20) as f64 / started.elapsed().as_secs_f64()
}

/// Benchmark hook (`hack/bench-stream.sh`): 100 MiB into a pod through crictl's port-forward
/// over SPDY and over WebSocket, against a plain loopback connection inside the pod.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: run with hack/bench-stream.sh"]
async fn port_forward_throughput_100mib() {
    const TOTAL: usize = 100 << 20;
    let d = Daemon::start();
    let mut c = d.client().await;
    let id = run_pod(&mut c, pod_config("pf-bench")).await;
    let (_, info) = status(&mut c, &id).await;
    let pin = PathBuf::from(info["namespaces"]["net"].as_str().unwrap());
    let port = counter_in_netns(pin.clone());
    let direct = tokio::task::spawn_blocking(move || {
        // The baseline: the same copy over the pod's own loopback.
        push(TOTAL, move || {
            std::thread::spawn(move || {
                let ns = std::fs::File::open(&pin).unwrap();
                nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
                TcpStream::connect(("127.0.0.1", port)).unwrap()
            })
            .join()
            .unwrap()
        })
    })
    .await
    .unwrap();
    println!("plain loopback in the pod: {direct:.0} MiB/s");
    for transport in ["spdy", "websocket"] {
        let local = free_port();
        let _fwd = crictl_forward(&d, &id, transport, local, port);
        let rate = tokio::task::spawn_blocking(move || {
            push(TOTAL, || TcpStream::connect(("127.0.0.1", local)).unwrap())
        })
        .await
        .unwrap();
        println!(
            "crictl port-forward --transport {transport}: {rate:.0} MiB/s ({:.2}x the plain copy's time)",
            direct / rate
        );
    }
}

/// The pod's sockets `sink_in_netns` accepted: held unread until the test drops them.
static SINKS: std::sync::Mutex<Vec<TcpStream>> = std::sync::Mutex::new(Vec::new());

/// A server inside the namespace pinned at `pin` that accepts connections and never reads
/// them (kept in `SINKS`); answers its port. The namespace's TCP buffers are made small (64
/// KiB at most, both ways), so that what the kernel holds for each connection (the daemon's
/// send buffer, the server's receive buffer: up to 4 and 32 MiB by default) is little beside
/// what the daemon might.
fn sink_in_netns(pin: PathBuf) -> u16 {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let ns = std::fs::File::open(&pin).unwrap();
        nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        // Per network namespace: the daemon's sockets into the pod use these too.
        for knob in ["tcp_wmem", "tcp_rmem"] {
            let path = format!("/proc/sys/net/ipv4/{knob}");
            std::fs::write(&path, "4096 16384 65536").unwrap();
        }
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        tx.send(l.local_addr().unwrap().port()).unwrap();
        for conn in l.incoming() {
            let Ok(conn) = conn else { continue };
            SINKS.lock().unwrap().push(conn);
        }
    });
    rx.recv().unwrap()
}

/// A field of the daemon's /proc status, in kB.
fn daemon_kb(d: &Daemon, field: &str) -> u64 {
    let pid = d.child.as_ref().unwrap().id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// A client that ignores flow control (as Go's SPDY does) pushes 200 MiB, round-robin over 100
/// streams of one connection, at a pod port that accepts and never reads: the daemon stops
/// reading it once its per-connection budget is full, instead of buffering.
#[tokio::test(flavor = "multi_thread")]
async fn a_pod_port_that_never_reads_stops_the_client_instead_of_filling_the_daemon() {
    use crust::stream::spdy::codec::Encoder;
    use crust::stream::spdy::frame::{Data, Frame, SynStream};
    const TOTAL: usize = 200 << 20;
    const STREAMS: u32 = 100;
    let d = Daemon::start();
    let mut c = d.client().await;
    let id = run_pod(&mut c, pod_config("pf-stuck")).await;
    let (_, info) = status(&mut c, &id).await;
    let pin = PathBuf::from(info["namespaces"]["net"].as_str().unwrap());
    let (sink, echo) = (sink_in_netns(pin.clone()), echo_in_netns(pin));
    let baseline = daemon_fds(&d);
    let rss_before = daemon_kb(&d, "VmRSS:");

    let url = port_forward_url(&mut c, &id).await;
    let (status, tcp) = upgrade(&url, "portforward.k8s.io", "SPDY/3.1").await;
    assert_eq!(status, 101);
    let mut raw = tcp.into_std().unwrap();
    raw.set_nonblocking(false).unwrap();
    let sent = tokio::task::spawn_blocking(move || {
        let mut enc = Encoder::new();
        let mut wire = Vec::new();
        for request in 0..STREAMS {
            for (k, kind) in ["error", "data"].into_iter().enumerate() {
                let sid = 1 + 4 * request + 2 * k as u32;
                let syn = SynStream::new(sid, pf_headers(kind, sink, request));
                enc.encode(&Frame::SynStream(syn), &mut wire).unwrap();
            }
        }
        raw.write_all(&wire).unwrap();
        // No window is honoured; nothing is read. Stopped: nothing taken for 3 s.
        raw.set_write_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut sent = 0;
        'flood: for round in 0.. {
            for request in 0..STREAMS {
                // 1-byte, 32 KiB (Go's) and 128 KiB (crust's) frames in turn.
                let len = [1, 32 << 10, 128 << 10][(round + request as usize) % 3];
                wire.clear();
                let data = Data {
                    stream_id: 3 + 4 * request,
                    fin: false,
                    payload: vec![request as u8; len].into(),
                };
                enc.encode(&Frame::Data(data), &mut wire).unwrap();
                let mut at = 0;
                while at < wire.len() {
                    match raw.write(&wire[at..]) {
                        Ok(n) => at += n,
                        Err(_) => break 'flood,
                    }
                }
                sent += len;
                if sent >= TOTAL {
                    break 'flood;
                }
            }
        }
        (raw, sent)
    });
    let (raw, sent) = sent.await.unwrap();
    let (rss, peak) = (daemon_kb(&d, "VmRSS:"), daemon_kb(&d, "VmHWM:"));
    println!(
        "stuck pod port: client sent {} MiB of {} MiB; daemon RSS {} -> {} MiB, peak {} MiB",
        sent >> 20,
        TOTAL >> 20,
        rss_before >> 10,
        rss >> 10,
        peak >> 10
    );
    assert!(sent < TOTAL, "the daemon took all {sent} bytes");
    // About 7 MiB measured (the 4 MiB budget, 100 forwards' tasks and sockets); before the
    // budget the same flood grew it by 36 MiB.
    assert!(
        peak < rss_before + 16 * 1024,
        "daemon peak RSS {peak} kB, {rss_before} kB before"
    );

    // The pod's sockets close, so do the client's: the daemon lets go of everything.
    SINKS.lock().unwrap().clear();
    drop(raw);
    assert_fds_back(&d, baseline);
    let url = port_forward_url(&mut c, &id).await;
    let (conn, _) = spdy_connect(&url, "portforward.k8s.io").await;
    let _e = conn.open(pf_headers("error", echo, 0)).await.unwrap();
    let data = conn.open(pf_headers("data", echo, 0)).await.unwrap();
    let (mut rx, tx) = data.into_split();
    let payload = vec![5u8; 1 << 20];
    tx.send(&payload).await.unwrap();
    tx.close().await.unwrap();
    assert!(read_all(&mut rx).await == payload, "echo differs");
    drop((rx, tx));
    conn.close().await;
    println!("after: daemon RSS {} MiB", daemon_kb(&d, "VmRSS:") >> 10);
}
