//! `portforward.k8s.io` on a SPDY connection: pairs the error and data streams of each request
//! and forwards each complete pair on a task of its own, so one request failing or stalling
//! never holds up the others. Everything ends with the connection.

use std::collections::HashMap;
use std::io::IoSlice;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::task::JoinSet;

use super::{PodConn, PodNetwork, dial};
use crate::stream::spdy::conn::SendHalf;
use crate::stream::spdy::frame::RstStatus;
use crate::stream::spdy::splice::Pipe;
use crate::stream::spdy::{Incoming, Stream};

/// How long a request may wait for its second stream (kubelet's stream creation timeout).
pub const PAIR_TIMEOUT: Duration = Duration::from_secs(30);
/// At most this much received from the client goes into one write to the pod. Its credit
/// goes back to the client only once that write is done (the next `recv_batch`), so this is
/// half a stream's inbox (`spdy::Settings::inbox_bytes`, 256 KiB): the reader fills the other
/// half while the pod takes this one.
const BATCH_BYTES: usize = 128 * 1024;
/// Pieces of a batch handed to one vectored write.
const MAX_SLICES: usize = 64;
/// One read of the pod's socket: what a busy pod has ready, sent on as few frames.
const READ_BYTES: usize = 256 * 1024;

#[derive(Default)]
struct Pair {
    port: u16,
    data: Option<Stream>,
    error: Option<Stream>,
    since: Option<Instant>,
}

/// Serves port-forward requests from `incoming` until the connection ends.
pub async fn serve(mut incoming: Incoming, network: PodNetwork, pod: String) {
    let mut pending: HashMap<String, Pair> = HashMap::new();
    let mut forwards = JoinSet::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            next = incoming.next() => match next {
                Some(stream) => {
                    if let Some(pair) = accept(stream, &mut pending).await {
                        forwards.spawn(forward(pair, network.clone(), pod.clone()));
                    }
                }
                None => break,
            },
            _ = tick.tick() => expire(&mut pending).await,
            Some(_) = forwards.join_next(), if !forwards.is_empty() => {}
        }
    }
    // Dropping the set aborts every forward: their sockets close with the connection.
}

/// Replies to a new stream and files it under its request; returns a pair once both of a
/// request's streams are there.
async fn accept(stream: Stream, pending: &mut HashMap<String, Pair>) -> Option<Pair> {
    let h = stream.headers();
    let port = h
        .get("port")
        .and_then(|p| p.parse::<u16>().ok())
        .filter(|p| *p > 0);
    let kind = h.get("streamtype").map(str::to_owned);
    let (Some(port), Some(kind @ ("data" | "error"))) = (port, kind.as_deref()) else {
        tracing::debug!(headers = ?h, "port-forward stream without a valid port and streamType");
        let _ = stream.send.reset(RstStatus::ProtocolError).await;
        return None;
    };
    // Clients before requestID existed: the error stream's id, or the data stream's minus 2.
    let request = match h.get("requestid") {
        Some(r) => r.to_owned(),
        None if kind == "error" => stream.id().to_string(),
        None => stream.id().saturating_sub(2).to_string(),
    };
    let kind = kind.to_owned();
    if stream.reply().await.is_err() {
        return None;
    }
    let pair = pending.entry(request.clone()).or_default();
    pair.port = port;
    pair.since.get_or_insert_with(Instant::now);
    let slot = if kind == "data" {
        &mut pair.data
    } else {
        &mut pair.error
    };
    if slot.is_some() {
        let msg = format!("{kind} stream already assigned for request {request}");
        if let Some(e) = &pair.error {
            let _ = e.send.send(msg.as_bytes()).await;
        }
        return None;
    }
    *slot = Some(stream);
    if pair.data.is_some() && pair.error.is_some() {
        return pending.remove(&request);
    }
    None
}

async fn expire(pending: &mut HashMap<String, Pair>) {
    let late: Vec<String> = pending
        .iter()
        .filter(|(_, p)| p.since.is_some_and(|s| s.elapsed() > PAIR_TIMEOUT))
        .map(|(k, _)| k.clone())
        .collect();
    for request in late {
        if let Some(Pair { error: Some(e), .. }) = pending.remove(&request) {
            let msg = format!("timed out waiting for the streams of request {request}");
            let _ = e.send.send(msg.as_bytes()).await;
            let _ = e.send.close().await;
        }
    }
}

/// Connects to the pair's port and copies both ways; a failure goes on the error stream.
async fn forward(pair: Pair, network: PodNetwork, pod: String) {
    let (Some(data), Some(error)) = (pair.data, pair.error) else {
        return;
    };
    let port = pair.port;
    match dial(&network, port).await {
        Ok(conn) => {
            let copied = match conn {
                PodConn::Tcp(tcp) => copy(data, tcp).await,
                PodConn::Sandbox(stream) => copy_stream(data, stream).await,
            };
            if let Err(e) = copied {
                tracing::debug!(port, error = %e, "port-forward connection ended");
            }
        }
        Err(e) => {
            let msg = format!("error forwarding port {port} to pod {pod}: {e}");
            tracing::debug!("{msg}");
            let _ = error.send.send(msg.as_bytes()).await;
            let _ = data.send.reset(RstStatus::Cancel).await;
        }
    }
    let _ = error.send.close().await;
}

/// Copies between the data stream and the pod's socket until both directions have ended, or
/// either fails (a reset from the client ends both).
async fn copy(data: Stream, tcp: TcpStream) -> std::io::Result<()> {
    let (mut from_client, to_client) = data.into_split();
    let (mut from_pod, mut to_pod) = tcp.into_split();
    let up = async {
        // Frames that arrived together go to the pod in one write (Go clients send 32 KiB
        // frames: a syscall each would cost more than the copy).
        let mut batch = Vec::new();
        while from_client.recv_batch(&mut batch, BATCH_BYTES).await? {
            write_batch(&mut to_pod, &mut batch).await?;
        }
        to_pod.shutdown().await
    };
    let down = async {
        if to_client.can_splice() {
            // The pod's bytes go to the client's socket without passing through here.
            let mut pipe = Pipe::new()?;
            while to_client.splice_from(from_pod.as_ref(), &mut pipe).await? > 0 {}
            return to_client.close().await;
        }
        pod_to_client(&mut from_pod, &to_client).await
    };
    tokio::try_join!(up, down).map(drop)
}

/// Copies the pod's bytes to the client until the pod's side ends, then closes the stream.
async fn pod_to_client(
    from_pod: &mut (impl tokio::io::AsyncRead + Unpin),
    to_client: &SendHalf,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; READ_BYTES];
    loop {
        let n = from_pod.read(&mut buf).await?;
        if n == 0 {
            return to_client.close().await;
        }
        to_client.send(&buf[..n]).await?;
    }
}

/// Like `copy`, for a sandbox's stream (no splice: runsc's socket is a unix one).
async fn copy_stream(data: Stream, pod: tokio::net::UnixStream) -> std::io::Result<()> {
    let (mut from_client, to_client) = data.into_split();
    let (mut from_pod, mut to_pod) = pod.into_split();
    let up = async {
        let mut batch = Vec::new();
        while from_client.recv_batch(&mut batch, BATCH_BYTES).await? {
            for piece in batch.drain(..) {
                to_pod.write_all(&piece).await?;
            }
        }
        to_pod.shutdown().await
    };
    let down = pod_to_client(&mut from_pod, &to_client);
    tokio::try_join!(up, down).map(drop)
}

/// Writes every piece of `batch` to `w`, with as few syscalls as the socket allows; empties it.
async fn write_batch(w: &mut OwnedWriteHalf, batch: &mut Vec<Bytes>) -> std::io::Result<()> {
    let mut first = 0;
    while first < batch.len() {
        let mut n = {
            // Tiny frames (keystrokes) can be many: writev takes at most IOV_MAX (1024) pieces.
            let slices: Vec<IoSlice<'_>> = batch[first..]
                .iter()
                .take(MAX_SLICES)
                .map(|b| IoSlice::new(b))
                .collect();
            w.write_vectored(&slices).await?
        };
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while n > 0 {
            let len = batch[first].len();
            if n >= len {
                n -= len;
                first += 1;
            } else {
                batch[first].advance(n);
                n = 0;
            }
        }
    }
    batch.clear();
    Ok(())
}
