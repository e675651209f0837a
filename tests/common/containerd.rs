//! Debian's containerd (1.6) on temporary directories, as a reference for differential tests:
//! its CRI ImageService pulls from the test registry (named as a mirror, as crust's config
//! names it), and `ctr images mount` shows an image's layers merged read-only, the way its
//! overlayfs snapshotter gives them to a container. A missing containerd fails the test.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crust::cri::pb::image_service_client::ImageServiceClient;
use tonic::transport::Channel;

use super::crust_daemon::connect;

/// Debian's containerd 1.6 and its ctr, by path: a containerd built for the benchmarks may be
/// on PATH too, and this test's config and expectations are those of the 1.6 series.
const CONTAINERD: &str = "/usr/bin/containerd";
const CTR: &str = "/usr/bin/ctr";

fn require_debian_containerd() {
    for bin in [CONTAINERD, CTR] {
        assert!(
            Path::new(bin).is_file(),
            "SKIPPED is not a pass: {bin} not found; install Debian's containerd (hack/install-deps.sh test)"
        );
    }
}

pub struct Containerd {
    pub dir: tempfile::TempDir,
    child: Child,
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && !matches!(self.child.try_wait(), Ok(Some(_))) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Whatever containerd left mounted under its directories, deepest first.
        let root = self.dir.path().to_string_lossy().into_owned();
        let mut mounts: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(' ').nth(4).map(str::to_owned))
            .filter(|m| m.starts_with(&root))
            .collect();
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in mounts {
            let _ = nix::mount::umount2(m.as_str(), nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

impl Containerd {
    /// Starts containerd with its CRI plugin sending pulls of `host` to `http://addr`.
    pub fn start(host: &str, addr: &str) -> Containerd {
        require_debian_containerd();
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let config = format!(
            r#"version = 2
root = "{root}"
state = "{state}"
[grpc]
  address = "{sock}"
[plugins."io.containerd.grpc.v1.cri".registry.mirrors."{host}"]
  endpoint = ["http://{addr}"]
"#,
            root = d.join("root").display(),
            state = d.join("state").display(),
            sock = d.join("containerd.sock").display(),
        );
        std::fs::write(d.join("config.toml"), config).unwrap();
        let log = std::fs::File::create(d.join("containerd.log")).unwrap();
        let child = Command::new(CONTAINERD)
            .arg("--config")
            .arg(d.join("config.toml"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let c = Containerd { dir, child };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !c.socket().exists() {
            assert!(
                Instant::now() < deadline,
                "containerd did not start:\n{}",
                c.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        c
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("containerd.sock")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default()
    }

    /// Its CRI ImageService.
    pub async fn images(&self) -> ImageServiceClient<Channel> {
        ImageServiceClient::new(connect(&self.socket()).await)
    }

    fn ctr(&self, args: &[&str]) -> std::process::Output {
        Command::new(CTR)
            .arg("--address")
            .arg(self.socket())
            .args(["--namespace", "k8s.io"])
            .args(args)
            .output()
            .unwrap()
    }

    /// Mounts the pulled image's layers, merged and read-only, at `target`.
    pub fn mount(&self, image: &str, target: &Path) {
        let out = self.ctr(&[
            "images",
            "mount",
            "--snapshotter",
            "overlayfs",
            image,
            &target.to_string_lossy(),
        ]);
        assert!(
            out.status.success(),
            "ctr images mount {image}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn unmount(&self, target: &Path) {
        let out = self.ctr(&["images", "unmount", "--rm", &target.to_string_lossy()]);
        assert!(
            out.status.success(),
            "ctr images unmount: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
