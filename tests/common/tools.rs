//! Real Kubernetes clients for the tests: crictl (sigs.k8s.io/cri-tools v1.37.0, pinned in
//! hack/tools and built by hack/build-tools.sh), a small client-go program
//! (`tests/fixtures/stream-client`), a static probe mounted into containers
//! (`tests/fixtures/probe`) and a device plugin (`tests/fixtures/device-plugin`), each built
//! once with Go into `target/tools`. Without Go the tests
//! fail saying so: a skip is never a pass.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn tools_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tools");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// One Go build at a time in a test process: tests running in parallel all ask for the client
/// on a cold cache, and each would otherwise build it into the same temporary file.
static GO_BUILDS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Builds `package` in the module at `module` into `out`, unless `out` is newer than every
/// file of the module.
fn go_build(module: &Path, package: &str, out: &Path, env: &[(&str, &str)]) {
    go_build_with(module, package, out, env, "-mod=mod")
}

/// `go_build` with GOFLAGS `goflags`: `-mod=readonly` for a module whose go.mod others read
/// (hack/build-tools.sh keys its cache on hack/tools/containerd/go.mod and go.sum).
fn go_build_with(module: &Path, package: &str, out: &Path, env: &[(&str, &str)], goflags: &str) {
    let _one = GO_BUILDS.lock().unwrap_or_else(|p| p.into_inner());
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
            .env("GOFLAGS", goflags)
            .envs(env.iter().copied())
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

/// crictl 1.37 (`--transport spdy|websocket`): `$CRICTL`, else the one `hack/build-tools.sh`
/// builds from the pinned cri-tools module (built now if it is not yet).
pub fn crictl() -> PathBuf {
    if let Some(p) = std::env::var_os("CRICTL") {
        return p.into();
    }
    pinned_tool("cri-tools", "crictl")
}

/// kubelet 1.37 from the pinned k8s.io/kubernetes module (built now if it is not yet).
pub fn kubelet() -> PathBuf {
    pinned_tool("kubelet", "kubelet")
}

/// `binary` of `tool` as `hack/build-tools.sh` builds and caches it.
fn pinned_tool(tool: &str, binary: &str) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("hack/build-tools.sh");
    let out = Command::new(&script)
        .arg(tool)
        .output()
        .expect("hack/build-tools.sh runs");
    assert!(
        out.status.success(),
        "building {tool}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = Command::new(&script)
        .args(["--dir", tool])
        .output()
        .expect("hack/build-tools.sh runs");
    PathBuf::from(String::from_utf8_lossy(&dir.stdout).trim()).join(binary)
}

/// The client-go exec/attach client of `tests/fixtures/stream-client`.
pub fn stream_client() -> PathBuf {
    let out = tools_dir().join("stream-client");
    let module = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/stream-client");
    go_build(&module, ".", &out, &[]);
    out
}

/// The static probe of `tests/fixtures/probe` (standard library only, no cgo), for mounting
/// into a container whose image has no libc.
pub fn probe() -> PathBuf {
    let out = tools_dir().join("probe");
    let module = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/probe");
    go_build(&module, ".", &out, &[("CGO_ENABLED", "0")]);
    out
}

/// The device plugin of `tests/fixtures/device-plugin` (k8s.io/kubelet's v1beta1 API): it
/// advertises `crust.test/dev` and answers Allocate with CDI device names.
pub fn device_plugin() -> PathBuf {
    let out = tools_dir().join("device-plugin");
    let module = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/device-plugin");
    go_build(&module, ".", &out, &[("CGO_ENABLED", "0")]);
    out
}

/// `hack/tools/containerd/runtime-defaults`: prints containerd's RuntimeDefault seccomp
/// profile for capability sets and its default AppArmor profile, from the containerd module
/// the benchmarks pin.
pub fn containerd_runtime_defaults() -> PathBuf {
    let out = tools_dir().join("containerd-runtime-defaults");
    let module =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("hack/tools/containerd/runtime-defaults");
    go_build_with(&module, ".", &out, &[], "-mod=readonly");
    out
}

/// The NRI plugin of `tests/fixtures/nri-plugin`: containerd's own `pkg/stub` (github.com/
/// containerd/nri v0.12.3, as containerd 2.4.2 pins it), told by its flags what to do.
pub fn nri_plugin() -> PathBuf {
    let out = tools_dir().join("nri-plugin");
    let module = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nri-plugin");
    go_build(&module, ".", &out, &[("CGO_ENABLED", "0")]);
    out
}

/// checkpointctl from the pinned github.com/checkpoint-restore/checkpointctl module (built now
/// if it is not yet).
pub fn checkpointctl() -> PathBuf {
    pinned_tool("checkpointctl", "checkpointctl")
}

/// gVisor's runsc from the pinned gvisor.dev/gvisor module (built now if it is not yet).
pub fn runsc() -> PathBuf {
    pinned_tool("runsc", "runsc")
}

/// The CRIU hack/install-criu.sh provides: the system's when it is 4.1 or later, else Debian 13's
/// unpacked into the tools cache (now, if it is not there yet).
pub fn criu() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("hack/install-criu.sh");
    let out = Command::new(&script)
        .output()
        .expect("hack/install-criu.sh runs");
    assert!(
        out.status.success(),
        "no usable CRIU: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}
