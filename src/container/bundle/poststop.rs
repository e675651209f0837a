//! The OCI poststop hooks of a container's spec (CDI specs and NRI plugins bring them), run by
//! the daemon as it removes the container. libcontainer 0.7 runs poststop hooks only in its own
//! `delete`, which crust never calls (it removes libcontainer's state itself), so they run here:
//! after the container's processes are gone and before its removal returns (in the
//! RemoveContainer call, not in the reclaim it leaves to the background), as the OCI runtime
//! spec asks, each with the container's state on stdin and only the env the hook names, in the
//! node's namespaces. A hook that fails, or outlives its timeout (30 s when it names none), is
//! logged and the removal goes on, as that spec asks too. They run once: a removal retried after
//! a failure finds `poststop.done` and does not run them again.

use std::path::Path;
use std::time::Duration;

use oci_spec::runtime::{Hook, Spec};

/// How long a hook that names no timeout may take: a removal must end.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether the bundle in `dir` (a container's directory) may have poststop hooks that have not
/// run yet: RemoveContainer asks this of every container, and most have none.
pub fn pending(dir: &Path) -> bool {
    spec_with_hooks(dir).is_some()
}

const DONE: &str = "poststop.done";

/// The text of the bundle's spec when it may hold poststop hooks that have not run: a look at
/// the text, without decoding it.
fn spec_with_hooks(dir: &Path) -> Option<Vec<u8>> {
    const KEY: &[u8] = b"\"poststop\"";
    // No bundle: the container never got as far as having hooks.
    let text = std::fs::read(dir.join("bundle/config.json")).ok()?;
    let has = text.windows(KEY.len()).any(|w| w == KEY) && !dir.join(DONE).exists();
    has.then_some(text)
}

/// Runs the poststop hooks of the bundle in `dir` (a container's directory), if it has any and
/// they have not run yet.
pub async fn run(dir: &Path, id: &str) {
    let Some(text) = spec_with_hooks(dir) else {
        return;
    };
    let done = dir.join(DONE);
    let Ok(spec) = serde_json::from_slice::<Spec>(&text) else {
        return;
    };
    let hooks = spec.hooks().as_ref().and_then(|h| h.poststop().clone());
    let Some(hooks) = hooks.filter(|h| !h.is_empty()) else {
        return;
    };
    let state = serde_json::json!({
        "ociVersion": spec.version(),
        "id": id,
        "status": "stopped",
        "bundle": dir.join("bundle"),
        "annotations": spec.annotations(),
    })
    .to_string();
    for hook in &hooks {
        if let Err(error) = run_one(hook, state.as_bytes()).await {
            tracing::warn!(
                container_id = id,
                hook = %hook.path().display(),
                %error,
                "a poststop hook failed"
            );
        }
    }
    let written = tokio::task::spawn_blocking(move || crate::durable::write(&done, b""))
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
    if let Err(e) = written {
        tracing::warn!(container_id = id, error = %e, "recording that the poststop hooks ran");
    }
}

async fn run_one(hook: &Hook, state: &[u8]) -> Result<(), String> {
    use tokio::io::AsyncWriteExt;
    let mut command = tokio::process::Command::new(hook.path());
    // args[0] is the program's own name, as execv has it.
    if let Some((arg0, rest)) = hook.args().as_deref().and_then(<[String]>::split_first) {
        command.arg0(arg0).args(rest);
    }
    let env = hook
        .env()
        .iter()
        .flatten()
        .filter_map(|v| v.split_once('='));
    let mut child = command
        .env_clear()
        .envs(env)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("starting it: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A hook that does not read its state may close stdin first: not a failure.
        let _ = stdin.write_all(state).await;
    }
    let timeout = hook
        .timeout()
        .filter(|t| *t > 0)
        .map_or(DEFAULT_TIMEOUT, |t| Duration::from_secs(t as u64));
    match tokio::time::timeout(timeout, child.wait()).await {
        Ok(Ok(status)) if status.success() => Ok(()),
        Ok(Ok(status)) => Err(format!("it ended with {status}")),
        Ok(Err(e)) => Err(format!("waiting for it: {e}")),
        // kill_on_drop ends it.
        Err(_) => Err(format!("it did not end within {timeout:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn hooks_get_the_state_once_and_a_failing_one_does_not_stop_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("bundle")).unwrap();
        let out = dir.path().join("out");
        let hook = |script: &str| {
            let mut h = Hook::default();
            h.set_path("/bin/sh".into())
                .set_args(Some(vec!["sh".into(), "-c".into(), script.into()]))
                .set_env(Some(vec![format!("OUT={}", out.display())]));
            h
        };
        let mut hooks = oci_spec::runtime::Hooks::default();
        hooks.set_poststop(Some(vec![
            hook("exit 3"),
            hook("cat >> \"$OUT\"; echo >> \"$OUT\""),
        ]));
        let mut spec = Spec::default();
        spec.set_hooks(Some(hooks));
        let json = serde_json::to_vec(&spec).unwrap();
        std::fs::write(dir.path().join("bundle/config.json"), json).unwrap();
        assert!(pending(dir.path()));
        run(dir.path(), "c1").await;
        assert!(!pending(dir.path()), "they ran");
        run(dir.path(), "c1").await;
        let text = std::fs::read_to_string(&out).unwrap();
        assert_eq!(text.lines().count(), 1, "once: {text}");
        let state: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(
            (&state["id"], &state["status"]),
            (&"c1".into(), &"stopped".into())
        );
        // No bundle, no hooks: nothing to do.
        run(&dir.path().join("absent"), "c2").await;
        assert!(!pending(&dir.path().join("absent")));
        // A spec without hooks has none pending.
        let plain = tempfile::tempdir().unwrap();
        std::fs::create_dir(plain.path().join("bundle")).unwrap();
        let json = serde_json::to_vec(&Spec::default()).unwrap();
        std::fs::write(plain.path().join("bundle/config.json"), json).unwrap();
        assert!(!pending(plain.path()));
    }
}
