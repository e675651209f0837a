//! crust as an operator installs it: the Debian package on a node with systemd as PID 1. The
//! package is installed with `dpkg -i` (offline: its dependencies are on the node), crust
//! started by its postinst through systemctl, a pod with a container run through crictl, the
//! service restarted and the package upgraded to a higher version while the container keeps
//! running with the same pid, a drop-in applied by `systemctl reload` and seen in `crust config
//! dump`, then the package removed and purged.
//!
//! hack/cgroupv2-tests.sh builds the two packages on the host (hack/deb.sh on the test build's
//! binary, versions `<v>-1` and `<v>-2`) and runs this in its systemd guest, with
//! `CRUST_DEB_OLD`, `CRUST_DEB_NEW` and `CRUST_CRICTL` naming them and crictl. Ignored on the
//! host: it needs systemd as PID 1 and installs into the node's /usr and /etc.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::oci_build::{Comp, image, tar};
use common::registry::{Auth, Registry};
use common::workload::test_image_layer;
use serde_json::json;

const ENDPOINT: &str = "unix:///run/crust/crust.sock";
const UNIT: &str = "/lib/systemd/system/crust.service";

fn env_path(name: &str) -> PathBuf {
    let p = std::env::var_os(name)
        .unwrap_or_else(|| panic!("{name} is not set: hack/cgroupv2-tests.sh sets it"));
    let p = PathBuf::from(p);
    assert!(p.exists(), "{name}={} does not exist", p.display());
    p
}

/// Runs `cmd`; returns its stdout and its stderr, panicking with both when it fails.
fn run_both(cmd: &str, args: &[&str]) -> (String, String) {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed:\n{stdout}{stderr}"
    );
    (stdout, stderr)
}

/// Runs `cmd`; returns its stdout.
fn run(cmd: &str, args: &[&str]) -> String {
    run_both(cmd, args).0
}

/// Runs `cmd`; returns what it printed on either stream (maintainer scripts' messages).
fn run_said(cmd: &str, args: &[&str]) -> String {
    let (out, err) = run_both(cmd, args);
    out + &err
}

fn crictl(crictl: &Path, args: &[&str]) -> String {
    // A long timeout: in the emulated guest a RunPodSandbox takes seconds, not milliseconds.
    let mut all = vec![
        "--runtime-endpoint",
        ENDPOINT,
        "--image-endpoint",
        ENDPOINT,
        "--timeout",
        "120s",
    ];
    all.extend_from_slice(args);
    run(crictl.to_str().unwrap(), &all).trim().to_owned()
}

fn systemctl_show(property: &str) -> String {
    run(
        "systemctl",
        &["show", "-p", property, "--value", "crust.service"],
    )
    .trim()
    .to_owned()
}

fn main_pid() -> u32 {
    let pid: u32 = systemctl_show("MainPID").parse().unwrap();
    assert_ne!(pid, 0, "crust.service has no main process");
    pid
}

fn journal() -> String {
    Command::new("journalctl")
        .args(["-u", "crust.service", "--no-pager", "-n", "60"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// The unit is active and systemd took its readiness (Type=notify): `systemctl start`,
/// `restart` and the postinst return only then.
fn assert_active(when: &str) {
    let state = systemctl_show("ActiveState");
    assert_eq!(state, "active", "crust.service {when}:\n{}", journal());
}

/// The container's state and pid, as crust reports them.
fn container(crictl_bin: &Path, id: &str) -> (String, u64) {
    let v: serde_json::Value =
        serde_json::from_str(&crictl(crictl_bin, &["inspect", "-o", "json", id])).unwrap();
    let state = v["status"]["state"].as_str().unwrap_or_default().to_owned();
    let pid = v["info"]["pid"].as_u64().unwrap_or(0);
    (state, pid)
}

fn assert_still_running(crictl_bin: &Path, id: &str, pid: u64, after: &str) {
    let (state, now) = container(crictl_bin, id);
    assert_eq!(state, "CONTAINER_RUNNING", "after {after}");
    assert_eq!(now, pid, "the container's pid changed across {after}");
    assert!(
        Path::new(&format!("/proc/{pid}")).exists(),
        "the container's process {pid} is gone after {after}"
    );
}

fn package_version() -> String {
    run("dpkg-query", &["-W", "-f", "${Version}", "crust"])
}

fn deb_version(deb: &Path) -> String {
    run("dpkg-deb", &["-f", deb.to_str().unwrap(), "Version"])
        .trim()
        .to_owned()
}

/// Polls `cond` until it holds; panics with `what` after `within`.
fn wait_for(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test]
#[ignore = "needs systemd as PID 1 and installs into /usr and /etc: hack/cgroupv2-tests.sh runs it in its systemd guest"]
async fn the_package_installs_restarts_upgrades_reloads_and_removes_under_systemd() {
    common::daemon::require_root();
    assert!(
        Path::new("/run/systemd/system").is_dir(),
        "systemd is not PID 1 here"
    );
    let (old, new) = (env_path("CRUST_DEB_OLD"), env_path("CRUST_DEB_NEW"));
    let crictl_bin = env_path("CRUST_CRICTL");
    let (old_version, new_version) = (deb_version(&old), deb_version(&new));
    // A registry on this node: crust reaches it over plain HTTP with no mirror configured.
    let reg = Registry::start(Auth::None);
    let img = image(
        &[(tar(&test_image_layer()), Comp::Gzip)],
        json!({"Env": ["PATH=/bin"], "Cmd": ["sh"]}),
        "amd64",
    );
    reg.push("busybox", "1", &img).await;
    let image_ref = format!("{}/busybox:1", reg.addr);

    // Install: the postinst starts crust, and systemd saw it ready.
    let said = run_said("dpkg", &["-i", old.to_str().unwrap()]);
    assert_active("after dpkg -i");
    assert_eq!(package_version(), old_version);
    assert_eq!(
        std::fs::read(UNIT).unwrap(),
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/crust.service"))
            .unwrap(),
        "the installed unit is not the repository's"
    );
    // systemd's own check of the installed unit (its binaries exist now).
    run("systemd-analyze", &["verify", UNIT]);
    assert!(
        said.contains("installed the default CNI network") || has_cni_config(),
        "no CNI configuration after install:\n{said}"
    );
    assert_eq!(systemctl_show("UnitFileState"), "enabled");

    // A pod with a container, through crictl at crust's default socket.
    crictl(&crictl_bin, &["pull", &image_ref]);
    let dir = tempfile::tempdir().unwrap();
    let pod_json = dir.path().join("pod.json");
    let ctr_json = dir.path().join("ctr.json");
    std::fs::write(
        &pod_json,
        json!({"metadata": {"name": "pkg", "namespace": "crust-test", "uid": "pkg-uid"},
               "log_directory": dir.path().join("logs").to_str().unwrap()})
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        &ctr_json,
        json!({"metadata": {"name": "sleeper"}, "image": {"image": image_ref},
               "command": ["sleep", "3600"], "log_path": "sleeper.log"})
        .to_string(),
    )
    .unwrap();
    let (p, c) = (pod_json.to_str().unwrap(), ctr_json.to_str().unwrap());
    let pod = crictl(&crictl_bin, &["runp", p]);
    let ctr = crictl(&crictl_bin, &["create", &pod, c, p]);
    crictl(&crictl_bin, &["start", &ctr]);
    let (state, pid) = container(&crictl_bin, &ctr);
    assert_eq!(state, "CONTAINER_RUNNING");
    assert!(pid > 0);

    // A restart replaces crust alone (KillMode=process): the container keeps its process.
    let first = main_pid();
    run("systemctl", &["restart", "crust.service"]);
    assert_active("after systemctl restart");
    assert_ne!(main_pid(), first, "systemctl restart did not replace crust");
    assert_still_running(&crictl_bin, &ctr, pid, "systemctl restart");

    // An upgrade: the new package's postinst restarts crust on the new binary.
    let before = main_pid();
    run("dpkg", &["-i", new.to_str().unwrap()]);
    assert_active("after the upgrade");
    assert_eq!(package_version(), new_version);
    assert_ne!(main_pid(), before, "the upgrade did not restart crust");
    assert_still_running(&crictl_bin, &ctr, pid, "the upgrade");

    // A drop-in, applied live by `systemctl reload` (SIGHUP) and shown with its file.
    let drop_in = "/etc/crust/config.d/50-test.toml";
    std::fs::write(drop_in, "log_level = \"debug\"\n").unwrap();
    let serving = main_pid();
    run("systemctl", &["reload", "crust.service"]);
    let want = "log_level = \"debug\"";
    wait_for(
        "the drop-in in crust config dump",
        Duration::from_secs(60),
        || {
            let dump = run("crust", &["config", "dump"]);
            dump.lines()
                .any(|l| l.starts_with(want) && l.ends_with(&format!("# {drop_in}")))
        },
    );
    assert_eq!(main_pid(), serving, "a reload must not restart crust");
    assert_active("after systemctl reload");
    assert_still_running(&crictl_bin, &ctr, pid, "the reload");

    // The workload goes through crust, then the package: removal stops crust, purge takes
    // the configuration and says what it keeps.
    crictl(&crictl_bin, &["stop", "--timeout", "0", &ctr]);
    crictl(&crictl_bin, &["rm", &ctr]);
    crictl(&crictl_bin, &["stopp", &pod]);
    crictl(&crictl_bin, &["rmp", &pod]);
    wait_for(
        "the container's process to end",
        Duration::from_secs(30),
        || !Path::new(&format!("/proc/{pid}")).exists(),
    );
    run("dpkg", &["-r", "crust"]);
    assert_ne!(
        systemctl_show("ActiveState"),
        "active",
        "crust runs after dpkg -r"
    );
    assert!(!Path::new("/usr/bin/crust").exists());
    assert!(
        Path::new("/etc/crust/config.toml").exists(),
        "a removal keeps the conffile"
    );
    let said = run_said("dpkg", &["--purge", "crust"]);
    assert!(!Path::new("/etc/crust").exists(), "purge left /etc/crust");
    assert!(
        said.contains("kept /var/lib/crust"),
        "purge does not say it keeps the image store:\n{said}"
    );
    assert!(Path::new("/var/lib/crust").is_dir());
}

fn has_cni_config() -> bool {
    std::fs::read_dir("/etc/cni/net.d").is_ok_and(|d| {
        d.flatten().any(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.ends_with(".conflist") || n.ends_with(".conf") || n.ends_with(".json")
        })
    })
}
