//! ttrpc messages (github.com/containerd/ttrpc, its PROTOCOL.md): a 10-byte header (payload
//! length and stream id, big-endian u32; message type; flags) and a protobuf payload of at most
//! 4 MiB. A unary call is one Request message on a new odd stream id, from the client, and one
//! Response message on the same id. NRI uses unary calls only; streaming data messages are
//! refused.
//!
//! Pure: bytes in, messages out; a claimed length over the limit is refused before anything is
//! buffered for it.

use bytes::{Buf, BufMut, BytesMut};

pub const HEADER_LEN: usize = 10;
/// ttrpc's `messageLengthMax`.
pub const MAX_MESSAGE: usize = 4 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Request,
    Response,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub stream: u32,
    pub kind: Kind,
    pub flags: u8,
    pub payload: Vec<u8>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MessageError {
    #[error("a ttrpc message of {0} bytes is over the 4 MiB limit")]
    TooLong(usize),
    #[error("ttrpc message type {0} (only unary requests and responses are spoken here)")]
    Kind(u8),
}

/// Takes one whole message off the front of `buf`, if one is there.
pub fn decode(buf: &mut BytesMut) -> Result<Option<Message>, MessageError> {
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len > MAX_MESSAGE {
        return Err(MessageError::TooLong(len));
    }
    let kind = match buf[8] {
        1 => Kind::Request,
        2 => Kind::Response,
        other => return Err(MessageError::Kind(other)),
    };
    if buf.len() < HEADER_LEN + len {
        buf.reserve(HEADER_LEN + len - buf.len());
        return Ok(None);
    }
    let stream = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
    let flags = buf[9];
    buf.advance(HEADER_LEN);
    let payload = buf.split_to(len).to_vec();
    Ok(Some(Message {
        stream,
        kind,
        flags,
        payload,
    }))
}

/// The message's bytes: header and payload.
pub fn encode(m: &Message) -> Result<Vec<u8>, MessageError> {
    if m.payload.len() > MAX_MESSAGE {
        return Err(MessageError::TooLong(m.payload.len()));
    }
    let mut out = Vec::with_capacity(HEADER_LEN + m.payload.len());
    out.put_u32(m.payload.len() as u32);
    out.put_u32(m.stream);
    out.put_u8(match m.kind {
        Kind::Request => 1,
        Kind::Response => 2,
    });
    out.put_u8(m.flags);
    out.extend_from_slice(&m.payload);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_whatever_the_chunking() {
        let msgs = [
            Message {
                stream: 1,
                kind: Kind::Request,
                flags: 0,
                payload: b"register".to_vec(),
            },
            Message {
                stream: 3,
                kind: Kind::Response,
                flags: 0,
                payload: vec![7; 5000],
            },
        ];
        let wire: Vec<u8> = msgs.iter().flat_map(|m| encode(m).unwrap()).collect();
        for step in [1, 3, 4096, wire.len()] {
            let mut buf = BytesMut::new();
            let mut got = Vec::new();
            for chunk in wire.chunks(step) {
                buf.extend_from_slice(chunk);
                while let Some(m) = decode(&mut buf).unwrap() {
                    got.push(m);
                }
            }
            assert_eq!(got, msgs);
        }
    }

    #[test]
    fn oversized_and_streaming_messages_are_refused() {
        let mut buf = BytesMut::from(&[0x01, 0, 0, 0, 0, 0, 0, 1, 1, 0][..]);
        assert_eq!(decode(&mut buf), Err(MessageError::TooLong(1 << 24)));
        let mut buf = BytesMut::from(&[0, 0, 0, 0, 0, 0, 0, 1, 3, 0][..]);
        assert_eq!(decode(&mut buf), Err(MessageError::Kind(3)));
        let big = Message {
            stream: 1,
            kind: Kind::Request,
            flags: 0,
            payload: vec![0; MAX_MESSAGE + 1],
        };
        assert!(encode(&big).is_err());
    }
}
