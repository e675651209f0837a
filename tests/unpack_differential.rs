//! Differential test: the same images pulled by crust and by containerd (Debian's 1.6, its CRI
//! and overlayfs snapshotter) from one local registry, both merged views mounted read-only and
//! compared entry by entry (type, mode, owner, size, content, symlink target, hard-link group,
//! xattrs, device numbers, mtime). A container's root filesystem must not depend on which
//! runtime unpacked its image.
//!
//! Layers come from GNU tar (gnu and posix formats, old GNU and PAX 0.1/1.0 sparse files,
//! xattrs incl. security.capability), Python-tarfile-style PAX output and hand-made tars
//! (`./`, legacy `\0` directories, duplicate directories, missing parents, trusted xattrs,
//! whiteouts and opaque directories over five layers, hard links across directories, long,
//! deep and non-UTF-8 names, devices, FIFOs), compressed with gzip, zstd or nothing.
//!
//! The only differences allowed are those the README documents as crust's deliberate choice;
//! they are built into an image of their own and must show exactly as documented.
//! Run as root (`make test`); a missing tool fails the test.

#[path = "common/containerd.rs"]
mod containerd;
#[path = "common/crust_daemon.rs"]
mod crust_daemon;
#[path = "common/layer_tars.rs"]
mod layer_tars;
#[path = "common/oci_build.rs"]
mod oci_build;
#[path = "common/registry.rs"]
mod registry;
#[path = "common/tree.rs"]
mod tree;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use containerd::Containerd;
use crust::cri::pb;
use crust_daemon::{Crust, mirror_config};
use layer_tars::{Tree, cap_net_raw, hand_tar, python_style, raw};
use oci_build::{Comp, image, index};
use registry::{Auth, Registry};
use rustix::fs::FileType;
use serde_json::json;
use tree::{Diff, Entry};

const HOST: &str = "registry.test";

fn spec(image: &str) -> Option<pb::ImageSpec> {
    Some(pb::ImageSpec {
        image: image.into(),
        ..Default::default()
    })
}

type Images = pb::image_service_client::ImageServiceClient<tonic::transport::Channel>;

async fn pull(c: &mut Images, image: &str) -> Result<String, tonic::Status> {
    let r = c
        .pull_image(pb::PullImageRequest {
            image: spec(image),
            auth: None,
            sandbox_config: None,
        })
        .await?;
    Ok(r.into_inner().image_ref)
}

async fn status(c: &mut Images, image: &str, verbose: bool) -> pb::ImageStatusResponse {
    c.image_status(pb::ImageStatusRequest {
        image: spec(image),
        verbose,
    })
    .await
    .unwrap()
    .into_inner()
}

/// Layer 0, GNU tar in gnu format: the base system (with its `./` entry from a 0700
/// directory), devices, FIFOs, hard links across directories, long, deep and non-UTF-8 names.
fn layer0() -> Vec<u8> {
    let t = Tree::new();
    t.dir("tmp", 0o1777, 0, 0)
        .dir("root", 0o700, 0, 0)
        .dir("home/u", 0o750, 1000, 1000)
        .dir("etc", 0o755, 0, 0)
        .file(
            "etc/passwd",
            b"root:x:0:0::/root:/bin/sh\nu:x:1000:1000::/home/u:/bin/sh\n",
        )
        .file_raw(b"etc/shadow", b"root:*:1::::::\n", 0o640, 0, 42)
        .dir("bin", 0o755, 0, 0)
        .file_raw(b"bin/su", b"#!/bin/sh\n", 0o4755, 0, 0)
        .file_raw(b"bin/tool", b"tool", 0o2755, 0, 50)
        .dir("dev", 0o755, 0, 0)
        .node("dev/null", FileType::CharacterDevice, 1, 3, 0o666)
        .node("dev/loop0", FileType::BlockDevice, 7, 0, 0o660)
        .node("dev/initctl", FileType::Fifo, 0, 0, 0o600)
        .dir("links/a", 0o755, 0, 0)
        .dir("links/b", 0o755, 0, 0)
        .file("links/a/f", b"shared by two directories")
        .link("links/b/g", "links/a/f")
        .dir("sym", 0o755, 0, 0)
        .symlink("sym/abs", "/etc/passwd")
        .symlink("sym/rel", "../etc/passwd")
        .symlink("sym/dangling", "nowhere")
        .dir("sparse", 0o755, 0, 0)
        .sparse("sparse/old", 1 << 20, &[(0, b"head"), (700_000, b"middle")])
        .dir("names", 0o755, 0, 0)
        .file_raw(b"names/caf\xe9", b"latin-1 name", 0o644, 0, 0)
        .file("names/\u{fc}n\u{ef}c\u{f6}d\u{e9}", b"utf-8 name")
        .file("names/with space", b"s")
        .file(&format!("names/{}", "l".repeat(150)), b"long name")
        .dir("gone", 0o755, 0, 0)
        .file("gone/f", b"whited out with its directory")
        .file("gonefile", b"whited out")
        .dir("opq", 0o755, 0, 0)
        .file("opq/old1", b"hidden by an opaque directory")
        .file("opq/old2", b"hidden too");
    let deep: String = (0..30).map(|i| format!("deep{i:04}/")).collect();
    t.dir(&deep, 0o755, 0, 0)
        .file(&format!("{deep}bottom"), b"deep")
        .stamp(1_600_000_000)
        .mtime(b"etc/passwd", 1_650_000_000, 0);
    t.gnu_tar(&["--format=gnu"], &["."])
}

/// Old GNU sparse files (type `S`, GNU tar's gnu format with `--sparse`), which containerd
/// 1.6 cannot unpack at all.
fn old_sparse_layer() -> Vec<u8> {
    let t = Tree::new();
    t.sparse("old", 1 << 20, &[(0, b"head"), (700_000, b"middle")])
        .stamp(1_600_000_000);
    t.gnu_tar(&["--format=gnu", "--sparse"], &["old"])
}

/// Layer 1, GNU tar in posix format with named entries only (so `tmp/`, `root/` and `home/u/`
/// are missing parents), PAX 1.0 sparse files and xattrs, trusted ones included.
fn layer1() -> Vec<u8> {
    let t = Tree::new();
    t.dir("tmp", 0o755, 0, 0)
        .file("tmp/x", b"in /tmp")
        .dir("root", 0o755, 0, 0)
        .file("root/.profile", b"PS1='# '")
        .dir("home/u", 0o755, 0, 0)
        .file_raw(b"home/u/notes", b"mine", 0o600, 1000, 1000)
        .dir("caps", 0o755, 0, 0)
        .file_raw(b"caps/ping", b"\x7fELF", 0o755, 0, 0)
        .xattr("caps/ping", "security.capability", &cap_net_raw())
        .xattr("caps/ping", "user.mime_type", b"application/x-executable")
        .xattr("caps/ping", "trusted.secret", b"root-only")
        .dir("xdir", 0o711, 0, 0)
        .xattr("xdir", "user.dir", b"kept by copy-up")
        .dir("sparse", 0o755, 0, 0)
        .sparse(
            "sparse/v1",
            2 << 20,
            &[(4096, b"one"), ((2 << 20) - 3, b"end")],
        )
        .file("frac", b"fractional mtime")
        .stamp(1_610_000_000)
        .mtime(b"frac", 1_610_000_000, 123_456_789);
    t.gnu_tar(
        &[
            "--format=posix",
            "--sparse",
            "--sparse-version=1.0",
            "--xattrs",
            "--xattrs-include=*",
            "--pax-option=delete=atime,delete=ctime",
        ],
        &[
            "tmp/x",
            "root/.profile",
            "home/u/notes",
            "caps",
            "xdir",
            "sparse/v1",
            "frac",
        ],
    )
}

/// Layer 2, Python-tarfile style: trailing-slash directories, PAX path and fractional mtime
/// records, whiteouts of a directory and files, an opaque directory.
fn layer2() -> Vec<u8> {
    let long = format!("py/{}", "p".repeat(120));
    python_style(
        vec![
            raw("py", b'5'),
            raw("py/file.txt", b'0').data(b"from tarfile"),
            raw(&long, b'0').data(b"long path record"),
            raw(".wh.gone", b'0'),
            raw(".wh.gonefile", b'0'),
            raw("etc", b'5'),
            raw("etc/.wh.shadow", b'0'),
            raw("opq", b'5').mode(0o750),
            raw("opq/.wh..wh..opq", b'0'),
            raw("opq/new", b'0').data(b"only this"),
        ],
        &[("py", "1620000000.5"), ("py/file.txt", "1620000001.25")],
    )
}

/// Layer 3, hand-made: `./` as 0700 owned by a user, legacy `\0` directories, a directory
/// listed twice, trusted xattrs, PAX sparse 0.0 and 1.0 written by hand, whiteouts for names
/// no lower layer has, a whiteout of a lower file, a missing parent with xattrs below it, a
/// hard link across directories, a device node.
fn layer3() -> Vec<u8> {
    let mut v10 = b"1\n5\n3\n".to_vec();
    v10.resize(512, 0);
    v10.extend_from_slice(b"abc");
    hand_tar(vec![
        raw("./", b'5').mode(0o700).uid(1000),
        raw("legacy/", 0).mode(0o750),
        raw("legacy/child", b'0').data(b"in a legacy directory"),
        raw("dup/", b'5').mode(0o700).mtime(1_500_000_000),
        raw("dup/f", b'0').data(b"between the two entries"),
        raw("dup/", b'5').mode(0o755).mtime(1_550_000_000),
        raw("tx", b'0')
            .data(b"x")
            .pax("SCHILY.xattr.trusted.overlay.opaque", b"y")
            .pax("SCHILY.xattr.trusted.other", b"1")
            .pax("SCHILY.xattr.user.ok", b"kept"),
        raw("GNUSparseFile.0/v00", b'0')
            .data(b"xyz")
            .pax("GNU.sparse.size", b"100")
            .pax("GNU.sparse.numblocks", b"2")
            .pax("GNU.sparse.offset", b"10")
            .pax("GNU.sparse.numbytes", b"2")
            .pax("GNU.sparse.offset", b"99")
            .pax("GNU.sparse.numbytes", b"1")
            .pax("path", b"hs/v00"),
        raw("GNUSparseFile.0/v10", b'0')
            .data(&v10)
            .pax("GNU.sparse.major", b"1")
            .pax("GNU.sparse.minor", b"0")
            .pax("GNU.sparse.name", b"hs/v10")
            .pax("GNU.sparse.realsize", b"8"),
        raw(".wh.never-existed", b'0'),
        raw("tmp/.wh.nothing", b'0'),
        raw("tmp/.wh.x", b'0'),
        raw("xdir/sub/f", b'0').data(b"under a missing parent"),
        raw("hl/a/src", b'0').data(b"linked"),
        raw("hl/b/dst", b'1').link("hl/a/src"),
        raw("hdev/zero", b'3').dev(1, 5).mode(0o666),
    ])
}

/// Layer 4, GNU tar in posix format with PAX 0.1 sparse files over a whole tree: whiteout and
/// opaque files made on disk, a directory whited out below and made again.
fn layer4() -> Vec<u8> {
    let t = Tree::new();
    t.dir("bin", 0o755, 0, 0)
        .file("bin/.wh.tool", b"")
        .dir("links/a", 0o755, 0, 0)
        .file("links/a/.wh..wh..opq", b"")
        .file("links/a/fresh", b"fresh")
        .dir("home", 0o755, 0, 0)
        .file("home/.wh.u", b"")
        .dir("gone", 0o755, 0, 0)
        .file("gone/again", b"made again")
        .dir("sparse", 0o755, 0, 0)
        .sparse("sparse/v01", 300_000, &[(100_000, b"zero-one")])
        .stamp(1_630_000_000);
    t.gnu_tar(
        &["--format=posix", "--sparse", "--sparse-version=0.1"],
        &["."],
    )
}

/// What README documents as crust's choice where containerd differs: a whiteout hides only
/// lower layers (containerd's bottom layer deletes the same layer's file), a hard link keeps
/// its inode's own metadata (containerd re-applies the link header's), mtimes outside
/// 1970..2262 are kept (containerd sets them to 1970).
fn documented_layer0() -> Vec<u8> {
    hand_tar(vec![
        raw("mine", b'0').data(b"kept: a whiteout hides only lower layers"),
        raw(".wh.mine", b'0'),
        raw("links", b'5'),
        raw("links/orig", b'0').data(b"inode").mode(0o644),
        raw("links/alias", b'1')
            .link("links/orig")
            .mode(0o600)
            .uid(1000)
            .mtime(1_700_000_000),
        raw("time", b'5'),
        raw("time/before-1970", b'0').pax("mtime", b"-100"),
        raw("time/after-2262", b'0').pax("mtime", b"10000000000"),
    ])
}

/// A whiteout for a name no lower layer has, in a directory new in its layer: containerd
/// writes it, and overlayfs, which does not merge that directory, lists it without letting
/// it be opened (a ghost); crust writes no whiteout.
fn documented_layer1() -> Vec<u8> {
    hand_tar(vec![raw("newdir/.wh.x", b'0'), raw("newdir/kept", b'0')])
}

const DOCUMENTED: &[(&str, &str)] = &[
    ("mine", "exists"),
    ("newdir/x", "exists"),
    ("links/orig", "mode"),
    ("links/orig", "owner"),
    ("links/orig", "mtime"),
    ("links/alias", "mode"),
    ("links/alias", "owner"),
    ("links/alias", "mtime"),
    ("time/before-1970", "mtime"),
    ("time/after-2262", "mtime"),
];

/// Both runtimes' merged views of `image`, scanned.
async fn views(
    crust: &Crust,
    ctrd: &Containerd,
    image: &str,
) -> (BTreeMap<PathBuf, Entry>, BTreeMap<PathBuf, Entry>) {
    let lower: Vec<PathBuf> = {
        let s = status(&mut crust.images().await, image, true).await;
        let info: serde_json::Value = serde_json::from_str(&s.info["info"]).unwrap();
        info["lowerdirs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| PathBuf::from(v.as_str().unwrap()))
            .collect()
    };
    let a = tempfile::tempdir().unwrap();
    crust::snapshot::mount_overlay(&lower, None, a.path()).expect("crust's layers mount");
    let ta = tree::scan(a.path());
    nix::mount::umount2(a.path(), nix::mount::MntFlags::MNT_DETACH).unwrap();
    let b = tempfile::tempdir().unwrap();
    ctrd.mount(image, b.path());
    let tb = tree::scan(b.path());
    ctrd.unmount(b.path());
    (ta, tb)
}

fn render(diffs: &[Diff]) -> String {
    diffs.iter().map(|d| format!("\n  {d}")).collect()
}

/// Pushes the images: `diff/app:v1` (the five layers, through an index), `diff/documented:v1`,
/// `diff/escape:v1` and `diff/old-sparse:v1`. With `DUMP_LAYERS=<dir>` the five layer tars are
/// also written there, to inspect with other tar readers.
async fn push_images(reg: &Registry) {
    let layers = [layer0(), layer1(), layer2(), layer3(), layer4()];
    if let Some(d) = std::env::var_os("DUMP_LAYERS") {
        for (i, l) in layers.iter().enumerate() {
            std::fs::write(Path::new(&d).join(format!("l{i}.tar")), l).unwrap();
        }
    }
    let comps = [Comp::Gzip, Comp::Zstd, Comp::None, Comp::Gzip, Comp::Zstd];
    let diff = image(
        &layers.into_iter().zip(comps).collect::<Vec<_>>(),
        json!({"Cmd": ["/bin/sh"]}),
        "amd64",
    );
    reg.push_index("diff/app", "v1", &index(&[(&diff, "amd64")]), &[&diff])
        .await;
    let documented = [documented_layer0(), documented_layer1()].map(|l| (l, Comp::None));
    reg.push(
        "diff/documented",
        "v1",
        &image(&documented, json!({}), "amd64"),
    )
    .await;
    let escape = hand_tar(vec![raw("../escape", b'0').data(b"outside")]);
    reg.push(
        "diff/escape",
        "v1",
        &image(&[(escape, Comp::Gzip)], json!({}), "amd64"),
    )
    .await;
    let old = image(&[(old_sparse_layer(), Comp::Gzip)], json!({}), "amd64");
    reg.push("diff/old-sparse", "v1", &old).await;
}

/// The five-layer image: both views hold what the layers were built to show, and agree.
async fn same_view(crust: &Crust, ctrd: &Containerd, since: i64) {
    let app = format!("{HOST}/diff/app:v1");
    let (mut ci, mut di) = (crust.images().await, ctrd.images().await);
    for (who, c) in [("crust", &mut ci), ("containerd", &mut di)] {
        pull(c, &app)
            .await
            .unwrap_or_else(|e| panic!("{who} pull: {e}"));
    }
    let (a, b) = views(crust, ctrd, &app).await;
    assert!(a.len() > 60, "crust's view is nearly empty: {a:?}");
    // What the layers were built to show is there (so agreeing is not agreeing on nothing).
    let at = |p: &str| &a[&tree::rel(p.as_bytes())];
    assert_eq!((at("tmp").mode, at("root").mode), (0o1777, 0o700));
    assert_eq!(
        (at("").mode, at("").uid),
        (0o755, 0),
        "`./` entries skipped"
    );
    assert!(at("caps/ping").xattrs.contains_key("security.capability"));
    assert_eq!(at("xdir").xattrs["user.dir"], b"kept by copy-up");
    assert_eq!(at("xdir").mode, 0o711);
    assert_eq!(at("sparse/v1").size, Some(2 << 20));
    assert_eq!((at("legacy").kind, at("dup").mtime.0), ('d', 1_550_000_000));
    assert_eq!(at("hl/b/dst").links, [PathBuf::from("hl/a/src")]);
    assert_eq!(at("dev/loop0").rdev, Some((7, 0)));
    assert!(a.contains_key(&tree::rel(b"names/caf\xe9")) && !a.contains_key(Path::new("gonefile")));
    let diffs = tree::diff(&a, &b, since);
    assert!(
        diffs.is_empty(),
        "crust's view (left) differs from containerd's (right):{}",
        render(&diffs)
    );
    let (sa, sb) = (
        status(&mut ci, &app, false).await.image.unwrap().size,
        status(&mut di, &app, false).await.image.unwrap().size,
    );
    assert_eq!(
        sa, sb,
        "ImageStatus size of an image pulled through an index"
    );
}

/// The image of documented differences: exactly those, and as documented.
async fn documented_view(crust: &Crust, ctrd: &Containerd, since: i64) {
    let doc = format!("{HOST}/diff/documented:v1");
    for mut c in [crust.images().await, ctrd.images().await] {
        pull(&mut c, &doc).await.unwrap();
    }
    let (a, b) = views(crust, ctrd, &doc).await;
    let diffs = tree::diff(&a, &b, since);
    let mut found: Vec<(String, &str)> = diffs
        .iter()
        .map(|d| (d.path.display().to_string(), d.field))
        .collect();
    let mut want: Vec<(String, &str)> = DOCUMENTED
        .iter()
        .map(|(p, f)| (p.to_string(), *f))
        .collect();
    found.sort();
    want.sort();
    assert_eq!(
        found,
        want,
        "the documented differences, exactly:{}",
        render(&diffs)
    );
    assert_eq!(b[Path::new("newdir/x")].kind, 'G', "containerd's ghost");
    assert_eq!(a[Path::new("time/before-1970")].mtime.0, -100);
    assert_eq!(a[Path::new("time/after-2262")].mtime.0, 10_000_000_000);
}

/// Layers one runtime refuses and the other takes: `../escape` (crust refuses), old GNU
/// sparse files (containerd 1.6 refuses; crust writes the real file).
async fn refusals(crust: &Crust, ctrd: &Containerd) {
    let (mut ci, mut di) = (crust.images().await, ctrd.images().await);
    let esc = format!("{HOST}/diff/escape:v1");
    let refused = pull(&mut ci, &esc).await.unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );
    assert!(
        refused
            .message()
            .contains("\"../escape\" escapes the layer"),
        "{}",
        refused.message()
    );
    pull(&mut di, &esc)
        .await
        .expect("containerd keeps `../escape` inside the layer and pulls");

    let old = format!("{HOST}/diff/old-sparse:v1");
    pull(&mut ci, &old).await.unwrap();
    let file = std::fs::read_dir(crust.root().join("images/layers"))
        .unwrap()
        .map(|e| e.unwrap().path().join("fs/old"))
        .find(|p| p.exists())
        .expect("the old GNU sparse file is unpacked");
    let data = std::fs::read(file).unwrap();
    assert_eq!(data.len(), 1 << 20);
    assert_eq!(
        (&data[..4], &data[700_000..700_006]),
        (&b"head"[..], &b"middle"[..])
    );
    let refused = pull(&mut di, &old).await.unwrap_err();
    assert!(
        refused.message().contains("unhandled tar header type 83"),
        "containerd 1.6 refuses old GNU sparse files: {refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crust_unpacks_layers_as_containerd_does() {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let reg = Registry::start(Auth::None);
    push_images(&reg).await;
    let crust = Crust::start(&mirror_config(HOST, &reg.addr, ""));
    let ctrd = Containerd::start(HOST, &reg.addr);
    same_view(&crust, &ctrd, since).await;
    documented_view(&crust, &ctrd, since).await;
    refusals(&crust, &ctrd).await;
}
