//! A real crust daemon for integration tests: its own temp root, state, socket, CNI conf dir
//! (a bridge network with a bridge, subnet and IPAM dir of its own) and config file.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crust::cri::pb::runtime_service_client::RuntimeServiceClient;
use tonic::transport::Channel;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Set in each test daemon's environment (to its directory), which its monitors inherit.
const MARKER: &str = "CRUST_TEST_DAEMON";

pub struct Daemon {
    pub child: Option<Child>,
    pub dir: PathBuf,
    pub socket: PathBuf,
    pub state: PathBuf,
    pub root: PathBuf,
    pub cni_conf: PathBuf,
    pub ipam: PathBuf,
    pub bridge: String,
    pub subnet_prefix: String,
    pub cgroup_parent: String,
    pub config: PathBuf,
    /// The crust binary `launch` starts (this build's unless a test names another: the
    /// previous release, for an upgrade).
    pub exe: PathBuf,
}

pub fn require_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "integration tests need root (namespaces, mounts, cgroups, CNI): run them with sudo"
    );
}

/// NRI on a socket and plugin directories of the daemon's own: the machine's
/// /var/run/nri/nri.sock may be another runtime's, and /opt/nri/plugins the host's.
pub fn private_nri(dir: &Path) -> String {
    format!(
        "[nri]\nsocket_path = {:?}\nplugin_path = {:?}\nplugin_config_path = {:?}\n",
        dir.join("nri.sock"),
        dir.join("nri-plugins"),
        dir.join("nri-conf.d")
    )
}

impl Daemon {
    /// A daemon with the default bridge network of its own.
    pub fn start() -> Daemon {
        let d = Daemon::prepare();
        d.write_bridge_network(&[]);
        d.spawn()
    }

    /// A daemon whose network list is the bridge plus `extra` plugin objects (JSON).
    pub fn start_with_plugins(extra: &[&str]) -> Daemon {
        let d = Daemon::prepare();
        d.write_bridge_network(extra);
        d.spawn()
    }

    /// Prepares directories and config without a network config or a running daemon.
    pub fn prepare() -> Daemon {
        require_root();
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let tag = format!("{}x{n}", std::process::id() % 10000);
        let dir = std::env::temp_dir().join(format!("crust-it-{tag}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let d = Daemon {
            child: None,
            socket: dir.join("crust.sock"),
            state: dir.join("state"),
            root: dir.join("root"),
            cni_conf: dir.join("net.d"),
            ipam: dir.join("ipam"),
            bridge: format!("crt{tag}"),
            subnet_prefix: format!("10.{}.{}", 200 + (std::process::id() % 50), n % 250),
            cgroup_parent: format!("/crust-it-{tag}"),
            config: dir.join("config.toml"),
            exe: PathBuf::from(env!("CARGO_BIN_EXE_crust")),
            dir,
        };
        std::fs::create_dir_all(&d.cni_conf).unwrap();
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cni");
        std::fs::write(
            &d.config,
            // No free-space reserve: the disk is shared with whatever else runs on the machine
            // (see crust_daemon::without_reserve).
            format!(
                // [network] stays last: tests append keys of theirs to it.
                "default_cgroup_parent = {:?}\n[image]\nmin_free_percent = 0\n{}\
                 [network]\nconf_dir = {:?}\n\
                 bin_dirs = [{:?}, \"/usr/lib/cni\", \"/opt/cni/bin\"]\nmasquerade_subnets = []\n",
                d.cgroup_parent,
                private_nri(&d.dir),
                d.cni_conf,
                fixtures
            ),
        )
        .unwrap();
        let _ = Command::new("ip")
            .args(["link", "del", &d.bridge])
            .stderr(Stdio::null())
            .status();
        d
    }

    pub fn write_bridge_network(&self, extra: &[&str]) {
        let mut plugins = vec![format!(
            r#"{{"type":"bridge","bridge":"{}","isGateway":true,"ipMasq":false,"hairpinMode":true,
               "ipam":{{"type":"host-local","dataDir":"{}","ranges":[[{{"subnet":"{}.0/24"}}]],
               "routes":[{{"dst":"0.0.0.0/0"}}]}}}}"#,
            self.bridge,
            self.ipam.display(),
            self.subnet_prefix
        )];
        plugins.push(r#"{"type":"portmap","capabilities":{"portMappings":true}}"#.into());
        plugins.extend(extra.iter().map(|s| s.to_string()));
        std::fs::write(
            self.cni_conf.join("10-test.conflist"),
            format!(
                r#"{{"cniVersion":"1.0.0","name":"crust-test","plugins":[{}]}}"#,
                plugins.join(",")
            ),
        )
        .unwrap();
    }

    pub fn spawn(mut self) -> Daemon {
        self.launch();
        self
    }

    /// Starts `crust serve` and waits for its socket to answer.
    pub fn launch(&mut self) {
        self.launch_with(&[]);
    }

    /// Like `launch`, with more environment variables (a failpoint to arm).
    pub fn launch_with(&mut self, env: &[(&str, &str)]) {
        self.launch_unwaited(env);
        self.wait_serving();
    }

    /// Starts `crust serve` and returns at once (its recovery may be under way).
    pub fn launch_unwaited(&mut self, env: &[(&str, &str)]) {
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.dir.join("daemon.log"))
            .unwrap();
        let child = Command::new(&self.exe)
            .arg("serve")
            .arg("--config")
            .arg(&self.config)
            .arg("--listen")
            .arg(&self.socket)
            .arg("--root")
            .arg(&self.root)
            .arg("--state")
            .arg(&self.state)
            .arg("--log-level")
            .arg("debug")
            .envs(env.iter().copied())
            .env(MARKER, &self.dir)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("crust binary runs");
        self.child = Some(child);
    }

    /// Whether the daemon's socket answers.
    pub fn serving(&self) -> bool {
        std::os::unix::net::UnixStream::connect(&self.socket).is_ok()
    }

    /// Waits for the daemon launched last to serve on its socket.
    pub fn wait_serving(&mut self) {
        // Generous: under the emulation of the cgroup v2 guest a debug build starts slowly.
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::os::unix::net::UnixStream::connect(&self.socket).is_err() {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "crust exited with {status} before serving; log:\n{}",
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "crust did not start; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    /// Adds keys to the config's `[nri]` table (before the daemon starts).
    pub fn nri_config(&self, keys: &str) {
        let text = std::fs::read_to_string(&self.config).unwrap();
        let text = text.replacen("[nri]\n", &format!("[nri]\n{keys}\n"), 1);
        std::fs::write(&self.config, text).unwrap();
    }

    pub fn nri_socket(&self) -> PathBuf {
        self.dir.join("nri.sock")
    }

    /// Adds TOML to the config file (before the daemon starts).
    /// What `crust check` prints for this daemon's configuration.
    pub fn check(&self) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_crust"))
            .args(["check", "--config"])
            .arg(&self.config)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Writes a drop-in `config.d/<name>` beside the config file, as an operator would.
    pub fn drop_in(&self, name: &str, toml: &str) {
        let dir = self.config.parent().unwrap().join("config.d");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), toml).unwrap();
    }

    pub fn append_config(&self, toml: &str) {
        let mut text = std::fs::read_to_string(&self.config).unwrap();
        text.push_str(toml);
        std::fs::write(&self.config, text).unwrap();
    }

    pub async fn images(
        &self,
    ) -> crust::cri::pb::image_service_client::ImageServiceClient<Channel> {
        crust::cri::client::image(self.socket.to_str().unwrap())
            .await
            .unwrap()
    }

    pub async fn client(&self) -> RuntimeServiceClient<Channel> {
        crust::cri::client::runtime(self.socket.to_str().unwrap())
            .await
            .unwrap()
    }

    /// SIGKILL: the daemon gets no chance to clean anything up.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait; returns the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("daemon running");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(c.id() as i32),
            nix::sys::signal::SIGTERM,
        )
        .unwrap();
        c.wait().unwrap()
    }

    pub fn sandbox_dir(&self, id: &str) -> PathBuf {
        self.state.join("sandboxes").join(id)
    }

    /// Where the daemon keeps the pods' and containers' records, on disk under its root.
    pub fn records(&self) -> PathBuf {
        self.root.join("records")
    }

    /// The directory of sandbox `id`'s record.
    pub fn sandbox_record_dir(&self, id: &str) -> PathBuf {
        self.records().join("sandboxes").join(id)
    }

    /// The directory of container `id`'s record.
    pub fn container_record_dir(&self, id: &str) -> PathBuf {
        self.records().join("containers").join(id)
    }

    pub fn ns_dir(&self) -> PathBuf {
        self.state.join("ns")
    }

    /// Entries in a directory, sorted (empty if it does not exist).
    pub fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// IP allocations host-local holds for the test network.
    pub fn allocated_ips(&self) -> Vec<String> {
        Daemon::entries(&self.ipam.join("crust-test"))
            .into_iter()
            .filter(|n| n.chars().next().is_some_and(|c| c.is_ascii_digit()))
            .collect()
    }

    /// Mounts under this daemon's directory (pins, the ns dir itself).
    pub fn mounts(&self) -> Vec<String> {
        let dir = self.dir.to_string_lossy().into_owned();
        let prefix = format!("{dir}/");
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter_map(|l| l.split(' ').nth(4).map(str::to_owned))
            .filter(|m| *m == dir || m.starts_with(&prefix))
            .collect()
    }

    /// Pod cgroups and monitors' cgroups left under this daemon's cgroup parent, in every
    /// hierarchy (v1 or v2).
    pub fn pod_cgroups(&self) -> Vec<String> {
        let mut left = Vec::new();
        for root in cgroup_roots() {
            let dir = root.join(self.cgroup_parent.trim_start_matches('/'));
            for e in Daemon::entries(&dir) {
                if e.starts_with("crust-") {
                    left.push(format!("{}/{e}", dir.display()));
                }
            }
            let monitors = dir.join("monitors");
            for e in Daemon::entries(&monitors) {
                if monitors.join(&e).is_dir() {
                    left.push(format!("{}/{e}", monitors.display()));
                }
            }
        }
        left
    }

    /// The directory of cgroup `path` (as crust names it, cgroupfs driver) in the hierarchy
    /// of `controller` (v1), or the unified one (v2). Panics when it is not there: a test
    /// that finds nothing to inspect fails.
    pub fn cgroup_dir(path: &str, controller: &str) -> PathBuf {
        let root = Path::new("/sys/fs/cgroup");
        let rel = path.trim_start_matches('/');
        let dir = if root.join("cgroup.controllers").exists() {
            root.join(rel)
        } else {
            root.join(controller).join(rel)
        };
        assert!(
            dir.is_dir(),
            "cgroup {path} ({controller}) not found at {}",
            dir.display()
        );
        dir
    }

    /// Every process forked from this daemon's monitors: the monitors, their pods' inits and
    /// runtime workers, found by the marker in the environment they inherit from the daemon
    /// (not by the sandboxes on disk, which a leaked process may have outlived).
    pub fn monitors(&self) -> Vec<i32> {
        let marker = format!("{MARKER}={}", self.dir.display());
        procfs_pids()
            .into_iter()
            .filter(|p| {
                let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
                let env = std::fs::read(format!("/proc/{p}/environ")).unwrap_or_default();
                String::from_utf8_lossy(&cmd).contains("\0monitor\0--sandbox\0")
                    && env.split(|b| *b == 0).any(|v| v == marker.as_bytes())
            })
            .collect()
    }
}

impl Daemon {
    /// Nothing of any pod is left: sandbox dirs, namespace pins, monitors, cgroups, IPs.
    pub fn assert_clean(&self) {
        let dirs = Daemon::entries(&self.state.join("sandboxes"));
        assert!(dirs.is_empty(), "sandbox dirs left: {dirs:?}");
        let records = Daemon::entries(&self.records().join("sandboxes"));
        assert!(records.is_empty(), "sandbox records left: {records:?}");
        let pins = Daemon::entries(&self.ns_dir());
        assert!(pins.is_empty(), "namespace pins left: {pins:?}");
        assert!(
            self.monitors().is_empty(),
            "monitors left: {:?}",
            self.monitors()
        );
        assert!(
            self.pod_cgroups().is_empty(),
            "cgroups left: {:?}",
            self.pod_cgroups()
        );
        assert!(
            self.allocated_ips().is_empty(),
            "IPs left: {:?}",
            self.allocated_ips()
        );
        assert!(self.veths().is_empty(), "veths left: {:?}", self.veths());
    }

    /// A reboot of the node as this daemon sees one, without rebooting: the daemon and every
    /// process of its pods are SIGKILLed (monitors, pod inits, containers), every mount under
    /// its directory goes (namespace pins, `/dev/shm`, root filesystems, the state tmpfs), and
    /// the state directory is emptied; the root directory (records, writable layers, images)
    /// and host-local's allocations on disk stay, as a disk does. The pods' cgroups stay
    /// (emptied), which a real reboot would not keep: crust must release them either way.
    pub fn simulate_reboot(&mut self) {
        self.kill9();
        loop {
            let mut pids = self.monitors();
            for cgroup in self.pod_cgroups() {
                pids.extend(cgroup_members(Path::new(&cgroup)));
            }
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::SIGKILL,
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut mounts = self.mounts();
        // Deepest first: a mount under another goes before it.
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in mounts {
            let _ = nix::mount::umount2(m.as_str(), nix::mount::MntFlags::MNT_DETACH);
        }
        assert!(self.mounts().is_empty(), "mounts left: {:?}", self.mounts());
        for e in Daemon::entries(&self.state) {
            std::fs::remove_dir_all(self.state.join(&e))
                .or_else(|_| std::fs::remove_file(self.state.join(&e)))
                .unwrap();
        }
    }

    /// The links plugged into this daemon's bridge (the host ends of pods' veths).
    pub fn veths(&self) -> Vec<String> {
        let master = format!("master {} ", self.bridge);
        crate::common::sh("ip", &["-o", "link"])
            .lines()
            .filter(|l| l.contains(&master))
            .map(str::to_owned)
            .collect()
    }
}

/// The pids in cgroup directory `dir` and every cgroup below it.
pub fn cgroup_members(dir: &Path) -> Vec<i32> {
    let mut pids: Vec<i32> = std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            pids.extend(cgroup_members(&e.path()));
        }
    }
    pids
}

/// Every cgroup hierarchy mounted under /sys/fs/cgroup: the root on v2, each controller's on
/// v1 (and the unified one of a hybrid host).
pub fn cgroup_roots() -> Vec<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    if root.join("cgroup.controllers").exists() {
        return vec![root.to_owned()];
    }
    std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .filter(|p| p.join("cgroup.procs").exists())
        .collect()
}

/// Kills what runs in `dir` and its children, and removes them, deepest first.
pub fn remove_cgroup_tree(dir: &Path) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_cgroup_tree(&e.path());
        }
    }
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL);
    }
    for _ in 0..50 {
        if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn procfs_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect()
}

/// Leaves nothing behind: monitors, pins, the ns dir mount, cgroups, the bridge, files.
impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for pid in self.monitors() {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL);
        }
        let mut mounts = self.mounts();
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in mounts {
            let _ = nix::mount::umount2(m.as_str(), nix::mount::MntFlags::MNT_DETACH);
        }
        for root in cgroup_roots() {
            let dir = root.join(self.cgroup_parent.trim_start_matches('/'));
            remove_cgroup_tree(&dir);
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
