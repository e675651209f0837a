//! Node-level settings operators carry over from CRI-O, against the real daemon:
//! `default_ulimits` reach every container's process, and `hooks_dir` (OCI hook files as CRI-O
//! and Podman read them) adds to a container the hooks whose `when` holds, which then run at
//! their stage; a broken hook file is skipped, named in the log. `crust config dump` shows both.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::workload::Env;
use common::*;

/// Where the test's hook files and their marks are.
struct Hooks {
    dir: PathBuf,
    marks: PathBuf,
}

impl Hooks {
    /// A hook script that appends the OCI state it gets on stdin to the mark file `$1`, and
    /// hook files using it: one for every container, one for containers annotated as having a
    /// GPU, and a broken one.
    fn install(root: &Path) -> Hooks {
        let hooks = Hooks {
            dir: root.join("hooks.d"),
            marks: root.join("hook-marks"),
        };
        std::fs::create_dir_all(&hooks.dir).unwrap();
        std::fs::create_dir_all(&hooks.marks).unwrap();
        let script = root.join("hook.sh");
        let text = format!(
            "#!/bin/sh\nset -eu\ncat >> {}/\"$1\"\necho >> {}/\"$1\"\n",
            hooks.marks.display(),
            hooks.marks.display()
        );
        std::fs::write(&script, text).unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let file = |name: &str, mark: &str, when: serde_json::Value, stage: &str| {
            let hook = serde_json::json!({
                "version": "1.0.0",
                "hook": {"path": script, "args": ["hook.sh", mark], "env": ["PATH=/usr/bin:/bin"]},
                "when": when,
                "stages": [stage],
            });
            std::fs::write(hooks.dir.join(name), hook.to_string()).unwrap();
        };
        file(
            "10-every.json",
            "every",
            serde_json::json!({"always": true}),
            "createRuntime",
        );
        file(
            "20-gpu.json",
            "gpu",
            serde_json::json!({"annotations": {"^vendor\\.test/gpu$": "^yes$"}}),
            "createContainer",
        );
        std::fs::write(hooks.dir.join("30-broken.json"), "{").unwrap();
        hooks
    }

    fn mark(&self, name: &str) -> String {
        std::fs::read_to_string(self.marks.join(name)).unwrap_or_default()
    }
}

/// `crust config dump` of the daemon's configuration.
fn dump(e: &Env) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_crust"))
        .args(["config", "dump", "--config"])
        .arg(&e.d.config)
        .arg("--state")
        .arg(&e.d.state)
        .arg("--root")
        .arg(&e.d.root)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn default_ulimits_and_hook_files_reach_containers_and_the_dump() {
    let mut hooks = None;
    let mut e = Env::start_with(|d| {
        let h = Hooks::install(&d.dir);
        // Top-level keys go before the config's first table.
        let text = std::fs::read_to_string(&d.config).unwrap();
        let keys = format!(
            "hooks_dir = [{:?}]\ndefault_ulimits = [\"nofile=1024:2048\", \"nproc=512\"]\n",
            h.dir
        );
        std::fs::write(&d.config, keys + &text).unwrap();
        hooks = Some(h);
    })
    .await;
    let hooks = hooks.unwrap();
    let shown = dump(&e);
    for key in ["hooks_dir = [", "default_ulimits = ["] {
        let line = shown.lines().find(|l| l.starts_with(key));
        let line = line.unwrap_or_else(|| panic!("no {key} in the dump:\n{shown}"));
        assert!(line.contains("config.toml"), "its origin: {line}");
    }
    assert!(shown.contains("nofile=1024:2048"), "{shown}");

    let pod = e.pod("hooked").await;
    let plain = e.run(&pod, e.config("plain", &["sleep", "600"])).await;
    let mut config = e.config("gpu", &["sleep", "600"]);
    config
        .annotations
        .insert("vendor.test/gpu".into(), "yes".into());
    let gpu = e.run(&pod, config).await;

    // Both hooks ran by the time CreateContainer answered, each for the containers it matches.
    let every = hooks.mark("every");
    assert!(every.contains(&plain) && every.contains(&gpu), "{every}");
    let only = hooks.mark("gpu");
    assert!(only.contains(&gpu) && !only.contains(&plain), "{only}");
    let spec = &e.info(&gpu).await["runtimeSpec"]["hooks"];
    assert_eq!(spec["createContainer"][0]["args"][1], "gpu", "{spec}");
    assert!(
        e.d.log().contains("30-broken.json"),
        "the broken hook file is named in the log"
    );

    for id in [&plain, &gpu] {
        let limits = e.sh(id, "cat /proc/1/limits").await;
        let row = |name: &str| {
            let line = limits.lines().find(|l| l.starts_with(name)).unwrap();
            line[name.len()..]
                .split_whitespace()
                .take(2)
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(row("Max open files"), "1024 2048", "{limits}");
        assert_eq!(row("Max processes"), "512 512", "{limits}");
    }
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
}
