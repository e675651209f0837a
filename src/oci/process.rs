//! The process a container runs, and the processes ExecSync/Exec run inside it.
//!
//! - args, as kubelet expects: the request's `command` replaces the image's Entrypoint and
//!   its `args` replace Cmd, so `command` set gives command + args, `args` alone gives
//!   Entrypoint + args, neither gives Entrypoint + Cmd;
//! - env: a default PATH, `HOSTNAME` (the pod's hostname, as containerd sets it) and
//!   `TERM=xterm` with a tty come first, then the image's Env, then the request's envs, each
//!   later value replacing an earlier one of the same name in place; then `HOME`, unless set,
//!   as runc sets it: the user's passwd home, else `/`;
//! - cwd: the request's working dir, else the image's WorkingDir, else `/`;
//! - RLIMIT_NOFILE 1048576 (CRI-O's and recent Docker's) or what crust may set if lower, then
//!   the node's `default_ulimits` (CRI-O's), which replace it when they name `nofile`,
//!   oom_score_adj clamped to what crust may set, the user, and the security settings decided in `security`.

use oci_spec::runtime::{PosixRlimit, PosixRlimitBuilder, PosixRlimitType, Process, User};

use crate::image::RuntimeConfig;
use crate::model::{ContainerSpec, ResolvedUser};

use super::SpecError;
use super::security::Security;

/// The PATH a container gets when neither its image nor its request sets one (libcontainer
/// looks the command up in it, and refuses to start without one).
pub(crate) const DEFAULT_PATH: &str =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

const NOFILE_LIMIT: u64 = 1_048_576;

/// What the process is built from.
pub(crate) struct ProcessInput<'a> {
    pub spec: &'a ContainerSpec,
    pub image: &'a RuntimeConfig,
    pub image_name: &'a str,
    pub user: &'a ResolvedUser,
    pub pod_hostname: &'a str,
    pub min_oom_score_adj: i64,
    pub max_nofile: u64,
    pub default_ulimits: &'a [crate::config::Ulimit],
}

/// RLIMIT_NOFILE at `nofile`, then the node's default ulimits, a later one replacing an
/// earlier one of the same resource.
fn rlimits(nofile: u64, defaults: &[crate::config::Ulimit]) -> Result<Vec<PosixRlimit>, SpecError> {
    let rlimit = |typ, soft, hard| {
        PosixRlimitBuilder::default()
            .typ(typ)
            .soft(soft)
            .hard(hard)
            .build()
            // Cannot fail: every field of the builder has a default.
            .unwrap_or_default()
    };
    let mut out = vec![rlimit(PosixRlimitType::RlimitNofile, nofile, nofile)];
    for u in defaults {
        let name = format!("RLIMIT_{}", u.name.to_ascii_uppercase());
        let typ: PosixRlimitType = name.parse().map_err(|_| {
            SpecError::Invalid(format!(
                "default_ulimits: {:?} is not a resource limit",
                u.name
            ))
        })?;
        out.retain(|r| r.typ() != typ);
        out.push(rlimit(typ, u.soft, u.hard));
    }
    Ok(out)
}

pub(crate) fn process(input: &ProcessInput<'_>, security: &Security) -> Result<Process, SpecError> {
    let spec = input.spec;
    let mut user = User::default();
    user.set_uid(input.user.uid)
        .set_gid(input.user.gid)
        .set_additional_gids(Some(input.user.additional_gids.clone()));
    // Raising a hard limit above crust's own needs CAP_SYS_RESOURCE.
    let nofile = match input.max_nofile {
        0 => NOFILE_LIMIT,
        max => NOFILE_LIMIT.min(max),
    };
    let rlimits = rlimits(nofile, input.default_ulimits)?;
    let mut process = Process::default();
    process
        .set_terminal(Some(spec.tty))
        .set_console_size(None)
        .set_user(user)
        .set_args(Some(args(spec, input.image, input.image_name)?))
        .set_env(Some(env(
            spec,
            input.image,
            input.pod_hostname,
            input.user,
        )?))
        .set_cwd(cwd(spec, input.image)?.into())
        .set_capabilities(Some(security.capabilities.clone()))
        .set_rlimits(Some(rlimits))
        .set_no_new_privileges(security.no_new_privileges)
        .set_apparmor_profile(security.apparmor_profile.clone())
        .set_selinux_label(security.selinux_label.clone())
        .set_oom_score_adj(Some(oom_score_adj(
            spec.resources.oom_score_adj,
            input.min_oom_score_adj,
        )));
    Ok(process)
}

/// The process ExecSync or Exec runs in a container: the container's own user, env, cwd,
/// capabilities, no_new_privileges, AppArmor profile, SELinux label and rlimits, with `cmd`
/// as its args and a terminal if `tty` (TERM=xterm then, unless the container sets TERM).
/// An empty `cmd` is the caller's to refuse (libcontainer would).
pub fn exec_process(container_process: &Process, cmd: &[String], tty: bool) -> Process {
    let mut process = container_process.clone();
    process
        .set_args(Some(cmd.to_vec()))
        .set_terminal(Some(tty))
        .set_console_size(None);
    if tty {
        let mut env = process.env().clone().unwrap_or_default();
        if !env
            .iter()
            .any(|e| e.split_once('=').is_some_and(|(k, _)| k == "TERM"))
        {
            env.push("TERM=xterm".into());
        }
        process.set_env(Some(env));
    }
    process
}

pub(crate) fn args(
    spec: &ContainerSpec,
    image: &RuntimeConfig,
    image_name: &str,
) -> Result<Vec<String>, SpecError> {
    let args = if !spec.command.is_empty() {
        [spec.command.as_slice(), spec.args.as_slice()].concat()
    } else if !spec.args.is_empty() {
        [image.entrypoint.as_slice(), spec.args.as_slice()].concat()
    } else {
        [image.entrypoint.as_slice(), image.cmd.as_slice()].concat()
    };
    if args.is_empty() {
        return Err(SpecError::Invalid(format!(
            "container {:?}: nothing to run: the request has no command or args and image \
             {image_name} has no Entrypoint or Cmd",
            spec.metadata.name
        )));
    }
    Ok(args)
}

pub(crate) fn env(
    spec: &ContainerSpec,
    image: &RuntimeConfig,
    pod_hostname: &str,
    user: &ResolvedUser,
) -> Result<Vec<String>, SpecError> {
    let mut env: Vec<(String, String)> = vec![("PATH".into(), DEFAULT_PATH.into())];
    if !pod_hostname.is_empty() {
        env.push(("HOSTNAME".into(), pod_hostname.into()));
    }
    if spec.tty {
        env.push(("TERM".into(), "xterm".into()));
    }
    // An image entry without '=' sets nothing; Docker's builder never writes one.
    let from_image = image.env.iter().filter_map(|e| e.split_once('='));
    for (key, value) in from_image.filter(|(key, _)| !key.is_empty()) {
        set(&mut env, key, value);
    }
    for (key, value) in &spec.envs {
        if key.is_empty() || key.contains('=') {
            return Err(SpecError::Invalid(format!(
                "envs: invalid variable name {key:?}"
            )));
        }
        set(&mut env, key, value);
    }
    // runc sets HOME when the environment has none: the user's passwd home, else `/`
    // (libcontainer would leave it unset for a uid the image's passwd does not know).
    if !env.iter().any(|(k, v)| k == "HOME" && !v.is_empty()) {
        set(&mut env, "HOME", user.home.as_deref().unwrap_or("/"));
    }
    Ok(env.into_iter().map(|(k, v)| format!("{k}={v}")).collect())
}

fn set(env: &mut Vec<(String, String)>, key: &str, value: &str) {
    match env.iter_mut().find(|(k, _)| k == key) {
        Some(entry) => entry.1 = value.to_string(),
        None => env.push((key.to_string(), value.to_string())),
    }
}

pub(crate) fn cwd(spec: &ContainerSpec, image: &RuntimeConfig) -> Result<String, SpecError> {
    let (field, dir) = if !spec.working_dir.is_empty() {
        ("working_dir", spec.working_dir.as_str())
    } else if !image.working_dir.is_empty() {
        ("the image's WorkingDir", image.working_dir.as_str())
    } else {
        return Ok("/".into());
    };
    if !dir.starts_with('/') {
        return Err(SpecError::Invalid(format!(
            "{field}: {dir:?} is not an absolute path"
        )));
    }
    Ok(dir.to_string())
}

/// The request's score, raised to the lowest crust may set (the kernel refuses lower ones
/// without CAP_SYS_RESOURCE) and kept within the kernel's -1000..=1000.
pub(crate) fn oom_score_adj(requested: i64, min_allowed: i64) -> i32 {
    requested.max(min_allowed).clamp(-1000, 1000) as i32
}

#[cfg(test)]
mod tests {
    use super::super::fixture::Fixture;
    use super::super::security::security;
    use super::*;

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn args_follow_kubelet_rules() {
        let image = RuntimeConfig {
            entrypoint: strings(&["/entry"]),
            cmd: strings(&["--cmd"]),
            ..Default::default()
        };
        let bare = RuntimeConfig::default();
        struct Case<'a>(
            &'a str,
            Words,
            Words,
            &'a RuntimeConfig,
            Result<Words, &'a str>,
        );
        type Words = &'static [&'static str];
        let table = vec![
            Case("neither", &[], &[], &image, Ok(&["/entry", "--cmd"])),
            Case(
                "args only",
                &[],
                &["a", "b"],
                &image,
                Ok(&["/entry", "a", "b"]),
            ),
            Case("command only", &["sh"], &[], &image, Ok(&["sh"])),
            Case(
                "command and args",
                &["sh"],
                &["-c", "true"],
                &image,
                Ok(&["sh", "-c", "true"]),
            ),
            Case(
                "args, image without entrypoint",
                &[],
                &["top"],
                &bare,
                Ok(&["top"]),
            ),
            Case(
                "nothing at all",
                &[],
                &[],
                &bare,
                Err(
                    "container \"c1\": nothing to run: the request has no command or args and \
                     image img:1 has no Entrypoint or Cmd",
                ),
            ),
        ];
        for Case(name, command, arguments, image, want) in table {
            let mut spec = ContainerSpec::default();
            spec.metadata.name = "c1".into();
            spec.command = strings(command);
            spec.args = strings(arguments);
            match (args(&spec, image, "img:1"), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, strings(want), "{name}"),
                (Err(err), Err(want)) => assert_eq!(err.to_string(), want, "{name}"),
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn env_layers_and_overrides() {
        let image = RuntimeConfig {
            env: strings(&["PATH=/image/bin", "A=image", "B=image", "NOEQUALS", "=x"]),
            ..Default::default()
        };
        let bare = RuntimeConfig::default();
        /// name, image, request envs, tty, pod hostname, expected env.
        struct Case<'a>(
            &'a str,
            &'a RuntimeConfig,
            Vec<(&'a str, &'a str)>,
            bool,
            &'a str,
            Vec<&'a str>,
        );
        let table = vec![
            Case(
                "defaults",
                &bare,
                vec![],
                false,
                "pod-host",
                vec![
                    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "HOSTNAME=pod-host",
                    "HOME=/",
                ],
            ),
            Case(
                "image then request, in place",
                &image,
                vec![("B", "request"), ("C", "request"), ("B", "last")],
                false,
                "h",
                vec![
                    "PATH=/image/bin",
                    "HOSTNAME=h",
                    "A=image",
                    "B=last",
                    "C=request",
                    "HOME=/",
                ],
            ),
            Case(
                "tty and no hostname",
                &bare,
                vec![("TERM", "vt100")],
                true,
                "",
                vec![
                    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "TERM=vt100",
                    "HOME=/",
                ],
            ),
            Case(
                "request may override HOSTNAME and PATH",
                &image,
                vec![("HOSTNAME", "mine"), ("PATH", "/bin")],
                false,
                "h",
                vec!["PATH=/bin", "HOSTNAME=mine", "A=image", "B=image", "HOME=/"],
            ),
        ];
        for Case(name, image, envs, tty, hostname, want) in table {
            let spec = ContainerSpec {
                envs: envs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                tty,
                ..Default::default()
            };
            assert_eq!(
                env(&spec, image, hostname, &ResolvedUser::default()).unwrap(),
                strings(&want),
                "{name}"
            );
        }
        let bad = ContainerSpec {
            envs: vec![("A=B".into(), "x".into())],
            ..Default::default()
        };
        let none = ResolvedUser::default();
        let err = env(&bad, &RuntimeConfig::default(), "h", &none).unwrap_err();
        assert_eq!(err.to_string(), "envs: invalid variable name \"A=B\"");
    }

    /// HOME as runc sets it: the environment's if not empty, else the passwd home, else `/`.
    #[test]
    fn home_follows_the_environment_then_passwd_then_root() {
        let app = ResolvedUser {
            uid: 1000,
            home: Some("/home/app".into()),
            ..Default::default()
        };
        let unknown = ResolvedUser {
            uid: 4242,
            ..Default::default()
        };
        let home = |envs: &[(&str, &str)], image_env: &[&str], user: &ResolvedUser| {
            let spec = ContainerSpec {
                envs: envs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..Default::default()
            };
            let image = RuntimeConfig {
                env: strings(image_env),
                ..Default::default()
            };
            let env = env(&spec, &image, "h", user).unwrap();
            let homes: Vec<String> = env.into_iter().filter(|e| e.starts_with("HOME=")).collect();
            homes
        };
        assert_eq!(home(&[], &[], &app), ["HOME=/home/app"]);
        assert_eq!(home(&[], &[], &unknown), ["HOME=/"]);
        assert_eq!(home(&[("HOME", "/data")], &[], &app), ["HOME=/data"]);
        assert_eq!(home(&[], &["HOME=/img"], &unknown), ["HOME=/img"]);
        assert_eq!(home(&[], &["HOME="], &app), ["HOME=/home/app"]);
    }

    #[test]
    fn cwd_choice() {
        let image = |dir: &str| RuntimeConfig {
            working_dir: dir.into(),
            ..Default::default()
        };
        let table = [
            ("default", "", "", Ok("/")),
            ("image", "", "/srv", Ok("/srv")),
            ("request wins", "/work", "/srv", Ok("/work")),
            (
                "relative request",
                "work",
                "",
                Err("working_dir: \"work\" is not an absolute path"),
            ),
            (
                "relative image",
                "",
                "srv",
                Err("the image's WorkingDir: \"srv\" is not an absolute path"),
            ),
        ];
        for (name, request, image_dir, want) in table {
            let spec = ContainerSpec {
                working_dir: request.into(),
                ..Default::default()
            };
            let got = cwd(&spec, &image(image_dir)).map_err(|e| e.to_string());
            assert_eq!(got, want.map(String::from).map_err(String::from), "{name}");
        }
    }

    #[test]
    fn oom_score_is_clamped() {
        let table = [
            (0, -999, 0),
            (-998, -999, -998),
            (-1000, 0, 0),
            (1000, -999, 1000),
            (5000, 0, 1000),
            (-5000, -1000, -1000),
        ];
        for (requested, min, want) in table {
            assert_eq!(
                oom_score_adj(requested, min),
                want,
                "{requested} with min {min}"
            );
        }
    }

    #[test]
    fn builds_the_process() {
        let mut fx = Fixture::new();
        fx.spec.tty = true;
        fx.spec.resources.oom_score_adj = -999;
        fx.host.min_oom_score_adj = -500;
        fx.spec.security.no_new_privs = true;
        let sec = security(&fx.spec.security, None, &fx.host).unwrap();
        let input = ProcessInput {
            spec: &fx.spec,
            image: &fx.image,
            image_name: "img",
            user: &fx.user,
            pod_hostname: "pod-host",
            min_oom_score_adj: fx.host.min_oom_score_adj,
            max_nofile: 0,
            default_ulimits: &[],
        };
        let p = process(&input, &sec).unwrap();
        assert_eq!(p.terminal(), Some(true));
        assert_eq!(
            p.args().as_deref(),
            Some(&strings(&["/bin/sh", "-c", "sleep 1000"])[..])
        );
        assert_eq!((p.user().uid(), p.user().gid()), (1000, 1000));
        assert_eq!(
            p.user().additional_gids().as_deref(),
            Some(&[1000, 50000][..])
        );
        assert_eq!(p.oom_score_adj(), Some(-500));
        assert_eq!(p.no_new_privileges(), Some(true));
        assert_eq!(p.cwd().to_str(), Some("/"));
        let rlimits = p.rlimits().clone().unwrap();
        assert_eq!(
            (rlimits[0].typ(), rlimits[0].soft(), rlimits[0].hard()),
            (PosixRlimitType::RlimitNofile, NOFILE_LIMIT, NOFILE_LIMIT)
        );
        assert!(
            p.env()
                .as_ref()
                .unwrap()
                .contains(&"TERM=xterm".to_string())
        );
    }

    #[test]
    fn default_ulimits_add_to_and_replace_crust_s_own() {
        let parse = |list: &[&str]| {
            list.iter()
                .map(|u| crate::config::Ulimit::parse(u).unwrap())
                .collect::<Vec<_>>()
        };
        let got = |defaults: &[crate::config::Ulimit]| {
            rlimits(NOFILE_LIMIT, defaults)
                .unwrap()
                .iter()
                .map(|r| (r.typ(), r.soft(), r.hard()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            got(&parse(&[
                "nproc=100:200",
                "nofile=1024:4096",
                "core=unlimited"
            ])),
            [
                (PosixRlimitType::RlimitNproc, 100, 200),
                (PosixRlimitType::RlimitNofile, 1024, 4096),
                (PosixRlimitType::RlimitCore, u64::MAX, u64::MAX),
            ]
        );
        assert_eq!(
            got(&[]),
            [(PosixRlimitType::RlimitNofile, NOFILE_LIMIT, NOFILE_LIMIT)]
        );
    }

    #[test]
    fn exec_process_keeps_the_container_identity() {
        let fx = Fixture::new();
        let sec = security(&fx.spec.security, None, &fx.host).unwrap();
        let input = ProcessInput {
            spec: &fx.spec,
            image: &fx.image,
            image_name: "img",
            user: &fx.user,
            pod_hostname: "h",
            min_oom_score_adj: 0,
            max_nofile: 0,
            default_ulimits: &[],
        };
        let container = process(&input, &sec).unwrap();
        let table = [(false, false), (true, true)];
        for (tty, want_term) in table {
            let exec = exec_process(&container, &strings(&["id", "-G"]), tty);
            assert_eq!(exec.args().as_deref(), Some(&strings(&["id", "-G"])[..]));
            assert_eq!(exec.terminal(), Some(tty));
            assert_eq!(exec.user(), container.user());
            assert_eq!(exec.capabilities(), container.capabilities());
            assert_eq!(exec.no_new_privileges(), container.no_new_privileges());
            assert_eq!(exec.cwd(), container.cwd());
            assert_eq!(exec.rlimits(), container.rlimits());
            let has_term = exec
                .env()
                .as_ref()
                .unwrap()
                .iter()
                .any(|e| e == "TERM=xterm");
            assert_eq!(has_term, want_term);
        }
    }
}
