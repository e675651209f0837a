//! CDI devices, as device plugins and DRA drivers hand them out: spec files written by the test
//! into the daemon's own spec directories (`cdi_spec_dirs`), requested through
//! `ContainerConfig.CDI_devices` and `cdi.k8s.io/*` annotations, and every edit seen from
//! inside the container (device node, its owner and its device cgroup rule, mount, env,
//! additional GIDs) and on the host (the OCI hooks libcontainer runs, and the poststop hooks crust
//! runs itself, each leaving a mark).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::workload::Env;
use common::*;
use crust::cri::pb;
use tonic::Code;

/// The daemon's CDI directories (static, then dynamic: the later wins) and a place for the
/// host side of the devices: nodes, a directory to mount, the hook script and its marks.
struct Cdi {
    statics: PathBuf,
    dynamic: PathBuf,
    host: PathBuf,
    marks: PathBuf,
}

impl Cdi {
    fn new(dir: &Path) -> Cdi {
        let cdi = Cdi {
            statics: dir.join("cdi/etc"),
            dynamic: dir.join("cdi/run"),
            host: dir.join("cdi/host"),
            marks: dir.join("cdi/marks"),
        };
        for d in [&cdi.statics, &cdi.dynamic, &cdi.host, &cdi.marks] {
            std::fs::create_dir_all(d).unwrap();
        }
        cdi
    }

    /// An Env whose daemon reads CDI specs from this test's directories only.
    async fn env() -> (Env, Cdi) {
        let mut cdi = None;
        let e = Env::start_with(|d| {
            let c = Cdi::new(&d.dir);
            // A top-level key goes before the config's first table.
            let text = std::fs::read_to_string(&d.config).unwrap();
            let dirs = format!("cdi_spec_dirs = [{:?}, {:?}]\n", c.statics, c.dynamic);
            std::fs::write(&d.config, dirs + &text).unwrap();
            cdi = Some(c);
        })
        .await;
        (e, cdi.unwrap())
    }

    /// A character device node made here (`mknod`), like the ones a driver makes.
    fn node(&self, name: &str, major: u32, minor: u32) -> PathBuf {
        let path = self.host.join(name);
        sh(
            "mknod",
            &[
                "-m",
                "0666",
                path.to_str().unwrap(),
                "c",
                &major.to_string(),
                &minor.to_string(),
            ],
        );
        path
    }

    /// A hook that records how it ran: the OCI state on its stdin, and its mount namespace.
    fn hook(&self) -> PathBuf {
        let path = self.host.join("hook.sh");
        let script = format!(
            "#!/bin/sh\nset -eu\ncat > {m}/\"$1\".state\nreadlink /proc/self/ns/mnt > {m}/\"$1\".mnt\n",
            m = self.marks.display()
        );
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn mark(&self, hook: &str, what: &str) -> Option<String> {
        std::fs::read_to_string(self.marks.join(format!("{hook}.{what}"))).ok()
    }
}

fn with_cdi(mut config: pb::ContainerConfig, names: &[&str]) -> pb::ContainerConfig {
    config.cdi_devices = names
        .iter()
        .map(|n| pb::CdiDevice {
            name: n.to_string(),
        })
        .collect();
    config
}

/// Waits until `check` answers, for at most 10 s.
async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not happen within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn every_edit_of_a_cdi_device_reaches_the_container() {
    let (mut e, cdi) = Cdi::env().await;
    // 10:229 is FUSE and 10:237 loop-control: openable without a capability, and not in the
    // device cgroup's default list, so opening them works only through the rules CDI adds.
    let fuse = cdi.node("fuse0", 10, 229);
    let loop_control = cdi.node("loopctl", 10, 237);
    let null_node = cdi.node("null0", 1, 3);
    let lib = cdi.host.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(lib.join("marker"), "from the vendor").unwrap();
    let hook = cdi.hook();
    let spec = serde_json::json!({
        "cdiVersion": "0.7.0",
        "kind": "crust.test/net",
        "containerEdits": {
            "env": ["VENDOR=crust.test"],
            "mounts": [{"hostPath": lib, "containerPath": "/opt/vendor", "options": ["ro", "bind"]}],
            "hooks": [
                {"hookName": "createRuntime", "path": hook, "args": ["hook.sh", "createRuntime"],
                 "env": ["PATH=/usr/bin:/bin"]},
                {"hookName": "createContainer", "path": hook, "args": ["hook.sh", "createContainer"],
                 "env": ["PATH=/usr/bin:/bin"]},
                {"hookName": "poststart", "path": hook, "args": ["hook.sh", "poststart"],
                 "env": ["PATH=/usr/bin:/bin"]},
                {"hookName": "poststop", "path": hook, "args": ["hook.sh", "poststop"],
                 "env": ["PATH=/usr/bin:/bin"]},
                {"hookName": "startContainer", "path": "/bin/sh",
                 "args": ["sh", "-c", "echo started > /tmp/start-mark"]}
            ]
        },
        "devices": [
            {"name": "fuse0", "containerEdits": {
                "env": ["FUSE=fuse0"],
                "deviceNodes": [
                    {"path": "/dev/vendor/fuse0", "hostPath": fuse, "permissions": "rw",
                     "uid": 1234, "gid": 5678, "fileMode": 0o600},
                    {"path": "/dev/vendor/loopctl", "hostPath": loop_control, "permissions": "r"}
                ],
                "additionalGids": [4321]
            }},
            {"name": "null0", "containerEdits": {
                "deviceNodes": [{"path": "/dev/vendor/null0", "hostPath": null_node}]
            }}
        ]
    });
    let file = cdi.statics.join("crust-test-net.json");
    std::fs::write(&file, serde_json::to_vec(&spec).unwrap()).unwrap();

    let pod = e.pod("cdi").await;
    let config = with_cdi(
        e.config("gpu", &["sleep", "600"]),
        &[
            "crust.test/net=fuse0",
            "crust.test/net=null0",
            "crust.test/net=fuse0",
        ],
    );
    let id = e.run(&pod, config).await;

    let env = e.sh(&id, "cat /proc/1/environ | tr '\\0' '\\n'").await;
    for var in ["VENDOR=crust.test", "FUSE=fuse0", "PATH=/bin"] {
        assert!(env.lines().any(|l| l == var), "{var} in {env}");
    }
    assert_eq!(e.sh(&id, "cat /opt/vendor/marker").await, "from the vendor");
    assert!(
        e.sh(&id, "touch /opt/vendor/x 2>&1 || echo refused")
            .await
            .contains("refused"),
        "the mount is read-only"
    );
    // The node: type, numbers (hex), owner and mode as the spec says.
    assert_eq!(
        e.sh(&id, "stat -c '%F %t:%T %u:%g %a' /dev/vendor/fuse0")
            .await
            .trim(),
        "character special file a:e5 1234:5678 600"
    );
    assert_eq!(
        e.sh(&id, "stat -c '%t:%T %a' /dev/vendor/null0")
            .await
            .trim(),
        "1:3 666",
        "type, numbers and mode read from the host node"
    );
    assert!(
        e.sh(&id, "grep Groups /proc/1/status")
            .await
            .contains("4321")
    );
    // The device cgroup lets the container open the nodes, with the spec's access only.
    assert_eq!(
        e.sh(&id, "exec 3<>/dev/vendor/fuse0 && echo opened")
            .await
            .trim(),
        "opened"
    );
    assert_eq!(
        e.sh(&id, "exec 3</dev/vendor/loopctl && echo read")
            .await
            .trim(),
        "read"
    );
    let write = e
        .sh(&id, "(exec 3>/dev/vendor/loopctl) 2>&1 || echo refused")
        .await;
    assert!(write.contains("Operation not permitted"), "{write}");
    let info = e.info(&id).await;
    let cgroup = info["cgroup"].as_str().unwrap().to_owned();
    if !Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        let list =
            std::fs::read_to_string(Daemon::cgroup_dir(&cgroup, "devices").join("devices.list"))
                .unwrap();
        assert!(list.lines().any(|l| l == "c 10:229 rw"), "{list}");
        assert!(list.lines().any(|l| l == "c 10:237 r"), "{list}");
        assert!(list.lines().any(|l| l == "c 1:3 rwm"), "{list}");
    }

    // The hooks ran where the OCI runtime spec puts them: createRuntime and poststart in the
    // runtime's mount namespace (the node's), createContainer in the container's.
    let pid = info["pid"].as_i64().unwrap() as i32;
    let host_mnt = ns_of_self("mnt");
    assert_eq!(cdi.mark("createRuntime", "mnt").unwrap().trim(), host_mnt);
    assert_eq!(cdi.mark("poststart", "mnt").unwrap().trim(), host_mnt);
    assert_eq!(
        cdi.mark("createContainer", "mnt").unwrap().trim(),
        ns_of(pid, "mnt")
    );
    let state: serde_json::Value =
        serde_json::from_str(&cdi.mark("createRuntime", "state").unwrap()).unwrap();
    assert_eq!(
        state["id"],
        id.as_str(),
        "the OCI state on the hook's stdin"
    );
    let started = eventually("the startContainer hook's mark", async || {
        let out = e.exec(&id, &["cat", "/tmp/start-mark"]).await;
        (out.exit_code == 0).then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    })
    .await;
    assert_eq!(started, "started\n");

    // crictl inspect: each device once, with the file it came from.
    assert_eq!(
        info["cdiDevices"],
        serde_json::json!([
            {"name": "crust.test/net=fuse0", "specFile": file},
            {"name": "crust.test/net=null0", "specFile": file},
        ])
    );
    assert_eq!(
        cdi.mark("poststop", "state"),
        None,
        "not before the removal"
    );
    e.stop(&id, 0).await;
    e.remove(&id).await;
    // poststop: once the container is gone, before RemoveContainer returns, in the node's
    // mount namespace, with the container's state.
    let state: serde_json::Value =
        serde_json::from_str(&cdi.mark("poststop", "state").unwrap()).unwrap();
    assert_eq!(
        (&state["id"], &state["status"]),
        (&id.as_str().into(), &"stopped".into())
    );
    assert_eq!(cdi.mark("poststop", "mnt").unwrap().trim(), host_mnt);
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
}

#[tokio::test]
async fn annotations_yaml_and_the_later_directory() {
    let (mut e, cdi) = Cdi::env().await;
    let yaml = |from: &str| {
        format!(
            "cdiVersion: \"0.6.0\"\nkind: crust.test/gpu\ndevices:\n  - name: \"0\"\n    containerEdits:\n      env: [\"FROM={from}\"]\n"
        )
    };
    std::fs::write(cdi.statics.join("gpu.yaml"), yaml("static")).unwrap();
    let pod = e.pod("cdi").await;

    // The annotation form of older device plugins, written after the daemon started.
    let mut config = e.config("annotated", &["sleep", "600"]);
    config
        .annotations
        .insert("cdi.k8s.io/test-plugin_0".into(), "crust.test/gpu=0".into());
    let id = e.run(&pod, config).await;
    assert!(e.sh(&id, "env").await.lines().any(|l| l == "FROM=static"));

    // A spec for the same device in the later directory wins, as soon as it is there.
    let dynamic = cdi.dynamic.join("gpu.yaml");
    std::fs::write(&dynamic, yaml("dynamic")).unwrap();
    let mut config = with_cdi(
        e.config("both-forms", &["sleep", "600"]),
        &["crust.test/gpu=0"],
    );
    config
        .annotations
        .insert("cdi.k8s.io/test-plugin_0".into(), "crust.test/gpu=0".into());
    let id = e.run(&pod, config).await;
    assert!(e.sh(&id, "env").await.lines().any(|l| l == "FROM=dynamic"));
    let info = e.info(&id).await;
    assert_eq!(
        info["cdiDevices"],
        serde_json::json!([{"name": "crust.test/gpu=0", "specFile": dynamic}]),
        "both forms, one device"
    );

    // crust check lists what the node offers, from the daemon's own directories.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_crust"))
        .args(["check", "--config"])
        .arg(&e.d.config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let at = text
        .find(" cdi ")
        .unwrap_or_else(|| panic!("no cdi line: {text}"));
    let cdi_lines: Vec<&str> = text[at..].lines().take(2).collect();
    assert!(cdi_lines[0].contains("1 CDI device in"), "{text}");
    assert_eq!(
        cdi_lines[1].trim(),
        format!("crust.test/gpu=0  ({})", dynamic.display())
    );
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
}

#[tokio::test]
async fn a_device_that_cannot_be_given_refuses_the_container_and_makes_nothing() {
    let (mut e, cdi) = Cdi::env().await;
    let good = |kind: &str, env: &str| {
        format!(
            "{{\"cdiVersion\":\"0.6.0\",\"kind\":\"{kind}\",\"devices\":[{{\"name\":\"a\",\"containerEdits\":{{\"env\":[\"{env}\"]}}}}]}}"
        )
    };
    std::fs::write(
        cdi.statics.join("twice-1.json"),
        good("crust.test/twice", "N=1"),
    )
    .unwrap();
    std::fs::write(
        cdi.statics.join("twice-2.json"),
        good("crust.test/twice", "N=2"),
    )
    .unwrap();
    std::fs::write(
        cdi.statics.join("broken.yaml"),
        "cdiVersion: \"0.6.0\"\nkind: crust.test/broken\ndevices: [ {name: a\n",
    )
    .unwrap();
    std::fs::write(
        cdi.statics.join("unknown-field.yaml"),
        "cdiVersion: \"0.6.0\"\nkind: crust.test/field\ndevices:\n- name: a\n  colour: red\n  containerEdits: {env: [A=1]}\n",
    )
    .unwrap();
    std::fs::write(
        cdi.statics.join("old.yaml"),
        "cdiVersion: \"0.5.0\"\nkind: crust.test/old\ndevices:\n- name: a\n  containerEdits: {additionalGids: [5]}\n",
    )
    .unwrap();
    std::fs::write(
        cdi.statics.join("fine.json"),
        good("crust.test/fine", "FINE=1"),
    )
    .unwrap();
    let pod = e.pod("cdi").await;
    let statics = cdi.statics.display().to_string();
    let cases: Vec<(&str, Code, Vec<String>)> = vec![
        (
            "crust.test/none=a",
            Code::InvalidArgument,
            vec![statics.clone(), cdi.dynamic.display().to_string()],
        ),
        (
            "crust.test/twice=a",
            Code::InvalidArgument,
            vec![
                format!("{statics}/twice-1.json"),
                format!("{statics}/twice-2.json"),
            ],
        ),
        (
            "crust.test/broken=a",
            Code::InvalidArgument,
            vec![format!("{statics}/broken.yaml")],
        ),
        (
            "crust.test/field=a",
            Code::InvalidArgument,
            vec![
                format!("{statics}/unknown-field.yaml"),
                "unknown field `colour`".into(),
            ],
        ),
        (
            "crust.test/old=a",
            Code::InvalidArgument,
            vec![
                format!("{statics}/old.yaml"),
                "0.5.0 is too low: additionalGids needs 0.7.0".into(),
            ],
        ),
        (
            "not-a-device",
            Code::InvalidArgument,
            vec!["vendor.com/class=name".into()],
        ),
    ];
    for (name, code, expected) in cases {
        // The good device beside it does not save the request.
        let config = with_cdi(
            e.config("refused", &["sleep", "600"]),
            &["crust.test/fine=a", name],
        );
        let status = e.create(&pod, config).await.unwrap_err();
        assert_eq!(status.code(), code, "{name}: {status:?}");
        let msg = status.message();
        assert!(
            msg.contains(&format!("{name:?}")),
            "names the device: {msg}"
        );
        for part in expected {
            assert!(msg.contains(&part), "{name}: {part} in {msg}");
        }
        let listed = e.listed().await;
        assert!(listed.is_empty(), "{name}: {listed:?}");
        assert_eq!(e.container_leftovers(), Vec::<String>::new(), "{name}");
    }
    // The name was not held either: the same container is created once its device is fine.
    let config = with_cdi(
        e.config("refused", &["sleep", "600"]),
        &["crust.test/fine=a"],
    );
    let id = e.run(&pod, config).await;
    assert!(e.sh(&id, "env").await.lines().any(|l| l == "FINE=1"));
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
}

/// A vendor may describe a device node in full (type, major, minor) for a node the host does
/// not have under that path: the container gets it made, without a host node, as the Go CDI
/// library that containerd and CRI-O use allows. A node without its numbers still needs one,
/// and the error names it.
#[tokio::test]
async fn a_device_node_given_in_full_is_made_without_a_host_node() {
    let (mut e, cdi) = Cdi::env().await;
    let absent = cdi.host.join("no-such-node");
    let spec = serde_json::json!({
        "cdiVersion": "0.6.0",
        "kind": "crust.test/full",
        "devices": [
            {"name": "fuse", "containerEdits": {"deviceNodes": [
                {"path": "/dev/vendor/fuse", "hostPath": absent, "type": "c",
                 "major": 10, "minor": 229}
            ]}},
            {"name": "bare", "containerEdits": {"deviceNodes": [
                {"path": "/dev/vendor/bare", "hostPath": absent, "type": "c"}
            ]}}
        ]
    });
    std::fs::write(
        cdi.statics.join("full.json"),
        serde_json::to_vec(&spec).unwrap(),
    )
    .unwrap();
    let pod = e.pod("cdi-full").await;
    let config = with_cdi(
        e.config("full", &["sleep", "600"]),
        &["crust.test/full=fuse"],
    );
    let id = e.run(&pod, config).await;
    // Type and numbers (hex) as the spec says, the runtime's default mode, and the device
    // cgroup lets the container open it.
    assert_eq!(
        e.sh(&id, "stat -c '%F %t:%T %a' /dev/vendor/fuse")
            .await
            .trim(),
        "character special file a:e5 666"
    );
    assert_eq!(
        e.sh(&id, "exec 3<>/dev/vendor/fuse && echo opened")
            .await
            .trim(),
        "opened"
    );

    let config = with_cdi(
        e.config("bare", &["sleep", "600"]),
        &["crust.test/full=bare"],
    );
    let status = e.create(&pod, config).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    let msg = status.message();
    for part in ["crust.test/full=bare", absent.to_str().unwrap()] {
        assert!(msg.contains(part), "{part} in {msg}");
    }
    stop_pod(&mut e.c, &pod.0).await;
    remove_pod(&mut e.c, &pod.0).await;
}
