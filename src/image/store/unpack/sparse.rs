//! GNU sparse files in their PAX forms, which the `tar` crate hands over as regular entries
//! carrying their encoded data (`GNUSparseFile.NNN/name`, a sparse map and the data chunks).
//! The old GNU form (type `S`) needs nothing here: the crate expands it while reading.
//!
//! PAX records name the format (GNU tar's `--sparse-version`):
//! - 0.0: repeated `GNU.sparse.offset` / `GNU.sparse.numbytes` records;
//! - 0.1: `GNU.sparse.map` = `offset,size,offset,size,...`;
//! - 1.0: the map is decimal lines at the start of the entry's data, padded to 512 bytes.
//!
//! In each, `GNU.sparse.name` is the real path and `GNU.sparse.size` / `GNU.sparse.realsize`
//! the real size; the data chunks follow in map order. The real file is written with holes
//! where the map has none. Any other version is refused, naming the entry and the version:
//! writing the encoded form as if it were the file would hand a workload a corrupt file.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};

/// A sparse map as text (format 1.0) may take at most this much of the entry's data, which
/// bounds the memory a layer can make the extractor spend on one map.
const MAX_MAP_TEXT: usize = 1 << 20;

/// The GNU sparse records of one entry, collected while its PAX records are read.
#[derive(Default)]
pub struct SparseRecords {
    major: Option<String>,
    minor: Option<String>,
    name: Option<Vec<u8>>,
    size: Option<String>,
    map: Option<String>,
    /// Format 0.0: offsets and sizes as they come, in order.
    pairs: Vec<String>,
}

/// A sparse entry to write: its real size, its map (unless it leads the data) and real name.
#[derive(Debug, PartialEq)]
pub struct Sparse {
    pub format: &'static str,
    pub real_size: u64,
    pub name: Option<Vec<u8>>,
    map: Option<Vec<(u64, u64)>>,
}

/// Why a sparse entry cannot be written.
#[derive(Debug)]
pub enum SparseFail {
    /// A PAX sparse version this extractor does not know.
    Unsupported(String),
    /// The map or the data contradict each other.
    Corrupt(String),
    /// Writing the file failed.
    Write(io::Error),
}

impl SparseRecords {
    /// Takes `key` if it is a GNU sparse record; false when it is not one.
    pub fn record(&mut self, key: &str, value: &[u8]) -> bool {
        let text = || String::from_utf8_lossy(value).into_owned();
        match key {
            "GNU.sparse.major" => self.major = Some(text()),
            "GNU.sparse.minor" => self.minor = Some(text()),
            "GNU.sparse.name" => self.name = Some(value.to_vec()),
            "GNU.sparse.size" | "GNU.sparse.realsize" => self.size = Some(text()),
            "GNU.sparse.map" => self.map = Some(text()),
            "GNU.sparse.offset" | "GNU.sparse.numbytes" => self.pairs.push(text()),
            "GNU.sparse.numblocks" => {}
            _ => return false,
        }
        true
    }

    /// The entry's sparse layout, or None when it is not a PAX sparse file.
    pub fn finish(self) -> Result<Option<Sparse>, SparseFail> {
        let major = self.major.as_deref();
        let minor = self.minor.as_deref();
        let format = match (major, minor) {
            (Some("1"), Some("0")) => "1.0",
            (Some("0"), Some("1")) => "0.1",
            (Some("0"), Some("0")) => "0.0",
            (None, None) if self.map.is_some() => "0.1",
            (None, None) if !self.pairs.is_empty() => "0.0",
            (None, None) => return Ok(None),
            (a, b) => {
                return Err(SparseFail::Unsupported(format!(
                    "GNU sparse PAX format {}.{}",
                    a.unwrap_or("?"),
                    b.unwrap_or("?")
                )));
            }
        };
        let corrupt = |what: &str| SparseFail::Corrupt(format!("GNU sparse {format}: {what}"));
        let real_size = self
            .size
            .as_deref()
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(|| corrupt("no valid real size record"))?;
        let map = match format {
            "1.0" => None,
            _ => {
                let numbers: Vec<&str> = match &self.map {
                    Some(m) if m.is_empty() => vec![],
                    Some(m) => m.split(',').collect(),
                    None => self.pairs.iter().map(String::as_str).collect(),
                };
                Some(pairs(&numbers).ok_or_else(|| corrupt("malformed sparse map"))?)
            }
        };
        if let Some(m) = &map {
            validate(m, real_size).map_err(|e| corrupt(&e))?;
        }
        Ok(Some(Sparse {
            format,
            real_size,
            name: self.name,
            map,
        }))
    }
}

/// Offsets and sizes, pairwise, from decimal strings.
fn pairs(numbers: &[&str]) -> Option<Vec<(u64, u64)>> {
    if numbers.len() % 2 != 0 {
        return None;
    }
    numbers
        .chunks(2)
        .map(|p| Some((decimal(p[0])?, decimal(p[1])?)))
        .collect()
}

fn decimal(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Chunks in order, not overlapping, inside the real size.
fn validate(map: &[(u64, u64)], real_size: u64) -> Result<(), String> {
    let mut end = 0u64;
    for &(off, len) in map {
        let stop = off
            .checked_add(len)
            .ok_or_else(|| format!("chunk at {off} overflows"))?;
        if off < end {
            return Err(format!("chunk at {off} overlaps the one before"));
        }
        if stop > real_size {
            return Err(format!(
                "chunk at {off} ends past the real size {real_size}"
            ));
        }
        end = stop;
    }
    Ok(())
}

/// Reads a format 1.0 map: a count, then an offset and a size per chunk, one decimal number
/// per line, in whole 512-byte blocks.
fn read_map_1x0(data: &mut impl Read) -> Result<Vec<(u64, u64)>, SparseFail> {
    let corrupt = |what: &str| SparseFail::Corrupt(format!("GNU sparse 1.0: {what}"));
    let mut text = Vec::new();
    let mut lines = 0usize;
    let mut needed: Option<usize> = None;
    let mut block = [0u8; 512];
    loop {
        if needed.is_none() && lines >= 1 {
            let first = text.split(|b| *b == b'\n').next().unwrap_or_default();
            let count = std::str::from_utf8(first)
                .ok()
                .and_then(decimal)
                .ok_or_else(|| corrupt("malformed chunk count"))?;
            let count = usize::try_from(count)
                .ok()
                .filter(|c| *c <= MAX_MAP_TEXT / 4)
                .ok_or_else(|| corrupt("sparse map larger than 1 MiB"))?;
            needed = Some(1 + 2 * count);
        }
        if needed.is_some_and(|n| lines >= n) {
            break;
        }
        if text.len() >= MAX_MAP_TEXT {
            return Err(corrupt("sparse map larger than 1 MiB"));
        }
        data.read_exact(&mut block)
            .map_err(|_| corrupt("the data ends inside the sparse map"))?;
        lines += block.iter().filter(|b| **b == b'\n').count();
        text.extend_from_slice(&block);
    }
    let numbers: Vec<&str> = text
        .split(|b| *b == b'\n')
        .skip(1)
        .take(needed.unwrap_or(1) - 1)
        .map(|l| std::str::from_utf8(l).unwrap_or(""))
        .collect();
    pairs(&numbers).ok_or_else(|| corrupt("malformed sparse map"))
}

impl Sparse {
    /// Writes the real file into `file` from the entry's data: each chunk at its offset, holes
    /// left between them, the file cut to its real size. All data must be used.
    pub fn write(
        &self,
        file: &mut File,
        data: &mut impl Read,
        buf: &mut [u8],
    ) -> Result<(), SparseFail> {
        let read_map;
        let map = match &self.map {
            Some(m) => m,
            None => {
                read_map = read_map_1x0(data)?;
                validate(&read_map, self.real_size)
                    .map_err(|e| SparseFail::Corrupt(format!("GNU sparse 1.0: {e}")))?;
                &read_map
            }
        };
        let short = || {
            SparseFail::Corrupt(format!(
                "GNU sparse {}: the data ends before the map does",
                self.format
            ))
        };
        for &(off, len) in map {
            file.seek(SeekFrom::Start(off)).map_err(SparseFail::Write)?;
            let mut left = len;
            while left > 0 {
                let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                let n = data.read(&mut buf[..want]).map_err(|_| short())?;
                if n == 0 {
                    return Err(short());
                }
                file.write_all(&buf[..n]).map_err(SparseFail::Write)?;
                left -= n as u64;
            }
        }
        if data.read(&mut buf[..1]).map_err(|_| short())? != 0 {
            return Err(SparseFail::Corrupt(format!(
                "GNU sparse {}: data the map does not list",
                self.format
            )));
        }
        file.set_len(self.real_size).map_err(SparseFail::Write)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(list: &[(&str, &str)]) -> SparseRecords {
        let mut r = SparseRecords::default();
        for (k, v) in list {
            assert!(r.record(k, v.as_bytes()));
        }
        r
    }

    fn written(s: &Sparse, data: &[u8]) -> Result<Vec<u8>, SparseFail> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let mut f = File::create(&p).unwrap();
        s.write(&mut f, &mut &data[..], &mut [0u8; 7])?;
        Ok(std::fs::read(p).unwrap())
    }

    #[test]
    fn formats_0x_take_their_map_from_records() {
        let s = records(&[
            ("GNU.sparse.size", "10"),
            ("GNU.sparse.offset", "2"),
            ("GNU.sparse.numbytes", "3"),
            ("GNU.sparse.offset", "8"),
            ("GNU.sparse.numbytes", "2"),
        ])
        .finish()
        .unwrap()
        .unwrap();
        assert_eq!(s.format, "0.0");
        assert_eq!(written(&s, b"abcde").unwrap(), b"\0\0abc\0\0\0de");
        let s = records(&[
            ("GNU.sparse.major", "0"),
            ("GNU.sparse.minor", "1"),
            ("GNU.sparse.name", "real"),
            ("GNU.sparse.size", "4"),
            ("GNU.sparse.map", "0,1,3,1"),
        ])
        .finish()
        .unwrap()
        .unwrap();
        assert_eq!(s.name.as_deref(), Some(&b"real"[..]));
        assert_eq!(written(&s, b"xy").unwrap(), b"x\0\0y");
    }

    #[test]
    fn format_1x0_reads_its_map_from_the_data() {
        let s = records(&[
            ("GNU.sparse.major", "1"),
            ("GNU.sparse.minor", "0"),
            ("GNU.sparse.realsize", "9000"),
        ])
        .finish()
        .unwrap()
        .unwrap();
        let mut data = b"2\n0\n2\n8990\n3\n".to_vec();
        data.resize(512, 0);
        data.extend_from_slice(b"ab123");
        let out = written(&s, &data).unwrap();
        assert_eq!(out.len(), 9000);
        assert_eq!(&out[..3], b"ab\0");
        assert_eq!(&out[8990..8993], b"123");
        assert!(out[2..8990].iter().all(|b| *b == 0));
    }

    #[test]
    fn unknown_versions_and_bad_maps_are_refused() {
        let r = records(&[("GNU.sparse.major", "2"), ("GNU.sparse.minor", "0")]).finish();
        assert!(
            matches!(&r, Err(SparseFail::Unsupported(m)) if m == "GNU sparse PAX format 2.0"),
            "{r:?}"
        );
        for map in ["0,5,2,1", "0,1,2", "0,x", "0,11"] {
            let r = records(&[("GNU.sparse.size", "10"), ("GNU.sparse.map", map)]).finish();
            assert!(matches!(r, Err(SparseFail::Corrupt(_))), "{map}: {r:?}");
        }
        let s = records(&[("GNU.sparse.size", "4"), ("GNU.sparse.map", "0,2")])
            .finish()
            .unwrap()
            .unwrap();
        assert!(matches!(written(&s, b"a"), Err(SparseFail::Corrupt(_))));
        assert!(matches!(written(&s, b"abc"), Err(SparseFail::Corrupt(_))));
        let s = records(&[
            ("GNU.sparse.major", "1"),
            ("GNU.sparse.minor", "0"),
            ("GNU.sparse.realsize", "4"),
        ])
        .finish()
        .unwrap()
        .unwrap();
        let mut huge = b"99999999999\n".to_vec();
        huge.resize(512, 0);
        assert!(matches!(written(&s, &huge), Err(SparseFail::Corrupt(_))));
        assert!(matches!(
            written(&s, b"1\n0\n"),
            Err(SparseFail::Corrupt(_))
        ));
    }
}
