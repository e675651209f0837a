//! A SPDY/3.1 connection over any byte stream (a TCP or TLS socket, or a WebSocket tunnel):
//! one task reads and decodes frames and feeds `proto::Conn`; streams are handles that send
//! through a shared writer and receive from their own inbox.
//!
//! Invariants:
//! - frames are written under one writer lock, and any state change that decides a frame's
//!   content or order (a new stream id, a header block, a send window) happens under that
//!   same lock, so frames reach the wire in the order the state saw them;
//! - received bytes are credit taken: from the stream's inbox (`Settings::inbox_bytes`), from
//!   the connection's budget (`Settings::conn_inbox_bytes`) and from the peer's windows. The
//!   reader takes it before it hands a payload on and waits while there is none, which stops
//!   reading the socket: backpressure instead of unbounded buffers. A consumer gives it back
//!   only when it asks for more (its previous bytes written on) or goes, never on taking them;
//! - a payload held is never a small slice of a big read buffer (`unpinned`): what the budget
//!   counts is what stays allocated, within a factor of `PIN_SHARE`;
//! - when the connection ends (EOF, error, protocol error, idle timeout, `close`), every
//!   stream sees it: receives end with an error and sends fail;
//! - a stream handle dropped before both sides ended it resets the stream (CANCEL).

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, Semaphore, mpsc, oneshot};

use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;

use super::codec::{Decoder, Encoder};
use super::frame::{Data, Frame, GoAwayStatus, Limits, RstStatus, StreamId};
use super::headers::HeaderBlock;
use super::proto::{Conn, Event, Role, SendError};
use super::splice::{self, Pipe};
use crate::stream::idle::Idle;

/// The largest DATA frame this end writes by default. Go peers read any size up to the 16 MiB
/// the format allows; 128 KiB is few syscalls and frames per megabyte without a peer waiting
/// long for a whole frame.
pub const MAX_SEND_FRAME: usize = 128 * 1024;
/// How much one splice from a source socket may take: several frames' worth when the source
/// is ahead (fewer wake-ups of this end than a frame per splice; measured 1640 against 1340
/// MiB/s out of a pod).
const SPLICE_BYTES: usize = 512 * 1024;
/// How much one read of the socket may take: several frames per read when the peer is ahead.
/// Also the size of each of the reader's buffers: a frame left unfinished at a buffer's end
/// is copied into the next, so these are several times `MAX_SEND_FRAME` (Go peers send 32 KiB).
const READ_BUF: usize = 512 * 1024;
/// A payload under `1 / PIN_SHARE` of a read buffer is copied out of it rather than sliced,
/// so bytes left unconsumed pin at most `PIN_SHARE` times their size of read buffers (a
/// 1-byte slice would keep all 512 KiB alive). Go peers' 32 KiB frames are copied; this end's
/// 128 KiB ones are not.
const PIN_SHARE: usize = 8;
/// Received bytes one connection holds for its consumers before it stops reading the socket.
/// A stream's inbox is 256 KiB and a connection may have 256 streams: without this, a client
/// forwarding to pod ports that never read parks 64 MiB per connection. 4 MiB is 16 inboxes,
/// more than a few busy streams use at full rate, and bounds what a connection pins (at most
/// `PIN_SHARE` times it in read buffers).
pub const CONN_INBOX_BYTES: usize = 4 << 20;

#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub limits: Limits,
    /// Streams open at once on one connection.
    pub max_streams: usize,
    /// The connection ends after this long without a frame either way.
    pub idle_timeout: Duration,
    /// Received bytes a stream buffers before the connection stops reading.
    pub inbox_bytes: usize,
    /// Received bytes all streams together buffer before the connection stops reading.
    pub conn_inbox_bytes: usize,
    /// The receive window advertised to the peer, for the connection and each stream.
    pub recv_window: u32,
    /// The largest DATA frame written.
    pub max_data_frame: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            limits: Limits::default(),
            max_streams: 256,
            idle_timeout: Duration::from_secs(4 * 3600),
            inbox_bytes: 256 * 1024,
            conn_inbox_bytes: CONN_INBOX_BYTES,
            // One WINDOW_UPDATE per 512 KiB consumed instead of one per 32 KiB frame.
            recv_window: 1 << 20,
            max_data_frame: MAX_SEND_FRAME,
        }
    }
}

type BoxWrite = Pin<Box<dyn AsyncWrite + Send>>;

/// Where frames go: a plain TCP socket (DATA payloads may then be spliced into it) or any
/// other byte stream.
enum WriteIo {
    Tcp(OwnedWriteHalf),
    Other(BoxWrite),
}

impl AsyncWrite for WriteIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            WriteIo::Tcp(w) => Pin::new(w).poll_write(cx, buf),
            WriteIo::Other(w) => w.as_mut().poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            WriteIo::Tcp(w) => Pin::new(w).poll_write_vectored(cx, bufs),
            WriteIo::Other(w) => w.as_mut().poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            WriteIo::Tcp(w) => w.is_write_vectored(),
            WriteIo::Other(w) => w.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteIo::Tcp(w) => Pin::new(w).poll_flush(cx),
            WriteIo::Other(w) => w.as_mut().poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteIo::Tcp(w) => Pin::new(w).poll_shutdown(cx),
            WriteIo::Other(w) => w.as_mut().poll_shutdown(cx),
        }
    }
}

struct Writer {
    io: WriteIo,
    enc: Encoder,
    buf: Vec<u8>,
    /// A frame was begun and not finished (see `begin`).
    torn: bool,
}

impl Writer {
    /// Starts writing a frame. A frame left half-written (its writer dropped mid-write, as a
    /// forward is when the other direction fails) leaves the peer mid-frame: nothing may
    /// follow it, the connection is done.
    fn begin(&mut self) -> io::Result<()> {
        if self.torn {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "SPDY connection unusable: a frame was cut short",
            ));
        }
        self.torn = true;
        Ok(())
    }

    async fn write(&mut self, frames: &[Frame]) -> io::Result<()> {
        self.begin()?;
        self.buf.clear();
        for f in frames {
            self.enc
                .encode(f, &mut self.buf)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        }
        self.io.write_all(&self.buf).await?;
        self.io.flush().await?;
        self.torn = false;
        Ok(())
    }

    /// One DATA frame with `payload` straight from the caller's buffer: its head and payload
    /// in one vectored write where the transport takes those, else copied behind the head.
    async fn write_data(&mut self, stream_id: StreamId, payload: &[u8]) -> io::Result<()> {
        self.begin()?;
        self.buf.clear();
        Data::encode_head_of(stream_id, false, payload.len(), &mut self.buf);
        if !self.io.is_write_vectored() {
            self.buf.extend_from_slice(payload);
            self.io.write_all(&self.buf).await?;
        } else {
            let (mut head, mut rest) = (&self.buf[..], payload);
            while !head.is_empty() {
                let n = self
                    .io
                    .write_vectored(&[io::IoSlice::new(head), io::IoSlice::new(rest)])
                    .await?;
                if n == 0 {
                    return Err(io::ErrorKind::WriteZero.into());
                }
                let in_head = n.min(head.len());
                head = &head[in_head..];
                rest = &rest[n - in_head..];
            }
            self.io.write_all(rest).await?;
        }
        self.io.flush().await?;
        self.torn = false;
        Ok(())
    }

    /// One DATA frame whose `len` payload bytes come from `pipe`, moved into the socket by
    /// the kernel. Only on a TCP socket (`Shared::can_splice`).
    async fn splice_data(
        &mut self,
        stream_id: StreamId,
        pipe: &mut Pipe,
        len: usize,
    ) -> io::Result<()> {
        self.begin()?;
        let WriteIo::Tcp(tcp) = &self.io else {
            self.torn = false; // nothing was written
            return Err(io::ErrorKind::Unsupported.into());
        };
        self.buf.clear();
        Data::encode_head_of(stream_id, false, len, &mut self.buf);
        splice::send_more(tcp.as_ref(), &self.buf).await?;
        pipe.drain(tcp.as_ref(), len).await?;
        self.torn = false;
        Ok(())
    }
}

enum Inbound {
    Data(Bytes, u32),
    Fin,
    Reset(RstStatus),
}

struct Inbox {
    tx: mpsc::UnboundedSender<Inbound>,
    credit: Arc<Semaphore>,
}

#[derive(Default)]
struct Tables {
    inboxes: HashMap<StreamId, Inbox>,
    replies: HashMap<StreamId, oneshot::Sender<()>>,
}

struct State {
    proto: Conn,
    tables: Tables,
}

struct Shared {
    state: Mutex<State>,
    /// Credit of the connection's budget of received bytes not yet consumed.
    budget: Semaphore,
    writer: tokio::sync::Mutex<Writer>,
    /// Send windows opened, or the connection ended.
    window: Notify,
    closed: AtomicBool,
    closed_notify: Notify,
    /// Touched by every frame either way.
    idle: Idle,
    settings: Settings,
    /// The connection is on a plain TCP socket: DATA payloads may be spliced into it.
    can_splice: bool,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn touch(&self) {
        self.idle.touch();
    }

    fn check_open(&self) -> io::Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "SPDY connection closed",
            ))
        } else {
            Ok(())
        }
    }

    async fn write(&self, frames: &[Frame]) -> io::Result<()> {
        self.check_open()?;
        let r = self.writer.lock().await.write(frames).await;
        self.touch();
        r
    }

    /// Decides a frame from the state and writes it, both under the writer lock.
    async fn act(&self, f: impl FnOnce(&mut State) -> Result<Frame, SendError>) -> io::Result<()> {
        self.check_open()?;
        let mut w = self.writer.lock().await;
        let frame = f(&mut self.state()).map_err(send_error)?;
        let r = w.write(std::slice::from_ref(&frame)).await;
        self.touch();
        r
    }

    /// Gives back the credit of `bytes` received on stream `id` (`permits` of its inbox and of
    /// the budget): consumed, or dropped unread. The WINDOW_UPDATEs due go out on a task of
    /// their own, so that a consumer never waits on the writer for them.
    fn consumed(
        self: &Arc<Self>,
        id: StreamId,
        inbox: Option<&Semaphore>,
        permits: usize,
        bytes: usize,
    ) {
        if let Some(inbox) = inbox {
            inbox.add_permits(permits);
        }
        self.budget.add_permits(permits);
        let bytes = u32::try_from(bytes).unwrap_or(u32::MAX);
        let frames = self.state().proto.consumed(id, bytes);
        if frames.is_empty() || self.closed.load(Ordering::Acquire) {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let shared = self.clone();
            rt.spawn(async move {
                let _ = shared.write(&frames).await;
            });
        }
    }

    fn mark_closed(&self) {
        self.closed.store(true, Ordering::Release);
        let tables = std::mem::take(&mut self.state().tables);
        for inbox in tables.inboxes.values() {
            inbox.credit.close();
        }
        drop(tables);
        self.budget.close();
        self.window.notify_waiters();
        self.closed_notify.notify_waiters();
    }
}

fn send_error(e: SendError) -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, e)
}

/// This end of a connection: opens streams (clients) and ends the connection.
#[derive(Clone)]
pub struct Connection {
    shared: Arc<Shared>,
}

/// Streams the peer opens, in order; None once the connection has ended.
pub struct Incoming {
    rx: mpsc::Receiver<Stream>,
}

impl Incoming {
    pub async fn next(&mut self) -> Option<Stream> {
        self.rx.recv().await
    }
}

/// Starts a connection over `io`; the returned task reads until the connection ends.
pub fn start<T>(
    io: T,
    role: Role,
    settings: Settings,
) -> (Connection, Incoming, tokio::task::JoinHandle<()>)
where
    T: AsyncRead + AsyncWrite + Send + 'static,
{
    let (rd, wr) = tokio::io::split(io);
    start_on(
        Box::pin(rd),
        WriteIo::Other(Box::pin(wr)),
        Bytes::new(),
        role,
        settings,
    )
}

/// Starts a connection over a plain TCP socket, whose first bytes (`read`) were already read
/// from it. Its streams may splice DATA payloads (`SendHalf::splice_from`).
pub fn start_tcp(
    tcp: TcpStream,
    read: Bytes,
    role: Role,
    settings: Settings,
) -> (Connection, Incoming, tokio::task::JoinHandle<()>) {
    let (rd, wr) = tcp.into_split();
    start_on(Box::pin(rd), WriteIo::Tcp(wr), read, role, settings)
}

fn start_on(
    rd: Pin<Box<dyn AsyncRead + Send>>,
    wr: WriteIo,
    read: Bytes,
    role: Role,
    settings: Settings,
) -> (Connection, Incoming, tokio::task::JoinHandle<()>) {
    let can_splice = matches!(wr, WriteIo::Tcp(_));
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            proto: Conn::new(role, settings.max_streams),
            tables: Tables::default(),
        }),
        budget: Semaphore::new(settings.conn_inbox_bytes),
        writer: tokio::sync::Mutex::new(Writer {
            io: wr,
            enc: Encoder::new(),
            buf: Vec::new(),
            torn: false,
        }),
        window: Notify::new(),
        closed: AtomicBool::new(false),
        closed_notify: Notify::new(),
        idle: Idle::new(settings.idle_timeout),
        settings,
        can_splice,
    });
    let (tx, rx) = mpsc::channel(16);
    let reader = Reader {
        shared: shared.clone(),
        incoming: tx,
        dec: Decoder::new(settings.limits),
    };
    let task = tokio::spawn(reader.run(rd, read));
    (Connection { shared }, Incoming { rx }, task)
}

impl Connection {
    /// Opens a stream and waits for the peer's SYN_REPLY.
    pub async fn open(&self, headers: HeaderBlock) -> io::Result<Stream> {
        let (tx, rx) = oneshot::channel();
        let mut opened = None;
        self.shared
            .act(|st| {
                let frame = st.proto.open(headers.clone(), false)?;
                if let Frame::SynStream(s) = &frame {
                    st.tables.replies.insert(s.stream_id, tx);
                    opened = Some((
                        s.stream_id,
                        register(&mut st.tables, s.stream_id, &self.shared),
                    ));
                }
                Ok(frame)
            })
            .await?;
        let (id, (inbox, credit)) = opened.ok_or_else(|| io::Error::other("no stream opened"))?;
        let stream = Stream::new(id, headers, self.shared.clone(), inbox, credit);
        rx.await.map_err(|_| {
            io::Error::new(io::ErrorKind::ConnectionReset, "stream refused or reset")
        })?;
        Ok(stream)
    }

    /// Sends GOAWAY and ends the connection.
    pub async fn close(&self) {
        let frame = self.shared.state().proto.go_away(GoAwayStatus::Ok);
        let _ = self.shared.write(&[frame]).await;
        let _ = self.shared.writer.lock().await.io.shutdown().await;
        self.shared.mark_closed();
    }

    /// Resolves once the connection has ended.
    pub async fn closed(&self) {
        loop {
            let notified = self.shared.closed_notify.notified();
            if self.shared.closed.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }

    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }
}

fn register(
    tables: &mut Tables,
    id: StreamId,
    shared: &Shared,
) -> (mpsc::UnboundedReceiver<Inbound>, Arc<Semaphore>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let credit = Arc::new(Semaphore::new(shared.settings.inbox_bytes));
    tables.inboxes.insert(
        id,
        Inbox {
            tx,
            credit: credit.clone(),
        },
    );
    (rx, credit)
}

struct Reader {
    shared: Arc<Shared>,
    incoming: mpsc::Sender<Stream>,
    dec: Decoder,
}

impl Reader {
    async fn run(mut self, mut rd: Pin<Box<dyn AsyncRead + Send>>, read: Bytes) {
        let mut bufs = ReadBufs::new();
        bufs.current().extend_from_slice(&read);
        self.shared.touch();
        let advertised = {
            let window = self.shared.settings.recv_window;
            self.shared.state().proto.advertise_recv_window(window)
        };
        if let Err(e) = self.shared.write(&advertised).await {
            tracing::debug!(error = %e, "SPDY connection ended before it started");
            self.shared.mark_closed();
            return;
        }
        let why = loop {
            match self.drain(bufs.current()).await {
                Ok(()) => {}
                Err(e) => break e,
            }
            let buf = bufs.with_room();
            tokio::select! {
                n = rd.read_buf(buf) => match n {
                    Ok(0) => break "peer closed the connection".to_owned(),
                    Ok(_) => self.shared.touch(),
                    Err(e) => break format!("reading: {e}"),
                },
                () = self.shared.idle.expired() => {
                    let frame = self.shared.state().proto.go_away(GoAwayStatus::Ok);
                    let _ = self.shared.write(&[frame]).await;
                    break "idle timeout".to_owned();
                }
                () = self.shared.closed_notify.notified() => break "closed".to_owned(),
            }
        };
        tracing::debug!(reason = %why, "SPDY connection ended");
        self.shared.mark_closed();
        let _ = self.shared.writer.lock().await.io.shutdown().await;
    }

    /// Handles every whole frame in `buf`.
    async fn drain(&mut self, buf: &mut BytesMut) -> Result<(), String> {
        loop {
            self.shared.check_open().map_err(|e| e.to_string())?;
            let frame = match self.dec.decode(buf) {
                Ok(Some(f)) => f,
                Ok(None) => return Ok(()),
                Err(e) => return Err(self.fail(e.to_string()).await),
            };
            let outcome = self.shared.state().proto.recv(frame);
            let outcome = match outcome {
                Ok(o) => o,
                Err(e) => return Err(self.fail(e.to_string()).await),
            };
            if !outcome.replies.is_empty() {
                self.shared
                    .write(&outcome.replies)
                    .await
                    .map_err(|e| format!("writing: {e}"))?;
            }
            self.dispatch(outcome.event).await?;
        }
    }

    /// Ends the connection on a protocol error: GOAWAY PROTOCOL_ERROR, then close.
    async fn fail(&self, why: String) -> String {
        let frame = self
            .shared
            .state()
            .proto
            .go_away(GoAwayStatus::ProtocolError);
        let _ = self.shared.write(&[frame]).await;
        why
    }

    async fn dispatch(&mut self, event: Event) -> Result<(), String> {
        match event {
            Event::Opened {
                stream_id,
                headers,
                fin,
            } => self.opened(stream_id, headers, fin).await,
            Event::Replied { stream_id, fin } => {
                let mut st = self.shared.state();
                if let Some(tx) = st.tables.replies.remove(&stream_id) {
                    let _ = tx.send(());
                }
                if fin {
                    deliver_now(&st.tables, stream_id, Inbound::Fin);
                }
            }
            Event::Data {
                stream_id,
                payload,
                fin,
            } => {
                self.deliver(stream_id, payload).await?;
                if fin {
                    deliver_now(&self.shared.state().tables, stream_id, Inbound::Fin);
                }
            }
            Event::Finished { stream_id } => {
                deliver_now(&self.shared.state().tables, stream_id, Inbound::Fin);
            }
            Event::Reset { stream_id, status } => {
                let mut st = self.shared.state();
                st.tables.replies.remove(&stream_id);
                if let Some(inbox) = st.tables.inboxes.remove(&stream_id) {
                    let _ = inbox.tx.send(Inbound::Reset(status));
                    inbox.credit.close();
                }
            }
            Event::WindowOpened => self.shared.window.notify_waiters(),
            Event::None | Event::Pong { .. } | Event::GoAway { .. } => {}
        }
        Ok(())
    }

    async fn opened(&mut self, id: StreamId, headers: HeaderBlock, fin: bool) {
        let (inbox, credit) = register(&mut self.shared.state().tables, id, &self.shared);
        let stream = Stream::new(id, headers, self.shared.clone(), inbox, credit);
        if fin {
            deliver_now(&self.shared.state().tables, id, Inbound::Fin);
        }
        // Nobody takes new streams any more: the stream is dropped, which resets it.
        let _ = self.incoming.send(stream).await;
    }

    /// Hands `payload` to its stream, waiting while the stream's inbox or the connection's
    /// budget is full. Err when the connection went idle meanwhile.
    async fn deliver(&self, id: StreamId, payload: Bytes) -> Result<(), String> {
        let len = payload.len();
        let found = {
            let st = self.shared.state();
            st.tables
                .inboxes
                .get(&id)
                .map(|i| (i.tx.clone(), i.credit.clone()))
        };
        let dropped = || self.shared.state().proto.consumed(id, len as u32);
        let Some((tx, credit)) = found else {
            // Nobody will read it: dropped, so consumed now.
            return self.write_updates(dropped()).await;
        };
        let settings = &self.shared.settings;
        let want = len.clamp(1, settings.inbox_bytes.min(settings.conn_inbox_bytes));
        let taken = tokio::select! {
            taken = take_credit(&credit, &self.shared.budget, want) => taken,
            () = self.shared.idle.expired() => return Err("idle timeout".to_owned()),
        };
        match taken {
            Taken::None => self.write_updates(dropped()).await,
            Taken::Stream => Ok(()), // the connection closed
            Taken::Both => {
                if tx
                    .send(Inbound::Data(unpinned(payload), want as u32))
                    .is_err()
                {
                    // The stream's reader went meanwhile.
                    self.shared.consumed(id, Some(&credit), want, len);
                }
                Ok(())
            }
        }
    }

    async fn write_updates(&self, frames: Vec<Frame>) -> Result<(), String> {
        if frames.is_empty() {
            return Ok(());
        }
        self.shared
            .write(&frames)
            .await
            .map_err(|e| format!("writing: {e}"))
    }
}

/// Which credit `take_credit` got.
#[derive(Debug, PartialEq, Eq)]
enum Taken {
    /// Neither: the stream's reader is gone.
    None,
    /// The stream's only: the connection closed while waiting for the budget.
    Stream,
    Both,
}

/// Takes `want` permits of a stream's inbox, then as many of the connection's budget.
async fn take_credit(inbox: &Semaphore, budget: &Semaphore, want: usize) -> Taken {
    let Ok(permits) = inbox.acquire_many(want as u32).await else {
        return Taken::None;
    };
    permits.forget();
    let Ok(permits) = budget.acquire_many(want as u32).await else {
        return Taken::Stream;
    };
    permits.forget();
    Taken::Both
}

/// `payload`, copied out of the read buffer it slices when it is small beside it: held in an
/// inbox, a slice keeps its whole buffer alive.
fn unpinned(payload: Bytes) -> Bytes {
    if payload.len() < READ_BUF / PIN_SHARE {
        Bytes::copy_from_slice(&payload)
    } else {
        payload
    }
}

/// The buffers the reader reads into, in turn. Received payloads are handed on as slices of
/// them (but for small ones, copied: `unpinned`), so a buffer is free again only once its
/// payloads have all been consumed; taking the
/// next buffer back then (instead of allocating a fresh one per read, which the allocator maps
/// and the kernel zeroes page by page) keeps a bulk transfer in the same few buffers.
struct ReadBufs {
    ring: [BytesMut; READ_BUFS],
    at: usize,
}

/// Enough that the oldest is free again when its turn comes: a stream's inbox holds at most
/// `Settings::inbox_bytes` (256 KiB), so all but the newest buffer or two have been consumed.
const READ_BUFS: usize = 3;

impl ReadBufs {
    fn new() -> ReadBufs {
        ReadBufs {
            ring: std::array::from_fn(|_| BytesMut::new()),
            at: 0,
        }
    }

    fn current(&mut self) -> &mut BytesMut {
        &mut self.ring[self.at]
    }

    /// The current buffer with room for a read, and for the whole of the frame begun at its
    /// front: the next one in turn when this one is nearly full, the undecoded rest moved along.
    fn with_room(&mut self) -> &mut BytesMut {
        let cur = &self.ring[self.at];
        let frame = Decoder::wanted(cur).unwrap_or(0);
        let need = (READ_BUF / 4).max(frame.saturating_sub(cur.len()));
        if cur.capacity() - cur.len() >= need {
            return &mut self.ring[self.at];
        }
        let rest = self.ring[self.at].split();
        self.at = (self.at + 1) % READ_BUFS;
        let next = &mut self.ring[self.at];
        let size = READ_BUF.max(frame);
        next.clear();
        if !next.try_reclaim(size) {
            // Still held by payloads not yet consumed (or never allocated): a new one.
            *next = BytesMut::with_capacity(size);
        }
        next.extend_from_slice(&rest);
        next
    }
}

fn deliver_now(tables: &Tables, id: StreamId, msg: Inbound) {
    if let Some(i) = tables.inboxes.get(&id) {
        let _ = i.tx.send(msg);
    }
}

/// Resets the stream when the last handle to it goes, unless both sides ended it.
struct Guard {
    id: StreamId,
    shared: Arc<Shared>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let frame = {
            let mut st = self.shared.state();
            st.tables.inboxes.remove(&self.id);
            st.tables.replies.remove(&self.id);
            st.proto.reset(self.id, RstStatus::Cancel)
        };
        if frame.is_some() {
            tracing::debug!(stream = self.id, "stream dropped while open: resetting it");
        }
        if let (Some(frame), Ok(rt)) = (frame, tokio::runtime::Handle::try_current()) {
            let shared = self.shared.clone();
            rt.spawn(async move {
                let _ = shared.write(&[frame]).await;
            });
        }
    }
}

/// One stream: its headers, and halves to receive and send on it.
pub struct Stream {
    headers: HeaderBlock,
    pub recv: RecvHalf,
    pub send: SendHalf,
}

impl Stream {
    fn new(
        id: StreamId,
        headers: HeaderBlock,
        shared: Arc<Shared>,
        inbox: mpsc::UnboundedReceiver<Inbound>,
        credit: Arc<Semaphore>,
    ) -> Stream {
        let guard = Arc::new(Guard {
            id,
            shared: shared.clone(),
        });
        Stream {
            headers,
            recv: RecvHalf {
                id,
                shared: shared.clone(),
                inbox,
                credit,
                held: None,
                taken: Owed::default(),
                _guard: guard.clone(),
            },
            send: SendHalf {
                id,
                shared,
                _guard: guard,
            },
        }
    }

    pub fn id(&self) -> StreamId {
        self.send.id
    }

    pub fn headers(&self) -> &HeaderBlock {
        &self.headers
    }

    /// Accepts a stream the peer opened (SYN_REPLY).
    pub async fn reply(&self) -> io::Result<()> {
        let id = self.send.id;
        self.send
            .shared
            .act(|st| st.proto.reply(id, HeaderBlock::new()))
            .await
    }

    pub fn into_split(self) -> (RecvHalf, SendHalf) {
        (self.recv, self.send)
    }
}

pub struct RecvHalf {
    id: StreamId,
    shared: Arc<Shared>,
    inbox: mpsc::UnboundedReceiver<Inbound>,
    credit: Arc<Semaphore>,
    /// A FIN or reset `recv_batch` took after data: the next receive answers it.
    held: Option<Inbound>,
    /// The credit of what the last receive handed out, given back by the next one.
    taken: Owed,
    _guard: Arc<Guard>,
}

/// Credit of bytes handed to a consumer and not yet given back.
#[derive(Debug, Default, Clone, Copy)]
struct Owed {
    /// Of the stream's inbox and of the connection's budget.
    permits: usize,
    /// Of the peer's windows.
    bytes: usize,
}

impl Owed {
    fn add(&mut self, payload: &Bytes, permits: u32) {
        self.permits += permits as usize;
        self.bytes += payload.len();
    }
}

impl RecvHalf {
    /// The next bytes from the peer; None once it ended its side. An error when the stream
    /// was reset or the connection ended. Asking for more says that the bytes received before
    /// are consumed: their credit goes back to the peer now, not when they were taken.
    pub async fn recv(&mut self) -> io::Result<Option<Bytes>> {
        self.give_back();
        let next = match self.held.take() {
            Some(held) => Some(held),
            None => self.inbox.recv().await,
        };
        match next {
            Some(Inbound::Data(b, permits)) => {
                self.taken.add(&b, permits);
                Ok(Some(b))
            }
            Some(Inbound::Fin) => Ok(None),
            Some(Inbound::Reset(status)) => Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                format!("stream reset by peer ({status:?})"),
            )),
            None => Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "SPDY connection closed",
            )),
        }
    }

    /// Waits like `recv`, then also takes what else has already arrived, up to about
    /// `max_bytes` in all, appending each piece to `out`: one write of all of them instead of
    /// one per frame. Ok(false) once the peer ended its side (nothing appended then). The
    /// batch's credit goes back with the next call.
    pub async fn recv_batch(&mut self, out: &mut Vec<Bytes>, max_bytes: usize) -> io::Result<bool> {
        let Some(first) = self.recv().await? else {
            return Ok(false);
        };
        let mut taken = first.len();
        out.push(first);
        while taken < max_bytes {
            match self.inbox.try_recv() {
                Ok(Inbound::Data(b, permits)) => {
                    self.taken.add(&b, permits);
                    taken += b.len();
                    out.push(b);
                }
                Ok(end) => {
                    self.held = Some(end);
                    break;
                }
                Err(_) => break,
            }
        }
        Ok(true)
    }

    /// Gives back the credit of what was last handed out.
    fn give_back(&mut self) {
        let Owed { permits, bytes } = std::mem::take(&mut self.taken);
        if permits > 0 {
            self.shared
                .consumed(self.id, Some(&self.credit), permits, bytes);
        }
    }
}

impl Drop for RecvHalf {
    fn drop(&mut self) {
        // Whatever arrives from now on has no reader: the connection must not wait for one.
        self.credit.close();
        self.inbox.close();
        while let Ok(msg) = self.inbox.try_recv() {
            if let Inbound::Data(b, permits) = msg {
                self.taken.add(&b, permits);
            }
        }
        self.give_back();
    }
}

pub struct SendHalf {
    id: StreamId,
    shared: Arc<Shared>,
    _guard: Arc<Guard>,
}

impl SendHalf {
    pub fn id(&self) -> StreamId {
        self.id
    }

    /// Sends `data`, in frames of at most `Settings::max_data_frame`, each as the send windows
    /// allow.
    pub async fn send(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let want = data.len().min(self.shared.settings.max_data_frame);
            let n = self.send_some(&data[..want]).await?;
            data = &data[n..];
        }
        Ok(())
    }

    async fn send_some(&self, data: &[u8]) -> io::Result<usize> {
        let (mut w, n) = self.window(data.len()).await?;
        w.write_data(self.id, &data[..n]).await?;
        self.shared.touch();
        Ok(n)
    }

    /// Waits until the send windows allow some of `want` bytes: the writer, held, and how
    /// many bytes the frame may carry (taken from the windows).
    async fn window(
        &self,
        want: usize,
    ) -> io::Result<(tokio::sync::MutexGuard<'_, Writer>, usize)> {
        loop {
            let opened = self.shared.window.notified();
            tokio::pin!(opened);
            opened.as_mut().enable();
            self.shared.check_open()?;
            let w = self.shared.writer.lock().await;
            let n = self
                .shared
                .state()
                .proto
                .take_send_window(self.id, want)
                .map_err(send_error)?;
            if n > 0 {
                return Ok((w, n));
            }
            drop(w);
            opened.await;
        }
    }

    /// Whether `splice_from` works here: the connection is on a plain TCP socket.
    pub fn can_splice(&self) -> bool {
        self.shared.can_splice
    }

    /// Sends what `src` has ready (waiting for some, at most one frame's worth) as DATA
    /// frames whose payloads the kernel moves from socket to socket through `pipe`; 0 at end
    /// of file. Only where `can_splice`.
    pub async fn splice_from(&self, src: &TcpStream, pipe: &mut Pipe) -> io::Result<usize> {
        let n = pipe.fill(src, SPLICE_BYTES).await?;
        while pipe.held() > 0 {
            let want = pipe.held().min(self.shared.settings.max_data_frame);
            let (mut w, k) = self.window(want).await?;
            w.splice_data(self.id, pipe, k).await?;
            self.shared.touch();
        }
        Ok(n)
    }

    /// Ends this side of the stream (FIN); the peer may go on sending.
    pub async fn close(&self) -> io::Result<()> {
        let id = self.id;
        self.shared.act(|st| st.proto.close(id)).await
    }

    /// Resets the stream.
    pub async fn reset(&self, status: RstStatus) -> io::Result<()> {
        let frame = {
            let mut st = self.shared.state();
            st.tables.inboxes.remove(&self.id);
            st.proto.reset(self.id, status)
        };
        match frame {
            Some(f) => self.shared.write(&[f]).await,
            None => Ok(()),
        }
    }
}

#[cfg(test)]
#[path = "conn_tests.rs"]
mod tests;
