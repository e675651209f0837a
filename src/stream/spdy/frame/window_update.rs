//! WINDOW_UPDATE: the sender has consumed data and the receiver may send that much more.
//! Payload: stream id (31 bits; 0 names the whole connection, new in 3.1), delta (31 bits,
//! at least 1).

use super::{
    FrameError, KIND_WINDOW_UPDATE, StreamId, be32, exact_len, put_control_head, stream_id,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowUpdate {
    pub stream_id: StreamId,
    pub delta: u32,
}

impl WindowUpdate {
    pub fn decode(payload: &[u8]) -> Result<WindowUpdate, FrameError> {
        exact_len("WINDOW_UPDATE", payload, 8)?;
        let delta = be32(payload, 4) & 0x7fff_ffff;
        if delta == 0 {
            return Err(FrameError::BadLength {
                kind: "WINDOW_UPDATE delta",
                len: 0,
            });
        }
        Ok(WindowUpdate {
            stream_id: stream_id(payload, 0),
            delta,
        })
    }

    pub fn encode(&self, dst: &mut Vec<u8>) {
        put_control_head(KIND_WINDOW_UPDATE, 0, 8, dst);
        dst.extend_from_slice(&(self.stream_id & 0x7fff_ffff).to_be_bytes());
        dst.extend_from_slice(&(self.delta & 0x7fff_ffff).to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_connection_and_stream_updates() {
        for id in [0, 3] {
            let f = WindowUpdate {
                stream_id: id,
                delta: 65_536,
            };
            let mut wire = Vec::new();
            f.encode(&mut wire);
            assert_eq!(WindowUpdate::decode(&wire[8..]).unwrap(), f);
        }
        assert!(WindowUpdate::decode(&[0, 0, 0, 1, 0, 0, 0, 0]).is_err());
        assert!(WindowUpdate::decode(&[0; 3]).is_err());
    }
}
