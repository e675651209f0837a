//! The CDI devices of the spec directories, read afresh for every request (a device plugin or
//! a DRA driver writes transient specs at any time), and the resolution of a request's device
//! names against them.
//!
//! Directories are read in order, each one's `.json` and `.yaml` files in name order (not its
//! subdirectories, as the Go reference library reads them); a device found in a later
//! directory wins over the same device in an earlier one, and two files of one directory
//! defining the same device are a conflict no request for it can get past. A file that cannot
//! be read, parsed or validated is kept as `Broken`: a request whose device is not found
//! hears about it, and so does one whose device it may have meant to redefine (it declares
//! the device's kind, in a directory that would win).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::spec::{self, ContainerEdits, SpecFile};
use super::{CdiError, Resolved, ResolvedDevice};

/// A spec file that was read and validated.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub path: PathBuf,
    /// The index of its directory: higher wins.
    pub priority: usize,
    pub spec: SpecFile,
}

/// A spec file that could not be used, and why.
#[derive(Debug, Clone)]
pub struct Broken {
    pub path: PathBuf,
    pub priority: usize,
    /// The kind it declares, when that much can be read.
    pub kind: Option<String>,
    pub error: String,
}

/// What the spec directories hold right now.
#[derive(Debug, Default)]
pub struct Registry {
    pub dirs: Vec<PathBuf>,
    pub specs: Vec<Loaded>,
    pub broken: Vec<Broken>,
    /// Each qualified device name, with the specs (indexes into `specs`) that define it.
    defined: BTreeMap<String, Vec<usize>>,
}

impl Registry {
    /// Reads every spec of `dirs`; a directory that does not exist holds none.
    pub fn load(dirs: &[PathBuf]) -> Registry {
        let mut registry = Registry {
            dirs: dirs.to_vec(),
            ..Default::default()
        };
        for (priority, dir) in dirs.iter().enumerate() {
            for path in spec_files(dir, &mut registry.broken, priority) {
                registry.read(path, priority);
            }
        }
        for (i, loaded) in registry.specs.iter().enumerate() {
            for d in &loaded.spec.devices {
                let name = format!("{}={}", loaded.spec.kind, d.name);
                registry.defined.entry(name).or_default().push(i);
            }
        }
        registry
    }

    fn read(&mut self, path: PathBuf, priority: usize) {
        let json = path.extension().is_some_and(|e| e == "json");
        let broken = |kind, error| Broken {
            path: path.clone(),
            priority,
            kind,
            error,
        };
        let text = match std::fs::read(&path) {
            Ok(text) => text,
            Err(e) => return self.broken.push(broken(None, e.to_string())),
        };
        match spec::parse(&text, json).and_then(|s| spec::validate(&s).map(|()| s)) {
            Ok(spec) => self.specs.push(Loaded {
                path,
                priority,
                spec,
            }),
            Err(error) => self
                .broken
                .push(broken(spec::loose_kind(&text, json), error)),
        }
    }

    /// Every device a request can get, with the file it comes from; conflicting devices are
    /// left out (`conflicts` names them).
    pub fn devices(&self) -> Vec<(String, PathBuf)> {
        self.defined
            .keys()
            .filter_map(|name| {
                self.winner(name)
                    .ok()
                    .map(|l| (name.clone(), l.path.clone()))
            })
            .collect()
    }

    /// Devices two files of one directory define, with the files.
    pub fn conflicts(&self) -> Vec<(String, Vec<PathBuf>)> {
        self.defined
            .keys()
            .filter_map(|name| match self.winner(name) {
                Err(files) => Some((name.clone(), files)),
                Ok(_) => None,
            })
            .collect()
    }

    /// The spec `name` comes from: the one in the last directory defining it; `Err` with the
    /// files when that directory has two.
    fn winner(&self, name: &str) -> Result<&Loaded, Vec<PathBuf>> {
        let candidates: Vec<&Loaded> = self.defined[name].iter().map(|&i| &self.specs[i]).collect();
        let top = candidates.iter().map(|l| l.priority).max().unwrap_or(0);
        let winners: Vec<&Loaded> = candidates
            .into_iter()
            .filter(|l| l.priority == top)
            .collect();
        match winners.as_slice() {
            [one] => Ok(one),
            many => Err(many.iter().map(|l| l.path.clone()).collect()),
        }
    }

    /// Resolves a request's qualified device names (already merged and de-duplicated), with
    /// what each device node lacks read from its host node.
    pub fn resolve(&self, names: &[String]) -> Result<Resolved, CdiError> {
        let mut out = Resolved::default();
        for name in names {
            let loaded = self.find(name)?;
            let device = loaded
                .spec
                .devices
                .iter()
                .find(|d| format!("{}={}", loaded.spec.kind, d.name) == *name)
                .ok_or_else(|| CdiError::Unknown {
                    name: name.clone(),
                    dirs: self.dirs.clone(),
                    broken: String::new(),
                })?;
            let file_edits = loaded.spec.container_edits.clone().unwrap_or_default();
            if !out.spec_edits.iter().any(|(p, _)| *p == loaded.path) {
                let edits = fill(file_edits, name, &loaded.path)?;
                out.spec_edits.push((loaded.path.clone(), edits));
            }
            out.devices.push(ResolvedDevice {
                name: name.clone(),
                file: loaded.path.clone(),
                edits: fill(device.container_edits.clone(), name, &loaded.path)?,
            });
        }
        Ok(out)
    }

    fn find(&self, name: &str) -> Result<&Loaded, CdiError> {
        let kind = name.split_once('=').map_or(name, |(k, _)| k);
        let Some(_) = self.defined.get(name) else {
            let broken: Vec<String> = self
                .broken
                .iter()
                .filter(|b| b.kind.as_deref().is_none_or(|k| k == kind))
                .map(|b| format!("{}: {}", b.path.display(), b.error))
                .collect();
            return Err(CdiError::Unknown {
                name: name.to_owned(),
                dirs: self.dirs.clone(),
                broken: broken.join("; "),
            });
        };
        let loaded = self.winner(name).map_err(|files| CdiError::Conflict {
            name: name.to_owned(),
            files,
        })?;
        let shadow = self
            .broken
            .iter()
            .find(|b| b.priority >= loaded.priority && b.kind.as_deref() == Some(kind));
        if let Some(b) = shadow {
            return Err(CdiError::Broken {
                name: name.to_owned(),
                file: b.path.clone(),
                error: b.error.clone(),
            });
        }
        Ok(loaded)
    }
}

/// The `.json` and `.yaml` files of `dir`, by name; what cannot be listed is broken.
fn spec_files(dir: &Path, broken: &mut Vec<Broken>, priority: usize) -> Vec<PathBuf> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            broken.push(Broken {
                path: dir.to_owned(),
                priority,
                kind: None,
                error: format!("listing the directory: {e}"),
            });
            return Vec::new();
        }
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json" || e == "yaml"))
        // Symlinks to files count (a driver may link its spec in); directories do not.
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// The edits with each device node's missing type, numbers and mode read from its host node, as
/// the Go library (`tags.cncf.io/container-device-interface`) fills them. A node given with its
/// type and major number (a fifo needs none) is complete: a vendor may describe a device in
/// full, so a missing host node is no error then, and only an unset mode is taken from the
/// host node when there is one.
fn fill(mut edits: ContainerEdits, name: &str, file: &Path) -> Result<ContainerEdits, CdiError> {
    for node in &mut edits.device_nodes {
        let host = node.host_path.clone().unwrap_or_else(|| node.path.clone());
        let failed = |cause: String| CdiError::HostDevice {
            name: name.to_owned(),
            file: file.to_owned(),
            path: host.clone(),
            cause,
        };
        let given = node.kind.clone().filter(|k| !k.is_empty());
        let complete = given
            .as_deref()
            .is_some_and(|k| k == "p" || node.major.is_some_and(|m| m != 0));
        let (kind, major, minor, mode) = match host_node(Path::new(&host)) {
            Ok(found) => found,
            Err(_) if complete => continue,
            Err(cause) => return Err(failed(cause)),
        };
        node.file_mode.get_or_insert(mode);
        if complete {
            continue;
        }
        match given.as_deref() {
            Some(k) if k != kind && !(k == "u" && kind == "c") => {
                return Err(failed(format!(
                    "the spec says type {k}, the host node is type {kind}"
                )));
            }
            Some(_) => {}
            None => node.kind = Some(kind.to_owned()),
        }
        if node.major.is_none_or(|m| m == 0) && kind != "p" {
            node.major = Some(major);
            node.minor = Some(minor);
        }
    }
    Ok(edits)
}

/// The type (`c`, `b` or `p`), numbers and permission bits of a host node.
fn host_node(path: &Path) -> Result<(&'static str, i64, i64, u32), String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    let kind = match meta.file_type() {
        t if t.is_char_device() => "c",
        t if t.is_block_device() => "b",
        t if t.is_fifo() => "p",
        _ => return Err("not a device node".into()),
    };
    let rdev = meta.rdev();
    Ok((
        kind,
        nix::sys::stat::major(rdev) as i64,
        nix::sys::stat::minor(rdev) as i64,
        meta.mode() & 0o7777,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: &str, device: &str, env: &str) -> String {
        format!(
            "{{\"cdiVersion\":\"0.6.0\",\"kind\":\"{kind}\",\"devices\":[{{\"name\":\"{device}\",\
             \"containerEdits\":{{\"env\":[\"{env}\"]}}}}]}}"
        )
    }

    fn dirs(n: usize) -> (tempfile::TempDir, Vec<PathBuf>) {
        let root = tempfile::tempdir().unwrap();
        let dirs = (0..n)
            .map(|i| root.path().join(format!("d{i}")))
            .collect::<Vec<_>>();
        for d in &dirs {
            std::fs::create_dir(d).unwrap();
        }
        (root, dirs)
    }

    fn env_of(r: &Resolved) -> Vec<String> {
        r.devices.iter().flat_map(|d| d.edits.env.clone()).collect()
    }

    #[test]
    fn later_directories_win_and_both_formats_are_read() {
        let (_root, dirs) = dirs(2);
        std::fs::write(dirs[0].join("a.json"), spec("a.com/x", "one", "FROM=first")).unwrap();
        let yaml = "cdiVersion: 0.6.0\nkind: a.com/x\ndevices:\n- name: one\n  containerEdits:\n    env: [FROM=second]\n";
        std::fs::write(dirs[1].join("b.yaml"), yaml).unwrap();
        std::fs::write(dirs[1].join("notes.txt"), "not a spec").unwrap();
        std::fs::create_dir(dirs[1].join("sub.json")).unwrap();
        let missing = dirs[0].join("missing");
        let all = vec![missing, dirs[0].clone(), dirs[1].clone()];
        let registry = Registry::load(&all);
        assert!(registry.broken.is_empty(), "{:?}", registry.broken);
        let resolved = registry.resolve(&["a.com/x=one".into()]).unwrap();
        assert_eq!(env_of(&resolved), ["FROM=second"]);
        assert_eq!(resolved.devices[0].file, dirs[1].join("b.yaml"));
        assert_eq!(
            registry.devices(),
            [("a.com/x=one".to_string(), dirs[1].join("b.yaml"))]
        );
    }

    #[test]
    fn unknown_conflicting_and_broken_devices_name_the_device_and_the_file() {
        let (_root, dirs) = dirs(2);
        std::fs::write(dirs[0].join("a.json"), spec("a.com/x", "one", "A=1")).unwrap();
        std::fs::write(dirs[0].join("b.json"), spec("a.com/x", "one", "A=2")).unwrap();
        std::fs::write(dirs[0].join("c.json"), spec("c.com/x", "one", "C=1")).unwrap();
        let unparsable = r#"{"cdiVersion":"0.6.0","kind":"c.com/x","devices":[{"name":"one"}]}"#;
        std::fs::write(dirs[1].join("c.json"), unparsable).unwrap();
        std::fs::write(
            dirs[1].join("d.yaml"),
            "kind: d.com/x\ncdiVersion: 0.6.0\ndevices: []\n",
        )
        .unwrap();
        let registry = Registry::load(&dirs);

        let err = registry.resolve(&["a.com/x=one".into()]).unwrap_err();
        assert!(
            matches!(err, CdiError::Conflict { ref files, .. } if files.len() == 2),
            "{err}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("a.com/x=one") && msg.contains("a.json") && msg.contains("b.json"),
            "{msg}"
        );
        assert_eq!(registry.conflicts().len(), 1);
        assert!(registry.devices().iter().all(|(n, _)| n != "a.com/x=one"));

        // c.json of the later directory declares c.com/x but does not parse: it may have
        // meant to redefine the device, so the earlier definition is not used.
        let msg = registry
            .resolve(&["c.com/x=one".into()])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("c.com/x=one") && msg.contains("d1/c.json"),
            "{msg}"
        );

        let msg = registry
            .resolve(&["d.com/x=one".into()])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("d.com/x=one") && msg.contains("d.yaml: no devices"),
            "{msg}"
        );
        assert!(
            !msg.contains("c.json"),
            "a file of another kind is not named: {msg}"
        );
    }

    #[test]
    fn device_nodes_take_what_they_lack_from_the_host() {
        let (_root, dirs) = dirs(1);
        let text = r#"{"cdiVersion":"0.6.0","kind":"a.com/x","devices":[
            {"name":"null","containerEdits":{"deviceNodes":[{"path":"/dev/x","hostPath":"/dev/null"}]}},
            {"name":"gone","containerEdits":{"deviceNodes":[{"path":"/dev/nothing-here"}]}},
            {"name":"typo","containerEdits":{"deviceNodes":[{"path":"/dev/y","hostPath":"/dev/null","type":"b"}]}}]}"#;
        std::fs::write(dirs[0].join("a.json"), text).unwrap();
        let registry = Registry::load(&dirs);
        let r = registry.resolve(&["a.com/x=null".into()]).unwrap();
        let node = &r.devices[0].edits.device_nodes[0];
        assert_eq!(
            (node.kind.as_deref(), node.major, node.minor, node.file_mode),
            (Some("c"), Some(1), Some(3), Some(0o666))
        );
        let msg = registry
            .resolve(&["a.com/x=gone".into()])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("/dev/nothing-here") && msg.contains("a.json"),
            "{msg}"
        );
        let msg = registry
            .resolve(&["a.com/x=typo".into()])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("type b, the host node is type c"), "{msg}");
    }

    #[test]
    fn a_node_given_in_full_needs_no_host_node() {
        let (_root, dirs) = dirs(1);
        let text = r#"{"cdiVersion":"0.6.0","kind":"a.com/x","devices":[
            {"name":"full","containerEdits":{"deviceNodes":[
                {"path":"/dev/vendor0","type":"c","major":10,"minor":229},
                {"path":"/dev/x","hostPath":"/dev/null","type":"b","major":7,"minor":1}]}},
            {"name":"no-major","containerEdits":{"deviceNodes":[
                {"path":"/dev/vendor1","type":"c"}]}}]}"#;
        std::fs::write(dirs[0].join("a.json"), text).unwrap();
        let registry = Registry::load(&dirs);
        let r = registry.resolve(&["a.com/x=full".into()]).unwrap();
        let nodes = &r.devices[0].edits.device_nodes;
        let got: Vec<_> = nodes
            .iter()
            .map(|n| (n.kind.as_deref(), n.major, n.minor, n.file_mode))
            .collect();
        // No host node: nothing filled, the mode left to the runtime's default. A host node
        // that is there lends its mode only, even of another type, as the Go library's does.
        assert_eq!(
            got,
            [
                (Some("c"), Some(10), Some(229), None),
                (Some("b"), Some(7), Some(1), Some(0o666))
            ]
        );
        let msg = registry
            .resolve(&["a.com/x=no-major".into()])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("/dev/vendor1"), "{msg}");
    }
}
