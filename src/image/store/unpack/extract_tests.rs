//! The extractor against containerd's reading of layers: each case where the two once differed,
//! on layers extracted on top of each other as a pull does. Run as root (devices, owners,
//! trusted xattrs).

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::lower::Lowers;
use super::{Below, UnpackError, extract_tar};
use crate::image::digest::Digest;
use crate::image::store::space::Reserve;

/// One hand-made tar entry: the raw name and type byte go into the header as they are.
struct E {
    name: Vec<u8>,
    kind: u8,
    data: Vec<u8>,
    mode: u32,
    uid: u64,
    mtime: u64,
    pax: Vec<(String, Vec<u8>)>,
}

fn e(name: &str, kind: u8, data: &[u8]) -> E {
    E {
        name: name.as_bytes().to_vec(),
        kind,
        data: data.to_vec(),
        mode: if kind == b'5' { 0o755 } else { 0o644 },
        uid: 0,
        mtime: 1_700_000_000,
        pax: vec![],
    }
}
fn dir(name: &str) -> E {
    e(name, b'5', b"")
}
fn file(name: &str, data: &[u8]) -> E {
    e(name, b'0', data)
}

impl E {
    fn mode(mut self, mode: u32) -> E {
        self.mode = mode;
        self
    }
    fn uid(mut self, uid: u64) -> E {
        self.uid = uid;
        self
    }
    fn mtime(mut self, t: u64) -> E {
        self.mtime = t;
        self
    }
    fn pax(mut self, k: &str, v: &[u8]) -> E {
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

fn tar(entries: Vec<E>) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for en in entries {
        if !en.pax.is_empty() {
            let recs: Vec<u8> = en.pax.iter().flat_map(|(k, v)| pax_record(k, v)).collect();
            let mut h = tar::Header::new_ustar();
            h.set_entry_type(tar::EntryType::XHeader);
            h.set_size(recs.len() as u64);
            h.set_path("PaxHeaders/x").unwrap();
            h.set_cksum();
            b.append(&h, &recs[..]).unwrap();
        }
        let mut h = tar::Header::new_ustar();
        h.as_mut_bytes()[..en.name.len()].copy_from_slice(&en.name);
        h.as_mut_bytes()[156] = en.kind;
        h.set_mode(en.mode);
        h.set_uid(en.uid);
        h.set_gid(en.uid);
        h.set_mtime(en.mtime);
        let stored = if matches!(en.kind, b'0' | 0) {
            en.data.len()
        } else {
            0
        };
        h.set_size(stored as u64);
        h.set_cksum();
        b.append(&h, &en.data[..stored]).unwrap();
    }
    b.into_inner().unwrap()
}

/// Extracts `layers` in order, each on top of the ones before, into `<tmp>/<n>`; and again
/// as a pull does, each on its own and settled afterwards against the ones below it, which
/// must give the same trees.
fn extract_layers(
    layers: &[Vec<u8>],
) -> (tempfile::TempDir, Vec<PathBuf>, Result<(), UnpackError>) {
    assert!(
        nix::unistd::geteuid().is_root(),
        "extractor tests set owners, devices and trusted xattrs: run as root"
    );
    let tmp = tempfile::tempdir().unwrap();
    let mut dirs: Vec<PathBuf> = Vec::new();
    let mut result = Ok(());
    for (i, t) in layers.iter().enumerate() {
        let d = layer_dir(tmp.path(), &i.to_string());
        let lowers = Lowers::new(dirs.iter().rev().cloned().collect());
        result = extract_tar(
            &t[..],
            &d,
            Below::Ready(lowers),
            Some(&Digest::of(t)),
            Reserve::new(0),
            Path::new("/"),
        )
        .map(|deferred| assert!(deferred.is_empty()));
        dirs.push(d);
        if result.is_err() {
            break;
        }
    }
    let side_by_side = extract_side_by_side(tmp.path(), layers);
    match (&result, side_by_side) {
        (Ok(()), Ok(settled)) => {
            for (one, other) in dirs.iter().zip(&settled) {
                assert_eq!(tree(one), tree(other), "{one:?} against {other:?}");
            }
        }
        (Err(_), Err(_)) => {}
        (r, s) => panic!("on top of each other: {r:?}; side by side: {s:?}"),
    }
    (tmp, dirs, result)
}

fn layer_dir(tmp: &Path, name: &str) -> PathBuf {
    let d = tmp.join(name);
    fs::create_dir(&d).unwrap();
    fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
    d
}

/// Every layer extracted without its lower layers, then settled bottom first.
fn extract_side_by_side(tmp: &Path, layers: &[Vec<u8>]) -> Result<Vec<PathBuf>, UnpackError> {
    let mut extracted = Vec::new();
    for (i, t) in layers.iter().enumerate() {
        let d = layer_dir(tmp, &format!("apart-{i}"));
        let deferred = extract_tar(
            &t[..],
            &d,
            Below::Later,
            Some(&Digest::of(t)),
            Reserve::new(0),
            Path::new("/"),
        )?;
        extracted.push((d, deferred));
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    for (d, deferred) in extracted {
        deferred.settle(&d, &Lowers::new(dirs.iter().rev().cloned().collect()))?;
        dirs.push(d);
    }
    Ok(dirs)
}

/// Everything a reader of a layer sees, by path: type, mode, owner, size, content, link
/// target, device, xattrs, and times but those a directory gets from the clock.
fn tree(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    // The tars' times are years old; a directory's time from the clock is today's.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    while let Some(p) = stack.pop() {
        let m = fs::symlink_metadata(&p).unwrap();
        let mut list = vec![0u8; 4096];
        let n = rustix::fs::llistxattr(&p, &mut list[..]).unwrap_or(0);
        let mut names: Vec<Vec<u8>> = list[..n]
            .split(|b| *b == 0)
            .filter(|n| !n.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        names.sort();
        let xattrs: Vec<String> = names
            .iter()
            .map(|n| {
                let n = String::from_utf8_lossy(n).into_owned();
                format!("{n}={:?}", xattr(&p, &n))
            })
            .collect();
        let content = if m.is_file() {
            format!("{:?}", Digest::of(&fs::read(&p).unwrap()))
        } else if m.file_type().is_symlink() {
            format!("{:?}", fs::read_link(&p).unwrap())
        } else {
            String::new()
        };
        let mtime = if m.is_dir() && m.mtime() > now - 86_400 {
            0
        } else {
            m.mtime()
        };
        out.push(format!(
            "{:?} mode={:o} {}:{} size={} rdev={} mtime={mtime} {content} {xattrs:?}",
            p.strip_prefix(root).unwrap(),
            m.mode(),
            m.uid(),
            m.gid(),
            if m.is_dir() { 0 } else { m.size() },
            m.rdev(),
        ));
        if m.is_dir() {
            for e in fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        }
    }
    out.sort();
    out
}

fn xattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    let mut v = [0u8; 256];
    rustix::fs::lgetxattr(p, name, &mut v)
        .ok()
        .map(|n| v[..n].to_vec())
}

#[test]
fn a_missing_parent_takes_the_lower_layers_metadata() {
    let base = tar(vec![
        dir("tmp").mode(0o1777),
        dir("root").mode(0o700),
        dir("home"),
        dir("home/u")
            .mode(0o750)
            .uid(1000)
            .pax("SCHILY.xattr.user.note", b"home")
            .pax("SCHILY.xattr.trusted.overlay.opaque", b"y"),
    ]);
    let top = tar(vec![
        file("tmp/x", b"x"),
        file("root/.profile", b"p"),
        file("home/u/f", b"f"),
        file("new/f", b"n"),
    ]);
    let (_t, dirs, r) = extract_layers(&[base, top]);
    r.unwrap();
    let mode = |p: &str| dirs[1].join(p).metadata().unwrap().mode() & 0o7777;
    assert_eq!(mode("tmp"), 0o1777, "/tmp keeps its sticky bit");
    assert_eq!(mode("root"), 0o700);
    assert_eq!(mode("home/u"), 0o750);
    assert_eq!(dirs[1].join("home/u").metadata().unwrap().uid(), 1000);
    assert_eq!(
        xattr(&dirs[1].join("home/u"), "user.note").as_deref(),
        Some(&b"home"[..])
    );
    assert_eq!(mode("new"), 0o755, "nothing below: 0755 root");
    assert_eq!(dirs[1].join("new").metadata().unwrap().uid(), 0);
}

#[test]
fn pax_sparse_files_are_written_as_the_real_file() {
    let mut v1 = b"2\n0\n3\n9997\n3\n".to_vec();
    v1.resize(512, 0);
    v1.extend_from_slice(b"abcxyz");
    let layer = tar(vec![
        file("GNUSparseFile.1/v1", &v1)
            .pax("GNU.sparse.major", b"1")
            .pax("GNU.sparse.minor", b"0")
            .pax("GNU.sparse.name", b"data/v1")
            .pax("GNU.sparse.realsize", b"10000"),
        file("GNUSparseFile.1/v01", b"ab")
            .pax("GNU.sparse.major", b"0")
            .pax("GNU.sparse.minor", b"1")
            .pax("GNU.sparse.name", b"data/v01")
            .pax("GNU.sparse.size", b"5")
            .pax("GNU.sparse.map", b"1,1,4,1"),
    ]);
    let (_t, dirs, r) = extract_layers(&[layer]);
    r.unwrap();
    let v1 = fs::read(dirs[0].join("data/v1")).unwrap();
    assert_eq!(v1.len(), 10_000);
    assert_eq!((&v1[..4], &v1[9997..]), (&b"abc\0"[..], &b"xyz"[..]));
    assert_eq!(fs::read(dirs[0].join("data/v01")).unwrap(), b"\0a\0\0b");
    assert!(
        !dirs[0].join("GNUSparseFile.1").exists(),
        "no encoded form left"
    );

    let unknown = tar(vec![
        file("GNUSparseFile.1/f", b"x")
            .pax("GNU.sparse.major", b"2")
            .pax("GNU.sparse.minor", b"0")
            .pax("GNU.sparse.realsize", b"1"),
    ]);
    let (_t, _d, r) = extract_layers(&[unknown]);
    match r {
        Err(e @ UnpackError::UnsupportedEntry { .. }) => assert_eq!(
            e.to_string(),
            "entry \"GNUSparseFile.1/f\" is a GNU sparse PAX format 2.0 file, which crust cannot unpack"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn old_gnu_sparse_files_are_expanded() {
    let mut h = tar::Header::new_gnu();
    h.set_path("s").unwrap();
    h.set_entry_type(tar::EntryType::GNUSparse);
    h.set_mode(0o644);
    h.set_size(512);
    let gnu = h.as_gnu_mut().unwrap();
    gnu.sparse[0].set_offset(4096);
    gnu.sparse[0].set_length(512);
    gnu.sparse[1].set_offset(8192);
    gnu.sparse[1].set_length(0);
    gnu.set_real_size(8192);
    h.set_cksum();
    let mut b = tar::Builder::new(Vec::new());
    b.append(&h, &[7u8; 512][..]).unwrap();
    let (_t, dirs, r) = extract_layers(&[b.into_inner().unwrap()]);
    r.unwrap();
    let s = fs::read(dirs[0].join("s")).unwrap();
    assert_eq!(s.len(), 8192);
    assert!(s[..4096].iter().all(|b| *b == 0) && s[4096..4608].iter().all(|b| *b == 7));
}

#[test]
fn the_root_entry_is_skipped() {
    let (_t, dirs, r) =
        extract_layers(&[tar(vec![dir("./").mode(0o700).uid(1000), file("f", b"")])]);
    r.unwrap();
    let m = dirs[0].metadata().unwrap();
    assert_eq!((m.mode() & 0o7777, m.uid()), (0o755, 0));
}

#[test]
fn legacy_directories_and_duplicates() {
    let layer = tar(vec![
        e("old/", 0, b"").mode(0o750),
        file("old/child", b"c"),
        e("plain/", b'0', b"").mode(0o600),
        dir("d").mtime(100).mode(0o700),
        file("d/f", b""),
        dir("d").mtime(200).mode(0o711),
    ]);
    let (_t, dirs, r) = extract_layers(&[layer]);
    r.unwrap();
    let old = dirs[0].join("old").metadata().unwrap();
    assert!(old.is_dir() && old.mode() & 0o7777 == 0o750);
    assert_eq!(fs::read(dirs[0].join("old/child")).unwrap(), b"c");
    assert!(
        dirs[0].join("plain").metadata().unwrap().is_file(),
        "only type \\0 is a legacy directory, as in Go's archive/tar"
    );
    let d = dirs[0].join("d").metadata().unwrap();
    assert_eq!(
        (d.mtime(), d.mode() & 0o7777),
        (200, 0o711),
        "the last entry wins"
    );
}

#[test]
fn trusted_xattrs_from_the_tar_are_dropped() {
    let layer = tar(vec![
        file("f", b"")
            .pax("SCHILY.xattr.trusted.evil", b"1")
            .pax("SCHILY.xattr.trusted.overlay.opaque", b"y")
            .pax("SCHILY.xattr.user.kept", b"k")
            .pax(
                "SCHILY.xattr.security.capability",
                b"\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
            ),
    ]);
    let (_t, dirs, r) = extract_layers(&[layer]);
    r.unwrap();
    let f = dirs[0].join("f");
    assert_eq!(xattr(&f, "trusted.evil"), None);
    assert_eq!(xattr(&f, "trusted.overlay.opaque"), None);
    assert_eq!(xattr(&f, "user.kept").as_deref(), Some(&b"k"[..]));
    assert!(xattr(&f, "security.capability").is_some());
}

#[test]
fn whiteouts_are_written_only_for_what_lower_layers_show() {
    let l0 = tar(vec![
        dir("a"),
        file("a/x", b""),
        dir("o"),
        file("o/deep", b""),
    ]);
    let l1 = tar(vec![
        dir("o"),
        file("o/.wh..wh..opq", b""),
        file("gone", b""),
    ]);
    let l2 = tar(vec![
        file(".wh.nothing", b""),
        file("a/.wh.x", b""),
        file("a/.wh.never", b""),
        file("o/.wh.deep", b""),
        file(".wh.gone", b""),
        file("fresh/.wh.y", b""),
    ]);
    let (_t, dirs, r) = extract_layers(&[l0, l1, l2]);
    r.unwrap();
    let top = &dirs[2];
    let is_whiteout = |p: &str| {
        top.join(p)
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_char_device() && m.rdev() == 0)
    };
    assert!(is_whiteout("a/x") && is_whiteout("gone"));
    for ghost in ["nothing", "a/never", "o/deep", "fresh/y"] {
        assert!(
            top.join(ghost).symlink_metadata().is_err(),
            "{ghost} left a ghost"
        );
    }
    assert!(
        top.join("fresh").is_dir(),
        "the whiteout's directory is made, as containerd does"
    );
    let (_t, dirs, r) = extract_layers(&[tar(vec![file(".wh.x", b"")])]);
    r.unwrap();
    assert_eq!(
        fs::read_dir(&dirs[0]).unwrap().count(),
        0,
        "the bottom layer has nothing to hide"
    );
}

#[test]
fn directory_bookkeeping_is_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let dirs: Vec<E> = (0..2000).map(|i| dir(&format!("d{i:05}"))).collect();
    let t = tar(dirs);
    let root = rustix::fs::open(
        tmp.path(),
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    // 2000 directories at 6 bytes of name and 64 of overhead each: about 137 KiB.
    let mut x =
        super::extract::Extractor::new(root, Lowers::default()).with_dir_times_limit(100 << 10);
    let mut archive = tar::Archive::new(&t[..]);
    let r = archive
        .entries()
        .unwrap()
        .try_for_each(|e| x.entry(e.unwrap()));
    match r {
        Err(e @ UnpackError::Limit { .. }) => {
            assert!(e.to_string().contains("over crust's limit"), "{e}")
        }
        other => panic!("{other:?}"),
    }
}
