//! crust as a node service sees it, against the real daemon: readiness told to a service
//! manager over `$NOTIFY_SOCKET` (READY=1 only once the CRI socket answers, RELOADING=1 around
//! a reload, STOPPING=1 on SIGTERM), configuration drop-ins, and SIGHUP reloads: what may change
//! live changes (log format, registry mirrors, the CNI configuration directory), what needs a
//! restart is named and kept pending, a bad file keeps the running configuration, and `crust
//! config dump` tells each of these with where the values came from.

mod common;

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::Daemon;
use common::oci_build::{Comp, image, tar};
use common::registry::{Auth, Registry};
use common::workload::test_image_layer;
use crust::cri::pb;
use serde_json::json;

/// The service manager's end: datagrams as the daemon sends them.
struct Manager(UnixDatagram, std::path::PathBuf);

impl Manager {
    fn bind(dir: &Path) -> Manager {
        let path = dir.join("notify.sock");
        let s = UnixDatagram::bind(&path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        Manager(s, path)
    }

    /// The next message; panics after a minute without one.
    fn next(&self, d: &Daemon) -> String {
        let mut buf = [0u8; 4096];
        let n = self
            .0
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("no message from crust ({e}); log:\n{}", d.log()));
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }
}

fn hangup(d: &Daemon) {
    let pid = d.child.as_ref().unwrap().id() as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGHUP).unwrap();
}

fn dump(d: &Daemon, extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_crust"))
        .args(["config", "dump", "--config"])
        .arg(&d.config)
        .arg("--state")
        .arg(&d.state)
        .arg("--root")
        .arg(&d.root)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "crust config dump: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The line of `text` that sets `key` (`key = ...`).
fn line<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(&format!("{key} = ")))
        .unwrap_or_else(|| panic!("no {key} in:\n{text}"))
}

async fn network_ready(d: &Daemon) -> bool {
    let status = d
        .client()
        .await
        .status(pb::StatusRequest { verbose: false })
        .await
        .unwrap()
        .into_inner();
    status
        .status
        .unwrap()
        .conditions
        .iter()
        .any(|c| c.r#type == "NetworkReady" && c.status)
}

async fn pull(d: &Daemon, image: &str) -> Result<String, tonic::Status> {
    d.images()
        .await
        .pull_image(common::pull_request(image))
        .await
        .map(|r| r.into_inner().image_ref)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_service_manager_is_told_readiness_and_sighup_reloads_what_may_change_live() {
    let reg = Registry::start(Auth::None);
    let img = image(
        &[(tar(&test_image_layer()), Comp::Gzip)],
        json!({"Env": ["PATH=/bin"], "Cmd": ["sh"]}),
        "amd64",
    );
    reg.push("app", "1", &img).await;
    // No CNI configuration in the daemon's conf dir yet: the network is not ready.
    let mut d = Daemon::prepare();
    let manager = Manager::bind(&d.dir);
    let notify = manager.1.display().to_string();
    d.launch_unwaited(&[("NOTIFY_SOCKET", &notify)]);
    let ready = manager.next(&d);
    assert!(ready.starts_with("READY=1\n"), "{ready:?}");
    assert!(ready.contains("STATUS=serving CRI on"), "{ready:?}");
    assert!(d.serving(), "READY=1 came before the CRI socket answered");
    d.wait_serving();
    assert!(!network_ready(&d).await);
    let mirrored = "mirror-only.example/app:1";
    assert!(pull(&d, mirrored).await.is_err());

    // A drop-in: live keys (the log format, a mirror, the CNI conf dir) and one that needs a
    // restart (the default cgroup parent).
    let net2 = d.dir.join("net2.d");
    std::fs::create_dir_all(&net2).unwrap();
    let conf_dir = std::mem::replace(&mut d.cni_conf, net2.clone());
    d.write_bridge_network(&[]);
    d.cni_conf = conf_dir;
    let drop_ins = d.dir.join("config.d");
    std::fs::create_dir_all(&drop_ins).unwrap();
    let live = drop_ins.join("50-live.toml");
    std::fs::write(
        &live,
        format!(
            "log_format = \"json\"\ndefault_cgroup_parent = \"/crust-it-elsewhere\"\n\
             [network]\nconf_dir = {net2:?}\n\
             [registry.mirrors.\"mirror-only.example\"]\nendpoints = [\"http://{}\"]\n",
            reg.addr
        ),
    )
    .unwrap();
    let lines_before = d.log().lines().count();
    hangup(&d);
    let reloading = manager.next(&d);
    assert!(
        reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="),
        "{reloading:?}"
    );
    let usec: u64 = reloading
        .lines()
        .find_map(|l| l.strip_prefix("MONOTONIC_USEC="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(usec > 0);
    let done = manager.next(&d);
    assert!(
        done.starts_with("READY=1\n") && done.contains("reloaded"),
        "{done:?}"
    );
    // Live: the mirror is used, the network is ready, the log is JSON from the reload on.
    assert_eq!(pull(&d, mirrored).await.unwrap(), img.id());
    assert!(network_ready(&d).await);
    let log = d.log();
    let after: Vec<&str> = log.lines().skip(lines_before).collect();
    assert!(
        after
            .iter()
            .any(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()),
        "no JSON log line after the reload:\n{}",
        after.join("\n")
    );
    // Not live: named in a warning, the running value kept, shown pending by the dump.
    assert!(
        after.iter().any(|l| l.contains("default_cgroup_parent")
            && l.contains("needs a restart")
            && l.contains("50-live.toml")),
        "{}",
        after.join("\n")
    );
    let shown = dump(&d, &[]);
    assert!(shown.contains("running crust (pid"), "{shown}");
    let live_name = live.display().to_string();
    assert!(
        line(&shown, "log_format").ends_with(&format!("# {live_name}")),
        "{shown}"
    );
    assert!(
        line(&shown, "default_cgroup_parent").contains("\"/crust-it-"),
        "{shown}"
    );
    assert!(
        !line(&shown, "default_cgroup_parent").contains("elsewhere"),
        "the running value: {shown}"
    );
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("# Waits for a restart") && l.contains("default_cgroup_parent")),
        "{shown}"
    );
    assert!(
        line(&shown, "log_level").ends_with("# flag --log-level"),
        "{shown}"
    );
    // What the files alone give shows the new value.
    let files = dump(&d, &["--files"]);
    assert!(
        line(&files, "default_cgroup_parent").contains("elsewhere"),
        "{files}"
    );

    // A bad drop-in: the reload changes nothing and says why; the daemon serves on.
    let bad = drop_ins.join("60-bad.toml");
    std::fs::write(&bad, "log_format = \"yaml\"\n").unwrap();
    let lines_before = d.log().lines().count();
    hangup(&d);
    assert!(manager.next(&d).starts_with("RELOADING=1"));
    let done = manager.next(&d);
    assert!(
        done.contains("the last reload failed") && done.contains("60-bad.toml"),
        "{done:?}"
    );
    let log = d.log();
    assert!(
        log.lines()
            .skip(lines_before)
            .any(|l| l.contains("reload failed") && l.contains("60-bad.toml")),
        "{log}"
    );
    let shown = dump(&d, &[]);
    assert!(
        shown
            .lines()
            .any(|l| l.contains("failed; it runs on as before") && l.contains("60-bad.toml")),
        "{shown}"
    );
    assert!(
        line(&shown, "log_format").starts_with("log_format = \"json\""),
        "{shown}"
    );
    assert!(network_ready(&d).await && pull(&d, mirrored).await.is_ok());
    std::fs::remove_file(&bad).unwrap();

    // SIGTERM: STOPPING=1, then the daemon exits.
    let pid = d.child.as_ref().unwrap().id() as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGTERM).unwrap();
    let stopping = manager.next(&d);
    assert!(stopping.starts_with("STOPPING=1\n"), "{stopping:?}");
    let status = d.child.take().unwrap().wait().unwrap();
    assert!(status.success(), "{status}");
    // Not running: the dump is what the files give.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let shown = dump(&d, &[]);
        if shown.starts_with("# crust is not running") {
            break;
        }
        assert!(Instant::now() < deadline, "{shown}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
