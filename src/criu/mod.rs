//! CRIU, the program that checkpoints a process tree into image files and restores it: finding
//! a usable binary, and the command lines of a dump.
//!
//! crust runs CRIU's command line, not its RPC: a dump is one call whose options are all
//! known up front, and the images and the log land in one directory the caller owns. A binary
//! is usable when it reports version 3.16 or later (runc's and containerd's minimum) and `criu
//! check` passes on this kernel: Debian 12's 3.17 reports its version but fails that check on
//! kernels 6.13 and later, which is why the check is part of "usable" and not a version rule.
//!
//! Messages name what the node suite and kubelet's users look for: an error without a usable
//! CRIU says "checkpoint/restore support not available".

mod dump;

use std::path::{Path, PathBuf};
use std::process::Command;

pub use dump::{DumpPlan, ExternalNamespace, LOG, namespace_inode};

/// What a container's stdin, stdout and stderr were at its dump (`pipe:[1234]`, `/dev/null`),
/// as runc records them beside CRIU's images: a restore hands new pipes in their place.
pub const DESCRIPTORS: &str = "descriptors.json";

/// runc's and containerd's minimum, as CRIU numbers versions (major * 10000 + minor * 100 +
/// sublevel).
pub const MIN_VERSION: u32 = 31600;

/// A CRIU binary that passed its checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Criu {
    pub path: PathBuf,
    /// As CRIU numbers it: 4.1.1 is 40101.
    pub version: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum CriuError {
    /// No usable binary: none found, too old, or `criu check` failed here.
    #[error("checkpoint/restore support not available: {0}")]
    Unavailable(String),
    /// A dump or restore ran and failed; `log` is the end of CRIU's own log.
    #[error("criu {action} failed ({status}): {log}")]
    Failed {
        action: &'static str,
        status: String,
        log: String,
    },
    #[error("running {path}: {source}")]
    Spawn {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl Criu {
    /// The binary `configured` names, else the `criu` found on `PATH`, once it passed its
    /// checks.
    pub fn find(configured: Option<&Path>) -> Result<Criu, CriuError> {
        let path = match configured {
            Some(p) => p.to_owned(),
            None => on_path("criu").ok_or_else(|| {
                CriuError::Unavailable(
                    "no criu on PATH (install CRIU 4.2 or later, or set criu_path; docs/checkpoint.md)".into(),
                )
            })?,
        };
        let version = version_of(&path)?;
        if version < MIN_VERSION {
            return Err(CriuError::Unavailable(format!(
                "CRIU binary not found or too old (<{MIN_VERSION}): {} is {}",
                path.display(),
                dotted(version)
            )));
        }
        let check = run(&path, &["check"])?;
        if !check.status.success() {
            return Err(CriuError::Unavailable(format!(
                "{} (CRIU {}) fails `criu check` on this kernel: {}",
                path.display(),
                dotted(version),
                last_line(&check.stderr, &check.stdout)
            )));
        }
        Ok(Criu { path, version })
    }

    pub fn version_text(&self) -> String {
        dotted(self.version)
    }
}

/// The oldest CRIU that checkpoints everything it can on kernel `release` (`6.18.4-...`),
/// and why: 6.13 split the vDSO's data pages (CRIU 4.1), 6.16 made `SO_PASSSEC` unix-only, and
/// CRIU before 4.2 cannot dump a TCP socket there.
pub fn needed_for_kernel(release: &str) -> (u32, &'static str) {
    let mut parts = release
        .split(['.', '-'])
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    match (major, minor) {
        (m, _) if m > 6 => (40200, "it cannot dump a TCP socket on Linux 6.16 and later"),
        (6, n) if n >= 16 => (40200, "it cannot dump a TCP socket on Linux 6.16 and later"),
        (6, n) if n >= 13 => (
            40100,
            "it fails on Linux 6.13 and later (the vDSO's new layout)",
        ),
        _ => (MIN_VERSION, "runc's and containerd's minimum"),
    }
}

/// `40101` as `4.1.1`.
pub fn dotted(version: u32) -> String {
    format!(
        "{}.{}.{}",
        version / 10000,
        version / 100 % 100,
        version % 100
    )
}

fn version_of(path: &Path) -> Result<u32, CriuError> {
    let out = run(path, &["--version"])?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_version(&text).ok_or_else(|| {
        CriuError::Unavailable(format!(
            "{} --version printed no version: {}",
            path.display(),
            last_line(&out.stderr, &out.stdout)
        ))
    })
}

/// CRIU's `Version: 4.1.1` (or `Version: 3.17`) as a number.
fn parse_version(text: &str) -> Option<u32> {
    let v = text
        .lines()
        .find_map(|l| l.strip_prefix("Version:"))?
        .trim();
    let mut parts = v.split('.').map(|p| {
        p.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
    });
    let major: u32 = parts.next()?.parse().ok()?;
    let minor: u32 = parts.next()?.parse().ok()?;
    let sub: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    Some(major * 10000 + minor * 100 + sub)
}

fn run(path: &Path, args: &[&str]) -> Result<std::process::Output, CriuError> {
    Command::new(path)
        .args(args)
        .output()
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => {
                CriuError::Unavailable(format!("criu_path {} does not exist", path.display()))
            }
            _ => CriuError::Spawn {
                path: path.to_owned(),
                source,
            },
        })
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// The last non-empty line of stderr, else of stdout.
fn last_line(stderr: &[u8], stdout: &[u8]) -> String {
    [stderr, stdout]
        .iter()
        .filter_map(|b| {
            String::from_utf8_lossy(b)
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(|l| l.trim().to_owned())
        })
        .next()
        .unwrap_or_else(|| "no output".into())
}

/// The lines of CRIU's log that say what failed (its `Error` lines), else its last lines.
pub fn log_errors(log: &Path) -> String {
    let Ok(text) = std::fs::read_to_string(log) else {
        return format!("no log at {}", log.display());
    };
    let errors: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("Error"))
        // CRIU logs this one on every run where it may not raise its own limit; it is not why
        // anything failed.
        .filter(|l| !l.contains("RLIMIT_NOFILE"))
        .collect();
    let lines = if errors.is_empty() {
        text.lines().rev().take(3).collect::<Vec<_>>()
    } else {
        errors.into_iter().rev().take(3).rev().collect()
    };
    lines.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_as_criu_numbers_them() {
        assert_eq!(parse_version("Version: 4.1.1\n"), Some(40101));
        assert_eq!(parse_version("Version: 3.17\nGitID: x\n"), Some(31700));
        assert_eq!(parse_version("Version: 4.2-rc1\n"), Some(40200));
        assert_eq!(parse_version("criu: unknown\n"), None);
        assert_eq!(dotted(40101), "4.1.1");
    }

    #[test]
    fn each_kernel_needs_the_criu_that_works_on_it() {
        assert_eq!(needed_for_kernel("6.18.44-fc-v1272").0, 40200);
        assert_eq!(needed_for_kernel("6.16.0").0, 40200);
        assert_eq!(needed_for_kernel("6.13.2-arch1").0, 40100);
        assert_eq!(needed_for_kernel("6.1.0-28-amd64").0, MIN_VERSION);
        assert_eq!(needed_for_kernel("7.0.1").0, 40200);
    }

    #[test]
    fn a_missing_binary_is_unavailable_and_says_where() {
        let e = Criu::find(Some(Path::new("/nonexistent/criu"))).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("checkpoint/restore support not available: criu_path /nonexistent"),
            "{e}"
        );
    }

    #[test]
    fn a_binary_without_a_version_is_unavailable() {
        let e = Criu::find(Some(Path::new("/bin/true"))).unwrap_err();
        assert!(matches!(e, CriuError::Unavailable(_)), "{e}");
    }

    #[test]
    fn log_errors_keep_the_failure_and_drop_the_rlimit_noise() {
        let dir = std::env::temp_dir().join(format!("crust-criu-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("dump.log");
        std::fs::write(
            &log,
            "(0.1) Error (util.c:1): rlimit: Can't setup RLIMIT_NOFILE\n(0.2) dumping\n\
             (0.3) Error (files-reg.c:1790): Can't lookup mount=27 for fd=1\n",
        )
        .unwrap();
        assert_eq!(
            log_errors(&log),
            "(0.3) Error (files-reg.c:1790): Can't lookup mount=27 for fd=1"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
