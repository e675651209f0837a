//! Cgroups as the kernel shows them, on whichever hierarchy this machine has: cgroup v1 or
//! hybrid on the host, pure cgroup v2 in the guest `hack/cgroupv2-tests.sh` boots (where
//! `make test` runs this file again, and the systemd driver's test with systemd as PID 1).
//! Every check reads the files of the hierarchy in use and fails when it finds no cgroup to
//! read, so an assumption of one hierarchy cannot pass on the other.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::workload::{Env, alive};
use common::*;
use crust::cri::pb;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Hierarchy {
    V1,
    V2,
}

/// The hierarchy mounted at /sys/fs/cgroup; panics when there is none to inspect.
fn hierarchy() -> Hierarchy {
    let root = Path::new("/sys/fs/cgroup");
    if root.join("cgroup.controllers").exists() {
        return Hierarchy::V2;
    }
    assert!(
        root.join("memory/cgroup.procs").exists(),
        "no cgroup hierarchy at /sys/fs/cgroup: neither cgroup2 nor a v1 memory controller"
    );
    Hierarchy::V1
}

/// A cgroup file, trimmed; panics naming the file when it cannot be read.
fn read(dir: &Path, file: &str) -> String {
    let path = dir.join(file);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .to_owned()
}

/// CPU shares as cpu.weight, the way runc (since 1.3.2) and libcgroups map them: 2 -> 1,
/// 1024 -> 100 (both defaults), 262144 -> 10000.
fn weight_of(shares: u64) -> u64 {
    if shares <= 2 {
        return 1;
    }
    if shares >= 262_144 {
        return 10_000;
    }
    let l = (shares as f64).log2();
    let exponent = (l * l + 125.0 * l) / 612.0 - 7.0 / 34.0;
    (10f64.powf(exponent).ceil() as u64).clamp(1, 10_000)
}

fn limits(memory: i64, swap: i64, shares: i64, quota: i64) -> pb::LinuxContainerResources {
    pb::LinuxContainerResources {
        memory_limit_in_bytes: memory,
        memory_swap_limit_in_bytes: swap,
        cpu_shares: shares,
        cpu_period: 100_000,
        cpu_quota: quota,
        ..Default::default()
    }
}

/// What the container's cgroup must say for `limits` (memory and swap as CRI counts them).
fn assert_limits(h: Hierarchy, cgroup: &str, memory: i64, swap: i64, shares: u64, quota: i64) {
    let mem = Daemon::cgroup_dir(cgroup, "memory");
    let cpu = Daemon::cgroup_dir(cgroup, "cpu");
    match h {
        Hierarchy::V2 => {
            assert_eq!(read(&mem, "memory.max"), memory.to_string());
            if mem.join("memory.swap.max").exists() {
                // v2 counts swap alone, CRI memory plus swap.
                assert_eq!(read(&mem, "memory.swap.max"), (swap - memory).to_string());
            }
            assert_eq!(read(&cpu, "cpu.max"), format!("{quota} 100000"));
            assert_eq!(read(&cpu, "cpu.weight"), weight_of(shares).to_string());
        }
        Hierarchy::V1 => {
            assert_eq!(read(&mem, "memory.limit_in_bytes"), memory.to_string());
            if mem.join("memory.memsw.limit_in_bytes").exists() {
                assert_eq!(read(&mem, "memory.memsw.limit_in_bytes"), swap.to_string());
            }
            assert_eq!(read(&cpu, "cpu.cfs_quota_us"), quota.to_string());
            assert_eq!(read(&cpu, "cpu.cfs_period_us"), "100000");
            assert_eq!(read(&cpu, "cpu.shares"), shares.to_string());
        }
    }
}

/// The 2 MiB hugetlb limit of a container's cgroup: hugetlb.2MB.max on v2; on v1
/// hugetlb.2MB.limit_in_bytes where the hybrid host mounts hugetlb at all (crust leaves
/// kubelet's limits out where it does not, and the container runs).
fn assert_hugetlb(h: Hierarchy, cgroup: &str, limit: u64) {
    match h {
        Hierarchy::V2 => {
            let dir = Daemon::cgroup_dir(cgroup, "hugetlb");
            assert_eq!(read(&dir, "hugetlb.2MB.max"), limit.to_string());
        }
        Hierarchy::V1 if Path::new("/sys/fs/cgroup/hugetlb/cgroup.procs").exists() => {
            let dir = Daemon::cgroup_dir(cgroup, "hugetlb");
            assert_eq!(read(&dir, "hugetlb.2MB.limit_in_bytes"), limit.to_string());
        }
        // The container ran with the limits sent: there is no file to read them back from.
        Hierarchy::V1 => {}
    }
}

/// The `cgroups` line of `crust check` with the daemon's config.
fn check_line(config: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_crust"))
        .arg("check")
        .arg("--config")
        .arg(config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find(|l| l.split_whitespace().nth(1) == Some("cgroups"))
        .unwrap_or_else(|| panic!("no cgroups line in crust check: {text}"))
        .to_owned()
}

#[tokio::test]
async fn limits_updates_and_the_container_s_view_in_the_hierarchy_in_use() {
    let h = hierarchy();
    let mut e = Env::start().await;
    // crust check names the hierarchy, the driver and the controllers containers get: on v2
    // every one the root offers, which libcgroups enables on the way down.
    let line = check_line(&e.d.config);
    match h {
        Hierarchy::V2 => {
            let offered = read(Path::new("/sys/fs/cgroup"), "cgroup.controllers");
            assert_eq!(
                line,
                format!(
                    "ok    cgroups     Unified hierarchy at /sys/fs/cgroup, cgroupfs driver, \
                     controllers: {offered}"
                )
            );
        }
        Hierarchy::V1 => assert!(
            line.starts_with("ok ")
                && line.contains(" hierarchy at /sys/fs/cgroup, cgroupfs driver, controllers: ")
                && line.contains(" memory"),
            "{line}"
        ),
    }
    let pod = e.pod("limits").await;
    let mut config = e.config("main", &["sleep", "600"]);
    let mut resources = limits(64 << 20, 96 << 20, 512, 50_000);
    resources.cpuset_cpus = "0".into();
    resources.cpuset_mems = "0".into();
    // kubelet sends a limit per page size the node has; 2 MiB pages are the one every x86
    // kernel offers.
    assert!(
        Path::new("/sys/kernel/mm/hugepages/hugepages-2048kB").is_dir(),
        "the kernel offers no 2 MiB huge pages: {:?}",
        std::fs::read_dir("/sys/kernel/mm/hugepages").map(|d| d.flatten().count())
    );
    resources.hugepage_limits = vec![pb::HugepageLimit {
        page_size: "2MB".into(),
        limit: 4 << 20,
    }];
    let unified: std::collections::HashMap<String, String> = [
        ("memory.high".to_owned(), (48u64 << 20).to_string()),
        ("pids.max".to_owned(), "64".to_owned()),
        ("io.weight".to_owned(), "200".to_owned()),
    ]
    .into();
    if h == Hierarchy::V2 {
        // The unified map goes to the files verbatim.
        resources.unified = unified.clone();
    } else {
        // v1 has no such files: refused, as runc refuses it under containerd (kubelet sends
        // it on v2 nodes only).
        let mut bad = e.config("unified", &["sleep", "600"]);
        let mut r = resources.clone();
        r.unified = unified.clone();
        bad.linux.as_mut().unwrap().resources = Some(r);
        let err =
            e.c.create_container(pb::CreateContainerRequest {
                pod_sandbox_id: pod.0.clone(),
                config: Some(bad),
                sandbox_config: Some(pod.1.clone()),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err}");
        assert!(err.message().contains("unified"), "{err}");
    }
    config.linux.as_mut().unwrap().resources = Some(resources);
    let id = e.run(&pod, config).await;
    let info = e.info(&id).await;
    let cgroup = info["cgroup"].as_str().unwrap().to_owned();
    let pod_cgroup = format!("{}/crust-{}", e.d.cgroup_parent, pod.0);
    assert_eq!(cgroup, format!("{pod_cgroup}/{id}"));
    assert_limits(h, &cgroup, 64 << 20, 96 << 20, 512, 50_000);
    let cpuset = Daemon::cgroup_dir(&cgroup, "cpuset");
    assert_eq!(read(&cpuset, "cpuset.cpus"), "0");
    assert_eq!(read(&cpuset, "cpuset.mems"), "0");
    assert_hugetlb(h, &cgroup, 4 << 20);
    // The container's process is in its cgroup.
    let pid = info["pid"].as_i64().unwrap();
    let procs = read(&Daemon::cgroup_dir(&cgroup, "memory"), "cgroup.procs");
    assert!(procs.lines().any(|p| p == pid.to_string()), "{procs}");

    // What the container sees of its cgroup.
    let own = e.sh(&id, "cat /proc/self/cgroup").await;
    match h {
        Hierarchy::V2 => {
            let mem = Daemon::cgroup_dir(&cgroup, "memory");
            assert_eq!(read(&mem, "memory.high"), (48u64 << 20).to_string());
            assert_eq!(read(&mem, "pids.max"), "64");
            assert_eq!(read(&mem, "io.weight"), "default 200");
            // A cgroup namespace of its own: its cgroup is the root it sees, mounted at
            // /sys/fs/cgroup with its own limits.
            assert_eq!(own.trim(), "0::/", "container's /proc/self/cgroup");
            let max = e.sh(&id, "cat /sys/fs/cgroup/memory.max").await;
            assert_eq!(max.trim(), (64u64 << 20).to_string());
        }
        Hierarchy::V1 => {
            // No cgroup namespace on v1 (as runc): the kernel names the full path.
            assert!(
                own.lines()
                    .any(|l| l.contains(":memory:") && l.ends_with(&cgroup)),
                "{own}"
            );
            let max = e
                .sh(&id, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes")
                .await;
            assert_eq!(max.trim(), (64u64 << 20).to_string());
            // systemd's named hierarchy, where the host has one, as runc gives it: the
            // container in a cgroup of its own there, seen read-only.
            if Path::new("/sys/fs/cgroup/systemd/cgroup.procs").exists() {
                assert!(
                    own.lines()
                        .any(|l| l.contains(":name=systemd:") && l.ends_with(&cgroup)),
                    "{own}"
                );
                let mount = e
                    .sh(&id, "grep ' /sys/fs/cgroup/systemd ' /proc/self/mountinfo")
                    .await;
                let options = mount.split(' ').nth(5).unwrap_or_default();
                assert!(options.split(',').any(|o| o == "ro"), "{mount}");
                let dir = Path::new("/sys/fs/cgroup/systemd").join(cgroup.trim_start_matches('/'));
                assert_eq!(read(&dir, "cgroup.procs"), pid.to_string());
            }
        }
    }

    // UpdateContainerResources reaches the live cgroup.
    e.c.update_container_resources(pb::UpdateContainerResourcesRequest {
        container_id: id.clone(),
        linux: Some(limits(128 << 20, 160 << 20, 256, 20_000)),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_limits(h, &cgroup, 128 << 20, 160 << 20, 256, 20_000);

    // Teardown: a stopped pod keeps no cgroup, no process and nothing frozen, in any
    // hierarchy.
    let pod_dir = Daemon::cgroup_dir(&pod_cgroup, "memory");
    stop_pod(&mut e.c, &pod.0).await;
    assert!(!alive(pid));
    assert!(!pod_dir.exists(), "{} left", pod_dir.display());
    remove_pod(&mut e.c, &pod.0).await;
    e.d.assert_clean();
}

/// kubelet's CPU manager (static policy) shrinks the shared pool by sending every container in
/// it UpdateContainerResources with `cpuset_cpus` alone. The container keeps its other limits:
/// in the cgroup, in ContainerStatus.resources and in what `crictl inspect` shows.
#[tokio::test]
async fn a_cpuset_only_update_keeps_every_other_limit() {
    let h = hierarchy();
    let mut e = Env::start().await;
    let pod = e.pod("shared-pool").await;
    let mut config = e.config("main", &["sleep", "600"]);
    let mut resources = limits(64 << 20, 96 << 20, 512, 50_000);
    resources.cpuset_cpus = "0-1".into();
    resources.oom_score_adj = 900;
    config.linux.as_mut().unwrap().resources = Some(resources.clone());
    let id = e.run(&pod, config).await;
    let cgroup = e.info(&id).await["cgroup"].as_str().unwrap().to_owned();

    e.c.update_container_resources(pb::UpdateContainerResourcesRequest {
        container_id: id.clone(),
        linux: Some(pb::LinuxContainerResources {
            cpuset_cpus: "1".into(),
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    let cpuset = Daemon::cgroup_dir(&cgroup, "cpuset");
    assert_eq!(read(&cpuset, "cpuset.cpus"), "1");
    assert_limits(h, &cgroup, 64 << 20, 96 << 20, 512, 50_000);
    let want = pb::LinuxContainerResources {
        cpuset_cpus: "1".into(),
        ..resources
    };
    let status = e.status(&id).await;
    assert_eq!(status.resources.unwrap().linux.unwrap(), want);
    let inspect = sh(
        &tools::crictl().display().to_string(),
        &[
            "-r",
            &format!("unix://{}", e.d.socket.display()),
            "inspect",
            &id,
        ],
    );
    let inspect: serde_json::Value = serde_json::from_str(&inspect).unwrap();
    let shown = &inspect["status"]["resources"]["linux"];
    let figure = |key: &str| shown[key].to_string().trim_matches('"').to_owned();
    assert_eq!(
        figure("memoryLimitInBytes"),
        (64u64 << 20).to_string(),
        "{shown}"
    );
    assert_eq!(figure("cpuQuota"), "50000", "{shown}");
    assert_eq!(figure("cpuShares"), "512", "{shown}");
    assert_eq!(figure("cpusetCpus"), "1", "{shown}");

    // A later resize (kubelet sends every figure then) replaces them, the cpuset kept.
    e.c.update_container_resources(pb::UpdateContainerResourcesRequest {
        container_id: id.clone(),
        linux: Some(limits(128 << 20, 160 << 20, 256, 20_000)),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_limits(h, &cgroup, 128 << 20, 160 << 20, 256, 20_000);
    assert_eq!(read(&cpuset, "cpuset.cpus"), "1");
    let linux = e.status(&id).await.resources.unwrap().linux.unwrap();
    assert_eq!(
        (linux.memory_limit_in_bytes, linux.cpuset_cpus.as_str()),
        (128 << 20, "1")
    );
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
    e.d.assert_clean();
}

#[tokio::test]
async fn cpu_shares_map_to_weights_as_runc_maps_them() {
    // The fixed points runc and kubelet agree on.
    assert_eq!(weight_of(2), 1);
    assert_eq!(weight_of(1024), 100);
    assert_eq!(weight_of(262_144), 10_000);
    let h = hierarchy();
    let mut e = Env::start().await;
    let pod = e.pod("weights").await;
    for shares in [2u64, 1024, 102_400] {
        let mut config = e.config(&format!("s{shares}"), &["sleep", "600"]);
        config.linux.as_mut().unwrap().resources = Some(pb::LinuxContainerResources {
            cpu_shares: shares as i64,
            ..Default::default()
        });
        let id = e.run(&pod, config).await;
        let cgroup = e.info(&id).await["cgroup"].as_str().unwrap().to_owned();
        let cpu = Daemon::cgroup_dir(&cgroup, "cpu");
        match h {
            Hierarchy::V2 => assert_eq!(read(&cpu, "cpu.weight"), weight_of(shares).to_string()),
            Hierarchy::V1 => assert_eq!(read(&cpu, "cpu.shares"), shares.to_string()),
        }
    }
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
    e.d.assert_clean();
}

#[tokio::test]
async fn pod_sandbox_resources_reach_the_live_pod_cgroup() {
    let h = hierarchy();
    let mut e = Env::start().await;
    let pod = e.pod("resized").await;
    let id = e.run(&pod, e.config("main", &["sleep", "600"])).await;
    let pod_cgroup = format!("{}/crust-{}", e.d.cgroup_parent, pod.0);
    let update = |id: &str, memory: i64, quota: i64, shares: i64| {
        pb::UpdatePodSandboxResourcesRequest {
            pod_sandbox_id: id.into(),
            resources: Some(limits(memory, 0, shares, quota)),
            // A runtime class's overhead comes on top.
            overhead: Some(limits(32 << 20, 0, 128, 10_000)),
        }
    };
    e.c.update_pod_sandbox_resources(update(&pod.0, 256 << 20, 100_000, 1024))
        .await
        .unwrap();
    let mem = Daemon::cgroup_dir(&pod_cgroup, "memory");
    let cpu = Daemon::cgroup_dir(&pod_cgroup, "cpu");
    let check = |memory: i64, quota: i64, shares: u64| match h {
        Hierarchy::V2 => {
            assert_eq!(read(&mem, "memory.max"), memory.to_string());
            assert_eq!(read(&cpu, "cpu.max"), format!("{quota} 100000"));
            assert_eq!(read(&cpu, "cpu.weight"), weight_of(shares).to_string());
        }
        Hierarchy::V1 => {
            assert_eq!(read(&mem, "memory.limit_in_bytes"), memory.to_string());
            assert_eq!(read(&cpu, "cpu.cfs_quota_us"), quota.to_string());
            assert_eq!(read(&cpu, "cpu.shares"), shares.to_string());
        }
    };
    check(288 << 20, 110_000, 1152);
    // A resize down, while the container runs on.
    e.c.update_pod_sandbox_resources(update(&pod.0, 128 << 20, 50_000, 512))
        .await
        .unwrap();
    check(160 << 20, 60_000, 640);
    let info = e.info(&id).await;
    assert!(alive(info["pid"].as_i64().unwrap()));
    // kubelet's quota for a pod one of whose containers has no CPU limit: -1, no limit (it was
    // refused as negative, and every in-place resize of such a pod with it).
    e.c.update_pod_sandbox_resources(update(&pod.0, 128 << 20, -1, 512))
        .await
        .unwrap();
    match h {
        Hierarchy::V2 => assert!(read(&cpu, "cpu.max").starts_with("max "), "{cpu:?}"),
        Hierarchy::V1 => assert_eq!(read(&cpu, "cpu.cfs_quota_us"), "-1"),
    }

    let err =
        e.c.update_pod_sandbox_resources(update("nope", 1 << 30, 0, 0))
            .await
            .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "{err}");
    let mut bad = update(&pod.0, 1 << 30, 0, 0);
    bad.resources.as_mut().unwrap().memory_limit_in_bytes = -5;
    let err = e.c.update_pod_sandbox_resources(bad).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    stop_pod(&mut e.c, &pod.0).await;
    let err =
        e.c.update_pod_sandbox_resources(update(&pod.0, 1 << 30, 0, 0))
            .await
            .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err}");
    remove_pod(&mut e.c, &pod.0).await;
    e.d.assert_clean();
}

/// A pod in the cgroup kubelet makes for it (`.../pod<uid>`), which kubelet sizes itself:
/// UpdatePodSandboxResources reaches NRI and the record, and leaves crust's own cgroup inside
/// it unlimited, so that a resize below a container's quota is not refused (cgroup v1: a
/// child's quota may not exceed its parent's; kubelet sent this one before the containers'
/// and was refused, over and over, in the node suite's in-place resize specs).
#[tokio::test]
async fn a_resize_leaves_the_pod_cgroup_kubelet_sizes_to_kubelet() {
    let h = hierarchy();
    let mut e = Env::start().await;
    let mut config = pod_config("kubelet-sized");
    let uid = config.metadata.as_ref().unwrap().uid.clone();
    let parent = format!("{}/pod{uid}", e.d.cgroup_parent);
    config.linux = Some(pb::LinuxPodSandboxConfig {
        cgroup_parent: parent.clone(),
        ..Default::default()
    });
    let pod = (run_pod(&mut e.c, config.clone()).await, config);
    let mut main = e.config("main", &["sleep", "600"]);
    main.linux.as_mut().unwrap().resources = Some(limits(64 << 20, 64 << 20, 512, 50_000));
    let id = e.run(&pod, main).await;
    e.c.update_pod_sandbox_resources(pb::UpdatePodSandboxResourcesRequest {
        pod_sandbox_id: pod.0.clone(),
        resources: Some(limits(32 << 20, 0, 256, 20_000)),
        overhead: None,
    })
    .await
    .unwrap();
    let pod_cgroup = format!("{parent}/crust-{}", pod.0);
    let cpu = Daemon::cgroup_dir(&pod_cgroup, "cpu");
    match h {
        Hierarchy::V2 => assert!(read(&cpu, "cpu.max").starts_with("max "), "{cpu:?}"),
        Hierarchy::V1 => assert_eq!(read(&cpu, "cpu.cfs_quota_us"), "-1"),
    }
    assert_limits(
        h,
        e.info(&id).await["cgroup"].as_str().unwrap(),
        64 << 20,
        64 << 20,
        512,
        50_000,
    );
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
    for root in daemon::cgroup_roots() {
        let dir = root.join(parent.trim_start_matches('/'));
        assert!(!dir.join(format!("crust-{}", pod.0)).exists(), "{dir:?}");
        let _ = std::fs::remove_dir(&dir);
    }
    e.d.assert_clean();
}

/// The directory of a systemd-driver cgroup name (`slice:crust:id`) on cgroup v2.
fn systemd_dir(name: &str) -> PathBuf {
    let mut parts = name.splitn(3, ':');
    let (slice, prefix, id) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    let mut dir = PathBuf::from("/sys/fs/cgroup");
    let stem = slice.strip_suffix(".slice").unwrap();
    let mut acc = String::new();
    for part in stem.split('-') {
        if !acc.is_empty() {
            acc.push('-');
        }
        acc.push_str(part);
        dir.push(format!("{acc}.slice"));
    }
    dir.join(format!("{prefix}-{id}.scope"))
}

fn systemctl(args: &[&str]) -> String {
    let out = Command::new("systemctl").args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The units systemd knows, loaded or not, of these pods and containers of crust's.
fn crust_units(ids: &[&str]) -> String {
    let units: Vec<String> = ids.iter().map(|id| format!("crust-{id}.scope")).collect();
    let mut args = vec!["list-units", "--all", "--plain", "--no-legend"];
    args.extend(units.iter().map(String::as_str));
    systemctl(&args)
}

/// A daemon with `cgroup_driver = "systemd"`, after checking systemd is PID 1 on cgroup v2.
async fn systemd_env() -> Env {
    assert_eq!(
        hierarchy(),
        Hierarchy::V2,
        "the systemd driver is tested on v2"
    );
    let comm = std::fs::read_to_string("/proc/1/comm").unwrap();
    assert_eq!(comm.trim(), "systemd", "systemd must be PID 1");
    Env::start_with(|d| {
        let text = std::fs::read_to_string(&d.config).unwrap();
        let text = text.replace(
            &format!("default_cgroup_parent = {:?}", d.cgroup_parent),
            "cgroup_driver = \"systemd\"\ndefault_cgroup_parent = \"crust-it.slice\"",
        );
        std::fs::write(&d.config, text).unwrap();
    })
    .await
}

/// A pod whose parent is named as kubelet's systemd driver names it:
/// `kubepods-burstable-pod<uid>.slice`.
async fn kubelet_pod(e: &mut Env, name: &str, slice: &str) -> (String, pb::PodSandboxConfig) {
    let mut config = pod_config(name);
    config.log_directory = e.d.dir.join("logs").join(name).display().to_string();
    config
        .linux
        .get_or_insert_with(Default::default)
        .cgroup_parent = slice.into();
    (run_pod(&mut e.c, config.clone()).await, config)
}

/// After removal systemd holds no unit of the pod's or its containers' (`ids`) and the pod's
/// slice no cgroup; then the slice goes, as kubelet removes it. Tests run side by side, each
/// with a pod slice of its own, so each looks at its own only.
fn assert_nothing_left(slice: &str, ids: &[&str]) {
    assert_eq!(crust_units(ids), "", "systemd units left");
    let slice_dir = systemd_dir(&format!("{slice}:crust:none"));
    let slice_dir = slice_dir.parent().unwrap();
    assert!(slice_dir.is_dir(), "{} is gone", slice_dir.display());
    let left: Vec<_> = std::fs::read_dir(slice_dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name())
        .collect();
    assert!(
        left.is_empty(),
        "cgroups left in {}: {left:?}",
        slice_dir.display()
    );
    let _ = systemctl(&["stop", slice]);
}

#[tokio::test]
#[ignore = "needs systemd as PID 1 on cgroup v2: hack/cgroupv2-tests.sh runs it in its guest"]
async fn the_systemd_driver_puts_scopes_in_kubelet_s_slices_and_leaves_none() {
    let mut e = systemd_env().await;
    let rc =
        e.c.runtime_config(pb::RuntimeConfigRequest {})
            .await
            .unwrap();
    let driver = rc.into_inner().linux.unwrap().cgroup_driver;
    assert_eq!(driver, pb::CgroupDriver::Systemd as i32);
    // The controllers systemd manages reach its scopes, and hugetlb, which crust enables
    // itself: no rdma or misc.
    assert_eq!(
        check_line(&e.d.config),
        "ok    cgroups     Unified hierarchy at /sys/fs/cgroup, systemd driver, \
         controllers: cpuset cpu io memory hugetlb pids"
    );

    // A pod as kubelet's systemd driver names its parent.
    let slice = "kubepods-burstable-pod0c1d2e3f_4a5b.slice";
    let pod = kubelet_pod(&mut e, "sd", slice).await;
    let (_, info) = status(&mut e.c, &pod.0).await;
    let pod_cgroup = info["cgroup"].as_str().unwrap().to_owned();
    assert_eq!(pod_cgroup, format!("{slice}:crust:{}", pod.0));
    let pod_dir = systemd_dir(&pod_cgroup);
    assert!(
        pod_dir.starts_with(
            "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/\
             kubepods-burstable-pod0c1d2e3f_4a5b.slice"
        ),
        "{}",
        pod_dir.display()
    );
    // The monitor's scope is crust's, in crust's slice: out of kubelet's slice of the pod,
    // whose memory limit never picks it.
    let monitor = info["monitor"]["pid"].as_i64().unwrap().to_string();
    let monitor_cgroup = info["monitorCgroup"].as_str().unwrap();
    assert_eq!(monitor_cgroup, format!("crust-it.slice:crust:{}", pod.0));
    let procs = read(&systemd_dir(monitor_cgroup), "cgroup.procs");
    assert!(procs.lines().any(|p| p == monitor), "{procs}");
    assert!(!pod_dir.exists(), "{} holds nothing", pod_dir.display());
    let pod_scope = format!("crust-{}.scope", pod.0);
    assert_eq!(systemctl(&["is-active", &pod_scope]), "active");

    // A container: its own scope in the same slice, with its limits, those systemd has no
    // property for too (hugepages, most `unified` keys).
    let mut config = e.config("main", &["sleep", "600"]);
    let mut resources = limits(64 << 20, 64 << 20, 512, 50_000);
    resources.hugepage_limits = vec![pb::HugepageLimit {
        page_size: "2MB".into(),
        limit: 4 << 20,
    }];
    resources.unified = [
        ("io.weight".to_owned(), "200".to_owned()),
        ("memory.high".to_owned(), (48u64 << 20).to_string()),
    ]
    .into();
    config.linux.as_mut().unwrap().resources = Some(resources);
    let id = e.run(&pod, config).await;
    let cgroup = e.info(&id).await["cgroup"].as_str().unwrap().to_owned();
    assert_eq!(cgroup, format!("{slice}:crust:{id}"));
    let dir = systemd_dir(&cgroup);
    assert_eq!(dir.parent(), pod_dir.parent());
    // The controllers crust check named are the ones the scope has.
    assert_eq!(
        read(&dir, "cgroup.controllers"),
        "cpuset cpu io memory hugetlb pids"
    );
    assert_eq!(read(&dir, "memory.max"), (64u64 << 20).to_string());
    assert_eq!(read(&dir, "hugetlb.2MB.max"), (4u64 << 20).to_string());
    assert_eq!(read(&dir, "io.weight"), "default 200");
    assert_eq!(read(&dir, "memory.high"), (48u64 << 20).to_string());
    assert_eq!(read(&dir, "cpu.max"), "50000 100000");
    assert_eq!(read(&dir, "cpu.weight"), weight_of(512).to_string());
    assert_eq!(
        systemctl(&["is-active", &format!("crust-{id}.scope")]),
        "active"
    );
    let own = e.sh(&id, "cat /proc/self/cgroup").await;
    assert_eq!(own.trim(), "0::/");
    // Pod stats cover the pod's slice: the container's scope.
    let in_container = read(&dir, "cgroup.procs").lines().count() as u64;
    let stats =
        e.c.pod_sandbox_stats(pb::PodSandboxStatsRequest {
            pod_sandbox_id: pod.0.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let linux = stats.stats.unwrap().linux.unwrap();
    let processes = linux.process.unwrap().process_count.unwrap().value;
    assert!(
        in_container > 0 && processes >= in_container,
        "{processes} processes in the pod"
    );
    let mut update = limits(128 << 20, 128 << 20, 256, 20_000);
    update.hugepage_limits = vec![pb::HugepageLimit {
        page_size: "2MB".into(),
        limit: 8 << 20,
    }];
    e.c.update_container_resources(pb::UpdateContainerResourcesRequest {
        container_id: id.clone(),
        linux: Some(update),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(read(&dir, "memory.max"), (128u64 << 20).to_string());
    assert_eq!(read(&dir, "cpu.max"), "20000 100000");
    assert_eq!(read(&dir, "hugetlb.2MB.max"), (8u64 << 20).to_string());

    // After removal systemd holds no unit of crust's, and no cgroup is left.
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
    assert!(!dir.exists() && !pod_dir.exists(), "scopes' cgroups left");
    assert_nothing_left(slice, &[&pod.0, &id]);
}

/// The memory hog of the OOM tests: it waits for /tmp/go, so the test can read the limits its
/// cgroup got first, then doubles a string up to 160 MiB and sleeps. Bounded, so a limit that
/// did not apply fails the test (no exit) instead of taking the guest's memory.
const HOG: &str = "while [ ! -e /tmp/go ]; do sleep 1; done; x=0123456789; i=0; \
                   while [ $i -lt 24 ]; do x=$x$x; i=$((i+1)); done; sleep 600";

#[tokio::test]
#[ignore = "needs systemd as PID 1 on cgroup v2: hack/cgroupv2-tests.sh runs it in its guest"]
async fn the_systemd_driver_s_oom_kill_is_read_from_the_container_s_own_scope() {
    let mut e = systemd_env().await;
    let slice = "kubepods-burstable-pod1a2b3c4d_5e6f.slice";
    let pod = kubelet_pod(&mut e, "oom", slice).await;
    let mut config = e.config("hog", &["sh", "-c", HOG]);
    config.linux.as_mut().unwrap().resources = Some(limits(32 << 20, 32 << 20, 0, 0));
    let hog = e.run(&pod, config).await;
    let scope = systemd_dir(e.info(&hog).await["cgroup"].as_str().unwrap());
    // The limits are the scope's own, in the files and as systemd's unit properties (which
    // systemd writes again whenever it realizes the slice): no swap to escape to.
    assert_eq!(read(&scope, "memory.max"), (32u64 << 20).to_string());
    assert_eq!(read(&scope, "memory.swap.max"), "0");
    let unit = format!("crust-{hog}.scope");
    assert_eq!(
        systemctl(&["show", "-p", "MemoryMax", "-p", "MemorySwapMax", &unit]),
        format!("MemoryMax={}\nMemorySwapMax=0", 32u64 << 20)
    );
    e.sh(&hog, "touch /tmp/go").await;
    let s = e.wait_exit(&hog, Duration::from_secs(60)).await;
    assert_eq!(
        (s.exit_code, s.reason.as_str()),
        (137, "OOMKilled"),
        "{s:?}"
    );
    // Whose limit it was is read as the exit is, whether or not the scope was still there.
    let (first, report) = diagnose_cause(&e.d, &hog);
    assert!(
        first.ends_with("was OOM killed by its own memory limit (32 MiB)"),
        "{report}"
    );
    // The kill is counted in the container's scope, not in the monitor's.
    let (_, info) = status(&mut e.c, &pod.0).await;
    let monitor_scope = systemd_dir(info["monitorCgroup"].as_str().unwrap());
    assert_eq!(oom_kills(&monitor_scope), 0, "{}", monitor_scope.display());
    assert!(
        !scope.exists() || oom_kills(&scope) > 0,
        "{}",
        scope.display()
    );
    // A plain SIGKILL is not an OOM kill.
    let id = e.run(&pod, e.config("killed", &["sleep", "600"])).await;
    e.stop(&id, 0).await;
    let s = e.status(&id).await;
    assert_eq!((s.exit_code, s.reason.as_str()), (137, "Error"));
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
    assert_nothing_left(slice, &[&pod.0, &hog, &id]);
}

#[tokio::test]
#[ignore = "needs systemd as PID 1 on cgroup v2: hack/cgroupv2-tests.sh runs it in its guest"]
async fn the_systemd_driver_s_scopes_survive_a_daemon_sigkill_and_go_with_removal() {
    let mut e = systemd_env().await;
    let slice = "kubepods-burstable-pod2b3c4d5e_6f7a.slice";
    let pod = kubelet_pod(&mut e, "survivor", slice).await;
    let id = e.run(&pod, e.config("main", &["sleep", "600"])).await;
    let info = e.info(&id).await;
    let pid = info["pid"].as_i64().unwrap();
    let scope = systemd_dir(info["cgroup"].as_str().unwrap());
    let unit = format!("crust-{id}.scope");

    e.d.kill9();
    assert!(alive(pid), "a daemon crash does not touch containers");
    e.relaunch().await;

    // Recovered: running, same process, still in its scope, which systemd still runs.
    let s = e.status(&id).await;
    assert_eq!(s.state, pb::ContainerState::ContainerRunning as i32);
    assert_eq!(e.info(&id).await["pid"].as_i64().unwrap(), pid);
    let procs = read(&scope, "cgroup.procs");
    assert!(procs.lines().any(|p| p == pid.to_string()), "{procs}");
    assert_eq!(systemctl(&["is-active", &unit]), "active");
    // The restarted daemon still finds the scope to update.
    e.c.update_container_resources(pb::UpdateContainerResourcesRequest {
        container_id: id.clone(),
        linux: Some(limits(96 << 20, 96 << 20, 256, 30_000)),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(read(&scope, "memory.max"), (96u64 << 20).to_string());
    assert_eq!(read(&scope, "cpu.max"), "30000 100000");

    stop_pod(&mut e.c, &pod.0).await;
    assert!(!alive(pid));
    remove_pod(&mut e.c, &pod.0).await;
    assert!(
        e.container_leftovers().is_empty(),
        "{:?}",
        e.container_leftovers()
    );
    assert!(!scope.exists(), "{} left", scope.display());
    assert_nothing_left(slice, &[&pod.0, &id]);
}

/// The `oom_kill` count of a v2 cgroup's memory.events.
fn oom_kills(dir: &Path) -> u64 {
    read(dir, "memory.events")
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .unwrap_or_else(|| panic!("no oom_kill in {}/memory.events", dir.display()))
        .parse()
        .unwrap()
}
