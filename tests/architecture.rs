//! The shape STYLE.md asks for, checked: protobuf types stay in the gRPC adapters, `unsafe`
//! stays in `src/sys`, and every place that makes a process a container could see is named.

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn offenders(pattern: &str, allowed: &[&str]) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files
        .into_iter()
        .filter_map(|f| {
            let rel = f.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&f).unwrap();
            let hit = text
                .lines()
                .any(|l| !l.trim_start().starts_with("//") && l.contains(pattern));
            (hit && !allowed.iter().any(|a| rel.starts_with(a))).then_some(rel)
        })
        .collect()
}

#[test]
fn protobuf_types_stay_in_the_adapters() {
    // The benchmark clients speak CRI, so they use its types too.
    let found = offenders("pb::", &["cri/", "stream/", "bin/"]);
    assert!(
        found.is_empty(),
        "protobuf types used outside src/cri: {found:?}"
    );
}

#[test]
fn unsafe_code_stays_in_sys() {
    let found = offenders("unsafe ", &["sys/"]);
    assert!(found.is_empty(), "unsafe outside src/sys: {found:?}");
}

/// Every file of src/ that makes a process (a fork, a libcontainer build) or moves one into
/// other namespaces (setns, unshare), with what such a process holds once a container can see
/// it (docs/security.md). A new place fails this test until it is listed here with its reason.
const PROCESS_MAKERS: &[(&str, &str)] = &[
    (
        "monitor/process.rs",
        "the monitor forks itself away from the daemon and unshares the pod's net, ipc and uts \
         namespaces (pid for its children only): it stays in the node's PID namespace, where no \
         container of the pod sees it",
    ),
    (
        "monitor/pod_init.rs",
        "PID 1 of a shared PID namespace: an empty read-only root, no capability, no_new_privs, \
         a seccomp filter, not dumpable, executed from a sealed memfd",
    ),
    (
        "monitor/worker.rs",
        "runtime workers stay in the node's PID namespace; the processes libcontainer clones \
         from them join the pod's namespaces non-dumpable (libcontainer's builder) until they \
         exec the container's own program",
    ),
    (
        "sys/mod.rs",
        "the wrappers themselves; tcp_socket_in_netns enters only a pod's network namespace, on \
         a thread of the daemon that ends at once and is in no PID namespace of a pod",
    ),
    ("oci/seccomp_default.rs", "a unit test's own child process"),
    (
        "bin/bench/stream_portforward.rs",
        "the benchmark client, not part of the runtime",
    ),
];

#[test]
fn every_place_that_makes_a_process_for_a_pod_is_named() {
    let patterns = [
        "fork_single_threaded()",
        "setns(",
        "unshare(",
        "ContainerBuilder::new",
    ];
    let mut found: Vec<String> = patterns.iter().flat_map(|p| offenders(p, &[])).collect();
    found.sort();
    found.dedup();
    let mut listed: Vec<String> = PROCESS_MAKERS.iter().map(|(f, _)| f.to_string()).collect();
    listed.sort();
    assert_eq!(
        found, listed,
        "files that make processes or enter namespaces, against PROCESS_MAKERS"
    );
}
