//! An exec over the streaming server, as kubectl and crictl do it but without their process
//! start: the Exec RPC, the HTTP upgrade to SPDY/3.1 (`v4.channel.k8s.io`), the error, stdout
//! and stderr streams opened in client-go's order, the command's output read to its end and
//! its exit status read from the error stream. crust's own SPDY codec is the client.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use crust::cri::pb;
use crust::stream::spdy::headers::HeaderBlock;
use crust::stream::spdy::{self, RecvHalf, Role};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::Client;

/// One `true` in container `id` through Exec and its stream; how long it took.
pub async fn round_trip(c: &mut Client, id: &str) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let url = c
        .exec(pb::ExecRequest {
            container_id: id.into(),
            cmd: vec!["true".into()],
            tty: false,
            stdin: false,
            stdout: true,
            stderr: true,
        })
        .await?
        .into_inner()
        .url;
    let tcp = upgrade(&url, "v4.channel.k8s.io").await?;
    let (conn, _incoming, _) = spdy::conn::start(tcp, Role::Client, spdy::Settings::default());
    let open = async |kind: &str| {
        let mut h = HeaderBlock::new();
        h.insert("streamType", kind);
        let (rx, tx) = conn.open(h).await?.into_split();
        // The client sends nothing on these streams. Its handle must live on (a dropped
        // stream is reset); the server may already be done with the command, so a FIN that
        // finds the connection closed is no failure.
        let _ = tx.close().await;
        anyhow::Ok((rx, tx))
    };
    let (mut error, _e) = open("error").await?;
    let (mut stdout, _o) = open("stdout").await?;
    let (mut stderr, _r) = open("stderr").await?;
    let (out, err, status) = tokio::join!(
        read_all(&mut stdout),
        read_all(&mut stderr),
        read_all(&mut error)
    );
    let status = String::from_utf8_lossy(&status?).into_owned();
    // client-go's rule for v4: no status, or a Status that says Success.
    let success = status.is_empty() || status.contains("\"Success\"");
    if !(out?.is_empty() && err?.is_empty() && success) {
        bail!("exec of true over SPDY answered {status:?}");
    }
    let took = t.elapsed();
    conn.close().await;
    Ok(took)
}

/// Posts the upgrade request for `url` offering `protocol` and reads the answer's head; the
/// connection speaks SPDY from then on.
pub async fn upgrade(url: &str, protocol: &str) -> anyhow::Result<TcpStream> {
    let rest = url
        .strip_prefix("http://")
        .with_context(|| format!("not a plain HTTP stream URL: {url}"))?;
    let (host, path) = rest.split_once('/').context("no path in the stream URL")?;
    let mut tcp = TcpStream::connect(host).await?;
    tcp.set_nodelay(true)?;
    let req = format!(
        "POST /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
         X-Stream-Protocol-Version: {protocol}\r\nContent-Length: 0\r\n\r\n"
    );
    tcp.write_all(req.as_bytes()).await?;
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        if tcp.read(&mut b).await? == 0 {
            bail!("the stream server closed the upgrade");
        }
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head);
    if !head.starts_with("HTTP/1.1 101") {
        bail!("upgrade refused: {head}");
    }
    Ok(tcp)
}

/// Reads a stream to its end. A reset ends it too, as for client-go (spdystream reads EOF on
/// a reset stream: containerd resets the streams it is done with as it closes).
async fn read_all(rx: &mut RecvHalf) -> anyhow::Result<Vec<u8>> {
    let mut all = Vec::new();
    loop {
        match rx.recv().await {
            Ok(Some(b)) => all.extend_from_slice(&b),
            Ok(None) => return Ok(all),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(all),
            Err(e) => return Err(e.into()),
        }
    }
}
