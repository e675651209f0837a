//! The daemon's side of the monitor's streaming requests (ExecStream, Attach): the first
//! reply comes with descriptors attached (the process's stdio or the container's tty master),
//! then the connection carries the exit code (exec) or the container's output frames (attach).
//! Dropping a session closes the connection: the monitor kills an exec's process, or detaches.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use super::client::{MonitorError, MonitorHandle};
use super::{ExecStreamRequest, Reply, Request, SOCKET, frame};

/// An open streaming request.
pub struct Session {
    /// The rest of the connection (bytes read past the first reply line first).
    reader: BufReader<tokio::io::Chain<std::io::Cursor<Vec<u8>>, OwnedReadHalf>>,
    /// Shut down to tell the monitor the client's stdin ended (attach with `stdin_once`).
    writer: Option<OwnedWriteHalf>,
    /// The descriptors the first reply brought.
    pub fds: Vec<OwnedFd>,
    /// The first reply.
    pub reply: Reply,
}

impl MonitorHandle {
    /// Starts a streaming exec in the container, unless the monitor dies first.
    pub async fn exec_session(
        &self,
        req: ExecStreamRequest,
        timeout: Duration,
    ) -> Result<Session, MonitorError> {
        let req = Request::ExecStream(Box::new(req));
        self.unless_died(open(&self.dir, &req, timeout)).await
    }

    /// Attaches to container `id`, unless the monitor dies first.
    pub async fn attach_session(
        &self,
        id: &str,
        stdin: bool,
        timeout: Duration,
    ) -> Result<Session, MonitorError> {
        let req = Request::Attach {
            id: id.to_owned(),
            stdin,
        };
        self.unless_died(open(&self.dir, &req, timeout)).await
    }
}

async fn open(dir: &Path, req: &Request, timeout: Duration) -> Result<Session, MonitorError> {
    let work = async {
        let (_dir, path) = super::short_socket_path(dir, SOCKET)?;
        let mut stream = UnixStream::connect(path).await?;
        let mut line = serde_json::to_vec(req).unwrap_or_default();
        line.push(b'\n');
        stream.write_all(&line).await?;
        let (first, rest, fds) = first_line(&stream).await?;
        Ok::<_, std::io::Error>((stream, first, rest, fds))
    };
    let (stream, first, rest, fds) = tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| MonitorError::Timeout(timeout))??;
    let reply: Reply = serde_json::from_slice(&first)
        .map_err(|e| MonitorError::Protocol(format!("unreadable reply: {e}")))?;
    if let Reply::Err { fault, error } = reply {
        return Err(MonitorError::Refused { fault, error });
    }
    let (read, write) = stream.into_split();
    Ok(Session {
        reader: BufReader::new(std::io::Cursor::new(rest).chain(read)),
        writer: Some(write),
        fds,
        reply,
    })
}

/// Reads up to the first newline with recvmsg, collecting the descriptors sent with it;
/// returns the line, the bytes read after it, and the descriptors.
async fn first_line(stream: &UnixStream) -> std::io::Result<(Vec<u8>, Vec<u8>, Vec<OwnedFd>)> {
    let (mut data, mut fds) = (Vec::new(), Vec::new());
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = data.iter().position(|&b| b == b'\n') {
            let rest = data.split_off(end + 1);
            data.pop();
            return Ok((data, rest, fds));
        }
        if data.len() > 1 << 20 {
            return Err(std::io::Error::other(
                "the monitor's reply line is too long",
            ));
        }
        stream.readable().await?;
        match stream.try_io(tokio::io::Interest::READABLE, || {
            crate::sys::receive_with_fds(stream, &mut buf)
        }) {
            Ok((0, _)) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok((n, got)) => {
                data.extend_from_slice(&buf[..n]);
                fds.extend(got);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
}

impl Session {
    /// The exec's exit code, once it exits.
    pub async fn exit_code(&mut self) -> Result<i32, MonitorError> {
        let mut line = String::new();
        self.reader.read_line(&mut line).await?;
        match serde_json::from_str(&line) {
            Ok(Reply::Exited { exit_code }) => Ok(exit_code),
            Ok(Reply::Err { fault, error }) => Err(MonitorError::Refused { fault, error }),
            _ if line.is_empty() => Err(MonitorError::Protocol(
                "the monitor closed the exec before it ended".into(),
            )),
            _ => Err(MonitorError::Protocol(format!("unexpected line {line:?}"))),
        }
    }

    /// The next attach output frame: (stream, bytes); `None` once the container exited.
    pub async fn next_frame(&mut self) -> Option<(u8, Vec<u8>)> {
        let mut header = [0u8; frame::HEADER];
        self.reader.read_exact(&mut header).await.ok()?;
        let (stream, len) = frame::decode_header(header);
        if len > frame::MAX {
            return None;
        }
        let mut data = vec![0u8; len];
        self.reader.read_exact(&mut data).await.ok()?;
        Some((stream, data))
    }

    /// The half of the connection that tells the monitor the client's stdin ended: shutting
    /// it down does (the monitor then closes the container's stdin if it was `stdin_once`).
    pub fn take_writer(&mut self) -> Option<OwnedWriteHalf> {
        self.writer.take()
    }
}
