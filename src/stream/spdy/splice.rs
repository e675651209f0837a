//! Moving DATA payloads between two TCP sockets with splice(2), through a pipe, without their
//! bytes entering this process: a port-forward relay that reads and writes every byte copies it
//! twice more than the plain connection it stands in for (into the relay, out of it), which on
//! loopback costs as much CPU as the transfer itself. Only for plain TCP on both ends (a TLS
//! or WebSocket connection needs the bytes in userspace).
//!
//! Both ends of the pipe are non-blocking: readiness comes from the sockets' own tokio
//! registrations, and the pipe is always drained completely before it is filled again, so an
//! EAGAIN from a splice always means the socket (empty, or its send buffer full), never the pipe.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags};
use nix::sys::socket::MsgFlags;
use tokio::io::Interest;
use tokio::net::TcpStream;

/// The pipe's size: what one splice from the source socket may take (the kernel's default is
/// 64 KiB; 1 MiB is the most an unprivileged process may ask).
const PIPE_BYTES: i32 = 1 << 20;

/// A pipe that holds what was taken from one socket until it is given to the other.
pub struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
    /// Bytes in the pipe now.
    held: usize,
}

impl Pipe {
    pub fn new() -> io::Result<Pipe> {
        let (r, w) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)?;
        // A smaller pipe only means more splices.
        let _ = nix::fcntl::fcntl(w.as_raw_fd(), FcntlArg::F_SETPIPE_SZ(PIPE_BYTES));
        Ok(Pipe { r, w, held: 0 })
    }

    pub fn held(&self) -> usize {
        self.held
    }

    /// Takes what `src` has ready, at most `max` bytes, into the (empty) pipe, waiting for
    /// some; 0 at end of file.
    pub async fn fill(&mut self, src: &TcpStream, max: usize) -> io::Result<usize> {
        debug_assert_eq!(self.held, 0, "the pipe is drained before it is filled");
        let n = loop {
            let r = src.try_io(Interest::READABLE, || splice(src, &self.w, max));
            match r {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => src.readable().await?,
                Err(e) => return Err(e),
            }
        };
        self.held = n;
        Ok(n)
    }

    /// Gives `n` of the bytes held to `dst`, waiting for room in its send buffer.
    pub async fn drain(&mut self, dst: &TcpStream, n: usize) -> io::Result<()> {
        let mut left = n.min(self.held);
        while left > 0 {
            match dst.try_io(Interest::WRITABLE, || splice(&self.r, dst, left)) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(k) => {
                    left -= k;
                    self.held -= k;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => dst.writable().await?,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

fn splice(from: impl AsFd, to: impl AsFd, len: usize) -> io::Result<usize> {
    let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
    Ok(nix::fcntl::splice(from, None, to, None, len, flags)?)
}

/// Writes all of `bytes` (a frame's head) to `dst`, telling the kernel more follows at once, so
/// that the head and its payload leave in the same segment.
pub async fn send_more(dst: &TcpStream, mut bytes: &[u8]) -> io::Result<()> {
    let flags = MsgFlags::from_bits_retain(libc::MSG_MORE) | MsgFlags::MSG_NOSIGNAL;
    while !bytes.is_empty() {
        let fd = dst.as_raw_fd();
        match dst.try_io(Interest::WRITABLE, || {
            Ok(nix::sys::socket::send(fd, bytes, flags)?)
        }) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => dst.writable().await?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    async fn connected() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (b, _) = l.accept().await.unwrap();
        (a, b)
    }

    #[tokio::test]
    async fn bytes_go_from_socket_to_socket_in_order_and_eof_is_zero() {
        let (mut client, relay_in) = connected().await;
        let (relay_out, mut server) = connected().await;
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let sent = data.clone();
        let writer = tokio::spawn(async move {
            client.write_all(&sent).await.unwrap();
            client.shutdown().await.unwrap();
        });
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            server.read_to_end(&mut got).await.unwrap();
            got
        });
        let mut pipe = Pipe::new().unwrap();
        let mut relay_out = relay_out;
        let (mut want, mut at) = (Vec::new(), 0);
        loop {
            let n = pipe.fill(&relay_in, 100_000).await.unwrap();
            if n == 0 {
                break;
            }
            assert!(n <= 100_000);
            // In two pieces with a head before each, as frames limited by a send window.
            let first = n / 2;
            for piece in [first, n - first] {
                send_more(&relay_out, b"head").await.unwrap();
                pipe.drain(&relay_out, piece).await.unwrap();
                want.extend_from_slice(b"head");
                want.extend_from_slice(&data[at..at + piece]);
                at += piece;
            }
            assert_eq!(pipe.held(), 0);
        }
        relay_out.shutdown().await.unwrap();
        writer.await.unwrap();
        assert_eq!(at, data.len());
        assert_eq!(reader.await.unwrap(), want);
    }
}
