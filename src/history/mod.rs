//! Each pod's history: what crust did for it and what happened to it, one JSON line per fact
//! in `<state>/history/<key>.jsonl`, for `crust diagnose`. The records say where a pod and its
//! containers are now; the history says how they got there, including what the records forget
//! on purpose: a RunPodSandbox that failed and was rolled back (its record is gone), the
//! containers kubelet removed before re-creating them (a crash loop), who stopped a container.
//!
//! Keyed by the pod's namespace and name, not its sandbox id: kubelet retries a failed
//! RunPodSandbox and re-creates a dead sandbox under a new id, and the question is about the
//! pod. Each line names its sandbox.
//!
//! A log, not a record: facts are appended (`O_APPEND`, one `write` per line, no fsync), so
//! noting one never slows a verb by a disk flush and a crash loses at most the line being
//! written; the reader skips a torn line. Nothing in crust's recovery reads it, so its writes
//! are not durable steps (tests/architecture.rs names this room among those exempt). Bounded:
//! a pod keeps its last `MAX_LINES` facts (the file is rewritten to the newest half when it
//! reaches that), and the directory its `MAX_PODS` most recently changed pods.

use std::collections::HashMap;
use std::fs;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

mod fact;
pub use fact::Fact;

/// Facts kept per pod.
pub const MAX_LINES: usize = 256;
/// Pods kept.
pub const MAX_PODS: usize = 2048;
/// New pod files between two checks of `MAX_PODS`.
const PRUNE_EVERY: usize = 64;

/// One fact about a pod, as a line of its history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Nanoseconds since the epoch.
    pub at: i64,
    /// `namespace/name` of the pod.
    pub pod: String,
    /// The sandbox it concerns (empty for a RunPodSandbox that failed before it had one).
    pub sandbox: String,
    #[serde(flatten)]
    pub fact: Fact,
}

/// The history of every pod under one state directory.
pub struct History {
    dir: PathBuf,
    /// Lines in each file this daemon appended to (counted once on first use).
    lines: Mutex<HashMap<PathBuf, usize>>,
}

impl History {
    pub fn new(state_dir: &Path) -> History {
        History {
            dir: dir_of(state_dir),
            lines: Mutex::new(HashMap::new()),
        }
    }

    /// Appends `fact` to the history of pod `namespace/name`. Never fails the caller: a
    /// history that cannot be written is logged and the verb goes on.
    pub fn note(&self, namespace: &str, name: &str, sandbox: &str, fact: Fact) {
        let entry = Entry {
            at: crate::clock::now_nanos(),
            pod: format!("{namespace}/{name}"),
            sandbox: sandbox.to_owned(),
            fact,
        };
        if let Err(e) = self.append(&entry) {
            tracing::warn!(pod = %entry.pod, error = %e, dir = %self.dir.display(), "noting the pod's history");
        }
    }

    fn append(&self, entry: &Entry) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(entry).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let path = self.dir.join(file_name(&entry.pod));
        let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        let is_new = !lines.contains_key(&path) && !path.exists();
        if is_new {
            fs::create_dir_all(&self.dir)?;
        }
        let count = match lines.get(&path) {
            Some(n) => *n,
            None => {
                // First use since start: a crash may have torn the last line; the next one
                // starts on a line of its own.
                if !ends_with_newline(&path) {
                    line.insert(0, b'\n');
                }
                read_lines(&path).len()
            }
        };
        let count = if count + 1 > MAX_LINES {
            keep_newest(&path, MAX_LINES / 2)?
        } else {
            count
        };
        fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?
            .write_all(&line)?;
        lines.insert(path, count + 1);
        if is_new && lines.len() % PRUNE_EVERY == 0 {
            prune(&self.dir, MAX_PODS);
            // The counts of pruned pods go too, so the map stays as bounded as the directory.
            lines.retain(|p, _| p.exists());
        }
        Ok(())
    }
}

/// `<state>/history`.
pub fn dir_of(state_dir: &Path) -> PathBuf {
    state_dir.join("history")
}

/// The history of pod `namespace/name` under `state_dir`, oldest first.
pub fn read(state_dir: &Path, pod: &str) -> Vec<Entry> {
    parse(&read_lines(&dir_of(state_dir).join(file_name(pod))))
}

/// Every pod's history under `state_dir`, each oldest first.
pub fn read_all(state_dir: &Path) -> Vec<Vec<Entry>> {
    let Ok(dir) = fs::read_dir(dir_of(state_dir)) else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        .map(|e| parse(&read_lines(&e.path())))
        .filter(|h| !h.is_empty())
        .collect()
}

/// A file name for the pod that no namespace or name can turn into a path.
fn file_name(pod: &str) -> String {
    let digest = Sha256::digest(pod.as_bytes());
    format!("{}.jsonl", hex::encode(&digest[..16]))
}

/// Whether the file ends a line (an empty or missing one does).
fn ends_with_newline(path: &Path) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = fs::File::open(path) else {
        return true;
    };
    let mut last = [b'\n'];
    if f.seek(SeekFrom::End(-1)).is_ok() {
        let _ = f.read_exact(&mut last);
    }
    last[0] == b'\n'
}

fn read_lines(path: &Path) -> Vec<String> {
    match fs::File::open(path) {
        Ok(f) => std::io::BufReader::new(f)
            .lines()
            .map_while(Result::ok)
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// The lines that parse; a torn last line (a crash while appending) or a fact of a later
/// version does not.
fn parse(lines: &[String]) -> Vec<Entry> {
    lines
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Rewrites `path` to its newest `keep` lines (a unique temp file renamed over it, so a
/// reader never sees half a file); returns how many it holds.
fn keep_newest(path: &Path, keep: usize) -> std::io::Result<usize> {
    let lines = read_lines(path);
    let kept = &lines[lines.len().saturating_sub(keep)..];
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let mut text = kept.join("\n");
    text.push('\n');
    fs::write(&tmp, text)?;
    fs::rename(&tmp, path)?;
    Ok(kept.len())
}

/// Removes the least recently changed pod files beyond `max`.
fn prune(dir: &Path, max: usize) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    if files.len() <= max {
        return;
    }
    files.sort();
    for (_, path) in &files[..files.len() - max] {
        let _ = fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests;
