//! SPDY/3 name/value header blocks: the plain form (a 32-bit count, then each name and value
//! with a 32-bit length before it) and its zlib compression with the SPDY dictionary.
//!
//! Invariants: a parsed block never holds more than `Limits::max_header_count` entries nor
//! more than `Limits::max_header_block` bytes; names are non-empty, lowercase and unique (the
//! spec makes anything else a protocol error). A value holding several values separates them
//! with NUL bytes; `get` answers the first.

mod dictionary;
mod zlib;

pub use dictionary::{DICTIONARY, DICTIONARY_ID};
pub use zlib::{HeaderDecoder, HeaderEncoder};

use super::limits::Limits;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HeaderError {
    #[error("header block is truncated")]
    Truncated,
    #[error("header block has {0} bytes after its last entry")]
    Trailing(usize),
    #[error("header block declares {count} entries, more than the limit of {max}")]
    TooManyHeaders { count: u32, max: usize },
    #[error("header block is larger than the limit of {0} bytes")]
    TooLarge(usize),
    #[error("header name {0:?} is empty or not lowercase")]
    BadName(String),
    #[error("header {0:?} appears twice")]
    Duplicate(String),
    #[error("header {0:?} is not UTF-8")]
    NotUtf8(String),
    #[error("header compression: {0}")]
    Zlib(String),
}

/// The headers of one SYN_STREAM, SYN_REPLY or HEADERS frame, in the order they came.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderBlock {
    entries: Vec<(String, String)>,
}

impl HeaderBlock {
    pub fn new() -> HeaderBlock {
        HeaderBlock::default()
    }

    /// Adds `name` (lowercased, as SPDY requires) with `value`, replacing an earlier value.
    pub fn insert(&mut self, name: &str, value: impl Into<String>) {
        let name = name.to_ascii_lowercase();
        let value = value.into();
        match self.entries.iter_mut().find(|(n, _)| *n == name) {
            Some(entry) => entry.1 = value,
            None => self.entries.push((name, value)),
        }
    }

    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.split('\0').next().unwrap_or_default())
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Parses a decompressed block. Every length is checked against what is left of `raw`
    /// before anything is allocated for it.
    pub fn parse(raw: &[u8], limits: &Limits) -> Result<HeaderBlock, HeaderError> {
        if raw.len() > limits.max_header_block {
            return Err(HeaderError::TooLarge(limits.max_header_block));
        }
        let mut rest = raw;
        let count = take_u32(&mut rest)?;
        if count as usize > limits.max_header_count {
            return Err(HeaderError::TooManyHeaders {
                count,
                max: limits.max_header_count,
            });
        }
        let mut block = HeaderBlock {
            entries: Vec::with_capacity(count as usize),
        };
        for _ in 0..count {
            let name = take_str(&mut rest)?;
            if name.is_empty() || name.bytes().any(|b| b.is_ascii_uppercase()) {
                return Err(HeaderError::BadName(name));
            }
            let value = take_str(&mut rest)?;
            if block.entries.iter().any(|(n, _)| *n == name) {
                return Err(HeaderError::Duplicate(name));
            }
            block.entries.push((name, value));
        }
        if !rest.is_empty() {
            return Err(HeaderError::Trailing(rest.len()));
        }
        Ok(block)
    }

    /// Appends the plain (uncompressed) form of the block to `out`.
    pub fn serialize(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.entries.len() as u32).to_be_bytes());
        for (name, value) in &self.entries {
            for part in [name, value] {
                out.extend_from_slice(&(part.len() as u32).to_be_bytes());
                out.extend_from_slice(part.as_bytes());
            }
        }
    }
}

fn take_u32(rest: &mut &[u8]) -> Result<u32, HeaderError> {
    let (head, tail) = rest
        .split_first_chunk::<4>()
        .ok_or(HeaderError::Truncated)?;
    *rest = tail;
    Ok(u32::from_be_bytes(*head))
}

fn take_str(rest: &mut &[u8]) -> Result<String, HeaderError> {
    let len = take_u32(rest)? as usize;
    if len > rest.len() {
        return Err(HeaderError::Truncated);
    }
    let (bytes, tail) = rest.split_at(len);
    *rest = tail;
    String::from_utf8(bytes.to_vec())
        .map_err(|e| HeaderError::NotUtf8(String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits::default()
    }

    #[test]
    fn a_block_round_trips_and_keeps_its_order() {
        let mut b = HeaderBlock::new();
        b.insert("streamType", "data");
        b.insert("port", "8080");
        b.insert("requestid", "0");
        b.insert("StreamType", "error");
        let mut raw = Vec::new();
        b.serialize(&mut raw);
        let back = HeaderBlock::parse(&raw, &limits()).unwrap();
        assert_eq!(back, b);
        assert_eq!(back.get("streamtype"), Some("error"));
        assert_eq!(back.get("requestID"), Some("0"));
        assert_eq!(back.len(), 3);
    }

    #[test]
    fn several_values_are_nul_separated_and_get_answers_the_first() {
        let mut b = HeaderBlock::new();
        b.insert("x", "a\0b");
        assert_eq!(b.get("x"), Some("a"));
    }

    #[test]
    fn malformed_blocks_are_refused_before_allocating() {
        let l = limits();
        assert_eq!(HeaderBlock::parse(&[0, 0], &l), Err(HeaderError::Truncated));
        // A count far beyond the limit is refused without reserving room for it.
        assert!(matches!(
            HeaderBlock::parse(&[0xff, 0xff, 0xff, 0xff], &l),
            Err(HeaderError::TooManyHeaders { .. })
        ));
        // A name length larger than the block.
        let raw = [0, 0, 0, 1, 0x7f, 0xff, 0xff, 0xff, b'a'];
        assert_eq!(HeaderBlock::parse(&raw, &l), Err(HeaderError::Truncated));
        let block = |entries: &[(&str, &str)]| {
            let mut raw = (entries.len() as u32).to_be_bytes().to_vec();
            for (n, v) in entries {
                for p in [n, v] {
                    raw.extend_from_slice(&(p.len() as u32).to_be_bytes());
                    raw.extend_from_slice(p.as_bytes());
                }
            }
            raw
        };
        assert!(matches!(
            HeaderBlock::parse(&block(&[("Port", "1")]), &l),
            Err(HeaderError::BadName(_))
        ));
        assert!(matches!(
            HeaderBlock::parse(&block(&[("", "1")]), &l),
            Err(HeaderError::BadName(_))
        ));
        assert!(matches!(
            HeaderBlock::parse(&block(&[("a", "1"), ("a", "2")]), &l),
            Err(HeaderError::Duplicate(_))
        ));
        let mut trailing = block(&[("a", "1")]);
        trailing.push(0);
        assert_eq!(
            HeaderBlock::parse(&trailing, &l),
            Err(HeaderError::Trailing(1))
        );
    }
}
