//! PING: a round-trip probe. Payload: a 32-bit id; the receiver echoes a ping the other end
//! started (odd ids come from clients, even ids from servers).

use super::{FrameError, KIND_PING, be32, exact_len, put_control_head};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ping {
    pub id: u32,
}

impl Ping {
    pub fn decode(payload: &[u8]) -> Result<Ping, FrameError> {
        exact_len("PING", payload, 4)?;
        Ok(Ping {
            id: be32(payload, 0),
        })
    }

    pub fn encode(&self, dst: &mut Vec<u8>) {
        put_control_head(KIND_PING, 0, 4, dst);
        dst.extend_from_slice(&self.id.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bad_length() {
        let mut wire = Vec::new();
        Ping { id: 0xdead_beef }.encode(&mut wire);
        assert_eq!(wire, [0x80, 3, 0, 6, 0, 0, 0, 4, 0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(Ping::decode(&wire[8..]).unwrap().id, 0xdead_beef);
        assert!(Ping::decode(&[0; 5]).is_err());
    }
}
