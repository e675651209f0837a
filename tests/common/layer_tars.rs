//! Layer tars as real image builders write them, for differential tests: GNU tar over a tree
//! made on disk, Python-tarfile-style PAX output, and hand-made headers with raw names and
//! type bytes. Trees are made as root (owners, devices, trusted xattrs).

#![allow(dead_code)]

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;

use rustix::fs::{AtFlags, CWD, FileType, Mode, Timespec, Timestamps, XattrFlags};

/// A directory tree made on disk for GNU tar to archive.
pub struct Tree {
    pub dir: tempfile::TempDir,
}

impl Tree {
    pub fn new() -> Tree {
        Tree {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn path(&self, p: &[u8]) -> PathBuf {
        self.dir.path().join(OsStr::from_bytes(p))
    }

    fn own(&self, p: &[u8], mode: u32, uid: u32, gid: u32) {
        let path = self.path(p);
        std::os::unix::fs::lchown(&path, Some(uid), Some(gid)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    pub fn dir(&self, p: &str, mode: u32, uid: u32, gid: u32) -> &Tree {
        std::fs::create_dir_all(self.path(p.as_bytes())).unwrap();
        self.own(p.as_bytes(), mode, uid, gid);
        self
    }

    pub fn file_raw(&self, p: &[u8], data: &[u8], mode: u32, uid: u32, gid: u32) -> &Tree {
        std::fs::write(self.path(p), data).unwrap();
        self.own(p, mode, uid, gid);
        self
    }

    pub fn file(&self, p: &str, data: &[u8]) -> &Tree {
        self.file_raw(p.as_bytes(), data, 0o644, 0, 0)
    }

    /// A file of `size` bytes with data only in `chunks` (holes elsewhere, on disk too).
    pub fn sparse(&self, p: &str, size: u64, chunks: &[(u64, &[u8])]) -> &Tree {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::File::create(self.path(p.as_bytes())).unwrap();
        f.set_len(size).unwrap();
        for (off, data) in chunks {
            f.seek(SeekFrom::Start(*off)).unwrap();
            f.write_all(data).unwrap();
        }
        self
    }

    pub fn node(&self, p: &str, kind: FileType, major: u32, minor: u32, mode: u32) -> &Tree {
        rustix::fs::mknodat(
            CWD,
            self.path(p.as_bytes()),
            kind,
            Mode::from_raw_mode(mode),
            rustix::fs::makedev(major, minor),
        )
        .unwrap();
        self.own(p.as_bytes(), mode, 0, 0);
        self
    }

    pub fn symlink(&self, p: &str, target: &str) -> &Tree {
        symlink(target, self.path(p.as_bytes())).unwrap();
        self
    }

    pub fn link(&self, p: &str, target: &str) -> &Tree {
        std::fs::hard_link(self.path(target.as_bytes()), self.path(p.as_bytes())).unwrap();
        self
    }

    pub fn xattr(&self, p: &str, key: &str, value: &[u8]) -> &Tree {
        rustix::fs::lsetxattr(self.path(p.as_bytes()), key, value, XattrFlags::empty())
            .unwrap_or_else(|e| panic!("setting {key} on {p}: {e}"));
        self
    }

    /// Sets the mtime of `p` (seconds and nanoseconds), not following symlinks.
    pub fn mtime(&self, p: &[u8], sec: i64, nsec: i64) -> &Tree {
        let t = Timespec {
            tv_sec: sec,
            tv_nsec: nsec,
        };
        let ts = Timestamps {
            last_access: t,
            last_modification: t,
        };
        rustix::fs::utimensat(CWD, self.path(p), &ts, AtFlags::SYMLINK_NOFOLLOW).unwrap();
        self
    }

    /// Gives every entry the mtime `sec` (children first, so directories keep theirs).
    pub fn stamp(&self, sec: i64) -> &Tree {
        fn walk(root: &Path, rel: &Path, out: &mut Vec<PathBuf>) {
            let p = root.join(rel);
            if std::fs::symlink_metadata(&p).unwrap().is_dir() {
                for e in std::fs::read_dir(&p).unwrap() {
                    walk(root, &rel.join(e.unwrap().file_name()), out);
                }
            }
            out.push(rel.to_owned());
        }
        let mut all = Vec::new();
        walk(self.dir.path(), Path::new(""), &mut all);
        for rel in all {
            self.mtime(rel.as_os_str().as_bytes(), sec, 0);
        }
        self
    }

    /// GNU tar of `names` in this tree (`.` for all of it, with its `./` entry).
    pub fn gnu_tar(&self, args: &[&str], names: &[&str]) -> Vec<u8> {
        super::registry::require("tar", "tar");
        let out = Command::new("tar")
            .arg("-C")
            .arg(self.dir.path())
            .args(["--numeric-owner", "--sort=name", "-cf", "-"])
            .args(args)
            .args(names)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "tar {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }
}

/// A version 2 `security.capability` value granting cap_net_raw (permitted and effective).
pub fn cap_net_raw() -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&0x0200_0001u32.to_le_bytes()); // revision 2, effective
    v.extend_from_slice(&(1u32 << 13).to_le_bytes()); // permitted, low word
    v.extend_from_slice(&0u32.to_le_bytes()); // inheritable, low word
    v.extend_from_slice(&0u32.to_le_bytes());
    v.extend_from_slice(&0u32.to_le_bytes());
    v
}

/// One entry of a hand-made tar: raw name, type byte, data or link target, and PAX records
/// (written in an `x` header before it).
pub struct Raw {
    pub name: Vec<u8>,
    pub kind: u8,
    pub data: Vec<u8>,
    pub link: Vec<u8>,
    pub mode: u32,
    pub uid: u64,
    pub mtime: u64,
    pub dev: (u32, u32),
    pub pax: Vec<(String, Vec<u8>)>,
    /// Python's tarfile writes user and group names and the POSIX magic.
    pub names: bool,
}

pub fn raw(name: &str, kind: u8) -> Raw {
    Raw {
        name: name.as_bytes().to_vec(),
        kind,
        data: vec![],
        link: vec![],
        mode: if kind == b'5' { 0o755 } else { 0o644 },
        uid: 0,
        mtime: 1_690_000_000,
        dev: (0, 0),
        pax: vec![],
        names: false,
    }
}

impl Raw {
    pub fn data(mut self, d: &[u8]) -> Raw {
        self.data = d.to_vec();
        self
    }
    pub fn link(mut self, target: &str) -> Raw {
        self.link = target.as_bytes().to_vec();
        self
    }
    pub fn mode(mut self, m: u32) -> Raw {
        self.mode = m;
        self
    }
    pub fn uid(mut self, u: u64) -> Raw {
        self.uid = u;
        self
    }
    pub fn mtime(mut self, t: u64) -> Raw {
        self.mtime = t;
        self
    }
    pub fn dev(mut self, major: u32, minor: u32) -> Raw {
        self.dev = (major, minor);
        self
    }
    pub fn pax(mut self, k: &str, v: &[u8]) -> Raw {
        self.pax.push((k.into(), v.to_vec()));
        self
    }
}

fn pax_record(key: &str, value: &[u8]) -> Vec<u8> {
    let body = key.len() + value.len() + 3;
    let mut len = body + body.to_string().len();
    if len.to_string().len() != body.to_string().len() {
        len += 1;
    }
    let mut r = format!("{len} {key}=").into_bytes();
    r.extend_from_slice(value);
    r.push(b'\n');
    r
}

/// A tar of `entries` with their names and type bytes exactly as given.
pub fn hand_tar(entries: Vec<Raw>) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        if !e.pax.is_empty() {
            let recs: Vec<u8> = e.pax.iter().flat_map(|(k, v)| pax_record(k, v)).collect();
            let mut h = tar::Header::new_ustar();
            h.set_entry_type(tar::EntryType::XHeader);
            h.set_size(recs.len() as u64);
            h.set_path("././@PaxHeader").unwrap();
            h.set_mtime(e.mtime);
            h.set_cksum();
            b.append(&h, &recs[..]).unwrap();
        }
        let mut h = tar::Header::new_ustar();
        let n = e.name.len().min(100);
        h.as_mut_bytes()[..n].copy_from_slice(&e.name[..n]);
        h.as_mut_bytes()[156] = e.kind;
        h.set_mode(e.mode);
        h.set_uid(e.uid);
        h.set_gid(e.uid);
        h.set_mtime(e.mtime);
        if !e.link.is_empty() {
            h.set_link_name_literal(&e.link).unwrap();
        }
        if matches!(e.kind, b'3' | b'4') {
            h.set_device_major(e.dev.0).unwrap();
            h.set_device_minor(e.dev.1).unwrap();
        }
        if e.names {
            h.set_username("root").unwrap();
            h.set_groupname("root").unwrap();
        }
        let stored = if matches!(e.kind, b'0' | 0) {
            e.data.len()
        } else {
            0
        };
        h.set_size(stored as u64);
        h.set_cksum();
        b.append(&h, &e.data[..stored]).unwrap();
    }
    b.into_inner().unwrap()
}

/// A tar as Python's tarfile (PAX format) writes it: directory names end in `/`, names longer
/// than the header holds go in a `path` record, a fractional mtime goes in an `mtime` record
/// (the header holding it rounded), user and group names are filled in.
pub fn python_style(entries: Vec<Raw>, mtimes: &[(&str, &str)]) -> Vec<u8> {
    let entries = entries
        .into_iter()
        .map(|mut e| {
            if e.kind == b'5' && !e.name.ends_with(b"/") {
                e.name.push(b'/');
            }
            if e.name.len() > 100 {
                let full = e.name.clone();
                e = e.pax("path", &full);
            }
            let name = String::from_utf8_lossy(&e.name)
                .trim_end_matches('/')
                .to_owned();
            if let Some((_, t)) = mtimes.iter().find(|(n, _)| *n == name) {
                e = e.pax("mtime", t.as_bytes());
                e.mtime = t.parse::<f64>().unwrap().round() as u64;
            }
            e.names = true;
            e
        })
        .collect();
    hand_tar(entries)
}
