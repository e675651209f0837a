//! RST_STREAM: ends a stream abnormally. Payload: stream id (31 bits), status code (32 bits).

use super::{FrameError, KIND_RST_STREAM, StreamId, be32, exact_len, put_control_head, stream_id};

/// Why a stream was reset (SPDY/3.1 section 2.4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RstStatus {
    ProtocolError,
    InvalidStream,
    RefusedStream,
    UnsupportedVersion,
    Cancel,
    InternalError,
    FlowControlError,
    StreamInUse,
    StreamAlreadyClosed,
    FrameTooLarge,
    /// A code this crate does not know; kept so it can be logged.
    Other(u32),
}

impl RstStatus {
    pub fn code(self) -> u32 {
        match self {
            RstStatus::ProtocolError => 1,
            RstStatus::InvalidStream => 2,
            RstStatus::RefusedStream => 3,
            RstStatus::UnsupportedVersion => 4,
            RstStatus::Cancel => 5,
            RstStatus::InternalError => 6,
            RstStatus::FlowControlError => 7,
            RstStatus::StreamInUse => 8,
            RstStatus::StreamAlreadyClosed => 9,
            RstStatus::FrameTooLarge => 11,
            RstStatus::Other(c) => c,
        }
    }

    pub fn from_code(code: u32) -> RstStatus {
        match code {
            1 => RstStatus::ProtocolError,
            2 => RstStatus::InvalidStream,
            3 => RstStatus::RefusedStream,
            4 => RstStatus::UnsupportedVersion,
            5 => RstStatus::Cancel,
            6 => RstStatus::InternalError,
            7 => RstStatus::FlowControlError,
            8 => RstStatus::StreamInUse,
            9 => RstStatus::StreamAlreadyClosed,
            11 => RstStatus::FrameTooLarge,
            c => RstStatus::Other(c),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RstStream {
    pub stream_id: StreamId,
    pub status: RstStatus,
}

impl RstStream {
    pub fn new(stream_id: StreamId, status: RstStatus) -> RstStream {
        RstStream { stream_id, status }
    }

    pub fn decode(payload: &[u8]) -> Result<RstStream, FrameError> {
        exact_len("RST_STREAM", payload, 8)?;
        let id = stream_id(payload, 0);
        if id == 0 {
            return Err(FrameError::ZeroStreamId("RST_STREAM"));
        }
        Ok(RstStream {
            stream_id: id,
            status: RstStatus::from_code(be32(payload, 4)),
        })
    }

    pub fn encode(&self, dst: &mut Vec<u8>) {
        put_control_head(KIND_RST_STREAM, 0, 8, dst);
        dst.extend_from_slice(&(self.stream_id & 0x7fff_ffff).to_be_bytes());
        dst.extend_from_slice(&self.status.code().to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_status() {
        for code in 0..13 {
            let f = RstStream::new(5, RstStatus::from_code(code));
            assert_eq!(f.status.code(), code);
            let mut wire = Vec::new();
            f.encode(&mut wire);
            assert_eq!(wire.len(), 16);
            assert_eq!(RstStream::decode(&wire[8..]).unwrap(), f);
        }
        assert!(RstStream::decode(&[0; 7]).is_err());
        assert!(RstStream::decode(&[0; 8]).is_err());
    }
}
