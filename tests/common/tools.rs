//! Real Kubernetes clients for the streaming tests: crictl (sigs.k8s.io/cri-tools v1.37.0) and
//! a small client-go program (`tests/fixtures/stream-client`). Each is taken from `$CRICTL` /
//! PATH when there, else built once with Go into `target/tools` (from the Go module cache or
//! proxy). Without Go the tests fail saying so: a skip is never a pass.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn tools_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tools");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Builds `package` in the module at `module` into `out`, unless `out` is newer than every
/// file of the module.
fn go_build(module: &Path, package: &str, out: &Path) {
    let modified = |p: &Path| p.metadata().and_then(|m| m.modified()).ok();
    let newest_source = std::fs::read_dir(module)
        .unwrap()
        .flatten()
        .filter_map(|e| modified(&e.path()))
        .max();
    if modified(out).is_some_and(|built| Some(built) >= newest_source) {
        return;
    }
    let tmp = out.with_extension(format!("tmp{}", std::process::id()));
    let run = |args: &[&str]| {
        let o = Command::new("go")
            .args(args)
            .current_dir(module)
            .env("GOFLAGS", "-mod=mod")
            .output()
            .unwrap_or_else(|e| panic!("the streaming tests need Go to build {package}: {e}"));
        assert!(
            o.status.success(),
            "go {args:?} in {}: {}",
            module.display(),
            String::from_utf8_lossy(&o.stderr)
        );
    };
    run(&["build", "-o", tmp.to_str().unwrap(), package]);
    std::fs::rename(&tmp, out).unwrap();
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// crictl 1.37 (`--transport spdy|websocket`).
pub fn crictl() -> PathBuf {
    if let Some(p) = std::env::var_os("CRICTL") {
        return p.into();
    }
    let out = tools_dir().join("crictl");
    if out.exists() {
        return out;
    }
    if let Some(p) = on_path("crictl") {
        let v = Command::new(&p).arg("--version").output().unwrap();
        if String::from_utf8_lossy(&v.stdout).contains("v1.3") {
            return p;
        }
    }
    let module = tools_dir().join("crictl-src");
    std::fs::create_dir_all(&module).unwrap();
    std::fs::write(
        module.join("go.mod"),
        "module crictlbuild\n\ngo 1.24\n\nrequire sigs.k8s.io/cri-tools v1.37.0\n",
    )
    .unwrap();
    std::fs::write(
        module.join("tools.go"),
        "//go:build tools\n\npackage tools\n\nimport _ \"sigs.k8s.io/cri-tools/cmd/crictl\"\n",
    )
    .unwrap();
    let tidy = Command::new("go")
        .args(["mod", "tidy"])
        .current_dir(&module)
        .output()
        .expect("the streaming tests need Go to build crictl");
    assert!(
        tidy.status.success(),
        "{}",
        String::from_utf8_lossy(&tidy.stderr)
    );
    go_build(&module, "sigs.k8s.io/cri-tools/cmd/crictl", &out);
    out
}

/// The client-go exec/attach client of `tests/fixtures/stream-client`.
pub fn stream_client() -> PathBuf {
    let out = tools_dir().join("stream-client");
    let module = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/stream-client");
    go_build(&module, ".", &out);
    out
}
