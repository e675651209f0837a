//! OCI hooks directories (`hooks_dir`, CRI-O's key): hook files in the JSON format CRI-O and
//! Podman read (containers/common `pkg/hooks`, version 1.0.0), each naming a program, the OCI
//! stages it runs at and when it applies; the ones that apply to a container are added to its
//! spec, which libcontainer runs (and crust itself for `poststop`, see
//! `container/bundle/poststop.rs`). Device and monitoring vendors install such files.
//!
//! The directories are read at each CreateContainer, so a file added or changed applies to the
//! next container without a restart. Files are taken in name order; a file in a later directory
//! replaces one of the same name in an earlier one. A file that cannot be used (unreadable, not
//! valid JSON, another version, no stage, a program that is not there, a bad pattern) is skipped
//! with a warning naming it and the cause: another vendor's broken file does not stop containers.
//!
//! `when` applies a hook if any one of its conditions holds, as containers/common decides it:
//! `always: true`; `hasBindMounts: true` and the request has mounts; an `annotations` pair whose
//! key and value patterns both match one annotation of the spec; a `commands` pattern matching
//! the process's first argument. Patterns are regular expressions searched, not anchored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use oci_spec::runtime::{Hook, Hooks, Spec};
use serde::Deserialize;

/// Why a hook file was skipped.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("hook file {}: {cause}", path.display())]
    Unusable { path: PathBuf, cause: String },
}

/// One hook file, version 1.0.0.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct HookFile {
    version: String,
    hook: Program,
    #[serde(default)]
    when: When,
    stages: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Program {
    path: PathBuf,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Vec<String>,
    #[serde(default)]
    timeout: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct When {
    always: Option<bool>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    commands: Vec<String>,
    has_bind_mounts: Option<bool>,
}

/// A hook file checked and its patterns compiled.
#[derive(Debug)]
struct Loaded {
    name: String,
    file: HookFile,
    annotations: Vec<(regex::Regex, regex::Regex)>,
    commands: Vec<regex::Regex>,
}

const STAGES: [&str; 6] = [
    "prestart",
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
];

/// Adds the hooks of `dirs` that apply to the container to `spec`; `has_bind_mounts` says
/// whether the request has mounts. Returns the names of the files applied, in order.
pub fn apply(dirs: &[PathBuf], spec: &mut Spec, has_bind_mounts: bool) -> Vec<String> {
    let mut applied = Vec::new();
    for hook in load(dirs) {
        if !hook.applies(spec, has_bind_mounts) {
            continue;
        }
        let hooks = spec.hooks_mut().get_or_insert_with(Hooks::default);
        for stage in &hook.file.stages {
            stage_list(hooks, stage).push(oci_hook(&hook.file.hook));
        }
        applied.push(hook.name);
    }
    applied
}

/// The usable hook files of `dirs`, by file name, a later directory's file replacing an earlier
/// one of the same name; the others are logged.
fn load(dirs: &[PathBuf]) -> Vec<Loaded> {
    let mut files: BTreeMap<String, PathBuf> = BTreeMap::new();
    for dir in dirs {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "reading an OCI hooks directory");
                continue;
            }
        };
        for path in entries.flatten().map(|e| e.path()) {
            if path.extension().is_some_and(|e| e == "json") && path.is_file() {
                let name = path.file_name().unwrap_or_default().to_string_lossy();
                files.insert(name.into_owned(), path);
            }
        }
    }
    files
        .into_iter()
        .filter_map(|(name, path)| match read(&path) {
            Ok(hook) => Some(Loaded { name, ..hook }),
            Err(e) => {
                tracing::warn!(error = %e, "OCI hook file skipped");
                None
            }
        })
        .collect()
}

fn read(path: &Path) -> Result<Loaded, HookError> {
    let unusable = |cause: String| HookError::Unusable {
        path: path.to_owned(),
        cause,
    };
    let text = std::fs::read(path).map_err(|e| unusable(e.to_string()))?;
    let file: HookFile = serde_json::from_slice(&text).map_err(|e| unusable(e.to_string()))?;
    if file.version != "1.0.0" {
        return Err(unusable(format!(
            "version {:?} (crust reads 1.0.0)",
            file.version
        )));
    }
    if file.stages.is_empty() {
        return Err(unusable("no stages".into()));
    }
    if let Some(stage) = file.stages.iter().find(|s| !STAGES.contains(&s.as_str())) {
        return Err(unusable(format!("{stage:?} is not an OCI hook stage")));
    }
    let w = &file.when;
    if w.always.is_none()
        && w.has_bind_mounts.is_none()
        && w.annotations.is_empty()
        && w.commands.is_empty()
    {
        return Err(unusable("when: no condition is set".into()));
    }
    if !file.hook.path.is_absolute() || !file.hook.path.is_file() {
        return Err(unusable(format!(
            "hook path {} is not a file",
            file.hook.path.display()
        )));
    }
    let pattern = |p: &str| regex::Regex::new(p).map_err(|e| unusable(format!("{p:?}: {e}")));
    let annotations = w
        .annotations
        .iter()
        .map(|(k, v)| Ok((pattern(k)?, pattern(v)?)))
        .collect::<Result<_, HookError>>()?;
    let commands = w
        .commands
        .iter()
        .map(|c| pattern(c))
        .collect::<Result<_, HookError>>()?;
    Ok(Loaded {
        name: String::new(),
        file,
        annotations,
        commands,
    })
}

impl Loaded {
    fn applies(&self, spec: &Spec, has_bind_mounts: bool) -> bool {
        let w = &self.file.when;
        if w.always == Some(true) || (w.has_bind_mounts == Some(true) && has_bind_mounts) {
            return true;
        }
        let annotations = spec.annotations().clone().unwrap_or_default();
        let annotated = self.annotations.iter().any(|(key, value)| {
            annotations
                .iter()
                .any(|(k, v)| key.is_match(k) && value.is_match(v))
        });
        let command = spec
            .process()
            .as_ref()
            .and_then(|p| p.args().as_ref())
            .and_then(|a| a.first());
        let commanded = command.is_some_and(|c| self.commands.iter().any(|p| p.is_match(c)));
        annotated || commanded
    }
}

fn oci_hook(p: &Program) -> Hook {
    let mut hook = Hook::default();
    hook.set_path(p.path.clone())
        .set_args(Some(p.args.clone()).filter(|a| !a.is_empty()))
        .set_env(Some(p.env.clone()).filter(|e| !e.is_empty()))
        .set_timeout(p.timeout);
    hook
}

fn stage_list<'a>(hooks: &'a mut Hooks, stage: &str) -> &'a mut Vec<Hook> {
    let list = match stage {
        #[allow(deprecated)]
        "prestart" => hooks.prestart_mut(),
        "createRuntime" => hooks.create_runtime_mut(),
        "createContainer" => hooks.create_container_mut(),
        "startContainer" => hooks.start_container_mut(),
        "poststart" => hooks.poststart_mut(),
        // `read` let no other name through.
        _ => hooks.poststop_mut(),
    };
    list.get_or_insert_with(Vec::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(args: &[&str], annotations: &[(&str, &str)]) -> Spec {
        let mut spec = Spec::default();
        let mut process = spec.process().clone().unwrap_or_default();
        process.set_args(Some(args.iter().map(|a| a.to_string()).collect()));
        spec.set_process(Some(process));
        let map = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        spec.set_annotations(Some(map));
        spec.set_hooks(None);
        spec
    }

    fn write(dir: &Path, name: &str, when: &str, stages: &str) {
        let text = format!(
            r#"{{"version":"1.0.0","hook":{{"path":"/bin/sh","args":["sh","-c","{name}"]}},"when":{when},"stages":{stages}}}"#
        );
        std::fs::write(dir.join(name), text).unwrap();
    }

    fn names(spec: &Spec, stage: fn(&Hooks) -> &Option<Vec<Hook>>) -> Vec<String> {
        let hooks = spec.hooks().clone().unwrap_or_default();
        stage(&hooks)
            .clone()
            .unwrap_or_default()
            .iter()
            .map(|h| h.args().clone().unwrap_or_default()[2].clone())
            .collect()
    }

    #[test]
    fn hooks_apply_when_one_condition_holds() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(
            d,
            "10-always.json",
            r#"{"always":true}"#,
            r#"["prestart","poststop"]"#,
        );
        write(d, "20-never.json", r#"{"always":false}"#, r#"["prestart"]"#);
        write(
            d,
            "30-gpu.json",
            r#"{"annotations":{"^vendor\\.com/gpu$":"^yes$"}}"#,
            r#"["createRuntime"]"#,
        );
        write(
            d,
            "40-sh.json",
            r#"{"commands":["/sh$"]}"#,
            r#"["poststart"]"#,
        );
        write(
            d,
            "50-mounts.json",
            r#"{"hasBindMounts":true}"#,
            r#"["startContainer"]"#,
        );
        let mut plain = spec(&["/bin/app"], &[]);
        assert_eq!(
            apply(&[d.to_owned()], &mut plain, false),
            ["10-always.json"]
        );
        let mut gpu = spec(&["/bin/sh"], &[("vendor.com/gpu", "yes")]);
        let applied = apply(&[d.to_owned()], &mut gpu, true);
        assert_eq!(
            applied,
            [
                "10-always.json",
                "30-gpu.json",
                "40-sh.json",
                "50-mounts.json"
            ]
        );
        #[allow(deprecated)]
        let prestart = names(&gpu, |h| h.prestart());
        assert_eq!(prestart, ["10-always.json"]);
        assert_eq!(names(&gpu, |h| h.create_runtime()), ["30-gpu.json"]);
        assert_eq!(names(&gpu, |h| h.poststop()), ["10-always.json"]);
        let other_value = spec(&["/bin/app"], &[("vendor.com/gpu", "no")]);
        let mut other = other_value;
        assert_eq!(
            apply(&[d.to_owned()], &mut other, false),
            ["10-always.json"]
        );
    }

    #[test]
    fn a_later_directory_replaces_a_file_and_broken_files_are_skipped() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        write(
            a.path(),
            "hook.json",
            r#"{"always":true}"#,
            r#"["prestart"]"#,
        );
        write(
            b.path(),
            "hook.json",
            r#"{"always":false}"#,
            r#"["prestart"]"#,
        );
        write(a.path(), "no-stage.json", r#"{"always":true}"#, "[]");
        write(
            a.path(),
            "bad-stage.json",
            r#"{"always":true}"#,
            r#"["later"]"#,
        );
        write(a.path(), "no-when.json", "{}", r#"["prestart"]"#);
        write(
            a.path(),
            "bad-regex.json",
            r#"{"commands":["("]}"#,
            r#"["prestart"]"#,
        );
        std::fs::write(a.path().join("junk.json"), "{").unwrap();
        let dirs = [a.path().to_owned(), b.path().to_owned()];
        assert!(apply(&dirs, &mut spec(&["x"], &[]), false).is_empty());
        assert_eq!(
            apply(&dirs[..1], &mut spec(&["x"], &[]), false),
            ["hook.json"]
        );
        let err = read(&a.path().join("no-when.json"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no-when.json") && err.contains("no condition"),
            "{err}"
        );
    }
}
