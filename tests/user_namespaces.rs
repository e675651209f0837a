//! Pods in user namespaces (`hostUsers: false`) against the real daemon and kernel: the pod's
//! root is an unprivileged range of host ids, everywhere a process of the pod can be (its own
//! process, an exec, a streamed exec), its files appear as its own while the node stores them
//! under the range, volumes with mappings are id-mapped, and the pod lives through a daemon
//! kill and leaves nothing behind.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::forward::{crictl_forward, echo_in_netns, round_trip};
use common::workload::Env;
use common::*;
use crust::cri::pb;
use tonic::Code;

/// The pod's range: container ids 0..65536 are host ids 1_000_000.. (kubelet allocates
/// multiples of 65536; critest uses 1000 and 100000: nothing may assume either).
const HOST: u32 = 1_000_000;
const SIZE: u32 = 65536;

fn mapping(host: u32) -> Vec<pb::IdMapping> {
    vec![pb::IdMapping {
        container_id: 0,
        host_id: host,
        length: SIZE,
    }]
}

fn userns(host: u32) -> pb::UserNamespace {
    pb::UserNamespace {
        mode: pb::NamespaceMode::Pod as i32,
        uids: mapping(host),
        gids: mapping(host),
    }
}

/// A pod as kubelet makes one with `hostUsers: false`: its own network, IPC and user
/// namespaces, a PID namespace per container, and a network sysctl.
fn userns_pod_config(e: &Env, name: &str) -> pb::PodSandboxConfig {
    let mut config = pod_config(name);
    with_namespaces(
        &mut config,
        pb::NamespaceMode::Pod,
        pb::NamespaceMode::Container,
        pb::NamespaceMode::Pod,
    );
    let linux = config.linux.as_mut().unwrap();
    linux
        .sysctls
        .insert("net.ipv4.ip_local_port_range".into(), "33000 44000".into());
    let sc = linux.security_context.as_mut().unwrap();
    sc.namespace_options.as_mut().unwrap().userns_options = Some(userns(HOST));
    config.log_directory = e.d.dir.join("logs").join(name).display().to_string();
    config
}

async fn userns_pod(e: &mut Env, name: &str) -> (String, pb::PodSandboxConfig) {
    let config = userns_pod_config(e, name);
    let id = run_pod(&mut e.c, config.clone()).await;
    (id, config)
}

/// A container of a user namespace pod, as kubelet asks for one: the pod's namespace options
/// repeated, the maps on every mount.
fn userns_container(e: &Env, name: &str, cmd: &[&str]) -> pb::ContainerConfig {
    let mut config = e.config(name, cmd);
    let sc = config.linux.as_mut().unwrap().security_context.as_mut();
    let ns = sc.unwrap().namespace_options.as_mut().unwrap();
    ns.userns_options = Some(userns(HOST));
    config
}

fn volume(host: &Path, at: &str, host_id: Option<u32>) -> pb::Mount {
    pb::Mount {
        container_path: at.into(),
        host_path: host.display().to_string(),
        uid_mappings: host_id.map(mapping).unwrap_or_default(),
        gid_mappings: host_id.map(mapping).unwrap_or_default(),
        ..Default::default()
    }
}

async fn pid_of(e: &mut Env, id: &str) -> u32 {
    e.info(id).await["pid"].as_u64().unwrap() as u32
}

/// The host ids a process runs as (real, effective, saved, fs), from its status.
fn host_ids(pid: u32, key: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(key)).unwrap();
    line[key.len()..]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// What a map file says, in one line (`0 1000000 65536`).
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[tokio::test]
async fn a_pod_s_root_is_an_unprivileged_range_of_host_ids() {
    let mut e = Env::start().await;
    // Every handler says so, as kubelet requires before it sends such a pod.
    let status =
        e.c.status(pb::StatusRequest { verbose: false })
            .await
            .unwrap()
            .into_inner();
    assert!(!status.runtime_handlers.is_empty());
    for h in &status.runtime_handlers {
        assert!(h.features.unwrap().user_namespaces, "handler {:?}", h.name);
    }
    let pod = userns_pod(&mut e, "uns").await;
    let script = "cat /proc/self/uid_map /proc/self/gid_map; echo made > /made; \
                  mkdir /data/sub; exec sleep 1000";
    let id = e
        .run(&pod, userns_container(&e, "main", &["sh", "-c", script]))
        .await;
    let want = format!("0 {HOST} {SIZE}");
    let pid = pid_of(&mut e, &id).await;
    // The container's own process: root inside, HOST outside, with the pod's maps.
    assert_eq!(
        host_ids(pid, "Uid:"),
        format!("{HOST} {HOST} {HOST} {HOST}")
    );
    assert_eq!(
        host_ids(pid, "Gid:"),
        format!("{HOST} {HOST} {HOST} {HOST}")
    );
    wait_for_log(&e, &pod, "main", &format!("stdout F {want}"), 2).await;

    // An exec joins the same user namespace (libcontainer's tenant builder did not: see
    // third_party/libcontainer/CRUST.md) and is root there, not on the node.
    let maps = e
        .sh(&id, "cat /proc/self/uid_map /proc/self/gid_map; id -u")
        .await;
    assert_eq!(one_line(&maps), format!("{want} {want} 0"), "exec: {maps}");
    let out = sh(
        &tools::crictl().display().to_string(),
        &[
            "--runtime-endpoint",
            &format!("unix://{}", e.d.socket.display()),
            "exec",
            &id,
            "cat",
            "/proc/self/uid_map",
        ],
    );
    assert_eq!(one_line(&out), want, "crictl exec");

    // Its files are its root's inside; what it writes is stored under HOST on the node, and
    // the image's layers stay the node root's.
    let owners = e
        .sh(
            &id,
            "stat -c %u:%g / /bin/busybox /made /data/sub /etc/hosts /etc/hostname \
             /etc/resolv.conf /dev/shm",
        )
        .await;
    assert!(
        owners.lines().all(|l| l == "0:0"),
        "owners inside:\n{owners}"
    );
    // /dev is the pod's root's tmpfs, made as runc makes it: on a kernel with /proc/kcore,
    // the link to it is /dev/core (made inside, as the node's root cannot rename in that
    // tmpfs on every kernel), and there is no /dev/kcore.
    let dev = e.sh(&id, "ls /dev; readlink /dev/core || true").await;
    let kcore = Path::new("/proc/kcore").exists();
    assert_eq!(dev.lines().any(|l| l == "core"), kcore, "/dev: {dev}");
    assert_eq!(
        dev.lines().any(|l| l == "/proc/kcore"),
        kcore,
        "/dev: {dev}"
    );
    assert!(!dev.lines().any(|l| l == "kcore"), "/dev: {dev}");
    let upper =
        PathBuf::from(e.info(&id).await["rootfs"].as_str().unwrap()).with_file_name("upper");
    for made in ["made", "data/sub"] {
        let m = std::fs::metadata(upper.join(made)).unwrap();
        assert_eq!(
            (m.uid(), m.gid()),
            (HOST, HOST),
            "{made} in the writable layer"
        );
    }
    // The pod's root may change its own files, /dev/shm and its network's sysctls.
    e.sh(
        &id,
        "echo 10.9.9.9 extra >> /etc/hosts && touch /dev/shm/x && hostname",
    )
    .await;
    let range = e
        .sh(&id, "cat /proc/sys/net/ipv4/ip_local_port_range")
        .await;
    assert_eq!(one_line(&range), "33000 44000");
    // ... but not the node's: the kernel's own files are nobody's to it.
    let r = e
        .exec(&id, &["sh", "-c", "echo 1 > /proc/sys/kernel/ctrl-alt-del"])
        .await;
    assert_ne!(r.exit_code, 0, "the pod's root wrote a node sysctl");

    // The same image in a pod of the node's user namespace is still owned by root.
    let plain = e.pod("plain").await;
    let other = e.run(&plain, e.config("plain", &["sleep", "1000"])).await;
    assert_eq!(
        e.sh(&other, "stat -c %u:%g /bin/busybox").await.trim(),
        "0:0"
    );
    assert_eq!(host_ids(pid_of(&mut e, &other).await, "Uid:"), "0 0 0 0");

    // Statistics come from its cgroup as for any container.
    let stats =
        e.c.container_stats(pb::ContainerStatsRequest {
            container_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .stats
        .unwrap();
    assert!(stats.memory.unwrap().working_set_bytes.unwrap().value > 0);
    stop_pod(&mut e.c, &plain.0).await;
    remove_pod(&mut e.c, &plain.0).await;
    e.end_pod(&pod.0).await;
}

/// `procMount: Unmasked`, as kubelet sends it (the API allows it only with `hostUsers: false`):
/// empty masked and read-only path lists, meaning none. The container sees /proc whole, nothing
/// masked or made read-only under it, and a nested runtime in it (a user and a PID namespace of
/// its own, as rootless BuildKit makes them) can mount a procfs, which the kernel allows only
/// over a /proc with nothing mounted on it. A container of the same pod with kubelet's
/// `Default` lists gets neither.
#[tokio::test]
async fn proc_mount_unmasked_leaves_proc_whole_for_a_nested_runtime() {
    let mut e = Env::start().await;
    let pod = userns_pod(&mut e, "unmasked").await;
    let mut config = userns_container(&e, "unmasked", &["sleep", "1000"]);
    let sc = config.linux.as_mut().unwrap().security_context.as_mut();
    let sc = sc.unwrap();
    sc.masked_paths.clear();
    sc.readonly_paths.clear();
    let unmasked = e.run(&pod, config).await;
    let default = userns_container(&e, "default", &["sleep", "1000"]);
    let default = e.run(&pod, default).await;

    let under_proc = "cut -d' ' -f5 /proc/self/mountinfo | grep '^/proc/' || true";
    assert_eq!(e.sh(&unmasked, under_proc).await, "", "mounts under /proc");
    let covered = e.sh(&default, under_proc).await;
    // A masked path the kernel lacks (/proc/kcore on some) is left alone: these two it has.
    for path in ["/proc/keys", "/proc/sys"] {
        assert!(covered.lines().any(|l| l == path), "{path}: {covered}");
    }

    let nested = "unshare -r -p -f --mount-proc sh -c 'echo $$; test -d /proc/1/ns'";
    assert_eq!(e.sh(&unmasked, nested).await, "1\n", "the nested pid 1");
    let r = e.exec(&default, &["sh", "-c", nested]).await;
    assert_ne!(
        r.exit_code, 0,
        "a procfs mounted over a masked /proc: {r:?}"
    );
    e.end_pod(&pod.0).await;
}

/// Waits until the container's log holds `n` records equal to `want`, spaces aside.
async fn wait_for_log(
    e: &Env,
    pod: &(String, pb::PodSandboxConfig),
    name: &str,
    want: &str,
    n: usize,
) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let got = e.log_records(pod, name);
        if got.iter().filter(|r| one_line(r) == want).count() >= n {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "log of {name} lacks {n} x {want:?}: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The kernel release as (major, minor).
fn kernel() -> (u32, u32) {
    let release = nix::sys::utsname::uname().unwrap();
    let release = release.release().to_string_lossy().into_owned();
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next().unwrap().parse().unwrap();
    (major, parts.next().unwrap().parse().unwrap())
}

#[tokio::test]
async fn volumes_with_the_pod_s_mappings_are_id_mapped() {
    let mut e = Env::start().await;
    let pod = userns_pod(&mut e, "vols").await;
    // A volume as kubelet leaves one on the node: the node's root owns it, and a file of an
    // application user (1000) beside it.
    let vol = e.d.dir.join("vol");
    std::fs::create_dir_all(&vol).unwrap();
    std::fs::write(vol.join("root-file"), "r").unwrap();
    std::fs::write(vol.join("app-file"), "a").unwrap();
    std::os::unix::fs::chown(vol.join("app-file"), Some(1000), Some(1000)).unwrap();
    // A tmpfs, as kubelet's projected and memory-backed volumes are.
    let mem = e.d.dir.join("mem");
    std::fs::create_dir_all(&mem).unwrap();
    sh(
        "mount",
        &[
            "-t",
            "tmpfs",
            "-o",
            "size=1m",
            "tmpfs",
            mem.to_str().unwrap(),
        ],
    );
    std::fs::write(mem.join("token"), "t").unwrap();

    let mut config = userns_container(&e, "vols", &["sleep", "1000"]);
    config.mounts = vec![
        volume(&vol, "/vol", Some(HOST)),
        volume(&vol, "/plain", None),
    ];
    let id = e.run(&pod, config).await;
    let owners = e
        .sh(
            &id,
            "stat -c %n=%u:%g /vol /vol/root-file /vol/app-file /plain/root-file",
        )
        .await;
    assert_eq!(
        one_line(&owners),
        "/vol=0:0 /vol/root-file=0:0 /vol/app-file=1000:1000 /plain/root-file=65534:65534",
        "an id-mapped volume shows the node's ids as the pod's; a plain one, as nobody's"
    );
    // What the pod's root writes there is stored under the ids it has inside.
    e.sh(
        &id,
        "echo w > /vol/written && chown 1000:1000 /vol/root-file",
    )
    .await;
    let m = std::fs::metadata(vol.join("written")).unwrap();
    assert_eq!((m.uid(), m.gid()), (0, 0));
    assert_eq!(
        std::fs::metadata(vol.join("root-file")).unwrap().uid(),
        1000
    );
    // Without the mapping the node's files are not the pod's to change.
    let r = e
        .exec(&id, &["sh", "-c", "echo x > /plain/root-file"])
        .await;
    assert_ne!(r.exit_code, 0, "the pod's root wrote a node root's file");

    // A tmpfs with mappings: id-mapped since Linux 6.3; before, a clear refusal that names the
    // mount and the kernel, never a container that sees the wrong owners.
    let mut config = userns_container(&e, "mem", &["sleep", "1000"]);
    config.mounts = vec![volume(&mem, "/var/run/secrets/token", Some(HOST))];
    let made = e.create(&pod, config).await;
    if kernel() >= (6, 3) {
        let mem_id = made.unwrap();
        e.c.start_container(pb::StartContainerRequest {
            container_id: mem_id.clone(),
        })
        .await
        .unwrap();
        let owner = e
            .sh(&mem_id, "stat -c %u:%g /var/run/secrets/token/token")
            .await;
        assert_eq!(owner.trim(), "0:0");
    } else {
        let err = made.unwrap_err();
        assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
        for part in [
            "/var/run/secrets/token",
            "tmpfs needs Linux 6.3",
            "Linux 6.",
        ] {
            assert!(err.message().contains(part), "{part:?} in {err:?}");
        }
    }

    // Maps that are not the pod's are refused, on a mount and on the container.
    let mut config = userns_container(&e, "other-maps", &["true"]);
    config.mounts = vec![volume(&vol, "/vol", Some(HOST + SIZE))];
    let err = e.create(&pod, config).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("mount /vol"), "{err:?}");
    let mut config = userns_container(&e, "other-ns", &["true"]);
    let sc = config.linux.as_mut().unwrap().security_context.as_mut();
    sc.unwrap()
        .namespace_options
        .as_mut()
        .unwrap()
        .userns_options = Some(userns(HOST + SIZE));
    let err = e.create(&pod, config).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("userns_options"), "{err:?}");

    e.end_pod(&pod.0).await;
    assert!(
        !e.d.mounts().iter().any(|m| m.contains("/idmap/")),
        "id-mapped mounts left: {:?}",
        e.d.mounts()
    );
    sh("umount", &[mem.to_str().unwrap()]);
    // The volumes themselves are the node's: removal leaves them and their contents.
    assert!(vol.join("written").exists());
}

#[tokio::test]
async fn the_pod_lives_through_a_daemon_kill_and_leaves_nothing() {
    let mut e = Env::start().await;
    // One PID namespace for the pod (shareProcessNamespace), created in its user namespace.
    let mut config = userns_pod_config(&e, "kept");
    let sc = config.linux.as_mut().unwrap().security_context.as_mut();
    sc.unwrap().namespace_options.as_mut().unwrap().pid = pb::NamespaceMode::Pod as i32;
    let pod = (run_pod(&mut e.c, config.clone()).await, config);
    let mut main = userns_container(&e, "main", &["sleep", "1000"]);
    let sc = main.linux.as_mut().unwrap().security_context.as_mut();
    sc.unwrap().namespace_options.as_mut().unwrap().pid = pb::NamespaceMode::Pod as i32;
    let id = e.run(&pod, main).await;
    let pid = pid_of(&mut e, &id).await;
    // The pod's PID 1 is crust's init, started inside the pod's user namespace: the pod's
    // root can neither kill it (the kernel drops a SIGKILL its namespace sends its init) nor
    // look through it. Where AppArmor confines the container, its profile refuses the
    // signal outright (EPERM: the init is not of its profile); elsewhere the kill "succeeds"
    // and the kernel drops it. Either way the init lives on.
    let kill = e.exec(&id, &["sh", "-c", "kill -9 1"]).await;
    let said = String::from_utf8_lossy(&kill.stderr).into_owned();
    assert!(
        kill.exit_code == 0 || said.contains("Permission denied"),
        "kill -9 1: {kill:?}"
    );
    assert_eq!(e.sh(&id, "cat /proc/1/comm").await.trim(), "crust-pod-init");
    for probe in ["ls /proc/1/root/", "cat /proc/1/environ"] {
        let r = e.exec(&id, &["sh", "-c", probe]).await;
        assert_ne!(r.exit_code, 0, "`{probe}` in the pod reached its init");
    }
    e.d.kill9();
    e.relaunch().await;
    let (status, info) = status(&mut e.c, &pod.0).await;
    assert_eq!(status.state, pb::PodSandboxState::SandboxReady as i32);
    assert!(info["namespaces"]["user"].is_string(), "{info}");
    assert_eq!(pid_of(&mut e, &id).await, pid, "the same process");
    let maps = e.sh(&id, "cat /proc/self/uid_map").await;
    assert_eq!(one_line(&maps), format!("0 {HOST} {SIZE}"));

    // Port-forward reaches the pod's network namespace, owned by the pod's user namespace.
    let pin = PathBuf::from(info["namespaces"]["net"].as_str().unwrap());
    let remote = echo_in_netns(pin);
    let local = free_port();
    let _forward = crictl_forward(&e.d, &pod.0, "spdy", local, remote);
    round_trip(local, b"through the pod's own network");

    // An OOM kill is seen and named as for any container.
    let mut hog = e.memory_hog("hog");
    let ns = hog
        .linux
        .as_mut()
        .unwrap()
        .security_context
        .as_mut()
        .unwrap();
    ns.namespace_options.as_mut().unwrap().userns_options = Some(userns(HOST));
    let hog = e.run(&pod, hog).await;
    let s = e.wait_exit(&hog, Duration::from_secs(60)).await;
    assert_eq!(s.reason, "OOMKilled", "{s:?}");

    e.stop(&id, 0).await;
    e.end_pod(&pod.0).await;
    assert!(exited(pid as i32), "the container's process is gone");
}

/// An image's declared volume (`image_volumes = "bind"`, the default) in such a pod: the copy
/// is stored under the pod's host ids, so the pod sees the image's owners and its root writes
/// there, and a volume the image has no content for belongs to the pod's root.
#[tokio::test]
async fn declared_volumes_of_a_pod_are_stored_under_its_range() {
    let mut e = Env::start().await;
    let extra = [
        oci_build::Node::Dir {
            path: "data".into(),
            mode: 0o750,
            uid: 1000,
            gid: 1000,
        },
        oci_build::file("data/seed", b"seed"),
    ];
    let volumes = serde_json::json!({"Cmd": ["sh"], "Volumes": {"/data": {}, "/cache": {}}});
    let image = e.pull_image_with("volumed", &extra, volumes).await;
    let pod = userns_pod(&mut e, "declared").await;
    let mut config = userns_container(&e, "db", &["sleep", "1000"]);
    config.image.as_mut().unwrap().image = image;
    let sc = config.linux.as_mut().unwrap().security_context.as_mut();
    sc.unwrap().readonly_rootfs = true;
    let id = e.run(&pod, config).await;
    let seen = e
        .sh(&id, "stat -c '%u %g %a' /data /data/seed /cache")
        .await;
    assert_eq!(seen, "1000 1000 750\n0 0 644\n0 0 755\n");
    e.sh(&id, "touch /data/x /cache/y").await;
    let layer = e.d.root.join("containers").join(&id).join("declared");
    let owner = |p: &str| {
        let m = std::fs::metadata(layer.join(p)).unwrap();
        (m.uid(), m.gid())
    };
    assert_eq!(owner("1"), (HOST + 1000, HOST + 1000));
    for p in ["1/seed", "1/x", "0", "0/y"] {
        assert_eq!(owner(p), (HOST, HOST), "{p}");
    }
    e.stop(&id, 0).await;
    e.end_pod(&pod.0).await;
}

#[tokio::test]
async fn a_pod_in_a_user_namespace_may_use_the_nodes_network() {
    let mut e = Env::start().await;
    let features =
        e.c.status(pb::StatusRequest { verbose: false })
            .await
            .unwrap()
            .into_inner()
            .features
            .unwrap();
    assert!(features.user_namespaces_host_network, "{features:?}");
    let mut config = userns_pod_config(&e, "hostnet");
    config.linux.as_mut().unwrap().sysctls.clear();
    let sc = config.linux.as_mut().unwrap().security_context.as_mut();
    sc.unwrap().namespace_options.as_mut().unwrap().network = pb::NamespaceMode::Node as i32;
    let id = run_pod(&mut e.c, config.clone()).await;
    let pod = (id, config);
    let mut c = userns_container(&e, "app", &["sleep", "3600"]);
    c.linux
        .as_mut()
        .unwrap()
        .security_context
        .as_mut()
        .unwrap()
        .namespace_options
        .as_mut()
        .unwrap()
        .network = pb::NamespaceMode::Node as i32;
    let cid = e.run(&pod, c).await;
    let pid = pid_of(&mut e, &cid).await;
    // Its own user namespace, the node's network.
    assert_eq!(
        host_ids(pid, "Uid:"),
        format!("{HOST} {HOST} {HOST} {HOST}")
    );
    let ns = |p: &str| std::fs::read_link(p).unwrap();
    assert_eq!(
        ns(&format!("/proc/{pid}/ns/net")),
        ns("/proc/self/ns/net"),
        "the container is not on the node's network"
    );
    assert_ne!(
        ns(&format!("/proc/{pid}/ns/user")),
        ns("/proc/self/ns/user")
    );
    // /sys is the node's (sysfs cannot be mounted without owning the network namespace),
    // read-only: it shows the node's interfaces, each with the node's index. Other tests add
    // and remove bridges meanwhile, so the interfaces there both before and after are compared.
    let host = || -> std::collections::BTreeMap<String, String> {
        std::fs::read_dir("/sys/class/net")
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                let index =
                    std::fs::read_to_string(format!("/sys/class/net/{name}/ifindex")).ok()?;
                Some((name, index.trim().to_owned()))
            })
            .collect()
    };
    let before = host();
    let listed = e
        .sh(
            &cid,
            "for i in /sys/class/net/*; do echo \"${i##*/} $(cat $i/ifindex)\"; done",
        )
        .await;
    let after = host();
    let seen: std::collections::BTreeMap<String, String> = listed
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(n, i)| (n.to_owned(), i.to_owned()))
        .collect();
    let stable: Vec<(&String, &String)> = before
        .iter()
        .filter(|(n, i)| after.get(*n) == Some(*i) && n.as_str() != "lo")
        .collect();
    assert!(
        !stable.is_empty(),
        "the node has no interface but lo: {before:?}"
    );
    for (name, index) in stable {
        assert_eq!(
            seen.get(name),
            Some(index),
            "{name}: container sees {seen:?}"
        );
    }
    let out = e
        .exec(&cid, &["sh", "-c", "echo 1 > /sys/class/net/lo/mtu"])
        .await;
    assert_ne!(out.exit_code, 0, "/sys is writable");
    // Its root holds no capability over the node's network.
    let out = e
        .exec(
            &cid,
            &["sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"],
        )
        .await;
    assert_ne!(out.exit_code, 0, "the pod changed the node's network");
    e.remove_pod_leaving_nothing(&pod.0).await;
}

#[tokio::test]
async fn requests_that_break_a_user_namespace_are_refused() {
    let mut e = Env::start().await;
    // Sharing a namespace of the node's would leave it owned by the node's user namespace.
    let node = pb::NamespaceMode::Node as i32;
    type Set = fn(&mut pb::NamespaceOption, i32);
    let modes: [(&str, Set); 2] = [("pid", |o, m| o.pid = m), ("ipc", |o, m| o.ipc = m)];
    for (kind, set) in modes {
        let mut config = userns_pod_config(&e, &format!("node-{kind}"));
        let sc = config.linux.as_mut().unwrap().security_context.as_mut();
        set(sc.unwrap().namespace_options.as_mut().unwrap(), node);
        let err = e.c.run_pod_sandbox(run_request(config)).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(
            err.message().contains(&format!("node's {kind} namespace")),
            "{err:?}"
        );
    }
    // A container cannot ask for a user namespace its pod does not have.
    let pod = e.pod("plain").await;
    let err = e
        .create(&pod, userns_container(&e, "alone", &["true"]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    let mut config = e.config("mapped", &["true"]);
    config.mounts = vec![volume(&e.d.dir, "/vol", Some(HOST))];
    let err = e.create(&pod, config).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("has none"), "{err:?}");
    // Nothing of the refused pods is left.
    e.end_pod(&pod.0).await;
}

#[tokio::test]
async fn a_node_that_cannot_give_user_namespaces_says_why() {
    use std::os::unix::fs::PermissionsExt;
    // The daemon's directories under one that only its owner may pass through: the pod's root,
    // nobody on the node, could not reach its container's files.
    let mut e = Env::start_with(|d| {
        std::fs::set_permissions(&d.dir, std::fs::Permissions::from_mode(0o700)).unwrap()
    })
    .await;
    let status =
        e.c.status(pb::StatusRequest { verbose: false })
            .await
            .unwrap()
            .into_inner();
    for h in &status.runtime_handlers {
        assert!(!h.features.unwrap().user_namespaces, "handler {:?}", h.name);
    }
    let config = userns_pod_config(&e, "refused");
    let err = e.c.run_pod_sandbox(run_request(config)).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    let dir = e.d.dir.display().to_string();
    for part in ["userns_options", &dir, "mode 700"] {
        assert!(err.message().contains(part), "{part:?} in {err:?}");
    }
    // Pods in the node's user namespace run as before.
    let pod = e.pod("plain").await;
    e.end_pod(&pod.0).await;
}
