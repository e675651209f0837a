//! AppArmor, where the host has it (the LSM on, securityfs mounted): crust's own
//! `crust-default` profile, and the profiles containers name.
//!
//! `crust-default` is what `RuntimeDefault` (and an unset profile) means for a container that
//! is not privileged. Its text is containerd's `cri-containerd.apparmor.d`, generated from the
//! same template the same way (`contrib/apparmor/template.go` of the containerd module
//! `hack/tools/containerd` pins; `tests/containerd_defaults.rs` compares the two): the
//! includes the node's /etc/apparmor.d has, the daemon's own profile as a signal peer. crust
//! writes it under its state directory, never into /etc/apparmor.d, and loads it with
//! `apparmor_parser -Kr` at start and again whenever a container needs it and the kernel no
//! longer has it (`aa-teardown`, an apparmor.service restart). A profile of that name already
//! loaded is used as it is, as containerd does: an operator who wants another one writes it
//! in /etc/apparmor.d under that name and loads it, and crust keeps out of its way.
//!
//! `Localhost` profiles are the node's, by name: one the kernel has not loaded fails
//! CreateContainer (InvalidArgument, naming it) rather than at start.

use std::path::{Path, PathBuf};

use crate::container::ContainerError;
use crate::model::{Profile, SecurityContext};

/// The profile `RuntimeDefault` means.
pub const DEFAULT_PROFILE: &str = "crust-default";

/// Where the kernel lists its loaded profiles (`<name> (<mode>)` a line).
const PROFILES: &str = "/sys/kernel/security/apparmor/profiles";

#[derive(Debug, thiserror::Error)]
pub enum AppArmorError {
    #[error(
        "AppArmor is on but apparmor_parser is not installed, so crust cannot load its \
         {DEFAULT_PROFILE} profile for RuntimeDefault (install the apparmor package, or load a \
         profile named {DEFAULT_PROFILE} yourself)"
    )]
    NoParser,
    #[error("writing the AppArmor profile {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("loading the AppArmor profile {} with apparmor_parser: {detail}", path.display())]
    Load { path: PathBuf, detail: String },
    #[error("reading {PROFILES}: {0}")]
    List(std::io::Error),
}

/// AppArmor on this host: present only when the LSM is on.
#[derive(Debug, Clone)]
pub struct AppArmor {
    /// `apparmor_parser`, if installed.
    parser: Option<PathBuf>,
    /// Where crust writes its profile (under the state directory).
    dir: PathBuf,
}

/// Whether the kernel enforces AppArmor (the module on, its filesystem mounted): containerd's
/// and critest's test.
pub fn enabled() -> bool {
    std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
        .is_ok_and(|v| v.starts_with('Y'))
        && Path::new(PROFILES).exists()
}

impl AppArmor {
    /// AppArmor as this host offers it, its profile going to `state_dir/apparmor`; `None`
    /// where the kernel does not enforce it.
    pub fn detect(state_dir: &Path) -> Option<AppArmor> {
        if !enabled() {
            return None;
        }
        let parser = ["/sbin/apparmor_parser", "/usr/sbin/apparmor_parser"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.is_file());
        Some(AppArmor {
            parser,
            dir: state_dir.join("apparmor"),
        })
    }

    /// Whether the kernel has a profile of this name loaded.
    pub fn is_loaded(&self, name: &str) -> Result<bool, AppArmorError> {
        let list = std::fs::read_to_string(PROFILES).map_err(AppArmorError::List)?;
        Ok(listed(&list, name))
    }

    /// Loads `crust-default` unless a profile of that name is loaded; returns whether this
    /// call loaded it. crust's text is under the state directory either way (written when
    /// missing), so that an operator, or a test, can load or unload it from there: a profile
    /// already loaded may be another crust's (an earlier daemon of this boot) or the
    /// operator's own, which is used as it is.
    pub fn ensure_default(&self) -> Result<bool, AppArmorError> {
        let path = self.dir.join(DEFAULT_PROFILE);
        if self.is_loaded(DEFAULT_PROFILE)? {
            if !path.exists() {
                self.write_default(&path)?;
            }
            return Ok(false);
        }
        let parser = self.parser.as_ref().ok_or(AppArmorError::NoParser)?;
        self.write_default(&path)?;
        // -K: no cache (the text follows the host and crust's version); -r: replace, so a
        // profile loaded between the check and now is not an error.
        let out = std::process::Command::new(parser)
            .arg("-Kr")
            .arg(&path)
            .output()
            .map_err(|e| AppArmorError::Load {
                path: path.clone(),
                detail: e.to_string(),
            })?;
        if !out.status.success() {
            let detail = String::from_utf8_lossy(&out.stderr).trim().to_owned();
            return Err(AppArmorError::Load { path, detail });
        }
        Ok(true)
    }

    fn write_default(&self, path: &Path) -> Result<(), AppArmorError> {
        let text = default_profile(&Macros::of_host(), &daemon_profile());
        write_atomically(path, &text).map_err(|source| AppArmorError::Write {
            path: path.to_owned(),
            source,
        })
    }

    /// Whether `apparmor_parser` is installed.
    pub fn has_parser(&self) -> bool {
        self.parser.is_some()
    }
}

/// What AppArmor means for a container, where the kernel enforces it: the profile
/// `RuntimeDefault` (or none asked for) resolves to, `crust-default`, loaded now if the kernel
/// lacks it; for a `Localhost` profile, a check that the kernel has it (the error names it).
/// `None` where AppArmor is off: the spec then refuses a `Localhost` profile, as containerd
/// does. Blocking (it may run apparmor_parser).
pub fn for_container(
    apparmor: Option<&AppArmor>,
    sc: &SecurityContext,
) -> Result<Option<String>, ContainerError> {
    let Some(apparmor) = apparmor else {
        return Ok(None);
    };
    match &sc.apparmor {
        Some(Profile::Localhost(name)) => {
            let name = name.strip_prefix("localhost/").unwrap_or(name);
            if !apparmor.is_loaded(name)? {
                return Err(ContainerError::Invalid(format!(
                    "apparmor profile {name:?} is not loaded on this node (the kernel lists \
                     its profiles in {PROFILES}; load it with apparmor_parser first)"
                )));
            }
            Ok(None)
        }
        Some(Profile::Unconfined) => Ok(None),
        None | Some(Profile::RuntimeDefault) if sc.privileged => Ok(None),
        None | Some(Profile::RuntimeDefault) => {
            if apparmor.ensure_default()? {
                tracing::info!(
                    profile = DEFAULT_PROFILE,
                    "loaded the AppArmor profile again"
                );
            }
            Ok(Some(DEFAULT_PROFILE.into()))
        }
    }
}

/// Whether the kernel's list names `name` (its lines are `<name> (<mode>)`).
fn listed(list: &str, name: &str) -> bool {
    list.lines().any(|l| {
        l.strip_prefix(name)
            .is_some_and(|rest| rest.starts_with(" ("))
    })
}

/// The label crust itself runs under (a signal peer of its containers), as containerd's
/// `cleanProfileName` reads it: the name without its mode, `unconfined` when none.
fn daemon_profile() -> String {
    let current = std::fs::read_to_string("/proc/self/attr/current").unwrap_or_default();
    clean_profile_name(&current)
}

fn clean_profile_name(label: &str) -> String {
    let name = label.trim_end_matches(['\n', '\0']);
    let name = name.split(' ').next().unwrap_or_default();
    if name.is_empty() {
        "unconfined".into()
    } else {
        name.into()
    }
}

/// What /etc/apparmor.d offers the profile, as containerd's `macroExists` finds it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Macros {
    pub abi_3: bool,
    pub tunables_global: bool,
    pub abstractions_base: bool,
}

impl Macros {
    fn of_host() -> Macros {
        let has = |m: &str| Path::new("/etc/apparmor.d").join(m).exists();
        Macros {
            abi_3: has("abi/3.0"),
            tunables_global: has("tunables/global"),
            abstractions_base: has("abstractions/base"),
        }
    }
}

/// containerd's template (contrib/apparmor/template.go) as text, with `{{.Name}}`,
/// `{{.DaemonProfile}}` and the conditional parts as placeholders; crust runs no RootlessKit,
/// so its block is left out.
const TEMPLATE: &str = r#"
@ABI@
@IMPORTS@

profile @NAME@ flags=(attach_disconnected,mediate_deleted) {
@INNER@

  network,
  capability,
  file,
  umount,
  # Host (privileged) processes may send signals to container processes.
  signal (receive) peer=unconfined,
  # runc may send signals to container processes.
  signal (receive) peer=runc,
  # crun may send signals to container processes.
  signal (receive) peer=crun,
  # Manager may send signals to container processes.
  signal (receive) peer=@DAEMON@,
  # Container processes may send signals amongst themselves.
  signal (send,receive) peer=@NAME@,


  deny @{PROC}/* w,   # deny write for all files directly in /proc (not in a subdir)
  # deny write to files not in /proc/<number>/** or /proc/sys/**
  deny @{PROC}/{[^1-9/],[^1-9/][^0-9/],[^1-9s/][^0-9y/][^0-9s/],[^1-9/][^0-9/][^0-9/][^0-9/]*}/** w,
  deny @{PROC}/sys/[^k]** w,  # deny /proc/sys except /proc/sys/k* (effectively /proc/sys/kernel)
  deny @{PROC}/sys/kernel/{?,??,[^s][^h][^m]**} w,  # deny everything except shm* in /proc/sys/kernel/
  deny @{PROC}/sysrq-trigger rwklx,
  deny @{PROC}/kcore rwklx,

  deny mount,

  deny /sys/[^f]*/** wklx,
  deny /sys/f[^s]*/** wklx,
  deny /sys/fs/[^c]*/** wklx,
  deny /sys/fs/c[^g]*/** wklx,
  deny /sys/fs/cg[^r]*/** wklx,
  deny /sys/firmware/** rwklx,
  deny /sys/devices/virtual/powercap/** rwklx,
  deny /sys/kernel/security/** rwklx,

  # allow processes within the container to trace each other,
  # provided all other LSM and yama setting allow it.
  ptrace (trace,tracedby,read,readby) peer=@NAME@,
}
"#;

/// crust's default profile: containerd's template filled as containerd fills it, named
/// `crust-default`, with `daemon` (crust's own label) as the manager that may signal
/// container processes. Without `tunables/global`, `@{PROC}` is defined in place.
pub fn default_profile(macros: &Macros, daemon: &str) -> String {
    // Each `{{if}}` / `{{range}}` of the Go template leaves its own line breaks.
    let abi = if macros.abi_3 { "abi <abi/3.0>,\n" } else { "" };
    let import = if macros.tunables_global {
        "\n#include <tunables/global>\n"
    } else {
        "\n@{PROC}=/proc/\n"
    };
    let inner = if macros.abstractions_base {
        "\n  #include <abstractions/base>\n"
    } else {
        ""
    };
    TEMPLATE
        .replacen("@ABI@", abi, 1)
        .replacen("@IMPORTS@", import, 1)
        .replacen("@INNER@", inner, 1)
        .replace("@NAME@", DEFAULT_PROFILE)
        .replace("@DAEMON@", daemon)
}

/// The profile as the host would have crust generate it now (for `crust check` and tests).
pub fn default_profile_of_host() -> String {
    default_profile(&Macros::of_host(), &daemon_profile())
}

/// Through the store's atomic write (a temp file of its own, fsync, rename): apparmor_parser
/// never reads half a profile, and a crash leaves the old one or the new one.
fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    crate::durable::create_dir_all(path.parent().unwrap_or(Path::new("/")))?;
    crate::store::write_atomic(path, text.as_bytes())
        .map_err(|e| std::io::Error::other(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_profiles_by_whole_name() {
        let list =
            "crust-default (enforce)\nmy-profile//child (complain)\n/usr/bin/man (enforce)\n";
        assert!(listed(list, "crust-default"));
        assert!(listed(list, "/usr/bin/man"));
        assert!(!listed(list, "crust"));
        assert!(!listed(list, "my-profile"));
        assert!(!listed("", "crust-default"));
    }

    #[test]
    fn cleans_the_daemon_label_as_containerd_does() {
        for (label, want) in [
            ("", "unconfined"),
            ("unconfined\n", "unconfined"),
            ("unconfined (enforce)", "unconfined"),
            ("crust (enforce)\n", "crust"),
            ("foo\0", "foo"),
        ] {
            assert_eq!(clean_profile_name(label), want, "{label:?}");
        }
    }

    #[test]
    fn the_profile_follows_the_host_s_macros() {
        let all = Macros {
            abi_3: true,
            tunables_global: true,
            abstractions_base: true,
        };
        let full = default_profile(&all, "unconfined");
        assert!(full.starts_with("\nabi <abi/3.0>,\n\n\n#include <tunables/global>\n"));
        assert!(full.contains("\n  #include <abstractions/base>\n"));
        assert!(
            full.contains("profile crust-default flags=(attach_disconnected,mediate_deleted) {")
        );
        assert!(full.contains("  signal (send,receive) peer=crust-default,\n"));
        assert!(full.contains("  ptrace (trace,tracedby,read,readby) peer=crust-default,\n"));
        assert!(full.contains("  deny @{PROC}/sys/[^k]** w,"));
        let bare = default_profile(&Macros::default(), "crust-serve");
        assert!(bare.starts_with("\n\n\n@{PROC}=/proc/\n"));
        assert!(!bare.contains("#include"));
        assert!(bare.contains("  signal (receive) peer=crust-serve,\n"));
    }
}
