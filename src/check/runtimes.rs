//! The runtime handlers: libcontainer's, and each one an OCI runtime binary runs
//! (`[runtimes.<handler>]`): the binary found, its version, and what `<runtime> features`
//! reports (what Status tells kubelet for that handler); and CRIU, which checkpoints use.

use super::Finding;
use crate::config::Config;
use crate::monitor::oci_cli;

/// One finding per handler, in the order pods may name them.
pub fn handlers(config: &Config) -> Vec<Finding> {
    let runtimes = config.oci_runtimes();
    config
        .handler_names()
        .into_iter()
        .map(|name| {
            let default = if name == config.default_runtime_handler {
                " (default)"
            } else {
                ""
            };
            match runtimes.get(&name) {
                None => Finding::Ok(format!(
                    "{name}{default}: libcontainer in the pod's monitor"
                )),
                Some(runtime) => binary(&format!("{name}{default}"), runtime),
            }
        })
        .collect()
}

fn binary(name: &str, runtime: &crate::model::OciRuntime) -> Finding {
    let path = runtime.path.display();
    let version = match oci_cli::version(runtime) {
        Ok(v) => v,
        Err(e) => return Finding::Fail(format!("{name}: {e}")),
    };
    let f = oci_cli::features(runtime);
    let yes = |b: bool| if b { "yes" } else { "no" };
    let kind = if runtime.sandbox {
        "; a sandbox per pod, made by an infra container"
    } else {
        ""
    };
    let detail = format!(
        "{name}: {path} ({version}){kind}; recursive read-only mounts: {}, user namespaces: {}",
        yes(f.recursive_read_only_mounts),
        yes(f.user_namespaces)
    );
    match f.unknown {
        None => Finding::Ok(detail),
        Some(why) => Finding::Warn(format!("{detail} ({why})")),
    }
}

/// The CRIU CheckpointContainer would use: a warning without one, as only checkpoints need it.
pub fn criu(config: &Config) -> Finding {
    let configured = Some(config.criu_path.as_path()).filter(|p| !p.as_os_str().is_empty());
    let release = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default();
    let (needed, why) = crate::criu::needed_for_kernel(&release);
    match crate::criu::Criu::find(configured) {
        Ok(c) if c.version < needed => Finding::Warn(format!(
            "{} is CRIU {}: {why} (Linux {release} needs CRIU {}; docs/checkpoint.md)",
            c.path.display(),
            c.version_text(),
            crate::criu::dotted(needed)
        )),
        Ok(c) => Finding::Ok(format!(
            "{} (CRIU {}): `criu check` passes; checkpoints work",
            c.path.display(),
            c.version_text()
        )),
        Err(e) => Finding::Warn(format!(
            "{e}; CheckpointContainer fails, nothing else needs CRIU"
        )),
    }
}
