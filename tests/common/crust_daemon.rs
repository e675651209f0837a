//! Starts the real crust daemon on temporary directories for image tests, and connects the
//! generated CRI ImageService client to its unix socket.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crust::cri::pb::image_service_client::ImageServiceClient;
use tonic::transport::Channel;

pub struct Crust {
    pub dir: tempfile::TempDir,
    child: Child,
}

impl Drop for Crust {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && !matches!(self.child.try_wait(), Ok(Some(_))) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The daemon mounts a tmpfs on its state directory and makes its namespace directory a
        // mount of its own; undo both so the temporary directory can be deleted.
        for m in ["state/ns", "state", "root"] {
            let _ = nix::mount::umount2(&self.dir.path().join(m), nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

impl Crust {
    /// Starts `crust serve` with `config` (TOML) and waits for its socket.
    pub fn start(config: &str) -> Crust {
        Crust::start_with_env(config, &[])
    }

    /// Like `start`, with `env` added to the daemon's environment (a failpoint, say).
    pub fn start_with_env(config: &str, env: &[(&str, &str)]) -> Crust {
        assert!(
            nix::unistd::geteuid().is_root(),
            "image integration tests run the daemon and must run as root"
        );
        let dir = tempfile::tempdir().unwrap();
        let config = with_private_nri(&without_reserve(config), dir.path());
        std::fs::write(dir.path().join("config.toml"), config).unwrap();
        let child = spawn(dir.path(), env);
        let mut c = Crust { dir, child };
        c.wait_ready();
        c
    }

    /// Starts `crust serve` with a `config` it must refuse: returns what it logged once it
    /// exited (failing the test if it serves instead).
    pub fn try_start(config: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        let config = with_private_nri(&without_reserve(config), dir.path());
        std::fs::write(dir.path().join("config.toml"), config).unwrap();
        let mut child = spawn(dir.path(), &[]);
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("crust serve did not refuse the config within 30 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let log = std::fs::read_to_string(dir.path().join("crust.log")).unwrap_or_default();
        assert!(!status.success(), "crust serve took the config: {log}");
        log
    }

    /// Like `start`, with the root directory on a tmpfs of `mib` MiB: a nearly full disk.
    pub fn start_on_small_disk(config: &str, mib: u32) -> Crust {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        nix::mount::mount(
            Some("tmpfs"),
            &root,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some(format!("size={mib}m").as_str()),
        )
        .unwrap();
        let config = with_private_nri(&without_reserve(config), dir.path());
        std::fs::write(dir.path().join("config.toml"), config).unwrap();
        let child = spawn(dir.path(), &[]);
        let mut c = Crust { dir, child };
        c.wait_ready();
        c
    }

    /// Kills the daemon with SIGKILL (no chance to clean up) and waits for it to be gone.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the daemon again on the same directories (after `kill9`).
    pub fn restart(&mut self) {
        let _ = self.child.try_wait();
        let _ = std::fs::remove_file(self.socket());
        self.child = spawn(self.dir.path(), &[]);
        self.wait_ready();
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while std::os::unix::net::UnixStream::connect(self.socket()).is_err() {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("crust exited with {status}: {}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "crust did not start: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("crust.sock")
    }
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("config.toml")
    }
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("crust.log")).unwrap_or_default()
    }

    pub async fn images(&self) -> ImageServiceClient<Channel> {
        ImageServiceClient::new(connect(&self.socket()).await)
    }

    /// Runs `crust image <args>` against this daemon's root and config.
    pub fn image_cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_crust"))
            .arg("image")
            .args(args)
            .arg("--root")
            .arg(self.root())
            .arg("--state")
            .arg(self.dir.path().join("state"))
            .arg("--config")
            .arg(self.config_path())
            .output()
            .unwrap()
    }
}

/// `crust serve` on the directories under `dir` (config, socket, root, state), logging to
/// `dir/crust.log` (appended, so a restart keeps the earlier log), with `env` added.
fn spawn(dir: &Path, env: &[(&str, &str)]) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("crust.log"))
        .unwrap();
    let p = |s: &str| dir.join(s);
    Command::new(env!("CARGO_BIN_EXE_crust"))
        .arg("serve")
        .arg("--listen")
        .arg(p("crust.sock"))
        .arg("--root")
        .arg(p("root"))
        .arg("--state")
        .arg(p("state"))
        .arg("--config")
        .arg(p("config.toml"))
        .arg("--log-level")
        .arg("crust=debug,info")
        .env("RUST_LOG_STYLE", "never")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

pub async fn connect(socket: &Path) -> Channel {
    let socket = socket.to_owned();
    tonic::transport::Endpoint::try_from("http://[::]:50051")
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_| {
            let s = socket.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(s).await?,
                ))
            }
        }))
        .await
        .unwrap()
}

/// The daemon's ImageService over a bare HTTP/2 connection that sends `grpc-timeout` on every
/// request without enforcing it (tonic's Channel would cut the call short itself), so a test
/// sees the status the daemon answers when the deadline passes.
pub async fn images_with_deadline(
    socket: &Path,
    grpc_timeout: &'static str,
) -> ImageServiceClient<RawH2> {
    let io = hyper_util::rt::TokioIo::new(tokio::net::UnixStream::connect(socket).await.unwrap());
    let (send, conn) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
            .await
            .unwrap();
    tokio::spawn(conn);
    let svc = tower::service_fn(
        move |mut req: tonic::codegen::http::Request<tonic::body::Body>| {
            let mut send = send.clone();
            req.headers_mut().insert(
                "grpc-timeout",
                tonic::codegen::http::HeaderValue::from_static(grpc_timeout),
            );
            async move { send.send_request(req).await }
        },
    );
    ImageServiceClient::with_origin(
        tower::util::BoxCloneService::new(svc),
        "http://localhost".parse().unwrap(),
    )
}

pub type RawH2 = tower::util::BoxCloneService<
    tonic::codegen::http::Request<tonic::body::Body>,
    tonic::codegen::http::Response<hyper::body::Incoming>,
    hyper::Error,
>;

/// The config that sends pulls of `host` to the test registry at `addr` over plain http.
pub fn mirror_config(host: &str, addr: &str, extra: &str) -> String {
    format!("[registry.mirrors.\"{host}\"]\nendpoints = [\"http://{addr}\"]\n{extra}")
}

/// `config` with NRI on a socket and plugin directories under `dir`, unless it configures NRI
/// itself: the machine's /var/run/nri/nri.sock may be another runtime's.
pub fn with_private_nri(config: &str, dir: &Path) -> String {
    if config.contains("[nri]") {
        return config.to_owned();
    }
    format!(
        "{config}\n[nri]\nsocket_path = {:?}\nplugin_path = {:?}\nplugin_config_path = {:?}\n",
        dir.join("nri.sock"),
        dir.join("nri-plugins"),
        dir.join("nri-conf.d")
    )
}

/// `config` with no free-space reserve unless it sets one: the tests share the machine's disk
/// with whatever else runs there, and its 5% default would fail pulls that have room. The
/// reserve itself is tested where a test sets it (`images.rs`, on a small tmpfs).
pub fn without_reserve(config: &str) -> String {
    if config.contains("min_free_percent") {
        return config.to_owned();
    }
    match config.find("[image]\n") {
        Some(at) => {
            let end = at + "[image]\n".len();
            format!("{}min_free_percent = 0\n{}", &config[..end], &config[end..])
        }
        None => format!("{config}\n[image]\nmin_free_percent = 0\n"),
    }
}
