//! SYN_STREAM: opens a stream. Payload: stream id (31 bits), associated-to stream id (31
//! bits), priority (3 bits) and 5 unused bits, a credential slot (8 bits, unused since 3.1),
//! then the compressed header block. Flags: FIN, UNIDIRECTIONAL.

use super::{
    FLAG_FIN, FLAG_UNIDIRECTIONAL, FrameError, KIND_SYN_STREAM, Limits, StreamId, min_len,
    put_control_head, stream_id,
};
use crate::stream::spdy::headers::{HeaderBlock, HeaderDecoder, HeaderEncoder};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SynStream {
    pub stream_id: StreamId,
    pub associated_to: StreamId,
    /// 0 is the highest priority, 7 the lowest.
    pub priority: u8,
    pub fin: bool,
    pub unidirectional: bool,
    pub headers: HeaderBlock,
}

impl SynStream {
    pub fn new(stream_id: StreamId, headers: HeaderBlock) -> SynStream {
        SynStream {
            stream_id,
            associated_to: 0,
            priority: 0,
            fin: false,
            unidirectional: false,
            headers,
        }
    }

    pub fn decode(
        flags: u8,
        payload: &[u8],
        dec: &mut HeaderDecoder,
        limits: &Limits,
    ) -> Result<SynStream, FrameError> {
        min_len("SYN_STREAM", payload, 10)?;
        // The header block is decompressed even when the frame is refused afterwards: the
        // zlib stream runs across frames and must stay in step.
        let headers = dec.decode(&payload[10..], limits)?;
        let id = stream_id(payload, 0);
        if id == 0 {
            return Err(FrameError::ZeroStreamId("SYN_STREAM"));
        }
        Ok(SynStream {
            stream_id: id,
            associated_to: stream_id(payload, 4),
            priority: payload[8] >> 5,
            fin: flags & FLAG_FIN != 0,
            unidirectional: flags & FLAG_UNIDIRECTIONAL != 0,
            headers,
        })
    }

    pub fn encode(&self, enc: &mut HeaderEncoder, dst: &mut Vec<u8>) -> Result<(), FrameError> {
        let mut block = Vec::new();
        enc.encode(&self.headers, &mut block)?;
        let mut flags = 0;
        if self.fin {
            flags |= FLAG_FIN;
        }
        if self.unidirectional {
            flags |= FLAG_UNIDIRECTIONAL;
        }
        put_control_head(KIND_SYN_STREAM, flags, 10 + block.len(), dst);
        dst.extend_from_slice(&(self.stream_id & 0x7fff_ffff).to_be_bytes());
        dst.extend_from_slice(&(self.associated_to & 0x7fff_ffff).to_be_bytes());
        dst.extend_from_slice(&[(self.priority & 0x07) << 5, 0]);
        dst.extend_from_slice(&block);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_every_field() {
        let mut h = HeaderBlock::new();
        h.insert("streamtype", "stdin");
        let f = SynStream {
            stream_id: 7,
            associated_to: 3,
            priority: 5,
            fin: true,
            unidirectional: true,
            headers: h,
        };
        let mut wire = Vec::new();
        f.encode(&mut HeaderEncoder::new(), &mut wire).unwrap();
        assert_eq!(&wire[..4], &[0x80, 0x03, 0x00, 0x01]);
        assert_eq!(wire[4], FLAG_FIN | FLAG_UNIDIRECTIONAL);
        let back = SynStream::decode(
            wire[4],
            &wire[8..],
            &mut HeaderDecoder::new(),
            &Limits::default(),
        )
        .unwrap();
        assert_eq!(back, f);
    }

    #[test]
    fn short_payloads_and_stream_zero_are_refused() {
        let mut dec = HeaderDecoder::new();
        let l = Limits::default();
        assert!(matches!(
            SynStream::decode(0, &[0; 9], &mut dec, &l),
            Err(FrameError::BadLength { .. })
        ));
        let mut wire = Vec::new();
        SynStream::new(0, HeaderBlock::new())
            .encode(&mut HeaderEncoder::new(), &mut wire)
            .unwrap();
        assert_eq!(
            SynStream::decode(0, &wire[8..], &mut dec, &l),
            Err(FrameError::ZeroStreamId("SYN_STREAM"))
        );
    }
}
