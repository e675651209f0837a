//! SETTINGS: connection parameters. Payload: a 32-bit entry count, then per entry 8 bits of
//! flags, a 24-bit id and a 32-bit value. Flag 0x01 on the frame: clear persisted settings.

use super::{FrameError, KIND_SETTINGS, be32, min_len, put_control_head};

/// SETTINGS_MAX_CONCURRENT_STREAMS.
pub const MAX_CONCURRENT_STREAMS: u32 = 4;
/// SETTINGS_INITIAL_WINDOW_SIZE: the send window of every new stream.
pub const INITIAL_WINDOW_SIZE: u32 = 7;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    pub flags: u8,
    pub id: u32,
    pub value: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    pub clear: bool,
    pub entries: Vec<Setting>,
}

impl Settings {
    pub fn get(&self, id: u32) -> Option<u32> {
        self.entries
            .iter()
            .rev()
            .find(|s| s.id == id)
            .map(|s| s.value)
    }

    pub fn decode(flags: u8, payload: &[u8]) -> Result<Settings, FrameError> {
        min_len("SETTINGS", payload, 4)?;
        let count = be32(payload, 0) as usize;
        // The count must match the payload exactly; checked before anything is reserved.
        if (payload.len() - 4) / 8 != count || (payload.len() - 4) % 8 != 0 {
            return Err(FrameError::BadLength {
                kind: "SETTINGS",
                len: payload.len(),
            });
        }
        let entries = payload[4..]
            .chunks_exact(8)
            .map(|e| {
                let word = be32(e, 0);
                Setting {
                    flags: (word >> 24) as u8,
                    id: word & 0x00ff_ffff,
                    value: be32(e, 4),
                }
            })
            .collect();
        Ok(Settings {
            clear: flags & 0x01 != 0,
            entries,
        })
    }

    pub fn encode(&self, dst: &mut Vec<u8>) {
        let flags = if self.clear { 0x01 } else { 0 };
        put_control_head(KIND_SETTINGS, flags, 4 + 8 * self.entries.len(), dst);
        dst.extend_from_slice(&(self.entries.len() as u32).to_be_bytes());
        for s in &self.entries {
            let word = (u32::from(s.flags) << 24) | (s.id & 0x00ff_ffff);
            dst.extend_from_slice(&word.to_be_bytes());
            dst.extend_from_slice(&s.value.to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_count_mismatch() {
        let f = Settings {
            clear: false,
            entries: vec![
                Setting {
                    flags: 0,
                    id: MAX_CONCURRENT_STREAMS,
                    value: 100,
                },
                Setting {
                    flags: 0,
                    id: INITIAL_WINDOW_SIZE,
                    value: 1 << 20,
                },
            ],
        };
        let mut wire = Vec::new();
        f.encode(&mut wire);
        let back = Settings::decode(wire[4], &wire[8..]).unwrap();
        assert_eq!(back, f);
        assert_eq!(back.get(INITIAL_WINDOW_SIZE), Some(1 << 20));
        // Claims a million entries in a 4-byte payload.
        assert!(Settings::decode(0, &[0, 0x0f, 0x42, 0x40]).is_err());
        assert!(Settings::decode(0, &[0, 0, 0, 1, 0, 0, 0]).is_err());
    }
}
