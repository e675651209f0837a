//! Port-forward throughput, as kubectl port-forward moves bytes but without its process: the
//! PortForward RPC, the HTTP upgrade to SPDY/3.1 (`portforward.k8s.io`), the error and data
//! streams of one request opened in client-go's order, then a bulk transfer into a port on the
//! pod's loopback, up (into the pod) or down (out of it). The baseline is the same transfer over
//! a plain connection made inside the pod's network namespace. crust's own SPDY codec is the
//! client, for every runtime measured, over plain SPDY or tunnelled in WebSocket
//! (`SPDY/3.1+portforward.k8s.io`, kubectl 1.31+'s default).
//!
//! The pod side is a server run by this process in a thread that entered the pod's network
//! namespace: it reads an 8-byte big-endian length; with the top bit clear it then reads that
//! many bytes and answers how many it got (8 bytes), with the top bit set it sends that many.
//! A transfer ends when the answer, or the last byte, is back, so nothing depends on how a
//! runtime passes on a half-close.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use crust::cri::pb;
use crust::stream::spdy::headers::HeaderBlock;
use crust::stream::spdy::{self, RecvHalf, Role};
use crust::stream::tunnel::{self, Tunnel};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use super::Client;
use super::stream_exec::upgrade;

/// What one write hands the socket or the SPDY stream (as a `io.Copy`-style client would).
const CHUNK: usize = 256 * 1024;
/// The top bit of the length: the pod side sends instead of receiving.
const DOWN: u64 = 1 << 63;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Into the pod.
    Up,
    /// Out of the pod.
    Down,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Spdy,
    /// SPDY inside WebSocket binary messages.
    WebSocket,
}

/// The network namespace of the pod that container `id` runs in, by the container's process
/// (the verbose ContainerStatus of crust and of containerd both name its `pid`).
pub async fn netns_of(c: &mut Client, id: &str) -> anyhow::Result<PathBuf> {
    let status = c
        .container_status(pb::ContainerStatusRequest {
            container_id: id.into(),
            verbose: true,
        })
        .await?
        .into_inner();
    let info = status.info.get("info").context("no verbose info")?;
    let info: serde_json::Value = serde_json::from_str(info)?;
    let pid = info["pid"].as_u64().context("no pid in the verbose info")?;
    Ok(PathBuf::from(format!("/proc/{pid}/ns/net")))
}

/// Starts the counting sink on 127.0.0.1 in `netns`; its port.
pub fn sink_in_netns(netns: PathBuf) -> anyhow::Result<u16> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let listener = in_netns(&netns).and_then(|()| Ok(TcpListener::bind("127.0.0.1:0")?));
        let listener = match listener {
            Ok(l) => l,
            Err(e) => return drop(tx.send(Err(e))),
        };
        let _ = tx.send(listener.local_addr().map(|a| a.port()).map_err(Into::into));
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || count(conn));
        }
    });
    rx.recv()?
}

/// Enters `netns` on this thread (network namespaces are per thread).
fn in_netns(netns: &PathBuf) -> anyhow::Result<()> {
    let ns = std::fs::File::open(netns).with_context(|| format!("opening {netns:?}"))?;
    nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).context("setns")?;
    Ok(())
}

fn count(mut conn: TcpStream) -> std::io::Result<()> {
    let mut len = [0u8; 8];
    conn.read_exact(&mut len)?;
    let asked = u64::from_be_bytes(len);
    if asked & DOWN != 0 {
        return send(conn, asked & !DOWN);
    }
    let mut left = asked;
    let mut got = 0u64;
    let mut buf = vec![0u8; CHUNK];
    while left > 0 {
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = conn.read(&mut buf[..want])?;
        if n == 0 {
            break;
        }
        got += n as u64;
        left -= n as u64;
    }
    conn.write_all(&got.to_be_bytes())?;
    // The peer closes first; what comes after the answer is not counted.
    let _ = std::io::copy(&mut conn, &mut std::io::sink());
    Ok(())
}

/// Sends `total` bytes, then waits for the peer to close.
fn send(mut conn: TcpStream, total: u64) -> std::io::Result<()> {
    let chunk = vec![7u8; CHUNK];
    let mut left = usize::try_from(total).unwrap_or(usize::MAX);
    while left > 0 {
        let n = left.min(CHUNK);
        conn.write_all(&chunk[..n])?;
        left -= n;
    }
    let _ = std::io::copy(&mut conn, &mut std::io::sink());
    Ok(())
}

/// `total` bytes between here and the server at `port` over a connection made inside `netns`:
/// the baseline.
pub async fn plain(
    netns: PathBuf,
    port: u16,
    total: usize,
    dir: Direction,
) -> anyhow::Result<Duration> {
    tokio::task::spawn_blocking(move || {
        let t = Instant::now();
        let mut s = std::thread::scope(|s| {
            s.spawn(|| {
                in_netns(&netns)?;
                anyhow::Ok(TcpStream::connect(("127.0.0.1", port))?)
            })
            .join()
            .map_err(|_| anyhow::anyhow!("connecting thread panicked"))?
        })?;
        if dir == Direction::Down {
            s.write_all(&(total as u64 | DOWN).to_be_bytes())?;
            let mut buf = vec![0u8; CHUNK];
            let mut got = 0;
            while got < total {
                match s.read(&mut buf)? {
                    0 => break,
                    n => got += n,
                }
            }
            check(got as u64, total)?;
            return Ok(t.elapsed());
        }
        s.write_all(&(total as u64).to_be_bytes())?;
        let chunk = vec![7u8; CHUNK];
        let mut left = total;
        while left > 0 {
            let n = left.min(CHUNK);
            s.write_all(&chunk[..n])?;
            left -= n;
        }
        let mut got = [0u8; 8];
        s.read_exact(&mut got)?;
        check(u64::from_be_bytes(got), total)?;
        Ok(t.elapsed())
    })
    .await?
}

/// `total` bytes between here and port `port` of pod `pod` through PortForward and one SPDY
/// data stream; the time from the RPC to the last byte or the sink's answer.
pub async fn through(
    c: &mut Client,
    pod: &str,
    port: u16,
    total: usize,
    (dir, transport): (Direction, Transport),
) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let url = c
        .port_forward(pb::PortForwardRequest {
            pod_sandbox_id: pod.into(),
            port: vec![i32::from(port)],
        })
        .await?
        .into_inner()
        .url;
    let settings = spdy::Settings::default();
    let (conn, _incoming, _) = match transport {
        Transport::Spdy => {
            let tcp = upgrade(&url, "portforward.k8s.io").await?;
            spdy::conn::start(tcp, Role::Client, settings)
        }
        Transport::WebSocket => {
            let ws = websocket(&url).await?;
            let settings = spdy::Settings {
                max_data_frame: tunnel::FRAME_BYTES,
                ..settings
            };
            spdy::conn::start(Tunnel::new(ws), Role::Client, settings)
        }
    };
    let open = async |kind: &str| {
        let mut h = HeaderBlock::new();
        h.insert("streamType", kind);
        h.insert("port", port.to_string());
        h.insert("requestID", "0");
        conn.open(h).await
    };
    // client-go: the error stream first, its sending side closed at once.
    let (mut error, error_tx) = open("error").await?.into_split();
    error_tx.close().await?;
    let (mut rx, tx) = open("data").await?.into_split();
    let moved = async {
        if dir == Direction::Down {
            tx.send(&(total as u64 | DOWN).to_be_bytes()).await?;
            return read_bytes(&mut rx, total).await;
        }
        tx.send(&(total as u64).to_be_bytes()).await?;
        let chunk = vec![7u8; CHUNK];
        let mut left = total;
        while left > 0 {
            let n = left.min(CHUNK);
            tx.send(&chunk[..n]).await?;
            left -= n;
        }
        read_count(&mut rx).await
    };
    let got = match moved.await {
        Ok(got) => got,
        Err(e) => {
            let why = tokio::time::timeout(Duration::from_secs(1), error.recv()).await;
            let why = match why {
                Ok(Ok(Some(b))) => String::from_utf8_lossy(&b).into_owned(),
                _ => String::new(),
            };
            bail!("port-forward transfer failed: {e} {why}");
        }
    };
    check(got, total)?;
    let took = t.elapsed();
    let _ = tx.close().await;
    conn.close().await;
    Ok(took)
}

/// The WebSocket upgrade with the SPDY tunnel subprotocol.
async fn websocket(
    url: &str,
) -> anyhow::Result<tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>> {
    let ws_url = url.replacen("http://", "ws://", 1);
    let mut req = ws_url.as_str().into_client_request()?;
    req.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        "SPDY/3.1+portforward.k8s.io".parse()?,
    );
    let host = ws_url
        .trim_start_matches("ws://")
        .split('/')
        .next()
        .context("no host in the stream URL")?;
    let tcp = tokio::net::TcpStream::connect(host).await?;
    tcp.set_nodelay(true)?;
    let (ws, _) = tokio_tungstenite::client_async(req, tcp).await?;
    Ok(ws)
}

/// Counts what the data stream brings until `total` bytes are in.
async fn read_bytes(rx: &mut RecvHalf, total: usize) -> anyhow::Result<u64> {
    let mut got = 0;
    while got < total {
        match rx.recv().await? {
            Some(b) => got += b.len(),
            None => break,
        }
    }
    Ok(got as u64)
}

/// The sink's 8-byte answer, in however many frames it comes.
async fn read_count(rx: &mut RecvHalf) -> anyhow::Result<u64> {
    let mut got = Vec::new();
    while got.len() < 8 {
        match rx.recv().await? {
            Some(b) => got.extend_from_slice(&b),
            None => bail!("the data stream ended before the sink answered"),
        }
    }
    let answer: [u8; 8] = got[..8].try_into()?;
    Ok(u64::from_be_bytes(answer))
}

fn check(got: u64, total: usize) -> anyhow::Result<()> {
    if got != total as u64 {
        bail!("the sink counted {got} bytes of {total}");
    }
    Ok(())
}
