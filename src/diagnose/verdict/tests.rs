use super::*;
use crate::container::ExitInfo;

fn pod(state: Option<&'static str>) -> PodFacts {
    PodFacts {
        name: "ns/web".into(),
        uid: Some("u1".into()),
        sandbox: state.map(|_| "s1".into()),
        state,
        created_at: None,
        ip: None,
        problem: None,
        failed_runs: 0,
        cgroup: None,
        memory_cgroups: Vec::new(),
    }
}

fn container(state: &'static str, exit: Option<ExitInfo>) -> ContainerFacts {
    ContainerFacts {
        id: "c1".into(),
        name: "app".into(),
        attempt: 0,
        state,
        image: "busybox".into(),
        started_at: 1_000_000_000,
        exit,
        memory_limit: None,
        exits_by_itself: 0,
        stopped_by_client: None,
        cgroup: None,
        log_path: None,
        log_tail: vec![],
    }
}

fn exit(code: i32, oom: bool) -> ExitInfo {
    ExitInfo {
        code,
        signal: None,
        finished_at: 1_500_000_000,
        oom_killed: oom,
        oom_scope: None,
        message: String::new(),
        start_failed: false,
        state_lost: false,
    }
}

fn entry(fact: Fact) -> Entry {
    Entry {
        at: 1,
        pod: "ns/web".into(),
        sandbox: String::new(),
        fact,
    }
}

#[test]
fn a_failed_cni_add_is_the_cause_of_a_pod_without_sandbox() {
    let mut p = pod(None);
    p.failed_runs = 2;
    let failed = entry(Fact::SandboxFailed {
        uid: "u1".into(),
        attempt: 0,
        step: "set up the pod network".into(),
        error: "plugin bridge: no such device".into(),
    });
    let v = decide(&p, &[], &[failed.clone(), failed], None);
    assert_eq!(v.kind, "network_failed");
    assert!(
        v.summary
            .starts_with("pod ns/web has no sandbox: CNI ADD failed (2 times)"),
        "{}",
        v.summary
    );
    assert!(v.summary.contains("plugin bridge: no such device"));
}

#[test]
fn an_oom_kill_names_whose_limit() {
    let mut c = container("exited", Some(exit(137, true)));
    c.memory_limit = Some(32 << 20);
    let v = decide(&pod(Some("ready")), &[c], &[], None);
    assert_eq!(v.kind, "oom_killed");
    assert!(
        v.summary
            .ends_with("was OOM killed by its own memory limit (32 MiB)"),
        "{}",
        v.summary
    );
    let c = container("exited", Some(exit(137, true)));
    let v = decide(&pod(Some("ready")), &[c], &[], None);
    assert!(
        v.summary.contains("with no memory limit of its own"),
        "{}",
        v.summary
    );
}

/// The scope the monitor read decides; the container's limit only words it.
#[test]
fn an_oom_kill_above_the_container_names_the_pod_or_the_node() {
    let mut p = pod(Some("ready"));
    p.memory_cgroups = vec!["/sys/fs/cgroup/memory/kubepods/pod1".into()];
    let scoped = |scope: OomScope, limit| {
        let mut e = exit(137, true);
        e.oom_scope = Some(scope);
        let mut c = container("exited", Some(e));
        c.memory_limit = limit;
        decide(&p, &[c], &[], None).summary
    };
    let cgroup = |dir: &str| OomScope::Cgroup {
        dir: dir.into(),
        limit: Some(48 << 20),
    };
    let s = scoped(
        cgroup("/sys/fs/cgroup/memory/kubepods/pod1"),
        Some(64 << 20),
    );
    assert!(
        s.ends_with(
            "was OOM killed by its pod's memory limit (48 MiB): its own (64 MiB) was not reached"
        ),
        "{s}"
    );
    let s = scoped(cgroup("/sys/fs/cgroup/memory/kubepods"), None);
    assert!(
        s.ends_with(
            "by the memory limit of /sys/fs/cgroup/memory/kubepods, above its pod (48 MiB): it \
             has none of its own"
        ),
        "{s}"
    );
    let s = scoped(OomScope::Node, None);
    assert!(
        s.ends_with(
            "by the node's OOM killer: no memory limit of its own or above it was reached (it \
             has none of its own)"
        ),
        "{s}"
    );
    let s = scoped(OomScope::Container, Some(32 << 20));
    assert!(s.ends_with("by its own memory limit (32 MiB)"), "{s}");
}

#[test]
fn repeated_exits_by_itself_are_a_crash_loop_and_a_stop_is_not() {
    let mut c = container("exited", Some(exit(1, false)));
    c.attempt = 2;
    c.exits_by_itself = 3;
    let v = decide(&pod(Some("ready")), &[c], &[], None);
    assert_eq!(v.kind, "crash_loop");
    assert!(
        v.summary
            .contains("exited 3 times by itself (kubelet re-created it 2 times)"),
        "{}",
        v.summary
    );
    assert!(
        v.summary.contains("exit code 1 (Error) after 0.5 s"),
        "{}",
        v.summary
    );
    let mut c = container("exited", Some(exit(137, false)));
    c.stopped_by_client = Some(30);
    let v = decide(&pod(Some("ready")), &[c], &[], None);
    assert_eq!(v.kind, "stopped");
}

#[test]
fn running_containers_are_healthy_and_a_stopped_pod_says_so() {
    let v = decide(
        &pod(Some("ready")),
        &[container("running", None)],
        &[],
        None,
    );
    assert_eq!(v.kind, "healthy");
    let mut c = container("exited", Some(exit(137, false)));
    c.stopped_by_client = Some(30);
    let v = decide(&pod(Some("stopped")), &[c], &[], None);
    assert_eq!(v.kind, "pod_stopped");
}

#[test]
fn the_newest_attempt_of_a_name_is_judged() {
    let mut old = container("exited", Some(exit(1, false)));
    old.attempt = 0;
    let mut new = container("running", None);
    new.attempt = 1;
    new.id = "c2".into();
    // Sorted newest first, as gather sorts them.
    let v = decide(&pod(Some("ready")), &[new, old], &[], None);
    assert_eq!(v.kind, "healthy", "{}", v.summary);
}
