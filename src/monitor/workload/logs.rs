//! Container output into CRI log files, the format kubelet parses: one line per record,
//! `<RFC3339Nano timestamp> <stdout|stderr> <P|F> <text>`. A line longer than `MAX_LINE` is
//! split into partial (`P`) records ended by a full (`F`) one; output that ends without a
//! newline is written as a partial record when the stream closes, as containerd and CRI-O write
//! it: kubelet ends each full record with a newline when it reads a log back (`kubectl logs`,
//! a FallbackToLogsOnError termination message), which the program never wrote. A tty's
//! output is stdout.
//!
//! A relay owns one output pipe (or a tty master) of one container. It is pumped by its task
//! whenever the pipe is readable, and also pumped synchronously when the container's process
//! exits, so that everything the process wrote is in the log before its exit is reported.

use std::cell::RefCell;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::rc::Rc;

/// The longest record kubelet gets in one piece (containerd's default too).
pub const MAX_LINE: usize = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// The log file of one container. Without a path, output is dropped.
pub struct LogFile {
    path: Option<PathBuf>,
    file: Option<File>,
    /// The record being formatted, reused so a busy container does not allocate per line.
    scratch: Vec<u8>,
}

impl LogFile {
    pub fn open(path: Option<PathBuf>) -> std::io::Result<LogFile> {
        let file = path.as_deref().map(open_append).transpose()?;
        Ok(LogFile {
            path,
            file,
            scratch: Vec::new(),
        })
    }

    /// Opens the path again: kubelet renamed the old file away to rotate it.
    pub fn reopen(&mut self) -> std::io::Result<()> {
        if let Some(path) = &self.path {
            self.file = Some(open_append(path)?);
        }
        Ok(())
    }

    /// Writes one record in a single write, so records of stdout and stderr never interleave.
    pub fn write(&mut self, stream: Stream, partial: bool, text: &[u8]) {
        let Some(file) = self.file.as_mut() else {
            return;
        };
        self.scratch.clear();
        self.scratch
            .extend_from_slice(rfc3339_nanos(std::time::SystemTime::now()).as_bytes());
        self.scratch.push(b' ');
        self.scratch.extend_from_slice(stream.name().as_bytes());
        self.scratch
            .extend_from_slice(if partial { b" P " } else { b" F " });
        self.scratch.extend_from_slice(text);
        self.scratch.push(b'\n');
        // A full disk loses the record, not the container: kubelet reads what is there.
        let _ = file.write_all(&self.scratch);
    }
}

fn open_append(path: &std::path::Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    File::options()
        .create(true)
        .append(true)
        .mode(0o640)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
}

/// Splits a byte stream into log records.
#[derive(Default)]
pub struct LineSplitter {
    pending: Vec<u8>,
    /// A tty ends its lines with `\r\n`: the record keeps the text only. A pipe's `\r` is
    /// the program's own and stays.
    strip_cr: bool,
}

impl LineSplitter {
    /// Feeds bytes; `emit(partial, text)` receives every record they complete.
    pub fn feed(&mut self, mut bytes: &[u8], emit: &mut impl FnMut(bool, &[u8])) {
        while !bytes.is_empty() {
            let room = MAX_LINE - self.pending.len();
            let window = &bytes[..bytes.len().min(room)];
            match window.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    let line = &window[..i];
                    if self.pending.is_empty() {
                        emit(false, trim(self.strip_cr, line));
                    } else {
                        self.pending.extend_from_slice(line);
                        emit(false, trim(self.strip_cr, &self.pending));
                        self.pending.clear();
                    }
                    bytes = &bytes[i + 1..];
                }
                None if window.len() == room => {
                    self.pending.extend_from_slice(window);
                    emit(true, &self.pending);
                    self.pending.clear();
                    bytes = &bytes[room..];
                }
                None => {
                    self.pending.extend_from_slice(window);
                    bytes = &[];
                }
            }
        }
    }

    /// The stream ended: what is left, a line without its newline, is a partial record.
    pub fn finish(&mut self, emit: &mut impl FnMut(bool, &[u8])) {
        if !self.pending.is_empty() {
            emit(true, &self.pending);
            self.pending.clear();
        }
    }
}

fn trim(strip_cr: bool, line: &[u8]) -> &[u8] {
    if strip_cr {
        line.strip_suffix(b"\r").unwrap_or(line)
    } else {
        line
    }
}

/// Where attached clients get a copy of a container's output: one bounded channel each, of
/// (frame stream, bytes). One that falls behind is dropped (it detaches), never the log.
pub type Attachers = Rc<RefCell<Vec<tokio::sync::mpsc::Sender<(u8, Vec<u8>)>>>>;

/// One output of one container flowing into its log file (and to attached clients).
pub struct Relay {
    fd: std::os::fd::RawFd,
    stream: Stream,
    splitter: LineSplitter,
    log: Rc<RefCell<LogFile>>,
    attachers: Attachers,
    eof: bool,
}

impl Relay {
    fn copy_to_attachers(&self, data: &[u8]) {
        let frame_stream = match self.stream {
            Stream::Stdout => crate::monitor::frame::STDOUT,
            Stream::Stderr => crate::monitor::frame::STDERR,
        };
        self.attachers
            .borrow_mut()
            .retain(|a| a.try_send((frame_stream, data.to_vec())).is_ok());
    }

    /// Reads what the pipe holds now; returns true at end of stream (or a read error, which
    /// a tty master gives once its last writer is gone).
    pub fn pump(&mut self) -> bool {
        let mut buf = [0u8; 32 * 1024];
        while !self.eof {
            match nix::unistd::read(self.fd, &mut buf) {
                Ok(0) => self.eof = true,
                Ok(n) => {
                    let (log, stream) = (&self.log, self.stream);
                    self.splitter.feed(&buf[..n], &mut |partial, text| {
                        log.borrow_mut().write(stream, partial, text)
                    });
                    self.copy_to_attachers(&buf[..n]);
                }
                Err(nix::errno::Errno::EAGAIN) => return false,
                Err(nix::errno::Errno::EINTR) => {}
                Err(_) => self.eof = true,
            }
        }
        let (log, stream) = (&self.log, self.stream);
        self.splitter
            .finish(&mut |partial, text| log.borrow_mut().write(stream, partial, text));
        true
    }
}

/// Starts relaying `fd` (made non-blocking here) into `log`; returns the relay, which the
/// caller keeps to pump it when the container exits.
pub fn start(
    fd: OwnedFd,
    stream: Stream,
    tty: bool,
    log: Rc<RefCell<LogFile>>,
    attachers: Attachers,
) -> std::io::Result<Rc<RefCell<Relay>>> {
    set_nonblocking(&fd)?;
    let relay = Rc::new(RefCell::new(Relay {
        fd: fd.as_raw_fd(),
        stream,
        splitter: LineSplitter {
            strip_cr: tty,
            ..Default::default()
        },
        log,
        attachers,
        eof: false,
    }));
    let afd = crate::sys::async_fd(fd)?;
    let task_relay = relay.clone();
    tokio::task::spawn_local(async move {
        loop {
            let Ok(mut ready) = afd.readable().await else {
                break;
            };
            if task_relay.borrow_mut().pump() {
                break;
            }
            ready.clear_ready();
        }
        // Dropping the AsyncFd closes the pipe; the relay is marked done first so that
        // nobody reads a closed (or reused) descriptor.
        task_relay.borrow_mut().eof = true;
    });
    Ok(relay)
}

pub fn set_nonblocking(fd: &impl std::os::fd::AsFd) -> std::io::Result<()> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let flags = OFlag::from_bits_truncate(fcntl(fd.as_fd().as_raw_fd(), FcntlArg::F_GETFL)?);
    fcntl(
        fd.as_fd().as_raw_fd(),
        FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK),
    )?;
    Ok(())
}

pub use crate::clock::rfc3339_nanos;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn split(chunks: &[&[u8]]) -> Vec<(bool, Vec<u8>)> {
        split_with(false, chunks)
    }

    fn split_with(strip_cr: bool, chunks: &[&[u8]]) -> Vec<(bool, Vec<u8>)> {
        let mut out = Vec::new();
        let mut s = LineSplitter {
            strip_cr,
            ..Default::default()
        };
        for c in chunks {
            s.feed(c, &mut |p, t| out.push((p, t.to_vec())));
        }
        s.finish(&mut |p, t| out.push((p, t.to_vec())));
        out
    }

    #[test]
    fn lines_are_full_records_and_a_tail_is_flushed_partial_at_the_end() {
        assert_eq!(
            split(&[b"one\ntw", b"o\n", b"three"]),
            vec![
                (false, b"one".to_vec()),
                (false, b"two".to_vec()),
                (true, b"three".to_vec())
            ]
        );
        assert_eq!(split(&[b"\n\n"]), vec![(false, vec![]), (false, vec![])]);
        assert_eq!(
            split_with(true, &[b"tty line\r\n"]),
            vec![(false, b"tty line".to_vec())]
        );
        assert_eq!(split(&[b"pipe\r\n"]), vec![(false, b"pipe\r".to_vec())]);
    }

    #[test]
    fn long_lines_become_partial_records_then_a_full_one() {
        let long = vec![b'x'; MAX_LINE * 2 + 10];
        let mut input = long.clone();
        input.push(b'\n');
        let out = split(&[&input[..100], &input[100..]]);
        assert_eq!(out.len(), 3);
        assert!(out[0].0 && out[1].0 && !out[2].0);
        assert_eq!(out[0].1.len(), MAX_LINE);
        assert_eq!(out[2].1.len(), 10);
        let joined: Vec<u8> = out.iter().flat_map(|(_, t)| t.clone()).collect();
        assert_eq!(joined, long);
    }

    #[test]
    fn exactly_max_line_then_newline_is_partial_plus_empty_full() {
        let mut input = vec![b'y'; MAX_LINE];
        input.push(b'\n');
        let out = split(&[&input]);
        assert_eq!(out, vec![(true, vec![b'y'; MAX_LINE]), (false, vec![])]);
    }

    #[test]
    fn timestamps_are_rfc3339_utc_with_nanoseconds() {
        let t = UNIX_EPOCH + Duration::new(1_475_713_029, 669_794_202);
        assert_eq!(rfc3339_nanos(t), "2016-10-06T00:17:09.669794202Z");
        assert_eq!(rfc3339_nanos(UNIX_EPOCH), "1970-01-01T00:00:00.000000000Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert!(rfc3339_nanos(leap).starts_with("2000-02-29T00:00:00"));
    }

    #[test]
    fn records_are_written_in_cri_format_and_reopen_starts_a_new_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.log");
        let mut log = LogFile::open(Some(path.clone())).unwrap();
        log.write(Stream::Stdout, false, b"hello");
        log.write(Stream::Stderr, true, b"par");
        std::fs::rename(&path, dir.path().join("c.log.1")).unwrap();
        log.write(Stream::Stdout, false, b"to the rotated file");
        log.reopen().unwrap();
        log.write(Stream::Stdout, false, b"new");
        let old = std::fs::read_to_string(dir.path().join("c.log.1")).unwrap();
        let lines: Vec<&str> = old.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].ends_with(" stdout F hello"), "{}", lines[0]);
        assert!(lines[1].ends_with(" stderr P par"));
        assert_eq!(lines[0].split(' ').next().unwrap().len(), 30);
        let new = std::fs::read_to_string(&path).unwrap();
        assert!(new.ends_with(" stdout F new\n"));
    }
}
