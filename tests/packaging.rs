//! How crust is installed on a node: the systemd unit's directives (what each one guarantees an
//! operator: readiness, workloads surviving a restart, OOM protection, reloads), and the Debian
//! package `make deb` builds (its files, conffile, dependencies and maintainer scripts), read
//! back with dpkg-deb. Installing it, restarting, upgrading and removing it under systemd is
//! `tests/package_install.rs`, run in the systemd guest by hack/cgroupv2-tests.sh.

use std::collections::BTreeMap;
use std::path::Path;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The unit's directives by section, each with its values in order.
fn unit() -> BTreeMap<String, Vec<(String, String)>> {
    let text = std::fs::read_to_string(repo().join("packaging/crust.service")).unwrap();
    let mut out: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    let mut section = String::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_owned();
            continue;
        }
        let (k, v) = line.split_once('=').expect("a directive is key=value");
        out.entry(section.clone())
            .or_default()
            .push((k.to_owned(), v.to_owned()));
    }
    out
}

fn directive<'a>(
    u: &'a BTreeMap<String, Vec<(String, String)>>,
    section: &str,
    key: &str,
) -> Vec<&'a str> {
    u.get(section)
        .into_iter()
        .flatten()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .collect()
}

#[test]
fn the_unit_keeps_workloads_across_restarts_and_tells_systemd_when_it_serves() {
    let u = unit();
    let one = |section: &str, key: &str| {
        let v = directive(&u, section, key);
        assert_eq!(v.len(), 1, "[{section}] {key}: {v:?}");
        v[0].to_owned()
    };
    // Readiness through sd_notify: `systemctl start` returns once the socket serves.
    assert_eq!(one("Service", "Type"), "notify");
    assert_eq!(one("Service", "ExecStart"), "/usr/bin/crust serve");
    assert_eq!(one("Service", "ExecReload"), "/bin/kill -HUP $MAINPID");
    // Restarting or upgrading crust kills crust alone, never the monitors and containers.
    assert_eq!(one("Service", "KillMode"), "process");
    assert_eq!(one("Service", "Delegate"), "yes");
    assert_eq!(one("Service", "OOMScoreAdjust"), "-999");
    assert_eq!(one("Service", "TasksMax"), "infinity");
    assert_eq!(one("Service", "Restart"), "always");
    // overlay loaded first, a failure to load it not fatal (the "-").
    assert_eq!(one("Service", "ExecStartPre"), "-/sbin/modprobe overlay");
    assert!(
        one("Unit", "Before")
            .split_whitespace()
            .any(|u| u == "kubelet.service")
    );
    assert_eq!(one("Install", "WantedBy"), "multi-user.target");
    // Every directive is explained by a comment above it.
    let text = std::fs::read_to_string(repo().join("packaging/crust.service")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        let explained = [
            "Description=",
            "Documentation=",
            "WantedBy=",
            "RestartSec=",
            "LimitNPROC=",
            "LimitCORE=",
        ];
        if l.contains('=') && !l.starts_with('#') && !explained.iter().any(|e| l.starts_with(e)) {
            assert!(
                lines[..i].last().is_some_and(|p| p.starts_with('#')),
                "no comment explains {l:?}"
            );
        }
    }
}

fn dpkg_deb(args: &[&str], deb: &Path) -> String {
    let out = std::process::Command::new("dpkg-deb")
        .args(args)
        .arg(deb)
        .output()
        .expect("dpkg-deb runs (Debian's dpkg)");
    assert!(
        out.status.success(),
        "dpkg-deb {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `make deb`'s script, on the binary this test run built: the files a node gets, the default
/// configuration as the one conffile, the dependencies on the packages crust runs, and
/// maintainer scripts that parse.
#[test]
fn the_debian_package_holds_the_service_its_configuration_and_its_dependencies() {
    let out = tempfile::tempdir().unwrap();
    let built = std::process::Command::new(repo().join("hack/deb.sh"))
        .args([
            "--binary",
            env!("CARGO_BIN_EXE_crust"),
            "--version",
            "0.1.0~test1",
            "--out",
        ])
        .arg(out.path())
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "hack/deb.sh: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let deb = out.path().join("crust_0.1.0~test1_amd64.deb");
    assert_eq!(
        String::from_utf8_lossy(&built.stdout).trim(),
        deb.display().to_string()
    );
    let field = |name: &str| {
        dpkg_deb(&["--field"], &deb)
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")).map(str::to_owned))
            .unwrap_or_default()
    };
    assert_eq!(field("Package"), "crust");
    assert_eq!(field("Version"), "0.1.0~test1");
    assert_eq!(field("Architecture"), "amd64");
    let depends = field("Depends");
    for dep in [
        "containernetworking-plugins",
        "iptables",
        "libc6",
        "libseccomp2",
    ] {
        assert!(depends.split(", ").any(|d| d.starts_with(dep)), "{depends}");
    }
    let files = dpkg_deb(&["--contents"], &deb);
    for path in [
        "./usr/bin/crust",
        "./lib/systemd/system/crust.service",
        "./etc/crust/config.toml",
        "./etc/crust/config.d/",
        "./usr/share/crust/10-crust.conflist",
        "./usr/lib/tmpfiles.d/crust.conf",
        "./var/lib/crust/",
    ] {
        assert!(
            files.lines().any(|l| l.ends_with(&format!(" {path}"))),
            "{path} not in:\n{files}"
        );
    }
    assert!(files.lines().all(|l| l.contains(" root/root ")), "{files}");
    let x = tempfile::tempdir().unwrap();
    let tree = x.path().join("tree");
    let extracted = std::process::Command::new("dpkg-deb")
        .arg("--raw-extract")
        .arg(&deb)
        .arg(&tree)
        .status()
        .unwrap();
    assert!(extracted.success());
    assert_eq!(
        std::fs::read_to_string(tree.join("DEBIAN/conffiles")).unwrap(),
        "/etc/crust/config.toml\n"
    );
    assert_eq!(
        std::fs::read_to_string(tree.join("etc/crust/config.toml")).unwrap(),
        crust::config::DEFAULT_TOML,
        "the conffile is `crust config default`"
    );
    assert_eq!(
        std::fs::read(tree.join("lib/systemd/system/crust.service")).unwrap(),
        std::fs::read(repo().join("packaging/crust.service")).unwrap()
    );
    for script in ["postinst", "prerm", "postrm"] {
        let p = tree.join("DEBIAN").join(script);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o755,
            "{script}"
        );
        let ok = std::process::Command::new("sh")
            .arg("-n")
            .arg(&p)
            .status()
            .unwrap();
        assert!(ok.success(), "{script} does not parse");
    }
    // The packaged binary runs and is the one built.
    let v = std::process::Command::new(tree.join("usr/bin/crust"))
        .arg("version")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&v.stdout).trim(),
        format!("crust {}", env!("CARGO_PKG_VERSION"))
    );
}
