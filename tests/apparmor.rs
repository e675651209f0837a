//! AppArmor as the host has it. Where the kernel enforces it (the cgroup v2 guest of
//! `hack/cgroupv2-tests.sh`): crust loads its `crust-default` profile and gives it to
//! containers asking for RuntimeDefault or nothing, and to their execs; privileged and
//! Unconfined containers keep the runtime's label; Localhost profiles are the node's by name,
//! in the structured and the deprecated form, and one not loaded fails CreateContainer
//! naming it; a `crust-default` the kernel lost is loaded again, and one an operator loaded
//! is used as it is. Where AppArmor is off (this host): RuntimeDefault is no profile, and a
//! Localhost profile fails CreateContainer saying AppArmor is off, as containerd does.

mod common;

use std::process::Command;

use common::workload::Env;
use crust::cri::pb;

fn apparmor_enabled() -> bool {
    std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
        .is_ok_and(|v| v.starts_with('Y'))
}

/// A container running sleep with the AppArmor profile given (structured field, deprecated
/// string field), privileged if asked.
fn confined(
    e: &Env,
    name: &str,
    profile: Option<pb::SecurityProfile>,
    deprecated: &str,
    privileged: bool,
) -> pb::ContainerConfig {
    let mut config = e.config(name, &["sleep", "600"]);
    let sc = config
        .linux
        .get_or_insert_with(Default::default)
        .security_context
        .get_or_insert_with(Default::default);
    sc.apparmor = profile;
    #[allow(deprecated)]
    {
        sc.apparmor_profile = deprecated.into();
    }
    sc.privileged = privileged;
    config
}

fn profile(t: pb::security_profile::ProfileType, name: &str) -> Option<pb::SecurityProfile> {
    Some(pb::SecurityProfile {
        profile_type: t as i32,
        localhost_ref: name.into(),
    })
}

use pb::security_profile::ProfileType::{Localhost, RuntimeDefault, Unconfined};

/// The label of the container's process and of an exec in it.
async fn labels(e: &mut Env, id: &str) -> (String, String) {
    let init = e.sh(id, "cat /proc/1/attr/current").await;
    let exec = e.sh(id, "cat /proc/self/attr/current").await;
    let clean = |s: String| s.trim_end_matches(['\n', '\0']).to_owned();
    (clean(init), clean(exec))
}

fn parser(args: &[&str], file: &std::path::Path) {
    let out = Command::new("apparmor_parser")
        .args(args)
        .arg(file)
        .output()
        .expect("apparmor_parser runs (the apparmor package)");
    assert!(
        out.status.success(),
        "apparmor_parser {args:?} {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn loaded(name: &str) -> Option<String> {
    let list = std::fs::read_to_string("/sys/kernel/security/apparmor/profiles").unwrap();
    list.lines()
        .find(|l| l.strip_prefix(name).is_some_and(|r| r.starts_with(" (")))
        .map(str::to_owned)
}

fn check_line(e: &Env) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_crust"))
        .arg("check")
        .arg("--config")
        .arg(&e.d.config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find(|l| l.contains(" apparmor "))
        .unwrap_or_else(|| panic!("no apparmor line in crust check: {text}"))
        .to_owned()
}

#[tokio::test]
async fn apparmor_profiles_as_the_host_has_them() {
    let mut e = Env::start().await;
    let pod = e.pod("apparmor").await;
    if apparmor_enabled() {
        enforced(&mut e, &pod).await;
    } else {
        absent(&mut e, &pod).await;
    }
    common::stop_pod(&mut e.c, &pod.0).await;
    common::remove_pod(&mut e.c, &pod.0).await;
}

async fn absent(e: &mut Env, pod: &(String, pb::PodSandboxConfig)) {
    assert!(
        check_line(e).starts_with("ok    apparmor    AppArmor is not enabled on this host"),
        "{}",
        check_line(e)
    );
    for (name, structured, deprecated) in [
        ("local", profile(Localhost, "localhost/my-profile"), ""),
        ("local-old", None, "localhost/my-profile"),
    ] {
        let err = e
            .create(pod, confined(e, name, structured, deprecated, false))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err}");
        assert!(
            err.message()
                .contains("apparmor is not enabled on this host")
                && err.message().contains("my-profile"),
            "{err}"
        );
    }
    for (name, structured, deprecated) in [
        ("default", profile(RuntimeDefault, ""), ""),
        ("default-old", None, "runtime/default"),
        ("unset", None, ""),
    ] {
        let id = e
            .run(pod, confined(e, name, structured, deprecated, false))
            .await;
        assert_eq!(e.sh(&id, "echo up").await, "up\n", "{name}");
    }
}

async fn enforced(e: &mut Env, pod: &(String, pb::PodSandboxConfig)) {
    assert!(
        loaded("crust-default").is_some(),
        "crust serve loads it at start"
    );
    assert_eq!(
        check_line(e),
        "ok    apparmor    AppArmor on; crust's profile crust-default is loaded (RuntimeDefault)"
    );
    let enforce = (
        "crust-default (enforce)".to_owned(),
        "crust-default (enforce)".to_owned(),
    );
    for (name, structured, deprecated, privileged, want) in [
        ("unset", None, "", false, enforce.clone()),
        (
            "default",
            profile(RuntimeDefault, ""),
            "",
            false,
            enforce.clone(),
        ),
        (
            "default-old",
            None,
            "runtime/default",
            false,
            enforce.clone(),
        ),
        (
            "unconfined",
            profile(Unconfined, ""),
            "",
            false,
            unconfined(),
        ),
        ("privileged", None, "", true, unconfined()),
    ] {
        let id = e
            .run(pod, confined(e, name, structured, deprecated, privileged))
            .await;
        assert_eq!(labels(e, &id).await, want, "{name}");
    }

    // A node's profile, by name, in both forms: it holds for the exec too.
    let deny = e.d.dir.join("crust-test-deny-write");
    std::fs::write(
        &deny,
        "#include <tunables/global>\nprofile crust-test-deny-write flags=(attach_disconnected) {\n  \
         #include <abstractions/base>\n  file,\n  deny /** w,\n}\n",
    )
    .unwrap();
    parser(&["-r", "-W"], &deny);
    for (name, structured, deprecated) in [
        (
            "local",
            profile(Localhost, "localhost/crust-test-deny-write"),
            "",
        ),
        ("local-old", None, "localhost/crust-test-deny-write"),
        // The structured field wins, as critest's "prefer new apparmor field" wants.
        (
            "local-both",
            profile(Localhost, "crust-test-deny-write"),
            "localhost/missing",
        ),
    ] {
        let id = e
            .run(pod, confined(e, name, structured, deprecated, false))
            .await;
        let want = "crust-test-deny-write (enforce)".to_owned();
        assert_eq!(labels(e, &id).await, (want.clone(), want), "{name}");
        let r = e.exec(&id, &["touch", "/tmp/blocked"]).await;
        assert_ne!(
            r.exit_code, 0,
            "{name}: the profile denies writes to the exec"
        );
    }
    let err = e
        .create(
            pod,
            confined(
                e,
                "missing",
                profile(Localhost, "localhost/crust-test-missing"),
                "",
                false,
            ),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    assert!(
        err.message()
            .contains("\"crust-test-missing\" is not loaded"),
        "{err}"
    );
    parser(&["-R"], &deny);

    // Lost by the kernel: loaded again for the next container that needs it.
    let own = e.d.state.join("apparmor/crust-default");
    parser(&["-R"], &own);
    assert_eq!(loaded("crust-default"), None);
    let id = e.run(pod, confined(e, "reloaded", None, "", false)).await;
    assert_eq!(labels(e, &id).await, enforce);

    // An operator's own crust-default is used as it is (here: in complain mode).
    let theirs = e.d.dir.join("operator-crust-default");
    std::fs::write(
        &theirs,
        "#include <tunables/global>\nprofile crust-default flags=(attach_disconnected,mediate_deleted,complain) {\n  \
         #include <abstractions/base>\n  file,\n  network,\n  capability,\n}\n",
    )
    .unwrap();
    parser(&["-r", "-W"], &theirs);
    let id = e.run(pod, confined(e, "operator", None, "", false)).await;
    let complain = "crust-default (complain)".to_owned();
    assert_eq!(labels(e, &id).await, (complain.clone(), complain));
    // Back to crust's own for what runs after this test.
    parser(&["-r", "-W"], &own);
}

fn unconfined() -> (String, String) {
    ("unconfined".into(), "unconfined".into())
}
