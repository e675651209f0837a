//! SYN_REPLY: accepts a stream the peer opened. Payload: stream id (31 bits), then the
//! compressed header block. Flags: FIN.

use super::{
    FLAG_FIN, FrameError, KIND_SYN_REPLY, Limits, StreamId, min_len, put_control_head, stream_id,
};
use crate::stream::spdy::headers::{HeaderBlock, HeaderDecoder, HeaderEncoder};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SynReply {
    pub stream_id: StreamId,
    pub fin: bool,
    pub headers: HeaderBlock,
}

impl SynReply {
    pub fn decode(
        flags: u8,
        payload: &[u8],
        dec: &mut HeaderDecoder,
        limits: &Limits,
    ) -> Result<SynReply, FrameError> {
        min_len("SYN_REPLY", payload, 4)?;
        let headers = dec.decode(&payload[4..], limits)?;
        let id = stream_id(payload, 0);
        if id == 0 {
            return Err(FrameError::ZeroStreamId("SYN_REPLY"));
        }
        Ok(SynReply {
            stream_id: id,
            fin: flags & FLAG_FIN != 0,
            headers,
        })
    }

    pub fn encode(&self, enc: &mut HeaderEncoder, dst: &mut Vec<u8>) -> Result<(), FrameError> {
        let mut block = Vec::new();
        enc.encode(&self.headers, &mut block)?;
        let flags = if self.fin { FLAG_FIN } else { 0 };
        put_control_head(KIND_SYN_REPLY, flags, 4 + block.len(), dst);
        dst.extend_from_slice(&(self.stream_id & 0x7fff_ffff).to_be_bytes());
        dst.extend_from_slice(&block);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let f = SynReply {
            stream_id: 9,
            fin: false,
            headers: HeaderBlock::new(),
        };
        let mut wire = Vec::new();
        f.encode(&mut HeaderEncoder::new(), &mut wire).unwrap();
        let (mut dec, l) = (HeaderDecoder::new(), Limits::default());
        assert_eq!(
            SynReply::decode(wire[4], &wire[8..], &mut dec, &l).unwrap(),
            f
        );
        assert!(SynReply::decode(0, &[0, 0], &mut dec, &l).is_err());
    }
}
