//! A layer's tar stream made on a thread of its own, so an unpack uses two cores: that thread
//! reads the blob, decompresses it and checks the free space (inflate: the larger half of an
//! unpack's CPU time), while the unpacking thread hashes the tar, parses it and writes the
//! files. The bytes pass in `CHUNK`-sized buffers that go round a ring of
//! `RING`, so an unpack holds at most `RING * CHUNK` bytes however large its layer is.

use std::io::{self, Read};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::{Scope, ScopedJoinHandle};

/// Below glibc's default mmap threshold (128 KiB), as `fetch.rs`'s buffer, for the same reason.
const CHUNK: usize = 64 << 10;
const RING: usize = 8;

/// A filled buffer and how much of it holds data, or why the stream failed.
type Filled = io::Result<(Vec<u8>, usize)>;

/// What the producing thread ends with: the length of everything it read.
pub type Produced = io::Result<u64>;

/// The consuming end: reads the stream the producer makes, giving each buffer back once read.
pub struct Chunks {
    filled: Receiver<Filled>,
    empty: SyncSender<Vec<u8>>,
    current: Option<(Vec<u8>, usize)>,
    pos: usize,
}

/// Starts reading `source` to its end on a thread of `scope`.
pub fn spawn<'scope, R: Read + Send + 'scope>(
    scope: &'scope Scope<'scope, '_>,
    source: R,
) -> (Chunks, ScopedJoinHandle<'scope, Produced>) {
    let (fill_tx, fill_rx) = sync_channel::<Filled>(RING);
    let (empty_tx, empty_rx) = sync_channel::<Vec<u8>>(RING);
    for _ in 0..RING {
        empty_tx.send(vec![0; CHUNK]).expect("the ring has room");
    }
    let producer = scope.spawn(move || produce(source, &fill_tx, &empty_rx));
    let chunks = Chunks {
        filled: fill_rx,
        empty: empty_tx,
        current: None,
        pos: 0,
    };
    (chunks, producer)
}

fn produce<R: Read>(
    mut source: R,
    filled: &SyncSender<Filled>,
    empty: &Receiver<Vec<u8>>,
) -> Produced {
    // Either channel closing means the unpack stopped reading: it failed and has its reason.
    let stopped = || io::Error::new(io::ErrorKind::BrokenPipe, Stopped);
    let mut total = 0u64;
    loop {
        let mut buf = empty.recv().map_err(|_| stopped())?;
        match fill(&mut source, &mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => {
                total += n as u64;
                filled.send(Ok((buf, n))).map_err(|_| stopped())?;
            }
            Err(e) => {
                // The consumer gets the same kind and text; this thread returns the original.
                let _ = filled.send(Err(io::Error::new(e.kind(), e.to_string())));
                return Err(e);
            }
        }
    }
}

/// Why the producer gave up: the unpack stopped reading.
#[derive(Debug, thiserror::Error)]
#[error("the unpack stopped reading")]
struct Stopped;

/// Whether the producer ended because the unpack stopped reading (its error is the cause).
pub fn stopped(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<Stopped>())
}

/// Reads into `buf` until it is full or the source ends: few, full chunks cost the least.
fn fill(source: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match source.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

impl Read for Chunks {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        loop {
            if let Some((buf, len)) = &self.current {
                if self.pos < *len {
                    let n = out.len().min(len - self.pos);
                    out[..n].copy_from_slice(&buf[self.pos..self.pos + n]);
                    self.pos += n;
                    return Ok(n);
                }
                let (buf, _) = self.current.take().expect("checked above");
                // The producer may have ended and dropped its end of the ring.
                let _ = self.empty.send(buf);
            }
            match self.filled.recv() {
                Ok(Ok(next)) => {
                    self.current = Some(next);
                    self.pos = 0;
                }
                Ok(Err(e)) => return Err(e),
                // The producer finished: the stream ended (its result says whether well).
                Err(_) => return Ok(0),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn through(data: &[u8], read_size: usize) -> (Vec<u8>, Produced) {
        std::thread::scope(|s| {
            let (mut chunks, producer) = spawn(s, data);
            let mut out = Vec::new();
            let mut buf = vec![0; read_size];
            loop {
                let n = chunks.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                out.extend_from_slice(&buf[..n]);
            }
            (out, producer.join().unwrap())
        })
    }

    #[test]
    fn every_byte_arrives_in_order_and_is_counted() {
        let data: Vec<u8> = (0..(RING * CHUNK * 3 + 777))
            .map(|i| (i % 251) as u8)
            .collect();
        for (len, read_size) in [(data.len(), 1), (CHUNK, 512), (CHUNK + 1, CHUNK - 1)] {
            let (out, produced) = through(&data[..len], read_size);
            assert!(out == data[..len], "{len} bytes read {read_size} at a time");
            assert_eq!(produced.unwrap(), len as u64);
        }
        let (out, produced) = through(&data, CHUNK * 2);
        assert!(out == data);
        assert_eq!(produced.unwrap(), data.len() as u64);
        let (out, produced) = through(b"", 512);
        assert!(out.is_empty());
        assert_eq!(produced.unwrap(), 0);
    }

    /// Fails after `good` bytes, as a corrupt gzip stream or a full disk does.
    struct FailsAfter(usize);

    impl Read for FailsAfter {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0 == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "corrupt deflate",
                ));
            }
            let n = buf.len().min(self.0);
            buf[..n].fill(7);
            self.0 -= n;
            Ok(n)
        }
    }

    #[test]
    fn a_failed_source_reaches_the_reader_and_the_producer_result() {
        std::thread::scope(|s| {
            let source = FailsAfter(CHUNK * 2 + 5);
            let (mut chunks, producer) = spawn(s, source);
            let e = io::copy(&mut chunks, &mut io::sink()).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
            assert!(e.to_string().contains("corrupt deflate"), "{e}");
            let e = producer.join().unwrap().unwrap_err();
            assert!(e.to_string().contains("corrupt deflate"), "{e}");
        });
    }

    #[test]
    fn a_reader_that_stops_early_stops_the_producer() {
        std::thread::scope(|s| {
            let endless = io::repeat(1);
            let (mut chunks, producer) = spawn(s, endless);
            let mut first = [0u8; 10];
            chunks.read_exact(&mut first).unwrap();
            drop(chunks);
            let e = producer.join().unwrap().unwrap_err();
            assert!(stopped(&e), "{e}");
        });
    }
}
