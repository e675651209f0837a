//! SPDY/3.1 frames: one file per frame type, each with its decoding, encoding and tests.
//! Pure: bytes in, frames out, no I/O and no connection state (that is `proto`).
//!
//! Every frame starts with 8 bytes. A control frame: the control bit, a 15-bit version (3), a
//! 16-bit type, 8 bits of flags and a 24-bit payload length. A data frame: a clear control bit,
//! a 31-bit stream id, 8 bits of flags and the 24-bit length. The length field allows 16 MiB;
//! `Limits` bounds what this end accepts far below that, before any payload is buffered.

mod data;
mod go_away;
mod headers;
mod ping;
mod rst_stream;
pub mod settings;
mod syn_reply;
mod syn_stream;
mod window_update;

pub use data::Data;
pub use go_away::{GoAway, GoAwayStatus};
pub use headers::Headers;
pub use ping::Ping;
pub use rst_stream::{RstStatus, RstStream};
pub use settings::{Setting, Settings};
pub use syn_reply::SynReply;
pub use syn_stream::SynStream;
pub use window_update::WindowUpdate;

use super::headers::HeaderError;

pub type StreamId = u32;

/// The SPDY version in every control frame this crate reads or writes.
pub const VERSION: u16 = 3;
/// Bytes in front of every frame's payload.
pub const HEAD_LEN: usize = 8;
/// Flag of SYN_STREAM, SYN_REPLY, HEADERS and DATA: the sender's side of the stream ends.
pub const FLAG_FIN: u8 = 0x01;
/// Flag of SYN_STREAM: the stream carries data towards its receiver only.
pub const FLAG_UNIDIRECTIONAL: u8 = 0x02;

pub use super::limits::Limits;

const KIND_SYN_STREAM: u16 = 1;
const KIND_SYN_REPLY: u16 = 2;
const KIND_RST_STREAM: u16 = 3;
const KIND_SETTINGS: u16 = 4;
const KIND_PING: u16 = 6;
const KIND_GOAWAY: u16 = 7;
const KIND_HEADERS: u16 = 8;
const KIND_WINDOW_UPDATE: u16 = 9;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("{kind} frame of {len} bytes is larger than the limit of {max}")]
    TooLarge {
        kind: &'static str,
        len: usize,
        max: usize,
    },
    #[error("SPDY version {0} is not supported (only 3)")]
    UnsupportedVersion(u16),
    #[error("{kind} frame has a bad length {len}")]
    BadLength { kind: &'static str, len: usize },
    #[error("{0} frame names stream 0")]
    ZeroStreamId(&'static str),
    #[error("{0}")]
    Header(#[from] HeaderError),
}

/// One decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    SynStream(SynStream),
    SynReply(SynReply),
    RstStream(RstStream),
    Settings(Settings),
    Ping(Ping),
    GoAway(GoAway),
    Headers(Headers),
    WindowUpdate(WindowUpdate),
    Data(Data),
}

/// The 8 bytes in front of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Head {
    Control {
        version: u16,
        kind: u16,
        flags: u8,
        len: usize,
    },
    Data {
        stream_id: StreamId,
        flags: u8,
        len: usize,
    },
}

impl Head {
    pub fn parse(b: [u8; HEAD_LEN]) -> Head {
        let first = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        let flags = b[4];
        let len = u32::from_be_bytes([0, b[5], b[6], b[7]]) as usize;
        if first & 0x8000_0000 != 0 {
            Head::Control {
                version: ((first >> 16) & 0x7fff) as u16,
                kind: (first & 0xffff) as u16,
                flags,
                len,
            }
        } else {
            Head::Data {
                stream_id: first,
                flags,
                len,
            }
        }
    }

    pub fn payload_len(&self) -> usize {
        match *self {
            Head::Control { len, .. } | Head::Data { len, .. } => len,
        }
    }

    /// Refuses a frame whose payload is over `limits` (or whose version is not 3) from its head
    /// alone, before its payload is buffered.
    pub fn check(&self, limits: &Limits) -> Result<(), FrameError> {
        match *self {
            Head::Control { version, .. } if version != VERSION => {
                Err(FrameError::UnsupportedVersion(version))
            }
            Head::Control { len, .. } if len > limits.max_control_payload => {
                Err(FrameError::TooLarge {
                    kind: "control",
                    len,
                    max: limits.max_control_payload,
                })
            }
            Head::Data { len, .. } if len > limits.max_data_payload => Err(FrameError::TooLarge {
                kind: "DATA",
                len,
                max: limits.max_data_payload,
            }),
            _ => Ok(()),
        }
    }
}

/// Writes a control frame's head.
fn put_control_head(kind: u16, flags: u8, len: usize, dst: &mut Vec<u8>) {
    let first = 0x8000_0000 | (u32::from(VERSION) << 16) | u32::from(kind);
    dst.extend_from_slice(&first.to_be_bytes());
    put_flags_len(flags, len, dst);
}

fn put_flags_len(flags: u8, len: usize, dst: &mut Vec<u8>) {
    let len = (len as u32) & 0x00ff_ffff;
    dst.extend_from_slice(&((u32::from(flags) << 24) | len).to_be_bytes());
}

/// Big-endian u32 at `at`; callers check the payload length first.
fn be32(payload: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&payload[at..at + 4]);
    u32::from_be_bytes(b)
}

/// A stream id field: 31 bits, the top bit reserved and ignored on receipt.
fn stream_id(payload: &[u8], at: usize) -> StreamId {
    be32(payload, at) & 0x7fff_ffff
}

fn exact_len(kind: &'static str, payload: &[u8], len: usize) -> Result<(), FrameError> {
    if payload.len() == len {
        Ok(())
    } else {
        Err(FrameError::BadLength {
            kind,
            len: payload.len(),
        })
    }
}

fn min_len(kind: &'static str, payload: &[u8], len: usize) -> Result<(), FrameError> {
    if payload.len() >= len {
        Ok(())
    } else {
        Err(FrameError::BadLength {
            kind,
            len: payload.len(),
        })
    }
}

/// The payload SYN_REPLY and HEADERS share: a non-zero stream id (31 bits), then the
/// compressed header block.
fn decode_stream_headers(
    kind: &'static str,
    payload: &[u8],
    dec: &mut super::headers::HeaderDecoder,
    limits: &Limits,
) -> Result<(StreamId, super::headers::HeaderBlock), FrameError> {
    min_len(kind, payload, 4)?;
    let headers = dec.decode(&payload[4..], limits)?;
    let id = stream_id(payload, 0);
    if id == 0 {
        return Err(FrameError::ZeroStreamId(kind));
    }
    Ok((id, headers))
}

/// Writes a SYN_REPLY or HEADERS frame: `kind`, FIN if `fin`, the stream id, the header block.
fn encode_stream_headers(
    kind: u16,
    fin: bool,
    id: StreamId,
    headers: &super::headers::HeaderBlock,
    enc: &mut super::headers::HeaderEncoder,
    dst: &mut Vec<u8>,
) -> Result<(), FrameError> {
    let mut block = Vec::new();
    enc.encode(headers, &mut block)?;
    let flags = if fin { FLAG_FIN } else { 0 };
    put_control_head(kind, flags, 4 + block.len(), dst);
    dst.extend_from_slice(&(id & 0x7fff_ffff).to_be_bytes());
    dst.extend_from_slice(&block);
    Ok(())
}

impl Frame {
    /// Which kinds of control frame this crate knows; the spec says to ignore the others.
    pub fn is_known_control(kind: u16) -> bool {
        matches!(
            kind,
            KIND_SYN_STREAM
                | KIND_SYN_REPLY
                | KIND_RST_STREAM
                | KIND_SETTINGS
                | KIND_PING
                | KIND_GOAWAY
                | KIND_HEADERS
                | KIND_WINDOW_UPDATE
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_parse_both_kinds() {
        let c = Head::parse([0x80, 0x03, 0x00, 0x06, 0x00, 0x00, 0x00, 0x04]);
        assert_eq!(
            c,
            Head::Control {
                version: 3,
                kind: KIND_PING,
                flags: 0,
                len: 4
            }
        );
        let d = Head::parse([0x00, 0x00, 0x00, 0x05, 0x01, 0xff, 0xff, 0xff]);
        assert_eq!(
            d,
            Head::Data {
                stream_id: 5,
                flags: FLAG_FIN,
                len: 0xff_ffff
            }
        );
        let limits = Limits::default();
        assert!(matches!(d.check(&limits), Err(FrameError::TooLarge { .. })));
        let v2 = Head::parse([0x80, 0x02, 0x00, 0x06, 0, 0, 0, 4]);
        assert_eq!(v2.check(&limits), Err(FrameError::UnsupportedVersion(2)));
    }
}
