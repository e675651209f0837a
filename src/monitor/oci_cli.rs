//! The OCI runtime command line (runc's, which crun, runsc and others follow), for handlers
//! whose containers a runtime binary runs instead of libcontainer (`[runtimes.<handler>]`).
//!
//! The pod's monitor stays the anchor: a runtime worker (`workload/worker.rs`, a fork of the
//! monitor) runs `create`, `start` and `exec --detach` and waits for the binary, whose
//! container process is then reparented to the monitor, the pod's child subreaper, as a
//! libcontainer init is. So reaping, exit records, OOM kills, stdio relays, attach and exec
//! work the same for both kinds of handler. The daemon runs `delete`, `features` and
//! `--version` (blocking, on a thread of its own).
//!
//! Every command gets `--log <container dir>/runtime.log --log-format json`: the binary's
//! stderr is the container's, so its errors are read from that log, the ones a command wrote.

use std::ffi::{OsStr, OsString};
use std::io::{Read, Seek};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::model::OciRuntime;

/// What a runtime binary says it supports (`<runtime> features`), as Status reports it per
/// handler.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeFeatures {
    /// The `rro` mount option (recursive read-only mounts).
    pub recursive_read_only_mounts: bool,
    /// Joining a user namespace with id-mapped mounts.
    pub user_namespaces: bool,
    /// Why the binary told nothing (`features` unknown to it, or not JSON); `None`: it did.
    pub unknown: Option<String>,
}

/// The three standard streams a command's process gets (for `create` and `exec`: the
/// container's).
pub struct Streams {
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

impl Streams {
    /// `/dev/null` for all three, for a process whose streams nobody reads.
    pub fn null() -> Result<Streams, String> {
        let null = || -> Result<OwnedFd, String> {
            let file = std::fs::File::options()
                .read(true)
                .write(true)
                .open("/dev/null")
                .map_err(|e| format!("opening /dev/null: {e}"))?;
            Ok(file.into())
        };
        Ok(Streams {
            stdin: null()?,
            stdout: null()?,
            stderr: null()?,
        })
    }
}

/// Runs `<runtime> <global options> --log <log> --log-format json <args>` to its end. A
/// failure names the command, how it ended and what the binary logged as errors (or wrote on
/// stderr, when the streams are not the container's).
pub fn run(
    runtime: &OciRuntime,
    log: &Path,
    args: &[&OsStr],
    streams: Option<Streams>,
) -> Result<(), String> {
    let command = args
        .first()
        .map(|a| a.to_string_lossy().into_owned())
        .unwrap_or_default();
    let start = std::fs::metadata(log).map(|m| m.len()).unwrap_or(0);
    let mut cmd = Command::new(&runtime.path);
    cmd.args(runtime.global_args())
        .arg("--log")
        .arg(log)
        .arg("--log-format")
        .arg("json")
        .args(args);
    let captured = streams.is_none();
    match streams {
        Some(s) => {
            cmd.stdin(s.stdin).stdout(s.stdout).stderr(s.stderr);
        }
        None => {
            cmd.stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped());
        }
    }
    let output = cmd
        .output()
        .map_err(|e| format!("running {} {command}: {e}", runtime.path.display()))?;
    if output.status.success() {
        return Ok(());
    }
    let mut why = logged_errors(log, start);
    if captured && why.is_empty() {
        why = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    }
    Err(format!(
        "{} {command} failed ({}){}",
        runtime.path.display(),
        output.status,
        if why.is_empty() {
            String::new()
        } else {
            format!(": {why}")
        }
    ))
}

/// `create --bundle <bundle> --pid-file <dir>/runtime.pid [--console-socket S] <id>`: the
/// container's process, waiting to be started; answers its pid.
pub fn create(
    runtime: &OciRuntime,
    id: &str,
    bundle: &Path,
    dir: &Path,
    streams: Streams,
    console_socket: Option<&Path>,
) -> Result<i32, String> {
    let pid_file = dir.join("runtime.pid");
    let _ = std::fs::remove_file(&pid_file);
    let console = console_socket.map(short_path).transpose()?;
    let mut args: Vec<&OsStr> = vec![
        "create".as_ref(),
        "--bundle".as_ref(),
        bundle.as_os_str(),
        "--pid-file".as_ref(),
        pid_file.as_os_str(),
    ];
    if let Some((_, path)) = &console {
        args.extend(["--console-socket".as_ref(), path.as_os_str()]);
    }
    args.push(id.as_ref());
    run(runtime, &dir.join(super::RUNTIME_LOG), &args, Some(streams))?;
    read_pid(&pid_file)
}

/// `create` then `start` of a container whose streams nobody reads (a pod's infra
/// container); deleted again when either fails.
pub fn create_and_start(
    runtime: &OciRuntime,
    id: &str,
    bundle: &Path,
    dir: &Path,
) -> Result<(), String> {
    let made = create(runtime, id, bundle, dir, Streams::null()?, None)
        .and_then(|_| start(runtime, id, dir));
    if made.is_err() {
        let _ = delete(runtime, id, &dir.join(super::RUNTIME_LOG));
    }
    made
}

/// `start <id>`: the waiting process execs the container's program.
pub fn start(runtime: &OciRuntime, id: &str, dir: &Path) -> Result<(), String> {
    let args: [&OsStr; 2] = ["start".as_ref(), id.as_ref()];
    run(runtime, &dir.join(super::RUNTIME_LOG), &args, None)
}

/// `exec --process <file> --pid-file <file> --detach [--console-socket S] <id>`: a process
/// in the running container; answers its pid.
pub fn exec(
    runtime: &OciRuntime,
    id: &str,
    dir: &Path,
    process: &oci_spec::runtime::Process,
    streams: Streams,
    console_socket: Option<&Path>,
) -> Result<i32, String> {
    let me = std::process::id();
    let process_file = dir.join(format!("exec-{me}.json"));
    let pid_file = dir.join(format!("exec-{me}.pid"));
    let json = serde_json::to_vec(process).map_err(|e| format!("encoding the process: {e}"))?;
    std::fs::write(&process_file, json)
        .map_err(|e| format!("writing {}: {e}", process_file.display()))?;
    let console = console_socket.map(short_path).transpose()?;
    let inner_file = dir.join(format!("exec-{me}.ipid"));
    let mut args: Vec<&OsStr> = vec![
        "exec".as_ref(),
        "--process".as_ref(),
        process_file.as_os_str(),
        "--pid-file".as_ref(),
        pid_file.as_os_str(),
        "--detach".as_ref(),
    ];
    if runtime.sandbox {
        // The process inside the sandbox, which a kill of the host process does not end.
        args.extend(["--internal-pid-file".as_ref(), inner_file.as_os_str()]);
    }
    if let Some((_, path)) = &console {
        args.extend(["--console-socket".as_ref(), path.as_os_str()]);
    }
    args.push(id.as_ref());
    let ran = run(runtime, &dir.join(super::RUNTIME_LOG), &args, Some(streams));
    let _ = std::fs::remove_file(&process_file);
    let pid = ran.and_then(|()| read_pid(&pid_file));
    let _ = std::fs::remove_file(&pid_file);
    if runtime.sandbox {
        match &pid {
            Ok(pid) => {
                let _ = std::fs::rename(&inner_file, inner_pid_file(dir, *pid));
            }
            Err(_) => {
                let _ = std::fs::remove_file(&inner_file);
            }
        }
    }
    pid
}

/// Where a sandboxing binary's exec `host_pid` (runsc's `runsc-exec`) has the pid of the
/// process it stands for inside the sandbox.
pub fn inner_pid_file(dir: &Path, host_pid: i32) -> PathBuf {
    dir.join(format!("exec-{host_pid}.ipid"))
}

/// `kill --pid <inner> <id> KILL`: a process inside the sandbox of a sandboxing binary.
pub fn kill_inner(runtime: &OciRuntime, id: &str, dir: &Path, inner: i32) -> Result<(), String> {
    let inner = inner.to_string();
    let args: [&OsStr; 5] = [
        "kill".as_ref(),
        "--pid".as_ref(),
        inner.as_ref(),
        id.as_ref(),
        "KILL".as_ref(),
    ];
    run(runtime, &dir.join(super::RUNTIME_LOG), &args, None)
}

/// `delete --force <id>`: the binary's state of the container (and what it still runs). A
/// container the binary does not know is already deleted.
pub fn delete(runtime: &OciRuntime, id: &str, log: &Path) -> Result<(), String> {
    if !runtime.has_state(id) {
        return Ok(());
    }
    let args: [&OsStr; 3] = ["delete".as_ref(), "--force".as_ref(), id.as_ref()];
    match run(runtime, log, &args, None) {
        Err(_) if !runtime.has_state(id) => Ok(()),
        other => other,
    }
}

/// The first line of `<runtime> --version`.
pub fn version(runtime: &OciRuntime) -> Result<String, String> {
    let out = Command::new(&runtime.path)
        .arg("--version")
        .output()
        .map_err(|e| format!("running {} --version: {e}", runtime.path.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    match text.lines().next() {
        Some(line) if out.status.success() => Ok(line.trim().to_owned()),
        _ => Err(format!(
            "{} --version failed ({})",
            runtime.path.display(),
            out.status
        )),
    }
}

/// What `<runtime> features` reports; a binary without the command (runc before 1.1, crun
/// before 1.9) supports neither feature, and says why.
pub fn features(runtime: &OciRuntime) -> RuntimeFeatures {
    let out = Command::new(&runtime.path)
        .args(&runtime.args)
        .arg("features")
        .stdin(std::process::Stdio::null())
        .output();
    let unknown = |why: String| RuntimeFeatures {
        unknown: Some(why),
        ..Default::default()
    };
    match out {
        Err(e) => unknown(format!("running {} features: {e}", runtime.path.display())),
        Ok(out) if !out.status.success() => unknown(format!(
            "{} features failed ({}): {}",
            runtime.path.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Ok(out) => match parse_features(&out.stdout) {
            // runsc reports user namespaces with id-mapped mounts, but its gofer cannot join
            // the pod's pinned one (setns: EINVAL at start): a pod with hostUsers: false is
            // refused up front, and Status tells kubelet so.
            Ok(f) if runtime.sandbox => RuntimeFeatures {
                user_namespaces: false,
                ..f
            },
            Ok(f) => f,
            Err(e) => unknown(format!(
                "{} features answered no JSON: {e}",
                runtime.path.display()
            )),
        },
    }
}

/// The features document of the OCI runtime spec (`features.md`): `mountOptions` holding
/// `rro`; a `user` namespace with id-mapped mounts enabled.
pub fn parse_features(json: &[u8]) -> Result<RuntimeFeatures, serde_json::Error> {
    let doc: serde_json::Value = serde_json::from_slice(json)?;
    let has = |list: &serde_json::Value, what: &str| {
        list.as_array()
            .is_some_and(|l| l.iter().any(|v| v.as_str() == Some(what)))
    };
    let linux = &doc["linux"];
    Ok(RuntimeFeatures {
        recursive_read_only_mounts: has(&doc["mountOptions"], "rro"),
        user_namespaces: has(&linux["namespaces"], "user")
            && linux["mountExtensions"]["idmap"]["enabled"].as_bool() == Some(true),
        unknown: None,
    })
}

/// The errors the binary logged since byte `start` of its JSON log (runc's and crun's
/// `{"level":"error","msg":...}` lines), each once, on one line.
pub fn logged_errors(log: &Path, start: u64) -> String {
    const MAX: u64 = 64 * 1024;
    let mut text = String::new();
    if let Ok(mut file) = std::fs::File::open(log) {
        let _ = file.seek(std::io::SeekFrom::Start(start));
        let _ = file.take(MAX).read_to_string(&mut text);
    }
    let mut seen: Vec<String> = Vec::new();
    for line in text.lines() {
        let Ok(entry) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let level = entry["level"].as_str().unwrap_or_default();
        if !matches!(level, "error" | "fatal" | "panic") {
            continue;
        }
        if let Some(msg) = entry["msg"].as_str().map(str::trim) {
            if !msg.is_empty() && !seen.iter().any(|s| s == msg) {
                seen.push(msg.to_owned());
            }
        }
    }
    seen.truncate(3);
    seen.join("; ")
}

/// A unix socket path short enough for `sun_path` whatever the state directory's length:
/// its directory through `/proc/<pid>/fd/<fd>` of this process, which holds the directory
/// open while the binary connects.
pub fn short_path(socket: &Path) -> Result<(std::fs::File, PathBuf), String> {
    let dir = socket.parent().unwrap_or(Path::new("/"));
    let name = socket.file_name().unwrap_or_default();
    let handle = std::fs::File::open(dir).map_err(|e| format!("opening {}: {e}", dir.display()))?;
    let mut path = OsString::from(format!(
        "/proc/{}/fd/{}/",
        std::process::id(),
        handle.as_raw_fd()
    ));
    path.push(name);
    Ok((handle, path.into()))
}

fn read_pid(path: &Path) -> Result<i32, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    text.trim()
        .parse()
        .map_err(|_| format!("{} holds no pid: {text:?}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_are_read_from_the_spec_s_document() {
        let runc_1_1 = br#"{"ociVersionMin":"1.0.0","mountOptions":["bind","ro"],
            "linux":{"namespaces":["cgroup","ipc","user"]}}"#;
        let f = parse_features(runc_1_1).unwrap();
        assert!(!f.recursive_read_only_mounts);
        assert!(!f.user_namespaces);
        let newer = br#"{"mountOptions":["rro","ro"],
            "linux":{"namespaces":["user"],"mountExtensions":{"idmap":{"enabled":true}}}}"#;
        let f = parse_features(newer).unwrap();
        assert!(f.recursive_read_only_mounts && f.user_namespaces);
        assert!(parse_features(b"unknown command features").is_err());
    }

    #[test]
    fn errors_are_the_ones_logged_after_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("runtime.log");
        let old = "{\"level\":\"error\",\"msg\":\"old\"}\n";
        let new = "{\"level\":\"info\",\"msg\":\"x\"}\n\
                   {\"level\":\"error\",\"msg\":\"exec: \\\"nope\\\": not found in $PATH\"}\n\
                   {\"msg\":\"exec: \\\"nope\\\": not found in $PATH\",\"level\":\"error\"}\n";
        std::fs::write(&log, format!("{old}{new}")).unwrap();
        assert_eq!(
            logged_errors(&log, old.len() as u64),
            "exec: \"nope\": not found in $PATH"
        );
    }
}
