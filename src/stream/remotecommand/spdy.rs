//! Exec and attach over SPDY (`v4.channel.k8s.io` down to `channel.k8s.io`): the client opens
//! one stream per `streamType` (error always; stdin, stdout, stderr as asked; resize with a
//! tty from v3 on) within the creation timeout; then the command runs and its status goes on
//! the error stream, as JSON from v4 on.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::{Command, Outcome, Pipes, ResizeDecoder, await_drained, drain_output};
use crate::stream::backend::StreamBackend;
use crate::stream::spdy::{Connection, Incoming, RecvHalf, SendHalf, Stream};

/// How long the client may take to open its streams (kubelet's value).
pub const CREATION_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves one exec or attach on a SPDY connection whose negotiated protocol is `protocol`.
pub async fn serve(
    conn: Connection,
    incoming: Incoming,
    protocol: &str,
    cmd: Command,
    backend: Arc<dyn StreamBackend>,
) {
    let opts = cmd.options();
    let resize = opts.tty && matches!(protocol, "v4.channel.k8s.io" | "v3.channel.k8s.io");
    let expected = 1 + [opts.stdin, opts.stdout, opts.stderr, resize]
        .iter()
        .filter(|x| **x)
        .count();
    let mut incoming = incoming;
    let collected = tokio::time::timeout(CREATION_TIMEOUT, collect(&mut incoming, expected));
    let streams = match collected.await {
        Ok(Some(s)) => s,
        Ok(None) => return conn.close().await,
        Err(_) => {
            tracing::debug!("client did not open its streams in time");
            return conn.close().await;
        }
    };
    // A client may open more streams than the request asked for (stderr for an attach
    // without it): they are accepted and left unused, not left waiting for a reply.
    let extra = tokio::spawn(async move {
        let mut kept = Vec::new();
        while let Some(s) = incoming.next().await {
            if s.reply().await.is_ok() {
                kept.push(s);
            }
        }
    });
    let json = protocol == "v4.channel.k8s.io";
    let outcome = run(&conn, streams, cmd, backend, resize, json).await;
    if let Some(outcome) = outcome {
        tracing::debug!(?outcome, "command ended");
    }
    conn.close().await;
    extra.abort();
}

/// Takes streams until `expected` of known types arrived; None if the connection ended.
async fn collect(incoming: &mut Incoming, expected: usize) -> Option<HashMap<String, Stream>> {
    let mut streams = HashMap::new();
    while streams.len() < expected {
        let stream = incoming.next().await?;
        let kind = stream.headers().get("streamtype").unwrap_or_default();
        let kind = kind.to_owned();
        tracing::debug!(stream = stream.id(), stream_type = %kind, "exec stream opened");
        if !matches!(
            kind.as_str(),
            "error" | "stdin" | "stdout" | "stderr" | "resize"
        ) || streams.contains_key(&kind)
        {
            tracing::debug!(stream_type = %kind, "unexpected exec stream");
            continue; // dropped: reset
        }
        stream.reply().await.ok()?;
        streams.insert(kind, stream);
    }
    Some(streams)
}

/// Runs the command with the streams; None when the client went away first.
async fn run(
    conn: &Connection,
    mut streams: HashMap<String, Stream>,
    cmd: Command,
    backend: Arc<dyn StreamBackend>,
    resize: bool,
    json: bool,
) -> Option<Outcome> {
    let mut take = |kind: &str| streams.remove(kind).map(Stream::into_split);
    let error = take("error");
    let mut pipes = Pipes::new(cmd.options(), resize);
    let mut pumps = Vec::new();
    // Streams the client opened beyond what the request asked for stay open, unused.
    let mut idle = Vec::new();
    if let (Some((rx, tx)), Some(pipe)) = (take("stdin"), pipes.stdin.take()) {
        tokio::spawn(pump_stdin(rx, pipe));
        idle.push(tx);
    }
    if let (Some((rx, tx)), Some(sizes)) = (take("resize"), pipes.resize.take()) {
        tokio::spawn(pump_resize(rx, sizes));
        idle.push(tx);
    }
    for (kind, pipe) in [
        ("stdout", pipes.stdout.take()),
        ("stderr", pipes.stderr.take()),
    ] {
        if let (Some((rx, tx)), Some(pipe)) = (take(kind), pipe) {
            pumps.push(tokio::spawn(pump_output(pipe, tx, rx)));
        }
    }
    let outcome = tokio::select! {
        o = cmd.run(backend, pipes.io) => o,
        () = conn.closed() => return None,
    };
    await_drained(pumps).await;
    if let Some((_rx, tx)) = error {
        let payload = super::error_stream_payload(&outcome, json);
        if !payload.is_empty() {
            let _ = tx.send(&payload).await;
        }
        let _ = tx.close().await;
    }
    for tx in idle {
        let _ = tx.close().await;
    }
    Some(outcome)
}

async fn pump_stdin(mut rx: RecvHalf, mut pipe: tokio::io::DuplexStream) {
    while let Ok(Some(bytes)) = rx.recv().await {
        if pipe.write_all(&bytes).await.is_err() {
            return;
        }
    }
    // Client EOF (or reset): the command sees EOF on its stdin when `pipe` drops here.
}

async fn pump_resize(mut rx: RecvHalf, sizes: tokio::sync::mpsc::Sender<super::TerminalSize>) {
    let mut decoder = ResizeDecoder::default();
    while let Ok(Some(bytes)) = rx.recv().await {
        let Ok(batch) = decoder.push(&bytes) else {
            return;
        };
        for size in batch {
            if sizes.send(size).await.is_err() {
                return;
            }
        }
    }
}

/// Forwards one output pipe to its stream, then ends the stream (FIN).
async fn pump_output(pipe: tokio::io::DuplexStream, tx: SendHalf, _rx: RecvHalf) {
    let sent = drain_output(pipe, |b| {
        let tx = &tx;
        async move { tx.send(&b).await }
    })
    .await;
    if sent.is_ok() {
        let _ = tx.close().await;
    }
}
