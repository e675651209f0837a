//! What a cgroup's processes hold open (cAdvisor's `container_file_descriptors` and
//! `container_sockets`), and the open-files limit of a container's main process
//! (`container_ulimits_soft{ulimit="max_open_files"}`), from `/proc`.

use std::path::Path;

/// Open file descriptors of a set of processes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenFiles {
    pub fds: u64,
    /// Those that are sockets.
    pub sockets: u64,
}

/// Counts the descriptors of `pids` (a process that exits meanwhile counts for nothing).
pub fn open_files(pids: &[i32]) -> OpenFiles {
    open_files_in(Path::new("/proc"), pids)
}

fn open_files_in(proc: &Path, pids: &[i32]) -> OpenFiles {
    let mut out = OpenFiles::default();
    for pid in pids {
        let Ok(entries) = std::fs::read_dir(proc.join(pid.to_string()).join("fd")) else {
            continue;
        };
        for e in entries.flatten() {
            out.fds += 1;
            if std::fs::read_link(e.path())
                .is_ok_and(|t| t.as_os_str().as_encoded_bytes().starts_with(b"socket:"))
            {
                out.sockets += 1;
            }
        }
    }
    out
}

/// The soft RLIMIT_NOFILE of `pid`; None when it is gone or unlimited.
pub fn open_files_limit(pid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    parse_open_files_limit(&text)
}

/// `/proc/<pid>/limits`: `Max open files   1024   4096   files`.
fn parse_open_files_limit(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_and_sockets_of_a_process() {
        // A child of its own: this test process's descriptors change as other tests run.
        let (socket, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("10")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::from(std::os::fd::OwnedFd::from(
                socket,
            )))
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        // stdin, stdout (the socket) and stderr, and whatever the test runner leaks into every
        // child (cargo's jobserver pipes): counted apart from the function under test. Until
        // it has exec'd, the child may still hold this process's other descriptors.
        let want = || OpenFiles {
            fds: std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64),
            sockets: 1,
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut got = open_files(&[pid]);
        while got != want() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
            got = open_files(&[pid]);
        }
        let expected = want();
        let _ = child.kill();
        let _ = child.wait();
        assert!(expected.fds >= 3, "{expected:?}");
        assert_eq!(got, expected);
        assert_eq!(open_files(&[i32::MAX]), OpenFiles::default());
    }

    #[test]
    fn the_soft_open_files_limit() {
        let text = "Limit                     Soft Limit           Hard Limit           Units\n\
                    Max cpu time              unlimited            unlimited            seconds\n\
                    Max open files            1024                 524288               files\n";
        assert_eq!(parse_open_files_limit(text), Some(1024));
        assert_eq!(
            parse_open_files_limit("Max open files unlimited unlimited files"),
            None
        );
        assert!(open_files_limit(std::process::id() as i32).is_some());
    }
}
