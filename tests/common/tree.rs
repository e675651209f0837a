//! A mounted root filesystem read entry by entry (never following symlinks), and the
//! differences between two of them: type, mode, owner, size, content hash, symlink target,
//! hard-link group, xattrs, device numbers and mtime.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use sha2::Digest as _;

#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub kind: char,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Files and symlinks only: a directory's size is its filesystem's business.
    pub size: Option<u64>,
    pub sha256: Option<String>,
    pub target: Option<PathBuf>,
    /// The other paths sharing this entry's inode, sorted.
    pub links: Vec<PathBuf>,
    pub xattrs: BTreeMap<String, Vec<u8>>,
    pub rdev: Option<(u32, u32)>,
    pub mtime: (i64, i64),
}

/// One field that differs at one path; `a` and `b` render each side's value.
#[derive(Debug, Clone, PartialEq)]
pub struct Diff {
    pub path: PathBuf,
    pub field: &'static str,
    pub a: String,
    pub b: String,
}

impl fmt::Display for Diff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "/{} {}: {} vs {}",
            self.path.display(),
            self.field,
            self.a,
            self.b
        )
    }
}

fn xattrs(p: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut names = vec![0u8; 64 << 10];
    let n = rustix::fs::llistxattr(p, &mut names[..]).unwrap_or(0);
    let mut out = BTreeMap::new();
    for name in names[..n].split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let key = String::from_utf8_lossy(name).into_owned();
        let mut v = vec![0u8; 64 << 10];
        if let Ok(len) = rustix::fs::lgetxattr(p, name, &mut v[..]) {
            out.insert(key, v[..len].to_vec());
        }
    }
    out
}

/// A name readdir lists and stat cannot find (an overlayfs whiteout in a directory it does
/// not merge).
fn ghost() -> Entry {
    Entry {
        kind: 'G',
        mode: 0,
        uid: 0,
        gid: 0,
        size: None,
        sha256: None,
        target: None,
        links: vec![],
        xattrs: BTreeMap::new(),
        rdev: None,
        mtime: (0, 0),
    }
}

/// Every entry under `root` (the root itself as the empty path), by path relative to it.
pub fn scan(root: &Path) -> BTreeMap<PathBuf, Entry> {
    let mut out = BTreeMap::new();
    let mut inodes: HashMap<u64, Vec<PathBuf>> = HashMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let p = root.join(&rel);
        let m = match std::fs::symlink_metadata(&p) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                out.insert(rel, ghost());
                continue;
            }
            Err(e) => panic!("stat {}: {e}", p.display()),
        };
        let ft = m.file_type();
        let kind = match () {
            _ if ft.is_dir() => 'd',
            _ if ft.is_file() => 'f',
            _ if ft.is_symlink() => 'l',
            _ if ft.is_char_device() => 'c',
            _ if ft.is_block_device() => 'b',
            _ if ft.is_fifo() => 'p',
            _ => 's',
        };
        if ft.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                stack.push(rel.join(e.unwrap().file_name()));
            }
        } else if m.nlink() > 1 {
            inodes.entry(m.ino()).or_default().push(rel.clone());
        }
        let sha256 = ft
            .is_file()
            .then(|| hex::encode(sha2::Sha256::digest(std::fs::read(&p).unwrap())));
        let dev = matches!(kind, 'c' | 'b')
            .then(|| (rustix::fs::major(m.rdev()), rustix::fs::minor(m.rdev())));
        out.insert(
            rel,
            Entry {
                kind,
                mode: m.mode() & 0o7777,
                uid: m.uid(),
                gid: m.gid(),
                size: matches!(kind, 'f' | 'l').then(|| m.size()),
                sha256,
                target: ft.is_symlink().then(|| std::fs::read_link(&p).unwrap()),
                links: vec![],
                xattrs: xattrs(&p),
                rdev: dev,
                mtime: (m.mtime(), m.mtime_nsec()),
            },
        );
    }
    for group in inodes.values() {
        for p in group {
            let mut others: Vec<PathBuf> = group.iter().filter(|o| *o != p).cloned().collect();
            others.sort();
            out.get_mut(p).unwrap().links = others;
        }
    }
    out
}

fn show(v: &impl fmt::Debug) -> String {
    format!("{v:?}")
}

/// Whether an mtime was set by the unpacker at unpack time (a directory no entry lists, a
/// layer root): such times cannot match between two runtimes and say nothing about the image.
fn unpack_time(t: (i64, i64), since: i64) -> bool {
    t.0 >= since
}

/// The differences between trees `a` and `b`, treating mtimes both sides set at unpack time
/// (at or after `since`, seconds since the epoch) as equal.
pub fn diff(a: &BTreeMap<PathBuf, Entry>, b: &BTreeMap<PathBuf, Entry>, since: i64) -> Vec<Diff> {
    let mut out = Vec::new();
    let mut paths: Vec<&PathBuf> = a.keys().chain(b.keys()).collect();
    paths.sort();
    paths.dedup();
    for path in paths {
        let (x, y) = match (a.get(path), b.get(path)) {
            (Some(x), Some(y)) => (x, y),
            (x, y) => {
                out.push(Diff {
                    path: path.clone(),
                    field: "exists",
                    a: x.is_some().to_string(),
                    b: y.is_some().to_string(),
                });
                continue;
            }
        };
        let mut field = |name: &'static str, l: String, r: String| {
            if l != r {
                out.push(Diff {
                    path: path.clone(),
                    field: name,
                    a: l,
                    b: r,
                });
            }
        };
        field("type", show(&x.kind), show(&y.kind));
        field("mode", format!("{:o}", x.mode), format!("{:o}", y.mode));
        field("owner", show(&(x.uid, x.gid)), show(&(y.uid, y.gid)));
        field("size", show(&x.size), show(&y.size));
        field("sha256", show(&x.sha256), show(&y.sha256));
        field("target", show(&x.target), show(&y.target));
        field("links", show(&x.links), show(&y.links));
        field("xattrs", show(&x.xattrs), show(&y.xattrs));
        field("rdev", show(&x.rdev), show(&y.rdev));
        if !(unpack_time(x.mtime, since) && unpack_time(y.mtime, since)) {
            field("mtime", show(&x.mtime), show(&y.mtime));
        }
    }
    out
}

/// A path relative to a tree root from raw bytes (names need not be UTF-8).
pub fn rel(bytes: &[u8]) -> PathBuf {
    PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
}
