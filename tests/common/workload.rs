//! Containers for integration tests: a crust daemon with its own bridge network (daemon.rs), a
//! real registry (Debian's docker-registry) holding a busybox image built here, and helpers
//! that create, start, wait for and inspect containers the way kubelet drives them.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crust::cri::pb;
use serde_json::json;

use super::oci_build::{Comp, Node, busybox_layer, dir, file, image, tar};
use super::registry::{Auth, Registry};
use super::{Client, Daemon, pod_config, run_request, with_namespaces};

/// busybox applets the tests call by name (busybox-static runs them in-process from `sh`,
/// but an exec or a command names a file).
const APPLETS: [&str; 29] = [
    "cat", "chmod", "dd", "echo", "env", "grep", "head", "hostname", "id", "kill", "ln", "ls",
    "mkdir", "mount", "ps", "pwd", "readlink", "rm", "sleep", "stat", "tail", "test", "touch",
    "tr", "true", "umount", "unshare", "wc", "yes",
];

/// kubelet 1.37's masked paths for `procMount: Default` (`DefaultProcMountMaskedPaths`, but
/// the per-CPU thermal_throttle directories it adds where the node has them): kubelet sends
/// them with every container that is not privileged.
pub const KUBELET_MASKED_PATHS: [&str; 12] = [
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

/// kubelet's read-only paths for `procMount: Default`.
pub const KUBELET_READONLY_PATHS: [&str; 5] = [
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// The test image: busybox, an /etc/group with memberships, a user with a home, /tmp 1777.
pub fn test_image_layer() -> Vec<Node> {
    let mut nodes: Vec<Node> = busybox_layer()
        .into_iter()
        .filter(|n| !matches!(n, Node::File { path, .. } if path == "etc/passwd"))
        .filter(|n| !matches!(n, Node::Dir { path, .. } if path == "tmp"))
        .collect();
    for applet in APPLETS {
        nodes.push(Node::Symlink {
            path: format!("bin/{applet}"),
            target: "busybox".into(),
        });
    }
    nodes.extend([
        file(
            "etc/passwd",
            b"root:x:0:0:root:/root:/bin/sh\n\
              app:x:1000:1000:app:/home/app:/bin/sh\n\
              nobody:x:65534:65534:nobody:/:/bin/false\n",
        ),
        file(
            "etc/group",
            b"root:x:0:\nwheel:x:10:root\napp:x:1000:\nextra:x:3000:app\nnogroup:x:65534:\n",
        ),
        Node::Dir {
            path: "tmp".into(),
            mode: 0o1777,
            uid: 0,
            gid: 0,
        },
        dir("home"),
        Node::Dir {
            path: "home/app".into(),
            mode: 0o750,
            uid: 1000,
            gid: 1000,
        },
        dir("data"),
    ]);
    nodes
}

/// A daemon with a registry holding the test image, pulled already.
pub struct Env {
    pub d: Daemon,
    pub reg: Registry,
    /// The test image's reference.
    pub image: String,
    pub c: Client,
}

impl Env {
    /// Restarts the daemon with the failpoint `name` set to pause; returns what names its
    /// marker files in the failpoint directory (`marker("reached")`, `marker("release")`).
    pub async fn relaunch_paused_at(&mut self, name: &str) -> impl Fn(&str) -> PathBuf + use<> {
        let dir = self.d.dir.join("failpoints");
        std::fs::create_dir_all(&dir).unwrap();
        self.d.kill9();
        self.d.launch_with(&[
            ("CRUST_FAILPOINT", &format!("{name}:pause")),
            ("CRUST_FAILPOINT_DIR", dir.to_str().unwrap()),
        ]);
        self.c = self.d.client().await;
        let name = name.to_owned();
        move |s: &str| dir.join(format!("{name}.{s}"))
    }

    pub async fn start() -> Env {
        Env::start_with(|_| {}).await
    }

    /// Like `start`, with a chance to change the daemon's config before it starts.
    pub async fn start_with(configure: impl FnOnce(&Daemon)) -> Env {
        Env::start_as(None, configure).await
    }

    /// Like `start_with`, with the daemon run from binary `exe` when one is named.
    pub async fn start_as(exe: Option<&Path>, configure: impl FnOnce(&Daemon)) -> Env {
        let reg = Registry::start(Auth::None);
        let img = image(
            &[(tar(&test_image_layer()), Comp::Gzip)],
            json!({"Env": ["PATH=/bin", "FROM_IMAGE=1"], "Cmd": ["sh"]}),
            "amd64",
        );
        reg.push("busybox", "1", &img).await;
        let mut d = Daemon::prepare();
        if let Some(exe) = exe {
            d.exe = exe.to_owned();
        }
        d.write_bridge_network(&[]);
        d.append_config(&format!(
            "\n[registry.mirrors.\"{0}\"]\nendpoints = [\"http://{0}\"]\n",
            reg.addr
        ));
        configure(&d);
        let d = d.spawn();
        let image = format!("{}/busybox:1", reg.addr);
        d.images()
            .await
            .pull_image(super::pull_request(&image))
            .await
            .unwrap();
        let c = d.client().await;
        Env { d, reg, image, c }
    }

    /// Pushes an image of the test image's layer and a layer of `extra` over it, with `config`
    /// as its runtime config, to the test registry as `<repo>:1`, and pulls it; returns its
    /// reference.
    pub async fn pull_image_with(
        &self,
        repo: &str,
        extra: &[Node],
        config: serde_json::Value,
    ) -> String {
        let img = image(
            &[
                (tar(&test_image_layer()), Comp::Gzip),
                (tar(extra), Comp::Gzip),
            ],
            config,
            "amd64",
        );
        self.reg.push(repo, "1", &img).await;
        let reference = format!("{}/{repo}:1", self.reg.addr);
        self.d
            .images()
            .await
            .pull_image(super::pull_request(&reference))
            .await
            .unwrap();
        reference
    }

    /// A pod as kubelet makes one (each container has a PID namespace of its own), with a log
    /// directory of its own; returns its id and its config.
    pub async fn pod(&mut self, name: &str) -> (String, pb::PodSandboxConfig) {
        self.pod_under(name, "").await
    }

    /// Like `pod`, under the runtime handler `handler` ("": the default).
    pub async fn pod_under(&mut self, name: &str, handler: &str) -> (String, pb::PodSandboxConfig) {
        let mut config = pod_config(name);
        with_namespaces(
            &mut config,
            pb::NamespaceMode::Pod,
            pb::NamespaceMode::Container,
            pb::NamespaceMode::Pod,
        );
        config.log_directory = self.d.dir.join("logs").join(name).display().to_string();
        let mut req = run_request(config.clone());
        req.runtime_handler = handler.into();
        let id = self
            .c
            .run_pod_sandbox(req)
            .await
            .unwrap()
            .into_inner()
            .pod_sandbox_id;
        (id, config)
    }

    /// A container config running `cmd` in the test image, logging to `<name>.log`, with the
    /// masked and read-only paths kubelet sends for `procMount: Default`.
    pub fn config(&self, name: &str, cmd: &[&str]) -> pb::ContainerConfig {
        let strings = |list: &[&str]| list.iter().map(|p| p.to_string()).collect();
        pb::ContainerConfig {
            metadata: Some(pb::ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            image: Some(pb::ImageSpec {
                image: self.image.clone(),
                ..Default::default()
            }),
            command: cmd.iter().map(|s| s.to_string()).collect(),
            log_path: format!("{name}.log"),
            linux: Some(pb::LinuxContainerConfig {
                security_context: Some(pb::LinuxContainerSecurityContext {
                    namespace_options: Some(pb::NamespaceOption {
                        pid: pb::NamespaceMode::Container as i32,
                        ..Default::default()
                    }),
                    masked_paths: strings(&KUBELET_MASKED_PATHS),
                    readonly_paths: strings(&KUBELET_READONLY_PATHS),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// A container that doubles a shell string until its 32 MiB limit (swap included) has
    /// the kernel OOM-kill it.
    pub fn memory_hog(&self, name: &str) -> pb::ContainerConfig {
        let mut config = self.config(
            name,
            &["sh", "-c", "x=0123456789; while true; do x=$x$x; done"],
        );
        config.linux.get_or_insert_with(Default::default).resources =
            Some(pb::LinuxContainerResources {
                memory_limit_in_bytes: 32 << 20,
                memory_swap_limit_in_bytes: 32 << 20,
                ..Default::default()
            });
        config
    }

    pub async fn create(
        &mut self,
        pod: &(String, pb::PodSandboxConfig),
        config: pb::ContainerConfig,
    ) -> Result<String, tonic::Status> {
        self.c
            .create_container(pb::CreateContainerRequest {
                pod_sandbox_id: pod.0.clone(),
                config: Some(config),
                sandbox_config: Some(pod.1.clone()),
            })
            .await
            .map(|r| r.into_inner().container_id)
    }

    /// Creates and starts a container; returns its id.
    pub async fn run(
        &mut self,
        pod: &(String, pb::PodSandboxConfig),
        config: pb::ContainerConfig,
    ) -> String {
        let id = self.create(pod, config).await.unwrap();
        self.c
            .start_container(pb::StartContainerRequest {
                container_id: id.clone(),
            })
            .await
            .unwrap();
        id
    }

    pub async fn status(&mut self, id: &str) -> pb::ContainerStatus {
        self.c
            .container_status(pb::ContainerStatusRequest {
                container_id: id.into(),
                verbose: false,
            })
            .await
            .unwrap()
            .into_inner()
            .status
            .unwrap()
    }

    /// The verbose info of a container (pid, cgroup, spec).
    pub async fn info(&mut self, id: &str) -> serde_json::Value {
        let r = self
            .c
            .container_status(pb::ContainerStatusRequest {
                container_id: id.into(),
                verbose: true,
            })
            .await
            .unwrap()
            .into_inner();
        serde_json::from_str(&r.info["info"]).unwrap()
    }

    /// Waits until the container exited; returns its status.
    pub async fn wait_exit(&mut self, id: &str, within: Duration) -> pb::ContainerStatus {
        let deadline = Instant::now() + within;
        loop {
            let s = self.status(id).await;
            if s.state == pb::ContainerState::ContainerExited as i32 {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "container {id} still {:?} after {within:?}; daemon log:\n{}",
                s.state,
                tail(&self.d.log(), 40)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn exec(&mut self, id: &str, cmd: &[&str]) -> pb::ExecSyncResponse {
        self.c
            .exec_sync(pb::ExecSyncRequest {
                container_id: id.into(),
                cmd: cmd.iter().map(|s| s.to_string()).collect(),
                timeout: 10,
            })
            .await
            .unwrap()
            .into_inner()
    }

    /// An exec's stdout as text, asserting it succeeded.
    pub async fn sh(&mut self, id: &str, script: &str) -> String {
        let r = self.exec(id, &["sh", "-c", script]).await;
        assert_eq!(
            r.exit_code,
            0,
            "`{script}` failed: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        String::from_utf8_lossy(&r.stdout).into_owned()
    }

    pub async fn stop(&mut self, id: &str, timeout: i64) {
        self.c
            .stop_container(pb::StopContainerRequest {
                container_id: id.into(),
                timeout,
            })
            .await
            .unwrap();
    }

    pub async fn remove(&mut self, id: &str) {
        self.c
            .remove_container(pb::RemoveContainerRequest {
                container_id: id.into(),
            })
            .await
            .unwrap();
    }

    /// The container's log file.
    pub fn log_path(&self, pod: &(String, pb::PodSandboxConfig), name: &str) -> PathBuf {
        Path::new(&pod.1.log_directory).join(format!("{name}.log"))
    }

    /// The text of a container's log records, without timestamps: `stdout F line`.
    pub fn log_records(&self, pod: &(String, pb::PodSandboxConfig), name: &str) -> Vec<String> {
        records(&std::fs::read_to_string(self.log_path(pod, name)).unwrap_or_default())
    }

    /// What is left of container `id` on the node: its directories, mounts, cgroup and image
    /// holds. RemoveContainer returns before its reclaim (unmounting, deleting the writable
    /// layer, the cgroup, the holds) ends: `wait_reclaimed` waits for this to be empty.
    pub fn leftovers_of(&self, id: &str) -> Vec<String> {
        let mut left: Vec<String> = self
            .container_leftovers()
            .into_iter()
            .filter(|l| l.contains(id))
            .collect();
        // A hold's file is named by a digest of its holder, which the record names.
        let holds = self.d.root.join("images/holds");
        for name in Daemon::entries(&holds) {
            let text = std::fs::read_to_string(holds.join(&name)).unwrap_or_default();
            let hold: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            let holder = hold["record"]["holder"].as_str().unwrap_or_default();
            if holder.starts_with(id) {
                left.push(format!("image hold {holder}"));
            }
        }
        for root in super::daemon::cgroup_roots() {
            let parent = root.join(self.d.cgroup_parent.trim_start_matches('/'));
            for pod in Daemon::entries(&parent) {
                let dir = parent.join(pod).join(id);
                if dir.exists() {
                    left.push(format!("cgroup {}", dir.display()));
                }
            }
        }
        left
    }

    /// Waits (30 s at most) until nothing of container `id` is left: the reclaim its
    /// RemoveContainer started has ended.
    pub async fn wait_reclaimed(&self, id: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = self.leftovers_of(id);
            if left.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "container {id} still leaves {left:?} 30 s after its removal; daemon log:\n{}",
                tail(&self.d.log(), 40)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Stops and removes pod `id`, and checks that nothing of it or its containers is left
    /// on the node.
    pub async fn end_pod(&mut self, id: &str) {
        super::stop_pod(&mut self.c, id).await;
        self.remove_pod_leaving_nothing(id).await;
    }

    /// Removes pod `id` (stopping it as RemovePodSandbox does), and checks that nothing of it
    /// or its containers is left on the node.
    pub async fn remove_pod_leaving_nothing(&mut self, id: &str) {
        super::remove_pod(&mut self.c, id).await;
        assert!(
            self.container_leftovers().is_empty(),
            "{:?}",
            self.container_leftovers()
        );
        self.d.assert_clean();
    }

    /// The containers ListContainers answers, unfiltered.
    pub async fn listed(&mut self) -> Vec<pb::Container> {
        self.c
            .list_containers(pb::ListContainersRequest::default())
            .await
            .unwrap()
            .into_inner()
            .containers
    }

    /// crictl against the test daemon.
    pub fn crictl_cmd(&self, args: &[&str]) -> std::process::Command {
        let mut c = std::process::Command::new(super::tools::crictl());
        c.arg("--runtime-endpoint")
            .arg(format!("unix://{}", self.d.socket.display()))
            .arg("--timeout")
            .arg("20s")
            .args(args);
        c
    }

    /// Runs crictl with `stdin`; returns its exit code, stdout and stderr.
    pub fn crictl(&self, args: &[&str], stdin: &str) -> (i32, String, String) {
        use std::io::Write;
        use std::process::Stdio;
        let mut child = self
            .crictl_cmd(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `crictl exec -it <id> <script>` with a terminal, as a person at one would run it
    /// (`script` gives crictl one); returns what it printed.
    pub fn crictl_tty_exec(&self, id: &str, script: &str) -> String {
        let inner = format!(
            "{} --runtime-endpoint unix://{} exec -it {id} sh -c '{script}'",
            super::tools::crictl().display(),
            self.d.socket.display()
        );
        let out = std::process::Command::new("script")
            .args(["-qec", &inner, "/dev/null"])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Starts the daemon again (after a kill) and connects to it.
    pub async fn relaunch(&mut self) {
        self.d.launch();
        self.c = self.d.client().await;
    }

    /// What is left of containers: writable layers, state, runtime state.
    pub fn container_leftovers(&self) -> Vec<String> {
        let mut left = Vec::new();
        for dir in [
            self.d.root.join("containers"),
            self.d.records().join("containers"),
            self.d.state.join("containers"),
            self.d.state.join("runtime"),
        ] {
            for e in Daemon::entries(&dir) {
                left.push(format!("{}/{e}", dir.display()));
            }
        }
        // Mounts below the root: the root itself may be a test's own tmpfs, never a leftover.
        let root = format!("{}/", self.d.root.display());
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        left.extend(
            mounts
                .lines()
                .filter_map(|l| l.split(' ').nth(4))
                .filter(|m| m.starts_with(&root))
                .map(|m| format!("mount {m}")),
        );
        left
    }
}

/// Log records without their timestamps, checking each has one.
pub fn records(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| {
            let (ts, rest) = l.split_once(' ').expect("record has a timestamp");
            assert!(
                ts.len() == 30 && ts.ends_with('Z') && ts.as_bytes()[10] == b'T',
                "RFC 3339 timestamp with nanoseconds: {ts}"
            );
            rest.to_owned()
        })
        .collect()
}

pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Whether a process with this pid lives (a zombie counts as gone).
pub fn alive(pid: i64) -> bool {
    !super::exited(pid as i32)
}
