//! What a container may do, seen from inside it: its user and groups, capabilities, seccomp,
//! read-only root, masked paths, mounts and their propagation, command/env/cwd, namespaces.

mod common;

use common::workload::Env;
use common::*;
use crust::cri::pb;

fn security(e: &mut pb::ContainerConfig) -> &mut pb::LinuxContainerSecurityContext {
    e.linux
        .get_or_insert_with(Default::default)
        .security_context
        .get_or_insert_with(Default::default)
}

#[tokio::test]
async fn command_args_env_cwd_and_users_are_as_asked() {
    let mut e = Env::start().await;
    let pod = e.pod("who").await;
    // args alone replace the image's Cmd (sh), keeping its Entrypoint (none).
    let mut config = e.config("who", &[]);
    config.args = vec!["sleep".into(), "600".into()];
    config.working_dir = "/tmp".into();
    config.envs = vec![
        pb::KeyValue {
            key: "GREETING".into(),
            value: b"hi there".to_vec(),
        },
        pb::KeyValue {
            key: "FROM_IMAGE".into(),
            value: b"overridden".to_vec(),
        },
    ];
    let id = e.run(&pod, config).await;
    assert_eq!(
        e.sh(&id, "cat /proc/1/cmdline | tr '\\0' ' '").await,
        "sleep 600 "
    );
    let env = e.sh(&id, "cat /proc/1/environ | tr '\\0' '\\n'").await;
    assert!(env.lines().any(|l| l == "GREETING=hi there"), "{env}");
    assert!(env.lines().any(|l| l == "FROM_IMAGE=overridden"), "{env}");
    assert!(
        env.lines().any(|l| l == "PATH=/bin"),
        "the image's PATH: {env}"
    );
    assert_eq!(e.sh(&id, "readlink /proc/1/cwd").await.trim(), "/tmp");
    assert_eq!(
        e.sh(&id, "id").await.trim(),
        "uid=0(root) gid=0(root) groups=0(root),10(wheel)"
    );

    // A user by name: its primary group and the image's memberships.
    let mut config = e.config("named", &["sleep", "600"]);
    security(&mut config).run_as_username = "app".into();
    let id = e.run(&pod, config).await;
    assert_eq!(
        e.sh(&id, "id").await.trim(),
        "uid=1000(app) gid=1000(app) groups=1000(app),3000(extra)"
    );
    // A uid and a group, plus supplemental groups; Strict drops the image's memberships.
    let mut config = e.config("numeric", &["sleep", "600"]);
    let sc = security(&mut config);
    sc.run_as_user = Some(pb::Int64Value { value: 1000 });
    sc.run_as_group = Some(pb::Int64Value { value: 2000 });
    sc.supplemental_groups = vec![4000];
    sc.supplemental_groups_policy = pb::SupplementalGroupsPolicy::Strict as i32;
    let id = e.run(&pod, config).await;
    assert_eq!(
        e.sh(&id, "id -u; id -g; id -G").await,
        "1000\n2000\n2000 4000\n"
    );
    let user = e.status(&id).await.user.unwrap().linux.unwrap();
    assert_eq!((user.uid, user.gid), (1000, 2000));
    assert!(user.supplemental_groups.contains(&4000));
    // The exec runs as the container's user too.
    assert_eq!(e.sh(&id, "id -u").await.trim(), "1000");
    // HOME as runc sets it: the passwd home of the uid, or / for a uid the image lacks.
    let home = "tr '\\0' '\\n' </proc/1/environ | grep ^HOME=; echo $HOME";
    assert_eq!(e.sh(&id, home).await, "HOME=/home/app\n/home/app\n");
    let mut config = e.config("stranger", &["sleep", "600"]);
    security(&mut config).run_as_user = Some(pb::Int64Value { value: 4242 });
    let id = e.run(&pod, config).await;
    assert_eq!(e.sh(&id, home).await, "HOME=/\n/\n");
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
}

/// A Secret's binary data as an env value (CRI carries values as bytes): the container starts,
/// and its process gets the value as containerd passes it, each byte that is not UTF-8
/// replaced by U+FFFD.
#[tokio::test]
async fn env_values_that_are_not_utf8_reach_the_process_as_containerd_passes_them() {
    let mut e = Env::start().await;
    let pod = e.pod("binary-env").await;
    let mut config = e.config("binary", &["sleep", "600"]);
    config.envs = vec![
        pb::KeyValue {
            key: "TOKEN".into(),
            value: b"\xffab\xe2\x82".to_vec(),
        },
        pb::KeyValue {
            key: "PLAIN".into(),
            value: "caf\u{e9}".into(),
        },
    ];
    let id = e.run(&pod, config).await;
    let r = e.exec(&id, &["cat", "/proc/1/environ"]).await;
    assert_eq!(r.exit_code, 0, "{r:?}");
    let env: Vec<&[u8]> = r.stdout.split(|b| *b == 0).collect();
    let token = "TOKEN=\u{fffd}ab\u{fffd}\u{fffd}".as_bytes();
    assert!(
        env.contains(&token),
        "{:?}",
        String::from_utf8_lossy(&r.stdout)
    );
    assert!(env.contains(&"PLAIN=caf\u{e9}".as_bytes()));
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
}

/// The effective capability set from /proc/self/status, as a hex mask.
async fn cap_eff(e: &mut Env, id: &str) -> u64 {
    let line = e.sh(id, "grep CapEff /proc/self/status").await;
    u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
}

#[tokio::test]
async fn capabilities_privileges_and_read_only_root() {
    let mut e = Env::start().await;
    let pod = e.pod("caps").await;
    let id = e.run(&pod, e.config("default", &["sleep", "600"])).await;
    // containerd's default set: CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID SETPCAP
    // NET_BIND_SERVICE NET_RAW SYS_CHROOT MKNOD AUDIT_WRITE SETFCAP.
    assert_eq!(cap_eff(&mut e, &id).await, 0xa80425fb);
    // Masked and read-only kernel paths: kubelet's lists for procMount Default.
    let r = e
        .exec(&id, &["sh", "-c", "cat /proc/kcore | head -c 1 | wc -c"])
        .await;
    assert_eq!(
        String::from_utf8_lossy(&r.stdout).trim(),
        "0",
        "/proc/kcore is masked"
    );
    let r = e
        .exec(&id, &["sh", "-c", "echo 1 > /proc/sys/vm/drop_caches"])
        .await;
    assert_ne!(r.exit_code, 0, "/proc/sys is read-only");

    let mut config = e.config("tuned", &["sleep", "600"]);
    security(&mut config).capabilities = Some(pb::Capability {
        add_capabilities: vec!["NET_ADMIN".into()],
        drop_capabilities: vec!["ALL".into()],
        ..Default::default()
    });
    let id = e.run(&pod, config).await;
    assert_eq!(cap_eff(&mut e, &id).await, 1 << 12, "only CAP_NET_ADMIN");

    let mut config = e.config("readonly", &["sleep", "600"]);
    security(&mut config).readonly_rootfs = true;
    let id = e.run(&pod, config).await;
    let r = e.exec(&id, &["touch", "/newfile"]).await;
    assert_ne!(r.exit_code, 0, "the root is read-only");
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("Read-only"),
        "{r:?}"
    );

    let mut config = e.config("privileged", &["sleep", "600"]);
    security(&mut config).privileged = true;
    let id = e.run(&pod, config).await;
    let own = std::fs::read_to_string("/proc/self/status").unwrap();
    let bounding = own
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
        .unwrap();
    assert_eq!(
        cap_eff(&mut e, &id).await,
        bounding,
        "everything crust holds"
    );
    e.sh(
        &id,
        "mkdir /tmp/m && mount -t tmpfs none /tmp/m && touch /tmp/m/x",
    )
    .await;
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
}

#[tokio::test]
async fn seccomp_runtime_default_blocks_what_unconfined_allows() {
    let mut e = Env::start().await;
    let pod = e.pod("seccomp").await;
    let with = |e: &Env, name: &str, profile: Option<pb::SecurityProfile>| {
        let mut config = e.config(name, &["sleep", "600"]);
        security(&mut config).seccomp = profile;
        config
    };
    let default = Some(pb::SecurityProfile {
        profile_type: pb::security_profile::ProfileType::RuntimeDefault as i32,
        ..Default::default()
    });
    let unconfined = Some(pb::SecurityProfile {
        profile_type: pb::security_profile::ProfileType::Unconfined as i32,
        ..Default::default()
    });
    let filtered = e.run(&pod, with(&e, "filtered", default)).await;
    let open = e.run(&pod, with(&e, "open", unconfined)).await;
    // Filtered: the init and every exec run under the filter.
    assert_eq!(
        e.sh(&filtered, "grep Seccomp: /proc/1/status").await,
        "Seccomp:\t2\n"
    );
    assert_eq!(
        e.sh(&filtered, "grep Seccomp: /proc/self/status").await,
        "Seccomp:\t2\n"
    );
    assert_eq!(
        e.sh(&open, "grep Seccomp: /proc/self/status").await,
        "Seccomp:\t0\n"
    );
    // A user namespace needs no capability, so only the filter refuses unshare(2).
    let probe = "unshare -U true 2>&1; echo rc=$?";
    let blocked = e.sh(&filtered, probe).await;
    let allowed = e.sh(&open, probe).await;
    assert!(
        blocked.contains("Operation not permitted") && blocked.contains("rc=1"),
        "{blocked}"
    );
    assert!(allowed.ends_with("rc=0\n"), "{allowed}");
    // The exec keeps the container's capabilities: what was lent to load the filter is gone.
    let caps = e.sh(&filtered, "grep CapEff /proc/self/status").await;
    assert_eq!(
        caps, "CapEff:\t00000000a80425fb\n",
        "the container's own set"
    );

    // A profile of the node's: blocking mkdir.
    let profile = e.d.dir.join("no-mkdir.json");
    std::fs::write(
        &profile,
        r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO"}]}"#,
    )
    .unwrap();
    let mut config = e.config("node-profile", &["sleep", "600"]);
    security(&mut config).seccomp = Some(pb::SecurityProfile {
        profile_type: pb::security_profile::ProfileType::Localhost as i32,
        localhost_ref: profile.display().to_string(),
    });
    let id = e.run(&pod, config).await;
    let r = e.exec(&id, &["mkdir", "/tmp/x"]).await;
    assert_ne!(r.exit_code, 0, "mkdir is blocked");
    assert!(String::from_utf8_lossy(&r.stderr).contains("Operation not permitted"));
    e.sh(&id, "touch /tmp/file").await;
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
}

#[tokio::test]
async fn host_paths_mount_with_their_propagation() {
    let mut e = Env::start().await;
    let pod = e.pod("mounts").await;
    // A shared host directory (its own mount, made shared, as kubelet's are).
    let host = e.d.dir.join("shared");
    std::fs::create_dir_all(&host).unwrap();
    sh(
        "mount",
        &["--bind", host.to_str().unwrap(), host.to_str().unwrap()],
    );
    sh("mount", &["--make-rshared", host.to_str().unwrap()]);
    std::fs::write(host.join("from-host"), "hello").unwrap();
    let mount = |path: &str, propagation: pb::MountPropagation, readonly: bool| pb::Mount {
        container_path: path.into(),
        host_path: host.display().to_string(),
        readonly,
        propagation: propagation as i32,
        ..Default::default()
    };
    let mut config = e.config("private", &["sleep", "600"]);
    config.mounts = vec![mount("/ro", pb::MountPropagation::PropagationPrivate, true)];
    let private = e.run(&pod, config).await;
    let mut config = e.config("slave", &["sleep", "600"]);
    config.mounts = vec![mount(
        "/slave",
        pb::MountPropagation::PropagationHostToContainer,
        false,
    )];
    let slave = e.run(&pod, config).await;
    assert_eq!(e.sh(&private, "cat /ro/from-host").await, "hello");
    let r = e.exec(&private, &["touch", "/ro/x"]).await;
    assert_ne!(r.exit_code, 0, "read-only mount");
    e.sh(&slave, "touch /slave/from-container").await;
    assert!(host.join("from-container").exists());
    // A mount made on the host after the start reaches the rslave mount only.
    let sub = host.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    sh("mount", &["-t", "tmpfs", "tmpfs", sub.to_str().unwrap()]);
    std::fs::write(sub.join("late"), "late").unwrap();
    assert_eq!(e.sh(&slave, "cat /slave/sub/late").await, "late");
    let r = e.exec(&private, &["cat", "/ro/sub/late"]).await;
    assert_ne!(
        r.exit_code, 0,
        "private mounts do not see later host mounts"
    );

    // Bidirectional: a privileged container's mount reaches the host.
    let mut config = e.config("bidi", &["sleep", "600"]);
    config.mounts = vec![mount(
        "/both",
        pb::MountPropagation::PropagationBidirectional,
        false,
    )];
    security(&mut config).privileged = true;
    let id = e.run(&pod, config).await;
    e.sh(
        &id,
        "mkdir -p /both/inner && mount -t tmpfs none /both/inner && touch /both/inner/made",
    )
    .await;
    assert!(
        host.join("inner/made").exists(),
        "the container's mount reached the host"
    );
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
    let _ = std::process::Command::new("umount")
        .args(["-R", host.to_str().unwrap()])
        .status();
}

/// CRI's `mount_options` (kubelet's `bindMountOptions`): noexec, nosuid and nodev, and ro,
/// hold on the mount and are reported back; an option crust does not apply fails
/// CreateContainer, naming it, rather than being dropped.
#[tokio::test]
async fn bind_mount_options_are_applied_and_others_refused() {
    let mut e = Env::start().await;
    let status =
        e.c.status(pb::StatusRequest { verbose: false })
            .await
            .unwrap()
            .into_inner();
    assert!(status.features.unwrap().mount_options);
    let pod = e.pod("options").await;
    let host = e.d.dir.join("options");
    std::fs::create_dir_all(&host).unwrap();
    // A program (busybox runs as the applet its file is named after) and a device node.
    std::fs::copy("/bin/busybox", host.join("true")).unwrap();
    let null = host.join("null");
    sh(
        "mknod",
        &["-m", "0666", null.to_str().unwrap(), "c", "1", "3"],
    );
    let mount = |at: &str, options: &[&str]| pb::Mount {
        container_path: at.into(),
        host_path: host.display().to_string(),
        mount_options: options.iter().map(|o| o.to_string()).collect(),
        ..Default::default()
    };
    let mut config = e.config("options", &["sleep", "600"]);
    let guarded = mount("/guarded", &["noexec", "nosuid", "nodev", "ro"]);
    config.mounts = vec![mount("/plain", &[]), guarded];
    let id = e.run(&pod, config).await;
    e.sh(
        &id,
        "/plain/true && echo x > /plain/null && touch /plain/new",
    )
    .await;
    for (script, option) in [
        ("/guarded/true", "noexec"),
        ("echo x > /guarded/null", "nodev"),
        ("touch /guarded/new2", "ro"),
    ] {
        let r = e.exec(&id, &["sh", "-c", script]).await;
        assert_ne!(r.exit_code, 0, "{option}: `{script}` succeeded");
    }
    let line = e.sh(&id, "grep ' /guarded ' /proc/self/mountinfo").await;
    let options = line.split(' ').nth(5).unwrap_or_default();
    for option in ["ro", "nosuid", "nodev", "noexec"] {
        assert!(options.split(',').any(|o| o == option), "{option}: {line}");
    }
    let status = e.status(&id).await;
    let reported = status
        .mounts
        .iter()
        .find(|m| m.container_path == "/guarded");
    let reported = reported.unwrap();
    assert!(reported.readonly, "{reported:?}");
    assert_eq!(reported.mount_options, ["noexec", "nosuid", "nodev"]);

    let mut config = e.config("sync", &["true"]);
    config.mounts = vec![mount("/synced", &["noexec", "sync"])];
    let err = e.create(&pod, config).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    for part in ["/synced", "\"sync\""] {
        assert!(err.message().contains(part), "{part} in {err:?}");
    }
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
}

/// A non-root pod's raw block volume, which kubelet sends as a CRI device: with
/// `device_ownership_from_security_context` (containerd's key) the node in the container
/// belongs to the pod's runAsUser and runAsGroup, and the process opens it; by default it keeps
/// the host node's owner (`root:disk`, 0660), as under containerd, and the process cannot.
#[tokio::test]
async fn devices_belong_to_the_run_as_user_when_configured() {
    for owned in [false, true] {
        let mut e = Env::start_with(|d| {
            if owned {
                // A top-level key goes before the config's first table.
                let text = std::fs::read_to_string(&d.config).unwrap();
                let key = "device_ownership_from_security_context = true\n";
                std::fs::write(&d.config, format!("{key}{text}")).unwrap();
            }
        })
        .await;
        let pod = e.pod("volume-device").await;
        let node = e.d.dir.join("disk0");
        sh(
            "mknod",
            &["-m", "0660", node.to_str().unwrap(), "c", "1", "3"],
        );
        sh("chown", &["0:6", node.to_str().unwrap()]);
        let mut config = e.config("importer", &["sleep", "600"]);
        config.devices = vec![pb::Device {
            container_path: "/dev/xvda".into(),
            host_path: node.display().to_string(),
            permissions: "rwm".into(),
        }];
        let sc = security(&mut config);
        sc.run_as_user = Some(pb::Int64Value { value: 1000 });
        sc.run_as_group = Some(pb::Int64Value { value: 2000 });
        let id = e.run(&pod, config).await;
        let (owner, opens) = if owned { ("1000:2000", 0) } else { ("0:6", 1) };
        assert_eq!(
            e.sh(&id, "stat -c '%u:%g %a' /dev/xvda").await.trim(),
            format!("{owner} 660"),
            "owned: {owned}"
        );
        let r = e.exec(&id, &["sh", "-c", "echo x > /dev/xvda"]).await;
        assert_eq!(r.exit_code.min(1), opens, "owned: {owned}: {r:?}");
        stop_pod(&mut e.c, &pod.0).await;
        remove_pod(&mut e.c, &pod.0).await;
    }
}

#[tokio::test]
async fn containers_share_their_pod_s_namespaces() {
    let mut e = Env::start().await;
    // A pod sharing one PID namespace (shareProcessNamespace), as critest's pods do.
    let mut config = pod_config("shared");
    config.log_directory = e.d.dir.join("logs/shared").display().to_string();
    let pod = (run_pod(&mut e.c, config.clone()).await, config);
    let in_pod = |e: &Env, name: &str| {
        let mut config = e.config(name, &["sleep", "600"]);
        security(&mut config).namespace_options = Some(pb::NamespaceOption {
            pid: pb::NamespaceMode::Pod as i32,
            ..Default::default()
        });
        config
    };
    let a = e.run(&pod, in_pod(&e, "a")).await;
    let b = e.run(&pod, in_pod(&e, "b")).await;
    // Same network, UTS and IPC as the pod, a /dev/shm they share, the pod's files.
    assert_eq!(e.sh(&a, "hostname").await.trim(), "shared");
    e.sh(&a, "echo hi > /dev/shm/note").await;
    assert_eq!(e.sh(&b, "cat /dev/shm/note").await, "hi\n");
    let na = e.sh(&a, "readlink /proc/self/ns/net").await;
    assert_eq!(na, e.sh(&b, "readlink /proc/self/ns/net").await);
    assert_ne!(na.trim(), ns_of_self("net"));
    // The pod shares one PID namespace (critest's default pod): b sees a's sleep.
    let ps = e.sh(&b, "ps -o args").await;
    assert!(ps.matches("sleep 600").count() >= 2, "{ps}");
    // A container with a PID namespace of its own is PID 1 there.
    let mut config = e.config("own", &["sleep", "600"]);
    security(&mut config).namespace_options = Some(pb::NamespaceOption {
        pid: pb::NamespaceMode::Container as i32,
        ..Default::default()
    });
    let own = e.run(&pod, config).await;
    assert_eq!(
        e.sh(&own, "cat /proc/1/cmdline | tr '\\0' ' '").await,
        "sleep 600 "
    );
    // On cgroup v1 the container sees its own cgroup, read-only, where the kernel put it.
    let limit = e.sh(&own, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max").await;
    assert!(!limit.trim().is_empty());
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
}
