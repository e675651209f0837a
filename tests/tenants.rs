//! What one tenant of the node can do to crust and to the others, tried as that tenant would
//! (issue 56): an image whose account files are a FIFO or a device node, files under the root
//! and state directories that a local user who is not root tries to read or run, and peers
//! (registries, stream and metrics clients) that send without end or not at all. Each hostile
//! input gets its clear error, and the daemon's memory and its other RPCs stay as they were.

mod common;

use std::time::{Duration, Instant};

use common::oci_build::{Comp, Node, file, image, tar};
use common::registry::{Auth, Registry, Throttle};
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

/// The daemon's peak resident memory (VmHWM), in kB.
fn hwm_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn daemon_pid(e: &Env) -> u32 {
    e.d.child.as_ref().unwrap().id()
}

/// A registry whose `/v2/` asks for a bearer token from a realm on its own port, and whose
/// realm answers 200 with a token response that never ends. Each realm connection, once the
/// client hangs up, reports how many bytes it got written.
fn endless_token_realm() -> (String, std::sync::mpsc::Receiver<u64>) {
    use std::io::{BufRead, BufReader, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let (sent, written) = std::sync::mpsc::channel();
    let realm = format!("http://{addr}/token");
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let (realm, sent) = (realm.clone(), sent.clone());
            std::thread::spawn(move || {
                let mut s = s;
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut line = String::new();
                let mut h = String::from("-");
                while r.read_line(&mut h).is_ok_and(|n| n > 0) && h.trim() != "" {
                    if line.is_empty() {
                        line = h.clone();
                    }
                    h.clear();
                }
                let path = line.split_whitespace().nth(1).unwrap_or_default();
                if !path.starts_with("/token") {
                    let _ = write!(
                        s,
                        "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"{realm}\",\
                         service=\"hostile\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    );
                    return;
                }
                let mut n = 0u64;
                let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                            Connection: close\r\n\r\n{\"token\":\"";
                let filler = vec![b'a'; 64 << 10];
                if s.write_all(head.as_bytes()).is_ok() {
                    // Bounded anyway (4 GiB), so a broken client cannot keep the test running.
                    while n < 4 << 30 && s.write_all(&filler).is_ok() {
                        n += filler.len() as u64;
                    }
                }
                let _ = sent.send(n);
            });
        }
    });
    (addr, written)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_realm_that_answers_without_end_is_cut_off_at_its_cap() {
    let (addr, written) = endless_token_realm();
    let mut e = Env::start_with(|d| {
        d.append_config(&format!(
            "\n[registry.mirrors.\"{addr}\"]\nendpoints = [\"http://{addr}\"]\n"
        ))
    })
    .await;
    let pid = daemon_pid(&e);
    let (rss_before, hwm_before) = (rss_kb(pid), hwm_kb(pid));
    let mut pulls = Vec::new();
    for i in 0..3 {
        let mut images = e.d.images().await;
        let name = format!("{addr}/app{i}:1");
        pulls.push(tokio::spawn(async move {
            images.pull_image(pull_request(&name)).await
        }));
    }
    for p in pulls {
        let err = tokio::time::timeout(Duration::from_secs(30), p)
            .await
            .expect("the pull answered within 30 s")
            .unwrap()
            .expect_err("a pull through an endless token realm succeeded");
        assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
        for words in [
            format!("http://{addr} named a token realm (http://{addr}/token)"),
            "more than 1 MiB, the cap on a token response".into(),
        ] {
            assert!(err.message().contains(&words), "{}", err.message());
        }
    }
    // Each realm connection was hung up on after about the cap (plus what the sockets hold).
    for _ in 0..3 {
        let n = written
            .recv_timeout(Duration::from_secs(30))
            .expect("the daemon hung up on the realm");
        assert!(
            n < 16 << 20,
            "the daemon read {n} bytes of one token response"
        );
    }
    let (rss_after, hwm_after) = (rss_kb(pid), hwm_kb(pid));
    eprintln!(
        "token realm: RSS {rss_before} -> {rss_after} kB, peak {hwm_before} -> {hwm_after} kB"
    );
    assert!(
        hwm_after < hwm_before + (32 << 10),
        "the daemon's peak RSS grew from {hwm_before} to {hwm_after} kB"
    );
    answers_promptly(&mut e.c, "after three endless token responses").await;
}

fn daemon_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Opens `n` connections to `addr` that never send a byte.
fn silent_connections(addr: &str, n: usize) -> Vec<std::net::TcpStream> {
    (0..n)
        .map(|_| std::net::TcpStream::connect(addr).unwrap())
        .collect()
}

/// Sends one HTTP/1.1 GET of `path` to `addr` and returns the status line, within 2 s.
fn get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer)
        .unwrap_or_else(|e| panic!("GET {path} on {addr}: {e}"));
    answer.lines().next().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_to_the_stream_and_metrics_servers_are_capped() {
    use std::io::Read;
    let metrics_port = free_port();
    let mut e = Env::start_with(|d| {
        d.append_config(&format!(
            "\n[metrics]\naddress = \"127.0.0.1:{metrics_port}\"\n"
        ))
    })
    .await;
    let pod = e.pod("pf").await;
    let url =
        e.c.port_forward(pb::PortForwardRequest {
            pod_sandbox_id: pod.0.clone(),
            port: vec![],
        })
        .await
        .unwrap()
        .into_inner()
        .url;
    let stream = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let metrics = format!("127.0.0.1:{metrics_port}");
    let pid = daemon_pid(&e);
    let (fds_before, rss_before) = (daemon_fds(pid), rss_kb(pid));
    // Far more than either cap (128 and 16), and more than either would hold for the whole
    // head timeout if they were all kept.
    let (n_stream, n_metrics) = (1000, 200);
    let mut held = silent_connections(&stream, n_stream);
    held.extend(silent_connections(&metrics, n_metrics));
    // The oldest of each were closed by the daemon to make room: each reads end of file, long
    // before any head timeout (10 s and 30 s).
    let pushed_out = held[..n_stream - 128]
        .iter()
        .chain(&held[n_stream..n_stream + n_metrics - 16]);
    let asked = Instant::now();
    for mut s in pushed_out {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 1];
        assert_eq!(s.read(&mut b).expect("the daemon closed it"), 0);
    }
    assert!(asked.elapsed() < Duration::from_secs(5));
    let (fds_after, rss_after) = (daemon_fds(pid), rss_kb(pid));
    eprintln!(
        "silent connections: {n_stream} + {n_metrics} held; daemon fds {fds_before} -> \
         {fds_after}, RSS {rss_before} -> {rss_after} kB"
    );
    assert!(
        fds_after <= fds_before + 128 + 16 + 8,
        "the daemon holds {fds_after} descriptors (was {fds_before})"
    );
    // While the peer still holds its newest connections, others are served at once.
    assert!(get(&stream, "/exec/nosuchtoken").contains(" 404"));
    assert!(get(&metrics, "/metrics").contains(" 200"));
    answers_promptly(&mut e.c, "with 1200 silent connections held").await;
    drop(held);
}

/// An image of one layer holding `n` bytes gzip cannot shrink.
fn noise_image(n: usize, seed: u64) -> oci_build::Image {
    let mut x = seed | 1;
    let noise: Vec<u8> = (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    image(
        &[(tar(&[file("noise", &noise)]), Comp::Gzip)],
        json!({"Cmd": ["sh"]}),
        "amd64",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_dripping_under_the_stall_timeout_loses_its_download_slot() {
    let reg = Registry::start(Auth::None);
    let (drip, other) = (noise_image(1 << 20, 7), noise_image(64 << 10, 11));
    reg.push("drip", "1", &drip).await;
    reg.push("other", "1", &other).await;
    // 16 KiB every 2 s: always within the 3 s progress timeout, far under 64 KiB/s.
    let slow = Throttle::start(&reg.addr, 8 << 10);
    let e = Env::start_with(|d| {
        d.append_config(&format!(
            "\n[registry.mirrors.\"{0}\"]\nendpoints = [\"http://{0}\"]\n\
             [registry.mirrors.\"{1}\"]\nendpoints = [\"http://{1}\"]\n",
            slow.addr, reg.addr
        ));
        d.drop_in(
            "slots.toml",
            "[image]\nmax_concurrent_downloads = 1\npull_progress_timeout_secs = 3\n\
             pull_min_kib_per_sec = 64\n",
        );
    })
    .await;
    let pid = daemon_pid(&e);
    let hwm_before = hwm_kb(pid);
    let started = Instant::now();
    let (mut a, mut b) = (e.d.images().await, e.d.images().await);
    let name = format!("{}/drip:1", slow.addr);
    let dripping = tokio::spawn(async move { a.pull_image(pull_request(&name)).await });
    // Waits for the one download slot the dripping layer holds.
    let name = format!("{}/other:1", reg.addr);
    let waiting = tokio::spawn(async move { b.pull_image(pull_request(&name)).await });
    let err = tokio::time::timeout(Duration::from_secs(30), dripping)
        .await
        .expect("the dripping pull answered within 30 s")
        .unwrap()
        .expect_err("a pull at 8 KiB/s passed a 64 KiB/s floor");
    let failed_after = started.elapsed();
    assert_eq!(err.code(), tonic::Code::DeadlineExceeded, "{err:?}");
    let layer = drip.layers[0].digest();
    for words in [
        format!("pulling {}/drip:1", slow.addr),
        format!("blob {layer}"),
        "under image.pull_min_kib_per_sec = 64".into(),
    ] {
        assert!(err.message().contains(&words), "{}", err.message());
    }
    let got = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the waiting pull answered within 30 s")
        .unwrap()
        .expect("the waiting pull got the slot");
    assert_eq!(got.into_inner().image_ref, other.id());
    eprintln!(
        "dripping registry: DeadlineExceeded after {:.1} s, the waiting pull done after {:.1} s, \
         peak RSS {hwm_before} -> {} kB",
        failed_after.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        hwm_kb(pid)
    );
    assert!(failed_after < Duration::from_secs(15), "{failed_after:?}");
}
