//! A real kubelet (v1.37, standalone, static pods) on crust, checked the way an operator
//! checks a node: kubelet's own `/pods` status, `/stats/summary`, `/metrics/cadvisor` and
//! metrics, crictl, crust diagnose, and what is left on the host afterwards. One kubelet runs
//! the whole story: probes, a crash loop, an OOM kill, a pod whose CNI ADD the network
//! refuses, init containers sharing an emptyDir, a host-network pod, a pod sharing its PID
//! namespace whose CAP_SYS_PTRACE container cannot reach the node through PID 1, crust killed
//! and restarted under it, a liveness failure, and the pods removed. A second kubelet takes
//! devices from a device plugin that hands them out as CDI names; a third runs its pod under
//! Debian's runc binary as the node's default runtime handler.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::kubelet::Kubelet;
use common::workload::Env;
use crust::cri::pb;
use serde_json::Value;

/// The pods of the story; `marker` is a file of the node no container may read.
fn manifests(image: &str, marker: &str) -> Vec<(&'static str, String)> {
    let pod = |name: &str, spec: &str| {
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n{spec}")
            .replace("IMAGE", image)
            .replace("MARKER", marker)
    };
    vec![
        (
            "web",
            pod(
                "web",
                r#"  terminationGracePeriodSeconds: 2
  containers:
  - name: httpd
    image: IMAGE
    command: [sh, -c, "mkdir -p /www && echo hello > /www/index.html && touch /tmp/alive && exec httpd -f -p 8080 -h /www"]
    readinessProbe: {httpGet: {path: /index.html, port: 8080}, periodSeconds: 1}
    livenessProbe: {exec: {command: [sh, -c, "test -f /tmp/alive"]}, periodSeconds: 1, failureThreshold: 1}
"#,
            ),
        ),
        (
            "crash",
            pod(
                "crash",
                r#"  containers:
  - name: fail
    image: IMAGE
    command: [sh, -c, "echo failing; exit 1"]
"#,
            ),
        ),
        (
            "oom",
            pod(
                "oom",
                r#"  restartPolicy: Never
  containers:
  - name: hog
    image: IMAGE
    command: [sh, -c, "x=0123456789; while true; do x=$x$x; done"]
    resources: {limits: {memory: 32Mi}}
"#,
            ),
        ),
        (
            "nonet",
            pod(
                "nonet",
                r#"  containers:
  - name: main
    image: IMAGE
    command: [sleep, "3600"]
"#,
            ),
        ),
        (
            "shared",
            pod(
                "shared",
                r#"  terminationGracePeriodSeconds: 1
  volumes: [{name: shared, emptyDir: {}}]
  initContainers:
  - name: init
    image: IMAGE
    command: [sh, -c, "echo from-init > /exchange/msg"]
    volumeMounts: [{name: shared, mountPath: /exchange}]
  containers:
  - name: writer
    image: IMAGE
    command: [sh, -c, "echo from-writer > /exchange/w; exec sleep 3600"]
    volumeMounts: [{name: shared, mountPath: /exchange}]
  - name: reader
    image: IMAGE
    command: [sh, -c, "while ! test -f /exchange/w; do sleep 0.2; done; cat /exchange/msg /exchange/w; exec sleep 3600"]
    volumeMounts: [{name: shared, mountPath: /exchange}]
"#,
            ),
        ),
        (
            "hostnet",
            pod(
                "hostnet",
                r#"  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: IMAGE
    command: [sleep, "3600"]
"#,
            ),
        ),
        (
            "shareproc",
            pod(
                "shareproc",
                r#"  shareProcessNamespace: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: IMAGE
    command: [sleep, "3600"]
  - name: spy
    image: IMAGE
    securityContext: {capabilities: {add: [SYS_PTRACE]}}
    command: [sh, -c, "until ps -o args | grep -q '^[s]leep 3600'; do sleep 0.2; done; echo sees-app; for p in /proc/[0-9]*; do cat $p/root/MARKER $p/cwd/MARKER 2>/dev/null; done; echo scanned $(ls -d /proc/[0-9]* | wc -l); exec sleep 3600"]
"#,
            ),
        ),
        (
            "userns",
            pod(
                "userns",
                r#"  hostUsers: false
  terminationGracePeriodSeconds: 1
  volumes: [{name: scratch, emptyDir: {}}]
  containers:
  - name: main
    image: IMAGE
    command: [sh, -c, "id -u > /scratch/uid && touch /tmp/ready && exec sleep 3600"]
    readinessProbe: {exec: {command: [test, -f, /tmp/ready]}, periodSeconds: 1}
    volumeMounts: [{name: scratch, mountPath: /scratch}]
"#,
            ),
        ),
        (
            "orphan",
            pod(
                "orphan",
                r#"  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: IMAGE
    command: [sleep, "3601"]
"#,
            ),
        ),
    ]
}

/// How many processes on the node run `sleep <arg>`.
fn copies_of_sleep(arg: &str) -> usize {
    let wanted = format!("sleep\0{arg}\0");
    common::daemon::procfs_pids()
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c == wanted.as_bytes())
        })
        .count()
}

/// The container series of node conformance's ContainerMetrics spec (k8s.io/kubernetes
/// v1.37 test/e2e_node/container_metrics_test.go), less its per-device block I/O ones.
const CADVISOR_CONTAINER_SERIES: &[&str] = &[
    "container_cpu_system_seconds_total",
    "container_cpu_usage_seconds_total",
    "container_cpu_user_seconds_total",
    "container_file_descriptors",
    "container_fs_usage_bytes",
    "container_last_seen",
    "container_memory_cache",
    "container_memory_events_high_total",
    "container_memory_events_max_total",
    "container_memory_failcnt",
    "container_memory_failures_total",
    "container_memory_mapped_file",
    "container_memory_max_usage_bytes",
    "container_memory_rss",
    "container_memory_swap",
    "container_memory_usage_bytes",
    "container_memory_working_set_bytes",
    "container_oom_events_total",
    "container_processes",
    "container_sockets",
    "container_spec_cpu_period",
    "container_spec_cpu_shares",
    "container_spec_memory_limit_bytes",
    "container_spec_memory_reservation_limit_bytes",
    "container_spec_memory_swap_limit_bytes",
    "container_start_time_seconds",
    "container_threads",
    "container_threads_max",
    "container_ulimits_soft",
];

/// The status of container `name` in a pod status (`containerStatuses`).
fn container<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["containerStatuses"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .unwrap_or(&Value::Null)
}

fn running(status: &Value, name: &str) -> bool {
    container(status, name)["state"]["running"].is_object()
}

/// crust's id of a container in kubelet's status (`crust://<id>`).
fn crust_id(status: &Value, name: &str) -> String {
    let id = container(status, name)["containerID"]
        .as_str()
        .unwrap_or_default();
    id.strip_prefix("crust://")
        .unwrap_or_else(|| panic!("container {name}: id {id:?} is not crust://<id>"))
        .to_owned()
}

/// Waits (2 min at most) until crust has no pod sandbox left, once kubelet's pods went.
async fn wait_no_pods(c: &mut common::Client, k: &Kubelet) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !c
        .list_pod_sandbox(pb::ListPodSandboxRequest::default())
        .await
        .unwrap()
        .into_inner()
        .items
        .is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "pods left; kubelet log:\n{}",
            k.log_tail()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn crictl(e: &Env, args: &[&str]) -> String {
    let out = Command::new(common::tools::crictl())
        .arg("--runtime-endpoint")
        .arg(format!("unix://{}", e.d.socket.display()))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "crictl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn kubelet_runs_static_pods_on_crust() {
    // The network refuses one pod, as a broken or exhausted plugin would.
    let mut e = Env::start_with(|d| {
        d.write_bridge_network(&[r#"{"type":"crust-test-fail","onlyPods":["nonet-crust-node"]}"#])
    })
    .await;
    let marker = e.d.dir.join("node-marker");
    let token = format!("node-only-{}", std::process::id());
    std::fs::write(&marker, &token).unwrap();
    let marker = marker.display().to_string();
    let k = Kubelet::start(&e.d);
    for (name, yaml) in manifests(&e.image, &marker) {
        k.put(name, &yaml);
    }

    // A web server that turns Ready through its HTTP readiness probe.
    let web = k.wait_pod("web", "ready", |s| {
        container(s, "httpd")["ready"] == true && running(s, "httpd")
    });
    let httpd = crust_id(&web, "httpd");
    let (first, report) = common::diagnose_cause(&e.d, "default/web-crust-node");
    assert_eq!(
        first, "pod default/web-crust-node is healthy: ready, 1 of 1 containers running",
        "{report}"
    );
    let listed = crictl(&e, &["ps", "-q", "--name", "httpd"]);
    assert_eq!(listed.trim(), httpd, "crictl ps and kubelet disagree");
    assert!(
        crictl(
            &e,
            &["pods", "--name", "web-crust-node", "--state", "ready", "-q"]
        )
        .trim()
        .len()
            == 64
    );

    // A crash loop: restarts counted, the last exit kept with its code and reason.
    let crash = k.wait_pod("crash", "restarted twice", |s| {
        container(s, "fail")["restartCount"].as_u64() >= Some(2)
    });
    let last = &container(&crash, "fail")["lastState"]["terminated"];
    assert_eq!(
        (last["exitCode"].as_i64(), last["reason"].as_str()),
        (Some(1), Some("Error")),
        "{crash:#}"
    );
    // crust diagnose names the loop: kubelet re-created the container after each exit.
    let (first, report) = common::diagnose_cause(&e.d, "default/crash-crust-node");
    assert!(
        first.contains("of pod default/crash-crust-node is crash looping")
            && first.contains("exit code 1 (Error)"),
        "{report}"
    );

    // An OOM kill: reason OOMKilled, exit code 137.
    let oom = k.wait_pod("oom", "terminated", |s| {
        container(s, "hog")["state"]["terminated"].is_object()
    });
    let t = &container(&oom, "hog")["state"]["terminated"];
    assert_eq!(
        (t["exitCode"].as_i64(), t["reason"].as_str()),
        (Some(137), Some("OOMKilled")),
        "{oom:#}"
    );
    // kubelet gives the pod's cgroup the sum of its containers' limits, 32 MiB too:
    // whichever limit the kernel found reached first is the one named.
    let (first, report) = common::diagnose_cause(&e.d, &crust_id(&oom, "hog"));
    let who = "of pod default/oom-crust-node was OOM killed by";
    assert!(
        first.ends_with(&format!("{who} its own memory limit (32 MiB)"))
            || first.ends_with(&format!(
                "{who} its pod's memory limit (32 MiB): its own (32 MiB) was not reached"
            )),
        "{report}"
    );

    // A pod whose CNI ADD fails: kubelet retries RunPodSandbox, crust diagnose names the
    // plugin's refusal.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (ok, out, _) = common::diagnose(&e.d, "default/nonet-crust-node", false);
        let first = out.lines().next().unwrap_or_default();
        if ok && first.contains("CNI ADD failed") {
            assert!(
                first.starts_with("pod default/nonet-crust-node has no sandbox: CNI ADD failed (")
                    && first.contains("fixture plugin refuses ADD"),
                "{out}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "{out}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let nonet = k.pod("nonet").unwrap_or_default()["status"].clone();
    assert!(!running(&nonet, "main"), "{nonet:#}");

    // An init container, then two containers sharing its emptyDir.
    let shared = k.wait_pod("shared", "running", |s| {
        running(s, "writer") && running(s, "reader")
    });
    let init = &shared["initContainerStatuses"][0]["state"]["terminated"];
    assert_eq!(
        (init["exitCode"].as_i64(), init["reason"].as_str()),
        (Some(0), Some("Completed")),
        "{shared:#}"
    );
    let reader = crust_id(&shared, "reader");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let logs = crictl(&e, &["logs", &reader]);
        if logs.contains("from-init") && logs.contains("from-writer") {
            break;
        }
        assert!(Instant::now() < deadline, "reader's log: {logs:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // A host-network pod shares the host's network namespace.
    let hostnet = k.wait_pod("hostnet", "running", |s| running(s, "main"));
    let pid = e.info(&crust_id(&hostnet, "main")).await["pid"]
        .as_i64()
        .unwrap();
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap(),
        std::fs::read_link("/proc/self/ns/net").unwrap()
    );

    // The pod's monitor killed: kubelet sees the pod not ready and makes it again, and at no
    // moment do two copies of its container run (crust reports the old one exited only once
    // its process is gone).
    let orphan = k.wait_pod("orphan", "running", |s| running(s, "main"));
    let first = crust_id(&orphan, "main");
    let pod_id = crictl(&e, &["pods", "--name", "orphan-crust-node", "-q"]);
    let mut c = e.d.client().await;
    let monitor = common::monitor_pid(&mut c, pod_id.trim()).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(monitor),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let copies = copies_of_sleep("3601");
        assert!(copies <= 1, "{copies} copies of the orphan's container run");
        let again = k.pod("orphan").map(|p| p["status"].clone());
        if let Some(s) = again.filter(|s| running(s, "main") && crust_id(s, "main") != first) {
            assert_eq!(copies_of_sleep("3601"), 1, "{s:#}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the orphan pod did not come back\nkubelet log:\n{}",
            k.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // hostUsers: false: kubelet allocates the pod a range of host ids (its default, with no
    // `kubelet` user in /etc/subuid); the pod turns Ready with its root an unprivileged host
    // id, and the emptyDir it writes is an id-mapped mount: root's inside, root's on the node.
    let userns = k.wait_pod("userns", "ready", |s| container(s, "main")["ready"] == true);
    let main = crust_id(&userns, "main");
    let pid = e.info(&main).await["pid"].as_i64().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let host_uid: u32 = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().next())
        .and_then(|id| id.parse().ok())
        .unwrap();
    assert!(host_uid >= 65536, "the pod's root is host uid {host_uid}");
    let map = crictl(&e, &["exec", &main, "cat", "/proc/self/uid_map"]);
    let map: Vec<&str> = map.split_whitespace().collect();
    assert_eq!(
        map,
        ["0", &host_uid.to_string(), "65536"],
        "uid_map in the pod"
    );
    let written = crictl(
        &e,
        &[
            "exec",
            &main,
            "sh",
            "-c",
            "cat /scratch/uid; stat -c %u /scratch/uid",
        ],
    );
    assert_eq!(written.split_whitespace().collect::<Vec<_>>(), ["0", "0"]);

    // shareProcessNamespace: the containers see each other's processes, and the one with
    // CAP_SYS_PTRACE reads nothing of the node through any process it sees (PID 1 is crust's
    // confined pod init).
    let shareproc = k.wait_pod("shareproc", "running", |s| {
        running(s, "app") && running(s, "spy")
    });
    let spy = crust_id(&shareproc, "spy");
    let deadline = Instant::now() + Duration::from_secs(30);
    let logs = loop {
        let logs = crictl(&e, &["logs", &spy]);
        if logs.contains("scanned") {
            break logs;
        }
        assert!(Instant::now() < deadline, "spy's log: {logs:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert!(logs.contains("sees-app"), "{logs}");
    assert!(
        !logs.contains(&token),
        "a container read the node's file: {logs}"
    );
    let scanned: usize = logs
        .lines()
        .find_map(|l| l.strip_prefix("scanned "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(scanned >= 3, "init, app and spy at least: {logs}");

    // crust check finds this kubelet on its socket and reads the gate from its config.
    let out = Command::new(env!("CARGO_BIN_EXE_crust"))
        .args(["check", "--config"])
        .arg(&e.d.config)
        .arg("--listen")
        .arg(format!("unix://{}", e.d.socket.display()))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("kubelet"))
        .unwrap_or_else(|| panic!("no kubelet line in crust check: {text}"));
    assert!(
        line.starts_with("ok ")
            && line.contains(&format!("kubelet {} ", k.pid()))
            && line.contains("PodAndContainerStatsFromCRI"),
        "{line}"
    );

    // Statistics from the runtime (PodAndContainerStatsFromCRI): the summary API and the
    // cAdvisor series.
    let summary: Value = serde_json::from_str(&k.get("/stats/summary")).unwrap();
    let pod = summary["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["podRef"]["name"] == "web-crust-node")
        .unwrap_or_else(|| panic!("no web pod in the summary: {summary:#}"));
    let c = &pod["containers"][0];
    assert_eq!(c["name"], "httpd");
    assert!(c["memory"]["workingSetBytes"].as_u64() > Some(0), "{c:#}");
    assert!(c["cpu"]["usageCoreNanoSeconds"].as_u64() > Some(0), "{c:#}");
    let cadvisor = k.get("/metrics/cadvisor");
    assert!(
        cadvisor
            .lines()
            .any(|l| l.starts_with("container_memory_working_set_bytes{")
                && l.contains("container=\"httpd\"")
                && l.contains("pod=\"web-crust-node\"")),
        "no working set series for httpd in /metrics/cadvisor"
    );
    // Every series node conformance's ContainerMetrics spec asks of a container (that spec
    // reads kubelet's cAdvisor, which has no handler for crust, and skips itself under
    // PodAndContainerStatsFromCRI): all but the block I/O ones, which come per device that
    // saw I/O (a unit test checks those).
    let lines = cadvisor.lines().map(|l| Ok(l.to_owned()));
    let httpd_series: std::collections::HashMap<String, Option<f64>> =
        prometheus_parse::Scrape::parse(lines)
            .expect("/metrics/cadvisor parses")
            .samples
            .into_iter()
            .filter(|s| {
                s.labels.get("container") == Some("httpd")
                    && s.labels.get("pod") == Some("web-crust-node")
            })
            .map(|s| {
                let value = match s.value {
                    prometheus_parse::Value::Counter(v)
                    | prometheus_parse::Value::Gauge(v)
                    | prometheus_parse::Value::Untyped(v) => Some(v),
                    _ => None,
                };
                (s.metric, value)
            })
            .collect();
    for name in CADVISOR_CONTAINER_SERIES {
        assert!(
            httpd_series.contains_key(*name),
            "no {name} series for httpd in /metrics/cadvisor"
        );
    }
    for (name, want) in [
        ("container_memory_failcnt", 0.0),
        ("container_memory_swap", 0.0),
        ("container_oom_events_total", 0.0),
        ("container_spec_cpu_period", 100_000.0),
    ] {
        assert_eq!(
            httpd_series.get(name).copied().flatten(),
            Some(want),
            "{name} of httpd"
        );
    }

    // Evented PLEG: kubelet holds a GetContainerEvents stream, receives events on it, and a
    // container's death makes it relist that pod at once.
    assert!(k.metric("kubelet_evented_pleg_connection_success_count") >= 1.0);
    assert!(k.metric("kubelet_evented_pleg_connection_latency_seconds_count") >= 1.0);
    let log = k.log();
    let dead = container(&crash, "fail")["lastState"]["terminated"]["containerID"]
        .as_str()
        .unwrap_or_default();
    let fail = dead.trim_start_matches("crust://");
    assert!(
        log.lines().any(
            |l| l.contains("requested pod relist after container termination") && l.contains(fail)
        ),
        "no relist requested for container {fail}'s exit"
    );
    // The node's conditions: runtime and network ready, no disk pressure.
    assert!(log.contains("\"Container runtime initialized\" containerRuntime=\"crust\""));
    assert!(!log.contains("Container runtime not ready"));
    assert!(!log.contains("Container runtime network not ready"));
    assert!(log.contains("event=\"NodeHasNoDiskPressure\""));
    assert!(!log.contains("event=\"NodeHasDiskPressure\""));

    // crust killed and restarted under kubelet: the same containers, not restarted.
    let before: Vec<(String, String, u64)> = [
        ("web", "httpd"),
        ("shared", "writer"),
        ("shared", "reader"),
        ("hostnet", "main"),
    ]
    .iter()
    .map(|(pod, c)| {
        let s = k.pod(pod).unwrap()["status"].clone();
        let restarts = container(&s, c)["restartCount"].as_u64().unwrap();
        (format!("{pod}/{c}"), crust_id(&s, c), restarts)
    })
    .collect();
    e.d.kill9();
    e.d.launch();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let web = k.wait_pod("web", "ready after crust's restart", |s| {
        container(s, "httpd")["ready"] == true
    });
    for (what, id, restarts) in &before {
        let (pod, c) = what.split_once('/').unwrap();
        let s = k.pod(pod).unwrap()["status"].clone();
        assert_eq!(
            (
                &crust_id(&s, c),
                container(&s, c)["restartCount"].as_u64().unwrap()
            ),
            (id, *restarts),
            "{what} changed across crust's restart: {s:#}"
        );
    }

    // A failing liveness probe restarts the container.
    let mut c = e.d.client().await;
    let r = c
        .exec_sync(pb::ExecSyncRequest {
            container_id: crust_id(&web, "httpd"),
            cmd: vec!["rm".into(), "/tmp/alive".into()],
            timeout: 10,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.exit_code, 0);
    let web = k.wait_pod("web", "restarted by its liveness probe and ready", |s| {
        container(s, "httpd")["restartCount"].as_u64() >= Some(1)
            && container(s, "httpd")["ready"] == true
    });
    assert_ne!(crust_id(&web, "httpd"), httpd);

    // Pods removed: kubelet stops them, its garbage collector removes them, nothing is left.
    for (name, _) in manifests(&e.image, &marker) {
        k.remove(name);
    }
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let sandboxes = c
            .list_pod_sandbox(pb::ListPodSandboxRequest::default())
            .await
            .unwrap()
            .into_inner()
            .items;
        if sandboxes.is_empty() && k.pods().is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left after the manifests went: {:?}\nkubelet log:\n{}",
            sandboxes
                .iter()
                .map(|s| (&s.metadata, s.state))
                .collect::<Vec<_>>(),
            k.log_tail()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    e.d.assert_clean();
    assert!(k.pod_cgroups().is_empty(), "{:?}", k.pod_cgroups());
}

/// The device plugin of `tests/fixtures/device-plugin`, killed with the test.
struct DevicePlugin(std::process::Child);

impl Drop for DevicePlugin {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A device plugin (k8s.io/kubelet's API) advertises two `crust.test/dev` devices and answers
/// Allocate with CDI names only; crust finds them in the CDI spec the test wrote (the driver's
/// part) and the pod's container gets the device node and env. A pod asking for more devices
/// than the node has is refused by kubelet's admission, and crust never sees it.
#[tokio::test(flavor = "multi_thread")]
async fn kubelet_gives_device_plugin_devices_through_cdi() {
    let mut cdi_dir = None;
    let e = Env::start_with(|d| {
        let dir = d.dir.join("cdi");
        std::fs::create_dir_all(&dir).unwrap();
        let text = std::fs::read_to_string(&d.config).unwrap();
        std::fs::write(&d.config, format!("cdi_spec_dirs = [{dir:?}]\n{text}")).unwrap();
        cdi_dir = Some(dir);
    })
    .await;
    let cdi_dir = cdi_dir.unwrap();
    let mut devices = Vec::new();
    for n in 0..2 {
        let node = cdi_dir.join(format!("node{n}"));
        common::sh("mknod", &[node.to_str().unwrap(), "c", "1", "3"]);
        devices.push(
            serde_json::json!({"name": format!("dev{n}"), "containerEdits": {
                "env": [format!("CRUST_DEV=dev{n}")],
                "deviceNodes": [{"path": format!("/dev/crust-dev{n}"), "hostPath": node}],
            }}),
        );
    }
    let spec =
        serde_json::json!({"cdiVersion": "0.6.0", "kind": "crust.test/dev", "devices": devices});
    let spec_file = cdi_dir.join("crust-test-dev.json");
    std::fs::write(&spec_file, spec.to_string()).unwrap();

    let plugins = e.d.dir.join("device-plugins");
    let k = Kubelet::start_with_device_plugins(&e.d, &plugins);
    // kubelet's registration socket comes up after its healthz does.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !plugins.join("kubelet.sock").exists() {
        assert!(
            Instant::now() < deadline,
            "no kubelet.sock in 60 s; kubelet log:\n{}",
            k.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let plugin = Command::new(common::tools::device_plugin())
        .arg("--dir")
        .arg(&plugins)
        .args(["--devices", "2"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(k.dir.join("device-plugin.log")).unwrap())
        .spawn()
        .unwrap();
    let _plugin = DevicePlugin(plugin);
    // kubelet checkpoints the healthy devices of a resource once the plugin listed them.
    let checkpoint = plugins.join("kubelet_internal_checkpoint");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let registered = std::fs::read_to_string(&checkpoint)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .and_then(|c| {
                c["Data"]["RegisteredDevices"]["crust.test/dev"]
                    .as_array()
                    .map(Vec::len)
            });
        if registered == Some(2) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "kubelet did not list the plugin's devices; plugin log:\n{}\nkubelet log:\n{}",
            std::fs::read_to_string(k.dir.join("device-plugin.log")).unwrap_or_default(),
            k.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let pod = |name: &str, count: u32| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  \
             terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: {}\n    \
             command: [sleep, \"3600\"]\n    resources: {{limits: {{crust.test/dev: {count}}}}}\n",
            e.image
        )
    };
    k.put("gpu", &pod("gpu", 1));
    let status = k.wait_pod("gpu", "running", |s| running(s, "main"));
    let id = crust_id(&status, "main");
    let mut c = e.d.client().await;
    let out = c
        .exec_sync(pb::ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["sh".into(), "-c".into(), "env; ls /dev".into()],
            timeout: 10,
        })
        .await
        .unwrap()
        .into_inner();
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    let dev = out
        .lines()
        .find_map(|l| l.strip_prefix("CRUST_DEV="))
        .unwrap_or_else(|| panic!("no CRUST_DEV in the container: {out}"))
        .to_owned();
    assert!(
        out.lines().any(|l| l == format!("crust-{dev}")),
        "/dev/crust-{dev}: {out}"
    );
    assert_eq!(
        out.lines().filter(|l| l.starts_with("crust-dev")).count(),
        1,
        "one device only: {out}"
    );
    let info = crictl(&e, &["inspect", &id]);
    let info: Value = serde_json::from_str(&info).unwrap();
    assert_eq!(
        info["info"]["cdiDevices"],
        serde_json::json!([{"name": format!("crust.test/dev={dev}"), "specFile": spec_file}])
    );

    // Three devices on a node of two: kubelet refuses the pod before asking crust for anything.
    k.put("greedy", &pod("greedy", 3));
    let refused = k.wait_pod("greedy", "refused", |s| s["phase"] == "Failed");
    let reason = refused["reason"].as_str().unwrap_or_default();
    assert!(
        ["OutOfcrust.test/dev", "UnexpectedAdmissionError"].contains(&reason),
        "{refused:#}"
    );
    assert!(
        refused["message"]
            .as_str()
            .unwrap_or_default()
            .contains("crust.test/dev"),
        "{refused:#}"
    );
    let sandboxes = c
        .list_pod_sandbox(pb::ListPodSandboxRequest::default())
        .await
        .unwrap()
        .into_inner()
        .items;
    let names: Vec<String> = sandboxes
        .iter()
        .filter_map(|s| s.metadata.as_ref().map(|m| m.name.clone()))
        .collect();
    assert!(!names.iter().any(|n| n.starts_with("greedy")), "{names:?}");
    let containers = c
        .list_containers(pb::ListContainersRequest::default())
        .await
        .unwrap()
        .into_inner()
        .containers;
    assert_eq!(
        containers.len(),
        1,
        "only the gpu pod's container: {containers:?}"
    );

    k.remove("gpu");
    k.remove("greedy");
    wait_no_pods(&mut c, &k).await;
}

/// A kubelet whose pods run under the runtime handler `handler`, the binary `path`
/// (`[runtimes.<handler>]`, made the node's default handler: a standalone kubelet has no API
/// server to resolve a RuntimeClass from). The pod turns Ready through an exec probe (the
/// binary's exec), its log holds what `script` printed (`expect`), and it goes leaving
/// nothing of the binary's state (runsc's shared `null-netns` aside).
async fn kubelet_runs_a_pod_under(
    handler: &str,
    path: &std::path::Path,
    script: &str,
    expect: &str,
) {
    let e = Env::start_with(|d| {
        d.drop_in(
            "50-handler.toml",
            &format!(
                "default_runtime_handler = {handler:?}\n[runtimes.{handler}]\nruntime_path = {:?}\n",
                path.display().to_string()
            ),
        );
    })
    .await;
    let k = Kubelet::start(&e.d);
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: oci, namespace: default}}\nspec:\n  \
         terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: {}\n    \
         command: [sh, -c, \"{script}; touch /tmp/ready; exec sleep 3600\"]\n    \
         readinessProbe: {{exec: {{command: [test, -f, /tmp/ready]}}, periodSeconds: 1}}\n",
        e.image
    );
    k.put("oci", &pod);
    let status = k.wait_pod("oci", "ready", |s| {
        container(s, "main")["ready"] == true && running(s, "main")
    });
    let id = crust_id(&status, "main");
    let info: Value = serde_json::from_str(&crictl(&e, &["inspect", &id])).unwrap();
    assert_eq!(
        info["info"]["runtime"]["path"],
        path.display().to_string(),
        "{info:#}"
    );
    let logs = Command::new(common::tools::crictl())
        .arg("--runtime-endpoint")
        .arg(format!("unix://{}", e.d.socket.display()))
        .args(["logs", &id])
        .output()
        .unwrap();
    let logs = String::from_utf8_lossy(&logs.stdout);
    assert!(logs.contains(expect), "{logs}");

    k.remove("oci");
    let mut c = e.d.client().await;
    wait_no_pods(&mut c, &k).await;
    let state = e.d.state.join("runtimes").join(handler);
    let left = || -> Vec<String> {
        common::Daemon::entries(&state)
            .into_iter()
            .filter(|e| e != "null-netns")
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !left().is_empty() {
        assert!(Instant::now() < deadline, "{:?}", left());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Debian's runc as the handler's binary.
#[tokio::test(flavor = "multi_thread")]
async fn kubelet_runs_a_pod_under_an_oci_runtime_binary() {
    let runc = std::path::Path::new("/usr/sbin/runc");
    kubelet_runs_a_pod_under("runc", runc, "echo from-runc", "from-runc\n").await;
}

/// gVisor's runsc, a sandbox per pod: the container prints the kernel's log, which is
/// gVisor's own.
#[tokio::test(flavor = "multi_thread")]
async fn kubelet_runs_a_pod_under_gvisor() {
    let runsc = common::tools::runsc();
    kubelet_runs_a_pod_under("runsc", &runsc, "echo from-runsc; dmesg", "Starting gVisor").await;
}

/// kubelet's forensic checkpoint (`POST /checkpoint/{namespace}/{pod}/{container}`, the
/// ContainerCheckpoint gate, on by default): kubelet asks crust for an archive under its root
/// directory and answers with its path; the archive holds what the node suite's checkpoint spec
/// looks for, kubelet counts the operation, and the container runs on without a restart.
#[tokio::test(flavor = "multi_thread")]
async fn kubelet_checkpoints_a_container_through_its_endpoint() {
    let criu = common::tools::criu();
    let e = Env::start_with(|d| {
        d.drop_in(
            "50-criu.toml",
            &format!("criu_path = {:?}\n", criu.display().to_string()),
        );
    })
    .await;
    let k = Kubelet::start(&e.d);
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: ckpt, namespace: default}}\nspec:\n  \
         terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: {}\n    \
         command: [sh, -c, \"i=0; while true; do echo $i; i=$((i+1)); sleep 0.2; done\"]\n",
        e.image
    );
    k.put("ckpt", &pod);
    let status = k.wait_pod("ckpt", "running", |s| running(s, "main"));
    let id = crust_id(&status, "main");
    let operations = |k: &Kubelet| -> f64 {
        k.get("/metrics")
            .lines()
            .filter(|l| {
                l.starts_with("kubelet_runtime_operations_total{")
                    && l.contains("operation_type=\"checkpoint_container\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert_eq!(operations(&k), 0.0);

    let node = common::kubelet::NODE;
    let (code, body) = k.post(&format!("/checkpoint/default/ckpt-{node}/main"));
    assert_eq!(code, 200, "{body}\nkubelet log:\n{}", k.log_tail());
    let answer: Value = serde_json::from_str(&body).unwrap();
    let archive = std::path::PathBuf::from(answer["items"][0].as_str().unwrap());
    assert!(
        archive.starts_with(k.dir.join("root/checkpoints")),
        "{}",
        archive.display()
    );
    let names = Command::new("tar")
        .arg("-tf")
        .arg(&archive)
        .output()
        .unwrap();
    let names = String::from_utf8_lossy(&names.stdout);
    for member in ["spec.dump", "config.dump", "checkpoint/inventory.img"] {
        assert!(
            names.lines().any(|n| n == member),
            "{member} not in {names}"
        );
    }
    assert_eq!(operations(&k), 1.0);

    // The container was not restarted: same id, running, restart count 0.
    let after = k.wait_pod("ckpt", "running", |s| running(s, "main"));
    assert_eq!(crust_id(&after, "main"), id);
    assert_eq!(container(&after, "main")["restartCount"], 0);

    k.remove("ckpt");
    let mut c = e.d.client().await;
    wait_no_pods(&mut c, &k).await;
}
