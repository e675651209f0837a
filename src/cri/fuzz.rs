//! Entry points for the cargo-fuzz targets in `fuzz/` (built only with `--cfg fuzzing`, and for
//! the unit tests below): CRI requests as any client may send them, decoded, converted and
//! validated the way the RPCs do, then turned into what crust would act on (an OCI spec, cgroup
//! resources). Whatever the bytes, nothing panics, and what is refused is refused before
//! anything is made.

use prost::Message;

use super::convert;
use super::pb;
use crate::oci::fixture::Fixture;

/// RunPodSandbox: decode, convert, validate; an accepted spec's names go into CNI_ARGS, so they
/// must hold neither separator.
pub fn run_pod_sandbox(bytes: &[u8]) {
    let Ok(req) = pb::RunPodSandboxRequest::decode(bytes) else {
        return;
    };
    let Ok(spec) = convert::sandbox_spec(req.config, req.runtime_handler) else {
        return;
    };
    if crate::sandbox::validate_spec(&spec).is_ok() {
        let m = &spec.metadata;
        for v in [&m.name, &m.namespace, &m.uid] {
            assert!(
                !v.contains([';', '=']),
                "a name smuggling CNI_ARGS pairs passed validation: {v:?}"
            );
        }
    }
}

/// CreateContainer: decode, convert, validate, then build the OCI spec (in a typical pod, from a
/// busybox-like image) and serialise it as the monitor receives it.
pub fn create_container(bytes: &[u8]) {
    let Ok(req) = pb::CreateContainerRequest::decode(bytes) else {
        return;
    };
    let Ok(spec) = convert::container_spec(req.config) else {
        return;
    };
    if crate::container::validate(&spec).is_err() {
        return;
    }
    let mut fixture = Fixture::new();
    fixture.mounts = spec.mounts.clone();
    fixture.spec = spec;
    for v2 in [true, false] {
        fixture.host.cgroup_v2 = v2;
        if let Ok(oci) = crate::oci::build(&fixture.input()) {
            serde_json::to_vec(&oci).expect("a built OCI spec serialises");
        }
    }
}

/// UpdateContainerResources: the resources as libcgroups receives them, on either hierarchy.
pub fn update_container_resources(bytes: &[u8]) {
    let Ok(req) = pb::UpdateContainerResourcesRequest::decode(bytes) else {
        return;
    };
    let Some(linux) = req.linux else {
        return;
    };
    let resources = convert::resources(linux);
    let mut host = Fixture::new().host;
    for v2 in [true, false] {
        host.cgroup_v2 = v2;
        let _ = crate::oci::container_resources(&resources, &host);
    }
}

/// Typical requests as kubelet and critest send them: the unit tests run them through the entry
/// points, and `write_seeds` stores them as the fuzzers' starting corpus.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let pod = pb::PodSandboxConfig {
        metadata: Some(pb::PodSandboxMetadata {
            name: "web-0".into(),
            uid: "0b7d8f2e-7c4f-4c3a-9b8e-2f1d5a6c7e90".into(),
            namespace: "default".into(),
            attempt: 1,
        }),
        hostname: "web-0".into(),
        log_directory: "/var/log/pods/default_web-0_0b7d8f2e".into(),
        dns_config: Some(pb::DnsConfig {
            servers: vec!["10.96.0.10".into()],
            searches: vec!["default.svc.cluster.local".into()],
            options: vec!["ndots:5".into()],
        }),
        port_mappings: vec![pb::PortMapping {
            protocol: pb::Protocol::Tcp as i32,
            container_port: 80,
            host_port: 8080,
            host_ip: "127.0.0.1".into(),
        }],
        labels: [("app".to_string(), "web".to_string())].into(),
        linux: Some(pb::LinuxPodSandboxConfig {
            cgroup_parent: "/kubepods/burstable/pod0b7d8f2e".into(),
            sysctls: [(
                "net.ipv4.ip_unprivileged_port_start".to_string(),
                "0".to_string(),
            )]
            .into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let resources = pb::LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: 50_000,
        cpu_shares: 512,
        memory_limit_in_bytes: 64 << 20,
        oom_score_adj: 1000,
        cpuset_cpus: "0".into(),
        unified: [("memory.high".to_string(), "60000000".to_string())].into(),
        ..Default::default()
    };
    let container = pb::ContainerConfig {
        metadata: Some(pb::ContainerMetadata {
            name: "web".into(),
            attempt: 0,
        }),
        image: Some(pb::ImageSpec {
            image: "busybox:1.36".into(),
            ..Default::default()
        }),
        command: vec!["httpd".into()],
        args: vec!["-f".into(), "-p".into(), "80".into()],
        envs: vec![pb::KeyValue {
            key: "MODE".into(),
            value: b"serve".to_vec(),
        }],
        mounts: vec![pb::Mount {
            container_path: "/data".into(),
            host_path: "/var/lib/kubelet/pods/0b7d8f2e/volumes/data".into(),
            readonly: true,
            ..Default::default()
        }],
        log_path: "web/0.log".into(),
        linux: Some(pb::LinuxContainerConfig {
            resources: Some(resources.clone()),
            security_context: Some(pb::LinuxContainerSecurityContext {
                run_as_user: Some(pb::Int64Value { value: 1000 }),
                readonly_rootfs: true,
                // What kubelet sends for a pod that does not share its PID namespace.
                namespace_options: Some(pb::NamespaceOption {
                    pid: pb::NamespaceMode::Container as i32,
                    ..Default::default()
                }),
                capabilities: Some(pb::Capability {
                    drop_capabilities: vec!["ALL".into()],
                    add_capabilities: vec!["NET_BIND_SERVICE".into()],
                    ..Default::default()
                }),
                seccomp: Some(pb::SecurityProfile {
                    profile_type: pb::security_profile::ProfileType::RuntimeDefault as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }),
        ..Default::default()
    };
    vec![
        (
            "cri_run_pod_sandbox",
            pb::RunPodSandboxRequest {
                config: Some(pod.clone()),
                runtime_handler: String::new(),
            }
            .encode_to_vec(),
        ),
        (
            "cri_create_container",
            pb::CreateContainerRequest {
                pod_sandbox_id: "0123456789abcdef".into(),
                config: Some(container),
                sandbox_config: Some(pod),
            }
            .encode_to_vec(),
        ),
        (
            "cri_update_container_resources",
            pb::UpdateContainerResourcesRequest {
                container_id: "0123456789abcdef".into(),
                linux: Some(resources),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(target: &str) -> fn(&[u8]) {
        match target {
            "cri_run_pod_sandbox" => run_pod_sandbox,
            "cri_create_container" => create_container,
            "cri_update_container_resources" => update_container_resources,
            other => panic!("no entry point for {other}"),
        }
    }

    #[test]
    fn typical_requests_pass_every_step() {
        for (target, bytes) in seeds() {
            entry(target)(&bytes);
        }
        let (_, pod) = &seeds()[0];
        let req = pb::RunPodSandboxRequest::decode(pod.as_slice()).unwrap();
        let spec = convert::sandbox_spec(req.config, String::new()).unwrap();
        crate::sandbox::validate_spec(&spec).expect("a kubelet pod validates");
        let (_, ctr) = &seeds()[1];
        let req = pb::CreateContainerRequest::decode(ctr.as_slice()).unwrap();
        let spec = convert::container_spec(req.config).unwrap();
        let mut fixture = Fixture::new();
        fixture.spec = spec;
        crate::oci::build(&fixture.input()).expect("a kubelet container builds its OCI spec");
    }

    /// Every truncation and single-byte flip of the seeds: the cheap part of what the fuzzers
    /// do, kept in `cargo test` so a panic on a malformed request is caught without nightly.
    #[test]
    fn damaged_requests_never_panic() {
        for (target, bytes) in seeds() {
            let run = entry(target);
            for end in 0..bytes.len() {
                run(&bytes[..end]);
            }
            for i in 0..bytes.len() {
                let mut b = bytes.clone();
                b[i] ^= 0xff;
                run(&b);
            }
        }
    }

    /// `cargo test --lib write_fuzz_seeds -- --ignored` refreshes fuzz/seeds/ from `seeds()`.
    #[test]
    #[ignore]
    fn write_fuzz_seeds() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds");
        for (target, bytes) in seeds() {
            let dir = root.join(target);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("kubelet"), bytes).unwrap();
        }
    }
}
