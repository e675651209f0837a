//! Header block compression. Each direction of a SPDY connection is one zlib stream primed
//! with the SPDY dictionary; every header block is one sync-flushed piece of it, so the
//! compressor and decompressor live as long as the connection and see every block in order.
//! A block that fails to decompress leaves the stream unusable: the connection must end.
//!
//! flate2's zlib-rs backend (the project's) supports preset dictionaries on both sides, so no
//! other zlib crate is needed.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use super::{DICTIONARY, DICTIONARY_ID, HeaderBlock, HeaderError};
use crate::stream::spdy::limits::Limits;

/// Compresses the header blocks this end sends.
pub struct HeaderEncoder {
    z: Compress,
    plain: Vec<u8>,
}

impl Default for HeaderEncoder {
    fn default() -> Self {
        HeaderEncoder::new()
    }
}

impl HeaderEncoder {
    pub fn new() -> HeaderEncoder {
        let mut z = Compress::new(Compression::default(), true);
        // Setting the dictionary on a fresh stream cannot fail; were it to, the peer would
        // refuse our first block and end the connection, which is the right outcome too.
        let _ = z.set_dictionary(&DICTIONARY);
        HeaderEncoder {
            z,
            plain: Vec::new(),
        }
    }

    /// Appends the compressed form of `block` to `out`.
    pub fn encode(&mut self, block: &HeaderBlock, out: &mut Vec<u8>) -> Result<(), HeaderError> {
        self.plain.clear();
        block.serialize(&mut self.plain);
        let mut consumed = 0;
        loop {
            out.reserve(self.plain.len() / 2 + 64);
            let before = self.z.total_in();
            self.z
                .compress_vec(&self.plain[consumed..], out, FlushCompress::Sync)
                .map_err(|e| HeaderError::Zlib(e.to_string()))?;
            consumed += (self.z.total_in() - before) as usize;
            // A sync flush is complete once all input is taken and the output had room left.
            if consumed == self.plain.len() && out.len() < out.capacity() {
                return Ok(());
            }
        }
    }
}

/// Decompresses the header blocks this end receives.
pub struct HeaderDecoder {
    z: Decompress,
    plain: Vec<u8>,
}

impl Default for HeaderDecoder {
    fn default() -> Self {
        HeaderDecoder::new()
    }
}

impl HeaderDecoder {
    pub fn new() -> HeaderDecoder {
        HeaderDecoder {
            z: Decompress::new(true),
            plain: Vec::new(),
        }
    }

    /// Decompresses and parses one block. The output never grows past
    /// `limits.max_header_block`, whatever the input claims (a small compressed block can
    /// expand a thousandfold).
    pub fn decode(
        &mut self,
        compressed: &[u8],
        limits: &Limits,
    ) -> Result<HeaderBlock, HeaderError> {
        self.inflate(compressed, limits.max_header_block)?;
        HeaderBlock::parse(&self.plain, limits)
    }

    fn inflate(&mut self, input: &[u8], max: usize) -> Result<(), HeaderError> {
        self.plain.clear();
        let mut consumed = 0;
        loop {
            if self.plain.len() == self.plain.capacity() {
                if self.plain.len() >= max {
                    return Err(HeaderError::TooLarge(max));
                }
                let room = (input.len() * 4).clamp(256, 16 * 1024);
                self.plain.reserve_exact(room.min(max - self.plain.len()));
            }
            let (in_before, out_before) = (self.z.total_in(), self.z.total_out());
            let status =
                self.z
                    .decompress_vec(&input[consumed..], &mut self.plain, FlushDecompress::Sync);
            consumed += (self.z.total_in() - in_before) as usize;
            let progressed = self.z.total_in() != in_before || self.z.total_out() != out_before;
            match status {
                Ok(Status::StreamEnd) if consumed < input.len() => {
                    return Err(HeaderError::Zlib("data after the end of the stream".into()));
                }
                Ok(_) => {}
                Err(e) => match e.needs_dictionary() {
                    Some(DICTIONARY_ID) => {
                        self.z
                            .set_dictionary(&DICTIONARY)
                            .map_err(|e| HeaderError::Zlib(e.to_string()))?;
                        continue;
                    }
                    Some(other) => {
                        return Err(HeaderError::Zlib(format!(
                            "peer uses an unknown dictionary {other:#x}"
                        )));
                    }
                    None => return Err(HeaderError::Zlib(e.to_string())),
                },
            }
            let output_full = self.plain.len() == self.plain.capacity();
            if consumed == input.len() && !output_full {
                return Ok(());
            }
            if !progressed && !output_full {
                return Err(HeaderError::Truncated);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(pairs: &[(&str, &str)]) -> HeaderBlock {
        let mut b = HeaderBlock::new();
        for (n, v) in pairs {
            b.insert(n, *v);
        }
        b
    }

    #[test]
    fn blocks_round_trip_through_one_zlib_stream_per_direction() {
        let (mut enc, mut dec) = (HeaderEncoder::new(), HeaderDecoder::new());
        let limits = Limits::default();
        for i in 0..50 {
            let b = block(&[
                ("streamtype", "data"),
                ("port", &format!("{}", 8000 + i)),
                ("requestid", &i.to_string()),
            ]);
            let mut wire = Vec::new();
            enc.encode(&b, &mut wire).unwrap();
            assert_eq!(dec.decode(&wire, &limits).unwrap(), b);
        }
    }

    /// A SYN_STREAM header block as Go's SPDY framer (moby/spdystream, which kubectl, crictl
    /// and kubelet use) compresses it: the first block of a connection, for
    /// `streamtype: error, port: 80, requestid: 0`.
    #[test]
    fn decodes_the_first_block_of_a_go_client() {
        let wire = hex::decode(GO_FIRST_BLOCK).unwrap();
        let b = HeaderDecoder::new()
            .decode(&wire, &Limits::default())
            .unwrap();
        assert_eq!(b.get("streamtype"), Some("error"));
        assert_eq!(b.get("port"), Some("80"));
        assert_eq!(b.get("requestid"), Some("0"));
    }

    const GO_FIRST_BLOCK: &str = include_str!("testdata/go_first_block.hex");

    #[test]
    fn a_decompression_bomb_stops_at_the_limit() {
        let mut enc = HeaderEncoder::new();
        let huge = block(&[("x", &"a".repeat(1 << 20))]);
        let mut wire = Vec::new();
        enc.encode(&huge, &mut wire).unwrap();
        assert!(wire.len() < 8 * 1024, "{}", wire.len());
        let err = HeaderDecoder::new()
            .decode(&wire, &Limits::default())
            .unwrap_err();
        assert!(matches!(err, HeaderError::TooLarge(_)), "{err}");
    }

    #[test]
    fn garbage_and_truncation_are_errors() {
        let limits = Limits::default();
        assert!(
            HeaderDecoder::new()
                .decode(b"not zlib at all", &limits)
                .is_err()
        );
        let mut wire = Vec::new();
        HeaderEncoder::new()
            .encode(&block(&[("a", "b")]), &mut wire)
            .unwrap();
        assert!(
            HeaderDecoder::new()
                .decode(&wire[..wire.len() / 2], &limits)
                .is_err()
        );
        assert!(HeaderDecoder::new().decode(&[], &limits).is_err());
    }
}
