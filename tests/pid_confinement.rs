//! What a container can reach of the node through the processes it sees, in each PID mode.
//!
//! In a pod that shares one PID namespace (`shareProcessNamespace`, CRI `pid: POD`), PID 1 is
//! crust's pod init, visible to every container. A container with CAP_SYS_PTRACE (what `kubectl
//! debug --copy-to --profile=general` makes) passes the kernel's ptrace check against it, so the
//! init must hold nothing: no node root or working directory, no capability, no_new_privs, a
//! seccomp filter, not dumpable, an executable that is not the node's binary. In CONTAINER and
//! TARGET modes the container's own process is PID 1 and no process of crust is visible.
//!
//! A marker file on the node, holding a random token, must not be readable through any
//! `/proc/<pid>/root` or `/proc/<pid>/cwd` a container sees; the static probe
//! (`tests/fixtures/probe`) walks them all, and tries PTRACE_SEIZE on the init and a system call
//! injected into it.

mod common;

use common::tools;
use common::workload::Env;
use common::*;
use crust::cri::pb;

/// A file on the node only the node should read, and its random content.
struct Marker {
    path: std::path::PathBuf,
    token: String,
}

impl Marker {
    fn new(e: &Env) -> Marker {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).unwrap();
        let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let path = e.d.dir.join("node-marker");
        std::fs::write(&path, &token).unwrap();
        Marker { path, token }
    }
}

/// A container running `sleep`, with the probe at /probe, in the given PID mode, with
/// CAP_SYS_PTRACE added when `ptrace` is set.
fn prober(
    e: &Env,
    name: &str,
    pid: pb::NamespaceMode,
    target: &str,
    ptrace: bool,
) -> pb::ContainerConfig {
    let mut config = e.config(name, &["sleep", "600"]);
    config.mounts.push(pb::Mount {
        container_path: "/probe".into(),
        host_path: tools::probe().display().to_string(),
        readonly: true,
        ..Default::default()
    });
    let sc = config
        .linux
        .get_or_insert_with(Default::default)
        .security_context
        .get_or_insert_with(Default::default);
    sc.namespace_options = Some(pb::NamespaceOption {
        pid: pid as i32,
        target_id: target.into(),
        ..Default::default()
    });
    if ptrace {
        sc.capabilities = Some(pb::Capability {
            add_capabilities: vec!["SYS_PTRACE".into()],
            ..Default::default()
        });
    }
    config
}

/// Runs the probe in `id` and returns its stdout, failing on a probe error.
async fn probe(e: &mut Env, id: &str, args: &[&str]) -> String {
    let mut cmd = vec!["/probe"];
    cmd.extend_from_slice(args);
    let r = e.exec(id, &cmd).await;
    let out = String::from_utf8_lossy(&r.stdout).into_owned();
    assert_eq!(
        r.exit_code,
        0,
        "probe {args:?} in {id}: {out}{}",
        String::from_utf8_lossy(&r.stderr)
    );
    out
}

/// The marker is out of reach from `id`, through every process it sees.
async fn assert_unreachable(e: &mut Env, id: &str, marker: &Marker, who: &str) {
    let path = marker.path.to_str().unwrap();
    let out = probe(e, id, &["reach", path, &marker.token]).await;
    assert!(!out.contains("LEAK"), "{who} reads the node's file: {out}");
    let seen: usize = out
        .lines()
        .find_map(|l| l.strip_prefix("pids "))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(seen >= 2, "{who} looked through {seen} processes: {out}");
}

/// The fields of /proc/<pid>/status that say what a process may do.
fn confinement(status: &str) -> Vec<(String, String)> {
    let keys = [
        "CapInh",
        "CapPrm",
        "CapEff",
        "CapBnd",
        "CapAmb",
        "NoNewPrivs",
        "Seccomp",
    ];
    status
        .lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| keys.contains(k))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect()
}

fn held_nothing() -> Vec<(String, String)> {
    let zero = "0000000000000000";
    [
        ("CapInh", zero),
        ("CapPrm", zero),
        ("CapEff", zero),
        ("CapBnd", zero),
        ("CapAmb", zero),
        ("NoNewPrivs", "1"),
        ("Seccomp", "2"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

#[tokio::test]
async fn a_shared_pid_namespace_gives_containers_nothing_of_the_node() {
    let mut e = Env::start().await;
    let marker = Marker::new(&e);
    let mut config = pod_config("shared-pid");
    with_namespaces(
        &mut config,
        pb::NamespaceMode::Pod,
        pb::NamespaceMode::Pod,
        pb::NamespaceMode::Pod,
    );
    config.log_directory = e.d.dir.join("logs/shared-pid").display().to_string();
    let pod = (run_pod(&mut e.c, config.clone()).await, config);
    let (_, info) = status(&mut e.c, &pod.0).await;
    let init = info["monitor"]["init_pid"]
        .as_i64()
        .expect("the pod has an init") as i32;
    let monitor = info["monitor"]["pid"].as_i64().unwrap() as i32;

    // Seen from the node: the init holds nothing, and is not the node's binary.
    let status_of = |pid: i32| std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert_eq!(confinement(&status_of(init)), held_nothing(), "the init");
    let exe = std::fs::read_link(format!("/proc/{init}/exe")).unwrap();
    assert!(
        exe.to_string_lossy().starts_with("/memfd:crust-pod-init"),
        "the init's executable is {}",
        exe.display()
    );
    let root: Vec<_> = std::fs::read_dir(format!("/proc/{init}/root"))
        .unwrap()
        .collect();
    assert!(root.is_empty(), "the init's root is empty: {root:?}");
    assert_eq!(
        std::fs::read_link(format!("/proc/{init}/cwd")).unwrap(),
        std::path::Path::new("/")
    );
    assert_ne!(
        ns_of(init, "mnt"),
        ns_of_self("mnt"),
        "a mount namespace of its own"
    );
    let cgroup = |pid: i32| std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    assert_eq!(
        cgroup(init),
        cgroup(monitor),
        "the init stays in the pod's cgroup"
    );
    assert_eq!(status_field(&status_of(init), "Name"), "crust-pod-init");

    let tracer = e
        .run(&pod, prober(&e, "tracer", pb::NamespaceMode::Pod, "", true))
        .await;
    let plain = e
        .run(&pod, prober(&e, "plain", pb::NamespaceMode::Pod, "", false))
        .await;
    // The containers see each other and the init.
    let procs = probe(&mut e, &tracer, &["procs"]).await;
    assert!(procs.matches("sleep 600").count() >= 2, "{procs}");
    assert!(procs.lines().any(|l| l.starts_with("1 ")), "{procs}");
    for (id, who) in [
        (&tracer, "the CAP_SYS_PTRACE container"),
        (&plain, "a root container"),
    ] {
        assert_unreachable(&mut e, id, &marker, who).await;
    }
    // From inside, with CAP_SYS_PTRACE: PID 1's root is empty, its status holds nothing.
    assert_eq!(
        e.sh(&tracer, "ls -A /proc/1/root/ | wc -l").await.trim(),
        "0"
    );
    let inside = e.sh(&tracer, "cat /proc/1/status").await;
    assert_eq!(
        confinement(&inside),
        held_nothing(),
        "PID 1 seen from the pod"
    );
    // Attaching: refused without CAP_SYS_PTRACE (the init is not dumpable); allowed with it,
    // but a system call made as the init is refused by its filter.
    let plain_attach = probe(&mut e, &plain, &["ptrace", "1"]).await;
    assert_eq!(plain_attach.trim(), "attach: operation not permitted");
    let traced = probe(&mut e, &tracer, &["ptrace", "1"]).await;
    assert_eq!(
        traced.lines().collect::<Vec<_>>(),
        ["attach: ok", "socket: operation not permitted"],
        "{traced}"
    );
    // The init still reaps after the attach: an orphan of the pod does not stay a zombie.
    e.sh(&plain, "sh -c 'sleep 0.1 &' ; true").await;
    let zombies = e
        .sh(
            &plain,
            "sleep 0.5; cat /proc/[0-9]*/stat | grep -c ' Z ' || true",
        )
        .await;
    assert_eq!(zombies.trim(), "0", "orphans are reaped");
    assert_eq!(
        confinement(&status_of(init)),
        held_nothing(),
        "after the attach"
    );

    stop_pod(&mut e.c, &pod.0).await;
    assert!(exited(init), "the init goes with the pod");
    remove_pod(&mut e.c, &pod.0).await;
}

fn status_field(status: &str, key: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

#[tokio::test]
async fn container_and_target_pid_modes_show_no_process_of_crust() {
    let mut e = Env::start().await;
    let marker = Marker::new(&e);
    let pod = e.pod("own-pid").await;
    let app = e
        .run(
            &pod,
            prober(&e, "app", pb::NamespaceMode::Container, "", false),
        )
        .await;
    // kubectl debug --target: the debugging container joins the app's PID namespace.
    let debug = e
        .run(
            &pod,
            prober(&e, "debug", pb::NamespaceMode::Target, &app, true),
        )
        .await;
    let crust = std::fs::canonicalize(env!("CARGO_BIN_EXE_crust")).unwrap();
    for (id, who) in [(&app, "the app"), (&debug, "the debugging container")] {
        let procs = probe(&mut e, id, &["procs"]).await;
        let first = procs.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("1 /bin/busybox sleep 600"),
            "{who}: PID 1 is the app: {procs}"
        );
        for line in procs.lines() {
            assert!(
                !line.contains("crust") && !line.contains(crust.to_str().unwrap()),
                "{who} sees a process of crust: {line}"
            );
        }
        assert_unreachable(&mut e, id, &marker, who).await;
    }
    // The debugging container sees the app's processes, and the app sees the debugger's.
    let procs = probe(&mut e, &app, &["procs"]).await;
    assert!(procs.matches("sleep 600").count() >= 2, "{procs}");
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
}
