//! Applies resolved CDI edits to a container's OCI spec, as the Go reference library applies
//! them: pure, nothing read from the host (the registry filled in what device nodes lacked).
//!
//! For each device in request order: its file's spec-wide edits the first time the file comes
//! up, then the device's own. An env variable replaces one of the same name; a device node
//! replaces one at the same path and gets a device cgroup rule (`rwm` unless the spec says
//! otherwise; `none` gives none) and, when it names no owner, the container user's (if not
//! root); a mount replaces one at the same destination, and the mounts are then ordered
//! parents first; hooks are added to their lists; additional GIDs other than 0 join the
//! process's; netDevices and intelRdt are set in `linux`.

use oci_spec::runtime::{
    Hook, Hooks, Linux, LinuxDevice, LinuxDeviceCgroup, LinuxDeviceType, LinuxIntelRdt,
    LinuxNetDevice, LinuxResources, Mount, Process, Spec,
};

use super::spec::{self, ContainerEdits, DeviceNode};
use super::{CdiError, Resolved};

/// Applies every edit of `resolved` to `spec`.
pub fn apply(resolved: &Resolved, spec: &mut Spec) -> Result<(), CdiError> {
    let mut applied_files = Vec::new();
    let mut mounted = false;
    for device in &resolved.devices {
        let fail = |why: String| CdiError::Edit {
            name: device.name.clone(),
            file: device.file.clone(),
            why,
        };
        if !applied_files.contains(&&device.file) {
            applied_files.push(&device.file);
            if let Some((_, edits)) = resolved.spec_edits.iter().find(|(f, _)| *f == device.file) {
                mounted |= !edits.mounts.is_empty();
                apply_edits(edits, spec).map_err(fail)?;
            }
        }
        mounted |= !device.edits.mounts.is_empty();
        apply_edits(&device.edits, spec).map_err(fail)?;
    }
    if mounted {
        if let Some(mounts) = spec.mounts_mut() {
            // Stable: mounts of one depth keep their order.
            mounts.sort_by_key(|m| m.destination().components().count());
        }
    }
    Ok(())
}

fn apply_edits(e: &ContainerEdits, spec: &mut Spec) -> Result<(), String> {
    let process = spec.process_mut().get_or_insert_with(Process::default);
    for var in &e.env {
        set_env(process, var);
    }
    let user = process.user_mut();
    for gid in e.additional_gids.iter().filter(|g| **g != 0) {
        let gids = user.additional_gids_mut().get_or_insert_with(Vec::new);
        if !gids.contains(gid) {
            gids.push(*gid);
        }
    }
    let owner = (user.uid(), user.gid());
    let linux = spec.linux_mut().get_or_insert_with(Linux::default);
    for node in &e.device_nodes {
        add_device(linux, node, owner)?;
    }
    for n in &e.net_devices {
        let mut dev = LinuxNetDevice::default();
        dev.set_name(Some(n.name.clone()));
        linux
            .net_devices_mut()
            .get_or_insert_with(Default::default)
            .insert(n.host_interface_name.clone(), dev);
    }
    if let Some(rdt) = &e.intel_rdt {
        linux.set_intel_rdt(Some(intel_rdt(rdt)));
    }
    let mounts = spec.mounts_mut().get_or_insert_with(Vec::new);
    for m in &e.mounts {
        mounts.retain(|old| old.destination().as_os_str() != m.container_path.as_str());
        let mut mount = Mount::default();
        mount
            .set_destination(m.container_path.clone().into())
            .set_source(Some(m.host_path.clone().into()))
            .set_typ(m.kind.clone().filter(|t| !t.is_empty()))
            .set_options(Some(m.options.clone()).filter(|o| !o.is_empty()));
        mounts.push(mount);
    }
    let hooks = spec.hooks_mut().get_or_insert_with(Hooks::default);
    for h in &e.hooks {
        add_hook(hooks, h)?;
    }
    Ok(())
}

/// `NAME=value` replaces the variable `NAME` where it stands, or is added.
fn set_env(process: &mut Process, var: &str) {
    let key = var.split_once('=').map_or(var, |(k, _)| k);
    let env = process.env_mut().get_or_insert_with(Vec::new);
    match env
        .iter_mut()
        .find(|v| v.split_once('=').map_or(v.as_str(), |(k, _)| k) == key)
    {
        Some(old) => *old = var.to_owned(),
        None => env.push(var.to_owned()),
    }
}

fn add_device(linux: &mut Linux, node: &DeviceNode, owner: (u32, u32)) -> Result<(), String> {
    let typ = match node.kind.as_deref() {
        Some("c") => LinuxDeviceType::C,
        Some("b") => LinuxDeviceType::B,
        Some("u") => LinuxDeviceType::U,
        Some("p") => LinuxDeviceType::P,
        other => return Err(format!("device node {}: type {other:?}", node.path)),
    };
    let (major, minor) = (node.major.unwrap_or(0), node.minor.unwrap_or(0));
    let mut dev = LinuxDevice::default();
    dev.set_path(node.path.clone().into())
        .set_typ(typ)
        .set_major(major)
        .set_minor(minor)
        .set_file_mode(node.file_mode)
        // A node without an owner belongs to the container's user, as the Go library has it,
        // so that a non-root process can open it.
        .set_uid(node.uid.or(Some(owner.0).filter(|u| *u > 0)))
        .set_gid(node.gid.or(Some(owner.1).filter(|g| *g > 0)));
    let devices = linux.devices_mut().get_or_insert_with(Vec::new);
    devices.retain(|d| d.path() != dev.path());
    devices.push(dev);
    let access = match node.permissions.as_deref() {
        None | Some("") => "rwm",
        Some("none") => return Ok(()),
        Some(p) => p,
    };
    if matches!(typ, LinuxDeviceType::C | LinuxDeviceType::B) {
        let mut rule = LinuxDeviceCgroup::default();
        rule.set_allow(true)
            .set_typ(Some(typ))
            .set_major(Some(major))
            .set_minor(Some(minor))
            .set_access(Some(access.to_owned()));
        linux
            .resources_mut()
            .get_or_insert_with(LinuxResources::default)
            .devices_mut()
            .get_or_insert_with(Vec::new)
            .push(rule);
    }
    Ok(())
}

fn add_hook(hooks: &mut Hooks, h: &spec::Hook) -> Result<(), String> {
    let mut hook = Hook::default();
    hook.set_path(h.path.clone().into())
        .set_args(Some(h.args.clone()).filter(|a| !a.is_empty()))
        .set_env(Some(h.env.clone()).filter(|e| !e.is_empty()))
        .set_timeout(h.timeout);
    let list = match h.hook_name.as_str() {
        "prestart" =>
        {
            #[allow(deprecated)]
            hooks.prestart_mut()
        }
        "createRuntime" => hooks.create_runtime_mut(),
        "createContainer" => hooks.create_container_mut(),
        "startContainer" => hooks.start_container_mut(),
        "poststart" => hooks.poststart_mut(),
        "poststop" => hooks.poststop_mut(),
        other => {
            return Err(format!(
                "hook {}: {other:?} is not an OCI hook name",
                h.path
            ));
        }
    };
    list.get_or_insert_with(Vec::new).push(hook);
    Ok(())
}

#[allow(deprecated)]
fn intel_rdt(r: &spec::IntelRdt) -> LinuxIntelRdt {
    let mut out = LinuxIntelRdt::default();
    out.set_clos_id(r.clos_id.clone())
        .set_l3_cache_schema(r.l3_cache_schema.clone())
        .set_mem_bw_schema(r.mem_bw_schema.clone())
        .set_schemata(r.schemata.clone())
        .set_enable_monitoring(r.enable_monitoring)
        .set_enable_cmt(r.enable_cmt)
        .set_enable_mbm(r.enable_mbm);
    out
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::cdi::ResolvedDevice;
    use crate::cdi::spec::{Hook as CdiHook, Mount as CdiMount};

    fn base() -> Spec {
        let mut spec = Spec::default();
        spec.set_mounts(Some(Vec::new()));
        let mut linux = Linux::default();
        linux.set_resources(None).set_devices(None);
        spec.set_linux(Some(linux));
        let process = spec.process_mut().as_mut().unwrap();
        process.set_env(Some(vec!["PATH=/bin".into(), "MODE=image".into()]));
        process.user_mut().set_uid(1000).set_gid(1000);
        spec
    }

    fn node(path: &str, perms: Option<&str>) -> DeviceNode {
        DeviceNode {
            path: path.into(),
            kind: Some("c".into()),
            major: Some(10),
            minor: Some(200),
            file_mode: Some(0o600),
            permissions: perms.map(str::to_owned),
            ..Default::default()
        }
    }

    fn device(name: &str, file: &str, edits: ContainerEdits) -> ResolvedDevice {
        ResolvedDevice {
            name: name.into(),
            file: file.into(),
            edits,
        }
    }

    fn rules(spec: &Spec) -> Vec<(Option<i64>, Option<String>)> {
        let linux = spec.linux().as_ref().unwrap();
        let rules = linux
            .resources()
            .as_ref()
            .unwrap()
            .devices()
            .clone()
            .unwrap();
        rules
            .iter()
            .map(|r| (r.major(), r.access().clone()))
            .collect()
    }

    #[test]
    fn every_kind_of_edit_lands_in_the_spec() {
        let spec_wide = ContainerEdits {
            env: vec!["MODE=cdi".into()],
            mounts: vec![CdiMount {
                host_path: "/opt/lib".into(),
                container_path: "/usr/lib/vendor".into(),
                options: vec!["ro".into(), "bind".into()],
                ..Default::default()
            }],
            hooks: vec![CdiHook {
                hook_name: "createContainer".into(),
                path: "/opt/hook".into(),
                args: vec!["hook".into(), "create".into()],
                ..Default::default()
            }],
            ..Default::default()
        };
        let own = ContainerEdits {
            env: vec!["GPU=0".into()],
            device_nodes: vec![
                node("/dev/gpu0", Some("rw")),
                node("/dev/quiet", Some("none")),
            ],
            additional_gids: vec![0, 44, 44],
            mounts: vec![CdiMount {
                host_path: "/opt/data".into(),
                container_path: "/data".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let resolved = Resolved {
            devices: vec![device("a.com/x=0", "/etc/cdi/a.json", own)],
            spec_edits: vec![("/etc/cdi/a.json".into(), spec_wide)],
        };
        let mut spec = base();
        apply(&resolved, &mut spec).unwrap();

        let process = spec.process().as_ref().unwrap();
        assert_eq!(
            process.env().as_ref().unwrap(),
            &["PATH=/bin", "MODE=cdi", "GPU=0"]
        );
        assert_eq!(process.user().additional_gids().as_ref().unwrap(), &[44]);
        let linux = spec.linux().as_ref().unwrap();
        let devices = linux.devices().as_ref().unwrap();
        assert_eq!(devices.len(), 2);
        let gpu = &devices[0];
        assert_eq!(
            (
                gpu.path().as_path(),
                gpu.major(),
                gpu.minor(),
                gpu.file_mode()
            ),
            (Path::new("/dev/gpu0"), 10, 200, Some(0o600))
        );
        assert_eq!(
            (gpu.uid(), gpu.gid()),
            (Some(1000), Some(1000)),
            "the user's"
        );
        // `none`: a node without an access rule.
        assert_eq!(rules(&spec), [(Some(10), Some("rw".to_string()))]);
        let mounts: Vec<PathBuf> = spec
            .mounts()
            .iter()
            .flatten()
            .map(|m| m.destination().clone())
            .collect();
        assert!(
            mounts.ends_with(&["/data".into(), "/usr/lib/vendor".into()]),
            "{mounts:?}"
        );
        let hooks = spec.hooks().as_ref().unwrap();
        let create = hooks.create_container().as_ref().unwrap();
        assert_eq!(create[0].path(), Path::new("/opt/hook"));
        assert_eq!(
            create[0].args().as_deref(),
            Some(&["hook".into(), "create".into()][..])
        );
    }

    #[test]
    fn spec_wide_edits_apply_once_and_later_edits_replace_earlier_ones() {
        let wide = ContainerEdits {
            env: vec!["WIDE=1".into()],
            device_nodes: vec![node("/dev/shared", None)],
            ..Default::default()
        };
        let mut second = node("/dev/shared", Some("r"));
        second.minor = Some(201);
        let resolved = Resolved {
            devices: vec![
                device("a.com/x=0", "/a.json", ContainerEdits::default()),
                device(
                    "a.com/x=1",
                    "/a.json",
                    ContainerEdits {
                        device_nodes: vec![second],
                        ..Default::default()
                    },
                ),
            ],
            spec_edits: vec![("/a.json".into(), wide)],
        };
        let mut spec = base();
        let process = spec.process_mut().as_mut().unwrap();
        process.user_mut().set_uid(0).set_gid(0);
        apply(&resolved, &mut spec).unwrap();
        let env = spec.process().as_ref().unwrap().env().clone().unwrap();
        assert_eq!(env.iter().filter(|v| *v == "WIDE=1").count(), 1);
        let devices = spec.linux().as_ref().unwrap().devices().clone().unwrap();
        assert_eq!(devices.len(), 1, "one node per path");
        assert_eq!(
            (devices[0].minor(), devices[0].uid()),
            (201, None),
            "root's: no owner"
        );
        assert_eq!(
            rules(&spec),
            [(Some(10), Some("rwm".into())), (Some(10), Some("r".into()))]
        );
    }

    #[test]
    fn mounts_are_ordered_parents_first() {
        let edits = ContainerEdits {
            mounts: ["/a/b/c", "/a", "/a/b"]
                .iter()
                .map(|p| CdiMount {
                    host_path: "/src".into(),
                    container_path: (*p).into(),
                    options: vec!["bind".into()],
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let resolved = Resolved {
            devices: vec![device("a.com/x=0", "/a.json", edits)],
            spec_edits: Vec::new(),
        };
        let mut spec = base();
        apply(&resolved, &mut spec).unwrap();
        let order: Vec<String> = spec
            .mounts()
            .iter()
            .flatten()
            .map(|m| m.destination().display().to_string())
            .collect();
        assert_eq!(order, ["/a", "/a/b", "/a/b/c"]);
    }
}
