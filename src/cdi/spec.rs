//! One CDI spec file as the CDI specification defines it (versions 0.3.0 to 1.1.0): its types,
//! read from JSON or YAML with unknown fields refused, and validated: the `kind` and device
//! names, every container edit, and a `cdiVersion` high enough for the fields the file uses
//! (a spec declaring 0.5.0 that uses `additionalGids`, a 0.7.0 field, is refused, as the Go
//! reference library refuses it).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The versions of the specification, oldest first; files may declare any of them, but the
/// earliest one supported is 0.3.0 (what a file uses decides the rest, `required_version`).
const VERSIONS: [(u32, u32, u32); 10] = [
    (0, 1, 0),
    (0, 2, 0),
    (0, 3, 0),
    (0, 4, 0),
    (0, 5, 0),
    (0, 6, 0),
    (0, 7, 0),
    (0, 8, 0),
    (1, 0, 0),
    (1, 1, 0),
];
const EARLIEST: (u32, u32, u32) = (0, 3, 0);

/// The hook names a CDI spec may use: the OCI runtime spec's.
pub const HOOK_NAMES: [&str; 6] = [
    "prestart",
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
];

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SpecFile {
    pub cdi_version: String,
    /// `vendor/class`, e.g. `vendor.com/gpu`.
    pub kind: String,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    pub devices: Vec<Device>,
    /// Edits for every container that gets at least one device of this file.
    #[serde(default)]
    pub container_edits: Option<ContainerEdits>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Device {
    pub name: String,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    pub container_edits: ContainerEdits,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ContainerEdits {
    /// `NAME=value`; replaces a variable of the same name.
    #[serde(default)]
    pub env: Vec<String>,
    #[serde(default)]
    pub device_nodes: Vec<DeviceNode>,
    #[serde(default)]
    pub hooks: Vec<Hook>,
    #[serde(default)]
    pub mounts: Vec<Mount>,
    #[serde(default)]
    pub intel_rdt: Option<IntelRdt>,
    #[serde(default)]
    pub additional_gids: Vec<u32>,
    /// Host network interfaces moved into the container (1.1.0).
    #[serde(default)]
    pub net_devices: Vec<NetDevice>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DeviceNode {
    /// Where the node appears in the container.
    pub path: String,
    /// The node on the host (0.5.0); `path` when unset.
    #[serde(default)]
    pub host_path: Option<String>,
    /// `c`, `b`, `u` or `p`; read from the host node when unset.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    #[serde(default)]
    pub major: Option<i64>,
    #[serde(default)]
    pub minor: Option<i64>,
    #[serde(default)]
    pub file_mode: Option<u32>,
    /// The device cgroup access, a combination of `r`, `w` and `m` (`rwm` when unset), or
    /// `none` for no access rule at all.
    #[serde(default)]
    pub permissions: Option<String>,
    #[serde(default)]
    pub uid: Option<u32>,
    #[serde(default)]
    pub gid: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Mount {
    pub host_path: String,
    pub container_path: String,
    /// The filesystem type (0.4.0); a bind mount names none and says `bind` in its options.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    #[serde(default)]
    pub options: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Hook {
    pub hook_name: String,
    pub path: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: Vec<String>,
    #[serde(default)]
    pub timeout: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IntelRdt {
    #[serde(default, rename = "closID")]
    pub clos_id: Option<String>,
    #[serde(default)]
    pub l3_cache_schema: Option<String>,
    #[serde(default)]
    pub mem_bw_schema: Option<String>,
    /// 1.1.0.
    #[serde(default)]
    pub schemata: Option<Vec<String>>,
    /// 1.1.0.
    #[serde(default)]
    pub enable_monitoring: Option<bool>,
    /// Before 1.1.0 only.
    #[serde(default, rename = "enableCMT")]
    pub enable_cmt: Option<bool>,
    /// Before 1.1.0 only.
    #[serde(default, rename = "enableMBM")]
    pub enable_mbm: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NetDevice {
    pub host_interface_name: String,
    pub name: String,
}

/// Reads a spec from the text of a `.json` or `.yaml` file (`json` says which); the error is
/// the parser's, with its line and column.
pub fn parse(text: &[u8], json: bool) -> Result<SpecFile, String> {
    if json {
        serde_json::from_slice(text).map_err(|e| e.to_string())
    } else {
        serde_yaml_ng::from_slice(text).map_err(|e| e.to_string())
    }
}

/// The `kind` a file that does not parse as a spec still declares, if it is readable at all:
/// enough to tell which requests it may have been meant for.
pub fn loose_kind(text: &[u8], json: bool) -> Option<String> {
    let kind = if json {
        serde_json::from_slice::<serde_json::Value>(text)
            .ok()?
            .get("kind")?
            .as_str()?
            .to_owned()
    } else {
        serde_yaml_ng::from_slice::<serde_yaml_ng::Value>(text)
            .ok()?
            .get("kind")?
            .as_str()?
            .to_owned()
    };
    Some(kind)
}

/// Checks a parsed spec as the CDI specification asks.
pub fn validate(spec: &SpecFile) -> Result<(), String> {
    let declared = parse_version(&spec.cdi_version)
        .filter(|v| VERSIONS.contains(v))
        .ok_or_else(|| format!("cdiVersion {:?} is not a CDI version", spec.cdi_version))?;
    let (vendor, class) = spec
        .kind
        .split_once('/')
        .ok_or_else(|| format!("kind {:?} is not vendor/class", spec.kind))?;
    vendor_or_class(vendor).map_err(|e| format!("kind {:?}: vendor {e}", spec.kind))?;
    vendor_or_class(class).map_err(|e| format!("kind {:?}: class {e}", spec.kind))?;
    if spec.devices.is_empty() {
        return Err("no devices".into());
    }
    if let Some(edits) = &spec.container_edits {
        validate_edits(edits).map_err(|e| format!("containerEdits: {e}"))?;
    }
    let mut seen = std::collections::BTreeSet::new();
    for d in &spec.devices {
        device_name(&d.name).map_err(|e| format!("device {:?}: name {e}", d.name))?;
        if !seen.insert(d.name.as_str()) {
            return Err(format!("device {:?} is defined twice", d.name));
        }
        if is_empty(&d.container_edits) {
            return Err(format!("device {:?}: no containerEdits", d.name));
        }
        validate_edits(&d.container_edits).map_err(|e| format!("device {:?}: {e}", d.name))?;
    }
    let (needed, why) = required_version(spec);
    if needed > declared {
        return Err(format!(
            "cdiVersion {} is too low: {why} needs {}",
            spec.cdi_version,
            show(needed)
        ));
    }
    if declared >= (1, 1, 0) {
        let mut rdts = all_edits(spec).filter_map(|e| e.intel_rdt.as_ref());
        if rdts.any(|r| r.enable_cmt.is_some() || r.enable_mbm.is_some()) {
            return Err(format!(
                "intelRdt.enableCMT and enableMBM are not part of CDI {} (use enableMonitoring)",
                spec.cdi_version
            ));
        }
    }
    Ok(())
}

/// `vendor.com/class=name`, each part as the specification allows.
pub fn parse_qualified(name: &str) -> Result<(&str, &str, &str), String> {
    let (kind, device) = name.split_once('=').ok_or("is not vendor.com/class=name")?;
    let (vendor, class) = kind.split_once('/').ok_or("is not vendor.com/class=name")?;
    vendor_or_class(vendor).map_err(|e| format!("vendor {e}"))?;
    vendor_or_class(class).map_err(|e| format!("class {e}"))?;
    device_name(device).map_err(|e| format!("device name {e}"))?;
    Ok((vendor, class, device))
}

fn validate_edits(e: &ContainerEdits) -> Result<(), String> {
    for env in &e.env {
        if env.split_once('=').is_none_or(|(k, _)| k.is_empty()) {
            return Err(format!("env {env:?} is not NAME=value"));
        }
    }
    for d in &e.device_nodes {
        if !d.path.starts_with('/') {
            return Err(format!("deviceNodes: path {:?} is not absolute", d.path));
        }
        if let Some(kind) = d.kind.as_deref().filter(|k| !k.is_empty()) {
            if !["b", "c", "u", "p"].contains(&kind) {
                return Err(format!(
                    "deviceNodes {}: type {kind:?} is not b, c, u or p",
                    d.path
                ));
            }
        }
        if let Some(p) = d.permissions.as_deref() {
            if p != "none" && !p.chars().all(|c| matches!(c, 'r' | 'w' | 'm')) {
                return Err(format!(
                    "deviceNodes {}: permissions {p:?} are not a combination of r, w and m",
                    d.path
                ));
            }
        }
    }
    for h in &e.hooks {
        if !HOOK_NAMES.contains(&h.hook_name.as_str()) {
            return Err(format!("hooks: {:?} is not an OCI hook name", h.hook_name));
        }
        if !h.path.starts_with('/') {
            return Err(format!("hooks: path {:?} is not absolute", h.path));
        }
        if let Some(env) = h.env.iter().find(|v| !v.contains('=')) {
            return Err(format!("hooks {}: env {env:?} is not NAME=value", h.path));
        }
        // The OCI runtime spec: a timeout, when set, is more than zero seconds.
        if h.timeout.is_some_and(|t| t <= 0) {
            return Err(format!(
                "hooks {}: timeout must be more than 0 seconds",
                h.path
            ));
        }
    }
    for m in &e.mounts {
        if m.host_path.is_empty() {
            return Err(format!("mounts {}: no hostPath", m.container_path));
        }
        if !m.container_path.starts_with('/') {
            return Err(format!(
                "mounts: containerPath {:?} is not absolute",
                m.container_path
            ));
        }
    }
    let mut names = std::collections::BTreeSet::new();
    for n in &e.net_devices {
        if n.host_interface_name.is_empty() || n.name.is_empty() {
            return Err("netDevices: hostInterfaceName and name are both required".into());
        }
        if !names.insert(&n.name) {
            return Err(format!("netDevices: {:?} is named twice", n.name));
        }
    }
    Ok(())
}

fn is_empty(e: &ContainerEdits) -> bool {
    e == &ContainerEdits::default()
}

fn all_edits(spec: &SpecFile) -> impl Iterator<Item = &ContainerEdits> {
    spec.container_edits
        .iter()
        .chain(spec.devices.iter().map(|d| &d.container_edits))
}

/// The lowest version whose fields the spec uses, and the field that needs it.
fn required_version(spec: &SpecFile) -> ((u32, u32, u32), &'static str) {
    let edits: Vec<&ContainerEdits> = all_edits(spec).collect();
    let any = |f: &dyn Fn(&ContainerEdits) -> bool| edits.iter().any(|e| f(e));
    let rdt = |f: fn(&IntelRdt) -> bool| any(&|e| e.intel_rdt.as_ref().is_some_and(f));
    if any(&|e| !e.net_devices.is_empty()) {
        return ((1, 1, 0), "netDevices");
    }
    if rdt(|r| r.schemata.is_some() || r.enable_monitoring.is_some()) {
        return ((1, 1, 0), "intelRdt.schemata or enableMonitoring");
    }
    if any(&|e| e.intel_rdt.is_some()) {
        return ((0, 7, 0), "intelRdt");
    }
    if any(&|e| !e.additional_gids.is_empty()) {
        return ((0, 7, 0), "additionalGids");
    }
    let class_dot = spec
        .kind
        .split_once('/')
        .is_some_and(|(_, c)| c.contains('.'));
    if !spec.annotations.is_empty() || spec.devices.iter().any(|d| !d.annotations.is_empty()) {
        return ((0, 6, 0), "annotations");
    }
    if class_dot {
        return ((0, 6, 0), "a dot in the class name");
    }
    if spec
        .devices
        .iter()
        .any(|d| !d.name.starts_with(|c: char| c.is_ascii_alphabetic()))
    {
        return ((0, 5, 0), "a device name not starting with a letter");
    }
    if any(&|e| {
        e.device_nodes
            .iter()
            .any(|n| n.host_path.as_deref().is_some_and(|p| !p.is_empty()))
    }) {
        return ((0, 5, 0), "deviceNodes.hostPath");
    }
    if any(&|e| {
        e.mounts
            .iter()
            .any(|m| m.kind.as_deref().is_some_and(|t| !t.is_empty()))
    }) {
        return ((0, 4, 0), "mounts.type");
    }
    (EARLIEST, "every CDI spec")
}

fn parse_version(v: &str) -> Option<(u32, u32, u32)> {
    let mut parts = v.strip_prefix('v').unwrap_or(v).split('.');
    let version = (
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
    );
    parts.next().is_none().then_some(version)
}

fn show((a, b, c): (u32, u32, u32)) -> String {
    format!("{a}.{b}.{c}")
}

/// A vendor or class name: ASCII letters, digits, `_`, `-` and `.`, starting with a letter
/// and ending with a letter or digit.
fn vendor_or_class(name: &str) -> Result<(), String> {
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return Err(format!("{name:?} must start with a letter"));
    }
    if !name.ends_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(format!("{name:?} must end with a letter or digit"));
    }
    match name
        .chars()
        .find(|c| !c.is_ascii_alphanumeric() && !matches!(c, '_' | '-' | '.'))
    {
        Some(c) => Err(format!("{name:?} has {c:?}")),
        None => Ok(()),
    }
}

/// A device name: ASCII letters, digits, `_`, `-`, `.` and `:`, starting and ending with a
/// letter or digit.
fn device_name(name: &str) -> Result<(), String> {
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric())
        || !name.ends_with(|c: char| c.is_ascii_alphanumeric())
    {
        return Err(format!(
            "{name:?} must start and end with a letter or digit"
        ));
    }
    match name
        .chars()
        .find(|c| !c.is_ascii_alphanumeric() && !matches!(c, '_' | '-' | '.' | ':'))
    {
        Some(c) => Err(format!("{name:?} has {c:?}")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = r#"
cdiVersion: "0.6.0"
kind: vendor.example.com/gpu
devices:
  - name: gpu0
    containerEdits:
      env: ["GPU=0"]
      deviceNodes:
        - path: /dev/gpu0
          hostPath: /dev/null
          permissions: rw
          uid: 1000
containerEdits:
  mounts:
    - hostPath: /usr/lib/gpu
      containerPath: /usr/lib/gpu
      options: [ro, bind]
  hooks:
    - hookName: createContainer
      path: /usr/bin/gpu-hook
      args: [gpu-hook, create]
"#;

    #[test]
    fn json_and_yaml_read_the_same_spec() {
        let yaml = parse(YAML.as_bytes(), false).unwrap();
        let json = serde_json::to_vec(&yaml).unwrap();
        assert_eq!(parse(&json, true).unwrap(), yaml);
        validate(&yaml).unwrap();
        let node = &yaml.devices[0].container_edits.device_nodes[0];
        assert_eq!(node.host_path.as_deref(), Some("/dev/null"));
        assert_eq!(
            (node.uid, node.permissions.as_deref()),
            (Some(1000), Some("rw"))
        );
        let edits = yaml.container_edits.as_ref().unwrap();
        assert_eq!(edits.hooks[0].args, ["gpu-hook", "create"]);
    }

    #[test]
    fn unknown_fields_are_refused_where_they_stand() {
        let bad = YAML.replace("permissions: rw", "permissions: rw\n          colour: red");
        let err = parse(bad.as_bytes(), false).unwrap_err();
        assert!(err.contains("unknown field `colour`"), "{err}");
        let err = parse(
            br#"{"cdiVersion":"0.6.0","kind":"a.com/b","devices":[],"x":1}"#,
            true,
        )
        .unwrap_err();
        assert!(err.contains("unknown field `x`"), "{err}");
    }

    /// Each case: a change to the valid spec above, and what validation says of it.
    #[test]
    fn validation_refuses_what_the_specification_refuses() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "cdiVersion: \"0.6.0\"",
                "cdiVersion: \"0.9.0\"",
                "is not a CDI version",
            ),
            (
                "cdiVersion: \"0.6.0\"",
                "cdiVersion: \"0.2.0\"",
                "0.2.0 is too low",
            ),
            (
                "cdiVersion: \"0.6.0\"",
                "cdiVersion: \"0.4.0\"",
                "deviceNodes.hostPath needs 0.5.0",
            ),
            (
                "kind: vendor.example.com/gpu",
                "kind: gpu",
                "is not vendor/class",
            ),
            (
                "kind: vendor.example.com/gpu",
                "kind: -v.com/gpu",
                "must start with a letter",
            ),
            (
                "kind: vendor.example.com/gpu",
                "kind: v.com/g/pu",
                "has '/'",
            ),
            ("name: gpu0", "name: gpu 0", "has ' '"),
            (
                "env: [\"GPU=0\"]",
                "env: [\"GPU\"]",
                "env \"GPU\" is not NAME=value",
            ),
            ("path: /dev/gpu0", "path: dev/gpu0", "is not absolute"),
            (
                "permissions: rw",
                "permissions: rx",
                "not a combination of r, w and m",
            ),
            (
                "hookName: createContainer",
                "hookName: prestop",
                "is not an OCI hook name",
            ),
            (
                "path: /usr/bin/gpu-hook",
                "path: gpu-hook",
                "is not absolute",
            ),
            (
                "args: [gpu-hook, create]",
                "args: [gpu-hook, create]\n      timeout: 0",
                "timeout must be more than 0 seconds",
            ),
            (
                "containerPath: /usr/lib/gpu",
                "containerPath: lib",
                "is not absolute",
            ),
        ];
        for (from, to, expected) in cases {
            let text = YAML.replacen(from, to, 1);
            assert_ne!(text, YAML, "{from}");
            let spec = parse(text.as_bytes(), false).unwrap();
            let err = validate(&spec).unwrap_err();
            assert!(err.contains(expected), "{to}: {err}");
        }
    }

    #[test]
    fn a_version_must_cover_every_field_used() {
        let mut spec = parse(YAML.as_bytes(), false).unwrap();
        spec.devices[0].container_edits.additional_gids = vec![44];
        let err = validate(&spec).unwrap_err();
        assert_eq!(
            err,
            "cdiVersion 0.6.0 is too low: additionalGids needs 0.7.0"
        );
        spec.cdi_version = "0.7.0".into();
        validate(&spec).unwrap();
        spec.devices[0].container_edits.net_devices = vec![NetDevice {
            host_interface_name: "eth9".into(),
            name: "net0".into(),
        }];
        assert!(
            validate(&spec)
                .unwrap_err()
                .contains("netDevices needs 1.1.0")
        );
        spec.cdi_version = "1.1.0".into();
        validate(&spec).unwrap();

        let mut twice = parse(YAML.as_bytes(), false).unwrap();
        twice.devices.push(twice.devices[0].clone());
        assert!(validate(&twice).unwrap_err().contains("defined twice"));
        twice.devices.truncate(1);
        let mut old = twice.clone();
        old.cdi_version = "0.2.0".into();
        old.devices[0].container_edits = ContainerEdits {
            env: vec!["A=1".into()],
            ..Default::default()
        };
        old.container_edits = None;
        assert_eq!(
            validate(&old).unwrap_err(),
            "cdiVersion 0.2.0 is too low: every CDI spec needs 0.3.0"
        );
        twice.devices[0].container_edits = ContainerEdits::default();
        assert!(validate(&twice).unwrap_err().contains("no containerEdits"));
    }

    #[test]
    fn qualified_names() {
        assert_eq!(
            parse_qualified("vendor.com/gpu=0").unwrap(),
            ("vendor.com", "gpu", "0")
        );
        assert!(parse_qualified("vendor.com/gpu=mig-1:2").is_ok());
        for bad in [
            "gpu0",
            "vendor.com=gpu0",
            "vendor.com/gpu=",
            "vendor.com/=x",
            "/gpu=x",
        ] {
            assert!(parse_qualified(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_broken_file_may_still_tell_its_kind() {
        let broken = "cdiVersion: 0.6.0\nkind: a.com/b\ndevices: 3\n";
        assert!(parse(broken.as_bytes(), false).is_err());
        assert_eq!(
            loose_kind(broken.as_bytes(), false).as_deref(),
            Some("a.com/b")
        );
        assert_eq!(loose_kind(b"{not json", true), None);
    }
}
