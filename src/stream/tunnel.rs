//! SPDY tunnelled in WebSocket (`SPDY/3.1+portforward.k8s.io`, what kubectl 1.31+ and
//! `crictl port-forward --transport websocket` speak): the bytes of a SPDY connection travel
//! in binary messages, split wherever the sender's writes fell. `tunnel` turns the WebSocket
//! back into a byte stream for `spdy::conn`.

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::idle::Idle;

/// Bytes buffered between the WebSocket and the SPDY connection each way.
const TUNNEL_BYTES: usize = 64 * 1024;

/// The byte stream inside `ws`; the WebSocket is served by a task until either side ends.
pub fn tunnel<S>(ws: WebSocketStream<S>, idle: Idle) -> DuplexStream
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (ours, theirs) = tokio::io::duplex(TUNNEL_BYTES);
    tokio::spawn(pump(ws, theirs, idle));
    ours
}

async fn pump<S>(ws: WebSocketStream<S>, bytes: DuplexStream, idle: Idle)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sink, mut stream) = ws.split();
    let (mut from_spdy, mut to_spdy) = tokio::io::split(bytes);
    let inbound = async {
        while let Some(Ok(msg)) = stream.next().await {
            idle.touch();
            match msg {
                Message::Binary(b) if to_spdy.write_all(&b).await.is_err() => break,
                Message::Binary(_) => {}
                Message::Close(_) => break,
                // Text has no meaning in this protocol; pings are answered by tungstenite.
                _ => {}
            }
        }
        let _ = to_spdy.shutdown().await;
    };
    let outbound = async {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match from_spdy.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let msg = Message::Binary(bytes::Bytes::copy_from_slice(&buf[..n]));
                    if sink.send(msg).await.is_err() {
                        break;
                    }
                    idle.touch();
                }
            }
        }
        let close = CloseFrame {
            code: CloseCode::Normal,
            reason: "".into(),
        };
        let _ = sink.send(Message::Close(Some(close))).await;
        let _ = sink.close().await;
    };
    // Either side ending ends the tunnel: the other future is dropped with its half.
    tokio::select! {
        () = inbound => {}
        () = outbound => {}
    }
}
