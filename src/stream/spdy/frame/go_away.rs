//! GOAWAY: the sender accepts no new streams. Payload: the last stream id it accepted from
//! the receiver (31 bits), then a status code (32 bits).

use super::{FrameError, KIND_GOAWAY, StreamId, be32, exact_len, put_control_head, stream_id};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoAwayStatus {
    Ok,
    ProtocolError,
    InternalError,
    Other(u32),
}

impl GoAwayStatus {
    pub fn code(self) -> u32 {
        match self {
            GoAwayStatus::Ok => 0,
            GoAwayStatus::ProtocolError => 1,
            GoAwayStatus::InternalError => 2,
            GoAwayStatus::Other(c) => c,
        }
    }

    pub fn from_code(code: u32) -> GoAwayStatus {
        match code {
            0 => GoAwayStatus::Ok,
            1 => GoAwayStatus::ProtocolError,
            2 => GoAwayStatus::InternalError,
            c => GoAwayStatus::Other(c),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoAway {
    pub last_good_stream_id: StreamId,
    pub status: GoAwayStatus,
}

impl GoAway {
    pub fn decode(payload: &[u8]) -> Result<GoAway, FrameError> {
        exact_len("GOAWAY", payload, 8)?;
        Ok(GoAway {
            last_good_stream_id: stream_id(payload, 0),
            status: GoAwayStatus::from_code(be32(payload, 4)),
        })
    }

    pub fn encode(&self, dst: &mut Vec<u8>) {
        put_control_head(KIND_GOAWAY, 0, 8, dst);
        dst.extend_from_slice(&(self.last_good_stream_id & 0x7fff_ffff).to_be_bytes());
        dst.extend_from_slice(&self.status.code().to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bad_length() {
        for status in [0, 1, 2, 9].map(GoAwayStatus::from_code) {
            let f = GoAway {
                last_good_stream_id: 41,
                status,
            };
            let mut wire = Vec::new();
            f.encode(&mut wire);
            assert_eq!(GoAway::decode(&wire[8..]).unwrap(), f);
        }
        assert!(GoAway::decode(&[0; 4]).is_err());
    }
}
