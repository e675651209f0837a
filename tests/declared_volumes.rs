//! The volumes an image's config declares (`Volumes`, a Dockerfile's `VOLUME`), against the real
//! daemon: with `image_volumes = "bind"` (the default, containerd's) each is a bound copy of the
//! image's content there, writable under a read-only root, kept out of the writable layer and
//! gone with the container (or with a create that failed); a kubelet mount at the same path wins.
//! With `"mkdir"` (CRI-O's default) the path is the root filesystem's, read-only under a
//! read-only root; `crust config dump` shows the key with the file that set it.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;

use common::oci_build::Node;
use common::workload::Env;
use crust::cri::pb;
use serde_json::json;

/// An image declaring `/data` (which a layer fills: a directory of user 1000, mode 0750, and a
/// seed file, mode 0640) and `/cache` (which no layer has).
async fn volumed_image(e: &Env) -> String {
    let extra = [
        Node::Dir {
            path: "data".into(),
            mode: 0o750,
            uid: 1000,
            gid: 1000,
        },
        Node::File {
            path: "data/seed".into(),
            data: b"seeded by the image\n".to_vec(),
            mode: 0o640,
            uid: 1000,
            gid: 1000,
            xattrs: vec![],
        },
    ];
    let config = json!({
        "Env": ["PATH=/bin"],
        "Cmd": ["sh"],
        "Volumes": {"/data": {}, "/cache": {}},
    });
    e.pull_image_with("volumed", &extra, config).await
}

/// A container of `image` running `sleep`, with a read-only root filesystem.
fn read_only(e: &Env, name: &str, image: &str) -> pb::ContainerConfig {
    let mut config = e.config(name, &["sleep", "600"]);
    config.image.as_mut().unwrap().image = image.into();
    let linux = config.linux.as_mut().unwrap();
    linux.security_context.as_mut().unwrap().readonly_rootfs = true;
    config
}

/// The mount points of the container's own mount namespace, from its mountinfo.
async fn mount_points(e: &mut Env, id: &str) -> Vec<String> {
    let info = e.sh(id, "cat /proc/self/mountinfo").await;
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(str::to_owned)
        .collect()
}

/// The container's layer directory on the node.
fn layer_dir(e: &Env, id: &str) -> PathBuf {
    e.d.root.join("containers").join(id)
}

#[tokio::test]
async fn bind_gives_each_declared_volume_a_writable_copy_that_goes_with_the_container() {
    let mut e = Env::start().await;
    let image = volumed_image(&e).await;
    let pod = e.pod("declared").await;
    let id = e.run(&pod, read_only(&e, "db", &image)).await;

    // The image's content, with its owner and modes; writable although the root is not.
    assert_eq!(e.sh(&id, "cat /data/seed").await, "seeded by the image\n");
    let stat = e.sh(&id, "stat -c '%a %u %g' /data /data/seed").await;
    assert_eq!(stat, "750 1000 1000\n640 1000 1000\n");
    e.sh(&id, "echo written > /data/x && touch /cache/y").await;
    let r = e.exec(&id, &["touch", "/elsewhere"]).await;
    assert_ne!(r.exit_code, 0, "the root filesystem stays read-only");
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("Read-only file system"),
        "{r:?}"
    );
    let mounts = mount_points(&mut e, &id).await;
    for at in ["/data", "/cache"] {
        assert_eq!(
            mounts.iter().filter(|m| *m == at).count(),
            1,
            "{at} is a mount point: {mounts:?}"
        );
    }

    // The writes are in the container's copies (the image's volumes in path order: /cache,
    // /data), not in its writable layer.
    let layer = layer_dir(&e, &id);
    assert!(
        !layer.join("upper/data/x").exists(),
        "in the writable layer"
    );
    let copy = layer.join("declared/1");
    assert_eq!(std::fs::read(copy.join("x")).unwrap(), b"written\n");
    assert!(layer.join("declared/0/y").exists());
    // The image itself is untouched: a second container sees only the seed.
    let other = e.run(&pod, read_only(&e, "other", &image)).await;
    assert_eq!(e.sh(&other, "ls /data").await, "seed\n");

    e.stop(&id, 0).await;
    e.remove(&id).await;
    e.wait_reclaimed(&id).await;
    assert!(!layer.exists(), "the copies went with the container");
    e.end_pod(&pod.0).await;
}

#[tokio::test]
async fn a_kubelet_mount_at_a_declared_volume_wins_and_a_failed_create_leaves_no_copy() {
    let mut e = Env::start().await;
    let image = volumed_image(&e).await;
    let pod = e.pod("covered").await;
    let host = e.d.dir.join("kubelet-volume");
    std::fs::create_dir_all(&host).unwrap();
    std::fs::write(host.join("from-kubelet"), "k").unwrap();
    let mut config = read_only(&e, "covered", &image);
    config.mounts = vec![pb::Mount {
        container_path: "/data/".into(),
        host_path: host.display().to_string(),
        ..Default::default()
    }];
    let id = e.run(&pod, config).await;
    assert_eq!(e.sh(&id, "ls /data").await, "from-kubelet\n");
    let mounts = mount_points(&mut e, &id).await;
    assert_eq!(
        mounts.iter().filter(|m| *m == "/data").count(),
        1,
        "one mount at /data, kubelet's: {mounts:?}"
    );
    let copies = common::Daemon::entries(&layer_dir(&e, &id).join("declared"));
    assert_eq!(copies, ["0"], "only /cache has a copy");

    // A create that fails after the copies were made leaves none of them.
    let before: BTreeSet<String> = e.container_leftovers().into_iter().collect();
    let mut broken = read_only(&e, "broken", &image);
    broken.command = vec!["/no/such/binary".into()];
    let err = e.create(&pod, broken).await.unwrap_err();
    assert!(err.message().contains("no/such/binary"), "{err:?}");
    let after: BTreeSet<String> = e.container_leftovers().into_iter().collect();
    assert_eq!(before, after, "the failed create left something");
    e.end_pod(&pod.0).await;
}

#[tokio::test]
async fn mkdir_leaves_a_declared_volume_in_the_read_only_root_as_cri_o_does() {
    let mut e = Env::start_with(|d| {
        // Top-level keys go before the config's first table.
        let text = std::fs::read_to_string(&d.config).unwrap();
        std::fs::write(&d.config, format!("image_volumes = \"mkdir\"\n{text}")).unwrap();
    })
    .await;
    let dump = std::process::Command::new(env!("CARGO_BIN_EXE_crust"))
        .args(["config", "dump", "--config"])
        .arg(&e.d.config)
        .arg("--state")
        .arg(&e.d.state)
        .arg("--root")
        .arg(&e.d.root)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&dump.stdout);
    let line = shown.lines().find(|l| l.starts_with("image_volumes = "));
    assert!(
        line.is_some_and(|l| l.contains("\"mkdir\"") && l.contains("config.toml")),
        "the dump shows the key and its file: {shown}"
    );
    let image = volumed_image(&e).await;
    let pod = e.pod("mkdir").await;
    let id = e.run(&pod, read_only(&e, "db", &image)).await;
    assert_eq!(e.sh(&id, "cat /data/seed").await, "seeded by the image\n");
    e.sh(&id, "test -d /cache").await;
    for path in ["/data/x", "/cache/y"] {
        let r = e.exec(&id, &["touch", path]).await;
        assert_ne!(r.exit_code, 0, "{path} is in the read-only root");
        assert!(
            String::from_utf8_lossy(&r.stderr).contains("Read-only file system"),
            "{r:?}"
        );
    }
    let mounts = mount_points(&mut e, &id).await;
    assert!(
        !mounts.iter().any(|m| m == "/data" || m == "/cache"),
        "{mounts:?}"
    );
    assert!(!layer_dir(&e, &id).join("declared").exists());
    e.end_pod(&pod.0).await;
}
