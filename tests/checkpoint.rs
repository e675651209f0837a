//! CheckpointContainer with the real CRIU (hack/install-criu.sh: CRIU 4.1 where the system's is
//! older or absent) and the real clients: `crictl checkpoint --export` writes one archive in
//! containerd's layout that checkpointctl (built from its pinned Go module) shows; the
//! container runs on, unfrozen, its counter going up; what it wrote and removed in its image's
//! files is in the archive. A container that does not run, a location that is not a path, and
//! a node without a usable CRIU each get a clear error and change nothing. A daemon killed
//! after any durable step of a checkpoint leaves no frozen container, work directory or
//! half-written archive once it is back.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::workload::{Env, tail};
use common::*;
use crust::cri::pb;

/// A daemon whose `criu_path` is `criu` (through a drop-in, as an operator would set it).
async fn env_with_criu(criu: &Path) -> Env {
    let toml = format!("criu_path = {:?}\n", criu.display().to_string());
    Env::start_with(move |d| d.drop_in("50-criu.toml", &toml)).await
}

/// An empty directory for the test's archives, as an operator's export directory.
fn exports(e: &Env) -> PathBuf {
    let dir = e.d.dir.join("exports");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The line `crust check` prints about CRIU for the daemon's configuration.
fn check_line(e: &Env) -> String {
    let text = e.d.check();
    text.lines()
        .find(|l| l.contains(" criu "))
        .unwrap_or_else(|| panic!("no criu line in crust check: {text}"))
        .to_owned()
}

/// A pod as kubelet makes one with a container counting up in its log every 100 ms, which
/// first changed its image's files: wrote /data/kept, removed /etc/group.
async fn counter(e: &mut Env, name: &str) -> ((String, pb::PodSandboxConfig), String) {
    let pod = e.pod(name).await;
    let script = "echo kept > /data/kept; rm /etc/group; i=0; \
                  while true; do echo $i; i=$((i+1)); sleep 0.1; done";
    let id = e
        .run(&pod, e.config("counter", &["sh", "-c", script]))
        .await;
    wait_counted_past(e, &pod, 3).await;
    (pod, id)
}

/// The counter's last logged value.
fn last_count(e: &Env, pod: &(String, pb::PodSandboxConfig)) -> i64 {
    e.log_records(pod, "counter")
        .iter()
        .rev()
        .find_map(|r| r.strip_prefix("stdout F ").and_then(|n| n.parse().ok()))
        .unwrap_or(-1)
}

async fn wait_counted_past(e: &Env, pod: &(String, pb::PodSandboxConfig), n: i64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while last_count(e, pod) <= n {
        assert!(
            Instant::now() < deadline,
            "the counter did not pass {n}: {:?}",
            tail(&e.log_records(pod, "counter").join("\n"), 5)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The freezer state of the container's cgroup (v1 `freezer.state`, v2 `cgroup.freeze`).
async fn freezer_state(e: &mut Env, id: &str) -> String {
    let cgroup = e.info(id).await["cgroup"].as_str().unwrap().to_owned();
    let dir = Daemon::cgroup_dir(&cgroup, "freezer");
    if let Ok(v1) = std::fs::read_to_string(dir.join("freezer.state")) {
        return v1.trim().to_owned();
    }
    let v2 = dir.join("cgroup.freeze");
    match std::fs::read_to_string(&v2) {
        Ok(s) if s.trim() == "0" => "THAWED".into(),
        Ok(_) => "FROZEN".into(),
        Err(e) => panic!("no freezer for cgroup {cgroup}: {} ({e})", v2.display()),
    }
}

/// The names in a tar archive.
fn tar_names(path: &Path) -> Vec<String> {
    let out = Command::new("tar").arg("-tf").arg(path).output().unwrap();
    assert!(out.status.success(), "tar -tf {}", path.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim_start_matches("./").to_owned())
        .collect()
}

/// One member of a tar archive.
fn tar_member(path: &Path, member: &str) -> Vec<u8> {
    let out = Command::new("tar")
        .arg("-xOf")
        .arg(path)
        .arg(member)
        .output()
        .unwrap();
    assert!(out.status.success(), "{member} of {}", path.display());
    out.stdout
}

/// What a checkpoint must not leave behind: its work directory, its in-flight record, a
/// temporary archive in the export directory.
fn assert_no_checkpoint_leftovers(e: &Env, id: &str, export_dir: &Path) {
    let work = e.d.root.join("containers").join(id).join("checkpoint");
    assert!(!work.exists(), "work directory left: {}", work.display());
    let record =
        e.d.state
            .join("containers")
            .join(id)
            .join("checkpoint.json");
    assert!(!record.exists(), "in-flight record left");
    let temps: Vec<String> = Daemon::entries(export_dir)
        .into_iter()
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(temps.is_empty(), "temporary archives left: {temps:?}");
}

#[tokio::test]
async fn crictl_checkpoint_writes_an_archive_checkpointctl_shows_and_the_container_runs_on() {
    let mut e = env_with_criu(&tools::criu()).await;
    let (pod, id) = counter(&mut e, "ckpt").await;
    let line = check_line(&e);
    assert!(
        line.starts_with("ok") && line.contains("`criu check` passes"),
        "{line}"
    );
    let export = exports(&e);
    let archive = export.join("counter.tar");

    let (code, out, err) = e.crictl(
        &[
            "checkpoint",
            &format!("--export={}", archive.display()),
            &id,
        ],
        "",
    );
    assert_eq!(
        code,
        0,
        "crictl checkpoint: {out} {err}\n{}",
        tail(&e.d.log(), 20)
    );
    let at_dump = last_count(&e, &pod);

    // One archive, readable by its owner only (it holds the container's memory).
    let mode = std::fs::metadata(&archive).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "archive mode {mode:o}");
    let names = tar_names(&archive);
    for member in [
        "checkpoint/inventory.img",
        "checkpoint/pstree.img",
        "spec.dump",
        "config.dump",
        "status",
        "rootfs-diff.tar",
        "deleted.files",
        "dump.log",
        "container.log",
    ] {
        assert!(
            names.iter().any(|n| n == member),
            "{member} not in {names:?}"
        );
    }
    assert!(
        names.iter().any(|n| n.starts_with("checkpoint/pages-")),
        "{names:?}"
    );
    let config: serde_json::Value =
        serde_json::from_slice(&tar_member(&archive, "config.dump")).unwrap();
    assert_eq!(config["id"], id.as_str());
    assert_eq!(config["name"], "counter");
    assert_eq!(config["rootfsImageName"], e.image.as_str());
    let spec: serde_json::Value =
        serde_json::from_slice(&tar_member(&archive, "spec.dump")).unwrap();
    assert_eq!(
        spec["annotations"]["io.kubernetes.cri.container-name"],
        "counter"
    );
    let deleted: Vec<String> =
        serde_json::from_slice(&tar_member(&archive, "deleted.files")).unwrap();
    assert_eq!(deleted, ["/etc/group"]);
    let diff = export.join("diff.tar");
    std::fs::write(&diff, tar_member(&archive, "rootfs-diff.tar")).unwrap();
    assert_eq!(tar_member(&diff, "data/kept"), b"kept\n");

    // checkpointctl reads it as it reads containerd's.
    let show = Command::new(tools::checkpointctl())
        .arg("show")
        .arg(&archive)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&show.stdout);
    assert!(
        show.status.success(),
        "checkpointctl show: {text} {}",
        String::from_utf8_lossy(&show.stderr)
    );
    for word in ["counter", &e.image, &id[..12], "libcontainer"] {
        assert!(
            text.contains(word),
            "{word} not in checkpointctl show:\n{text}"
        );
    }

    // The container was not told: it runs on, thawed, counting past where it was dumped.
    assert_eq!(
        e.status(&id).await.state,
        pb::ContainerState::ContainerRunning as i32
    );
    assert_eq!(freezer_state(&mut e, &id).await, "THAWED");
    wait_counted_past(&e, &pod, at_dump + 3).await;
    assert_no_checkpoint_leftovers(&e, &id, &export);
    e.remove_pod_leaving_nothing(&pod.0).await;
}

#[tokio::test]
async fn only_a_running_container_at_an_absolute_location_can_be_checkpointed() {
    let mut e = env_with_criu(&tools::criu()).await;
    let pod = e.pod("ckpt-states").await;
    let export = exports(&e);
    let created = e
        .create(&pod, e.config("created", &["sleep", "60"]))
        .await
        .unwrap();
    let exited = e.run(&pod, e.config("exited", &["true"])).await;
    e.wait_exit(&exited, Duration::from_secs(10)).await;
    let running = e.run(&pod, e.config("running", &["sleep", "60"])).await;

    let ask = |id: String, location: PathBuf| {
        let mut c = e.c.clone();
        async move {
            c.checkpoint_container(pb::CheckpointContainerRequest {
                container_id: id,
                location: location.display().to_string(),
                timeout: 0,
            })
            .await
            .expect_err("refused")
        }
    };
    for (id, state) in [(&created, "created"), (&exited, "exited")] {
        let err = ask(id.clone(), export.join("x.tar")).await;
        assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
        assert!(
            err.message().contains(id) && err.message().contains(state),
            "{err:?}"
        );
    }
    for bad in ["relative.tar", "/nonexistent-dir/x.tar", ""] {
        let err = ask(running.clone(), PathBuf::from(bad)).await;
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{bad}: {err:?}");
        assert!(err.message().contains("checkpoint location"), "{err:?}");
    }
    let err = ask("no-such-container".into(), export.join("x.tar")).await;
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
    assert!(
        Daemon::entries(&export).is_empty(),
        "{:?}",
        Daemon::entries(&export)
    );
    assert_no_checkpoint_leftovers(&e, &running, &export);
    e.remove_pod_leaving_nothing(&pod.0).await;
}

#[tokio::test]
async fn without_a_usable_criu_a_checkpoint_says_support_is_not_available() {
    let mut e = env_with_criu(Path::new("/nonexistent/criu")).await;
    let (pod, id) = counter(&mut e, "no-criu").await;
    let export = exports(&e);
    let err =
        e.c.checkpoint_container(pb::CheckpointContainerRequest {
            container_id: id.clone(),
            location: export.join("x.tar").display().to_string(),
            timeout: 0,
        })
        .await
        .expect_err("no CRIU");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    // The words the node suite's checkpoint spec skips on, and where crust looked.
    assert!(
        err.message()
            .contains("checkpoint/restore support not available")
            && err.message().contains("/nonexistent/criu"),
        "{err:?}"
    );
    assert_eq!(freezer_state(&mut e, &id).await, "THAWED");
    assert!(Daemon::entries(&export).is_empty());
    let line = check_line(&e);
    assert!(
        line.starts_with("warn") && line.contains("/nonexistent/criu"),
        "{line}"
    );
    e.remove_pod_leaving_nothing(&pod.0).await;
}

/// The crash points a traced checkpoint logged, in order.
fn traced_steps(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|l| l.split_once("crash point CheckpointContainer#"))
        .filter(|(_, rest)| !rest.contains(" reached: "))
        .filter_map(|(_, rest)| rest.split_once(": ").map(|(_, what)| what.to_owned()))
        .collect()
}

#[tokio::test]
async fn a_daemon_killed_after_any_step_of_a_checkpoint_leaves_nothing_frozen_or_half_written() {
    let criu = tools::criu();
    let mut e = env_with_criu(&criu).await;
    let (pod, id) = counter(&mut e, "ckpt-crash").await;
    let export = exports(&e);
    let archive = export.join("counter.tar");
    let checkpoint = |c: &mut pb::runtime_service_client::RuntimeServiceClient<_>| {
        let req = pb::CheckpointContainerRequest {
            container_id: id.clone(),
            location: archive.display().to_string(),
            timeout: 0,
        };
        let mut c = c.clone();
        async move { c.checkpoint_container(req).await }
    };

    // A traced run counts the steps.
    e.d.kill9();
    e.d.launch_with(&[("CRUST_CRASH", "CheckpointContainer:0")]);
    e.c = e.d.client().await;
    checkpoint(&mut e.c).await.unwrap();
    let steps = traced_steps(&e.d.log());
    assert!(steps.len() >= 6, "too few steps traced: {steps:?}");
    eprintln!("a checkpoint's {} durable steps: {steps:#?}", steps.len());
    std::fs::remove_file(&archive).unwrap();

    for (n, step) in steps.iter().enumerate().map(|(i, s)| (i + 1, s)) {
        let point = format!("CheckpointContainer#{n} ({step})");
        e.d.kill9();
        e.d.launch_with(&[("CRUST_CRASH", &format!("CheckpointContainer:{n}"))]);
        e.c = e.d.client().await;
        let _ = checkpoint(&mut e.c).await.expect_err(&point);
        crash::assert_killed_at(&mut e, &point, "reached");
        e.d.launch();
        e.c = e.d.client().await;
        // Back: the container runs on, thawed; no work directory, record or temporary file;
        // an archive at the location is a whole one (the crash came after its rename).
        assert_eq!(
            e.status(&id).await.state,
            pb::ContainerState::ContainerRunning as i32,
            "{point}"
        );
        assert_eq!(freezer_state(&mut e, &id).await, "THAWED", "{point}");
        assert_no_checkpoint_leftovers(&e, &id, &export);
        if archive.exists() {
            assert!(
                tar_names(&archive)
                    .iter()
                    .any(|n| n == "checkpoint/inventory.img"),
                "{point}: a partial archive at the location"
            );
            std::fs::remove_file(&archive).unwrap();
        }
        // And a checkpoint now works.
        checkpoint(&mut e.c)
            .await
            .unwrap_or_else(|err| panic!("{point}: a checkpoint after the restart: {err:?}"));
        std::fs::remove_file(&archive).unwrap();
    }
    let at = last_count(&e, &pod);
    wait_counted_past(&e, &pod, at + 2).await;
    e.remove_pod_leaving_nothing(&pod.0).await;
}

/// The answer of the probe's server at `ip`:8080 ("served N"), asked until it answers.
async fn served(ip: &str) -> String {
    use std::io::Read;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let answer = std::net::TcpStream::connect((ip, 8080)).and_then(|mut s| {
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            let mut text = String::new();
            s.read_to_string(&mut text)?;
            Ok(text)
        });
        match answer {
            Ok(text) if text.starts_with("served ") => return text.trim().to_owned(),
            other => assert!(
                Instant::now() < deadline,
                "no answer from {ip}:8080: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn pod_ip(e: &mut Env, pod: &str) -> String {
    let s =
        e.c.pod_sandbox_status(pb::PodSandboxStatusRequest {
            pod_sandbox_id: pod.into(),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner();
    s.status.unwrap().network.unwrap().ip
}

/// A container of the probe's server on port 8080 (the probe mounted from the host).
fn server(e: &Env) -> pb::ContainerConfig {
    let mut config = e.config("server", &["/probe", "serve", "8080"]);
    config.mounts.push(pb::Mount {
        container_path: "/probe".into(),
        host_path: tools::probe().display().to_string(),
        readonly: true,
        ..Default::default()
    });
    config
}

/// A container config whose image is the checkpoint archive `archive`, as CRI-O takes one.
fn from_archive(e: &Env, name: &str, archive: &Path) -> pb::ContainerConfig {
    let mut config = e.config(name, &[]);
    config.image = Some(pb::ImageSpec {
        image: archive.display().to_string(),
        ..Default::default()
    });
    config
}

async fn checkpoint_to(e: &mut Env, id: &str, archive: &Path) {
    e.c.checkpoint_container(pb::CheckpointContainerRequest {
        container_id: id.into(),
        location: archive.display().to_string(),
        timeout: 0,
    })
    .await
    .unwrap_or_else(|err| panic!("checkpoint of {id}: {err:?}\n{}", tail(&e.d.log(), 20)));
}

#[tokio::test]
async fn a_restored_container_carries_on_in_a_new_pod_with_its_files_and_its_listening_socket() {
    let mut e = env_with_criu(&tools::criu()).await;
    let (pod, counter_id) = counter(&mut e, "ckpt-src").await;
    let server_id = e.run(&pod, server(&e)).await;
    let ip = pod_ip(&mut e, &pod.0).await;
    assert_eq!(served(&ip).await, "served 1");
    let export = exports(&e);
    let (counter_tar, server_tar) = (export.join("counter.tar"), export.join("server.tar"));
    checkpoint_to(&mut e, &counter_id, &counter_tar).await;
    let at_dump = last_count(&e, &pod);
    checkpoint_to(&mut e, &server_id, &server_tar).await;
    // The originals run on.
    assert_eq!(served(&ip).await, "served 2");

    let copy = e.pod("ckpt-copy").await;
    let counter2 = e
        .create(&copy, from_archive(&e, "counter", &counter_tar))
        .await;
    let counter2 =
        counter2.unwrap_or_else(|err| panic!("restore: {err:?}\n{}", tail(&e.d.log(), 20)));
    // Without the host's mount it had, the restore says which one it needs.
    let err = e
        .create(&copy, from_archive(&e, "server", &server_tar))
        .await
        .expect_err("a mount missing");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("bind mount at /probe"), "{err:?}");
    let mut with_probe = from_archive(&e, "server", &server_tar);
    with_probe.mounts = server(&e).mounts;
    let server2 = e.create(&copy, with_probe).await.unwrap();
    // Created, not running: its processes wait, stopped, for StartContainer.
    let status = e.status(&counter2).await;
    assert_eq!(status.state, pb::ContainerState::ContainerCreated as i32);
    assert_eq!(
        status.image.unwrap().image,
        e.image,
        "the image it was made from"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        e.log_records(&copy, "counter").is_empty(),
        "ran before its start"
    );
    for id in [&counter2, &server2] {
        e.c.start_container(pb::StartContainerRequest {
            container_id: id.clone(),
        })
        .await
        .unwrap_or_else(|err| panic!("start of the restored {id}: {err:?}"));
    }

    // The counter goes on from where it was dumped, not from 0.
    wait_counted_past(&e, &copy, at_dump + 2).await;
    let first: i64 = e.log_records(&copy, "counter")[0]
        .strip_prefix("stdout F ")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        first > at_dump - 3 && first <= at_dump + 2,
        "the restored counter began at {first}, dumped at {at_dump}"
    );
    // What it wrote is there, what it removed is still gone; exec works in it.
    assert_eq!(e.sh(&counter2, "cat /data/kept").await, "kept\n");
    assert_eq!(
        e.sh(&counter2, "test -e /etc/group && echo there || echo gone")
            .await,
        "gone\n"
    );
    // The server listens at the new pod's address and its count went on from the dump's.
    let ip2 = pod_ip(&mut e, &copy.0).await;
    assert_ne!(ip, ip2);
    assert_eq!(served(&ip2).await, "served 2");
    assert_eq!(served(&ip).await, "served 3");

    // Both pods go, and with them every container, restored or not, leaving nothing.
    remove_pod(&mut e.c, &copy.0).await;
    e.remove_pod_leaving_nothing(&pod.0).await;
}

#[tokio::test]
async fn a_file_that_is_not_a_checkpoint_is_refused_and_leaves_nothing() {
    let mut e = env_with_criu(&tools::criu()).await;
    let pod = e.pod("not-ckpt").await;
    let bogus = e.d.dir.join("bogus.tar");
    let staged = e.d.dir.join("staged");
    std::fs::create_dir_all(&staged).unwrap();
    std::fs::write(staged.join("hello"), "x").unwrap();
    let out = Command::new("tar")
        .arg("-cf")
        .arg(&bogus)
        .arg("-C")
        .arg(&staged)
        .arg("hello")
        .status()
        .unwrap();
    assert!(out.success());
    let err = e
        .create(&pod, from_archive(&e, "bogus", &bogus))
        .await
        .expect_err("not a checkpoint");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().contains("not a checkpoint archive"),
        "{err:?}"
    );
    assert!(e.listed().await.is_empty());
    assert!(
        Daemon::entries(&e.d.root.join("containers")).is_empty(),
        "{:?}",
        Daemon::entries(&e.d.root.join("containers"))
    );
    e.remove_pod_leaving_nothing(&pod.0).await;
}

/// The values a `probe shm` container printed.
fn shm_values(e: &Env, pod: &(String, pb::PodSandboxConfig), name: &str) -> Vec<u64> {
    e.log_records(pod, name)
        .iter()
        .filter_map(|r| r.strip_prefix("stdout F ")?.parse().ok())
        .collect()
}

async fn wait_values(e: &Env, pod: &(String, pb::PodSandboxConfig), name: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while shm_values(e, pod, name).len() < n {
        assert!(
            Instant::now() < deadline,
            "{name} printed {:?}",
            e.log_records(pod, name)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A container counting in the pod's shared memory (/dev/shm/counter) with the probe.
fn shm_counter(e: &Env, name: &str) -> pb::ContainerConfig {
    let mut config = e.config(name, &["/probe", "shm", "/dev/shm/counter"]);
    config.mounts = server(e).mounts;
    config
}

#[tokio::test]
async fn a_pod_checkpoint_restores_as_a_new_pod_whose_containers_still_share_memory() {
    let mut e = env_with_criu(&tools::criu()).await;
    let pod = e.pod("duo").await;
    let a = e.run(&pod, shm_counter(&e, "a")).await;
    let b = e.run(&pod, shm_counter(&e, "b")).await;
    wait_values(&e, &pod, "a", 3).await;
    wait_values(&e, &pod, "b", 3).await;
    let out = e.d.dir.join("pod-checkpoint");
    std::fs::create_dir_all(&out).unwrap();
    let request = |ids: Vec<String>, options: &[(&str, &str)]| pb::CheckpointPodRequest {
        pod_sandbox_id: pod.0.clone(),
        output_path: out.display().to_string(),
        container_ids: ids,
        options: options
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    };

    // What the API refuses, before anything is written.
    for (bad, why) in [
        (request(vec![a.clone()], &[("x", "y")]), "option"),
        (request(vec![], &[]), "container_ids"),
        (request(vec![a.clone(), a.clone()], &[]), "container_ids"),
    ] {
        let err = e.c.checkpoint_pod(bad).await.expect_err(why);
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains(why), "{err:?}");
    }
    assert!(Daemon::entries(&out).is_empty());

    e.c.checkpoint_pod(request(vec![a.clone(), b.clone()], &[]))
        .await
        .unwrap_or_else(|err| panic!("CheckpointPod: {err:?}\n{}", tail(&e.d.log(), 20)));
    let dumped = shm_values(&e, &pod, "a")
        .into_iter()
        .chain(shm_values(&e, &pod, "b"))
        .max()
        .unwrap();
    let mut files = Daemon::entries(&out);
    files.sort();
    assert_eq!(files, ["containers", "devshm.tar", "pod.json"]);
    let mut archives = Daemon::entries(&out.join("containers"));
    archives.sort();
    assert_eq!(archives, ["a.tar", "b.tar"]);
    for id in [&a, &b] {
        assert_eq!(freezer_state(&mut e, id).await, "THAWED");
        assert_no_checkpoint_leftovers(&e, id, &out.join("containers"));
    }
    // An output directory that is not empty is refused.
    let err =
        e.c.checkpoint_pod(request(vec![a.clone()], &[]))
            .await
            .expect_err("not empty");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");

    // RestorePod: a new pod, each container CREATED from its archive with the config of its
    // name; a name the checkpoint does not hold is refused and leaves no pod.
    let mut config = pod_config("duo-copy");
    with_namespaces(
        &mut config,
        pb::NamespaceMode::Pod,
        pb::NamespaceMode::Container,
        pb::NamespaceMode::Pod,
    );
    config.log_directory = e.d.dir.join("logs/duo-copy").display().to_string();
    let restore = |configs: Vec<pb::ContainerConfig>| pb::RestorePodRequest {
        checkpoint_path: out.display().to_string(),
        config: Some(config.clone()),
        runtime_handler: String::new(),
        options: Default::default(),
        container_configs: configs,
    };
    let err =
        e.c.restore_pod(restore(vec![shm_counter(&e, "a"), shm_counter(&e, "c")]))
            .await
            .expect_err("names differ");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    let pods =
        e.c.list_pod_sandbox(pb::ListPodSandboxRequest::default())
            .await
            .unwrap()
            .into_inner()
            .items;
    assert_eq!(pods.len(), 1, "{pods:?}");

    let restored =
        e.c.restore_pod(restore(vec![shm_counter(&e, "b"), shm_counter(&e, "a")]))
            .await
            .unwrap_or_else(|err| panic!("RestorePod: {err:?}\n{}", tail(&e.d.log(), 30)))
            .into_inner();
    let copy = (restored.pod_sandbox_id.clone(), config.clone());
    let mut names: Vec<&str> = restored
        .restored_containers
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    names.sort();
    assert_eq!(names, ["a", "b"]);
    for c in &restored.restored_containers {
        let status = e.status(&c.container_id).await;
        assert_eq!(status.state, pb::ContainerState::ContainerCreated as i32);
        e.c.start_container(pb::StartContainerRequest {
            container_id: c.container_id.clone(),
        })
        .await
        .unwrap();
    }
    wait_values(&e, &copy, "a", 5).await;
    wait_values(&e, &copy, "b", 5).await;
    // Still one counter in shared memory: past the dump's, and no value printed twice (two
    // private copies would each go on from the same value).
    let (va, vb) = (shm_values(&e, &copy, "a"), shm_values(&e, &copy, "b"));
    let mut all: Vec<u64> = va.iter().chain(&vb).copied().collect();
    all.sort();
    let before = all.len();
    all.dedup();
    assert_eq!(all.len(), before, "a printed {va:?}, b printed {vb:?}");
    assert!(
        all[0] + 10 > dumped && all[0] < dumped + 10,
        "restored from {}, dumped at {dumped}",
        all[0]
    );

    remove_pod(&mut e.c, &copy.0).await;
    e.remove_pod_leaving_nothing(&pod.0).await;
}

#[tokio::test]
async fn a_daemon_killed_after_any_step_of_a_pod_checkpoint_leaves_its_pod_running_and_no_partial_checkpoint()
 {
    let mut e = env_with_criu(&tools::criu()).await;
    let pod = e.pod("duo-crash").await;
    let ids = [
        e.run(&pod, shm_counter(&e, "a")).await,
        e.run(&pod, shm_counter(&e, "b")).await,
    ];
    wait_values(&e, &pod, "b", 2).await;
    let out = e.d.dir.join("pod-checkpoint");
    std::fs::create_dir_all(&out).unwrap();
    let request = pb::CheckpointPodRequest {
        pod_sandbox_id: pod.0.clone(),
        output_path: out.display().to_string(),
        container_ids: ids.to_vec(),
        options: Default::default(),
    };
    let empty_out = || {
        for entry in Daemon::entries(&out) {
            let path = out.join(entry);
            if path.is_dir() {
                std::fs::remove_dir_all(path).unwrap();
            } else {
                std::fs::remove_file(path).unwrap();
            }
        }
    };

    e.d.kill9();
    e.d.launch_with(&[("CRUST_CRASH", "CheckpointPod:0")]);
    e.c = e.d.client().await;
    e.c.checkpoint_pod(request.clone()).await.unwrap();
    let steps: Vec<String> =
        e.d.log()
            .lines()
            .filter_map(|l| l.split_once("crash point CheckpointPod#"))
            .filter(|(_, rest)| !rest.contains(" reached: "))
            .map(|(_, rest)| rest.to_owned())
            .collect();
    assert!(steps.len() >= 12, "too few steps traced: {steps:?}");
    empty_out();

    for n in 1..=steps.len() {
        let point = format!("CheckpointPod#{n} ({})", steps[n - 1]);
        e.d.kill9();
        e.d.launch_with(&[("CRUST_CRASH", &format!("CheckpointPod:{n}"))]);
        e.c = e.d.client().await;
        let _ = e.c.checkpoint_pod(request.clone()).await.expect_err(&point);
        crash::assert_killed_at(&mut e, &point, "reached");
        e.d.launch();
        e.c = e.d.client().await;
        // Back: both containers run thawed; the directory is empty, as the caller gave it, or
        // holds the whole checkpoint (the crash came after its last step).
        for id in &ids {
            assert_eq!(
                e.status(id).await.state,
                pb::ContainerState::ContainerRunning as i32,
                "{point}"
            );
            assert_eq!(freezer_state(&mut e, id).await, "THAWED", "{point}");
            assert_no_checkpoint_leftovers(&e, id, &out);
        }
        if out.join("pod.json").exists() {
            let mut files = Daemon::entries(&out);
            files.sort();
            assert_eq!(files, ["containers", "devshm.tar", "pod.json"], "{point}");
            assert_eq!(Daemon::entries(&out.join("containers")).len(), 2, "{point}");
            empty_out();
        }
        assert!(
            Daemon::entries(&out).is_empty(),
            "{point}: left {:?}",
            Daemon::entries(&out)
        );
    }
    e.c.checkpoint_pod(request.clone())
        .await
        .unwrap_or_else(|err| panic!("a pod checkpoint after the crashes: {err:?}"));
    assert!(out.join("pod.json").is_file());
    e.remove_pod_leaving_nothing(&pod.0).await;
}

/// The archive as a checkpoint image, as `checkpointctl build` makes one: one layer holding the
/// archive's files, the checkpoint's annotations in the manifest.
fn checkpoint_image(archive: &Path) -> oci_build::Image {
    use oci_build::{Blob, Comp, image};
    let layer = std::fs::read(archive).unwrap();
    let mut img = image(&[(layer, Comp::Gzip)], serde_json::json!({}), "amd64");
    let mut manifest: serde_json::Value = serde_json::from_slice(&img.manifest.bytes).unwrap();
    manifest["annotations"] = serde_json::json!({
        "org.criu.checkpoint.container.name": "counter",
        "org.criu.checkpoint.engine.name": "crust",
    });
    img.manifest = Blob::new(
        serde_json::to_vec(&manifest).unwrap(),
        "application/vnd.oci.image.manifest.v1+json",
    );
    img
}

#[tokio::test]
async fn a_checkpoint_image_in_a_registry_restores_as_its_archive_does() {
    let mut e = env_with_criu(&tools::criu()).await;
    let (pod, id) = counter(&mut e, "ckpt-image").await;
    let export = exports(&e);
    let archive = export.join("counter.tar");
    checkpoint_to(&mut e, &id, &archive).await;
    let at_dump = last_count(&e, &pod);
    e.reg
        .push("counter-checkpoint", "1", &checkpoint_image(&archive))
        .await;
    std::fs::remove_file(&archive).unwrap();
    let reference = format!("{}/counter-checkpoint:1", e.reg.addr);
    e.d.images()
        .await
        .pull_image(pull_request(&reference))
        .await
        .unwrap();

    let copy = e.pod("ckpt-image-copy").await;
    let mut config = e.config("counter", &[]);
    config.image = Some(pb::ImageSpec {
        image: reference,
        ..Default::default()
    });
    let restored = e
        .create(&copy, config)
        .await
        .unwrap_or_else(|err| panic!("restore from the image: {err:?}\n{}", tail(&e.d.log(), 20)));
    assert_eq!(
        e.status(&restored).await.image.unwrap().image,
        e.image,
        "the image the checkpointed container was made from"
    );
    e.c.start_container(pb::StartContainerRequest {
        container_id: restored.clone(),
    })
    .await
    .unwrap();
    wait_counted_past(&e, &copy, at_dump + 2).await;
    assert_eq!(e.sh(&restored, "cat /data/kept").await, "kept\n");
    remove_pod(&mut e.c, &copy.0).await;
    e.remove_pod_leaving_nothing(&pod.0).await;
}

/// `[checkpoint] restore`: a node whose tenants may not carry a checkpoint's privileges into a
/// new container keeps checkpoints (kubelet's forensic checkpointing) and refuses restores, or
/// refuses both; each refusal is FailedPrecondition naming the setting, and leaves nothing.
#[tokio::test]
async fn a_node_can_keep_checkpoints_and_refuse_restores_or_refuse_both() {
    let criu = tools::criu();
    let toml = format!(
        "criu_path = {:?}\n[checkpoint]\nrestore = \"checkpoint-only\"\n",
        criu.display().to_string()
    );
    let mut e = Env::start_with(|d| d.drop_in("50-criu.toml", &toml)).await;
    let pod = e.pod("policy").await;
    let id = e.run(&pod, e.config("app", &["sleep", "3600"])).await;
    let archive = exports(&e).join("app.tar");
    checkpoint_to(&mut e, &id, &archive).await;
    assert!(archive.is_file(), "checkpoint-only still checkpoints");
    let before = Daemon::entries(&e.d.root.join("containers"));
    let err = e
        .create(&pod, from_archive(&e, "restored", &archive))
        .await
        .expect_err("a restore under checkpoint-only");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert!(
        err.message()
            .contains("restoring a checkpoint is disabled on this node ([checkpoint] restore = \"checkpoint-only\")"),
        "{err:?}"
    );
    assert_eq!(e.listed().await.len(), 1, "the refused restore is listed");
    assert_eq!(Daemon::entries(&e.d.root.join("containers")), before);

    let toml = format!(
        "criu_path = {:?}\n[checkpoint]\nrestore = \"disabled\"\n",
        criu.display().to_string()
    );
    e.d.drop_in("50-criu.toml", &toml);
    // Not a live key: a restart takes it (the running container is adopted).
    e.d.kill9();
    e.relaunch().await;
    let err =
        e.c.checkpoint_container(pb::CheckpointContainerRequest {
            container_id: id.clone(),
            location: exports(&e).join("again.tar").display().to_string(),
            timeout: 0,
        })
        .await
        .expect_err("a checkpoint under disabled");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert!(
        err.message().contains("checkpointing is disabled"),
        "{err:?}"
    );
    assert!(!exports(&e).join("again.tar").exists());
    assert_eq!(
        e.status(&id).await.state,
        pb::ContainerState::ContainerRunning as i32
    );
    e.remove_pod_leaving_nothing(&pod.0).await;
}
