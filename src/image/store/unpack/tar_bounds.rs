//! Bounds what a layer's tar can make the extractor hold in memory. The `tar` crate reads a
//! PAX extended header (`x`, `g`) or a GNU long name or link (`L`, `K`) whole into memory,
//! however large its header says it is, and a gzip layer of a megabyte can expand into
//! gigabytes of zeros. This reader sits in front of the crate, follows the archive's block
//! structure as the bytes pass, and fails the stream when such a header declares more than
//! `MAX_SPECIAL` bytes (Go's archive/tar, and so containerd, has the same 1 MiB limit).

use std::io::{self, Read};

/// The largest PAX header or GNU long name accepted.
pub const MAX_SPECIAL: u64 = 1 << 20;

const BLOCK: u64 = 512;

/// Passes a tar stream through, checking each header as it goes by.
pub struct TarBounds<R> {
    inner: R,
    /// Offset in the stream of the next byte read.
    pos: u64,
    /// Offset of the next header block.
    next_header: u64,
    header: [u8; 512],
    filled: usize,
    /// Data of the PAX header being read (at most `MAX_SPECIAL` bytes), for its `size` record.
    pax: Option<Vec<u8>>,
    /// The data end of the PAX header being read.
    pax_end: u64,
    /// A data size a PAX `size` record set for the next entry.
    size_override: Option<u64>,
    /// GNU sparse extension blocks still to come, and the data after them.
    sparse_ext: bool,
    pending_data: u64,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// A numeric header field: octal text, or base-256 when its first byte has the high bit.
fn number(field: &[u8]) -> Option<u64> {
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        let mut v: u64 = u64::from(field[0] & 0x7f);
        for b in &field[1..] {
            v = v.checked_mul(256)?.checked_add(u64::from(*b))?;
        }
        return Some(v);
    }
    let text: Vec<u8> = field
        .iter()
        .copied()
        .skip_while(|b| *b == b' ' || *b == 0)
        .take_while(|b| (b'0'..=b'7').contains(b))
        .collect();
    if text.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(std::str::from_utf8(&text).ok()?, 8).ok()
}

fn padded(size: u64) -> Option<u64> {
    size.checked_add(BLOCK - 1).map(|s| s / BLOCK * BLOCK)
}

/// The value of a PAX `size` record, if `data` has one.
fn pax_size(data: &[u8]) -> Option<u64> {
    let mut rest = data;
    while !rest.is_empty() {
        let space = rest.iter().position(|b| *b == b' ')?;
        let len: usize = std::str::from_utf8(&rest[..space]).ok()?.parse().ok()?;
        let record = rest.get(space + 1..len)?;
        if let Some(v) = record.strip_prefix(b"size=") {
            let v = v.strip_suffix(b"\n").unwrap_or(v);
            return std::str::from_utf8(v).ok()?.parse().ok();
        }
        rest = rest.get(len..)?;
    }
    None
}

impl<R: Read> TarBounds<R> {
    pub fn new(inner: R) -> TarBounds<R> {
        TarBounds {
            inner,
            pos: 0,
            next_header: 0,
            header: [0; 512],
            filled: 0,
            pax: None,
            pax_end: 0,
            size_override: None,
            sparse_ext: false,
            pending_data: 0,
        }
    }

    /// Takes in a complete header block: where the next one starts.
    fn header_done(&mut self) -> io::Result<()> {
        let h = self.header;
        let after = self.next_header + BLOCK;
        if self.sparse_ext {
            // A GNU sparse extension block: its own "more follow" flag is at 504.
            self.sparse_ext = h[504] != 0;
            if !self.sparse_ext {
                self.next_header = after + self.pending_data;
            } else {
                self.next_header = after;
            }
            return Ok(());
        }
        if h.iter().all(|b| *b == 0) {
            self.next_header = after;
            return Ok(());
        }
        let kind = h[156];
        let declared = number(&h[124..136])
            .ok_or_else(|| invalid("tar header with a malformed size".into()))?;
        let size = match kind {
            b'x' | b'g' | b'L' | b'K' => declared,
            _ => self.size_override.take().unwrap_or(declared),
        };
        if matches!(kind, b'x' | b'g' | b'L' | b'K') && size > MAX_SPECIAL {
            return Err(invalid(format!(
                "tar header of type {:?} declares {size} bytes, over the {} KiB limit",
                kind as char,
                MAX_SPECIAL >> 10
            )));
        }
        if kind == b'x' {
            self.size_override = None;
            if size > 0 {
                self.pax = Some(Vec::with_capacity(size as usize));
                self.pax_end = after + size;
            }
        }
        let data = padded(size).ok_or_else(|| invalid("tar entry size overflows".into()))?;
        if kind == b'S' && h[482] != 0 {
            self.sparse_ext = true;
            self.pending_data = data;
            self.next_header = after;
        } else {
            self.next_header = after
                .checked_add(data)
                .ok_or_else(|| invalid("tar entry size overflows".into()))?;
        }
        Ok(())
    }

    /// Follows the bytes `buf` (just read, starting at `self.pos`).
    fn observe(&mut self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            if self.pos < self.next_header {
                let skip = (self.next_header - self.pos).min(buf.len() as u64) as usize;
                if let Some(pax) = self.pax.as_mut() {
                    let want = self.pax_end.saturating_sub(self.pos).min(skip as u64) as usize;
                    pax.extend_from_slice(&buf[..want]);
                }
                self.pos += skip as u64;
                buf = &buf[skip..];
                if self.pos >= self.pax_end {
                    if let Some(pax) = self.pax.take() {
                        self.size_override = pax_size(&pax);
                    }
                }
                continue;
            }
            let take = (512 - self.filled).min(buf.len());
            self.header[self.filled..self.filled + take].copy_from_slice(&buf[..take]);
            self.filled += take;
            self.pos += take as u64;
            buf = &buf[take..];
            if self.filled == 512 {
                self.filled = 0;
                self.header_done()?;
            }
        }
        Ok(())
    }
}

impl<R: Read> Read for TarBounds<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.observe(&buf[..n])?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(name: &str, kind: u8, size: u64) -> [u8; 512] {
        let mut h = tar::Header::new_ustar();
        h.set_path(name).unwrap();
        h.as_mut_bytes()[156] = kind;
        h.set_size(size);
        h.set_cksum();
        *h.as_bytes()
    }

    fn drain(t: &[u8]) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut r = TarBounds::new(t);
        let mut buf = [0u8; 7]; // odd chunks: headers arrive in pieces
        loop {
            let n = r.read(&mut buf)?;
            if n == 0 {
                return Ok(out);
            }
            out.extend_from_slice(&buf[..n]);
        }
    }

    #[test]
    fn ordinary_archives_pass_unchanged() {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(3);
        b.append_data(&mut h, "l".repeat(300), &b"abc"[..]).unwrap();
        let mut h = tar::Header::new_ustar();
        h.set_size(1000);
        b.append_data(&mut h, "big", &[1u8; 1000][..]).unwrap();
        let t = b.into_inner().unwrap();
        assert_eq!(drain(&t).unwrap(), t);
    }

    #[test]
    fn oversized_special_headers_are_refused_where_they_start() {
        for kind in [b'x', b'g', b'L', b'K'] {
            let mut t = header("h", kind, MAX_SPECIAL + 1).to_vec();
            t.resize(4096, 0);
            let e = drain(&t).unwrap_err();
            assert!(e.to_string().contains("over the 1024 KiB limit"), "{e}");
        }
    }

    #[test]
    fn a_pax_size_record_moves_the_next_header() {
        let rec = b"13 size=1000\n";
        let mut t = header("pax", b'x', rec.len() as u64).to_vec();
        t.extend_from_slice(rec);
        t.resize(1024, 0);
        t.extend_from_slice(&header("f", b'0', 0));
        t.extend_from_slice(&[0u8; 1024]); // the 1000 bytes the PAX record declared, padded
        t.extend_from_slice(&header("huge", b'x', MAX_SPECIAL * 2));
        t.resize(t.len() + 1024, 0);
        let e = drain(&t).unwrap_err();
        assert!(e.to_string().contains("type 'x'"), "{e}");
    }

    #[test]
    fn numbers_in_octal_and_base_256() {
        assert_eq!(number(b"00000001750\0"), Some(1000));
        assert_eq!(number(b"     12 "), Some(10));
        let mut big = [0u8; 12];
        big[0] = 0x80;
        big[11] = 2;
        big[10] = 1;
        assert_eq!(number(&big), Some(258));
        assert_eq!(number(b"\0\0"), Some(0));
    }
}
