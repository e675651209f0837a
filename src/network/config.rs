//! Reading CNI network configuration files (`.conflist`, and single-plugin `.conf`/`.json`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Attachment, CniError};

/// A network configuration list, as loaded from one file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetworkList {
    pub name: String,
    pub cni_version: String,
    pub plugins: Vec<PluginConf>,
    pub source: PathBuf,
}

/// One plugin's configuration: its `type` and the whole JSON object to hand it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PluginConf {
    pub kind: String,
    pub conf: Map<String, Value>,
}

/// Loads the lexically first `.conflist`, `.conf` or `.json` file in `dir`.
#[cfg(test)]
pub fn load_dir(dir: &Path) -> Result<NetworkList, CniError> {
    load_file(&first_file(dir)?)
}

/// The lexically first `.conflist`, `.conf` or `.json` file in `dir`.
pub fn first_file(dir: &Path) -> Result<PathBuf, CniError> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|_| CniError::NoConfig(dir.to_owned()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("conflist" | "conf" | "json")
            )
        })
        .collect();
    files.sort();
    files
        .into_iter()
        .next()
        .ok_or_else(|| CniError::NoConfig(dir.to_owned()))
}

pub fn load_file(path: &Path) -> Result<NetworkList, CniError> {
    let text = std::fs::read(path).map_err(|e| CniError::BadConfig {
        path: path.to_owned(),
        msg: e.to_string(),
    })?;
    parse(path, &text)
}

/// Parses the config `text` that is (or is about to be) the file at `path`.
pub fn parse(path: &Path, text: &[u8]) -> Result<NetworkList, CniError> {
    let bad = |msg: String| CniError::BadConfig {
        path: path.to_owned(),
        msg,
    };
    let value: Value = serde_json::from_slice(text).map_err(|e| bad(e.to_string()))?;
    let Value::Object(mut top) = value else {
        return Err(bad("not a JSON object".into()));
    };
    let name = str_field(&top, "name").ok_or_else(|| bad("missing \"name\"".into()))?;
    let cni_version = str_field(&top, "cniVersion").unwrap_or_else(|| "0.2.0".into());
    let raw_plugins = match top.remove("plugins") {
        Some(Value::Array(list)) => list,
        Some(_) => return Err(bad("\"plugins\" is not a list".into())),
        // A single-plugin .conf file is a list of one.
        None => vec![Value::Object(top)],
    };
    if raw_plugins.is_empty() {
        return Err(bad("\"plugins\" is empty".into()));
    }
    let mut plugins = Vec::with_capacity(raw_plugins.len());
    for (i, p) in raw_plugins.into_iter().enumerate() {
        let Value::Object(conf) = p else {
            return Err(bad(format!("plugin {i} is not a JSON object")));
        };
        let kind =
            str_field(&conf, "type").ok_or_else(|| bad(format!("plugin {i} has no \"type\"")))?;
        plugins.push(PluginConf { kind, conf });
    }
    Ok(NetworkList {
        name,
        cni_version,
        plugins,
        source: path.to_owned(),
    })
}

fn str_field(m: &Map<String, Value>, key: &str) -> Option<String> {
    m.get(key).and_then(Value::as_str).map(str::to_owned)
}

impl NetworkList {
    /// The plugins that have work to do for `att`, in the list's order. The portmap plugin
    /// does nothing for a pod without port mappings: its ADD hands the previous result on, its
    /// DEL and CHECK return at once (containernetworking/plugins, checked against Debian's
    /// build with strace: it runs no iptables then). Not starting it spares a Go process on
    /// every pod's way up and down.
    pub fn plugins_for<'a>(
        &'a self,
        att: &'a Attachment,
    ) -> impl DoubleEndedIterator<Item = &'a PluginConf> {
        self.plugins
            .iter()
            .filter(|p| p.kind != "portmap" || !att.port_mappings.is_empty())
    }

    /// The JSON object handed to `plugin` on stdin: its own configuration plus the list's name
    /// and version, the previous result, and the runtime capabilities it declared.
    pub fn plugin_conf(
        &self,
        plugin: &PluginConf,
        att: &Attachment,
        prev: Option<&Value>,
    ) -> Value {
        let mut conf = plugin.conf.clone();
        conf.insert("name".into(), Value::String(self.name.clone()));
        conf.insert("cniVersion".into(), Value::String(self.cni_version.clone()));
        if let Some(prev) = prev {
            conf.insert("prevResult".into(), prev.clone());
        }
        let caps = conf.get("capabilities").and_then(Value::as_object);
        let wants =
            |cap: &str| caps.and_then(|c| c.get(cap)).and_then(Value::as_bool) == Some(true);
        let mut runtime = Map::new();
        if wants("portMappings") && !att.port_mappings.is_empty() {
            runtime.insert(
                "portMappings".into(),
                serde_json::to_value(&att.port_mappings).unwrap_or_default(),
            );
        }
        if !runtime.is_empty() {
            conf.insert("runtimeConfig".into(), Value::Object(runtime));
        }
        Value::Object(conf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::PortMapping;

    fn att() -> Attachment {
        Attachment {
            container_id: "c1".into(),
            netns: "/run/netns/x".into(),
            ifname: "eth0".into(),
            args: vec![],
            port_mappings: vec![PortMapping {
                host_port: 8080,
                container_port: 80,
                protocol: "tcp".into(),
                host_ip: String::new(),
            }],
        }
    }

    #[test]
    fn first_file_wins_and_conf_becomes_a_list_of_one() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("20-b.conflist"),
            r#"{"name":"b","plugins":[{"type":"x"}]}"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join("10-a.conf"),
            r#"{"cniVersion":"0.4.0","name":"a","type":"bridge","bridge":"br9"}"#,
        )
        .unwrap();
        std::fs::write(dir.path().join("00-ignored.txt"), "nonsense").unwrap();
        let list = load_dir(dir.path()).unwrap();
        assert_eq!(list.name, "a");
        assert_eq!(list.cni_version, "0.4.0");
        assert_eq!(list.plugins.len(), 1);
        assert_eq!(list.plugins[0].kind, "bridge");
    }

    #[test]
    fn bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(load_dir(dir.path()), Err(CniError::NoConfig(_))));
        std::fs::write(
            dir.path().join("a.conflist"),
            r#"{"name":"n","plugins":[{"bridge":1}]}"#,
        )
        .unwrap();
        let err = load_dir(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("a.conflist") && err.contains("no \"type\""),
            "{err}"
        );
    }

    /// The network list a `.conflist` of `json` loads as.
    fn loaded(json: &str) -> NetworkList {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.conflist");
        std::fs::write(&p, json).unwrap();
        load_file(&p).unwrap()
    }

    #[test]
    fn portmap_runs_only_for_a_pod_with_port_mappings() {
        let list = loaded(
            r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge"},
                {"type":"portmap","capabilities":{"portMappings":true}},{"type":"tuning"}]}"#,
        );
        let kinds = |att: &Attachment| -> Vec<String> {
            list.plugins_for(att).map(|p| p.kind.clone()).collect()
        };
        assert_eq!(kinds(&att()), ["bridge", "portmap", "tuning"]);
        let without = Attachment {
            port_mappings: vec![],
            ..att()
        };
        assert_eq!(kinds(&without), ["bridge", "tuning"]);
        let back: Vec<_> = list.plugins_for(&without).rev().map(|p| &p.kind).collect();
        assert_eq!(back, ["tuning", "bridge"]);
    }

    #[test]
    fn capabilities_become_runtime_config_only_when_declared() {
        let list = loaded(
            r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge"},
                {"type":"portmap","capabilities":{"portMappings":true}}]}"#,
        );
        let prev = serde_json::json!({"cniVersion":"1.0.0"});
        let bridge = list.plugin_conf(&list.plugins[0], &att(), None);
        assert_eq!(bridge["name"], "n");
        assert!(bridge.get("runtimeConfig").is_none() && bridge.get("prevResult").is_none());
        let portmap = list.plugin_conf(&list.plugins[1], &att(), Some(&prev));
        assert_eq!(
            portmap["runtimeConfig"]["portMappings"][0]["hostPort"],
            8080
        );
        assert_eq!(portmap["prevResult"], prev);
    }
}
