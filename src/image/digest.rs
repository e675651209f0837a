//! Content digests (`algorithm:hex`) and the hasher that computes them while data streams by.
//! Only sha256 and sha512 are accepted: a digest names a file in the content store, so anything
//! that is not lowercase hex of the right length is refused before it can become a path.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::Digest as _;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    Sha256,
    Sha512,
}

impl Algorithm {
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Sha256 => "sha256",
            Algorithm::Sha512 => "sha512",
        }
    }
    fn hex_len(self) -> usize {
        match self {
            Algorithm::Sha256 => 64,
            Algorithm::Sha512 => 128,
        }
    }
}

/// A validated content digest such as `sha256:0123...`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest {
    algorithm: Algorithm,
    hex: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid digest {0:?}: expected sha256:<64 hex> or sha512:<128 hex>")]
pub struct DigestError(pub String);

impl Digest {
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
    /// The lowercase hex part, safe to use as a file name.
    pub fn hex(&self) -> &str {
        &self.hex
    }
    /// The sha256 digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest::compute(Algorithm::Sha256, bytes)
    }
    /// The digest of `bytes` with `algorithm`.
    pub fn compute(algorithm: Algorithm, bytes: &[u8]) -> Digest {
        let mut h = Hasher::new(algorithm);
        h.update(bytes);
        h.finish()
    }
    /// The first 12 hex characters, as `crust image ls` shows ids.
    pub fn short(&self) -> &str {
        &self.hex[..12]
    }
}

impl FromStr for Digest {
    type Err = DigestError;
    fn from_str(s: &str) -> Result<Digest, DigestError> {
        let bad = || DigestError(s.to_owned());
        let (alg, hex) = s.split_once(':').ok_or_else(bad)?;
        let algorithm = match alg {
            "sha256" => Algorithm::Sha256,
            "sha512" => Algorithm::Sha512,
            _ => return Err(bad()),
        };
        let lower_hex = hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if hex.len() != algorithm.hex_len() || !lower_hex {
            return Err(bad());
        }
        Ok(Digest {
            algorithm,
            hex: hex.to_owned(),
        })
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.algorithm.name(), self.hex)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Digest, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Computes a digest incrementally.
pub enum Hasher {
    Sha256(sha2::Sha256),
    Sha512(sha2::Sha512),
}

impl Hasher {
    pub fn new(algorithm: Algorithm) -> Hasher {
        match algorithm {
            Algorithm::Sha256 => Hasher::Sha256(sha2::Sha256::new()),
            Algorithm::Sha512 => Hasher::Sha512(sha2::Sha512::new()),
        }
    }
    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(bytes),
            Hasher::Sha512(h) => h.update(bytes),
        }
    }
    pub fn finish(self) -> Digest {
        let (algorithm, hex) = match self {
            Hasher::Sha256(h) => (Algorithm::Sha256, hex::encode(h.finalize())),
            Hasher::Sha512(h) => (Algorithm::Sha512, hex::encode(h.finalize())),
        };
        Digest { algorithm, hex }
    }
}

/// A reader that hashes everything read through it (for diff ids of uncompressed layers).
pub struct HashingReader<R> {
    inner: R,
    hasher: Hasher,
    count: u64,
}

impl<R: std::io::Read> HashingReader<R> {
    pub fn new(inner: R, algorithm: Algorithm) -> Self {
        HashingReader {
            inner,
            hasher: Hasher::new(algorithm),
            count: 0,
        }
    }
    /// Reads the rest of the stream (tar archives end with padding a tar reader leaves unread)
    /// and returns the digest of everything and its length.
    pub fn finish(mut self) -> std::io::Result<(Digest, u64)> {
        std::io::copy(&mut self, &mut std::io::sink())?;
        Ok((self.hasher.finish(), self.count))
    }
}

impl<R: std::io::Read> std::io::Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

/// The chain id of each layer: the first layer's is its diff id, each next one is
/// `sha256(parent_chain_id + " " + diff_id)` (OCI image spec, "ChainID").
pub fn chain_ids(diff_ids: &[Digest]) -> Vec<Digest> {
    let mut out: Vec<Digest> = Vec::with_capacity(diff_ids.len());
    for d in diff_ids {
        let next = match out.last() {
            None => d.clone(),
            Some(parent) => Digest::of(format!("{parent} {d}").as_bytes()),
        };
        out.push(next);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_print() {
        let d: Digest = format!("sha256:{}", "a".repeat(64)).parse().unwrap();
        assert_eq!(d.to_string(), format!("sha256:{}", "a".repeat(64)));
        assert_eq!(d.short(), "aaaaaaaaaaaa");
        for bad in [
            "sha256:abc",
            "md5:aa",
            &format!("sha256:{}", "A".repeat(64)),
            "sha256",
            "",
        ] {
            assert!(bad.parse::<Digest>().is_err(), "{bad}");
        }
        let long: Digest = format!("sha512:{}", "0".repeat(128)).parse().unwrap();
        assert_eq!(long.algorithm(), Algorithm::Sha512);
    }

    #[test]
    fn hashes_match_known_values() {
        assert_eq!(
            Digest::of(b"").to_string(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn chain_ids_follow_the_spec() {
        let a = Digest::of(b"a");
        let b = Digest::of(b"b");
        let ids = chain_ids(&[a.clone(), b.clone()]);
        assert_eq!(ids[0], a);
        assert_eq!(ids[1], Digest::of(format!("{a} {b}").as_bytes()));
    }
}
