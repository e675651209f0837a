//! DATA: stream payload. Head: a clear control bit and the stream id (31 bits), 8 bits of
//! flags (FIN) and the 24-bit length; then the bytes, carried here without copying.

use bytes::Bytes;

use super::{FLAG_FIN, FrameError, StreamId, put_flags_len};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Data {
    pub stream_id: StreamId,
    pub fin: bool,
    pub payload: Bytes,
}

impl Data {
    pub fn decode(stream_id: StreamId, flags: u8, payload: Bytes) -> Result<Data, FrameError> {
        if stream_id == 0 {
            return Err(FrameError::ZeroStreamId("DATA"));
        }
        Ok(Data {
            stream_id,
            fin: flags & FLAG_FIN != 0,
            payload,
        })
    }

    /// Writes the head only: callers send the payload after it without copying it.
    pub fn encode_head(&self, dst: &mut Vec<u8>) {
        Data::encode_head_of(self.stream_id, self.fin, self.payload.len(), dst);
    }

    /// The head of a DATA frame carrying `len` bytes, for a payload that is not in a `Data`
    /// (a sender writing it from its own buffer).
    pub fn encode_head_of(stream_id: StreamId, fin: bool, len: usize, dst: &mut Vec<u8>) {
        dst.extend_from_slice(&(stream_id & 0x7fff_ffff).to_be_bytes());
        put_flags_len(if fin { FLAG_FIN } else { 0 }, len, dst);
    }

    pub fn encode(&self, dst: &mut Vec<u8>) {
        self.encode_head(dst);
        dst.extend_from_slice(&self.payload);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_like_the_spec_and_refuses_stream_zero() {
        let f = Data {
            stream_id: 3,
            fin: true,
            payload: Bytes::from_static(b"hello"),
        };
        let mut wire = Vec::new();
        f.encode(&mut wire);
        assert_eq!(wire, b"\x00\x00\x00\x03\x01\x00\x00\x05hello");
        assert!(Data::decode(0, 0, Bytes::new()).is_err());
    }
}
