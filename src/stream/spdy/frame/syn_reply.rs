//! SYN_REPLY: accepts a stream the peer opened. Payload: stream id (31 bits), then the
//! compressed header block. Flags: FIN.

use super::{
    FLAG_FIN, FrameError, KIND_SYN_REPLY, Limits, StreamId, decode_stream_headers,
    encode_stream_headers,
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
        let (id, headers) = decode_stream_headers("SYN_REPLY", payload, dec, limits)?;
        Ok(SynReply {
            stream_id: id,
            fin: flags & FLAG_FIN != 0,
            headers,
        })
    }

    pub fn encode(&self, enc: &mut HeaderEncoder, dst: &mut Vec<u8>) -> Result<(), FrameError> {
        encode_stream_headers(
            KIND_SYN_REPLY,
            self.fin,
            self.stream_id,
            &self.headers,
            enc,
            dst,
        )
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
