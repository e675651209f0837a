//! The kubelets that run their pods on this crust, and whether they take their statistics from
//! it (`PodAndContainerStatsFromCRI`). kubelet's built-in cAdvisor knows the containers of
//! containerd and CRI-O only: without the gate its `/metrics/cadvisor` shows crust's containers
//! as bare cgroups, with no pod or container name to chart or alert on.
//!
//! Read as kubelet reads its settings: the `--config` file, then the `--config-dir` drop-ins in
//! name order, then the command line's flags, each over the one before.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::Finding;

const GATE: &str = "PodAndContainerStatsFromCRI";
/// kubelet's endpoint when nothing names one.
const DEFAULT_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";

/// What a kubelet process was told, as far as this check cares.
#[derive(Debug, Default, PartialEq)]
struct Settings {
    endpoint: Option<String>,
    gate: Option<bool>,
}

/// The fields of a KubeletConfiguration file this check reads.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct File {
    container_runtime_endpoint: Option<String>,
    feature_gates: std::collections::BTreeMap<String, bool>,
}

impl Settings {
    fn apply_file(&mut self, text: &str) -> Result<(), String> {
        let file: File = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
        if file.container_runtime_endpoint.is_some() {
            self.endpoint = file.container_runtime_endpoint;
        }
        if let Some(on) = file.feature_gates.get(GATE) {
            self.gate = Some(*on);
        }
        Ok(())
    }

    fn apply_flags(&mut self, flags: &Flags) {
        if let Some(e) = &flags.endpoint {
            self.endpoint = Some(e.clone());
        }
        for gate in flags.gates.iter().flat_map(|g| g.split(',')) {
            if let Some((GATE, value)) = gate.trim().split_once('=') {
                self.gate = Some(value.trim().eq_ignore_ascii_case("true"));
            }
        }
    }
}

/// The flags of kubelet's command line this check reads (`--name=value` or `--name value`).
#[derive(Debug, Default)]
struct Flags {
    config: Option<String>,
    config_dir: Option<String>,
    endpoint: Option<String>,
    gates: Vec<String>,
}

fn flags(args: &[String]) -> Flags {
    let mut f = Flags::default();
    let mut it = args.iter().skip(1);
    while let Some(arg) = it.next() {
        let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            continue;
        };
        let (name, value) = match flag.split_once('=') {
            Some((n, v)) => (n, Some(v.to_owned())),
            None => (flag, None),
        };
        let slot = match name {
            "config" => &mut f.config,
            "config-dir" => &mut f.config_dir,
            "container-runtime-endpoint" => &mut f.endpoint,
            "feature-gates" => {
                f.gates.extend(value.or_else(|| it.next().cloned()));
                continue;
            }
            _ => continue,
        };
        *slot = value.or_else(|| it.next().cloned());
    }
    f
}

/// One running kubelet: its pid and what it was told.
struct Kubelet {
    pid: i32,
    config: Option<String>,
    settings: Result<Settings, String>,
}

impl Kubelet {
    fn read(pid: i32, args: &[String]) -> Kubelet {
        let f = flags(args);
        let mut settings = Settings::default();
        let read = |path: &str| -> Result<String, String> {
            let file = in_process(pid, path);
            std::fs::read_to_string(&file).map_err(|e| format!("reading {path}: {e}"))
        };
        let mut texts: Vec<(String, Result<String, String>)> = Vec::new();
        if let Some(c) = &f.config {
            texts.push((c.clone(), read(c)));
        }
        if let Some(dir) = &f.config_dir {
            texts.extend(drop_ins(pid, dir).into_iter().map(|p| {
                let r = read(&p);
                (p, r)
            }));
        }
        let applied = texts.into_iter().try_for_each(|(path, text)| {
            settings
                .apply_file(&text?)
                .map_err(|e| format!("parsing {path}: {e}"))
        });
        settings.apply_flags(&f);
        Kubelet {
            pid,
            config: f.config,
            settings: applied.map(|()| settings),
        }
    }

    fn runs_on(&self, listen: &str) -> bool {
        self.settings.as_ref().is_ok_and(|s| {
            socket(s.endpoint.as_deref().unwrap_or(DEFAULT_ENDPOINT)) == socket(listen)
        })
    }

    fn name(&self) -> String {
        match &self.config {
            Some(c) => format!("kubelet {} (--config {c})", self.pid),
            None => format!("kubelet {}", self.pid),
        }
    }
}

/// A path as process `pid` sees it (its root and working directory).
fn in_process(pid: i32, path: &str) -> PathBuf {
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let absolute = if Path::new(path).is_absolute() {
        PathBuf::from(path)
    } else {
        std::fs::read_link(proc.join("cwd"))
            .unwrap_or_default()
            .join(path)
    };
    proc.join("root")
        .join(absolute.strip_prefix("/").unwrap_or(&absolute))
}

/// kubelet's drop-ins: the `*.conf` files of the directory, in name order.
fn drop_ins(pid: i32, dir: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(in_process(pid, dir))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".conf"))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|n| Path::new(dir).join(n).to_string_lossy().into_owned())
        .collect()
}

/// A CRI endpoint's socket path, with or without `unix://`.
fn socket(endpoint: &str) -> &str {
    endpoint.strip_prefix("unix://").unwrap_or(endpoint)
}

/// Every process named kubelet, with its command line.
fn running() -> Vec<(i32, Vec<String>)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "kubelet")
        })
        .filter_map(|pid| {
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let args = raw
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            Some((pid, args))
        })
        .collect()
}

/// The `kubelet` line of `crust check`.
pub fn statistics(listen: &str) -> Finding {
    let kubelets: Vec<Kubelet> = running()
        .iter()
        .map(|(pid, args)| Kubelet::read(*pid, args))
        .collect();
    let mut problems = Vec::new();
    let mut fine = Vec::new();
    for k in &kubelets {
        match &k.settings {
            Err(e) => problems.push(format!("{}: {e}", k.name())),
            Ok(_) if !k.runs_on(listen) => {}
            Ok(s) if s.gate == Some(true) => fine.push(k.name()),
            Ok(_) => problems.push(format!(
                "{} runs on crust without {GATE}: its /metrics/cadvisor shows crust's \
                 containers without pod or container names (the README's kubelet configuration)",
                k.name()
            )),
        }
    }
    if !problems.is_empty() {
        return Finding::Warn(problems.join("; "));
    }
    if fine.is_empty() {
        return Finding::Ok(format!("no kubelet runs on {listen}"));
    }
    Finding::Ok(format!(
        "{} takes its statistics from crust ({GATE})",
        fine.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn flags_in_both_spellings() {
        let f = flags(&args(
            "kubelet --config /etc/k.yaml --feature-gates=A=true,PodAndContainerStatsFromCRI=true \
             -v=2 --container-runtime-endpoint unix:///run/crust/crust.sock --config-dir=/d",
        ));
        assert_eq!(f.config.as_deref(), Some("/etc/k.yaml"));
        assert_eq!(f.config_dir.as_deref(), Some("/d"));
        assert_eq!(f.endpoint.as_deref(), Some("unix:///run/crust/crust.sock"));
        let mut s = Settings::default();
        s.apply_flags(&f);
        assert_eq!(s.gate, Some(true));
    }

    #[test]
    fn the_command_line_wins_over_the_files() {
        let mut s = Settings::default();
        s.apply_file(
            "kind: KubeletConfiguration\ncontainerRuntimeEndpoint: unix:///run/crust/crust.sock\n\
             featureGates: {EventedPLEG: true, PodAndContainerStatsFromCRI: true}\n",
        )
        .unwrap();
        assert_eq!(
            s,
            Settings {
                endpoint: Some("unix:///run/crust/crust.sock".into()),
                gate: Some(true)
            }
        );
        s.apply_file("featureGates:\n  PodAndContainerStatsFromCRI: false\n")
            .unwrap();
        assert_eq!(s.gate, Some(false), "a later drop-in wins");
        s.apply_flags(&flags(&args(
            "kubelet --feature-gates PodAndContainerStatsFromCRI=true",
        )));
        assert_eq!(s.gate, Some(true), "the flag wins");
        assert!(s.apply_file("featureGates: [").is_err());
    }

    #[test]
    fn a_kubelet_without_an_endpoint_runs_on_containerd() {
        let k = Kubelet {
            pid: 1,
            config: None,
            settings: Ok(Settings::default()),
        };
        assert!(k.runs_on(DEFAULT_ENDPOINT));
        assert!(!k.runs_on("unix:///run/crust/crust.sock"));
        let k = Kubelet {
            settings: Ok(Settings {
                endpoint: Some("/run/crust/crust.sock".into()),
                gate: None,
            }),
            ..k
        };
        assert!(k.runs_on("unix:///run/crust/crust.sock"));
    }
}
