//! A container's security settings, decided from its CRI security context and what the host
//! offers: capabilities, privileged mode, masked and read-only paths, seccomp, AppArmor,
//! SELinux and no_new_privileges. The result, [`Security`], feeds the process (capabilities,
//! labels, NNP) and `linux` (paths, seccomp) sections of the spec.
//!
//! Capabilities are decided in `capabilities.rs`. A privileged container gets every
//! capability, no masked or read-only paths, no seccomp and no AppArmor/SELinux confinement.
//!
//! The masked and read-only paths are the request's, and an empty list means none, as in
//! containerd (containerd#5029): kubelet sends its default lists for `procMount: Default` and
//! empty ones for `procMount: Unmasked`, whose pods (nested runtimes such as rootless BuildKit)
//! must be able to mount a procfs of their own, which the kernel refuses over a /proc with
//! anything mounted on it. The wire cannot tell an empty list from an absent one, so a client
//! that sends none (crictl) gets none, as from containerd.

use std::collections::HashSet;

use oci_spec::runtime::{Capability, LinuxCapabilities, LinuxSeccomp};

use crate::model::{Profile, SecurityContext, SelinuxOptions};

use super::capabilities::{capability_sets, limit_to};
use super::seccomp::SeccompProfile;
use super::seccomp_default::default_profile;
use super::{HostFeatures, SpecError};

/// The security half of a container's spec.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Security {
    pub privileged: bool,
    pub capabilities: LinuxCapabilities,
    /// libcontainer loads seccomp before dropping capabilities only when this is `None`, so
    /// it is `Some(true)` or `None`, never `Some(false)`.
    pub no_new_privileges: Option<bool>,
    pub apparmor_profile: Option<String>,
    pub selinux_label: Option<String>,
    pub mount_label: Option<String>,
    pub seccomp: Option<LinuxSeccomp>,
    pub masked_paths: Vec<String>,
    pub readonly_paths: Vec<String>,
}

/// Decides a container's security settings. `seccomp_localhost` is the parsed profile the
/// request's `Localhost` seccomp names.
pub(crate) fn security(
    sc: &SecurityContext,
    seccomp_localhost: Option<&SeccompProfile>,
    host: &HostFeatures,
) -> Result<Security, SpecError> {
    let (mut caps, ambient) = capability_sets(&sc.capabilities, sc.privileged)?;
    if let Some(available) = &host.available_caps {
        limit_to(&mut caps, available, &sc.capabilities)?;
    }
    let seccomp = if sc.privileged {
        None
    } else {
        seccomp(sc.seccomp.as_ref(), seccomp_localhost, &caps)?
    };
    let apparmor_profile = apparmor(sc.apparmor.as_ref(), sc.privileged, host)?;
    let (selinux_label, mount_label) = match &sc.selinux {
        Some(options) if host.selinux_enabled && !sc.privileged => selinux_labels(options),
        _ => (None, None),
    };
    let (masked_paths, readonly_paths) = if sc.privileged {
        (Vec::new(), Vec::new())
    } else {
        (sc.masked_paths.clone(), sc.readonly_paths.clone())
    };
    let mut capabilities = LinuxCapabilities::default();
    capabilities
        .set_bounding(Some(caps.clone()))
        .set_effective(Some(caps.clone()))
        .set_permitted(Some(caps))
        .set_inheritable(Some(ambient.clone()))
        .set_ambient(Some(ambient));
    Ok(Security {
        privileged: sc.privileged,
        capabilities,
        no_new_privileges: sc.no_new_privs.then_some(true),
        apparmor_profile,
        selinux_label,
        mount_label,
        seccomp,
        masked_paths,
        readonly_paths,
    })
}

fn seccomp(
    profile: Option<&Profile>,
    localhost: Option<&SeccompProfile>,
    caps: &HashSet<Capability>,
) -> Result<Option<LinuxSeccomp>, SpecError> {
    match profile {
        // containerd applies no filter when none is asked for: kubelet sends RuntimeDefault
        // explicitly when a pod wants it.
        None | Some(Profile::Unconfined) => Ok(None),
        Some(Profile::RuntimeDefault) => default_profile(caps).map(Some),
        Some(Profile::Localhost(path)) => localhost
            .map(|profile| Some(profile.resolve(caps)))
            .ok_or_else(|| {
                SpecError::Invalid(format!("seccomp: localhost profile {path} was not loaded"))
            }),
    }
}

fn apparmor(
    profile: Option<&Profile>,
    privileged: bool,
    host: &HostFeatures,
) -> Result<Option<String>, SpecError> {
    match profile {
        Some(Profile::Localhost(name)) => {
            let name = name.strip_prefix("localhost/").unwrap_or(name);
            if !host.apparmor_enabled {
                return Err(SpecError::HostLacks(format!(
                    "apparmor is not enabled on this host: cannot apply profile {name}"
                )));
            }
            Ok(Some(name.to_string()))
        }
        // libcontainer refuses any profile, even "unconfined", while AppArmor is off.
        _ if !host.apparmor_enabled => Ok(None),
        // As containerd: no profile, so the process keeps the label of the runtime that
        // starts it (unconfined, unless crust itself runs confined).
        Some(Profile::Unconfined) => Ok(None),
        // Like containerd, an unset profile means the runtime default, except when privileged.
        None | Some(Profile::RuntimeDefault) if privileged => Ok(None),
        None | Some(Profile::RuntimeDefault) => Ok(host.apparmor_default_profile.clone()),
    }
}

/// The process label `user:role:type:level` (the container defaults fill what the request
/// leaves empty) and the matching mount label.
fn selinux_labels(options: &SelinuxOptions) -> (Option<String>, Option<String>) {
    let or = |value: &str, default: &str| {
        if value.is_empty() {
            default.to_string()
        } else {
            value.to_string()
        }
    };
    let level = or(&options.level, "s0");
    let process = format!(
        "{}:{}:{}:{level}",
        or(&options.user, "system_u"),
        or(&options.role, "system_r"),
        or(&options.kind, "container_t"),
    );
    let mount = format!("system_u:object_r:container_file_t:{level}");
    (Some(process), Some(mount))
}

#[cfg(test)]
mod tests {
    use super::super::capabilities::{ALL_CAPABILITIES, DEFAULT_CAPABILITIES};
    use super::*;
    use crate::model::Capabilities;

    fn names(set: &HashSet<Capability>) -> Vec<&'static str> {
        let mut names: Vec<_> = ALL_CAPABILITIES
            .iter()
            .filter(|(_, cap)| set.contains(cap))
            .map(|(name, _)| *name)
            .collect();
        names.sort_unstable();
        names
    }

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn computes_capability_sets() {
        let default: Vec<&str> = {
            let set = DEFAULT_CAPABILITIES.iter().copied().collect();
            names(&set)
        };
        let with = |extra: &[&'static str]| {
            let mut v = default.clone();
            v.extend(extra);
            v.sort_unstable();
            v
        };
        let without = |gone: &[&'static str]| {
            default
                .iter()
                .copied()
                .filter(|c| !gone.contains(c))
                .collect::<Vec<_>>()
        };
        let all: Vec<&str> = {
            let mut v: Vec<_> = ALL_CAPABILITIES.iter().map(|(n, _)| *n).collect();
            v.sort_unstable();
            v
        };
        /// name, add, drop, add_ambient, privileged, expected set.
        struct Case<'a>(&'a str, Names, Names, Names, bool, Vec<&'a str>);
        type Names = &'static [&'static str];
        let table = vec![
            Case("defaults", &[], &[], &[], false, default.clone()),
            Case(
                "add without prefix",
                &["NET_ADMIN"],
                &[],
                &[],
                false,
                with(&["CAP_NET_ADMIN"]),
            ),
            Case(
                "add with prefix, any case",
                &["cap_sys_admin"],
                &[],
                &[],
                false,
                with(&["CAP_SYS_ADMIN"]),
            ),
            Case(
                "drop",
                &[],
                &["NET_RAW", "CAP_CHOWN"],
                &[],
                false,
                without(&["CAP_NET_RAW", "CAP_CHOWN"]),
            ),
            Case("add ALL", &["ALL"], &[], &[], false, all.clone()),
            Case("add ALL then drop one", &["ALL"], &["CHOWN"], &[], false, {
                all.iter().copied().filter(|c| *c != "CAP_CHOWN").collect()
            }),
            Case("drop ALL", &[], &["ALL"], &[], false, vec![]),
            Case(
                "drop ALL then add one",
                &["NET_ADMIN"],
                &["all"],
                &[],
                false,
                vec!["CAP_NET_ADMIN"],
            ),
            Case(
                "ambient implies add",
                &[],
                &["ALL"],
                &["NET_BIND_SERVICE"],
                false,
                vec!["CAP_NET_BIND_SERVICE"],
            ),
            Case(
                "privileged ignores drop",
                &[],
                &["ALL"],
                &[],
                true,
                all.clone(),
            ),
        ];
        for Case(name, add, drop, ambient, privileged, want) in table {
            let request = Capabilities {
                add: strings(add),
                drop: strings(drop),
                add_ambient: strings(ambient),
            };
            let (caps, amb) = capability_sets(&request, privileged).unwrap();
            assert_eq!(names(&caps), want, "{name}");
            assert_eq!(names(&amb).len(), ambient.len(), "{name}");
        }
    }

    #[test]
    fn refuses_unknown_capabilities() {
        let table = [
            (
                vec!["CAP_FOO"],
                vec![],
                vec![],
                "capabilities.add: unknown capability \"CAP_FOO\"",
            ),
            (
                vec![],
                vec!["BAR"],
                vec![],
                "capabilities.drop: unknown capability \"BAR\"",
            ),
            (
                vec![],
                vec![],
                vec!["X"],
                "capabilities.add_ambient: unknown capability \"X\"",
            ),
            (
                vec![],
                vec![],
                vec!["ALL"],
                "capabilities.add_ambient: ALL is not allowed",
            ),
        ];
        for (add, drop, ambient, want) in table {
            let request = Capabilities {
                add: strings(&add),
                drop: strings(&drop),
                add_ambient: strings(&ambient),
            };
            let err = capability_sets(&request, false).unwrap_err();
            assert_eq!(err.to_string(), want);
        }
    }

    #[test]
    fn process_capability_sets_follow_ambient() {
        let sc = SecurityContext {
            capabilities: Capabilities {
                add_ambient: strings(&["NET_ADMIN"]),
                ..Default::default()
            },
            ..Default::default()
        };
        let sec = security(&sc, None, &HostFeatures::default()).unwrap();
        let caps = &sec.capabilities;
        let ambient = caps.ambient().clone().unwrap();
        assert_eq!(names(&ambient), vec!["CAP_NET_ADMIN"]);
        assert_eq!(caps.inheritable(), &Some(ambient));
        assert!(
            caps.effective()
                .as_ref()
                .unwrap()
                .contains(&Capability::NetAdmin)
        );
        assert_eq!(caps.effective(), caps.bounding());
        assert_eq!(caps.effective(), caps.permitted());
    }

    #[test]
    fn only_capabilities_crust_holds_are_handed_out() {
        let available: HashSet<Capability> = DEFAULT_CAPABILITIES
            .iter()
            .copied()
            .chain([Capability::SysAdmin])
            .collect();
        let host = HostFeatures {
            available_caps: Some(available.clone()),
            ..Default::default()
        };
        let privileged = SecurityContext {
            privileged: true,
            ..Default::default()
        };
        let caps = security(&privileged, None, &host).unwrap().capabilities;
        let bounding = caps.bounding().clone().unwrap();
        assert_eq!(bounding, available);
        let ask = |name: &str| SecurityContext {
            capabilities: Capabilities {
                add: vec![name.into()],
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(security(&ask("SYS_ADMIN"), None, &host).is_ok());
        let e = security(&ask("SYS_RESOURCE"), None, &host).unwrap_err();
        assert!(
            e.is_host_limit() && e.to_string().contains("SYS_RESOURCE"),
            "{e}"
        );
    }

    #[test]
    fn privileged_and_paths() {
        let host = HostFeatures::default();
        // kubelet's procMount Unmasked: empty lists, and nothing masked or read-only.
        let plain = security(&SecurityContext::default(), None, &host).unwrap();
        assert!(plain.masked_paths.is_empty() && plain.readonly_paths.is_empty());
        assert!(!plain.privileged);

        let custom = SecurityContext {
            masked_paths: strings(&["/bin/ls"]),
            readonly_paths: strings(&["/tmp"]),
            ..Default::default()
        };
        let sec = security(&custom, None, &host).unwrap();
        assert_eq!(
            (sec.masked_paths, sec.readonly_paths),
            (strings(&["/bin/ls"]), strings(&["/tmp"]))
        );

        let privileged = SecurityContext {
            privileged: true,
            masked_paths: strings(&["/bin/ls"]),
            seccomp: Some(Profile::RuntimeDefault),
            ..Default::default()
        };
        let sec = security(&privileged, None, &host).unwrap();
        assert!(sec.masked_paths.is_empty() && sec.readonly_paths.is_empty());
        assert_eq!(sec.seccomp, None);
        assert_eq!(
            sec.capabilities.bounding().as_ref().unwrap().len(),
            ALL_CAPABILITIES.len()
        );
    }

    #[test]
    fn no_new_privileges_is_true_or_unset() {
        let host = HostFeatures::default();
        for (requested, want) in [(true, Some(true)), (false, None)] {
            let sc = SecurityContext {
                no_new_privs: requested,
                ..Default::default()
            };
            assert_eq!(security(&sc, None, &host).unwrap().no_new_privileges, want);
        }
    }

    #[test]
    fn chooses_seccomp() {
        let host = HostFeatures::default();
        let localhost = super::super::seccomp::parse_seccomp_profile(
            "/p.json",
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["sethostname"],"action":"SCMP_ACT_ERRNO"}]}"#,
        )
        .unwrap();
        let run = |profile: Option<Profile>, loaded: Option<&SeccompProfile>, privileged: bool| {
            let sc = SecurityContext {
                seccomp: profile,
                privileged,
                ..Default::default()
            };
            security(&sc, loaded, &host).map(|s| s.seccomp)
        };
        assert_eq!(run(None, None, false).unwrap(), None);
        assert_eq!(run(Some(Profile::Unconfined), None, false).unwrap(), None);
        let default = run(Some(Profile::RuntimeDefault), None, false)
            .unwrap()
            .unwrap();
        assert_eq!(
            default.default_action(),
            oci_spec::runtime::LinuxSeccompAction::ScmpActErrno
        );
        let local = Some(Profile::Localhost("/p.json".into()));
        let resolved = run(local.clone(), Some(&localhost), false)
            .unwrap()
            .unwrap();
        assert_eq!(
            resolved.default_action(),
            oci_spec::runtime::LinuxSeccompAction::ScmpActAllow
        );
        assert_eq!(run(local.clone(), Some(&localhost), true).unwrap(), None);
        let missing = run(local, None, false).unwrap_err();
        assert_eq!(
            missing.to_string(),
            "seccomp: localhost profile /p.json was not loaded"
        );
    }

    #[test]
    fn chooses_apparmor_profile() {
        let off = HostFeatures::default();
        let on = HostFeatures {
            apparmor_enabled: true,
            apparmor_default_profile: Some("crust-default".into()),
            ..Default::default()
        };
        let local = || Some(Profile::Localhost("localhost/my-profile".into()));
        /// name, profile, privileged, host, expected profile or error.
        struct Case<'a>(
            &'a str,
            Option<Profile>,
            bool,
            &'a HostFeatures,
            Result<Option<&'a str>, &'a str>,
        );
        let table = vec![
            Case("unset, off", None, false, &off, Ok(None)),
            Case(
                "unconfined, off",
                Some(Profile::Unconfined),
                false,
                &off,
                Ok(None),
            ),
            Case(
                "runtime default, off",
                Some(Profile::RuntimeDefault),
                false,
                &off,
                Ok(None),
            ),
            Case(
                "localhost, off",
                local(),
                false,
                &off,
                Err("apparmor is not enabled on this host: cannot apply profile my-profile"),
            ),
            Case("unset, on", None, false, &on, Ok(Some("crust-default"))),
            Case(
                "runtime default, on",
                Some(Profile::RuntimeDefault),
                false,
                &on,
                Ok(Some("crust-default")),
            ),
            Case("privileged default, on", None, true, &on, Ok(None)),
            Case(
                "privileged localhost, on",
                local(),
                true,
                &on,
                Ok(Some("my-profile")),
            ),
            Case(
                "unconfined, on",
                Some(Profile::Unconfined),
                false,
                &on,
                Ok(None),
            ),
            Case("localhost, on", local(), false, &on, Ok(Some("my-profile"))),
        ];
        for Case(name, profile, privileged, host, want) in table {
            let got = apparmor(profile.as_ref(), privileged, host);
            match (got, want) {
                (Ok(got), Ok(want)) => assert_eq!(got.as_deref(), want, "{name}"),
                (Err(err), Err(want)) => {
                    assert!(err.is_host_limit(), "{name}");
                    assert_eq!(err.to_string(), want, "{name}");
                }
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn selinux_only_when_enabled() {
        let sc = SecurityContext {
            selinux: Some(SelinuxOptions {
                level: "s0:c1,c2".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let off = security(&sc, None, &HostFeatures::default()).unwrap();
        assert_eq!((off.selinux_label, off.mount_label), (None, None));
        let host = HostFeatures {
            selinux_enabled: true,
            ..Default::default()
        };
        let on = security(&sc, None, &host).unwrap();
        assert_eq!(
            on.selinux_label.as_deref(),
            Some("system_u:system_r:container_t:s0:c1,c2")
        );
        assert_eq!(
            on.mount_label.as_deref(),
            Some("system_u:object_r:container_file_t:s0:c1,c2")
        );
    }
}
