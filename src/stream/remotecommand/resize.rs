//! Terminal resize events: the client writes JSON objects `{"Width":80,"Height":24}` one after
//! another on the resize stream or channel, split across frames however its writes fell.
//! Pure: bytes in, sizes out, at most `MAX_PENDING` bytes kept for an unfinished object.

use crate::stream::backend::TerminalSize;

const MAX_PENDING: usize = 4096;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ResizeError {
    #[error("resize event is not JSON: {0}")]
    Malformed(String),
    #[error("resize event longer than {MAX_PENDING} bytes")]
    TooLong,
}

#[derive(Debug, Default)]
pub struct ResizeDecoder {
    pending: Vec<u8>,
}

impl ResizeDecoder {
    /// Takes the next bytes and returns every size completed by them. After an error the
    /// stream is unusable (as for kubelet, which stops reading resizes).
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<TerminalSize>, ResizeError> {
        self.pending.extend_from_slice(bytes);
        let mut sizes = Vec::new();
        let mut iter =
            serde_json::Deserializer::from_slice(&self.pending).into_iter::<TerminalSize>();
        let mut used = 0;
        loop {
            match iter.next() {
                Some(Ok(size)) => {
                    sizes.push(size);
                    used = iter.byte_offset();
                }
                Some(Err(e)) if e.is_eof() => break,
                Some(Err(e)) => return Err(ResizeError::Malformed(e.to_string())),
                None => {
                    used = iter.byte_offset();
                    break;
                }
            }
        }
        self.pending.drain(..used);
        if self.pending.len() > MAX_PENDING {
            return Err(ResizeError::TooLong);
        }
        Ok(sizes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_anywhere_come_out_whole() {
        let wire = br#"{"Width":80,"Height":24}{"width":100,"height":40} {"Width":1,"Height":2}"#;
        for step in [1, 5, wire.len()] {
            let mut d = ResizeDecoder::default();
            let mut all = Vec::new();
            for chunk in wire.chunks(step) {
                all.extend(d.push(chunk).unwrap());
            }
            assert_eq!(
                all,
                [(80, 24), (100, 40), (1, 2)].map(|(width, height)| TerminalSize { width, height })
            );
        }
    }

    #[test]
    fn garbage_and_endless_objects_are_errors() {
        assert!(matches!(
            ResizeDecoder::default().push(b"nope"),
            Err(ResizeError::Malformed(_))
        ));
        let mut d = ResizeDecoder::default();
        let mut long = b"{\"Width\":".to_vec();
        long.extend(std::iter::repeat_n(b' ', 5000));
        assert_eq!(d.push(&long), Err(ResizeError::TooLong));
        assert!(
            ResizeDecoder::default()
                .push(br#"{"Width":-1,"Height":2}"#)
                .is_err()
        );
    }
}
