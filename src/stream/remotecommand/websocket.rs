//! Exec and attach over WebSocket with the channel protocols of `stream::channel`: one task
//! reads client messages (stdin, resize, v5 close signals), one writes every outgoing
//! message in order; the command's output reaches it through the pipes.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::{Command, Pipes, ResizeDecoder, TerminalSize, await_drained, drain_output};
use crate::stream::backend::StreamBackend;
use crate::stream::channel::{self, ChannelFrame, ChannelProtocol, Outgoing};
use crate::stream::idle::Idle;

/// Serves one exec or attach on an upgraded WebSocket.
pub async fn serve<S>(
    ws: WebSocketStream<S>,
    protocol: ChannelProtocol,
    cmd: Command,
    backend: Arc<dyn StreamBackend>,
    idle: Idle,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let opts = cmd.options();
    let (sink, stream) = ws.split();
    let (out_tx, out_rx) = mpsc::channel::<(u8, Bytes)>(16);
    let writer = tokio::spawn(write_messages(sink, out_rx, protocol, idle.clone()));
    // Like kubelet: an empty message on the first channel the client reads tells it the
    // streams are ready.
    let first = if opts.stdout {
        channel::STDOUT
    } else if opts.stderr {
        channel::STDERR
    } else {
        channel::ERROR
    };
    let _ = out_tx.send((first, Bytes::new())).await;
    let mut pipes = Pipes::new(opts, true);
    let mut pumps = Vec::new();
    for (ch, pipe) in [
        (channel::STDOUT, pipes.stdout.take()),
        (channel::STDERR, pipes.stderr.take()),
    ] {
        if let Some(pipe) = pipe {
            pumps.push(tokio::spawn(pump_output(pipe, ch, out_tx.clone())));
        }
    }
    let reader = read_messages(
        stream,
        protocol,
        pipes.stdin.take(),
        pipes.resize.take(),
        idle.clone(),
    );
    let outcome = tokio::select! {
        o = cmd.run(backend, pipes.io) => o,
        () = reader => return writer.abort(),
        () = idle.expired() => return writer.abort(),
    };
    tracing::debug!(?outcome, "command ended");
    await_drained(pumps).await;
    let payload = super::error_stream_payload(&outcome, protocol.status_json());
    if !payload.is_empty() {
        let _ = out_tx.send((channel::ERROR, Bytes::from(payload))).await;
    }
    drop(out_tx);
    let _ = writer.await;
}

async fn write_messages<S>(
    mut sink: futures_util::stream::SplitSink<WebSocketStream<S>, Message>,
    mut rx: mpsc::Receiver<(u8, Bytes)>,
    protocol: ChannelProtocol,
    idle: Idle,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    while let Some((ch, data)) = rx.recv().await {
        let msg = match protocol.encode(ch, &data) {
            Outgoing::Binary(b) => Message::Binary(b.into()),
            Outgoing::Text(t) => Message::text(t),
        };
        if sink.send(msg).await.is_err() {
            return;
        }
        idle.touch();
    }
    // A normal closure (1000): clients read the end of the error channel as EOF; a close
    // without a code (1005) is an error to gorilla/websocket, and the status would be lost.
    let close = CloseFrame {
        code: CloseCode::Normal,
        reason: "".into(),
    };
    let _ = sink.send(Message::Close(Some(close))).await;
    let _ = sink.close().await;
}

/// Reads client messages until the client closes or breaks the connection.
async fn read_messages<S>(
    mut stream: futures_util::stream::SplitStream<WebSocketStream<S>>,
    protocol: ChannelProtocol,
    mut stdin: Option<DuplexStream>,
    resize: Option<mpsc::Sender<TerminalSize>>,
    idle: Idle,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut sizes = ResizeDecoder::default();
    while let Some(Ok(msg)) = stream.next().await {
        idle.touch();
        let bytes: &[u8] = match &msg {
            Message::Binary(b) => b,
            Message::Text(t) => t.as_bytes(),
            Message::Close(_) => return,
            _ => continue,
        };
        let frame = match protocol.decode(bytes) {
            Ok(Some(f)) => f,
            Ok(None) => continue,
            Err(e) => {
                tracing::debug!(error = %e, "bad exec message");
                return;
            }
        };
        match frame {
            ChannelFrame::Data {
                channel: channel::STDIN,
                data,
            } => {
                if let Some(pipe) = stdin.as_mut() {
                    if pipe.write_all(&data).await.is_err() {
                        stdin = None;
                    }
                }
            }
            ChannelFrame::Data {
                channel: channel::RESIZE,
                data,
            } => {
                let (Some(tx), Ok(batch)) = (&resize, sizes.push(&data)) else {
                    continue;
                };
                for size in batch {
                    let _ = tx.try_send(size);
                }
            }
            ChannelFrame::Close {
                channel: channel::STDIN,
            } => stdin = None,
            _ => {}
        }
    }
}

async fn pump_output(pipe: DuplexStream, ch: u8, tx: mpsc::Sender<(u8, Bytes)>) {
    let _ = drain_output(pipe, |b| {
        let tx = &tx;
        async move {
            tx.send((ch, b))
                .await
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))
        }
    })
    .await;
}
