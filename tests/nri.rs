//! NRI plugins against the real daemon: a plugin built from containerd's own `pkg/stub`
//! (`tests/fixtures/nri-plugin`, github.com/containerd/nri v0.12.3) connects to crust's NRI
//! socket, or is started by crust from its plugin directory. Each adjustment kind is checked
//! where it lands (inside the container, in its cgroup, on the host), and so are an
//! unsolicited UpdateContainers, two plugins claiming one field, and plugins that fail, hang
//! or crash.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::workload::{Env, tail};
use common::*;
use crust::cri::pb;
use serde_json::{Value, json};

/// One plugin process and the events it recorded.
struct Plugin {
    child: Child,
    log: PathBuf,
}

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Plugin {
    /// Connects a plugin named `idx-name` to `socket` and waits for its synchronization.
    fn connect(socket: &Path, dir: &Path, name: &str, idx: &str, args: &[&str]) -> Plugin {
        let log = dir.join(format!("{idx}-{name}.events"));
        let child = Command::new(tools::nri_plugin())
            .args(["-name", name, "-idx", idx, "-socket"])
            .arg(socket)
            .arg("-log")
            .arg(&log)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let p = Plugin { child, log };
        p.wait_for("its synchronization", Duration::from_secs(30), |e| {
            e["event"] == "Synchronize"
        });
        p
    }

    fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The names of the events it got about `object` (a pod or container id), in order.
    fn events_of(&self, object: &str) -> Vec<String> {
        self.events()
            .into_iter()
            .filter(|e| {
                e["container"] == object || (e["pod"] == object && e["container"].is_null())
            })
            .map(|e| e["event"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    fn wait_for(&self, what: &str, within: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + within;
        loop {
            if let Some(e) = self.events().into_iter().find(|e| pred(e)) {
                return e;
            }
            assert!(
                Instant::now() < deadline,
                "plugin did not record {what} within {within:?}: {:#?}",
                self.events()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A daemon with the test image and NRI on its own socket, `nri` added to its `[nri]` table.
async fn env(nri: &str) -> Env {
    let nri = nri.to_owned();
    Env::start_with(move |d| d.nri_config(&nri)).await
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .to_owned()
}

fn cgroup_v2() -> bool {
    Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
}

#[tokio::test]
async fn every_adjustment_kind_reaches_the_container() {
    let mut e = env("").await;
    let host = e.d.dir.join("nri-host");
    std::fs::create_dir_all(&host).unwrap();
    std::fs::write(host.join("hello"), "from the host\n").unwrap();
    let hook_ran = e.d.dir.join("hook-ran");
    let moved = format!("{}/nri-moved", e.d.cgroup_parent);
    let adjust = json!({
        "annotations": {"nri.test/added": "yes"},
        "mounts": [{"destination": "/nri-data", "type": "bind", "source": host,
                    "options": ["rbind", "ro"]}],
        "env": [{"key": "NRI_ADDED", "value": "1"}, {"key": "-FROM_IMAGE"}],
        "hooks": {"create_runtime": [{"path": "/bin/sh",
                  "args": ["sh", "-c", format!("echo hooked > {}", hook_ran.display())]}]},
        "args": ["", "sleep", "600"],
        "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1000, "soft": 900}],
        "linux": {
            "devices": [{"path": "/dev/nri-null", "type": "c", "major": 1, "minor": 3,
                         "file_mode": {"value": 438}}],
            "resources": {"memory": {"limit": {"value": 64 << 20}},
                          "cpu": {"shares": {"value": 512}},
                          "pids": {"limit": 64}},
            "cgroups_path": moved,
            "oom_score_adj": {"value": 321},
            "seccomp_policy": {"default_action": "SCMP_ACT_ALLOW",
                               "architectures": ["SCMP_ARCH_X86_64"],
                               "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO",
                                             "errno_ret": {"value": 1}}]}
        }
    });
    let plugin = Plugin::connect(
        &e.d.nri_socket(),
        &e.d.dir,
        "adjuster",
        "10",
        &["-match", "adjusted", "-adjust", &adjust.to_string()],
    );
    let pod = e.pod("nri-adjust").await;
    // Exits at once unless the plugin's arguments replace its own.
    let id = e
        .run(&pod, e.config("adjusted", &["sh", "-c", "exit 7"]))
        .await;
    assert!(!plugin.events_of(&id).is_empty());
    let env = e.sh(&id, "cat /proc/1/environ | tr '\\0' '\\n'").await;
    assert!(env.lines().any(|l| l == "NRI_ADDED=1"), "{env}");
    assert!(
        !env.contains("FROM_IMAGE"),
        "removed from the environment: {env}"
    );
    assert_eq!(
        e.sh(&id, "cat /proc/1/cmdline | tr '\\0' ' '").await.trim(),
        "sleep 600"
    );
    assert_eq!(e.sh(&id, "cat /nri-data/hello").await, "from the host\n");
    let ro = e.exec(&id, &["sh", "-c", "echo x > /nri-data/new"]).await;
    assert_ne!(ro.exit_code, 0, "the mount is read-only");
    assert_eq!(read(&hook_ran), "hooked");
    e.sh(&id, "echo x > /dev/nri-null").await;
    let limits = e.sh(&id, "grep 'Max open files' /proc/1/limits").await;
    assert!(
        limits.split_whitespace().collect::<Vec<_>>()[3..5] == ["900", "1000"],
        "{limits}"
    );
    assert_eq!(e.sh(&id, "cat /proc/1/oom_score_adj").await.trim(), "321");
    let denied = e.exec(&id, &["mkdir", "/tmp/denied"]).await;
    assert_ne!(denied.exit_code, 0, "seccomp denies mkdir");
    assert!(String::from_utf8_lossy(&denied.stderr).contains("not permitted"));
    let info = e.info(&id).await;
    assert_eq!(info["runtimeSpec"]["annotations"]["nri.test/added"], "yes");
    // The container lives in the cgroup the plugin chose, with the limits it set.
    assert_eq!(info["cgroup"], moved.as_str());
    let pid = info["pid"].as_i64().unwrap();
    let own = read(Path::new(&format!("/proc/{pid}/cgroup")));
    assert!(own.contains(&moved), "{own}");
    let mem = Daemon::cgroup_dir(&moved, "memory");
    let pids = Daemon::cgroup_dir(&moved, "pids");
    assert_eq!(read(&pids.join("pids.max")), "64");
    if cgroup_v2() {
        assert_eq!(read(&mem.join("memory.max")), (64u64 << 20).to_string());
    } else {
        assert_eq!(
            read(&mem.join("memory.limit_in_bytes")),
            (64u64 << 20).to_string()
        );
        let cpu = Daemon::cgroup_dir(&moved, "cpu");
        assert_eq!(read(&cpu.join("cpu.shares")), "512");
    }
    // A container the plugin does not adjust keeps what it asked for.
    let plain = e.run(&pod, e.config("plain", &["sleep", "600"])).await;
    assert!(e.sh(&plain, "env").await.contains("FROM_IMAGE=1"));
    e.remove(&id).await;
    e.remove(&plain).await;
    e.wait_reclaimed(&id).await;
    assert!(!mem.exists(), "the moved cgroup goes with the container");
    assert_eq!(
        plugin.events_of(&id),
        [
            "CreateContainer",
            "PostCreateContainer",
            "StartContainer",
            "PostStartContainer",
            "StopContainer",
            "RemoveContainer"
        ]
    );
    remove_pod(&mut e.c, &pod.0).await;
    assert!(
        e.container_leftovers().is_empty(),
        "{:?}",
        e.container_leftovers()
    );
}

/// The CPU manager's cpuset-only UpdateContainerResources: plugins get the request as it came
/// (the cpuset alone, as containerd hands it to them), and the container they are told about
/// keeps its memory and CPU limits beside the new cpuset.
#[tokio::test]
async fn a_cpuset_only_update_keeps_the_limits_plugins_see() {
    let mut e = env("").await;
    let plugin = Plugin::connect(&e.d.nri_socket(), &e.d.dir, "watcher", "30", &[]);
    let pod = e.pod("nri-cpuset").await;
    let mut config = e.config("pooled", &["sleep", "600"]);
    config.linux.as_mut().unwrap().resources = Some(pb::LinuxContainerResources {
        memory_limit_in_bytes: 64 << 20,
        cpu_shares: 512,
        cpu_period: 100_000,
        cpu_quota: 50_000,
        cpuset_cpus: "0-1".into(),
        ..Default::default()
    });
    let id = e.run(&pod, config).await;
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
    let seen = plugin.wait_for("PostUpdateContainer", Duration::from_secs(20), |ev| {
        ev["event"] == "PostUpdateContainer" && ev["container"] == id.as_str()
    });
    let resources: Value = serde_json::from_str(seen["detail"].as_str().unwrap()).unwrap();
    let figure = |v: &Value| v.to_string().trim_matches('"').to_owned();
    assert_eq!(
        figure(&resources["memory"]["limit"]["value"]),
        (64u64 << 20).to_string(),
        "{resources}"
    );
    assert_eq!(
        figure(&resources["cpu"]["quota"]["value"]),
        "50000",
        "{resources}"
    );
    assert_eq!(
        figure(&resources["cpu"]["shares"]["value"]),
        "512",
        "{resources}"
    );
    assert_eq!(resources["cpu"]["cpus"], "1", "{resources}");
    let linux = e.status(&id).await.resources.unwrap().linux.unwrap();
    assert_eq!(
        (
            linux.memory_limit_in_bytes,
            linux.cpu_quota,
            linux.cpuset_cpus.as_str()
        ),
        (64 << 20, 50_000, "1")
    );
    e.end_pod(&pod.0).await;
}

/// After a restart, a plugin is told the limits a container runs with, not those it was
/// created with.
#[tokio::test]
async fn a_plugin_connecting_after_a_restart_sees_the_updated_limits() {
    let mut e = env("").await;
    let pod = e.pod("nri-restart").await;
    let mut config = e.config("resized", &["sleep", "600"]);
    config.linux.as_mut().unwrap().resources = Some(pb::LinuxContainerResources {
        memory_limit_in_bytes: 64 << 20,
        ..Default::default()
    });
    let id = e.run(&pod, config).await;
    e.c.update_container_resources(pb::UpdateContainerResourcesRequest {
        container_id: id.clone(),
        linux: Some(pb::LinuxContainerResources {
            memory_limit_in_bytes: 96 << 20,
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    e.d.kill9();
    e.relaunch().await;
    let plugin = Plugin::connect(&e.d.nri_socket(), &e.d.dir, "late", "30", &[]);
    let sync = plugin.wait_for("its synchronization", Duration::from_secs(5), |ev| {
        ev["event"] == "Synchronize"
    });
    let limits: Value = serde_json::from_str(sync["detail"].as_str().unwrap()).unwrap();
    let limit = limits[id.as_str()]["memory"]["limit"]["value"].to_string();
    assert_eq!(
        limit.trim_matches('"'),
        (96u64 << 20).to_string(),
        "{limits}"
    );
    e.end_pod(&pod.0).await;
}

/// A plugin that changes an UpdateContainerResources (its answer to UpdateContainer updates the
/// container itself): what it set is what the cgroup gets and what the container's status
/// shows, the rest of the request kept.
#[tokio::test]
async fn limits_a_plugin_changes_in_an_update_are_the_ones_recorded() {
    let mut e = env("").await;
    let limit: i64 = 48 << 20;
    let resize = json!({"memory": {"limit": {"value": limit}}});
    let _plugin = Plugin::connect(
        &e.d.nri_socket(),
        &e.d.dir,
        "resizer",
        "20",
        &["-match", "resized", "-resize", &resize.to_string()],
    );
    let pod = e.pod("nri-resized").await;
    let mut config = e.config("resized", &["sleep", "600"]);
    config.linux.as_mut().unwrap().resources = Some(pb::LinuxContainerResources {
        memory_limit_in_bytes: 64 << 20,
        cpu_shares: 512,
        ..Default::default()
    });
    let id = e.run(&pod, config).await;
    e.c.update_container_resources(pb::UpdateContainerResourcesRequest {
        container_id: id.clone(),
        linux: Some(pb::LinuxContainerResources {
            memory_limit_in_bytes: 96 << 20,
            cpu_shares: 256,
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    let cgroup = e.info(&id).await["cgroup"].as_str().unwrap().to_owned();
    let mem = Daemon::cgroup_dir(&cgroup, "memory");
    let file = if cgroup_v2() {
        "memory.max"
    } else {
        "memory.limit_in_bytes"
    };
    assert_eq!(read(&mem.join(file)), limit.to_string());
    let linux = e.status(&id).await.resources.unwrap().linux.unwrap();
    assert_eq!(
        (linux.memory_limit_in_bytes, linux.cpu_shares),
        (limit, 256)
    );
    e.end_pod(&pod.0).await;
}

/// UpdatePodSandboxResources (kubelet's in-place pod resize): plugins hear UpdatePodSandbox with
/// the pod's new figures and its overhead before the pod's cgroup changes, and
/// PostUpdatePodSandbox after, whose pod carries them; a plugin's error fails the resize with
/// FailedPrecondition naming the plugin, and the cgroup keeps its figures.
#[tokio::test]
async fn a_pod_resize_reaches_plugins_before_and_after_and_one_may_refuse_it() {
    let mut e = env("").await;
    let plugin = Plugin::connect(&e.d.nri_socket(), &e.d.dir, "sizer", "40", &[]);
    let pod = e.pod("nri-resize").await;
    let resize = |memory: i64| pb::UpdatePodSandboxResourcesRequest {
        pod_sandbox_id: pod.0.clone(),
        resources: Some(pb::LinuxContainerResources {
            memory_limit_in_bytes: memory,
            cpu_shares: 1024,
            ..Default::default()
        }),
        overhead: Some(pb::LinuxContainerResources {
            memory_limit_in_bytes: 32 << 20,
            ..Default::default()
        }),
    };
    e.c.update_pod_sandbox_resources(resize(256 << 20))
        .await
        .unwrap();
    let of_pod = |name: &'static str| {
        let id = pod.0.clone();
        move |ev: &Value| ev["event"] == name && ev["pod"] == id.as_str()
    };
    let memory = |ev: &Value, key: &str| -> String {
        let shown: Value = serde_json::from_str(ev["detail"].as_str().unwrap()).unwrap();
        let limit = &shown[key]["memory"]["limit"]["value"];
        limit.to_string().trim_matches('"').to_owned()
    };
    let told = plugin.wait_for(
        "UpdatePodSandbox",
        Duration::from_secs(20),
        of_pod("UpdatePodSandbox"),
    );
    assert_eq!(
        memory(&told, "resources"),
        (256u64 << 20).to_string(),
        "{told}"
    );
    assert_eq!(
        memory(&told, "overhead"),
        (32u64 << 20).to_string(),
        "{told}"
    );
    let after = plugin.wait_for(
        "PostUpdatePodSandbox",
        Duration::from_secs(20),
        of_pod("PostUpdatePodSandbox"),
    );
    assert_eq!(
        memory(&after, "resources"),
        (256u64 << 20).to_string(),
        "{after}"
    );
    assert!(told["t"].as_i64() <= after["t"].as_i64());
    let cgroup = Daemon::cgroup_dir(&format!("{}/crust-{}", e.d.cgroup_parent, pod.0), "memory");
    let file = if cgroup_v2() {
        "memory.max"
    } else {
        "memory.limit_in_bytes"
    };
    assert_eq!(read(&cgroup.join(file)), (288u64 << 20).to_string());

    let _refuser = Plugin::connect(
        &e.d.nri_socket(),
        &e.d.dir,
        "refuser",
        "50",
        &["-fail-on", "UpdatePodSandbox"],
    );
    let err =
        e.c.update_pod_sandbox_resources(resize(512 << 20))
            .await
            .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    for part in ["refuser", "UpdatePodSandbox", &pod.0] {
        assert!(err.message().contains(part), "{part} in {err:?}");
    }
    assert_eq!(read(&cgroup.join(file)), (288u64 << 20).to_string());
    e.end_pod(&pod.0).await;
}

/// ValidateContainerAdjustment: once CreateContainer's plugins answered, a validating plugin
/// sees the container as asked for, the adjustment the others would make, who owns each field
/// and every plugin consulted; one that rejects it fails CreateContainer with FailedPrecondition
/// naming it and its reason, and nothing of the container is left.
#[tokio::test]
async fn a_validating_plugin_sees_the_adjustment_and_may_reject_the_container() {
    let mut e = env("").await;
    let adjust = json!({"annotations": {"nri.test/added": "yes"}});
    let _adjuster = Plugin::connect(
        &e.d.nri_socket(),
        &e.d.dir,
        "adjuster",
        "10",
        &["-adjust", &adjust.to_string()],
    );
    let validator = Plugin::connect(&e.d.nri_socket(), &e.d.dir, "checker", "90", &["-validate"]);
    let pod = e.pod("nri-validate").await;
    let id = e.run(&pod, e.config("checked", &["sleep", "600"])).await;
    let seen = validator.wait_for("its validation", Duration::from_secs(20), |ev| {
        ev["event"] == "ValidateContainerAdjustment" && ev["container"] == id.as_str()
    });
    let req: Value = serde_json::from_str(seen["detail"].as_str().unwrap()).unwrap();
    assert_eq!(
        req["adjust"]["annotations"]["nri.test/added"], "yes",
        "{req}"
    );
    // The container as asked for, before the adjustment.
    assert!(
        req["container"]["annotations"]["nri.test/added"].is_null(),
        "{req}"
    );
    // Owners are keyed by NRI's Field number: Annotations is 1.
    let owner = &req["owners"]["owners"][&id]["compound"]["1"]["owners"]["nri.test/added"];
    assert_eq!(owner, "10-adjuster", "{req}");
    let plugins: Vec<String> = req["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            format!(
                "{}-{}",
                p["index"].as_str().unwrap(),
                p["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(plugins, ["10-adjuster", "90-checker"]);
    assert_eq!(
        e.info(&id).await["runtimeSpec"]["annotations"]["nri.test/added"],
        "yes"
    );

    let _refuser = Plugin::connect(
        &e.d.nri_socket(),
        &e.d.dir,
        "refuser",
        "95",
        &["-validate", "-reject", "annotations are not allowed here"],
    );
    let err = e
        .create(&pod, e.config("refused", &["sleep", "600"]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    for part in [
        "95-refuser",
        "ValidateContainerAdjustment",
        "annotations are not allowed here",
    ] {
        assert!(err.message().contains(part), "{part} in {err:?}");
    }
    let listed = e.listed().await;
    assert_eq!(listed.len(), 1, "only the first container: {listed:?}");
    e.end_pod(&pod.0).await;
}

#[tokio::test]
async fn an_unsolicited_update_changes_a_running_containers_limits_and_an_eviction_stops_it() {
    let mut e = env("").await;
    let update = e.d.dir.join("update.json");
    let plugin = Plugin::connect(
        &e.d.nri_socket(),
        &e.d.dir,
        "updater",
        "20",
        &["-update", update.to_str().unwrap()],
    );
    let pod = e.pod("nri-update").await;
    let id = e.run(&pod, e.config("limited", &["sleep", "600"])).await;
    let cgroup = e.info(&id).await["cgroup"].as_str().unwrap().to_owned();
    let mem = Daemon::cgroup_dir(&cgroup, "memory");
    let file = if cgroup_v2() {
        "memory.max"
    } else {
        "memory.limit_in_bytes"
    };
    let before = read(&mem.join(file));
    let limit: u64 = 48 << 20;
    assert_ne!(before, limit.to_string());
    let req = json!({"update": [{"container_id": id, "linux": {"resources": {
        "memory": {"limit": {"value": limit}}, "pids": {"limit": 32}}}}]});
    std::fs::write(&update, req.to_string()).unwrap();
    let signal = |p: &Plugin| {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(p.child.id() as i32),
            nix::sys::signal::Signal::SIGUSR1,
        )
        .unwrap();
    };
    signal(&plugin);
    let done = plugin.wait_for("its update", Duration::from_secs(20), |e| {
        e["event"] == "UpdateContainers"
    });
    assert_eq!(done["detail"], "failed=0", "{done}");
    assert_eq!(read(&mem.join(file)), limit.to_string());
    // The container's record keeps what the plugin set: its status shows it.
    let linux = e.status(&id).await.resources.unwrap().linux.unwrap();
    assert_eq!(linux.memory_limit_in_bytes, limit as i64);
    assert_eq!(
        read(&Daemon::cgroup_dir(&cgroup, "pids").join("pids.max")),
        "32"
    );
    assert_eq!(
        e.status(&id).await.state,
        pb::ContainerState::ContainerRunning as i32
    );
    // An unknown container is reported back as failed.
    let req = json!({"update": [{"container_id": "nonexistent", "linux": {"resources": {
        "memory": {"limit": {"value": limit}}}}}]});
    std::fs::write(&update, req.to_string()).unwrap();
    let before = plugin.events().len();
    signal(&plugin);
    plugin.wait_for("its second update", Duration::from_secs(20), |e| {
        e["detail"] == "failed=1"
    });
    assert!(plugin.events().len() > before);
    // So is one crust cannot express (a block I/O class), not dropped in silence.
    let req = json!({"update": [{"container_id": id, "linux": {"resources": {
        "blockio_class": {"value": "gold"}}}}]});
    std::fs::write(&update, req.to_string()).unwrap();
    let failed_ones = |p: &Plugin| {
        p.events()
            .iter()
            .filter(|e| e["event"] == "UpdateContainers" && e["detail"] == "failed=1")
            .count()
    };
    assert_eq!(failed_ones(&plugin), 1);
    signal(&plugin);
    plugin.wait_for("its third update", Duration::from_secs(20), |_| {
        failed_ones(&plugin) == 2
    });
    // An eviction stops the container. pkg/stub cannot send one: a plugin made of NRI's own
    // multiplexer, ttrpc and generated client does.
    let evict = e.d.dir.join("evict.json");
    std::fs::write(
        &evict,
        json!({"evict": [{"container_id": id, "reason": "test"}]}).to_string(),
    )
    .unwrap();
    let evictor = Plugin::connect(
        &e.d.nri_socket(),
        &e.d.dir,
        "evictor",
        "30",
        &["-raw", "-update", evict.to_str().unwrap()],
    );
    signal(&evictor);
    let exited = e.wait_exit(&id, Duration::from_secs(20)).await;
    assert_eq!(exited.exit_code, 137, "killed");
    evictor.wait_for("its eviction", Duration::from_secs(20), |ev| {
        ev["detail"] == "failed=0"
    });
    plugin.wait_for(
        "the evicted container's stop",
        Duration::from_secs(20),
        |ev| ev["event"] == "StopContainer" && ev["container"] == id.as_str(),
    );
    remove_pod(&mut e.c, &pod.0).await;
}

/// A memory limit adjustment, as plugin flags.
fn memory_limit(bytes: u64) -> String {
    json!({"linux": {"resources": {"memory": {"limit": {"value": bytes}}}}}).to_string()
}

#[tokio::test]
async fn two_plugins_setting_one_field_fail_the_creation_naming_both_and_leak_nothing() {
    let mut e = env("").await;
    let socket = e.d.nri_socket();
    let first = Plugin::connect(
        &socket,
        &e.d.dir,
        "first",
        "10",
        &["-adjust", &memory_limit(64 << 20)],
    );
    let second = Plugin::connect(
        &socket,
        &e.d.dir,
        "second",
        "20",
        &["-adjust", &memory_limit(96 << 20)],
    );
    let pod = e.pod("nri-conflict").await;
    let err = e
        .create(&pod, e.config("contested", &["sleep", "600"]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err}");
    let msg = err.message();
    assert!(
        msg.contains("20-second") && msg.contains("10-first") && msg.contains("MemLimit"),
        "{msg}"
    );
    let listed = e.listed().await;
    assert!(listed.is_empty(), "{listed:?}");
    assert!(
        e.container_leftovers().is_empty(),
        "{:?}",
        e.container_leftovers()
    );
    // Both plugins heard of the container, and then of its end.
    for p in [&first, &second] {
        let ids: Vec<String> = p
            .events()
            .iter()
            .filter(|ev| ev["event"] == "CreateContainer")
            .map(|ev| ev["container"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(ids.len(), 1);
        assert_eq!(
            p.events_of(&ids[0]),
            ["CreateContainer", "StopContainer", "RemoveContainer"]
        );
    }
    // Without the second plugin the name is free and the first one's limit applies.
    drop(second);
    let deadline = Instant::now() + Duration::from_secs(20);
    let id = loop {
        match e
            .create(&pod, e.config("contested", &["sleep", "600"]))
            .await
        {
            Ok(id) => break id,
            Err(err) if err.message().contains("20-second") && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(err) => panic!("retry: {err}"),
        }
    };
    let spec = &e.info(&id).await["runtimeSpec"];
    assert_eq!(spec["linux"]["resources"]["memory"]["limit"], 64 << 20);
    remove_pod(&mut e.c, &pod.0).await;
}

#[tokio::test]
async fn a_plugin_that_hangs_is_dropped_and_the_call_goes_on() {
    let mut e = env("request_timeout = \"1s\"").await;
    let socket = e.d.nri_socket();
    let hung = Plugin::connect(
        &socket,
        &e.d.dir,
        "hung",
        "10",
        &["-hang-on", "CreateContainer"],
    );
    let fine = Plugin::connect(&socket, &e.d.dir, "fine", "20", &[]);
    let pod = e.pod("nri-hang").await;
    let t = Instant::now();
    let id = e.run(&pod, e.config("waited", &["sleep", "600"])).await;
    assert!(
        t.elapsed() >= Duration::from_secs(1),
        "waited for the request timeout"
    );
    assert!(
        e.d.log().contains("dropping NRI plugin"),
        "{}",
        tail(&e.d.log(), 30)
    );
    // The other plugin saw everything; the hung one nothing after its CreateContainer.
    fine.wait_for("the start", Duration::from_secs(10), |ev| {
        ev["event"] == "PostStartContainer" && ev["container"] == id.as_str()
    });
    assert_eq!(hung.events_of(&id), ["CreateContainer"]);
    let next = e.run(&pod, e.config("next", &["sleep", "600"])).await;
    assert!(hung.events_of(&next).is_empty());
    remove_pod(&mut e.c, &pod.0).await;
}

#[tokio::test]
async fn a_plugin_that_crashes_is_dropped_and_the_call_goes_on() {
    let mut e = env("").await;
    let socket = e.d.nri_socket();
    let crashing = Plugin::connect(
        &socket,
        &e.d.dir,
        "crashing",
        "10",
        &["-crash-on", "RunPodSandbox"],
    );
    let pod = e.pod("nri-crash").await;
    let status =
        e.c.pod_sandbox_status(pb::PodSandboxStatusRequest {
            pod_sandbox_id: pod.0.clone(),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        status.status.unwrap().state,
        pb::PodSandboxState::SandboxReady as i32
    );
    let mut child = crashing;
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the plugin did not crash");
        std::thread::sleep(Duration::from_millis(20));
    }
    let id = e.run(&pod, e.config("after", &["sleep", "600"])).await;
    assert_eq!(
        e.status(&id).await.state,
        pb::ContainerState::ContainerRunning as i32
    );
    remove_pod(&mut e.c, &pod.0).await;
}

#[tokio::test]
async fn a_plugin_error_fails_the_call_with_a_code_and_the_plugins_name() {
    let mut e = env("").await;
    let _p = Plugin::connect(
        &e.d.nri_socket(),
        &e.d.dir,
        "refuser",
        "30",
        &["-fail-on", "StartContainer"],
    );
    let pod = e.pod("nri-refuse").await;
    let id = e
        .create(&pod, e.config("refused", &["sleep", "600"]))
        .await
        .unwrap();
    let err =
        e.c.start_container(pb::StartContainerRequest {
            container_id: id.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err}");
    assert!(
        err.message().contains("30-refuser") && err.message().contains("StartContainer"),
        "{err}"
    );
    assert_eq!(
        e.status(&id).await.state,
        pb::ContainerState::ContainerCreated as i32
    );
    remove_pod(&mut e.c, &pod.0).await;
}

#[tokio::test]
async fn a_pre_installed_plugin_is_started_by_crust_with_its_configuration() {
    let log = std::env::temp_dir().join(format!("crust-nri-pre-{}.events", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let log_for = log.clone();
    let mut e = Env::start_with(move |d| {
        let plugins = d.dir.join("nri-plugins");
        let conf = d.dir.join("nri-conf.d");
        std::fs::create_dir_all(&plugins).unwrap();
        std::fs::create_dir_all(&conf).unwrap();
        // crust gives a plugin its name, index and socket, nothing else of its environment.
        let script = plugins.join("05-preinstalled");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nexec /usr/bin/env NRI_TEST_PLUGIN_CONFIG={} {} -log {}\n",
                conf.join("05-preinstalled.conf").display(),
                tools::nri_plugin().display(),
                log_for.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(
            conf.join("05-preinstalled.conf"),
            "-events\nRunPodSandbox,StopPodSandbox\n",
        )
        .unwrap();
        // Not plugins, each of which would leave a mark if crust ran it: an executable not
        // named NN-name, and an NN-name that is not executable.
        for (name, mode) in [("xx-odd", 0o755), ("06-plain", 0o644)] {
            let path = plugins.join(name);
            let mark = d.dir.join(format!("{name}.ran"));
            std::fs::write(
                &path,
                format!(
                    "#!/bin/sh
touch {}
",
                    mark.display()
                ),
            )
            .unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        std::fs::write(plugins.join("README"), "").unwrap();
    })
    .await;
    let events = || -> Vec<Value> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    let configure = events()
        .into_iter()
        .find(|ev| ev["event"] == "Configure")
        .expect("configured");
    let detail = configure["detail"].as_str().unwrap();
    assert!(detail.starts_with("crust "), "{detail}");
    assert!(
        detail.contains("-events\nRunPodSandbox,StopPodSandbox"),
        "its configuration: {detail}"
    );
    let pod = e.pod("nri-pre").await;
    let id = e.run(&pod, e.config("unseen", &["sleep", "600"])).await;
    remove_pod(&mut e.c, &pod.0).await;
    let got: Vec<String> = events()
        .iter()
        .filter(|ev| ev["pod"] == pod.0.as_str() || ev["container"] == id.as_str())
        .map(|ev| ev["event"].as_str().unwrap().to_owned())
        .collect();
    // Only what it subscribed to.
    assert_eq!(got, ["RunPodSandbox", "StopPodSandbox"]);
    for name in ["xx-odd", "06-plain"] {
        let mark = e.d.dir.join(format!("{name}.ran"));
        assert!(!mark.exists(), "crust ran {name}, which is not a plugin");
    }
    let _ = std::fs::remove_file(&log);
}

/// A daemon whose CDI registry is one directory of this test's, holding `crust.test/nri`:
/// device `a` (an environment variable and a device node made here, 1:3 like /dev/null).
async fn env_with_cdi() -> (Env, PathBuf) {
    let mut file = None;
    let e = Env::start_with(|d| {
        let dir = d.dir.join("cdi");
        std::fs::create_dir_all(&dir).unwrap();
        let node = d.dir.join("nri-null");
        let made = Command::new("mknod")
            .args(["-m", "0666"])
            .arg(&node)
            .args(["c", "1", "3"])
            .status()
            .unwrap();
        assert!(made.success(), "mknod {}", node.display());
        let spec = json!({
            "cdiVersion": "0.7.0",
            "kind": "crust.test/nri",
            "devices": [{"name": "a", "containerEdits": {
                "env": ["FROM_NRI_CDI=a"],
                "deviceNodes": [{"path": "/dev/nri-cdi", "hostPath": node}]
            }}]
        });
        let path = dir.join("nri.json");
        std::fs::write(&path, spec.to_string()).unwrap();
        file = Some(path);
        // A top-level key goes before the config's first table.
        let text = std::fs::read_to_string(&d.config).unwrap();
        let dirs = format!("cdi_spec_dirs = [{dir:?}]\n");
        std::fs::write(&d.config, dirs + &text).unwrap();
    })
    .await;
    (e, file.unwrap())
}

#[tokio::test]
async fn a_plugins_cdi_device_comes_from_the_nodes_registry_and_a_missing_one_fails_clearly() {
    let (mut e, file) = env_with_cdi().await;
    let adjust = json!({"CDI_devices": [{"name": "crust.test/nri=a"}]});
    let _plugin = Plugin::connect(
        &e.d.nri_socket(),
        &e.d.dir,
        "devices",
        "10",
        &["-match", "with-device", "-adjust", &adjust.to_string()],
    );
    let pod = e.pod("nri-cdi").await;
    let id = e
        .run(&pod, e.config("with-device", &["sleep", "600"]))
        .await;
    let env = e.sh(&id, "cat /proc/1/environ | tr '\\0' '\\n'").await;
    assert!(env.lines().any(|l| l == "FROM_NRI_CDI=a"), "{env}");
    // Written through the node CDI added (and the device cgroup rule it brings).
    e.sh(&id, "echo x > /dev/nri-cdi").await;
    let info = e.info(&id).await;
    assert_eq!(
        info["cdiDevices"],
        json!([{"name": "crust.test/nri=a", "specFile": file}])
    );
    e.remove(&id).await;

    // A device the node's registry does not have: CreateContainer fails naming the plugin
    // and the device, and leaves nothing behind.
    let _missing = Plugin::connect(
        &e.d.nri_socket(),
        &e.d.dir,
        "missing",
        "20",
        &[
            "-match",
            "without-device",
            "-adjust",
            &json!({"CDI_devices": [{"name": "crust.test/nri=gone"}]}).to_string(),
        ],
    );
    let err = e
        .create(&pod, e.config("without-device", &["sleep", "600"]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err}");
    let msg = err.message();
    assert!(
        msg.contains("20-missing") && msg.contains("crust.test/nri=gone"),
        "{msg}"
    );
    remove_pod(&mut e.c, &pod.0).await;
    assert!(
        e.container_leftovers().is_empty(),
        "{:?}",
        e.container_leftovers()
    );
}
