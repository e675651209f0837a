//! SPDY tunnelled in WebSocket (`SPDY/3.1+portforward.k8s.io`, what kubectl 1.31+ and
//! `crictl port-forward --transport websocket` speak): the bytes of a SPDY connection travel
//! in binary messages, split wherever the sender's writes fell. `Tunnel` is the WebSocket read
//! and written as that byte stream, for `spdy::conn`: each read takes from the message that
//! came in, each write goes out as one message, with no task or buffer in between (a pump task
//! and an in-memory pipe each way cost a copy and two task switches per message).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes, BytesMut};
use futures_util::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::{self, Message};

/// The largest SPDY DATA frame to send through a tunnel (`spdy::Settings::max_data_frame`),
/// as Go clients do. Each message is copied three times on its way out (into one piece, into
/// tungstenite's buffer, into the socket, and again within that buffer after a partial
/// write): pieces that stay in the CPU's cache move the bytes nearly twice as fast as 128 KiB
/// ones (measured: 955 against 530 MiB/s out of a pod).
pub const FRAME_BYTES: usize = 32 * 1024;

pub struct Tunnel<S> {
    ws: WebSocketStream<S>,
    /// What is left of the last binary message received.
    inbound: Bytes,
    /// The peer closed, or the WebSocket failed: reads give end of file from now on.
    ended: bool,
    /// Where outgoing messages are put together. tungstenite copies a message into its own
    /// buffer as it takes it, so this allocation is free again for the next one (a fresh one
    /// per message would be mapped and zeroed by the kernel, being over the allocator's
    /// mmap threshold).
    out: BytesMut,
}

impl<S> Tunnel<S> {
    pub fn new(ws: WebSocketStream<S>) -> Tunnel<S> {
        Tunnel {
            ws,
            inbound: Bytes::new(),
            ended: false,
            out: BytesMut::new(),
        }
    }
}

fn to_io(e: tungstenite::Error) -> io::Error {
    match e {
        tungstenite::Error::Io(e) => e,
        tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed => {
            io::ErrorKind::BrokenPipe.into()
        }
        e => io::Error::new(io::ErrorKind::InvalidData, e),
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Tunnel<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.inbound.is_empty() {
            // Drop the spent message before the next is read: tungstenite reads into the
            // buffer the message came from once nothing else holds it, instead of a fresh one
            // (mapped and zeroed by the kernel page by page) per message.
            this.inbound = Bytes::new();
        }
        while this.inbound.is_empty() && !this.ended {
            match ready!(Pin::new(&mut this.ws).poll_next(cx)) {
                Some(Ok(Message::Binary(b))) => this.inbound = b,
                // Text has no meaning in this protocol; pings are answered by tungstenite.
                Some(Ok(Message::Close(_))) | None => this.ended = true,
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    this.ended = true;
                    tracing::debug!(error = %e, "port-forward WebSocket failed");
                }
            }
        }
        let n = this.inbound.len().min(buf.remaining());
        buf.put_slice(&this.inbound[..n]);
        this.inbound.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Tunnel<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(buf)])
    }

    /// All the pieces in one message: a SPDY frame's head and payload (which the connection
    /// would otherwise copy together first).
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        if len == 0 {
            return Poll::Ready(Ok(0));
        }
        let this = self.get_mut();
        let mut ws = Pin::new(&mut this.ws);
        ready!(ws.as_mut().poll_ready(cx)).map_err(to_io)?;
        this.out.reserve(len);
        for b in bufs {
            this.out.extend_from_slice(b);
        }
        let msg = Message::Binary(this.out.split().freeze());
        ws.start_send(msg).map_err(to_io)?;
        Poll::Ready(Ok(len))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().ws)
            .poll_flush(cx)
            .map_err(to_io)
    }

    /// Sends the close message: the peer sees the tunnel end.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match ready!(Pin::new(&mut self.get_mut().ws).poll_close(cx)) {
            Ok(()) | Err(tungstenite::Error::ConnectionClosed) => Poll::Ready(Ok(())),
            Err(e) => Poll::Ready(Err(to_io(e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::{SinkExt, StreamExt};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_tungstenite::tungstenite::protocol::Role;

    async fn pair() -> (
        Tunnel<tokio::io::DuplexStream>,
        WebSocketStream<tokio::io::DuplexStream>,
    ) {
        let (a, b) = tokio::io::duplex(1 << 16);
        let server = WebSocketStream::from_raw_socket(a, Role::Server, None).await;
        let client = WebSocketStream::from_raw_socket(b, Role::Client, None).await;
        (Tunnel::new(server), client)
    }

    #[tokio::test]
    async fn messages_read_as_one_byte_stream_and_writes_go_out_as_messages() {
        let (mut tunnel, mut client) = pair().await;
        for part in [&b"SPDY "[..], b"", b"bytes split", b" anywhere"] {
            client.send(Message::binary(part.to_vec())).await.unwrap();
        }
        client.send(Message::text("ignored")).await.unwrap();
        client.send(Message::binary(b"!".to_vec())).await.unwrap();
        let want = b"SPDY bytes split anywhere!";
        let mut got = vec![0u8; want.len()];
        // Small reads take a message in several pieces.
        for chunk in got.chunks_mut(4) {
            tunnel.read_exact(chunk).await.unwrap();
        }
        assert_eq!(&got, want);

        tunnel.write_all(b"frame one").await.unwrap();
        tunnel.flush().await.unwrap();
        let msg = client.next().await.unwrap().unwrap();
        assert_eq!(msg, Message::binary(b"frame one".to_vec()));
        // A head and its payload written together are one message.
        let pieces = [io::IoSlice::new(b"head|"), io::IoSlice::new(b"payload")];
        assert_eq!(tunnel.write_vectored(&pieces).await.unwrap(), 12);
        tunnel.flush().await.unwrap();
        let msg = client.next().await.unwrap().unwrap();
        assert_eq!(msg, Message::binary(b"head|payload".to_vec()));

        // The peer's close is the end of the byte stream; ours reaches the peer as a close.
        client.close(None).await.unwrap();
        let mut rest = Vec::new();
        tunnel.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        tunnel.shutdown().await.unwrap();
    }

    #[tokio::test]
    async fn shutdown_sends_a_close_message() {
        let (mut tunnel, mut client) = pair().await;
        tunnel.shutdown().await.unwrap();
        let msg = client.next().await.unwrap().unwrap();
        assert!(matches!(msg, Message::Close(_)), "{msg:?}");
    }
}
