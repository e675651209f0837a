use super::*;

fn stopped() -> Fact {
    Fact::SandboxStopped
}

#[test]
fn facts_are_read_back_in_order_per_pod() {
    let dir = tempfile::tempdir().unwrap();
    let h = History::new(dir.path());
    h.note(
        "ns",
        "a",
        "s1",
        Fact::MonitorDied {
            pid: 7,
            cause: String::new(),
        },
    );
    h.note("ns", "b", "s2", stopped());
    h.note("ns", "a", "s1", stopped());
    let a = read(dir.path(), "ns/a");
    assert_eq!(a.len(), 2);
    assert_eq!(
        a[0].fact,
        Fact::MonitorDied {
            pid: 7,
            cause: String::new()
        }
    );
    assert_eq!(a[1].fact, stopped());
    assert!(a.iter().all(|e| e.pod == "ns/a" && e.sandbox == "s1"));
    assert_eq!(read(dir.path(), "ns/b").len(), 1);
    assert_eq!(read_all(dir.path()).len(), 2);
}

#[test]
fn a_pod_keeps_its_newest_facts_only() {
    let dir = tempfile::tempdir().unwrap();
    let h = History::new(dir.path());
    for pid in 0..(MAX_LINES as i32 + 10) {
        h.note(
            "ns",
            "a",
            "s",
            Fact::MonitorDied {
                pid,
                cause: String::new(),
            },
        );
    }
    let a = read(dir.path(), "ns/a");
    assert!(a.len() <= MAX_LINES, "{} facts kept", a.len());
    assert!(a.len() > MAX_LINES / 2);
    assert_eq!(
        a.last().unwrap().fact,
        Fact::MonitorDied {
            pid: MAX_LINES as i32 + 9,
            cause: String::new(),
        }
    );
    // A daemon started later counts what is there instead of starting from zero.
    let again = History::new(dir.path());
    for pid in 0..MAX_LINES as i32 {
        again.note(
            "ns",
            "a",
            "s",
            Fact::MonitorDied {
                pid,
                cause: String::new(),
            },
        );
    }
    assert!(read(dir.path(), "ns/a").len() <= MAX_LINES);
}

#[test]
fn a_torn_line_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let h = History::new(dir.path());
    h.note("ns", "a", "s", stopped());
    let path = dir_of(dir.path()).join(file_name("ns/a"));
    let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(b"{\"at\":1,\"pod\":\"ns/a\",\"sandb").unwrap();
    // The daemon that starts after the crash writes on a line of its own.
    History::new(dir.path()).note(
        "ns",
        "a",
        "s",
        Fact::MonitorDied {
            pid: 1,
            cause: String::new(),
        },
    );
    let a = read(dir.path(), "ns/a");
    assert_eq!(a.len(), 2, "only the torn line is skipped: {a:?}");
    assert_eq!(a[0].fact, stopped());
    assert_eq!(
        a[1].fact,
        Fact::MonitorDied {
            pid: 1,
            cause: String::new()
        }
    );
}

#[test]
fn the_oldest_pods_are_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let h = History::new(dir.path());
    for i in 0..5 {
        h.note("ns", &format!("p{i}"), "s", stopped());
    }
    prune(&dir_of(dir.path()), 3);
    assert_eq!(read_all(dir.path()).len(), 3);
}

#[test]
fn names_never_become_paths() {
    assert!(!file_name("../../etc/passwd").contains('/'));
    assert_ne!(file_name("a/b"), file_name("a/c"));
}
