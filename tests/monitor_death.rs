//! A pod's monitor that dies: its containers are reported exited only once none of their
//! processes is left, whenever it dies (while they run, between CreateContainer and
//! StartContainer, during an exec, while the daemon is down), in both PID modes; and a pod's
//! memory limit takes a container, never the monitor, which lives outside the pod's cgroup.

mod common;

use std::time::{Duration, Instant};

use common::workload::{Env, alive, tail};
use common::*;
use crust::cri::pb;

/// Both ways kubelet makes PID namespaces: one per container (its default), and one shared
/// by the pod (`shareProcessNamespace`), whose init dies with the monitor.
const PID_MODES: [pb::NamespaceMode; 2] = [pb::NamespaceMode::Container, pb::NamespaceMode::Pod];

/// A pod whose containers get PID namespaces as `pid` says; returns it with the container
/// config maker's PID mode.
async fn pod_in(e: &mut Env, name: &str, pid: pb::NamespaceMode) -> (String, pb::PodSandboxConfig) {
    let mut config = pod_config(name);
    with_namespaces(
        &mut config,
        pb::NamespaceMode::Pod,
        pid,
        pb::NamespaceMode::Pod,
    );
    config.log_directory = e.d.dir.join("logs").join(name).display().to_string();
    let id = run_pod(&mut e.c, config.clone()).await;
    (id, config)
}

/// A container config running `script` under sh, in the pod's PID mode `pid`.
fn container(e: &Env, name: &str, script: &str, pid: pb::NamespaceMode) -> pb::ContainerConfig {
    let mut config = e.config(name, &["sh", "-c", script]);
    let security = config
        .linux
        .as_mut()
        .unwrap()
        .security_context
        .as_mut()
        .unwrap();
    security.namespace_options.as_mut().unwrap().pid = pid as i32;
    config
}

/// The processes in a container's cgroup, as the host numbers them.
async fn processes_of(e: &mut Env, id: &str) -> Vec<i64> {
    let cgroup = e.info(id).await["cgroup"].as_str().unwrap().to_owned();
    let procs = Daemon::cgroup_dir(&cgroup, "memory").join("cgroup.procs");
    std::fs::read_to_string(procs)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

/// Waits until the container has `n` processes or more; returns them.
async fn wait_processes(e: &mut Env, id: &str, n: usize) -> Vec<i64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let pids = processes_of(e, id).await;
        if pids.len() >= n {
            return pids;
        }
        assert!(
            Instant::now() < deadline,
            "{id} has {pids:?}, not {n} processes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Resident memory of a process in KiB (0 once it is gone).
fn rss_kib(pid: i64) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn kill9(pid: i64) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
}

/// Polls the container's status until it reads EXITED, checking at each EXITED read that
/// none of `pids` is alive any more (a process that is alive after the read was alive at it).
/// Returns the status.
async fn exited_only_once_gone(e: &mut Env, id: &str, pids: &[i64]) -> pb::ContainerStatus {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = e.status(id).await;
        if s.state == pb::ContainerState::ContainerExited as i32 {
            let living: Vec<_> = pids.iter().filter(|p| alive(**p)).collect();
            assert!(
                living.is_empty(),
                "{id} reads EXITED while its processes {living:?} run"
            );
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "{id} still {:?}; daemon log:\n{}",
            s.state,
            tail(&e.d.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// What crust says of a container it killed because its monitor died.
fn assert_killed_with_monitor(s: &pb::ContainerStatus) {
    assert_eq!(s.exit_code, 137, "{s:?}");
    assert!(
        s.message
            .starts_with("killed by crust: the pod's monitor (pid ")
            && s.message.contains("was killed by a signal or crashed"),
        "{}",
        s.message
    );
}

/// Once the pod is stopped and removed nothing of it is left.
async fn end_leaving_nothing(e: &mut Env, pod: &str) {
    let (s, _) = status(&mut e.c, pod).await;
    assert_eq!(s.state, pb::PodSandboxState::SandboxNotready as i32);
    e.remove_pod_leaving_nothing(pod).await;
}

#[tokio::test]
async fn a_container_reads_exited_only_once_its_processes_are_gone() {
    let mut e = Env::start().await;
    for pid_mode in PID_MODES {
        let name = format!("orphan-{}", pid_mode as i32);
        let pod = pod_in(&mut e, &name, pid_mode).await;
        // A child beside a process holding 200 MiB, which takes a while to exit once killed.
        let script = "sleep 600 & exec dd if=/dev/zero of=/dev/null bs=200M";
        let id = e.run(&pod, container(&e, "main", script, pid_mode)).await;
        let pids = wait_processes(&mut e, &id, 2).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        while pids.iter().map(|p| rss_kib(*p)).max().unwrap() < 150 << 10 {
            assert!(Instant::now() < deadline, "dd never filled its buffer");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        kill9(monitor_pid(&mut e.c, &pod.0).await as i64);
        let s = exited_only_once_gone(&mut e, &id, &pids).await;
        assert_killed_with_monitor(&s);
        // diagnose tells the story: the monitor died, how, and what went with it.
        let (first, out) = diagnose_cause(&e.d, &format!("crust-test/{name}"));
        assert_eq!(
            first,
            format!(
                "pod crust-test/{name} is not ready: its monitor (pid {}) was killed by a \
                 signal or crashed (its log shows no panic, and the kernel counted no OOM \
                 kill); its containers ended with it, killed by crust once it was gone: main",
                s.message
                    .split("(pid ")
                    .nth(1)
                    .and_then(|r| r.split(')').next())
                    .unwrap()
            ),
            "{out}"
        );
        end_leaving_nothing(&mut e, &pod.0).await;
    }
}

#[tokio::test]
async fn a_container_created_but_not_started_ends_with_its_monitor() {
    let mut e = Env::start().await;
    for pid_mode in PID_MODES {
        let pod = pod_in(&mut e, &format!("unstarted-{}", pid_mode as i32), pid_mode).await;
        let id = e
            .create(&pod, container(&e, "main", "sleep 600", pid_mode))
            .await
            .unwrap();
        // libcontainer's init waits in the container's cgroup for the start.
        let pids = wait_processes(&mut e, &id, 1).await;
        kill9(monitor_pid(&mut e.c, &pod.0).await as i64);
        let s = exited_only_once_gone(&mut e, &id, &pids).await;
        assert_killed_with_monitor(&s);
        let start =
            e.c.start_container(pb::StartContainerRequest {
                container_id: id.clone(),
            })
            .await
            .unwrap_err();
        assert_eq!(start.code(), tonic::Code::FailedPrecondition, "{start:?}");
        end_leaving_nothing(&mut e, &pod.0).await;
    }
}

#[tokio::test]
async fn an_exec_under_way_ends_with_its_monitor_and_so_does_its_container() {
    let mut e = Env::start().await;
    for pid_mode in PID_MODES {
        let pod = pod_in(&mut e, &format!("exec-{}", pid_mode as i32), pid_mode).await;
        let id = e
            .run(&pod, container(&e, "main", "sleep 600", pid_mode))
            .await;
        let mut c = e.c.clone();
        let exec_id = id.clone();
        let exec = tokio::spawn(async move {
            c.exec_sync(pb::ExecSyncRequest {
                container_id: exec_id,
                cmd: vec!["sleep".into(), "300".into()],
                timeout: 0,
            })
            .await
        });
        // The exec's process joins the container's.
        let pids = wait_processes(&mut e, &id, 2).await;
        kill9(monitor_pid(&mut e.c, &pod.0).await as i64);
        let answered = tokio::time::timeout(Duration::from_secs(30), exec)
            .await
            .expect("the exec answers once the monitor is gone")
            .unwrap();
        assert!(answered.is_err(), "{answered:?}");
        let s = exited_only_once_gone(&mut e, &id, &pids).await;
        assert_killed_with_monitor(&s);
        end_leaving_nothing(&mut e, &pod.0).await;
    }
}

#[tokio::test]
async fn a_monitor_that_died_while_the_daemon_was_down_is_found_at_its_start() {
    let mut e = Env::start().await;
    for pid_mode in PID_MODES {
        let name = format!("downtime-{}", pid_mode as i32);
        let pod = pod_in(&mut e, &name, pid_mode).await;
        let id = e
            .run(&pod, container(&e, "main", "sleep 600", pid_mode))
            .await;
        let pids = wait_processes(&mut e, &id, 1).await;
        let monitor = monitor_pid(&mut e.c, &pod.0).await as i64;
        e.d.kill9();
        kill9(monitor);
        let deadline = Instant::now() + Duration::from_secs(30);
        while alive(monitor) {
            assert!(Instant::now() < deadline, "the monitor outlived SIGKILL");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        e.relaunch().await;
        let s = exited_only_once_gone(&mut e, &id, &pids).await;
        assert_killed_with_monitor(&s);
        let (first, out) = diagnose_cause(&e.d, &format!("crust-test/{name}"));
        assert!(
            first.starts_with(&format!(
                "pod crust-test/{name} is not ready: its monitor (pid {monitor}) was killed"
            )),
            "{out}"
        );
        end_leaving_nothing(&mut e, &pod.0).await;
    }
}

#[tokio::test]
async fn the_pod_s_memory_limit_takes_a_container_never_its_monitor() {
    let mut e = Env::start().await;
    for pid_mode in PID_MODES {
        let pod = pod_in(&mut e, &format!("tight-{}", pid_mode as i32), pid_mode).await;
        let monitor = monitor_pid(&mut e.c, &pod.0).await as i64;
        e.c.update_pod_sandbox_resources(pb::UpdatePodSandboxResourcesRequest {
            pod_sandbox_id: pod.0.clone(),
            resources: Some(pb::LinuxContainerResources {
                memory_limit_in_bytes: 48 << 20,
                ..Default::default()
            }),
            overhead: None,
        })
        .await
        .unwrap();
        let idle = e
            .run(&pod, container(&e, "idle", "sleep 600", pid_mode))
            .await;
        // Pages of the pod's /dev/shm count against the pod's limit and belong to no
        // process's resident set: at the limit the OOM killer picks by resident size among
        // the pod's processes, where a monitor in the pod cgroup would be the largest.
        let fill = "exec dd if=/dev/zero of=/dev/shm/fill bs=1M count=60";
        let filler = e.run(&pod, container(&e, "filler", fill, pid_mode)).await;
        let s = e.wait_exit(&filler, Duration::from_secs(60)).await;
        assert_eq!(s.reason, "OOMKilled", "{s:?}");
        assert!(alive(monitor), "the pod's limit killed its monitor");
        let (sandbox, _) = status(&mut e.c, &pod.0).await;
        assert_eq!(sandbox.state, pb::PodSandboxState::SandboxReady as i32);
        assert_eq!(
            e.status(&idle).await.state,
            pb::ContainerState::ContainerRunning as i32
        );
        e.remove_pod_leaving_nothing(&pod.0).await;
    }
}

/// An HTTP GET of `/index.html` through local port `port`: what came back, empty when the
/// connection gave nothing.
fn http_get(port: u16) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(b"GET /index.html HTTP/1.0\r\n\r\n");
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body
}

#[tokio::test]
async fn a_port_forward_under_way_ends_with_its_monitor_and_so_does_its_container() {
    let mut e = Env::start().await;
    for pid_mode in PID_MODES {
        let pod = pod_in(&mut e, &format!("forwarded-{}", pid_mode as i32), pid_mode).await;
        let web = "mkdir -p /www && echo served > /www/index.html && exec httpd -f -p 8080 -h /www";
        let id = e.run(&pod, container(&e, "web", web, pid_mode)).await;
        let pids = wait_processes(&mut e, &id, 1).await;
        let local = free_port();
        let _forward = forward::crictl_forward(&e.d, &pod.0, "spdy", local, 8080);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !tokio::task::spawn_blocking(move || http_get(local))
            .await
            .unwrap()
            .contains("served")
        {
            assert!(
                Instant::now() < deadline,
                "nothing served through the forward"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        kill9(monitor_pid(&mut e.c, &pod.0).await as i64);
        let s = exited_only_once_gone(&mut e, &id, &pids).await;
        assert_killed_with_monitor(&s);
        // The forward still stands, and finds nothing serving behind it.
        let after = tokio::task::spawn_blocking(move || http_get(local))
            .await
            .unwrap();
        assert!(!after.contains("served"), "{after}");
        end_leaving_nothing(&mut e, &pod.0).await;
    }
}
