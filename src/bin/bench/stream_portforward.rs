//! Port-forward throughput, as kubectl port-forward moves bytes but without its process: the
//! PortForward RPC, the HTTP upgrade to SPDY/3.1 (`portforward.k8s.io`), the error and data
//! streams of one request opened in client-go's order, then a bulk transfer into a port on the
//! pod's loopback. The baseline is the same transfer over a plain connection made inside the
//! pod's network namespace. crust's own SPDY codec is the client, for every runtime measured.
//!
//! The pod side is a sink run by this process in a thread that entered the pod's network
//! namespace: it reads an 8-byte big-endian length, then that many bytes, and answers how many
//! it got (8 bytes). The transfer ends when that answer is back, so nothing depends on how a
//! runtime passes on a half-close.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use crust::cri::pb;
use crust::stream::spdy::headers::HeaderBlock;
use crust::stream::spdy::{self, RecvHalf, Role};

use super::Client;
use super::stream_exec::upgrade;

/// What one write hands the socket or the SPDY stream (as a `io.Copy`-style client would).
const CHUNK: usize = 256 * 1024;

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
    let mut left = u64::from_be_bytes(len);
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

/// `total` bytes to the sink at `port` over a connection made inside `netns`: the baseline.
pub async fn plain(netns: PathBuf, port: u16, total: usize) -> anyhow::Result<Duration> {
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

/// `total` bytes to port `port` of pod `pod` through PortForward and one SPDY data stream; the
/// time from the RPC to the sink's answer.
pub async fn through_spdy(
    c: &mut Client,
    pod: &str,
    port: u16,
    total: usize,
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
    let tcp = upgrade(&url, "portforward.k8s.io").await?;
    let (conn, _incoming, _) = spdy::conn::start(tcp, Role::Client, spdy::Settings::default());
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
    let sent = async {
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
    let got = match sent.await {
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
