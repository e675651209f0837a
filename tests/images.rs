//! Image service integration tests: the real daemon over its socket, a real registry
//! (Debian's docker-registry) fed with images these tests build, the generated CRI client.
//! Run as root (`make test`); a missing tool fails the test with the package to install.

#[path = "common/crust_daemon.rs"]
mod crust_daemon;
#[path = "common/oci_build.rs"]
mod oci_build;
#[path = "common/registry.rs"]
mod registry;

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crust::cri::pb;
use crust_daemon::{Crust, images_with_deadline, mirror_config};
use oci_build::{Comp, Node, busybox_layer, dir, file, image, index};
use registry::{Auth, Canned, Registry, Throttle, canned_registry, stalling_server};
use serde_json::json;
use tonic::Code;

fn spec(image: &str) -> Option<pb::ImageSpec> {
    Some(pb::ImageSpec {
        image: image.into(),
        ..Default::default()
    })
}

async fn pull(
    c: &Crust,
    image: &str,
    auth: Option<pb::AuthConfig>,
) -> Result<String, tonic::Status> {
    let r = c
        .images()
        .await
        .pull_image(pb::PullImageRequest {
            image: spec(image),
            auth,
            sandbox_config: None,
        })
        .await?;
    Ok(r.into_inner().image_ref)
}

async fn status(c: &Crust, image: &str, verbose: bool) -> pb::ImageStatusResponse {
    c.images()
        .await
        .image_status(pb::ImageStatusRequest {
            image: spec(image),
            verbose,
        })
        .await
        .unwrap()
        .into_inner()
}

async fn list(c: &Crust) -> Vec<pb::Image> {
    c.images()
        .await
        .list_images(pb::ListImagesRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .images
}

async fn remove(c: &Crust, image: &str) {
    c.images()
        .await
        .remove_image(pb::RemoveImageRequest { image: spec(image) })
        .await
        .unwrap();
}

/// The lowerdirs of a stored image, topmost first, from ImageStatus's verbose info.
async fn lowerdirs(c: &Crust, image: &str) -> Vec<PathBuf> {
    let s = status(c, image, true).await;
    let info: serde_json::Value = serde_json::from_str(&s.info["info"]).unwrap();
    info["lowerdirs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| PathBuf::from(v.as_str().unwrap()))
        .collect()
}

/// An error a user reads: one short line, no transport chain, no HTML.
fn assert_readable(e: &tonic::Status) {
    let m = e.message();
    assert!(m.len() < 400, "{} chars: {m}", m.len());
    for noise in [
        "error sending request",
        "client error (Connect)",
        "<html",
        "\n",
    ] {
        assert!(!m.contains(noise), "{noise:?} in: {m}");
    }
}

/// An image whose one layer holds a hard link to a file outside it: its blob verifies, its
/// extraction fails.
fn badlink_image() -> oci_build::Image {
    image(
        &[(
            oci_build::tar(&[Node::Hardlink {
                path: "l".into(),
                target: "../../../etc/shadow".into(),
            }]),
            Comp::None,
        )],
        json!({}),
        "amd64",
    )
}

/// No download or unpack left anything half-done behind.
fn assert_store_clean(c: &Crust) {
    let ingest: Vec<_> = std::fs::read_dir(c.root().join("images/ingest"))
        .unwrap()
        .collect();
    assert!(ingest.is_empty(), "partial downloads left: {ingest:?}");
    for e in std::fs::read_dir(c.root().join("images/layers")).unwrap() {
        let n = e.unwrap().file_name();
        assert!(
            !n.to_string_lossy().starts_with('.'),
            "partial layer left: {n:?}"
        );
    }
}

fn xattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 256];
    let n = rustix::fs::lgetxattr(p, name, &mut buf).ok()?;
    buf.truncate(n);
    Some(buf)
}

/// The smallest useful image: busybox in one gzip layer, for amd64.
fn busybox_image() -> oci_build::Image {
    image(
        &[(oci_build::tar(&busybox_layer()), Comp::Gzip)],
        json!({}),
        "amd64",
    )
}

/// Three layers (gzip, zstd, none) exercising every entry kind and both whiteout forms.
fn rich_layers() -> Vec<(Vec<u8>, Comp)> {
    let mut l1 = busybox_layer();
    l1.extend([
        dir("data"),
        file("data/a", b"alpha"),
        file("data/b", b"bravo"),
        Node::Hardlink {
            path: "data/a-link".into(),
            target: "data/a".into(),
        },
        dir("opq"),
        file("opq/old", b"old"),
        file("gone", b"to be deleted"),
        Node::File {
            path: "bin/setuid".into(),
            data: b"#!/bin/sh\n".to_vec(),
            mode: 0o4755,
            uid: 0,
            gid: 0,
            xattrs: vec![],
        },
        Node::Dir {
            path: "home".into(),
            mode: 0o755,
            uid: 0,
            gid: 0,
        },
        Node::Dir {
            path: "home/user".into(),
            mode: 0o750,
            uid: 1000,
            gid: 1000,
        },
        Node::File {
            path: "home/user/f".into(),
            data: b"mine".to_vec(),
            mode: 0o640,
            uid: 1000,
            gid: 1001,
            xattrs: vec![],
        },
        Node::File {
            path: "x".into(),
            data: b"x".to_vec(),
            mode: 0o644,
            uid: 0,
            gid: 0,
            xattrs: vec![
                ("user.crust".into(), b"hello".to_vec()),
                ("trusted.overlay.opaque".into(), b"y".to_vec()),
            ],
        },
    ]);
    let l2 = vec![
        file(".wh.gone", b""),
        dir("opq"),
        file("opq/.wh..wh..opq", b""),
        file("opq/new", b"new"),
        dir("dev"),
        Node::Char {
            path: "dev/null".into(),
            major: 1,
            minor: 3,
        },
        Node::Fifo {
            path: "dev/fifo".into(),
        },
        Node::Symlink {
            path: "abs".into(),
            target: "/etc/passwd".into(),
        },
        dir("data2"),
        Node::Symlink {
            path: "sl".into(),
            target: "/data2".into(),
        },
        file("sl/through", b"via symlinked parent"),
        Node::Symlink {
            path: "esc".into(),
            target: "../../../../../tmp/crust-escape".into(),
        },
        file("esc/evil", b"must stay inside"),
    ];
    let l3 = vec![
        dir("data"),
        file("data/b", b"bravo v2"),
        Node::Dir {
            path: "newdir".into(),
            mode: 0o700,
            uid: 7,
            gid: 8,
        },
    ];
    vec![
        (oci_build::tar(&l1), Comp::Gzip),
        (oci_build::tar(&l2), Comp::Zstd),
        (oci_build::tar(&l3), Comp::None),
    ]
}

/// The layers stacked by crust's overlayfs mount, as a container's root filesystem will be:
/// whiteouts hide, opaque directories hide, upper layers win.
fn check_merged_view(lower: &[PathBuf]) {
    let target = tempfile::tempdir().unwrap();
    crust::snapshot::mount_overlay(lower, None, target.path())
        .expect("the lowerdirs mount as an overlayfs");
    let m = target.path();
    let seen = (
        m.join("gone").symlink_metadata().is_err(),
        m.join("opq/old").symlink_metadata().is_err(),
        std::fs::read(m.join("opq/new")).ok(),
        std::fs::read(m.join("data/b")).ok(),
        std::fs::read(m.join("data/a")).ok(),
        m.join("bin/busybox").is_file(),
        m.join("newdir").is_dir(),
    );
    nix::mount::umount2(m, nix::mount::MntFlags::MNT_DETACH).unwrap();
    assert_eq!(
        seen,
        (
            true,
            true,
            Some(b"new".to_vec()),
            Some(b"bravo v2".to_vec()),
            Some(b"alpha".to_vec()),
            true,
            true
        ),
        "(whiteout hides, opaque dir hides, opaque dir's own file, upper wins, lower shows, busybox, new dir)"
    );
}

fn check_rich_tree(lower: &[PathBuf]) {
    assert_eq!(lower.len(), 3);
    let (l3, l2, l1) = (&lower[0], &lower[1], &lower[2]);
    // Layer 1: contents, hard links, modes, owners, xattrs.
    assert_eq!(
        std::fs::read(l1.join("bin/busybox")).unwrap(),
        std::fs::read("/bin/busybox").unwrap()
    );
    assert_eq!(
        std::fs::read_link(l1.join("bin/sh")).unwrap(),
        PathBuf::from("busybox")
    );
    let (a, link) = (
        l1.join("data/a").metadata().unwrap(),
        l1.join("data/a-link").metadata().unwrap(),
    );
    assert_eq!(
        (a.ino(), a.nlink()),
        (link.ino(), 2),
        "hard link shares the inode"
    );
    assert_eq!(std::fs::read(l1.join("data/a-link")).unwrap(), b"alpha");
    assert_eq!(
        l1.join("bin/setuid").metadata().unwrap().mode() & 0o7777,
        0o4755,
        "setuid kept"
    );
    let f = l1.join("home/user/f").metadata().unwrap();
    assert_eq!((f.uid(), f.gid(), f.mode() & 0o7777), (1000, 1001, 0o640));
    let h = l1.join("home/user").metadata().unwrap();
    assert_eq!((h.uid(), h.mode() & 0o7777), (1000, 0o750));
    assert_eq!(f.mtime(), oci_build::MTIME as i64, "mtimes kept");
    assert_eq!(h.mtime(), oci_build::MTIME as i64, "directory mtimes kept");
    assert_eq!(
        xattr(&l1.join("x"), "user.crust").as_deref(),
        Some(&b"hello"[..])
    );
    assert_eq!(
        xattr(&l1.join("x"), "trusted.overlay.opaque"),
        None,
        "overlay xattrs from a tar are dropped"
    );
    // Layer 2: whiteouts in overlayfs form, devices, symlinks contained.
    let gone = l2.join("gone").symlink_metadata().unwrap();
    assert!(
        gone.file_type().is_char_device() && gone.rdev() == 0,
        "whiteout is a 0:0 char device"
    );
    assert_eq!(
        xattr(&l2.join("opq"), "trusted.overlay.opaque").as_deref(),
        Some(&b"y"[..])
    );
    assert!(!l2.join("opq/.wh..wh..opq").exists());
    assert_eq!(std::fs::read(l2.join("opq/new")).unwrap(), b"new");
    let null = l2.join("dev/null").symlink_metadata().unwrap();
    assert!(null.file_type().is_char_device());
    assert_eq!(null.rdev(), rustix::fs::makedev(1, 3));
    assert!(
        l2.join("dev/fifo")
            .symlink_metadata()
            .unwrap()
            .file_type()
            .is_fifo()
    );
    assert_eq!(
        std::fs::read_link(l2.join("abs")).unwrap(),
        PathBuf::from("/etc/passwd")
    );
    assert_eq!(
        std::fs::read(l2.join("data2/through")).unwrap(),
        b"via symlinked parent"
    );
    assert_eq!(
        std::fs::read(l2.join("tmp/crust-escape/evil")).unwrap(),
        b"must stay inside"
    );
    assert!(
        !Path::new("/tmp/crust-escape").exists(),
        "an entry escaped its layer"
    );
    // Layer 3: a replaced file and a new directory.
    assert_eq!(std::fs::read(l3.join("data/b")).unwrap(), b"bravo v2");
    let nd = l3.join("newdir").metadata().unwrap();
    assert_eq!((nd.uid(), nd.gid(), nd.mode() & 0o7777), (7, 8, 0o700));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_list_status_and_remove_a_multi_layer_image() {
    let reg = Registry::start(Auth::None);
    let img = image(
        &rich_layers(),
        json!({"User": "1000:1000", "Cmd": ["sh"], "StopSignal": "SIGQUIT"}),
        "amd64",
    );
    reg.push("app/rich", "v1", &img).await;
    let c = Crust::start(&mirror_config("registry.test", &reg.addr, ""));
    let r = "registry.test/app/rich:v1";

    let id = pull(&c, r, None).await.unwrap();
    assert_eq!(id, img.id(), "PullImage returns the config digest");
    let listed = list(&c).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, id);
    assert_eq!(listed[0].repo_tags, [r]);
    assert_eq!(
        listed[0].repo_digests,
        [format!("registry.test/app/rich@{}", img.manifest.digest())]
    );
    assert!(listed[0].size > 0);
    let s = status(&c, r, false).await;
    let i = s.image.unwrap();
    assert_eq!(i.id, id);
    assert_eq!(i.uid, Some(pb::Int64Value { value: 1000 }));
    assert!(s.info.is_empty(), "info only when verbose");
    check_rich_tree(&lowerdirs(&c, r).await);
    check_merged_view(&lowerdirs(&c, r).await);
    for name in [
        &id[7..],
        &id[7..19],
        id.as_str(),
        &listed[0].repo_digests[0],
    ] {
        assert_eq!(
            status(&c, name, false).await.image.unwrap().id,
            id,
            "found by {name}"
        );
    }
    assert!(
        status(&c, "registry.test/app/rich:nope", false)
            .await
            .image
            .is_none(),
        "unknown image: empty, no error"
    );
    // A second pull reuses everything and answers the same id.
    assert_eq!(pull(&c, r, None).await.unwrap(), id);

    let fs = c
        .images()
        .await
        .image_fs_info(pb::ImageFsInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    let used = fs.image_filesystems[0].used_bytes.as_ref().unwrap().value;
    assert!(
        used > std::fs::metadata("/bin/busybox").unwrap().len(),
        "image fs counts unpacked layers: {used}"
    );
    assert!(fs.image_filesystems[0].inodes_used.as_ref().unwrap().value > 20);
    // The container layers are on the image store's disk: both name that filesystem alike, or
    // kubelet would take one disk for a split one (KubeletSeparateDiskGC).
    let mountpoint = |u: &pb::FilesystemUsage| u.fs_id.as_ref().unwrap().mountpoint.clone();
    assert!(mountpoint(&fs.image_filesystems[0]).ends_with("/images"));
    assert_eq!(
        mountpoint(&fs.container_filesystems[0]),
        mountpoint(&fs.image_filesystems[0])
    );

    remove(&c, &listed[0].repo_digests[0]).await;
    assert!(list(&c).await.is_empty());
    remove(&c, r).await; // idempotent
    assert_eq!(
        std::fs::read_dir(c.root().join("images/layers"))
            .unwrap()
            .count(),
        0,
        "layers removed"
    );
    assert_eq!(
        std::fs::read_dir(c.root().join("images/blobs/sha256"))
            .unwrap()
            .count(),
        0,
        "blobs removed"
    );
    assert_store_clean(&c);
}

/// `image.pinned_images` (containerd's and CRI-O's key): an image one of whose names matches a
/// reference or a glob is reported pinned, in ListImages and ImageStatus, so kubelet's image
/// garbage collection (age-based too) leaves it; the others are not. RemoveImage still removes a
/// pinned image a client names, as containerd's RemoveImage does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_images_are_reported_pinned_and_removed_only_when_asked() {
    let reg = Registry::start(Auth::None);
    let img = |marker: &[u8]| {
        image(
            &[(oci_build::tar(&[file("marker", marker)]), Comp::Gzip)],
            json!({}),
            "amd64",
        )
    };
    let (pause, base, app) = (img(b"pause"), img(b"base"), img(b"app"));
    reg.push("infra/pause", "3.10", &pause).await;
    reg.push("base/os", "12", &base).await;
    reg.push("apps/web", "1", &app).await;
    let pins =
        "[image]\npinned_images = [\"registry.test/infra/pause:3.10\", \"registry.test/base/*\"]\n";
    let c = Crust::start(&mirror_config("registry.test", &reg.addr, pins));
    for r in ["infra/pause:3.10", "base/os:12", "apps/web:1"] {
        pull(&c, &format!("registry.test/{r}"), None).await.unwrap();
    }
    let pinned = |images: &[pb::Image]| {
        let mut names: Vec<String> = images
            .iter()
            .filter(|i| i.pinned)
            .flat_map(|i| i.repo_tags.clone())
            .collect();
        names.sort();
        names
    };
    let listed = list(&c).await;
    assert_eq!(listed.len(), 3);
    assert_eq!(
        pinned(&listed),
        ["registry.test/base/os:12", "registry.test/infra/pause:3.10"]
    );
    let status_of = async |name: &str| status(&c, name, false).await.image.unwrap();
    assert!(status_of("registry.test/infra/pause:3.10").await.pinned);
    assert!(!status_of("registry.test/apps/web:1").await.pinned);
    // Pinned by whichever name it carries: found by its digest, it is still pinned.
    let digest = status_of("registry.test/base/os:12").await.repo_digests[0].clone();
    assert!(status_of(&digest).await.pinned);

    remove(&c, "registry.test/infra/pause:3.10").await;
    let left = list(&c).await;
    assert_eq!(pinned(&left), ["registry.test/base/os:12"]);
    assert_eq!(left.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn index_short_names_tags_and_shared_layers() {
    let reg = Registry::start(Auth::None);
    let base = oci_build::tar(&busybox_layer());
    let amd = image(
        &[
            (base.clone(), Comp::Gzip),
            (oci_build::tar(&[file("arch", b"amd64")]), Comp::Gzip),
        ],
        json!({"User": "www-data"}),
        "amd64",
    );
    let arm = image(
        &[(oci_build::tar(&[file("arch", b"arm64")]), Comp::Gzip)],
        json!({}),
        "arm64",
    );
    let idx = index(&[(&arm, "arm64"), (&amd, "amd64")]);
    reg.push_index("library/busybox", "latest", &idx, &[&arm, &amd])
        .await;
    let other = oci_build::docker(&image(
        &[
            (base, Comp::Gzip),
            (oci_build::tar(&[file("other", b"1")]), Comp::Gzip),
        ],
        json!({}),
        "amd64",
    ));
    reg.push("library/busybox", "other", &other).await;
    // The first mirror is down (nothing listens there): the second one serves.
    let dead = registry::free_port();
    let c = Crust::start(&format!(
        "[registry.mirrors.\"docker.io\"]\nendpoints = [\"http://127.0.0.1:{dead}\", \"http://{}\"]\n",
        reg.addr
    ));

    // busybox -> docker.io/library/busybox:latest, through the mirror, this machine's platform.
    let id = pull(&c, "busybox", None).await.unwrap();
    assert_eq!(id, amd.id());
    let s = status(&c, "docker.io/library/busybox:latest", false)
        .await
        .image
        .unwrap();
    assert_eq!(s.username, "www-data");
    assert_eq!(
        s.repo_digests,
        [format!("docker.io/library/busybox@{}", idx.digest())],
        "repo digest is the index's"
    );
    // Pull by digest (of the index) and by a second tag (Docker schema 2) sharing the base.
    assert_eq!(
        pull(&c, &format!("busybox@{}", idx.digest()), None)
            .await
            .unwrap(),
        id
    );
    let other_id = pull(&c, "busybox:other", None).await.unwrap();
    assert_eq!(
        std::fs::read_dir(c.root().join("images/layers"))
            .unwrap()
            .count(),
        3,
        "shared base unpacked once"
    );
    // Moving a tag untags the old image, which stays listed by id.
    reg.push("library/busybox", "latest", &other).await;
    assert_eq!(pull(&c, "busybox", None).await.unwrap(), other_id);
    let old = status(&c, &id, false).await.image.unwrap();
    assert!(
        old.repo_tags.is_empty(),
        "old image lost the moved tag: {:?}",
        old.repo_tags
    );
    let filtered = c
        .images()
        .await
        .list_images(pb::ListImagesRequest {
            filter: Some(pb::ImageFilter {
                image: spec("busybox:other"),
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .images;
    assert_eq!(filtered.len(), 1);
    assert_eq!(filtered[0].id, other_id);
    // Removing one image keeps the layer the other still uses.
    remove(&c, &id).await;
    assert_eq!(
        std::fs::read_dir(c.root().join("images/layers"))
            .unwrap()
            .count(),
        2
    );
    assert_eq!(list(&c).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_fails_cleanly_and_the_store_stays_usable() {
    let reg = Registry::start(Auth::None);
    let good = busybox_image();
    reg.push("good", "1", &good).await;
    let traversal = image(
        &[(
            oci_build::tar(&[Node::RawFile {
                name: b"../../evil".to_vec(),
                data: b"x".to_vec(),
            }]),
            Comp::Gzip,
        )],
        json!({}),
        "amd64",
    );
    reg.push("traversal", "1", &traversal).await;
    let badlink = badlink_image();
    reg.push("badlink", "1", &badlink).await;
    let corrupt = image(
        &[(
            oci_build::tar(&[file("f", b"original content")]),
            Comp::Gzip,
        )],
        json!({}),
        "amd64",
    );
    reg.push("corrupt", "1", &corrupt).await;
    // Change the stored layer behind the registry's back: same length, different bytes.
    let f = reg.blob_file(&corrupt.layers[0].digest());
    let mut bytes = std::fs::read(&f).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&f, bytes).unwrap();
    let c = Crust::start(&mirror_config("registry.test", &reg.addr, ""));

    let long_name = format!("registry.test/{}", "a/".repeat(5000));
    let long_tag = format!("registry.test/good:{}", "t".repeat(5000));
    for bad in [
        "",
        "Registry.Test/UPPER",
        "registry.test/a//b",
        "registry.test/x:bad tag",
        "x@sha256:123",
        "sha256:",
        "@",
        ":::",
        "registry.test/x\0y",
        "registry.test/\u{1f600}",
        "registry.test:99999/x",
        &long_name,
        &long_tag,
    ] {
        let e = pull(&c, bad, None).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{bad:?}: {e}");
        assert_readable(&e);
        // The read and remove paths refuse it the same way (or find nothing), never panic.
        let mut images = c.images().await;
        let s = images
            .image_status(pb::ImageStatusRequest {
                image: spec(bad),
                verbose: true,
            })
            .await;
        assert!(
            s.as_ref().map_or_else(
                |e| e.code() == Code::InvalidArgument,
                |r| r.get_ref().image.is_none()
            ),
            "{bad:?}: {s:?}"
        );
        let r = images
            .remove_image(pb::RemoveImageRequest { image: spec(bad) })
            .await;
        assert!(
            r.as_ref()
                .map_or_else(|e| e.code() == Code::InvalidArgument, |_| true),
            "{bad:?}: {r:?}"
        );
    }
    let e = c
        .images()
        .await
        .pull_image(pb::PullImageRequest {
            image: Some(pb::ImageSpec {
                image: "registry.test/good:1".into(),
                runtime_handler: "x".repeat(10_000),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert!(
        e.message().contains("runc"),
        "names the known handlers: {e}"
    );
    assert_readable(&e);
    let e = pull(&c, "registry.test/good:nope", None).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e}");
    assert!(e.message().contains("good:nope"), "{e}");
    let e = pull(&c, "registry.test/nothere:1", None).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e}");
    let e = pull(&c, "registry.test/corrupt:1", None).await.unwrap_err();
    assert_eq!(e.code(), Code::DataLoss, "{e}");
    assert!(
        e.message().contains(&corrupt.layers[0].digest()),
        "names the blob: {e}"
    );
    let e = pull(&c, "registry.test/traversal:1", None)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    assert!(e.message().contains("escapes"), "{e}");
    let e = pull(&c, "registry.test/badlink:1", None).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    assert!(!c.root().join("evil").exists() && !c.root().join("images/evil").exists());
    assert_store_clean(&c);
    assert!(list(&c).await.is_empty(), "failed pulls store no image");
    assert_eq!(
        pull(&c, "registry.test/good:1", None).await.unwrap(),
        good.id()
    );
    assert_store_clean(&c);
}

/// A layer whose blob verified but whose extraction failed: the blob is still moved into place,
/// by a task of its own, and the failed pull answers only once that task is done. The task is
/// held at a failpoint with the blob still in `ingest/` until the pull says (in its debug log)
/// that it waits for it; a pull that answered instead would leave the blob in `ingest/`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_pull_answers_once_its_verified_blob_is_in_place() {
    let reg = Registry::start(Auth::None);
    let badlink = badlink_image();
    reg.push("badlink", "1", &badlink).await;
    let markers = tempfile::tempdir().unwrap();
    let marker = |s: &str| markers.path().join(format!("image.pull.blob_verified.{s}"));
    // The registry's own address as the image's host: one endpoint, no fallback to try after
    // the layer fails.
    let c = Crust::start_with_env(
        &mirror_config(&reg.addr, &reg.addr, ""),
        &[
            ("CRUST_FAILPOINT", "image.pull.blob_verified:pause"),
            ("CRUST_FAILPOINT_DIR", markers.path().to_str().unwrap()),
        ],
    );
    let mut images = c.images().await;
    let reference = format!("{}/badlink:1", reg.addr);
    let pulling = tokio::spawn(async move {
        images
            .pull_image(pb::PullImageRequest {
                image: spec(&reference),
                ..Default::default()
            })
            .await
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let waiting = "waiting for the blobs that verified to be stored";
    while !(marker("reached").exists() && c.log().contains(waiting)) {
        assert!(
            !pulling.is_finished(),
            "the pull answered with its verified blob held in ingest/: {:?}",
            std::fs::read_dir(c.root().join("images/ingest"))
                .unwrap()
                .collect::<Vec<_>>()
        );
        assert!(
            std::time::Instant::now() < deadline,
            "the layer's blob never verified, or the pull never waited for it: {}",
            c.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    std::fs::write(marker("release"), "").unwrap();
    let e = pulling.await.unwrap().unwrap_err();
    assert!(
        marker("done").exists(),
        "answered before the blob was stored"
    );
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    assert_store_clean(&c);
    let blob = badlink.layers[0].digest();
    let hex = blob.strip_prefix("sha256:").unwrap();
    assert!(
        c.root().join("images/blobs/sha256").join(hex).exists(),
        "the verified blob {blob} is kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_registry_aborts_the_pull() {
    let (addr, _server) = stalling_server();
    let c = Crust::start(&mirror_config(
        &addr,
        &addr,
        "[image]\npull_progress_timeout_secs = 2\n",
    ));
    let t = std::time::Instant::now();
    let e = pull(&c, &format!("{addr}/x:1"), None).await.unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e}");
    assert!(
        t.elapsed() < std::time::Duration::from_secs(20),
        "took {:?}",
        t.elapsed()
    );
    assert!(e.message().contains("no progress"), "{e}");
    assert_store_clean(&c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_deadline_is_answered_with_deadline_exceeded() {
    // kubelet and critest set deadlines on RPCs; gRPC says the server answers
    // DEADLINE_EXCEEDED when one passes (tonic on its own would answer CANCELLED).
    let (addr, _server) = stalling_server();
    let c = Crust::start(&mirror_config(&addr, &addr, ""));
    let mut images = images_with_deadline(&c.socket(), "300m").await;
    let req = pb::PullImageRequest {
        image: spec(&format!("{addr}/x:1")),
        auth: None,
        sandbox_config: None,
    };
    let e = images.pull_image(req).await.unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e}");
    assert!(
        e.message().contains("PullImage") && e.message().contains("deadline"),
        "{e}"
    );
    // The daemon still answers.
    assert!(list(&c).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer_that_would_fill_the_disk_is_stopped() {
    // 48 MiB of zeros gzip to about 50 KiB: the blob fits, the unpacked layer would not.
    let reg = Registry::start(Auth::None);
    let zeros = vec![0u8; 48 << 20];
    let bomb = image(
        &[(oci_build::tar(&[file("zeros", &zeros)]), Comp::Gzip)],
        json!({}),
        "amd64",
    );
    reg.push("bomb", "1", &bomb).await;
    let small = busybox_image();
    reg.push("small", "1", &small).await;
    let config = mirror_config(
        "registry.test",
        &reg.addr,
        "[image]\nmin_free_percent = 30\n",
    );
    let c = Crust::start_on_small_disk(&config, 32);
    let e = pull(&c, "registry.test/bomb:1", None).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e}");
    assert!(
        e.message().contains("min_free_percent") && e.message().contains(&bomb.layers[0].digest()),
        "names the layer and the setting: {e}"
    );
    assert_store_clean(&c);
    let free = rustix::fs::statvfs(c.root()).unwrap();
    assert!(
        free.f_bavail * 10 > free.f_blocks * 9,
        "the partial layer was removed"
    );
    assert_eq!(
        pull(&c, "registry.test/small:1", None).await.unwrap(),
        small.id()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pulls_share_one_download() {
    let reg = Registry::start(Auth::None);
    let big = oci_build::noise(0, 8_000_000);
    let img = image(
        &[(oci_build::tar(&[file("big", &big)]), Comp::Gzip)],
        json!({}),
        "amd64",
    );
    reg.push("big", "1", &img).await;
    reg.push("big", "2", &img).await;
    let c = Crust::start(&mirror_config("registry.test", &reg.addr, ""));
    let (a, b, d) = tokio::join!(
        pull(&c, "registry.test/big:1", None),
        pull(&c, "registry.test/big:2", None),
        pull(&c, "registry.test/big:1", None)
    );
    assert_eq!(a.unwrap(), img.id());
    assert_eq!(b.unwrap(), img.id());
    assert_eq!(d.unwrap(), img.id());
    let tags = status(&c, &img.id(), false).await.image.unwrap().repo_tags;
    assert_eq!(tags, ["registry.test/big:1", "registry.test/big:2"]);
    // The registry's access log shows every blob GET.
    let layer = &img.layers[0].digest();
    let reg_log = std::fs::read_to_string(reg.dir.path().join("registry.log")).unwrap_or_default();
    let served = reg_log
        .matches(&format!("GET /v2/big/blobs/{layer}"))
        .count();
    assert_eq!(
        served, 1,
        "layer downloaded {served} times; registry log:\n{reg_log}"
    );
    assert_store_clean(&c);
}

fn basic(user: &str, password: &str) -> Option<pb::AuthConfig> {
    Some(pb::AuthConfig {
        username: user.into(),
        password: password.into(),
        ..Default::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_registry() {
    let reg = Registry::start(Auth::Basic {
        user: "alice".into(),
        password: "s3cret".into(),
    });
    let img = busybox_image();
    reg.push("private/app", "1", &img).await;
    let host = reg.addr.clone();
    let c = Crust::start(&mirror_config(&host, &reg.addr, ""));
    let r = format!("{host}/private/app:1");
    let e = pull(&c, &r, None).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e}");
    assert!(e.message().contains("requires authentication"), "{e}");
    let e = pull(&c, &r, basic("alice", "wrong")).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e}");
    assert!(e.message().contains("rejected the credentials"), "{e}");
    assert!(
        !c.log().contains("s3cret") && !c.log().contains("wrong"),
        "credentials never logged"
    );
    assert_eq!(
        pull(&c, &r, basic("alice", "s3cret")).await.unwrap(),
        img.id()
    );
    use base64::Engine;
    let auth = base64::engine::general_purpose::STANDARD.encode("alice:s3cret");
    remove(&c, &r).await;
    let a = Some(pb::AuthConfig {
        auth,
        ..Default::default()
    });
    assert_eq!(pull(&c, &r, a).await.unwrap(), img.id());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_credentials_in_the_config_reach_a_private_mirror() {
    let reg = Registry::start(Auth::Token {
        user: "bob".into(),
        password: "t0ken-pw".into(),
    });
    let img = busybox_image();
    reg.push("team/app", "1", &img).await;
    let node_auth = |pw: &str| {
        let table = format!("[registry.configs.\"{}\".auth]", reg.addr);
        mirror_config(
            "registry.test",
            &reg.addr,
            &format!("{table}\nusername = \"bob\"\npassword = \"{pw}\"\n"),
        )
    };
    // The pull carries no credentials; the mirror gets the node's.
    let c = Crust::start(&node_auth("t0ken-pw"));
    assert_eq!(
        pull(&c, "registry.test/team/app:1", None).await.unwrap(),
        img.id()
    );
    let mut rt = pb::runtime_service_client::RuntimeServiceClient::new(
        crust_daemon::connect(&c.socket()).await,
    );
    let info = rt
        .status(pb::StatusRequest { verbose: true })
        .await
        .unwrap()
        .into_inner()
        .info;
    let shown = format!("{info:?}");
    assert!(shown.contains("<redacted>"), "{shown}");
    assert!(!shown.contains("t0ken-pw") && !c.log().contains("t0ken-pw"));
    drop(c);

    let c = Crust::start(&node_auth("wrong"));
    let e = pull(&c, "registry.test/team/app:1", None)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e}");
    let want = format!(
        "rejected the credentials from registry.configs.\"{}\".auth",
        reg.addr
    );
    assert!(e.message().contains(&want), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_auth_registry() {
    let reg = Registry::start(Auth::Token {
        user: "bob".into(),
        password: "t0ken-pw".into(),
    });
    let img = busybox_image();
    reg.push("team/app", "1", &img).await;
    let host = reg.addr.clone();
    let c = Crust::start(&mirror_config(&host, &reg.addr, ""));
    let r = format!("{host}/team/app:1");
    let e = pull(&c, &r, None).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e}");
    let e = pull(&c, &r, basic("bob", "nope")).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e}");
    assert_eq!(
        pull(&c, &r, basic("bob", "t0ken-pw")).await.unwrap(),
        img.id()
    );
    remove(&c, &r).await;
    let token = Some(pb::AuthConfig {
        registry_token: reg.token_for("team/app"),
        ..Default::default()
    });
    assert_eq!(pull(&c, &r, token).await.unwrap(), img.id());
    remove(&c, &r).await;
    let identity = Some(pb::AuthConfig {
        identity_token: reg.identity_token(),
        ..Default::default()
    });
    assert_eq!(pull(&c, &r, identity).await.unwrap(), img.id());
    let bad = Some(pb::AuthConfig {
        identity_token: "not-it".into(),
        ..Default::default()
    });
    remove(&c, &r).await;
    assert_eq!(
        pull(&c, &r, bad).await.unwrap_err().code(),
        Code::Unauthenticated
    );
    assert!(!c.log().contains("t0ken-pw") && !c.log().contains(&reg.identity_token()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_layouts_and_archives_while_the_daemon_runs() {
    let c = Crust::start("");
    let tars = vec![
        oci_build::tar(&busybox_layer()),
        oci_build::tar(&[file("hello", b"imported")]),
    ];
    let layered: Vec<(Vec<u8>, Comp)> = tars.iter().map(|t| (t.clone(), Comp::None)).collect();
    let img = image(&layered, json!({"Cmd": ["sh"]}), "amd64");
    let zimg = image(&[(tars[1].clone(), Comp::Zstd)], json!({}), "amd64");

    let layout = c.dir.path().join("layout");
    oci_build::write_layout(
        &layout,
        &[(&img, Some("1.0")), (&zimg, Some("example.test/z:2"))],
    );
    let out = c.image_cli(&[
        "import",
        layout.to_str().unwrap(),
        "--name",
        "example.test/app",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let archive = c.dir.path().join("app.tar");
    std::fs::write(
        &archive,
        oci_build::docker_archive(&img, &tars, "docker.test/app:saved"),
    )
    .unwrap();
    let out = c.image_cli(&["import", archive.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The same layout as an OCI archive (a tar of the layout directory), under another name.
    let oci_tar = c.dir.path().join("layout.tar");
    let mut b = tar::Builder::new(std::fs::File::create(&oci_tar).unwrap());
    b.append_dir_all(".", &layout).unwrap();
    b.finish().unwrap();
    drop(b);
    let out = c.image_cli(&[
        "import",
        oci_tar.to_str().unwrap(),
        "--name",
        "archive.test/app",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = status(&c, "archive.test/app:1.0", false)
        .await
        .image
        .expect("imported OCI archive");
    assert_eq!(s.id, img.id());

    // The running daemon sees the imports (it reloads on the generation file).
    let s = status(&c, "example.test/app:1.0", false)
        .await
        .image
        .expect("imported layout image");
    assert_eq!(s.id, img.id());
    assert_eq!(
        status(&c, "example.test/z:2", false)
            .await
            .image
            .unwrap()
            .id,
        zimg.id()
    );
    let saved = status(&c, "docker.test/app:saved", false)
        .await
        .image
        .expect("imported docker archive");
    assert_eq!(saved.id, img.id(), "same config, same id");
    let lower = lowerdirs(&c, "example.test/app:1.0").await;
    assert_eq!(std::fs::read(lower[0].join("hello")).unwrap(), b"imported");
    let out = c.image_cli(&["ls"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("example.test/app")
            && text.contains("docker.test/app")
            && text.contains(&img.id()[7..19]),
        "{text}"
    );
    let bad = c.dir.path().join("bad.tar");
    std::fs::write(&bad, oci_build::tar(&[file("nothing", b"here")])).unwrap();
    let out = c.image_cli(&["import", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an OCI layout"));
    assert_store_clean(&c);
}

/// Answers of a registry that is broken or hostile, each refused with a clear error and
/// without the daemon buffering the body.
fn broken_registry(path: &str) -> Canned {
    let manifest = |layer_size: i64, schema: u32| {
        let d = oci_build::digest(b"x");
        json!({
            "schemaVersion": schema,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": d, "size": 1},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": d, "size": layer_size}],
        })
        .to_string()
        .into_bytes()
    };
    let json = "application/vnd.oci.image.manifest.v1+json";
    match path {
        "/v2/" => Canned::Body(200, "application/json", b"{}".to_vec()),
        "/v2/garbage/manifests/1" => Canned::Body(200, json, b"<html>portal</html>".to_vec()),
        "/v2/endless/manifests/1" => Canned::Endless {
            head: br#"{"schemaVersion":2,"layers":["#.to_vec(),
            filler: br#"{"digest":"sha256:0","size":1},"#.repeat(1000),
        },
        "/v2/declared/manifests/1" => Canned::Declared(1 << 30),
        "/v2/negative/manifests/1" => Canned::Body(200, json, manifest(-1, 2)),
        "/v2/schema1/manifests/1" => Canned::Body(
            200,
            "application/vnd.docker.distribution.manifest.v1+prettyjws",
            br#"{"schemaVersion":1,"name":"schema1","tag":"1","fsLayers":[]}"#.to_vec(),
        ),
        "/v2/html500/manifests/1" => Canned::Body(
            500,
            "text/html",
            format!("<html>{}</html>", "oops ".repeat(100_000)).into_bytes(),
        ),
        "/v2/limited/manifests/1" => Canned::Body(
            429,
            "application/json",
            br#"{"errors":[{"code":"TOOMANYREQUESTS","message":"pull rate limit exceeded"}]}"#
                .to_vec(),
        ),
        _ => Canned::Body(
            404,
            "application/json",
            br#"{"errors":[{"code":"NAME_UNKNOWN","message":"repository name not known"}]}"#
                .to_vec(),
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_registry_gets_clear_errors_and_no_memory() {
    let (addr, _server) = canned_registry(broken_registry);
    let c = Crust::start(&mirror_config("broken.test", &addr, ""));
    let cases = [
        ("garbage", Code::FailedPrecondition, "malformed manifest"),
        ("endless", Code::FailedPrecondition, "larger than 4 MiB"),
        ("declared", Code::FailedPrecondition, "larger than 4 MiB"),
        ("negative", Code::FailedPrecondition, "negative size"),
        ("schema1", Code::FailedPrecondition, "schema 1"),
        ("html500", Code::Unavailable, "HTTP 500"),
        ("limited", Code::Unavailable, "rate limit"),
        ("nothere", Code::NotFound, "not found"),
    ];
    for (repo, code, words) in cases {
        let e = pull(&c, &format!("broken.test/{repo}:1"), None)
            .await
            .unwrap_err();
        assert_eq!(e.code(), code, "{repo}: {e}");
        assert!(e.message().contains(words), "{repo}: {e}");
        assert!(
            e.message().contains(&addr),
            "{repo}: names the registry: {e}"
        );
        assert_readable(&e);
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", c.pid())).unwrap();
    let hwm_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert!(
        hwm_kb < 200 << 10,
        "the daemon's peak RSS is {hwm_kb} kB: it buffered an endless manifest"
    );
    assert!(list(&c).await.is_empty());
    assert_store_clean(&c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_on_this_node_works_and_elsewhere_and_untrusted_tls_say_which_setting_to_change()
{
    let reg = Registry::start(Auth::None);
    let img = busybox_image();
    reg.push("app", "1", &img).await;
    let tls = registry::TlsRegistry::start(&reg);
    let c = Crust::start(&format!(
        "[registry.configs.\"{}\"]\nca_file = \"{}\"\n",
        tls.addr,
        tls.ca.display()
    ));
    // A plain-http registry on this node, named by its loopback address or as localhost, is
    // pulled from over plain http without a mirror entry once it refuses HTTPS (as containerd
    // does); the same registry named by a name that is not a loopback one stays HTTPS-only,
    // and the error says how to allow plain http.
    let port = reg.addr.rsplit_once(':').unwrap().1;
    for local in [reg.addr.clone(), format!("localhost:{port}")] {
        assert_eq!(
            pull(&c, &format!("{local}/app:1"), None).await.unwrap(),
            img.id(),
            "{local}"
        );
    }
    let host = nix::unistd::gethostname().unwrap().into_string().unwrap();
    let resolved = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), 0))
        .map(|mut a| a.any(|a| a.ip().is_loopback()))
        .unwrap_or(false);
    assert!(
        resolved && host != "localhost",
        "this test names the registry by the host's name {host:?}, which must resolve to a \
         loopback address (/etc/hosts) and not be localhost"
    );
    let named = format!("{host}:{port}");
    let e = pull(&c, &format!("{named}/app:1"), None).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e}");
    assert!(
        e.message()
            .contains(&format!("[registry.mirrors.\"{named}\"]")),
        "{e}"
    );
    assert!(
        !e.message().contains("also tried"),
        "never tried over plain http: {e}"
    );
    assert_readable(&e);
    // The TLS registry with its CA configured works; a host without it is not trusted.
    assert_eq!(
        pull(&c, &format!("{}/app:1", tls.addr), None)
            .await
            .unwrap(),
        img.id()
    );
    let other = Throttle::start(&tls.addr, 0);
    let e = pull(&c, &format!("{}/app:1", other.addr), None)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e}");
    assert!(
        e.message().contains("not trusted") && e.message().contains("ca_file"),
        "{e}"
    );
    assert_readable(&e);
}

/// A registry whose one layer is big enough that a throttled pull takes seconds.
async fn slow_setup(
    mib: usize,
    extra_config: &str,
) -> (Registry, Throttle, oci_build::Image, Crust) {
    let reg = Registry::start(Auth::None);
    let big = oci_build::noise(7, mib << 20);
    let img = image(
        &[
            (oci_build::tar(&busybox_layer()), Comp::Gzip),
            (oci_build::tar(&[file("big", &big)]), Comp::Gzip),
        ],
        json!({}),
        "amd64",
    );
    reg.push("slow", "1", &img).await;
    let throttle = Throttle::start(&reg.addr, 1 << 20);
    let c = Crust::start(&mirror_config("slow.test", &throttle.addr, extra_config));
    (reg, throttle, img, c)
}

/// Starts pulling `image` on its own connection; the handle yields PullImage's answer.
fn spawn_pull(
    c: &Crust,
    image: &'static str,
) -> tokio::task::JoinHandle<Result<String, tonic::Status>> {
    let socket = c.socket();
    tokio::spawn(async move {
        let mut client =
            pb::image_service_client::ImageServiceClient::new(crust_daemon::connect(&socket).await);
        client
            .pull_image(pb::PullImageRequest {
                image: spec(image),
                ..Default::default()
            })
            .await
            .map(|r| r.into_inner().image_ref)
    })
}

/// Waits until a download has written something under `ingest/`.
async fn wait_for_partial_download(c: &Crust) -> u64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let partial: u64 = std::fs::read_dir(c.root().join("images/ingest"))
            .unwrap()
            .flatten()
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .max()
            .unwrap_or(0);
        if partial > 256 << 10 {
            return partial;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no download started: {}",
            c.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_mid_download_recovers_and_pulls_again() {
    let (_reg, throttle, img, mut c) = slow_setup(6, "").await;
    let r = "slow.test/slow:1";
    let pulling = spawn_pull(&c, r);
    wait_for_partial_download(&c).await;
    c.kill9();
    assert!(
        pulling.await.unwrap().is_err(),
        "the pull died with the daemon"
    );
    let partials = std::fs::read_dir(c.root().join("images/ingest"))
        .unwrap()
        .count();
    assert!(partials > 0, "a partial download was on disk when it died");

    throttle.set_rate(0);
    c.restart();
    assert_store_clean(&c);
    assert!(list(&c).await.is_empty(), "nothing half-pulled is listed");
    assert_eq!(pull(&c, r, None).await.unwrap(), img.id());
    let lower = lowerdirs(&c, r).await;
    assert_eq!(
        std::fs::read(lower[0].join("big")).unwrap(),
        oci_build::noise(7, 6 << 20)
    );
    assert_store_clean(&c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_list_and_remove_answer_during_a_pull() {
    let (reg, throttle, img, c) = slow_setup(4, "").await;
    // A stored image sharing the slow image's base layer.
    let small = image(
        &[(oci_build::tar(&busybox_layer()), Comp::Gzip)],
        json!({"Cmd": ["small"]}),
        "amd64",
    );
    reg.push("small", "1", &small).await;
    throttle.set_rate(0);
    pull(&c, "slow.test/small:1", None).await.unwrap();
    throttle.set_rate(1 << 20);

    let r = "slow.test/slow:1";
    let pulling = spawn_pull(&c, r);
    wait_for_partial_download(&c).await;
    let t = std::time::Instant::now();
    assert_eq!(list(&c).await.len(), 1);
    assert!(status(&c, "slow.test/small:1", false).await.image.is_some());
    assert!(status(&c, r, false).await.image.is_none(), "not stored yet");
    assert!(
        t.elapsed() < std::time::Duration::from_millis(500),
        "reads waited for the pull: {:?}",
        t.elapsed()
    );
    // Removing the image being pulled (not stored yet) and the one whose layer it shares.
    remove(&c, r).await;
    remove(&c, "slow.test/small:1").await;
    throttle.set_rate(0);
    assert_eq!(pulling.await.unwrap().unwrap(), img.id());
    let listed = list(&c).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, img.id());
    for l in lowerdirs(&c, r).await {
        assert!(l.is_dir(), "layer {} kept", l.display());
    }
    assert_eq!(
        std::fs::read(lowerdirs(&c, r).await[1].join("bin/busybox")).unwrap(),
        std::fs::read("/bin/busybox").unwrap(),
        "the shared base layer survived the removal of the other image"
    );
    // Every blob the record names is present.
    let info: serde_json::Value =
        serde_json::from_str(&status(&c, r, true).await.info["info"]).unwrap();
    let manifest = info["manifest"].as_str().unwrap();
    assert!(
        c.root()
            .join("images/blobs/sha256")
            .join(&manifest[7..])
            .is_file()
    );
    assert_store_clean(&c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_that_stops_mid_blob_aborts_the_pull() {
    let (_reg, throttle, img, c) = slow_setup(4, "[image]\npull_progress_timeout_secs = 2\n").await;
    let r = "slow.test/slow:1";
    let pulling = spawn_pull(&c, r);
    wait_for_partial_download(&c).await;
    throttle.pause(true);
    let t = std::time::Instant::now();
    let e = pulling.await.unwrap().unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e}");
    assert!(e.message().contains("no progress for 2s"), "{e}");
    assert!(t.elapsed() < std::time::Duration::from_secs(10));
    assert_readable(&e);
    assert_store_clean(&c);
    throttle.pause(false);
    throttle.set_rate(0);
    assert_eq!(pull(&c, r, None).await.unwrap(), img.id());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_the_client_gave_up_on_still_lands_in_the_store() {
    // kubelet cancels a pull at its deadline and retries later; the download must not be lost.
    let (_reg, throttle, img, c) = slow_setup(4, "").await;
    let r = "slow.test/slow:1";
    let pulling = spawn_pull(&c, r);
    wait_for_partial_download(&c).await;
    pulling.abort();
    assert!(pulling.await.is_err(), "the client went away mid-download");
    throttle.set_rate(0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while status(&c, r, false).await.image.is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the cancelled pull never completed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(status(&c, r, false).await.image.unwrap().id, img.id());
    // The retry finds it stored.
    assert_eq!(pull(&c, r, None).await.unwrap(), img.id());
    assert_store_clean(&c);
}
