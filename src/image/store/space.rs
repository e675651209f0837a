//! Keeping the node's disk usable while pulling. The image store shares its filesystem with
//! kubelet and often with every pod, and a layer's unpacked size is known only once it is
//! unpacked: a small blob can expand a thousandfold (gzip of zeros), so one hostile or huge
//! image could fill the disk. Downloads are checked against their declared size before they
//! start; unpacking checks the free space as it writes. Both stop, with ResourceExhausted,
//! when the filesystem would keep less than `image.min_free_percent` of its blocks or inodes.

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Decompressed bytes between two free-space checks while unpacking.
const CHECK_EVERY: u64 = 8 << 20;

/// The share of the image filesystem pulls leave free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reserve {
    percent: u64,
}

/// Pulling on would leave the filesystem below the reserve (the sentence says where and why).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct NoSpace(String);

impl Reserve {
    /// Keeps `percent` of blocks and inodes free; 0 turns the checks off.
    pub fn new(percent: u8) -> Reserve {
        Reserve {
            percent: u64::from(percent),
        }
    }

    /// Whether `dir`'s filesystem can take `adding` more bytes and keep the reserve. A
    /// filesystem that cannot be measured passes: the write itself will say what is wrong.
    pub fn check(&self, dir: &Path, adding: u64) -> Result<(), NoSpace> {
        if self.percent == 0 {
            return Ok(());
        }
        let Ok(s) = rustix::fs::statvfs(dir) else {
            return Ok(());
        };
        let unit = s.f_frsize.max(1);
        let free = s.f_bavail.saturating_mul(unit);
        let keep = s.f_blocks.saturating_mul(unit) / 100 * self.percent;
        let short = |what: &str, free: String, adding: String| {
            NoSpace(format!(
                "{} has {free} free{adding}, below the {}% of its {what} crust keeps free \
                 (image.min_free_percent)",
                dir.display(),
                self.percent
            ))
        };
        if free < adding.saturating_add(keep) {
            let adding = if adding > 0 {
                format!(" and the download needs {}", mib(adding))
            } else {
                String::new()
            };
            return Err(short("space", mib(free), adding));
        }
        if s.f_files > 0 && s.f_favail < s.f_files / 100 * self.percent {
            return Err(short(
                "inodes",
                format!("{} inodes", s.f_favail),
                String::new(),
            ));
        }
        Ok(())
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

/// Where a [`Guarded`] reader leaves why it stopped: the tar reader reduces errors to text.
pub type Tripped = Arc<Mutex<Option<NoSpace>>>;

/// Passes a decompressed layer through, checking the reserve every `CHECK_EVERY` bytes; when it
/// trips, reading fails with StorageFull and `tripped` holds why.
pub struct Guarded<R> {
    inner: R,
    reserve: Reserve,
    dir: PathBuf,
    unchecked: u64,
    tripped: Tripped,
}

impl<R: Read> Guarded<R> {
    pub fn new(inner: R, reserve: Reserve, dir: &Path, tripped: Tripped) -> Guarded<R> {
        Guarded {
            inner,
            reserve,
            dir: dir.to_owned(),
            unchecked: 0,
            tripped,
        }
    }
}

impl<R: Read> Read for Guarded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.unchecked >= CHECK_EVERY {
            self.unchecked = 0;
            if let Err(e) = self.reserve.check(&self.dir, 0) {
                let message = e.to_string();
                *crate::image::lock(&self.tripped) = Some(e);
                return Err(io::Error::new(io::ErrorKind::StorageFull, message));
            }
        }
        let n = self.inner.read(buf)?;
        self.unchecked += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_counts_what_a_download_adds() {
        let here = tempfile::tempdir().unwrap();
        let s = rustix::fs::statvfs(here.path()).unwrap();
        let free = s.f_bavail * s.f_frsize;
        assert!(
            Reserve::new(0).check(here.path(), u64::MAX).is_ok(),
            "0 turns it off"
        );
        let e = Reserve::new(1).check(here.path(), free).unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("the download needs") && m.contains("min_free_percent"),
            "{m}"
        );
    }

    #[test]
    fn a_guarded_reader_stops_once_the_reserve_is_gone() {
        let here = tempfile::tempdir().unwrap();
        let data = vec![0u8; (CHECK_EVERY * 2) as usize];
        // 100% can never be kept free: the first check trips.
        let tripped = Tripped::default();
        let mut g = Guarded::new(&data[..], Reserve::new(100), here.path(), tripped.clone());
        let e = io::copy(&mut g, &mut io::sink()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::StorageFull);
        assert!(crate::image::lock(&tripped).is_some());
        let mut ok = Guarded::new(&data[..], Reserve::new(0), here.path(), Tripped::default());
        assert_eq!(
            io::copy(&mut ok, &mut io::sink()).unwrap(),
            data.len() as u64
        );
    }
}
