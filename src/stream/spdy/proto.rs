//! SPDY/3.1 connection state, pure: the stream table, flow-control windows, pings, GOAWAY and
//! resets. `recv` takes a decoded frame and says what the application should see and which
//! frames go back; the `open`/`reply`/`send`/`close`/`reset` calls check an action against the
//! state and give the frame to write. No I/O here: `conn` drives it over a socket.
//!
//! Invariants:
//! - a stream is in the table from its SYN_STREAM until both sides have ended it (FIN each
//!   way) or either reset it; ids the peer opens strictly increase and have the peer's parity
//!   (clients odd, servers even); at most `max_streams` are open at once;
//! - after a GOAWAY is sent no new peer stream is accepted; after one is received none is
//!   opened.
//!
//! Flow control, and why it is mostly one-sided: Go's SPDY implementation (moby/spdystream,
//! used by kubectl, crictl, kubelet and the API server) neither sends WINDOW_UPDATE nor honours
//! ours. So this end advertises and replenishes its receive windows (a conforming peer needs
//! them) but polices the peer's sends only once the peer shows it does flow control, by a
//! SETTINGS INITIAL_WINDOW_SIZE or a WINDOW_UPDATE: such a peer sending past a stream's window
//! has that stream reset (FLOW_CONTROL_ERROR). For the others memory is bounded by
//! backpressure instead (the connection stops reading while its consumers are behind). Send
//! windows are enforced on the same sign; until then waiting for updates that never come
//! would stall every transfer at 64 KiB.
//!
//! Receive windows are replenished as the application consumes what arrived (`consumed`),
//! never on arrival: a consumer that cannot write its data on (a pod socket nobody reads)
//! stops a conforming peer within one window instead of making this end buffer for it.
//!
//! The receive window this end advertises (`advertise_recv_window`, sent first on every
//! connection) is larger than the 64 KiB default: a WINDOW_UPDATE goes out each time half of
//! it has been consumed, so a bigger window means fewer of those writes per byte moved and a
//! conforming peer that never waits on one.

use std::collections::HashMap;

use bytes::Bytes;

use super::frame::{
    Data, Frame, GoAway, GoAwayStatus, Headers, Ping, RstStatus, RstStream, Settings, StreamId,
    SynReply, SynStream, WindowUpdate, settings,
};
use super::headers::HeaderBlock;

/// The window every stream and the connection start with (SPDY/3.1 default).
pub const DEFAULT_WINDOW: u32 = 64 * 1024;
const MAX_WINDOW: i64 = 0x7fff_ffff;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

impl Role {
    /// Whether `id` (a stream or ping id) was started by this role: clients use odd ids.
    fn started(self, id: u32) -> bool {
        (id % 2 == 1) == (self == Role::Client)
    }
}

/// A session error: the connection ends with GOAWAY PROTOCOL_ERROR.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("SPDY protocol error: {0}")]
pub struct ProtocolError(pub String);

/// An action on a stream that is not possible in its state.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SendError {
    #[error("stream {0} is closed or was reset")]
    Gone(StreamId),
    #[error("stream {0} was already ended by this side")]
    Ended(StreamId),
    #[error("stream {0} was already replied to")]
    Replied(StreamId),
    #[error("the connection is going away")]
    GoingAway,
    #[error("too many open streams")]
    TooManyStreams,
}

/// What the application should see after a received frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    None,
    /// The peer opened a stream; the application replies to it or resets it.
    Opened {
        stream_id: StreamId,
        headers: HeaderBlock,
        fin: bool,
    },
    /// The peer accepted a stream this end opened.
    Replied {
        stream_id: StreamId,
        fin: bool,
    },
    Data {
        stream_id: StreamId,
        payload: Bytes,
        fin: bool,
    },
    /// The peer ended its side of the stream (an empty DATA or HEADERS with FIN).
    Finished {
        stream_id: StreamId,
    },
    Reset {
        stream_id: StreamId,
        status: RstStatus,
    },
    /// Send windows grew: writers waiting for them may go on.
    WindowOpened,
    /// The answer to a ping this end sent.
    Pong {
        id: u32,
    },
    GoAway {
        status: GoAwayStatus,
    },
}

/// An event and the frames to send back because of it.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    pub event: Event,
    pub replies: Vec<Frame>,
}

impl From<Event> for Outcome {
    fn from(event: Event) -> Outcome {
        Outcome {
            event,
            replies: Vec::new(),
        }
    }
}

#[derive(Debug)]
struct StreamState {
    /// This end may still send.
    local_open: bool,
    /// The peer may still send.
    remote_open: bool,
    /// A SYN_REPLY went (for peer streams) or came (for ours).
    replied: bool,
    send_window: i64,
    /// What the peer may still send before a WINDOW_UPDATE: below zero it ignored the window.
    recv_window: i64,
    /// Bytes consumed since the last WINDOW_UPDATE for this stream.
    recv_unacked: u32,
}

#[derive(Debug)]
pub struct Conn {
    role: Role,
    streams: HashMap<StreamId, StreamState>,
    max_streams: usize,
    last_peer_stream: StreamId,
    next_local_stream: StreamId,
    next_ping: u32,
    goaway_sent: bool,
    goaway_received: bool,
    /// The peer showed it does flow control: its windows bind this end, and ours bind it.
    enforce_send_windows: bool,
    initial_send_window: i64,
    conn_send_window: i64,
    /// Bytes consumed (or dropped) since the last WINDOW_UPDATE for the connection.
    conn_recv_unacked: u32,
    /// The receive window advertised for the connection and every stream.
    recv_window: u32,
}

impl Conn {
    pub fn new(role: Role, max_streams: usize) -> Conn {
        let first = if role == Role::Client { 1 } else { 2 };
        Conn {
            role,
            streams: HashMap::new(),
            max_streams,
            last_peer_stream: 0,
            next_local_stream: first,
            next_ping: first,
            goaway_sent: false,
            goaway_received: false,
            enforce_send_windows: false,
            initial_send_window: i64::from(DEFAULT_WINDOW),
            conn_send_window: i64::from(DEFAULT_WINDOW),
            conn_recv_unacked: 0,
            recv_window: DEFAULT_WINDOW,
        }
    }

    /// Raises this end's receive windows to `window`: the SETTINGS that sizes every stream's
    /// and the WINDOW_UPDATE that grows the connection's (SPDY/3.1 has no setting for it).
    pub fn advertise_recv_window(&mut self, window: u32) -> Vec<Frame> {
        let window = window.clamp(DEFAULT_WINDOW, MAX_WINDOW as u32);
        // Streams opened before this goes out get the new size too, as the peer applies it.
        let delta = i64::from(window) - i64::from(self.recv_window);
        for s in self.streams.values_mut() {
            s.recv_window += delta;
        }
        self.recv_window = window;
        let mut frames = vec![Frame::Settings(Settings {
            clear: false,
            entries: vec![settings::Setting {
                flags: 0,
                id: settings::INITIAL_WINDOW_SIZE,
                value: window,
            }],
        })];
        if window > DEFAULT_WINDOW {
            frames.push(window_update(0, window - DEFAULT_WINDOW));
        }
        frames
    }

    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    pub fn last_peer_stream(&self) -> StreamId {
        self.last_peer_stream
    }

    /// Takes one received frame.
    pub fn recv(&mut self, frame: Frame) -> Result<Outcome, ProtocolError> {
        match frame {
            Frame::SynStream(f) => self.recv_syn_stream(f),
            Frame::SynReply(f) => Ok(self.recv_syn_reply(f)),
            Frame::Data(f) => Ok(self.recv_data(f)),
            Frame::Headers(f) => Ok(self.recv_headers(f)),
            Frame::RstStream(f) => Ok(self.recv_rst(f)),
            Frame::Settings(f) => Ok(self.recv_settings(&f)),
            Frame::Ping(p) if self.role.started(p.id) => Ok(Event::Pong { id: p.id }.into()),
            Frame::Ping(p) => Ok(Outcome {
                event: Event::None,
                replies: vec![Frame::Ping(p)],
            }),
            Frame::GoAway(g) => {
                self.goaway_received = true;
                Ok(Event::GoAway { status: g.status }.into())
            }
            Frame::WindowUpdate(w) => self.recv_window_update(w),
        }
    }

    fn recv_syn_stream(&mut self, f: SynStream) -> Result<Outcome, ProtocolError> {
        let id = f.stream_id;
        if self.role.started(id) || id <= self.last_peer_stream {
            return Err(ProtocolError(format!(
                "peer opened stream {id} after {} (ids must increase, {} ones only)",
                self.last_peer_stream,
                if self.role == Role::Server {
                    "odd"
                } else {
                    "even"
                }
            )));
        }
        self.last_peer_stream = id;
        if self.goaway_sent {
            return Ok(Event::None.into());
        }
        if self.streams.len() >= self.max_streams {
            return Ok(rst_outcome(id, RstStatus::RefusedStream));
        }
        self.streams.insert(
            id,
            StreamState {
                local_open: !f.unidirectional,
                remote_open: !f.fin,
                replied: false,
                send_window: self.initial_send_window,
                recv_window: i64::from(self.recv_window),
                recv_unacked: 0,
            },
        );
        Ok(Event::Opened {
            stream_id: id,
            headers: f.headers,
            fin: f.fin,
        }
        .into())
    }

    fn recv_syn_reply(&mut self, f: SynReply) -> Outcome {
        let id = f.stream_id;
        let Some(s) = self.streams.get_mut(&id) else {
            return Event::None.into();
        };
        if !self.role.started(id) || s.replied {
            self.streams.remove(&id);
            return rst_outcome(id, RstStatus::StreamInUse);
        }
        s.replied = true;
        if f.fin {
            s.remote_open = false;
        }
        self.forget_if_done(id);
        Event::Replied {
            stream_id: id,
            fin: f.fin,
        }
        .into()
    }

    fn recv_data(&mut self, f: Data) -> Outcome {
        let id = f.stream_id;
        let len = f.payload.len() as u32;
        let Some(s) = self.streams.get_mut(&id) else {
            // A stream already reset or finished here (the peer's frames were in flight): its
            // bytes are dropped, which consumes them.
            return Outcome {
                event: Event::None,
                replies: self.consumed(id, len),
            };
        };
        if !s.remote_open {
            self.streams.remove(&id);
            return self.reset_on_recv(id, len, RstStatus::StreamAlreadyClosed);
        }
        s.recv_window -= i64::from(len);
        if s.recv_window < 0 && self.enforce_send_windows {
            self.streams.remove(&id);
            return self.reset_on_recv(id, len, RstStatus::FlowControlError);
        }
        if f.fin {
            s.remote_open = false;
        }
        let event = if f.payload.is_empty() && f.fin {
            Event::Finished { stream_id: id }
        } else {
            Event::Data {
                stream_id: id,
                payload: f.payload,
                fin: f.fin,
            }
        };
        self.forget_if_done(id);
        Outcome {
            event,
            replies: Vec::new(),
        }
    }

    /// Resets stream `id` (already out of the table) over a DATA frame of `len` bytes, which
    /// is dropped.
    fn reset_on_recv(&mut self, id: StreamId, len: u32, status: RstStatus) -> Outcome {
        let mut replies = self.consumed(id, len);
        replies.push(Frame::RstStream(RstStream::new(id, status)));
        Outcome {
            event: Event::Reset {
                stream_id: id,
                status,
            },
            replies,
        }
    }

    /// The application consumed `n` received bytes of stream `id` (wrote them on, or dropped
    /// them): the WINDOW_UPDATEs that give the peer its credit back, once half a window is due.
    pub fn consumed(&mut self, id: StreamId, n: u32) -> Vec<Frame> {
        let mut frames = Vec::new();
        let half = self.recv_window / 2;
        self.conn_recv_unacked = self.conn_recv_unacked.saturating_add(n);
        if self.conn_recv_unacked >= half {
            frames.push(window_update(0, self.conn_recv_unacked));
            self.conn_recv_unacked = 0;
        }
        // A stream the peer has ended needs no more credit.
        if let Some(s) = self.streams.get_mut(&id).filter(|s| s.remote_open) {
            s.recv_unacked = s.recv_unacked.saturating_add(n);
            if s.recv_unacked >= half {
                frames.push(window_update(id, s.recv_unacked));
                s.recv_window += i64::from(s.recv_unacked);
                s.recv_unacked = 0;
            }
        }
        frames
    }

    fn recv_headers(&mut self, f: Headers) -> Outcome {
        let id = f.stream_id;
        match self.streams.get_mut(&id) {
            Some(s) if f.fin => {
                s.remote_open = false;
                self.forget_if_done(id);
                Event::Finished { stream_id: id }.into()
            }
            _ => Event::None.into(),
        }
    }

    fn recv_rst(&mut self, f: RstStream) -> Outcome {
        match self.streams.remove(&f.stream_id) {
            Some(_) => Event::Reset {
                stream_id: f.stream_id,
                status: f.status,
            }
            .into(),
            None => Event::None.into(),
        }
    }

    fn recv_settings(&mut self, f: &Settings) -> Outcome {
        if let Some(window) = f.get(settings::INITIAL_WINDOW_SIZE) {
            let window = i64::from(window).min(MAX_WINDOW);
            let delta = window - self.initial_send_window;
            self.initial_send_window = window;
            self.enforce_send_windows = true;
            for s in self.streams.values_mut() {
                s.send_window += delta;
            }
            return Event::WindowOpened.into();
        }
        Event::None.into()
    }

    fn recv_window_update(&mut self, w: WindowUpdate) -> Result<Outcome, ProtocolError> {
        self.enforce_send_windows = true;
        let delta = i64::from(w.delta);
        if w.stream_id == 0 {
            self.conn_send_window += delta;
            if self.conn_send_window > MAX_WINDOW {
                return Err(ProtocolError("connection window overflow".into()));
            }
            return Ok(Event::WindowOpened.into());
        }
        let Some(s) = self.streams.get_mut(&w.stream_id) else {
            return Ok(Event::None.into());
        };
        s.send_window += delta;
        if s.send_window > MAX_WINDOW {
            self.streams.remove(&w.stream_id);
            return Ok(rst_outcome(w.stream_id, RstStatus::FlowControlError));
        }
        Ok(Event::WindowOpened.into())
    }

    /// Opens a stream from this end.
    pub fn open(&mut self, headers: HeaderBlock, fin: bool) -> Result<Frame, SendError> {
        if self.goaway_received || self.goaway_sent {
            return Err(SendError::GoingAway);
        }
        if self.streams.len() >= self.max_streams || self.next_local_stream > 0x7fff_fffd {
            return Err(SendError::TooManyStreams);
        }
        let id = self.next_local_stream;
        self.next_local_stream += 2;
        self.streams.insert(
            id,
            StreamState {
                local_open: !fin,
                remote_open: true,
                replied: false,
                send_window: self.initial_send_window,
                recv_window: i64::from(self.recv_window),
                recv_unacked: 0,
            },
        );
        let mut f = SynStream::new(id, headers);
        f.fin = fin;
        Ok(Frame::SynStream(f))
    }

    /// Accepts a stream the peer opened.
    pub fn reply(&mut self, id: StreamId, headers: HeaderBlock) -> Result<Frame, SendError> {
        let s = self.streams.get_mut(&id).ok_or(SendError::Gone(id))?;
        if s.replied || self.role.started(id) {
            return Err(SendError::Replied(id));
        }
        s.replied = true;
        Ok(Frame::SynReply(SynReply {
            stream_id: id,
            fin: false,
            headers,
        }))
    }

    /// How many of `want` bytes stream `id` may send now (0: wait for a window update), taken
    /// from its windows.
    pub fn take_send_window(&mut self, id: StreamId, want: usize) -> Result<usize, SendError> {
        let s = self.streams.get_mut(&id).ok_or(SendError::Gone(id))?;
        if !s.local_open {
            return Err(SendError::Ended(id));
        }
        if !self.enforce_send_windows {
            return Ok(want);
        }
        let allowed = (want as i64)
            .min(s.send_window)
            .min(self.conn_send_window)
            .max(0);
        s.send_window -= allowed;
        self.conn_send_window -= allowed;
        Ok(allowed as usize)
    }

    /// Ends this end's side of stream `id`: the empty DATA frame with FIN to send.
    pub fn close(&mut self, id: StreamId) -> Result<Frame, SendError> {
        let s = self.streams.get_mut(&id).ok_or(SendError::Gone(id))?;
        if !s.local_open {
            return Err(SendError::Ended(id));
        }
        s.local_open = false;
        self.forget_if_done(id);
        Ok(Frame::Data(Data {
            stream_id: id,
            fin: true,
            payload: Bytes::new(),
        }))
    }

    /// Resets stream `id`: the RST_STREAM to send, if the stream was still known.
    pub fn reset(&mut self, id: StreamId, status: RstStatus) -> Option<Frame> {
        self.streams
            .remove(&id)
            .map(|_| Frame::RstStream(RstStream::new(id, status)))
    }

    pub fn ping(&mut self) -> Frame {
        let id = self.next_ping;
        self.next_ping = self.next_ping.wrapping_add(2);
        Frame::Ping(Ping { id })
    }

    /// Refuses new streams from now on: the GOAWAY to send.
    pub fn go_away(&mut self, status: GoAwayStatus) -> Frame {
        self.goaway_sent = true;
        Frame::GoAway(GoAway {
            last_good_stream_id: self.last_peer_stream,
            status,
        })
    }

    /// What the peer may still send on stream `id` before this end gives credit back.
    #[cfg(test)]
    pub fn recv_window_of(&self, id: StreamId) -> Option<i64> {
        self.streams.get(&id).map(|s| s.recv_window)
    }

    fn forget_if_done(&mut self, id: StreamId) {
        if self
            .streams
            .get(&id)
            .is_some_and(|s| !s.local_open && !s.remote_open)
        {
            self.streams.remove(&id);
        }
    }
}

fn rst_outcome(id: StreamId, status: RstStatus) -> Outcome {
    Outcome {
        event: Event::None,
        replies: vec![Frame::RstStream(RstStream::new(id, status))],
    }
}

fn window_update(stream_id: StreamId, delta: u32) -> Frame {
    Frame::WindowUpdate(WindowUpdate { stream_id, delta })
}

#[cfg(test)]
#[path = "proto_tests.rs"]
mod tests;
