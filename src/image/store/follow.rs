//! Reading a blob while it downloads: the extraction of a layer follows its ingest file, so
//! inflating, hashing and writing the files overlap the transfer instead of waiting for it.
//!
//! The writer (`content::Ingest`) advances the written length after each write reaches the
//! file, and ends the stream once the blob's size and digest hold, or with an error when the
//! download fails or is dropped. The reader never sees the end of a blob that did not verify,
//! so a layer is never sealed from unverified bytes. The writer never waits for the reader.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// What the writer has done so far.
#[derive(Default)]
struct Written {
    bytes: u64,
    end: Option<Result<(), String>>,
}

/// Shared between an ingest and the reader following it.
#[derive(Default)]
pub struct Progress {
    state: Mutex<Written>,
    changed: Condvar,
}

impl Progress {
    fn state(&self) -> MutexGuard<'_, Written> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `bytes` of the blob are in its file.
    pub fn advance(&self, bytes: u64) {
        self.state().bytes = bytes;
        self.changed.notify_all();
    }

    /// No more bytes will come: the blob verified (`Ok`), or why not. The first end counts.
    pub fn end(&self, result: Result<(), String>) {
        let mut w = self.state();
        if w.end.is_none() {
            w.end = Some(result);
        }
        drop(w);
        self.changed.notify_all();
    }
}

/// A reader of a blob's ingest file that waits for bytes not yet written and ends only where
/// the writer ended a verified blob.
pub struct Following {
    file: File,
    at: u64,
    progress: Arc<Progress>,
}

impl Following {
    /// Follows the file at `path`, written by whoever advances `progress`.
    pub fn open(path: &Path, progress: Arc<Progress>) -> io::Result<Following> {
        Ok(Following {
            file: File::open(path)?,
            at: 0,
            progress,
        })
    }

    /// Bytes written beyond what was read, waiting for some; 0 at a verified end.
    fn available(&self) -> io::Result<u64> {
        let mut w = self.progress.state();
        loop {
            if w.bytes > self.at {
                return Ok(w.bytes - self.at);
            }
            match &w.end {
                Some(Ok(())) => return Ok(0),
                Some(Err(why)) => return Err(io::Error::other(why.clone())),
                None => {}
            }
            w = self
                .progress
                .changed
                .wait(w)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl Read for Following {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let available = self.available()?;
        if available == 0 {
            return Ok(0);
        }
        let n = usize::try_from(available).map_or(buf.len(), |a| a.min(buf.len()));
        let got = self.file.read(&mut buf[..n])?;
        if got == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the download's file is shorter than what was written to it",
            ));
        }
        self.at += got as u64;
        Ok(got)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn a_follower_reads_what_arrives_and_ends_only_where_the_writer_says() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blob");
        let mut f = File::create(&path).unwrap();
        let progress = Arc::new(Progress::default());
        let mut r = Following::open(&path, progress.clone()).unwrap();
        let reader = std::thread::spawn(move || {
            let mut all = Vec::new();
            r.read_to_end(&mut all).map(|_| all)
        });
        for chunk in [&b"one "[..], b"two ", b"three"] {
            f.write_all(chunk).unwrap();
            let len = f.metadata().unwrap().len();
            progress.advance(len);
        }
        progress.end(Ok(()));
        assert_eq!(reader.join().unwrap().unwrap(), b"one two three");
    }

    #[test]
    fn a_failed_download_fails_its_follower() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blob");
        let mut f = File::create(&path).unwrap();
        let progress = Arc::new(Progress::default());
        let mut r = Following::open(&path, progress.clone()).unwrap();
        f.write_all(b"half").unwrap();
        progress.advance(4);
        progress.end(Err("the registry went away".into()));
        let mut all = Vec::new();
        let e = r.read_to_end(&mut all).unwrap_err();
        assert_eq!(all, b"half");
        assert!(e.to_string().contains("went away"), "{e}");
    }
}
