//! HEADERS: more headers for an open stream. Payload: stream id (31 bits), then the
//! compressed header block. Flags: FIN.

use super::{
    FLAG_FIN, FrameError, KIND_HEADERS, Limits, StreamId, decode_stream_headers,
    encode_stream_headers,
};
use crate::stream::spdy::headers::{HeaderBlock, HeaderDecoder, HeaderEncoder};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Headers {
    pub stream_id: StreamId,
    pub fin: bool,
    pub headers: HeaderBlock,
}

impl Headers {
    pub fn decode(
        flags: u8,
        payload: &[u8],
        dec: &mut HeaderDecoder,
        limits: &Limits,
    ) -> Result<Headers, FrameError> {
        let (id, headers) = decode_stream_headers("HEADERS", payload, dec, limits)?;
        Ok(Headers {
            stream_id: id,
            fin: flags & FLAG_FIN != 0,
            headers,
        })
    }

    pub fn encode(&self, enc: &mut HeaderEncoder, dst: &mut Vec<u8>) -> Result<(), FrameError> {
        encode_stream_headers(
            KIND_HEADERS,
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
        let mut h = HeaderBlock::new();
        h.insert("x", "y");
        let f = Headers {
            stream_id: 1,
            fin: true,
            headers: h,
        };
        let mut wire = Vec::new();
        f.encode(&mut HeaderEncoder::new(), &mut wire).unwrap();
        let (mut dec, l) = (HeaderDecoder::new(), Limits::default());
        assert_eq!(
            Headers::decode(wire[4], &wire[8..], &mut dec, &l).unwrap(),
            f
        );
        assert!(Headers::decode(0, &[0], &mut dec, &l).is_err());
    }
}
