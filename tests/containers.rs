//! Container lifecycle against the real daemon: a real registry, real namespaces, cgroups and
//! overlay mounts, libcontainer in the pod's monitor. What kubelet and a user see: states and
//! times, logs in the CRI format, ExecSync, stop timeouts, OOM kills, resource updates, and
//! nothing left behind.

mod common;

use std::time::{Duration, Instant};

use common::workload::{Env, alive, records};
use common::*;
use crust::cri::pb;
use tonic::Code;

#[tokio::test]
async fn a_container_runs_logs_execs_stops_and_leaves_nothing_behind() {
    let mut e = Env::start().await;
    let pod = e.pod("web").await;
    let mut config = e.config(
        "main",
        &[
            "sh",
            "-c",
            "trap 'echo bye; exit 0' TERM; echo hello; echo oops >&2; \
             while true; do sleep 0.1; done",
        ],
    );
    config.labels.insert("tier".into(), "web".into());
    config.annotations.insert("note".into(), "kept".into());
    let id = e.create(&pod, config).await.unwrap();
    let s = e.status(&id).await;
    assert_eq!(s.state, pb::ContainerState::ContainerCreated as i32);
    assert!(s.created_at > 0 && s.started_at == 0);
    assert_eq!(s.labels["tier"], "web");
    assert_eq!(s.annotations["note"], "kept");
    assert_eq!(s.image.unwrap().image, e.image);
    // image_id is what the ImageService calls the image.
    let listed =
        e.d.images()
            .await
            .list_images(pb::ListImagesRequest::default())
            .await;
    let image_id = listed.unwrap().into_inner().images[0].id.clone();
    assert_eq!(s.image_id, image_id);
    assert_eq!(s.log_path, e.log_path(&pod, "main").to_str().unwrap());

    e.c.start_container(pb::StartContainerRequest {
        container_id: id.clone(),
    })
    .await
    .unwrap();
    let s = e.status(&id).await;
    assert_eq!(s.state, pb::ContainerState::ContainerRunning as i32);
    assert!(s.started_at >= s.created_at);
    // The process is in the container's cgroup, under the pod's.
    let info = e.info(&id).await;
    let pid = info["pid"].as_i64().unwrap();
    assert!(alive(pid));
    let cgroup = info["cgroup"].as_str().unwrap().to_owned();
    assert!(
        cgroup.starts_with(&format!("{}/crust-{}/", e.d.cgroup_parent, pod.0)),
        "container cgroup {cgroup} is under the pod's"
    );
    let procs = Daemon::cgroup_dir(&cgroup, "memory").join("cgroup.procs");
    assert!(
        std::fs::read_to_string(&procs)
            .unwrap()
            .lines()
            .any(|l| l == pid.to_string()),
        "process {pid} is in {}",
        procs.display()
    );

    // Output in the CRI log format, stdout and stderr apart.
    wait_for(|| e.log_records(&pod, "main").len() >= 2).await;
    let logs = e.log_records(&pod, "main");
    assert!(logs.contains(&"stdout F hello".to_owned()), "{logs:?}");
    assert!(logs.contains(&"stderr F oops".to_owned()), "{logs:?}");

    let r = e
        .exec(&id, &["sh", "-c", "echo out; echo err >&2; exit 3"])
        .await;
    assert_eq!(
        (r.exit_code, &r.stdout[..], &r.stderr[..]),
        (3, &b"out\n"[..], &b"err\n"[..])
    );

    let listed =
        e.c.list_containers(pb::ListContainersRequest {
            filter: Some(pb::ContainerFilter {
                pod_sandbox_id: pod.0.clone(),
                label_selector: [("tier".to_owned(), "web".to_owned())].into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .containers;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, id);

    e.stop(&id, 5).await;
    let s = e.status(&id).await;
    assert_eq!(s.state, pb::ContainerState::ContainerExited as i32);
    // The stop signal reached the shell, which ended on its own.
    assert_eq!((s.exit_code, s.reason.as_str()), (0, "Completed"));
    assert!(
        e.log_records(&pod, "main")
            .contains(&"stdout F bye".to_owned())
    );
    assert!(s.finished_at >= s.started_at);
    assert!(!alive(pid));
    e.stop(&id, 5).await; // idempotent
    e.remove(&id).await;
    e.remove(&id).await; // idempotent
    let err =
        e.c.container_status(pb::ContainerStatusRequest {
            container_id: id.clone(),
            verbose: false,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    // Its mounts, writable layer and cgroup go after the call returned.
    e.wait_reclaimed(&id).await;
    assert!(
        e.container_leftovers().is_empty(),
        "{:?}",
        e.container_leftovers()
    );
    assert!(
        !Daemon::cgroup_dir(&format!("{}/crust-{}", e.d.cgroup_parent, pod.0), "memory")
            .join(&id)
            .exists()
    );
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
    e.d.assert_clean();
}

/// A reclaim that fails (here: a mount inside the container's state directory, so that the
/// directory cannot be deleted) is not lost once RemoveContainer returned: `crust check` names
/// it, RemovePodSandbox retries it and fails while it still fails, and succeeds, leaving
/// nothing, once the cause is gone.
#[tokio::test]
async fn a_failed_reclaim_stays_visible_and_the_pods_removal_retries_it() {
    let mut e = Env::start().await;
    let pod = e.pod("stuck").await;
    let id = e.run(&pod, e.config("c", &["sleep", "600"])).await;
    e.stop(&id, 0).await;
    let dir = e.d.state.join("containers").join(&id);
    let blocker = dir.join("blocker");
    std::fs::create_dir(&blocker).unwrap();
    let tmpfs = Some("tmpfs");
    let flags = nix::mount::MsFlags::empty();
    nix::mount::mount(tmpfs, &blocker, tmpfs, flags, None::<&str>).unwrap();
    e.remove(&id).await;
    let failed = e.d.container_record_dir(&id).join("RELEASE_FAILED");
    wait_for(|| failed.exists()).await;
    let (state, root) = (e.d.state.clone(), e.d.root.clone());
    let check = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_crust"))
            .args(["check", "--state"])
            .arg(&state)
            .arg("--root")
            .arg(&root)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let said = check();
    assert!(
        said.lines()
            .any(|l| l.starts_with("warn") && l.contains("leftovers") && l.contains(&id)),
        "crust check names it: {said}"
    );
    stop_pod(&mut e.c, &pod.0).await;
    let err =
        e.c.remove_pod_sandbox(pb::RemovePodSandboxRequest {
            pod_sandbox_id: pod.0.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(err.message().contains(&id), "names the container: {err:?}");
    nix::mount::umount2(&blocker, nix::mount::MntFlags::MNT_DETACH).unwrap();
    e.remove_pod_leaving_nothing(&pod.0).await;
    let said = check();
    assert!(
        said.lines()
            .any(|l| l.starts_with("ok") && l.contains("leftovers")),
        "{said}"
    );
}

#[tokio::test]
async fn exits_have_their_code_reason_and_times() {
    let mut e = Env::start().await;
    let pod = e.pod("exits").await;
    let ok = e.run(&pod, e.config("ok", &["true"])).await;
    let bad = e.run(&pod, e.config("bad", &["sh", "-c", "exit 7"])).await;
    let s = e.wait_exit(&ok, Duration::from_secs(10)).await;
    assert_eq!((s.exit_code, s.reason.as_str()), (0, "Completed"));
    assert!(s.finished_at >= s.started_at && s.started_at > 0);
    let s = e.wait_exit(&bad, Duration::from_secs(10)).await;
    assert_eq!((s.exit_code, s.reason.as_str()), (7, "Error"));
    // A command the image does not have is an error naming it, and leaves nothing.
    let err = e
        .create(&pod, e.config("nope", &["/no/such/cmd"]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("/no/such/cmd"), "{}", err.message());
    let names: Vec<String> = Daemon::entries(&e.d.state.join("containers"));
    assert_eq!(
        names.len(),
        2,
        "only the two created containers remain: {names:?}"
    );
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
    assert!(
        e.container_leftovers().is_empty(),
        "{:?}",
        e.container_leftovers()
    );
}

#[tokio::test]
async fn a_process_ignoring_sigterm_is_killed_when_the_timeout_passes() {
    let mut e = Env::start().await;
    let pod = e.pod("stubborn").await;
    let id = e
        .run(
            &pod,
            e.config(
                "main",
                &[
                    "sh",
                    "-c",
                    "trap 'echo got TERM' TERM; while true; do sleep 0.1; done",
                ],
            ),
        )
        .await;
    // The shell's trap must be set before the signal comes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    e.stop(&id, 2).await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(6),
        "SIGKILL came after the 2 s timeout: {took:?}"
    );
    let s = e.status(&id).await;
    assert_eq!(s.exit_code, 137, "killed by SIGKILL");
    wait_for(|| {
        e.log_records(&pod, "main")
            .contains(&"stdout F got TERM".to_owned())
    })
    .await;
    // Timeout 0 kills at once.
    let id = e.run(&pod, e.config("fast", &["sleep", "600"])).await;
    let started = Instant::now();
    e.stop(&id, 0).await;
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(e.status(&id).await.exit_code, 137);
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
}

#[tokio::test]
async fn logs_split_long_lines_and_survive_a_reopen() {
    let mut e = Env::start().await;
    let pod = e.pod("logs").await;
    // A 40000-byte line, then a line, then a rotation (rename + reopen), then more lines.
    let script = "head -c 40000 /dev/zero | tr '\\0' x; echo; echo after-long; \
                  while [ ! -e /tmp/go ]; do sleep 0.05; done; echo after-reopen; sleep 600";
    let id = e.run(&pod, e.config("main", &["sh", "-c", script])).await;
    wait_for(|| e.log_records(&pod, "main").len() >= 4).await;
    let logs = e.log_records(&pod, "main");
    let tags: Vec<&str> = logs.iter().map(|l| &l[..8]).collect();
    assert_eq!(
        tags,
        ["stdout P", "stdout P", "stdout F", "stdout F"],
        "{logs:?}"
    );
    let long: String = logs[..3].iter().map(|l| &l[9..]).collect();
    assert_eq!(long, "x".repeat(40000));
    assert_eq!(logs[3], "stdout F after-long");

    let path = e.log_path(&pod, "main");
    let rotated = path.with_extension("log.1");
    std::fs::rename(&path, &rotated).unwrap();
    e.c.reopen_container_log(pb::ReopenContainerLogRequest {
        container_id: id.clone(),
    })
    .await
    .unwrap();
    e.sh(&id, "touch /tmp/go").await;
    wait_for(|| {
        e.log_records(&pod, "main")
            .contains(&"stdout F after-reopen".to_owned())
    })
    .await;
    let old = records(&std::fs::read_to_string(&rotated).unwrap());
    assert_eq!(
        old.len(),
        4,
        "nothing written after the rotation went to the old file"
    );
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
}

/// Output that ends without a newline is a partial record, as containerd writes it: kubelet
/// ends a full record with a newline when it reads the log back, and the node conformance spec
/// "should report termination message from log output if TerminationMessagePolicy
/// FallbackToLogsOnError is set" expects `echo -n DONE` to read back as "DONE".
#[tokio::test]
async fn output_without_a_final_newline_ends_in_a_partial_record() {
    let mut e = Env::start().await;
    let pod = e.pod("tail").await;
    let id = e
        .run(
            &pod,
            e.config("main", &["sh", "-c", "echo one; printf DONE; exit 1"]),
        )
        .await;
    // Everything the process wrote is in the log once its exit is reported.
    let s = e.wait_exit(&id, Duration::from_secs(30)).await;
    assert_eq!(s.exit_code, 1);
    assert_eq!(
        e.log_records(&pod, "main"),
        ["stdout F one", "stdout P DONE"],
    );
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
}

#[tokio::test]
async fn exec_sync_times_out_bounds_its_output_and_needs_a_running_container() {
    let mut e = Env::start().await;
    let pod = e.pod("exec").await;
    let id = e.run(&pod, e.config("main", &["sleep", "600"])).await;
    let started = Instant::now();
    let err =
        e.c.exec_sync(pb::ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["sleep".into(), "30".into()],
            timeout: 1,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert!(
        err.message().contains("timed out after 1s"),
        "{}",
        err.message()
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // 20 MiB of output is more than ExecSync's 16 MiB: an error naming the limit.
    let err =
        e.c.exec_sync(pb::ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec![
                "sh".into(),
                "-c".into(),
                "head -c 20971520 /dev/zero".into(),
            ],
            timeout: 30,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("16777216"), "{}", err.message());
    // 1 MiB comes back whole.
    let r = e
        .exec(&id, &["sh", "-c", "head -c 1048576 /dev/zero"])
        .await;
    assert_eq!(r.stdout.len(), 1 << 20);
    let err =
        e.c.exec_sync(pb::ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec![],
            timeout: 1,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    e.stop(&id, 0).await;
    let err =
        e.c.exec_sync(pb::ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["true".into()],
            timeout: 1,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
}

#[tokio::test]
async fn a_container_over_its_memory_limit_is_oom_killed() {
    let mut e = Env::start().await;
    let pod = e.pod("hog").await;
    let id = e.run(&pod, e.memory_hog("hog")).await;
    let s = e.wait_exit(&id, Duration::from_secs(30)).await;
    assert_eq!(
        (s.exit_code, s.reason.as_str()),
        (137, "OOMKilled"),
        "{s:?}"
    );
    // A plain SIGKILL is not an OOM kill.
    let id = e.run(&pod, e.config("killed", &["sleep", "600"])).await;
    e.stop(&id, 0).await;
    let s = e.status(&id).await;
    assert_eq!((s.exit_code, s.reason.as_str()), (137, "Error"));
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
}

#[tokio::test]
async fn resource_updates_reach_the_live_cgroup() {
    let mut e = Env::start().await;
    let pod = e.pod("limits").await;
    let mut config = e.config("main", &["sleep", "600"]);
    config.linux = Some(pb::LinuxContainerConfig {
        resources: Some(pb::LinuxContainerResources {
            memory_limit_in_bytes: 64 << 20,
            cpu_period: 100_000,
            cpu_quota: 50_000,
            cpu_shares: 512,
            ..Default::default()
        }),
        ..Default::default()
    });
    let id = e.run(&pod, config).await;
    let cgroup = e.info(&id).await["cgroup"].as_str().unwrap().to_owned();
    let v2 = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let memory = |e: &Env| {
        let _ = e;
        let dir = Daemon::cgroup_dir(&cgroup, "memory");
        let file = if v2 {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        };
        std::fs::read_to_string(dir.join(file))
            .unwrap()
            .trim()
            .to_owned()
    };
    let quota = || {
        let dir = Daemon::cgroup_dir(&cgroup, "cpu");
        if v2 {
            std::fs::read_to_string(dir.join("cpu.max"))
                .unwrap()
                .trim()
                .to_owned()
        } else {
            std::fs::read_to_string(dir.join("cpu.cfs_quota_us"))
                .unwrap()
                .trim()
                .to_owned()
        }
    };
    assert_eq!(memory(&e), (64u64 << 20).to_string());
    assert_eq!(quota(), if v2 { "50000 100000" } else { "50000" });
    e.c.update_container_resources(pb::UpdateContainerResourcesRequest {
        container_id: id.clone(),
        linux: Some(pb::LinuxContainerResources {
            memory_limit_in_bytes: 128 << 20,
            cpu_period: 100_000,
            cpu_quota: 20_000,
            cpu_shares: 256,
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(memory(&e), (128u64 << 20).to_string());
    assert_eq!(quota(), if v2 { "20000 100000" } else { "20000" });
    let s = e.status(&id).await;
    let r = s.resources.unwrap().linux.unwrap();
    assert_eq!((r.memory_limit_in_bytes, r.cpu_quota), (128 << 20, 20_000));
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
}

#[tokio::test]
async fn bad_requests_get_the_right_code_and_name_the_problem() {
    let mut e = Env::start().await;
    let pod = e.pod("errors").await;
    let id = e
        .create(&pod, e.config("dup", &["sleep", "600"]))
        .await
        .unwrap();
    let err = e
        .create(&pod, e.config("dup", &["sleep", "600"]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists);
    assert!(
        err.message().contains(&id),
        "names the existing container: {}",
        err.message()
    );

    let mut unknown = pod.clone();
    unknown.0 = "0".repeat(64);
    let err = e
        .create(&unknown, e.config("x", &["true"]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);

    let mut config = e.config("noimage", &["true"]);
    config.image.as_mut().unwrap().image = format!("{}/busybox:absent", e.reg.addr);
    let err = e.create(&pod, config).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(
        err.message().contains("busybox:absent"),
        "{}",
        err.message()
    );

    let mut config = e.config("group-only", &["true"]);
    config.linux.as_mut().unwrap().security_context = Some(pb::LinuxContainerSecurityContext {
        run_as_group: Some(pb::Int64Value { value: 5 }),
        ..Default::default()
    });
    let err = e.create(&pod, config).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("run_as_group"), "{}", err.message());

    let mut config = e.config("missing-path", &["true"]);
    config.mounts.push(pb::Mount {
        container_path: "/data".into(),
        host_path: "/no/such/host/dir".into(),
        ..Default::default()
    });
    let err = e.create(&pod, config).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("/no/such/host/dir"),
        "{}",
        err.message()
    );

    let err =
        e.c.start_container(pb::StartContainerRequest {
            container_id: "f".repeat(64),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);

    // A stopped pod takes no containers.
    stop_pod(&mut e.c, &pod.0).await;
    let err = e
        .create(&pod, e.config("late", &["true"]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    // Its container was stopped with it.
    assert_eq!(
        e.status(&id).await.state,
        pb::ContainerState::ContainerExited as i32
    );
    e.remove_pod_leaving_nothing(&pod.0).await;
}

async fn wait_for(mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ok() {
        assert!(Instant::now() < deadline, "condition not met within 10s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn image_volumes_mount_an_image_read_only_and_go_with_the_container() {
    let mut e = Env::start().await;
    let pod = e.pod("volumes").await;
    let mut config = e.config("main", &["sleep", "600"]);
    let volume = |path: &str, sub: &str, image: &str| pb::Mount {
        container_path: path.into(),
        readonly: true,
        image: Some(pb::ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        image_sub_path: sub.into(),
        ..Default::default()
    };
    config.mounts = vec![
        volume("/vol", "", &e.image),
        volume("/etc-only", "etc", &e.image),
    ];
    let id = e.run(&pod, config).await;
    assert!(e.sh(&id, "ls /vol/bin/busybox").await.contains("busybox"));
    assert!(
        e.sh(&id, "cat /etc-only/group")
            .await
            .contains("extra:x:3000")
    );
    let r = e.exec(&id, &["touch", "/vol/new"]).await;
    assert_ne!(r.exit_code, 0, "an image volume is read-only");
    let s = e.status(&id).await;
    let mounted = s
        .mounts
        .iter()
        .find(|m| m.container_path == "/vol")
        .unwrap();
    assert_eq!(
        mounted.image.as_ref().unwrap().image_ref,
        s.image_id,
        "the volume's image id"
    );
    // Bad requests: writable, or a sub-path the image does not have.
    let mut config = e.config("writable", &["true"]);
    config.mounts = vec![pb::Mount {
        readonly: false,
        ..volume("/vol", "", &e.image)
    }];
    assert_eq!(
        e.create(&pod, config).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    let mut config = e.config("nosub", &["true"]);
    config.mounts = vec![volume("/vol", "not-there", &e.image)];
    let err = e.create(&pod, config).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("not-there"), "{}", err.message());
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
    assert!(
        e.container_leftovers().is_empty(),
        "{:?}",
        e.container_leftovers()
    );
    let holds = Daemon::entries(&e.d.root.join("images/holds"));
    assert!(holds.is_empty(), "image holds left: {holds:?}");
}
