//! Compiles the CRI v1 API (proto/api.proto) and NRI's API (proto/nri/api.proto, messages
//! only: crust speaks ttrpc itself) with protox, a pure-Rust protobuf compiler, so building
//! crust never needs a system `protoc`; and builds the pod init (pod-init/main.rs), a
//! freestanding program crust embeds and execs as PID 1 of shared PID namespaces
//! (`monitor::pod_init`).

use std::path::PathBuf;
use std::process::Command;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/api.proto");
    let fds = protox::compile(["proto/api.proto"], ["proto"])?;
    // The two answers of a relist are crust's own types, which carry each object already
    // encoded (`src/cri/listed.rs`); both still decode like the generated ones.
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .extern_path(
            ".runtime.v1.ListPodSandboxResponse",
            "crate::cri::listed::ListPodSandboxResponse",
        )
        .extern_path(
            ".runtime.v1.ListContainersResponse",
            "crate::cri::listed::ListContainersResponse",
        )
        .compile_fds(fds)?;
    println!("cargo:rerun-if-changed=proto/nri/api.proto");
    let nri = protox::compile(["nri/api.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(false)
        .compile_fds(nri)?;
    build_pod_init()
}

/// No standard library, no libc, no start files: a static executable of a few hundred bytes.
/// The flags of the crate's own build (sanitizers, coverage) are not passed on: the program
/// runs alone, and must stay this small.
fn build_pod_init() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=pod-init/main.rs");
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("pod-init");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let target = std::env::var("TARGET")?;
    let status = Command::new(rustc)
        .args([
            "--edition",
            "2024",
            "--target",
            &target,
            "--crate-type",
            "bin",
        ])
        .args([
            "-C",
            "panic=abort",
            "-C",
            "opt-level=s",
            "-C",
            "strip=symbols",
        ])
        .args(["-C", "relocation-model=static"])
        .args(["-C", "link-arg=-nostartfiles", "-C", "link-arg=-nostdlib"])
        .args([
            "-C",
            "link-arg=-static",
            "-C",
            "link-arg=-Wl,--build-id=none",
        ])
        .arg("pod-init/main.rs")
        .arg("-o")
        .arg(&out)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .status()?;
    if !status.success() {
        return Err(format!("building pod-init/main.rs failed: {status}").into());
    }
    Ok(())
}
