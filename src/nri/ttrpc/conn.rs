//! One plugin's socket: NRI's multiplexer with a ttrpc client on the plugin's stream (crust
//! calls the plugin) and a ttrpc server on the runtime's stream (the plugin calls crust).
//!
//! A reader task takes frames off the socket and routes them: responses wake the call that
//! waits for them, requests go out on the `Incoming` channel and are answered on the stream
//! they came on. A writer task owns the socket's write half, so a message's frames are never
//! interleaved with another's. The connection closes when either side of the socket fails, on
//! a protocol error, or when `close` is called; every call waiting then ends with `Closed`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use prost::Message as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot, watch};

use super::message::{self, Kind, Message};
use super::{mux, rpc};

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("the connection is closed")]
    Closed,
    #[error("{message} (code {code})")]
    Status { code: i32, message: String },
    #[error("undecodable answer: {0}")]
    Decode(String),
}

impl CallError {
    /// NRI drops a plugin that times out or whose connection broke; any other error is the
    /// plugin's answer.
    pub fn is_fatal(&self) -> bool {
        !matches!(self, CallError::Status { .. })
    }
}

/// A call the plugin made to the runtime's service. Answer it by sending an encoded ttrpc
/// Response (`rpc::ok`, `rpc::refused`) on `reply`.
pub struct Incoming {
    pub service: String,
    pub method: String,
    pub payload: Vec<u8>,
    pub reply: oneshot::Sender<Vec<u8>>,
}

struct Shared {
    out: mpsc::UnboundedSender<Vec<u8>>,
    pending: Mutex<HashMap<u32, oneshot::Sender<Vec<u8>>>>,
    next_stream: AtomicU32,
    closed: watch::Sender<bool>,
}

impl Shared {
    fn close(&self) {
        self.closed.send_replace(true);
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

#[derive(Clone)]
pub struct Conn {
    shared: Arc<Shared>,
}

impl Conn {
    /// Starts serving `socket`; the plugin's calls arrive on the receiver.
    pub fn start(socket: UnixStream) -> (Conn, mpsc::Receiver<Incoming>) {
        let (read, write) = socket.into_split();
        let (out, out_rx) = mpsc::unbounded_channel();
        let (closed, _) = watch::channel(false);
        let shared = Arc::new(Shared {
            out,
            pending: Mutex::new(HashMap::new()),
            next_stream: AtomicU32::new(1),
            closed,
        });
        let (incoming, incoming_rx) = mpsc::channel(16);
        tokio::spawn(write_loop(write, out_rx, shared.clone()));
        tokio::spawn(read_loop(read, shared.clone(), incoming));
        (Conn { shared }, incoming_rx)
    }

    /// Calls `service`/`method` of the plugin with an encoded argument; the plugin gets
    /// `timeout` as its deadline.
    pub async fn call(
        &self,
        service: &str,
        method: &str,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, CallError> {
        let request = rpc::Request {
            service: service.to_owned(),
            method: method.to_owned(),
            payload,
            timeout_nano: i64::try_from(timeout.as_nanos()).unwrap_or(i64::MAX),
            metadata: Vec::new(),
        }
        .encode_to_vec();
        let (tx, rx) = oneshot::channel();
        // The stream id is taken and the frames queued under one lock: ttrpc's peer refuses a
        // stream id lower than one it has seen ("StreamID cannot be re-used and must
        // increment"), so two calls racing must reach the socket in the order of their ids.
        let (stream, sent) = {
            let mut pending = self
                .shared
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if *self.shared.closed.borrow() {
                return Err(CallError::Closed);
            }
            let stream = self.shared.next_stream.fetch_add(2, Ordering::SeqCst);
            let msg = Message {
                stream,
                kind: Kind::Request,
                flags: 0,
                payload: request,
            };
            let bytes = message::encode(&msg).map_err(|e| CallError::Decode(e.to_string()))?;
            let mut frames = Vec::with_capacity(bytes.len() + bytes.len() / 512 + 8);
            mux::encode(mux::PLUGIN_SERVICE, &bytes, &mut frames);
            pending.insert(stream, tx);
            (stream, self.shared.out.send(frames).is_ok())
        };
        if !sent {
            self.shared.close();
            return Err(CallError::Closed);
        }
        let answer = match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => return Err(CallError::Closed),
            Err(_) => {
                self.shared
                    .pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&stream);
                return Err(CallError::Timeout(timeout));
            }
        };
        match rpc::outcome(&answer) {
            Ok(Ok(payload)) => Ok(payload),
            Ok(Err(status)) => Err(CallError::Status {
                code: status.code,
                message: status.message,
            }),
            Err(e) => Err(CallError::Decode(e.to_string())),
        }
    }

    pub fn close(&self) {
        self.shared.close();
    }

    pub fn is_closed(&self) -> bool {
        *self.shared.closed.borrow()
    }

    /// Resolves once the connection is closed, for whatever reason.
    pub async fn closed(&self) {
        until_set(&mut self.shared.closed.subscribe()).await;
    }
}

/// Resolves once the flag is true (or its sender is gone). No borrow of the flag is held
/// across an await, so the futures waiting on it stay `Send`.
pub async fn until_set(flag: &mut watch::Receiver<bool>) {
    loop {
        if *flag.borrow_and_update() {
            return;
        }
        if flag.changed().await.is_err() {
            return;
        }
    }
}

async fn write_loop(
    mut write: tokio::net::unix::OwnedWriteHalf,
    mut out: mpsc::UnboundedReceiver<Vec<u8>>,
    shared: Arc<Shared>,
) {
    let mut closed = shared.closed.subscribe();
    loop {
        tokio::select! {
            next = out.recv() => match next {
                Some(bytes) => {
                    if write.write_all(&bytes).await.is_err() {
                        break;
                    }
                }
                None => break,
            },
            () = until_set(&mut closed) => break,
        }
    }
    shared.close();
    let _ = write.shutdown().await;
}

async fn read_loop(
    mut read: tokio::net::unix::OwnedReadHalf,
    shared: Arc<Shared>,
    incoming: mpsc::Sender<Incoming>,
) {
    let mut closed = shared.closed.subscribe();
    let mut trunk = BytesMut::with_capacity(8192);
    // Bytes of each stream not yet a whole ttrpc message: the plugin's, the runtime's.
    let mut streams = [BytesMut::new(), BytesMut::new()];
    loop {
        let n = tokio::select! {
            n = read.read_buf(&mut trunk) => n,
            () = until_set(&mut closed) => break,
        };
        match n {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if let Err(e) = route(&mut trunk, &mut streams, &shared, &incoming) {
            tracing::warn!(error = %e, "NRI plugin broke the protocol; closing its connection");
            break;
        }
    }
    shared.close();
}

/// Delivers every whole message in `trunk`.
fn route(
    trunk: &mut BytesMut,
    streams: &mut [BytesMut; 2],
    shared: &Arc<Shared>,
    incoming: &mpsc::Sender<Incoming>,
) -> Result<(), String> {
    while let Some(frame) = mux::decode(trunk).map_err(|e| e.to_string())? {
        // Streams NRI does not define are dropped, as NRI's own multiplexer does.
        let Some(buf) = streams.get_mut(frame.conn.wrapping_sub(1) as usize) else {
            continue;
        };
        buf.extend_from_slice(&frame.payload);
        while let Some(msg) = message::decode(buf).map_err(|e| e.to_string())? {
            match (frame.conn, msg.kind) {
                (mux::PLUGIN_SERVICE, Kind::Response) => {
                    let waiter = shared
                        .pending
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&msg.stream);
                    // A caller that gave up (timed out) is gone: the late answer is dropped.
                    if let Some(w) = waiter {
                        let _ = w.send(msg.payload);
                    }
                }
                (mux::RUNTIME_SERVICE, Kind::Request) => serve(msg, shared, incoming)?,
                (conn, kind) => return Err(format!("a {kind:?} on stream {conn}")),
            }
        }
    }
    Ok(())
}

/// Hands a request of the plugin to the runtime and answers it on its stream when done.
fn serve(
    msg: Message,
    shared: &Arc<Shared>,
    incoming: &mpsc::Sender<Incoming>,
) -> Result<(), String> {
    let request = rpc::Request::decode(msg.payload.as_slice()).map_err(|e| e.to_string())?;
    let (reply, answer) = oneshot::channel();
    let call = Incoming {
        service: request.service,
        method: request.method,
        payload: request.payload,
        reply,
    };
    let (shared, incoming, stream) = (shared.clone(), incoming.clone(), msg.stream);
    tokio::spawn(async move {
        let response = match incoming.send(call).await {
            Ok(()) => answer.await.unwrap_or_else(|_| {
                rpc::refused(rpc::UNIMPLEMENTED, "the runtime did not answer".into())
            }),
            Err(_) => rpc::refused(rpc::UNIMPLEMENTED, "the runtime is not listening".into()),
        };
        let msg = Message {
            stream,
            kind: Kind::Response,
            flags: 0,
            payload: response,
        };
        if let Ok(bytes) = message::encode(&msg) {
            let mut frames = Vec::with_capacity(bytes.len() + 64);
            mux::encode(mux::RUNTIME_SERVICE, &bytes, &mut frames);
            let _ = shared.out.send(frames);
        }
    });
    Ok(())
}
