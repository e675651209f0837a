//! The daemon-to-monitor protocol across versions: tests/fixtures/monitor-protocol/v<N> holds
//! the lines a crust of protocol N writes (requests as its daemon sends them, answers and
//! events as its monitors send them). A monitor outlives the daemon that started it, so this
//! build must read every older line, and a request it sends must still be, field for field,
//! what an older monitor reads (serde drops fields it does not know, so a new field would be
//! ignored by it silently): a change that fails here raises [`super::PROTOCOL`] and gates the
//! request on the monitor's version.

use super::{Event, PROTOCOL, Reply, Request};

fn lines(version: u32, name: &str) -> Vec<serde_json::Value> {
    let path = format!(
        "{}/tests/fixtures/monitor-protocol/v{version}/{name}.jsonl",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let values: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{path}: {e}: {l}")))
        .collect();
    assert!(!values.is_empty(), "{path} holds no line");
    values
}

#[test]
fn requests_of_protocol_1_are_read_and_still_written_as_they_were() {
    let mut ops = std::collections::BTreeSet::new();
    for line in lines(1, "requests") {
        let request: Request = serde_json::from_value(line.clone())
            .unwrap_or_else(|e| panic!("a v1 request this build cannot read: {e}: {line}"));
        ops.insert(request.op_name());
        assert_eq!(
            unordered_sets(serde_json::to_value(&request).unwrap()),
            unordered_sets(line),
            "this build writes {} otherwise than a v1 monitor reads it",
            request.op_name()
        );
    }
    // Every request there is, so that a new one cannot slip past this test.
    assert_eq!(ops.len(), 11, "{ops:?}");
}

/// The capability lists sorted: oci-spec keeps them in hash sets, written in no fixed order.
fn unordered_sets(mut line: serde_json::Value) -> serde_json::Value {
    if let Some(caps) = line
        .pointer_mut("/process/capabilities")
        .and_then(|c| c.as_object_mut())
    {
        for list in caps.values_mut().filter_map(|l| l.as_array_mut()) {
            list.sort_by_key(|v| v.to_string());
        }
    }
    line
}

#[test]
fn answers_and_events_of_protocol_1_are_read() {
    for line in lines(1, "replies") {
        let reply: Reply = serde_json::from_value(line.clone())
            .unwrap_or_else(|e| panic!("a v1 answer this build cannot read: {e}: {line}"));
        if let Reply::Ok { protocol, .. } = reply {
            assert_eq!(protocol, 1, "a v1 monitor's Ok names no version: it is 1");
        }
    }
    for line in lines(1, "events") {
        serde_json::from_value::<Event>(line.clone())
            .unwrap_or_else(|e| panic!("a v1 event this build cannot read: {e}: {line}"));
    }
}

#[test]
fn this_build_names_its_protocol_in_its_answer() {
    let identity = super::Identity {
        pid: 7,
        start_time: 9,
        init_pid: None,
    };
    let line = serde_json::to_value(Reply::Ok {
        sandbox_id: "p".into(),
        identity,
        protocol: PROTOCOL,
    })
    .unwrap();
    assert_eq!(line["ok"]["protocol"], PROTOCOL);
    let read: Reply = serde_json::from_value(line).unwrap();
    assert!(matches!(read, Reply::Ok { protocol, .. } if protocol == PROTOCOL));
}

/// Prints the lines of this build's protocol (run by hand when PROTOCOL is raised, into a new
/// fixture directory).
#[test]
#[ignore]
fn print_fixture_lines() {
    use super::*;
    let process = oci_spec::runtime::Process::default();
    let create = CreateRequest {
        id: "c1".into(),
        bundle: "/var/lib/crust/containers/c1".into(),
        runtime_root: "/run/crust/runtime".into(),
        dir: "/run/crust/containers/c1".into(),
        log_path: Some("/var/log/pods/p/app/0.log".into()),
        tty: false,
        stdin: true,
        stdin_once: true,
        systemd: false,
        memory_cgroup: Some("/sys/fs/cgroup/memory/kubepods/p/c1".into()),
        cgroup_procs: Some("/sys/fs/cgroup/pids/kubepods/p/c1/cgroup.procs".into()),
        own_pid_namespace: true,
        runtime: Some(crate::model::OciRuntime {
            handler: "runc".into(),
            path: "/usr/sbin/runc".into(),
            root: "/run/crust/runc".into(),
            systemd_cgroup: false,
            args: vec![],
            sandbox: false,
        }),
        restore: Some(RestoreRequest {
            criu: "/usr/sbin/criu".into(),
            images_dir: "/var/lib/crust/checkpoints/c1".into(),
        }),
    };
    let requests = vec![
        Request::Ping,
        Request::Shutdown,
        Request::Create(Box::new(create)),
        Request::Start { id: "c1".into() },
        Request::Signal {
            id: "c1".into(),
            signal: 15,
            all: true,
        },
        Request::Forget { id: "c1".into() },
        Request::Exec(Box::new(ExecRequest {
            id: "c1".into(),
            runtime_root: "/run/crust/runtime".into(),
            process: process.clone(),
            timeout_ms: Some(1000),
            max_output: 16 << 20,
        })),
        Request::ReopenLog { id: "c1".into() },
        Request::Subscribe,
        Request::ExecStream(Box::new(ExecStreamRequest {
            id: "c1".into(),
            runtime_root: "/run/crust/runtime".into(),
            process,
            stdin: true,
        })),
        Request::Attach {
            id: "c1".into(),
            stdin: true,
        },
    ];
    for r in requests {
        println!("R {}", serde_json::to_string(&r).unwrap());
    }
    let exit = ExitInfo {
        code: 137,
        signal: Some(9),
        finished_at: 1_765_000_000_000_000_000,
        oom_killed: true,
        oom_scope: Some(OomScope::Container),
        message: "OOM".into(),
        start_failed: false,
        state_lost: false,
    };
    let replies = vec![
        Reply::Err {
            fault: Fault::NotFound,
            error: "no container c9".into(),
        },
        Reply::Created { pid: 42 },
        Reply::Started {
            started_at: 1_765_000_000_000_000_000,
        },
        Reply::StartFailed {
            fault: Fault::Invalid,
            error: "exec: no such file".into(),
            exit: exit.clone(),
        },
        Reply::Done,
        Reply::Exec(ExecOutput {
            exit_code: 1,
            stdout: b"out".to_vec(),
            stderr: b"err".to_vec(),
            timed_out: false,
            truncated: true,
        }),
        Reply::Snapshot {
            containers: vec![ContainerState {
                id: "c1".into(),
                pid: Some(42),
                started_at: Some(1),
                exit: Some(exit.clone()),
            }],
        },
        Reply::Streaming { pid: 43 },
        Reply::Exited { exit_code: 0 },
        Reply::Attached { tty: false },
    ];
    for r in replies {
        println!("A {}", serde_json::to_string(&r).unwrap());
    }
    let e = Event::Exited {
        id: "c1".into(),
        exit,
        started: true,
    };
    println!("E {}", serde_json::to_string(&e).unwrap());
}
