//! The same pods confined the same way under crust and under containerd 2.4.2 with runc (the
//! benchmarks' peer): the requests kubelet sends (a PID namespace per container, kubelet's
//! default masked and read-only paths, BestEffort resources, seccomp Unconfined unless asked)
//! for a plain container, one under seccomp RuntimeDefault, a restricted one (uid 1000, which
//! the image's passwd does not know, read-only root, every capability dropped but NET_BIND_SERVICE, no_new_privs,
//! RuntimeDefault) and a privileged one, in one pod; and a plain container in a pod sharing
//! its PID namespace. The static probe (`tests/fixtures/probe`, `probe confine`), mounted into
//! every container, prints what the process may do and sees: identity, capability sets,
//! no_new_privs, seccomp, the AppArmor label, rlimits, umask, groups, environment names,
//! sysctls, mounts and their options, /dev, masked and read-only paths, raw, packet and ICMP
//! sockets, low ports, and syscalls called with harmless arguments. It runs as each
//! container's process and through ExecSync, and every output must equal containerd's, but
//! for the runtime's AppArmor profile name and the differences `deliberate()` lists, each of
//! which docs/security.md names with its reason.
//!
//! Runs on this host and in the cgroup v2 guest (`hack/cgroupv2-tests.sh`), where AppArmor
//! is on for both runtimes.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::containerd_peer::Peer;
use common::oci_build::{Comp, Node, busybox_layer, image, tar};
use common::registry::{Auth, Registry};
use common::{Client, Daemon, tools};
use crust::cri::pb;
use serde_json::json;

/// kubelet 1.37's default masked paths (`securitycontext.DefaultProcMountMaskedPaths`), but
/// the per-CPU thermal_throttle directories, which it adds where the node has them.
const MASKED: [&str; 12] = [
    "/proc/asound",
    "/proc/acpi",
    "/proc/interrupts",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// kubelet's default read-only paths.
const READONLY: [&str; 5] = [
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// Where crust is deliberately not containerd, as (why, crust's line, containerd's line);
/// docs/security.md lists each. A difference between the two outputs passes only as one of
/// these.
fn deliberate() -> Vec<(&'static str, String, String)> {
    let mut out = Vec::new();
    // The files crust writes for the pod are mounted nosuid,nodev: nothing in them is a
    // program or a device, and a container cannot make them one.
    for file in ["/etc/hosts", "/etc/hostname", "/etc/resolv.conf"] {
        for rw in ["rw", "ro"] {
            out.push((
                "the pod's hosts, hostname and resolv.conf are mounted nosuid,nodev",
                format!("mount {file} {rw},nosuid,nodev,relatime"),
                format!("mount {file} {rw},relatime"),
            ));
        }
    }
    out
}

/// The profile each runtime's RuntimeDefault AppArmor profile is, by name.
const DEFAULT_PROFILES: [&str; 2] = ["crust-default", "cri-containerd.apparmor.d"];

/// The test's busybox image and a sandbox image (for containerd) running `probe pause`.
struct Images {
    reg: Registry,
    workload: String,
    pause: String,
}

async fn images() -> Images {
    let reg = Registry::start(Auth::None);
    // busybox with root and nobody in its passwd: the restricted container's uid 1000 has no
    // entry there.
    let mut layer = busybox_layer();
    layer.push(Node::Symlink {
        path: "bin/sleep".into(),
        target: "busybox".into(),
    });
    let workload = image(
        &[(tar(&layer), Comp::Gzip)],
        json!({"Env": ["PATH=/bin", "FROM_IMAGE=1"], "Cmd": ["sh"]}),
        "amd64",
    );
    reg.push("busybox", "1", &workload).await;
    let probe = std::fs::read(tools::probe()).unwrap();
    let pause_layer = vec![Node::File {
        path: "pause".into(),
        data: probe,
        mode: 0o755,
        uid: 0,
        gid: 0,
        xattrs: vec![],
    }];
    let pause = image(
        &[(tar(&pause_layer), Comp::Gzip)],
        json!({"Entrypoint": ["/pause", "pause"], "User": "65535:65535"}),
        "amd64",
    );
    reg.push("pause", "1", &pause).await;
    Images {
        workload: format!("{}/busybox:1", reg.addr),
        pause: format!("{}/pause:1", reg.addr),
        reg,
    }
}

/// One runtime under test, through its CRI socket.
struct Runtime {
    name: &'static str,
    c: Client,
    images: pb::image_service_client::ImageServiceClient<tonic::transport::Channel>,
    cgroup_parent: String,
    logs: PathBuf,
}

impl Runtime {
    async fn pull(&mut self, image: &str) {
        self.images
            .pull_image(common::pull_request(image))
            .await
            .unwrap_or_else(|e| panic!("{}: pulling {image}: {e}", self.name));
    }

    /// A pod as kubelet makes one: privileged (so that a privileged container may run in it),
    /// with `pid` as its PID mode, a cgroup parent and log directory of its own.
    fn pod(&self, name: &str, pid: pb::NamespaceMode) -> pb::PodSandboxConfig {
        pb::PodSandboxConfig {
            metadata: Some(pb::PodSandboxMetadata {
                name: name.into(),
                uid: format!("uid-{name}"),
                namespace: "confinement".into(),
                attempt: 0,
            }),
            hostname: name.into(),
            log_directory: self.logs.join(name).display().to_string(),
            dns_config: Some(pb::DnsConfig {
                servers: vec!["10.96.0.10".into()],
                searches: vec!["confinement.svc.cluster.local".into()],
                options: vec!["ndots:5".into()],
            }),
            linux: Some(pb::LinuxPodSandboxConfig {
                cgroup_parent: self.cgroup_parent.clone(),
                security_context: Some(pb::LinuxSandboxSecurityContext {
                    namespace_options: Some(pb::NamespaceOption {
                        network: pb::NamespaceMode::Pod as i32,
                        pid: pid as i32,
                        ipc: pb::NamespaceMode::Pod as i32,
                        ..Default::default()
                    }),
                    privileged: true,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    async fn run_pod(&mut self, config: &pb::PodSandboxConfig) -> String {
        std::fs::create_dir_all(&config.log_directory).unwrap();
        self.c
            .run_pod_sandbox(pb::RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: String::new(),
            })
            .await
            .unwrap_or_else(|e| panic!("{}: RunPodSandbox: {e}", self.name))
            .into_inner()
            .pod_sandbox_id
    }

    async fn run(
        &mut self,
        pod: &str,
        sandbox: &pb::PodSandboxConfig,
        c: pb::ContainerConfig,
    ) -> String {
        let name = c.metadata.as_ref().unwrap().name.clone();
        let id = self
            .c
            .create_container(pb::CreateContainerRequest {
                pod_sandbox_id: pod.into(),
                config: Some(c),
                sandbox_config: Some(sandbox.clone()),
            })
            .await
            .unwrap_or_else(|e| panic!("{}: creating {name}: {e}", self.name))
            .into_inner()
            .container_id;
        self.c
            .start_container(pb::StartContainerRequest {
                container_id: id.clone(),
            })
            .await
            .unwrap_or_else(|e| panic!("{}: starting {name}: {e}", self.name));
        id
    }

    /// What the container's own process printed (its CRI log), once the probe ended.
    async fn process_facts(&mut self, log: &Path, id: &str) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let lines: Vec<String> = text
                .lines()
                .filter_map(|l| l.splitn(4, ' ').nth(3).map(str::to_owned))
                .collect();
            if let Some(end) = lines.iter().position(|l| l == "~ end of probe") {
                return lines[..end].to_vec();
            }
            let state = self
                .c
                .container_status(pb::ContainerStatusRequest {
                    container_id: id.into(),
                    verbose: false,
                })
                .await
                .map(|r| r.into_inner().status.map(|s| s.state))
                .unwrap_or_default();
            assert!(
                Instant::now() < deadline
                    && state != Some(pb::ContainerState::ContainerExited as i32),
                "{}: the probe in {id} did not finish (state {state:?}); its log:\n{text}",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// What the probe prints through ExecSync.
    async fn exec_facts(&mut self, id: &str) -> Vec<String> {
        let r = self
            .c
            .exec_sync(pb::ExecSyncRequest {
                container_id: id.into(),
                cmd: probe_command(false),
                timeout: 120,
            })
            .await
            .unwrap_or_else(|e| panic!("{}: ExecSync in {id}: {e}", self.name))
            .into_inner();
        let out = String::from_utf8_lossy(&r.stdout).into_owned();
        assert_eq!(
            r.exit_code,
            0,
            "{}: the probe's exec failed: {out}{}",
            self.name,
            String::from_utf8_lossy(&r.stderr)
        );
        out.lines()
            .take_while(|l| *l != "~ end of probe")
            .map(str::to_owned)
            .collect()
    }

    async fn remove_pod(&mut self, id: &str) {
        self.c
            .stop_pod_sandbox(pb::StopPodSandboxRequest {
                pod_sandbox_id: id.into(),
            })
            .await
            .unwrap_or_else(|e| panic!("{}: StopPodSandbox: {e}", self.name));
        self.c
            .remove_pod_sandbox(pb::RemovePodSandboxRequest {
                pod_sandbox_id: id.into(),
            })
            .await
            .unwrap_or_else(|e| panic!("{}: RemovePodSandbox: {e}", self.name));
    }
}

fn probe_command(wait: bool) -> Vec<String> {
    let mut cmd = vec![
        "/probe".to_owned(),
        "confine".into(),
        MASKED.join(","),
        READONLY.join(","),
    ];
    if wait {
        cmd.push("wait".into());
    }
    cmd
}

/// The kinds of container compared.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Plain,
    RuntimeDefault,
    Restricted,
    Privileged,
    SharedPid,
}

fn container(image: &str, kind: Kind) -> pb::ContainerConfig {
    let name = format!("{kind:?}").to_lowercase();
    let profile = |t: pb::security_profile::ProfileType| {
        Some(pb::SecurityProfile {
            profile_type: t as i32,
            localhost_ref: String::new(),
        })
    };
    use pb::security_profile::ProfileType::{RuntimeDefault, Unconfined};
    let mut sc = pb::LinuxContainerSecurityContext {
        namespace_options: Some(pb::NamespaceOption {
            network: pb::NamespaceMode::Pod as i32,
            pid: match kind {
                Kind::SharedPid => pb::NamespaceMode::Pod,
                _ => pb::NamespaceMode::Container,
            } as i32,
            ipc: pb::NamespaceMode::Pod as i32,
            ..Default::default()
        }),
        masked_paths: MASKED.iter().map(|p| p.to_string()).collect(),
        readonly_paths: READONLY.iter().map(|p| p.to_string()).collect(),
        seccomp: profile(Unconfined),
        ..Default::default()
    };
    match kind {
        Kind::Plain | Kind::SharedPid => {}
        Kind::RuntimeDefault => sc.seccomp = profile(RuntimeDefault),
        Kind::Restricted => {
            sc.seccomp = profile(RuntimeDefault);
            sc.run_as_user = Some(pb::Int64Value { value: 1000 });
            sc.readonly_rootfs = true;
            sc.no_new_privs = true;
            sc.capabilities = Some(pb::Capability {
                add_capabilities: vec!["NET_BIND_SERVICE".into()],
                drop_capabilities: vec!["ALL".into()],
                ..Default::default()
            });
        }
        Kind::Privileged => sc.privileged = true,
    }
    pb::ContainerConfig {
        metadata: Some(pb::ContainerMetadata {
            name: name.clone(),
            attempt: 0,
        }),
        image: Some(pb::ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        command: probe_command(true),
        envs: vec![pb::KeyValue {
            key: "FROM_REQUEST".into(),
            value: "1".into(),
        }],
        mounts: vec![pb::Mount {
            container_path: "/probe".into(),
            host_path: tools::probe().display().to_string(),
            readonly: true,
            ..Default::default()
        }],
        log_path: format!("{name}.log"),
        linux: Some(pb::LinuxContainerConfig {
            // What kubelet sends for a BestEffort pod's container.
            resources: Some(pb::LinuxContainerResources {
                cpu_shares: 2,
                oom_score_adj: 1000,
                ..Default::default()
            }),
            security_context: Some(sc),
        }),
        ..Default::default()
    }
}

/// Every container of the scenario, its process's and its exec's facts, by
/// "<container> process" and "<container> exec".
async fn scenario(rt: &mut Runtime, image: &str) -> BTreeMap<String, Vec<String>> {
    rt.pull(image).await;
    let mut out = BTreeMap::new();
    let groups = [
        (
            "confinement",
            pb::NamespaceMode::Container,
            vec![
                Kind::Plain,
                Kind::RuntimeDefault,
                Kind::Restricted,
                Kind::Privileged,
            ],
        ),
        ("shared-pid", pb::NamespaceMode::Pod, vec![Kind::SharedPid]),
    ];
    for (pod_name, pid, kinds) in groups {
        let sandbox = rt.pod(pod_name, pid);
        let pod = rt.run_pod(&sandbox).await;
        // All started first, then read: their starts overlap (it matters under emulation).
        let mut started = Vec::new();
        for kind in kinds {
            let config = container(image, kind);
            let log = Path::new(&sandbox.log_directory).join(&config.log_path);
            let name = config.metadata.as_ref().unwrap().name.clone();
            started.push((name, log, rt.run(&pod, &sandbox, config).await));
        }
        for (name, log, id) in started {
            let process = rt.process_facts(&log, &id).await;
            out.insert(format!("{name} process"), normalize(process));
            let exec = rt.exec_facts(&id).await;
            out.insert(format!("{name} exec"), normalize(exec));
        }
        rt.remove_pod(&pod).await;
    }
    out
}

/// The runtime's own name for its default AppArmor profile is not a difference.
fn normalize(facts: Vec<String>) -> Vec<String> {
    facts
        .into_iter()
        .map(|f| {
            DEFAULT_PROFILES
                .iter()
                .fold(f, |f, name| f.replace(name, "<runtime default profile>"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crust_confines_pods_as_containerd_does() {
    let images = images().await;

    let peer = Peer::start(&images.reg.addr, &images.pause);
    let mut containerd = Runtime {
        name: "containerd",
        c: peer.client().await,
        images: peer.images().await,
        cgroup_parent: peer.cgroup_parent.clone(),
        logs: peer.dir.join("logs"),
    };
    let d = Daemon::prepare();
    d.write_bridge_network(&[]);
    d.append_config(&format!(
        "\n[registry.mirrors.\"{0}\"]\nendpoints = [\"http://{0}\"]\n",
        images.reg.addr
    ));
    let d = d.spawn();
    let mut crust = Runtime {
        name: "crust",
        c: d.client().await,
        images: d.images().await,
        cgroup_parent: d.cgroup_parent.clone(),
        logs: d.dir.join("logs"),
    };
    // The two runtimes side by side: nothing of one is in the other's way.
    let (theirs, ours) = tokio::join!(
        scenario(&mut containerd, &images.workload),
        scenario(&mut crust, &images.workload)
    );

    // Both outputs, for reading when this fails: target/confinement/<runtime>/<container>.
    let keep = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/confinement");
    for (runtime, outputs) in [("crust", &ours), ("containerd", &theirs)] {
        let dir = keep.join(runtime);
        std::fs::create_dir_all(&dir).unwrap();
        for (what, facts) in outputs {
            std::fs::write(dir.join(what.replace(' ', "-")), facts.join("\n") + "\n").unwrap();
        }
    }
    let deliberate = deliberate();
    let mut report = Vec::new();
    let mut used = BTreeSet::new();
    for (what, want) in &theirs {
        let got = ours.get(what).cloned().unwrap_or_default();
        let (want, got): (BTreeSet<_>, BTreeSet<_>) = (want.iter().collect(), got.iter().collect());
        let mut only_crust: Vec<&String> = got.difference(&want).copied().collect();
        let mut only_containerd: Vec<&String> = want.difference(&got).copied().collect();
        for (i, (_, ours, theirs)) in deliberate.iter().enumerate() {
            let (a, b) = (
                only_crust.iter().position(|l| l == &ours),
                only_containerd.iter().position(|l| l == &theirs),
            );
            if let (Some(a), Some(b)) = (a, b) {
                only_crust.remove(a);
                only_containerd.remove(b);
                used.insert(i);
            }
        }
        for l in only_containerd {
            report.push(format!("{what}: containerd: {l}"));
        }
        for l in only_crust {
            report.push(format!("{what}: crust:      {l}"));
        }
    }
    assert_eq!(
        ours.len(),
        theirs.len(),
        "{:?} vs {:?}",
        ours.keys(),
        theirs.keys()
    );
    assert!(
        report.is_empty(),
        "crust confines differently from containerd ({} lines; a deliberate difference \
         belongs in deliberate() and docs/security.md; both outputs are in {}):\n{}",
        report.len(),
        keep.display(),
        report.join("\n")
    );
    let seen: BTreeSet<&str> = used.iter().map(|i| deliberate[*i].0).collect();
    println!("deliberate differences seen: {seen:?}");
}
