//! CDI, the Container Device Interface: devices that device plugins and DRA drivers hand out
//! by name (`vendor.com/class=name`), each described in a spec file of the node's spec
//! directories (`cdi_spec_dirs`, by default `/etc/cdi` then `/var/run/cdi`) as edits to make to
//! a container's OCI spec: device nodes, mounts, env, hooks, additional GIDs.
//!
//! `spec` reads and validates one file as the CDI specification says; `registry` reads the
//! directories and resolves a request's names (later directories win; two files of one
//! directory defining a device, an unknown device, or a broken file that may define it are
//! refused, naming the device and the file); `edits` applies what was resolved to an OCI spec
//! (pure). A request names its devices in `ContainerConfig.CDI_devices` and, from older device
//! plugins, in `cdi.k8s.io/*` annotations (`requested` merges both).
//!
//! crust reads specs with a module of its own rather than the CDI project's Rust crate
//! (`container-device-interface` 1.1): that crate shares crust's oci-spec 0.10, but its
//! jsonschema dependency brings a blocking HTTP client and aws-lc-rs (a C build, and a second
//! rustls provider beside ring), its cache stops at the first broken file (one vendor's bad
//! spec hides every other vendor's devices), and it needs a newer Rust than crust's.

mod edits;
mod registry;
pub mod spec;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use edits::apply;
pub use registry::{Broken, Registry};
pub use spec::ContainerEdits;

/// The annotation prefix older device plugins name CDI devices under (a comma-separated list of
/// qualified names per annotation).
pub const ANNOTATION_PREFIX: &str = "cdi.k8s.io/";

/// Why a request's CDI devices could not be given to it.
#[derive(Debug, thiserror::Error)]
pub enum CdiError {
    #[error("CDI device {name:?}: {why}")]
    BadName { name: String, why: String },
    #[error(
        "CDI device {name:?} is not defined in {}{}",
        show_dirs(dirs),
        broken_note(broken)
    )]
    Unknown {
        name: String,
        dirs: Vec<PathBuf>,
        /// Broken files that may have defined it, with their errors.
        broken: String,
    },
    #[error("CDI device {name:?} is defined by both {}", show_files(files))]
    Conflict { name: String, files: Vec<PathBuf> },
    #[error("CDI device {name:?}: spec {} (which declares its kind) is invalid: {error}", file.display())]
    Broken {
        name: String,
        file: PathBuf,
        error: String,
    },
    /// The host node a spec names is missing or is not what the spec says.
    #[error("CDI device {name:?} (spec {}): host device {path}: {cause}", file.display())]
    HostDevice {
        name: String,
        file: PathBuf,
        path: String,
        cause: String,
    },
    #[error("CDI device {name:?} (spec {}): {why}", file.display())]
    Edit {
        name: String,
        file: PathBuf,
        why: String,
    },
}

impl CdiError {
    /// The node lacks what a valid spec names (FailedPrecondition), rather than the request
    /// or the spec being wrong.
    pub fn is_host_limit(&self) -> bool {
        matches!(self, CdiError::HostDevice { .. })
    }
}

fn show_dirs(dirs: &[PathBuf]) -> String {
    if dirs.is_empty() {
        return "any spec directory (cdi_spec_dirs is empty)".into();
    }
    show_files(dirs)
}

fn show_files(files: &[PathBuf]) -> String {
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    names.join(" and ")
}

fn broken_note(broken: &str) -> String {
    if broken.is_empty() {
        String::new()
    } else {
        format!(" (specs that could not be read: {broken})")
    }
}

/// A request's devices, resolved: each with its file and its edits, and the spec-wide edits of
/// each file used (applied before the first of its devices).
#[derive(Debug, Clone, Default)]
pub struct Resolved {
    pub devices: Vec<ResolvedDevice>,
    pub spec_edits: Vec<(PathBuf, ContainerEdits)>,
}

#[derive(Debug, Clone)]
pub struct ResolvedDevice {
    pub name: String,
    pub file: PathBuf,
    pub edits: ContainerEdits,
}

/// A CDI device a container got, as its record keeps it (for `crictl inspect`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InjectedDevice {
    pub name: String,
    pub spec_file: PathBuf,
}

impl Resolved {
    pub fn injected(&self) -> Vec<InjectedDevice> {
        self.devices
            .iter()
            .map(|d| InjectedDevice {
                name: d.name.clone(),
                spec_file: d.file.clone(),
            })
            .collect()
    }
}

/// The devices a request names: `CDI_devices` first, then the `cdi.k8s.io/*` annotations in
/// key order, each name once; a name that is not `vendor.com/class=name` is refused.
pub fn requested(
    cdi_devices: &[String],
    annotations: &BTreeMap<String, String>,
) -> Result<Vec<String>, CdiError> {
    let from_annotations = annotations
        .iter()
        .filter(|(k, _)| k.starts_with(ANNOTATION_PREFIX))
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim);
    let mut out: Vec<String> = Vec::new();
    for name in cdi_devices
        .iter()
        .map(String::as_str)
        .chain(from_annotations)
    {
        spec::parse_qualified(name).map_err(|why| CdiError::BadName {
            name: name.to_owned(),
            why,
        })?;
        if !out.iter().any(|n| n == name) {
            out.push(name.to_owned());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_request_forms_merge_without_repeats() {
        let annotations: BTreeMap<String, String> = [
            ("cdi.k8s.io/plugin_b", "b.com/x=1,a.com/x=0"),
            ("cdi.k8s.io/plugin_a", "c.com/x=2"),
            ("other.io/devices", "not=a/device"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let got = requested(&["a.com/x=0".into()], &annotations).unwrap();
        assert_eq!(got, ["a.com/x=0", "c.com/x=2", "b.com/x=1"]);

        let bad: BTreeMap<String, String> = [("cdi.k8s.io/p".to_owned(), "gpu0".to_owned())].into();
        let err = requested(&[], &bad).unwrap_err().to_string();
        assert_eq!(err, "CDI device \"gpu0\": is not vendor.com/class=name");
    }

    #[test]
    fn messages_name_the_device_and_the_places() {
        let e = CdiError::Unknown {
            name: "a.com/x=0".into(),
            dirs: vec!["/etc/cdi".into(), "/var/run/cdi".into()],
            broken: "/etc/cdi/a.yaml: bad".into(),
        };
        assert_eq!(
            e.to_string(),
            "CDI device \"a.com/x=0\" is not defined in /etc/cdi and /var/run/cdi \
             (specs that could not be read: /etc/cdi/a.yaml: bad)"
        );
    }
}
