//! A real, standalone kubelet (k8s.io/kubernetes v1.37, built by hack/build-tools.sh) driving a
//! test daemon: no API server, static pods from a manifest directory, the cgroupfs driver under
//! a cgroup root of its own, its read-only port on loopback for `/pods`, `/stats/summary` and
//! its metrics. Ports are free ones, so kubelets of parallel tests do not meet.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::daemon::{cgroup_roots, remove_cgroup_tree};
use super::{Daemon, free_port};

/// The node name static pods are suffixed with.
pub const NODE: &str = "crust-node";

pub struct Kubelet {
    child: Option<Child>,
    pub dir: PathBuf,
    pub manifests: PathBuf,
    pub logs: PathBuf,
    /// The cgroup root kubelet puts `kubepods` under (cgroupfs driver).
    pub cgroup_root: String,
    pub read_only_port: u16,
    /// The authenticated API (HTTPS, anonymous and AlwaysAllow here): /exec, /checkpoint.
    pub port: u16,
}

impl Kubelet {
    /// Starts kubelet against `d`'s socket and waits for its healthz. Its device plugin
    /// directory is a private one (see `start_with_device_plugins`): the machine's own is every
    /// kubelet's, and a test's kubelet taking it would break another's (`make e2e-node`'s).
    pub fn start(d: &Daemon) -> Kubelet {
        let private = d.dir.join("kubelet/device-plugins");
        Kubelet::start_with_device_plugins(d, &private)
    }

    /// Starts kubelet with `device_plugins` as its device plugin directory: kubelet has that
    /// directory at a fixed path, `/var/lib/kubelet/device-plugins` (no flag moves it, and every
    /// kubelet of the machine shares it), so this kubelet runs in a mount namespace of its own
    /// (host mounts still reach it) where the test's directory is bound over that path. The
    /// mount point is created if it is missing, as any kubelet creates it.
    pub fn start_with_device_plugins(d: &Daemon, device_plugins: &std::path::Path) -> Kubelet {
        std::fs::create_dir_all(device_plugins).unwrap();
        Kubelet::start_with(d, device_plugins)
    }

    fn start_with(d: &Daemon, device_plugins: &std::path::Path) -> Kubelet {
        let binary = super::tools::kubelet();
        let dir = d.dir.join("kubelet");
        let manifests = dir.join("manifests");
        let logs = dir.join("pod-logs");
        std::fs::create_dir_all(&manifests).unwrap();
        std::fs::create_dir_all(&logs).unwrap();
        let cgroup_root = format!("{}-kubelet", d.cgroup_parent);
        // kubelet checks that its cgroup root exists in every hierarchy; it creates the rest.
        for root in cgroup_roots() {
            std::fs::create_dir_all(root.join(cgroup_root.trim_start_matches('/'))).unwrap();
        }
        let (port, read_only_port, healthz) = (free_port(), free_port(), free_port());
        let socket = format!("unix://{}", d.socket.display());
        // The disk is shared with other builds and has been seen with under 1% free: kubelet's
        // disk-pressure eviction ("0%" turns a signal off) and image GC would remove the pods
        // and images under test, which is kubelet's behaviour, not crust's.
        let config = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: {manifests}
fileCheckFrequency: 1s
syncFrequency: 5s
cgroupDriver: cgroupfs
cgroupRoot: {cgroup_root}
cgroupsPerQOS: true
failSwapOn: false
failCgroupV1: false
address: 127.0.0.1
port: {port}
readOnlyPort: {read_only_port}
healthzPort: {healthz}
healthzBindAddress: 127.0.0.1
authentication: {{anonymous: {{enabled: true}}, webhook: {{enabled: false}}}}
authorization: {{mode: AlwaysAllow}}
containerRuntimeEndpoint: {socket}
imageServiceEndpoint: {socket}
podLogsDir: {logs}
evictionHard: {{memory.available: 1Mi, nodefs.available: 0%, nodefs.inodesFree: 0%, imagefs.available: 0%, imagefs.inodesFree: 0%}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
enforceNodeAllocatable: []
resolvConf: /etc/resolv.conf
featureGates: {{EventedPLEG: true, PodAndContainerStatsFromCRI: true}}
",
            manifests = manifests.display(),
            logs = logs.display(),
        );
        std::fs::write(dir.join("config.yaml"), config).unwrap();
        let log = std::fs::File::create(dir.join("kubelet.log")).unwrap();
        let mut command = Command::new("unshare");
        command
            .args(["--mount", "--propagation", "slave", "--", "sh", "-euc"])
            .arg(
                "mkdir -p /var/lib/kubelet/device-plugins && \
                 mount --bind \"$0\" /var/lib/kubelet/device-plugins && exec \"$@\"",
            )
            .arg(device_plugins)
            .arg(&binary);
        let child = command
            .arg("--config")
            .arg(dir.join("config.yaml"))
            .arg("--root-dir")
            .arg(dir.join("root"))
            // evented.go at V(4) logs each relist a container's death requested.
            .args(["--hostname-override", NODE, "--node-ip", &node_ip()])
            .args(["-v=2", "--vmodule=evented=4"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("kubelet {} runs: {e}", binary.display()));
        let mut k = Kubelet {
            child: Some(child),
            dir,
            manifests,
            logs,
            cgroup_root,
            read_only_port,
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = k.child.as_mut().unwrap().try_wait() {
                panic!("kubelet exited with {status}; log:\n{}", k.log_tail());
            }
            // Healthy, and its read-only port serving: kubelet starts that server on its own,
            // after healthz, and a loaded machine has seen /pods refused once healthz answered.
            if http_get(healthz, "/healthz").is_ok_and(|b| b == "ok")
                && http_get(read_only_port, "/pods").is_ok()
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "kubelet not healthy and serving /pods in 60 s; log:\n{}",
                k.log_tail()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        k
    }

    /// Writes a static pod manifest (`<name>.yaml`).
    pub fn put(&self, name: &str, yaml: &str) {
        let tmp = self.dir.join(format!(".{name}.yaml"));
        std::fs::write(&tmp, yaml).unwrap();
        std::fs::rename(tmp, self.manifests.join(format!("{name}.yaml"))).unwrap();
    }

    pub fn remove(&self, name: &str) {
        std::fs::remove_file(self.manifests.join(format!("{name}.yaml"))).unwrap();
    }

    /// `GET` on the read-only port; panics on anything but 200.
    pub fn get(&self, path: &str) -> String {
        http_get(self.read_only_port, path)
            .unwrap_or_else(|e| panic!("kubelet GET {path} failed: {e}; log:\n{}", self.log_tail()))
    }

    /// `POST` on the authenticated API (kubelet's self-signed certificate is not checked);
    /// returns the HTTP status and the body.
    pub fn post(&self, path: &str) -> (u16, String) {
        let out = Command::new("curl")
            .args([
                "-sk",
                "-X",
                "POST",
                "-w",
                "\n%{http_code}",
                "--max-time",
                "120",
            ])
            .arg(format!("https://127.0.0.1:{}{path}", self.port))
            .output()
            .expect("curl runs (apt-get install curl)");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
        let code = code.trim().parse().unwrap_or_else(|_| {
            panic!(
                "kubelet POST {path}: no HTTP answer: {text} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (code, body.to_owned())
    }

    /// The pods kubelet runs (`/pods`), by name without the node suffix.
    pub fn pods(&self) -> Vec<(String, Value)> {
        let list: Value = serde_json::from_str(&self.get("/pods")).unwrap();
        let suffix = format!("-{NODE}");
        list["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|p| {
                let name = p["metadata"]["name"].as_str().unwrap_or_default();
                (name.trim_end_matches(&suffix).to_owned(), p)
            })
            .collect()
    }

    pub fn pod(&self, name: &str) -> Option<Value> {
        self.pods()
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|p| p.1)
    }

    /// Waits for `check` to hold of the status of static pod `name`; returns that status.
    pub fn wait_pod(&self, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let pod = self.pod(name);
            if let Some(p) = pod.as_ref().filter(|p| check(&p["status"])) {
                return p["status"].clone();
            }
            assert!(
                Instant::now() < deadline,
                "pod {name}: not {what} in 120 s; status: {:#}\nkubelet log:\n{}",
                pod.map(|p| p["status"].clone()).unwrap_or_default(),
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// kubelet's pid (unshare and sh exec it in their place).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("kubelet runs").id()
    }

    /// A value of kubelet's own metrics (`/metrics`), summed over label sets.
    pub fn metric(&self, name: &str) -> f64 {
        self.get("/metrics")
            .lines()
            .filter(|l| l.split(['{', ' ']).next() == Some(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("kubelet.log")).unwrap_or_default()
    }

    /// The end of kubelet's log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }

    /// Pod cgroups (crust's `crust-<pod>` directories) left under kubelet's cgroup root.
    pub fn pod_cgroups(&self) -> Vec<PathBuf> {
        fn walk(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                if !e.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                if e.file_name().to_string_lossy().starts_with("crust-") {
                    out.push(e.path());
                } else {
                    walk(&e.path(), out);
                }
            }
        }
        let mut out = Vec::new();
        for root in cgroup_roots() {
            walk(
                &root.join(self.cgroup_root.trim_start_matches('/')),
                &mut out,
            );
        }
        out
    }

    /// Stops kubelet (SIGTERM, as an upgrade or a crash loop of its own does) and starts it
    /// again over the same root directory, manifests and cgroups, as a node does.
    pub fn restart(&mut self, d: &Daemon) {
        self.stop();
        let fresh = Kubelet::start_with(d, &d.dir.join("kubelet/device-plugins"));
        // The old value's drop would remove the cgroups the pods still run in.
        std::mem::forget(std::mem::replace(self, fresh));
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let pid = nix::unistd::Pid::from_raw(c.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.stop();
        // kubelet's volume directories are plain directories here (no tmpfs-backed volumes),
        // but unmount anything it left before the daemon's directory goes.
        let root = self.dir.display().to_string();
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut under: Vec<&str> = mounts
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|m| m.starts_with(&root))
            .collect();
        under.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in under {
            let _ = nix::mount::umount2(m, nix::mount::MntFlags::MNT_DETACH);
        }
        for root in cgroup_roots() {
            remove_cgroup_tree(&root.join(self.cgroup_root.trim_start_matches('/')));
        }
    }
}

/// An HTTP/1.0 GET on 127.0.0.1:`port` (the server closes the connection, no chunking); the
/// body when the answer is 200.
/// The node's IPv4 address for kubelet's `--node-ip`: the source address of the default route,
/// else the first global one. Without it a standalone kubelet looks its node name up in DNS
/// whenever it builds its node object, which it does in every sync of a static pod; offline
/// that waits for the resolver's timeout (5 s) and every pod worker waits with it.
fn node_ip() -> String {
    let run = |args: &[&str]| {
        let out = Command::new("ip").args(args).output().expect("ip runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let route = run(&["-4", "-o", "route", "get", "1.1.1.1"]);
    let from_route = route
        .split_whitespace()
        .skip_while(|w| *w != "src")
        .nth(1)
        .map(str::to_owned);
    from_route
        .or_else(|| {
            let addrs = run(&["-4", "-o", "addr", "show", "scope", "global"]);
            let cidr = addrs
                .split_whitespace()
                .skip_while(|w| *w != "inet")
                .nth(1)?;
            cidr.split('/').next().map(str::to_owned)
        })
        .expect("a global IPv4 address on this machine for kubelet's --node-ip")
}

/// `GET` of `path` on kubelet's port: the body of a 200, or what went wrong.
fn http_get(port: u16, path: &str) -> Result<String, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .map_err(|e| format!("send: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .map_err(|e| format!("reading the answer (30 s at most): {e}"))?;
    let raw = String::from_utf8_lossy(&raw);
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no HTTP answer: {raw:?}"))?;
    match head.split(' ').nth(1) {
        Some("200") => Ok(body.to_owned()),
        _ => Err(format!(
            "{}: {body}",
            head.lines().next().unwrap_or_default()
        )),
    }
}
