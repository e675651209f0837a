//! The shape STYLE.md asks for, checked: protobuf types stay in the gRPC adapters, `unsafe`
//! stays in `src/sys`, every place that makes a process a container could see is named, and
//! imports run one way: between the top-level rooms of `src/` (no circle, however long), and
//! between the files of each room (STYLE.md's point 13: a pair of files that need each other
//! is one file, or a third holds what both use). Imports are read from the code itself:
//! `use` trees and inline `crate::`/`super::`/`self::` paths, resolved to the modules that
//! exist.

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
         container of the pod sees it; for a pod with a user namespace a short-lived child of \
         it (sys/userns.rs) creates those namespaces inside the pod's, and is gone before the \
         pod runs anything",
    ),
    (
        "monitor/pod_init.rs",
        "PID 1 of a shared PID namespace: an empty read-only root, no capability, no_new_privs, \
         a seccomp filter, not dumpable, executed from a sealed memfd",
    ),
    (
        "monitor/workload/worker.rs",
        "runtime workers stay in the node's PID namespace; the processes libcontainer clones \
         from them join the pod's namespaces non-dumpable (libcontainer's builder) until they \
         exec the container's own program",
    ),
    (
        "monitor/workload/standin.rs",
        "a stand-in is a fork of a runtime worker, in the node's PID namespace and no namespace \
         of the pod: it runs the sandboxing binary's start, wait and kill, whose container \
         processes are the sandbox's own",
    ),
    (
        "sys/mod.rs",
        "the wrappers themselves; in_netns (a socket for port-forward, the gratuitous ARP after \
         CNI ADD in sys/arp.rs) enters only a pod's network namespace, on a thread of the \
         daemon that ends at once and is in no PID namespace of a pod",
    ),
    (
        "sys/userns.rs",
        "the user namespace holder: a fork of the monitor (or of the daemon's start-up probe) \
         that unshares a user namespace the monitor maps, creates the pod's namespaces in it and \
         exits once they are pinned; never in a PID namespace of a pod",
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
        "fork_sibling_single_threaded()",
        "unistd::fork",
        "{ fork() }",
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

/// The module path of a source file: `src/a/b.rs` and `src/a/b/mod.rs` are `a::b`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// Code without its comments (from `//` to the end of a line), so that paths named in docs
/// are not taken for imports.
fn code_of(text: &str) -> String {
    text.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Expands a `use` tree (`a::{b, c::{d, e}}`, no spaces) into its paths.
fn expand_use(tree: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let mut depth = 0;
    let mut start = 0;
    let mut items = Vec::new();
    for (i, ch) in tree.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&tree[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&tree[start..]);
    for item in items.into_iter().filter(|i| !i.is_empty()) {
        let mut path = prefix.to_vec();
        match item.find('{') {
            Some(open) => {
                path.extend(segments(&item[..open]));
                let close = item.rfind('}').unwrap_or(item.len());
                expand_use(&item[open + 1..close], &path, out);
            }
            None => {
                path.extend(segments(item.split(" as ").next().unwrap_or(item)));
                out.push(path);
            }
        }
    }
}

fn segments(s: &str) -> impl Iterator<Item = String> + '_ {
    s.split("::").filter(|p| !p.is_empty()).map(str::to_owned)
}

/// A `use` tree with no whitespace but the spaces around `as`.
fn tidy_use(tree: &str) -> String {
    let words: Vec<&str> = tree.split_whitespace().collect();
    let mut out = words.join(" ");
    for sep in ["{", "}", ",", "::"] {
        out = out
            .replace(&format!(" {sep}"), sep)
            .replace(&format!("{sep} "), sep);
    }
    out
}

/// Every `crate::`, `super::` and `self::` path a file names, in `use` items or inline.
fn paths_named(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("use ") {
        let before = rest[..i].chars().last();
        rest = &rest[i + 4..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let Some(end) = rest.find(';') else { break };
        expand_use(&tidy_use(&rest[..end]), &[], &mut out);
    }
    let bytes = code.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(start) {
            let at = from + i;
            from = at + start.len();
            if at > 0
                && (bytes[at - 1].is_ascii_alphanumeric()
                    || bytes[at - 1] == b'_'
                    || bytes[at - 1] == b':')
            {
                continue;
            }
            let end = code[at..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .map_or(code.len(), |e| at + e);
            out.push(segments(&code[at..end]).collect());
        }
    }
    out
}

/// The module each module of src/ imports, resolved to the modules that exist.
fn module_graph() -> std::collections::BTreeMap<Vec<String>, std::collections::BTreeSet<Vec<String>>>
{
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    // The binaries speak to the library as `crust::`; they are not rooms.
    files.retain(|f| !f.starts_with(src.join("bin")) && f != &src.join("main.rs"));
    let modules: std::collections::BTreeSet<Vec<String>> =
        files.iter().map(|f| module_of(&src, f)).collect();
    let mut graph = std::collections::BTreeMap::new();
    for file in &files {
        let here = module_of(&src, file);
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let mut uses = std::collections::BTreeSet::new();
        for path in paths_named(&code) {
            let mut abs = match path.first().map(String::as_str) {
                Some("crate") => path[1..].to_vec(),
                Some("super") => {
                    let ups = path.iter().take_while(|p| *p == "super").count();
                    let mut base = here.clone();
                    base.truncate(base.len().saturating_sub(ups));
                    base.extend_from_slice(&path[ups..]);
                    base
                }
                Some("self") => [here.clone(), path[1..].to_vec()].concat(),
                _ => continue,
            };
            while !abs.is_empty() && !modules.contains(&abs) {
                abs.pop();
            }
            if !abs.is_empty() && abs != here {
                uses.insert(abs);
            }
        }
        graph.insert(here, uses);
    }
    graph
}

/// A circle in `graph`, if there is one, as the nodes around it.
fn circle<N: Ord + Clone>(
    graph: &std::collections::BTreeMap<N, std::collections::BTreeSet<N>>,
) -> Option<Vec<N>> {
    fn visit<N: Ord + Clone>(
        n: &N,
        graph: &std::collections::BTreeMap<N, std::collections::BTreeSet<N>>,
        path: &mut Vec<N>,
        done: &mut std::collections::BTreeSet<N>,
    ) -> Option<Vec<N>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            return Some(path[i..].to_vec());
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.clone());
        for next in graph.get(n).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.clone());
        None
    }
    let mut done = std::collections::BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

#[test]
fn top_level_rooms_import_each_other_one_way() {
    let mut rooms: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for (from, to) in module_graph() {
        let Some(room) = from.first() else { continue };
        for other in to.iter().filter_map(|t| t.first()) {
            if other != room {
                rooms.entry(room.clone()).or_default().insert(other.clone());
            }
        }
    }
    // The graph is real: the adapters stand over the rooms they call.
    assert!(rooms["cri"].contains("container") && rooms["container"].contains("sandbox"));
    assert_eq!(
        circle(&rooms),
        None,
        "top-level rooms of src/ in a circle: {rooms:#?}"
    );
}

#[test]
fn files_of_a_room_import_each_other_one_way() {
    let graph = module_graph();
    let mut parents: std::collections::BTreeSet<Vec<String>> = Default::default();
    for m in graph.keys() {
        parents.insert(m[..m.len().saturating_sub(1)].to_vec());
    }
    for parent in parents {
        // The siblings under `parent`, and which of them each one names.
        let mut siblings: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
            Default::default();
        for (from, to) in &graph {
            if from.len() != parent.len() + 1 || !from.starts_with(&parent) {
                continue;
            }
            let uses = to
                .iter()
                .filter(|t| t.len() > parent.len() && t.starts_with(&parent))
                .map(|t| t[parent.len()].clone())
                .filter(|t| *t != from[parent.len()])
                .collect();
            siblings.insert(from[parent.len()].clone(), uses);
        }
        let found = circle(&siblings);
        assert!(
            found.is_none(),
            "modules of crate::{} import each other around a circle: {found:?}",
            parent.join("::")
        );
    }
}

/// Files of the daemon allowed to change the node's file system or mounts without
/// `crate::durable`, each with why its changes are not durable steps of the daemon.
const NOT_DURABLE_STEPS: &[(&str, &str)] = &[
    ("durable.rs", "the durable steps themselves"),
    (
        "monitor/",
        "the monitor is another process, with failpoints of its own (monitor/client.rs, the \
         daemon's side, takes its steps through durable like the other rooms)",
    ),
    ("sys/", "the system call wrappers durable builds on"),
    (
        "check/",
        "crust check probes the host in scratch directories it removes at once",
    ),
    ("bin/", "the benchmark clients, not part of the runtime"),
    (
        "history/",
        "each pod's history is a diagnostic log appended line by line; no recovery reads it \
         and a reader skips a torn line",
    ),
    ("cri/fuzz.rs", "fuzz entry points, in temporary directories"),
    (
        "image/fuzz.rs",
        "fuzz entry points, in temporary directories",
    ),
    (
        "image/store/unpack/extract.rs",
        "a layer is extracted into a staging directory; renaming it into place is the step",
    ),
    (
        "image/store/unpack/sparse.rs",
        "writes holes into files of the staging directory",
    ),
    (
        "image/store/unpack/extract_tests.rs",
        "unit tests of the extraction",
    ),
    (
        "failpoint.rs",
        "the marker files of pausing failpoints (debug builds, for tests)",
    ),
    (
        "snapshot/overlay.rs",
        "mounts through the new mount API (fsopen, fsmount, move_mount) and reports the \
         move_mount with durable::step",
    ),
];

/// The call on `line` that changes the file system or the mount table, if there is one.
fn durable_call(line: &str) -> Option<&'static str> {
    // std::fs's changes, however the module is named (`std::fs::`, `fs::`), but not
    // `rootfs::remove_dir` and the like.
    const FS: &[&str] = &[
        "create_dir(",
        "create_dir_all(",
        "remove_dir(",
        "remove_dir_all(",
        "remove_file(",
        "rename(",
        "write(",
        "hard_link(",
        "symlink(",
    ];
    for call in FS {
        let pat = format!("fs::{call}");
        let mut from = 0;
        while let Some(i) = line[from..].find(&pat) {
            let at = from + i;
            let before = line[..at].chars().last();
            if !before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                return Some(call);
            }
            from = at + pat.len();
        }
    }
    if line.contains("File::create(") {
        return Some("File::create");
    }
    if line.contains(".create(true)") || line.contains(".create_new(true)") {
        return Some("open with create");
    }
    // Mounts: nix's and rustix's, inline or imported by name.
    if ["mount::mount(", "mount::umount", "rustix::mount"]
        .iter()
        .any(|c| line.contains(c))
    {
        return Some("mount");
    }
    if let Some(list) = line.trim_start().strip_prefix("use nix::mount::") {
        let names = list.trim_matches(|c: char| "{};".contains(c));
        if names
            .split(',')
            .any(|n| matches!(n.trim(), "mount" | "umount" | "umount2"))
        {
            return Some("mount (imported)");
        }
    }
    None
}

/// The code of a file before its unit tests (`#[cfg(test)] mod ...` at the end).
fn production_code(text: &str) -> String {
    let mut out = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        if l.trim() == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|n| n.trim_start().starts_with("mod "))
        {
            break;
        }
        out.push(l);
    }
    code_of(&out.join("\n"))
}

#[test]
fn durable_steps_of_the_daemon_go_through_crate_durable() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut found = Vec::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
        let daemon_side = ["monitor/client.rs", "monitor/session.rs"].contains(&rel.as_str());
        if rel == "main.rs"
            || (!daemon_side && NOT_DURABLE_STEPS.iter().any(|(a, _)| rel.starts_with(a)))
        {
            continue;
        }
        let code = production_code(&std::fs::read_to_string(&f).unwrap());
        for (n, line) in code.lines().enumerate() {
            if let Some(call) = durable_call(line) {
                found.push(format!("{rel}:{}: {call}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "durable steps outside crate::durable (no crash point after them):\n{}",
        found.join("\n")
    );
}
