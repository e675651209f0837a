//! containerd 2.4.2 with runc, the peer `make bench` measures crust against (built from
//! `hack/tools/containerd` by `hack/build-tools.sh containerd`, cached), on temporary
//! directories for differential tests: its CRI on a socket of its own, runc's state, a CNI
//! bridge and subnet of its own (Debian's plugins), a cgroup parent of its own, and its image
//! pulls sent to the test registry (`certs.d` hosts). Its pods' sandbox image is the test's
//! (`pause`). Dropping it stops containerd, kills the shims it left (found by its socket in
//! their command line), unmounts what is left under its directories and removes the bridge
//! and cgroups. A containerd that cannot be built or started fails the test.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crust::cri::pb;

use super::daemon::{cgroup_roots, remove_cgroup_tree};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// The runc containerd's shim runs: `$CRUST_RUNC` (the cgroup v2 guest shares the host's),
/// else Debian's.
fn runc() -> PathBuf {
    let runc = std::env::var_os("CRUST_RUNC")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/usr/sbin/runc".into());
    assert!(
        runc.is_file(),
        "SKIPPED is not a pass: {} not found; install runc (hack/install-deps.sh test)",
        runc.display()
    );
    runc
}

/// Where containerd, ctr and the runc shim are: `$CRUST_CONTAINERD_DIR`, else built (or
/// found in the cache) by `hack/build-tools.sh containerd`.
fn containerd_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CRUST_CONTAINERD_DIR") {
        return dir.into();
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("hack/build-tools.sh");
    let out = Command::new(&script)
        .arg("containerd")
        .output()
        .expect("hack/build-tools.sh runs");
    assert!(
        out.status.success(),
        "building containerd: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = String::from_utf8_lossy(&out.stdout);
    PathBuf::from(dir.lines().last().unwrap_or_default().trim())
}

pub struct Peer {
    pub dir: PathBuf,
    child: Option<Child>,
    pub socket: PathBuf,
    pub bridge: String,
    pub cgroup_parent: String,
}

impl Peer {
    /// Starts containerd with pulls of `registry` (host:port, plain HTTP) sent there and
    /// `sandbox_image` as its pods' sandbox image.
    pub fn start(registry: &str, sandbox_image: &str) -> Peer {
        super::daemon::require_root();
        let bin = containerd_dir();
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let tag = format!("{}x{n}", std::process::id() % 10000);
        let dir = std::env::temp_dir().join(format!("crust-ctrd-{tag}"));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["net.d", "certs.d", "root", "state"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let bridge = format!("ctd{tag}");
        let subnet = format!("10.{}.{}.0/24", 150 + std::process::id() % 50, n % 250);
        std::fs::write(
            dir.join("net.d/10-peer.conflist"),
            format!(
                r#"{{"cniVersion":"1.0.0","name":"crust-peer","plugins":[
                {{"type":"bridge","bridge":"{bridge}","isGateway":true,"ipMasq":false,
                  "hairpinMode":true,"ipam":{{"type":"host-local","dataDir":"{}",
                  "ranges":[[{{"subnet":"{subnet}"}}]],"routes":[{{"dst":"0.0.0.0/0"}}]}}}},
                {{"type":"portmap","capabilities":{{"portMappings":true}}}}]}}"#,
                dir.join("ipam").display()
            ),
        )
        .unwrap();
        let hosts = dir.join("certs.d").join(registry);
        std::fs::create_dir_all(&hosts).unwrap();
        std::fs::write(
            hosts.join("hosts.toml"),
            format!(
                "server = \"http://{registry}\"\n[host.\"http://{registry}\"]\n  \
                 capabilities = [\"pull\", \"resolve\"]\n"
            ),
        )
        .unwrap();
        let socket = dir.join("containerd.sock");
        std::fs::write(
            dir.join("config.toml"),
            config(&dir, &socket, sandbox_image),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("containerd.log")).unwrap();
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let child = Command::new(bin.join("containerd"))
            .arg("--config")
            .arg(dir.join("config.toml"))
            .env("PATH", path)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("containerd runs");
        let mut peer = Peer {
            cgroup_parent: format!("/crust-ctrd-{tag}"),
            dir,
            child: Some(child),
            socket,
            bridge,
        };
        peer.wait_ready();
        peer
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while std::os::unix::net::UnixStream::connect(&self.socket).is_err() {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
                panic!("containerd exited with {status}:\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "containerd did not start:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default()
    }

    pub async fn client(&self) -> super::Client {
        crust::cri::client::runtime(self.socket.to_str().unwrap())
            .await
            .unwrap()
    }

    pub async fn images(
        &self,
    ) -> pb::image_service_client::ImageServiceClient<tonic::transport::Channel> {
        crust::cri::client::image(self.socket.to_str().unwrap())
            .await
            .unwrap()
    }

    /// The shims this containerd started: their command line names its socket.
    fn shims(&self) -> Vec<i32> {
        let socket = self.socket.to_string_lossy().into_owned();
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let cmd = String::from_utf8_lossy(&cmd);
                cmd.contains("containerd-shim") && cmd.contains(&socket)
            })
            .collect()
    }
}

/// containerd 2.x's configuration (version 3): its CRI on `socket`, everything of its own
/// under `dir` (runc's root and the pods' network namespaces included; only the shims'
/// sockets go to containerd's fixed /run/containerd/s, named by a hash of socket and id), NRI
/// off (its socket is machine-wide), oom_score_adj clamped to containerd's own (this machine
/// lacks CAP_SYS_RESOURCE). Everything else is containerd's default, as a user gets it.
fn config(dir: &Path, socket: &Path, sandbox_image: &str) -> String {
    let rt = r#"plugins."io.containerd.cri.v1.runtime""#;
    let im = r#"plugins."io.containerd.cri.v1.images""#;
    format!(
        r#"version = 3
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.nri.v1.nri"]
[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{dir}/opt"
[{rt}]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
[{rt}.cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = "{dir}/net.d"
[{rt}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{rt}.containerd.runtimes.runc.options]
  BinaryName = "{runc}"
  Root = "{dir}/runc"
[{im}.pinned_images]
  sandbox = "{sandbox_image}"
[{im}.registry]
  config_path = "{dir}/certs.d"
"#,
        root = dir.join("root").display(),
        state = dir.join("state").display(),
        socket = socket.display(),
        dir = dir.display(),
        runc = runc().display(),
    )
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::SIGTERM,
            );
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && !matches!(c.try_wait(), Ok(Some(_))) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        for pid in self.shims() {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL);
        }
        let prefix = self.dir.to_string_lossy().into_owned();
        let mut mounts: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(' ').nth(4).map(str::to_owned))
            .filter(|m| m.starts_with(&prefix))
            .collect();
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in mounts {
            let _ = nix::mount::umount2(m.as_str(), nix::mount::MntFlags::MNT_DETACH);
        }
        for root in cgroup_roots() {
            remove_cgroup_tree(&root.join(self.cgroup_parent.trim_start_matches('/')));
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .stderr(Stdio::null())
            .status();
        if std::env::var_os("CRUST_KEEP_TEST_DIRS").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
