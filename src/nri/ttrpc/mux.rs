//! NRI's connection multiplexer (`pkg/net/multiplex` of github.com/containerd/nri): one socket
//! (the trunk) carries several byte streams, each in frames of an 8-byte header (connection id,
//! payload length, both big-endian u32) and the payload. NRI runs two streams on every plugin
//! connection: the plugin's service (conn 1: the runtime calls the plugin) and the runtime's
//! service (conn 2: the plugin calls the runtime), each a ttrpc stream of its own.
//!
//! Pure: bytes in, frames out. A peer can claim any length; a frame longer than NRI's own
//! limit (a ttrpc message header plus its 4 MiB message) is refused before anything is
//! buffered for it.

use bytes::{Buf, BufMut, BytesMut};

/// The runtime calls the plugin on this stream (NRI's `PluginServiceConn`).
pub const PLUGIN_SERVICE: u32 = 1;
/// The plugin calls the runtime on this stream (NRI's `RuntimeServiceConn`).
pub const RUNTIME_SERVICE: u32 = 2;

pub const HEADER_LEN: usize = 8;
/// NRI's `maxPayloadSize`: a ttrpc header and its largest message.
pub const MAX_PAYLOAD: usize = super::message::HEADER_LEN + super::message::MAX_MESSAGE;
/// The largest frame crust writes. NRI's Go side hands each frame to ttrpc whole, in one
/// `Read`, into a buffer that may be as small as bufio's 4 KiB: bigger frames could fail there
/// with ENOMEM, so payloads go out in pieces of this size (the header included).
pub const MAX_WRITE: usize = 4096;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MuxFrame {
    pub conn: u32,
    pub payload: Vec<u8>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MuxError {
    #[error("a multiplexer frame of {0} bytes is over NRI's limit of {MAX_PAYLOAD}")]
    TooLong(usize),
}

/// Takes one whole frame off the front of `buf`, if one is there.
pub fn decode(buf: &mut BytesMut) -> Result<Option<MuxFrame>, MuxError> {
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let conn = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    let len = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]) as usize;
    if len > MAX_PAYLOAD {
        return Err(MuxError::TooLong(len));
    }
    if buf.len() < HEADER_LEN + len {
        buf.reserve(HEADER_LEN + len - buf.len());
        return Ok(None);
    }
    buf.advance(HEADER_LEN);
    let payload = buf.split_to(len).to_vec();
    Ok(Some(MuxFrame { conn, payload }))
}

/// Appends `data` for stream `conn` to `out` as frames of at most `MAX_WRITE` bytes.
pub fn encode(conn: u32, data: &[u8], out: &mut Vec<u8>) {
    for piece in data.chunks(MAX_WRITE - HEADER_LEN) {
        out.put_u32(conn);
        out.put_u32(piece.len() as u32);
        out.extend_from_slice(piece);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_in_pieces_nri_can_read() {
        let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let mut wire = Vec::new();
        encode(RUNTIME_SERVICE, &data, &mut wire);
        encode(PLUGIN_SERVICE, b"hi", &mut wire);
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        let mut frames = Vec::new();
        // Fed a byte at a time: a frame comes out only once it is whole.
        for b in wire {
            buf.put_u8(b);
            while let Some(f) = decode(&mut buf).unwrap() {
                assert!(f.payload.len() + HEADER_LEN <= MAX_WRITE);
                frames.push(f);
            }
        }
        for f in &frames[..frames.len() - 1] {
            assert_eq!(f.conn, RUNTIME_SERVICE);
            got.extend_from_slice(&f.payload);
        }
        assert_eq!(got, data);
        let last = frames.last().unwrap();
        assert_eq!(
            (last.conn, last.payload.as_slice()),
            (PLUGIN_SERVICE, &b"hi"[..])
        );
        assert!(buf.is_empty());
    }

    #[test]
    fn an_oversized_claim_is_refused_before_buffering() {
        let mut buf = BytesMut::from(&[0, 0, 0, 1, 0x7f, 0xff, 0xff, 0xff][..]);
        assert_eq!(decode(&mut buf), Err(MuxError::TooLong(0x7fff_ffff)));
        assert!(buf.capacity() < 1 << 20);
    }
}
