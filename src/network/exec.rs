//! Running one CNI plugin binary: the CNI_* environment, the configuration on stdin, the result
//! (or the error object) on stdout, and a deadline after which the plugin is killed.

use std::process::Stdio;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// The most of a plugin's stdout kept: a result or an error object is a few kilobytes.
const MAX_STDOUT: usize = 1 << 20;
/// The most of a plugin's stderr kept for an error message.
const MAX_STDERR: usize = 16 << 10;

use super::{Attachment, Cni, CniError};

pub(super) async fn run(
    cni: &Cni,
    kind: &str,
    network: &str,
    command: &'static str,
    att: &Attachment,
    conf: &Value,
) -> Result<Value, CniError> {
    let timeout = cni.settings().plugin_timeout;
    run_for(cni, kind, network, command, att, conf, timeout).await
}

/// `run` with a deadline of its own (STATUS answers within a shorter one than ADD).
pub(super) async fn run_for(
    cni: &Cni,
    kind: &str,
    network: &str,
    command: &'static str,
    att: &Attachment,
    conf: &Value,
    timeout: std::time::Duration,
) -> Result<Value, CniError> {
    let plugin = kind.to_owned();
    let binary = cni.find_plugin(network, kind)?;
    let spawn_err = |source| CniError::Spawn {
        plugin: plugin.clone(),
        command,
        source,
    };
    let args: Vec<String> = std::iter::once("IgnoreUnknown=1".to_owned())
        .chain(att.args.iter().map(|(k, v)| format!("{k}={v}")))
        .collect();
    let mut child = tokio::process::Command::new(&binary)
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", &att.container_id)
        .env("CNI_NETNS", &att.netns)
        .env("CNI_IFNAME", &att.ifname)
        .env("CNI_ARGS", args.join(";"))
        .env("CNI_PATH", cni.path_var())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // A group of its own: a plugin past its deadline is killed with the children it
        // started (which would otherwise hold its pipes and live on).
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(spawn_err)?;
    let group = child.id().map(|pid| nix::unistd::Pid::from_raw(pid as i32));
    let input = serde_json::to_vec(conf).unwrap_or_default();
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    let work = async move {
        // A plugin may exit without reading its input; a broken pipe then is not the error.
        let _ = stdin.write_all(&input).await;
        drop(stdin);
        let (stdout, stderr) = tokio::join!(
            read_capped(stdout, MAX_STDOUT),
            read_capped(stderr, MAX_STDERR)
        );
        let status = child.wait().await?;
        std::io::Result::Ok((status, stdout?, stderr?))
    };
    let mut work = std::pin::pin!(work);
    let ran = tokio::time::timeout(timeout, &mut work).await;
    // The plugin changed the node (an interface, an address, a rule) by the time it ended.
    crate::durable::step(command, format_args!("CNI plugin {plugin}"));
    let (status, (stdout, too_long), (stderr, _)) = match ran {
        Ok(out) => out.map_err(spawn_err)?,
        Err(_) => {
            // The plugin is not reaped yet (its wait is part of `work`, not dropped until this
            // returns), so its pid still names its group.
            if let Some(group) = group {
                let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
            }
            return Err(CniError::Timeout {
                plugin,
                command,
                timeout,
            });
        }
    };
    if too_long {
        return Err(CniError::PluginFailed {
            plugin,
            command,
            msg: format!("printed more than {MAX_STDOUT} bytes"),
        });
    }
    let out = std::process::Output {
        status,
        stdout,
        stderr,
    };
    if out.status.success() {
        if out.stdout.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null);
        }
        return serde_json::from_slice(&out.stdout).map_err(|e| CniError::PluginFailed {
            plugin,
            command,
            msg: format!("unreadable result: {e}"),
        });
    }
    Err(CniError::PluginFailed {
        plugin,
        command,
        msg: failure_message(&out),
    })
}

/// Reads `from` to its end, keeping at most `cap` bytes (the rest is read and dropped, so the
/// plugin is never blocked on a full pipe); true when something was dropped.
async fn read_capped(
    mut from: impl AsyncRead + Unpin,
    cap: usize,
) -> std::io::Result<(Vec<u8>, bool)> {
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    let mut dropped = false;
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return Ok((kept, dropped));
        }
        let room = cap - kept.len();
        kept.extend_from_slice(&buf[..n.min(room)]);
        dropped |= n > room;
    }
}

/// The plugin's own words: the CNI error object's msg and details, else its stderr.
pub(super) fn failure_message(out: &std::process::Output) -> String {
    if let Ok(err) = serde_json::from_slice::<Value>(&out.stdout) {
        let msg = err.get("msg").and_then(Value::as_str).unwrap_or_default();
        let details = err
            .get("details")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let code = err.get("code").and_then(Value::as_u64);
        if !msg.is_empty() {
            let mut s = msg.to_owned();
            if !details.is_empty() {
                s = format!("{s}: {details}");
            }
            if let Some(code) = code {
                s = format!("{s} (code {code})");
            }
            return s;
        }
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stderr = stderr.trim();
    if stderr.is_empty() {
        format!("exited with {}", out.status)
    } else {
        stderr.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn output_past_the_cap_is_read_and_dropped() {
        let big = vec![b'x'; 3 * 8192 + 5];
        let (kept, dropped) = read_capped(&big[..], 10_000).await.unwrap();
        assert_eq!((kept.len(), dropped), (10_000, true));
        let (kept, dropped) = read_capped(&big[..], big.len()).await.unwrap();
        assert_eq!((kept.len(), dropped), (big.len(), false));
    }
}
