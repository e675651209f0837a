//! CNI: loads the network configuration from the CNI conf dir and runs its plugins (ADD, DEL,
//! CHECK) against a pod's network namespace, following the CNI 1.0 spec (and the 0.3/0.4 result
//! formats older plugins print), and STATUS for a list of CNI 1.1 (`status.rs`). The configuration list used for ADD is returned with the result
//! so the caller can persist both and run DEL later with exactly what ADD saw, even if the
//! conf dir changed in between.
//!
//! Only the lexically first configuration file is used, as containerd does by default. crust
//! brings the loopback interface up itself, so no `loopback` plugin is needed in the list.

mod announce;
mod config;
mod exec;
#[cfg(any(test, fuzzing))]
pub mod fuzz;
pub mod masquerade;
mod result;
mod status;
pub mod template;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

pub use config::NetworkList;
pub use result::CniResult;

use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum CniError {
    #[error("no CNI network configuration in {0}")]
    NoConfig(PathBuf),
    #[error("CNI config {path}: {msg}")]
    BadConfig { path: PathBuf, msg: String },
    #[error("CNI plugin {plugin:?} (network {network:?}) not found in {dirs}")]
    PluginMissing {
        plugin: String,
        network: String,
        dirs: String,
    },
    #[error("CNI plugin {plugin} {command}: {msg}")]
    PluginFailed {
        plugin: String,
        command: &'static str,
        msg: String,
    },
    #[error("CNI plugin {plugin} {command} timed out after {timeout:?}")]
    Timeout {
        plugin: String,
        command: &'static str,
        timeout: Duration,
    },
    #[error("CNI plugin {plugin} {command}: {source}")]
    Spawn {
        plugin: String,
        command: &'static str,
        source: std::io::Error,
    },
    /// A plugin's STATUS (CNI 1.1) said it cannot set up pods now: its agent is down, say.
    #[error("CNI network {network:?} is not ready: plugin {plugin} STATUS: {msg}")]
    NotReady {
        network: String,
        plugin: String,
        msg: String,
    },
    #[error("pod_cidr {0:?} is not a CIDR such as 10.88.0.0/16")]
    BadPodCidr(String),
}

/// One pod's attachment to the network: everything a plugin is told about the pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    pub container_id: String,
    pub netns: PathBuf,
    pub ifname: String,
    /// `K8S_POD_*` and similar pairs, passed in `CNI_ARGS`.
    pub args: Vec<(String, String)>,
    pub port_mappings: Vec<PortMapping>,
}

/// A host port forwarded to the pod, in the `portMappings` capability format.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PortMapping {
    pub host_port: i32,
    pub container_port: i32,
    pub protocol: String,
    #[serde(rename = "hostIP", skip_serializing_if = "String::is_empty", default)]
    pub host_ip: String,
}

/// Where to find configuration and plugins, and how long a plugin may run.
#[derive(Debug, Clone)]
pub struct CniSettings {
    pub conf_dir: PathBuf,
    /// Written to `conf_dir` for the pod CIDR kubelet sends (see `template.rs`).
    pub conf_template: Option<PathBuf>,
    pub bin_dirs: Vec<PathBuf>,
    pub plugin_timeout: Duration,
}

/// The CNI front end. Cheap to share; the loaded configuration is cached and reloaded when the
/// file in use changes (another file sorting first, or the file's mtime or size moving). The
/// settings themselves change whole (`set_settings`, a configuration reload): a call under way
/// keeps the settings it started with.
pub struct Cni {
    settings: std::sync::RwLock<std::sync::Arc<CniSettings>>,
    cache: Mutex<Option<(ConfigKey, std::sync::Arc<NetworkList>)>>,
    /// What kubelet last sent in UpdateRuntimeConfig (comma-separated, one per family).
    pod_cidr: Mutex<String>,
    /// The last STATUS round (see `status.rs`); its lock makes concurrent callers share one.
    status: tokio::sync::Mutex<Option<status::Seen>>,
}

type ConfigKey = (PathBuf, SystemTime, u64);

impl CniSettings {
    pub fn from_config(c: &crate::config::NetworkConfig) -> CniSettings {
        CniSettings {
            conf_dir: c.conf_dir.clone(),
            conf_template: c.conf_template.clone(),
            bin_dirs: c.bin_dirs.clone(),
            plugin_timeout: Duration::from_millis(c.plugin_timeout_ms),
        }
    }
}

impl Cni {
    pub fn new(settings: CniSettings) -> Cni {
        Cni {
            settings: std::sync::RwLock::new(std::sync::Arc::new(settings)),
            cache: Mutex::new(None),
            pod_cidr: Mutex::new(String::new()),
            status: tokio::sync::Mutex::new(None),
        }
    }

    pub fn settings(&self) -> std::sync::Arc<CniSettings> {
        self.settings
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Uses `settings` from now on; the cached network list is read again from them.
    pub fn set_settings(&self, settings: CniSettings) {
        *self.settings.write().unwrap_or_else(|e| e.into_inner()) = std::sync::Arc::new(settings);
        *self.cache.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The network list that ADD would use now, with every plugin binary present.
    pub fn network(&self) -> Result<std::sync::Arc<NetworkList>, CniError> {
        let settings = self.settings();
        let dir = &settings.conf_dir;
        let file = config::first_file(dir)?;
        let meta = std::fs::metadata(&file).map_err(|_| CniError::NoConfig(dir.clone()))?;
        let key = (
            file,
            meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            meta.len(),
        );
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((seen, list)) = cache.as_ref() {
            if *seen == key {
                return Ok(list.clone());
            }
        }
        let list = std::sync::Arc::new(config::load_file(&key.0)?);
        for plugin in &list.plugins {
            self.find_plugin(&list.name, &plugin.kind)?;
        }
        *cache = Some((key, list.clone()));
        Ok(list)
    }

    /// Takes the pod CIDRs kubelet sends (comma-separated, one per family): each must be a
    /// CIDR; the first is written through the configured template into the conf dir (the file
    /// written is returned; None without a template), then all are kept for Status.
    pub fn set_pod_cidr(&self, pod_cidr: &str) -> Result<Option<PathBuf>, CniError> {
        let mut parts = pod_cidr.split(',').map(str::trim).filter(|p| !p.is_empty());
        if let Some(bad) = parts.clone().find(|p| !crate::config::is_cidr(p)) {
            return Err(CniError::BadPodCidr(bad.to_owned()));
        }
        let settings = self.settings();
        let written = match (&settings.conf_template, parts.next()) {
            (Some(t), Some(first)) => Some(template::render(t, &settings.conf_dir, first)?),
            _ => None,
        };
        *self.pod_cidr.lock().unwrap_or_else(|e| e.into_inner()) = pod_cidr.to_owned();
        Ok(written)
    }

    /// The pod CIDRs kubelet last sent.
    pub fn pod_cidr(&self) -> String {
        self.pod_cidr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Runs ADD through the whole list; on failure the plugins that succeeded are undone with
    /// DEL before the error is returned.
    pub async fn add(&self, list: &NetworkList, att: &Attachment) -> Result<CniResult, CniError> {
        let mut prev: Option<serde_json::Value> = None;
        for plugin in list.plugins_for(att) {
            let conf = list.plugin_conf(plugin, att, prev.as_ref());
            match exec::run(self, &plugin.kind, &list.name, "ADD", att, &conf).await {
                Ok(out) => prev = Some(out),
                Err(e) => {
                    if let Err(del) = self.del(list, att, prev.as_ref()).await {
                        tracing::warn!(error = %del, "CNI DEL after failed ADD");
                    }
                    return Err(e);
                }
            }
        }
        let raw = prev.unwrap_or_else(|| serde_json::json!({"cniVersion": list.cni_version}));
        let result = CniResult::parse(raw).map_err(|msg| CniError::PluginFailed {
            plugin: list
                .plugins_for(att)
                .last()
                .map(|p| p.kind.clone())
                .unwrap_or_default(),
            command: "ADD",
            msg,
        })?;
        announce::addresses(att, &result).await;
        Ok(result)
    }

    /// Runs DEL through the list in reverse. Every plugin is called even if one fails (so that
    /// IP allocations are released whatever else went wrong); the first error is returned.
    ///
    /// A network namespace that is gone (its pin unmounted or removed by a teardown that a crash
    /// interrupted) is passed as an empty `CNI_NETNS`, as containerd does and the CNI spec
    /// allows for DEL: the plugins then release what they hold outside it (IP allocations,
    /// host-side rules) instead of failing on a path that names no namespace.
    pub async fn del(
        &self,
        list: &NetworkList,
        att: &Attachment,
        prev: Option<&serde_json::Value>,
    ) -> Result<(), CniError> {
        let gone;
        let att = if att.netns.as_os_str().is_empty() || is_netns(&att.netns) {
            att
        } else {
            tracing::info!(netns = %att.netns.display(), "CNI DEL: the network namespace is gone");
            gone = Attachment {
                netns: PathBuf::new(),
                ..att.clone()
            };
            &gone
        };
        let mut first_err = None;
        for plugin in list.plugins_for(att).rev() {
            let conf = list.plugin_conf(plugin, att, prev);
            if let Err(e) = exec::run(self, &plugin.kind, &list.name, "DEL", att, &conf).await {
                tracing::warn!(error = %e, "CNI DEL");
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Runs CHECK through the list (spec 0.4.0 and later).
    pub async fn check(
        &self,
        list: &NetworkList,
        att: &Attachment,
        prev: &serde_json::Value,
    ) -> Result<(), CniError> {
        for plugin in list.plugins_for(att) {
            let conf = list.plugin_conf(plugin, att, Some(prev));
            exec::run(self, &plugin.kind, &list.name, "CHECK", att, &conf).await?;
        }
        Ok(())
    }

    fn find_plugin(&self, network: &str, kind: &str) -> Result<PathBuf, CniError> {
        let missing = || CniError::PluginMissing {
            plugin: kind.to_owned(),
            network: network.to_owned(),
            dirs: self.path_var(),
        };
        if kind.contains('/') || kind.is_empty() {
            return Err(missing());
        }
        self.settings()
            .bin_dirs
            .iter()
            .map(|d| d.join(kind))
            .find(|p| is_executable(p))
            .ok_or_else(missing)
    }

    fn path_var(&self) -> String {
        let dirs: Vec<_> = self
            .settings()
            .bin_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        dirs.join(":")
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether `path` is a network namespace (a pin: the nsfs bind mount of one).
fn is_netns(path: &Path) -> bool {
    nix::sys::statfs::statfs(path)
        .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::NSFS_MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_cidr_list_is_kept_only_when_every_part_is_a_cidr() {
        let cni = Cni::new(CniSettings {
            conf_dir: PathBuf::from("/nonexistent"),
            conf_template: None,
            bin_dirs: Vec::new(),
            plugin_timeout: Duration::from_secs(1),
        });
        assert_eq!(cni.set_pod_cidr("10.244.0.0/24, fd00::/64").unwrap(), None);
        assert_eq!(cni.pod_cidr(), "10.244.0.0/24, fd00::/64");
        let err = cni.set_pod_cidr("10.244.1.0/24,10.244.1.0").unwrap_err();
        assert!(
            matches!(&err, CniError::BadPodCidr(p) if p == "10.244.1.0"),
            "{err}"
        );
        assert_eq!(
            cni.pod_cidr(),
            "10.244.0.0/24, fd00::/64",
            "a refused list changes nothing"
        );
    }
}
