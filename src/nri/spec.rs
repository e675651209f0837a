//! A container as NRI describes it, read from its OCI spec (as containerd builds it), and a
//! plugin's adjustment written back into that spec. The spec is handled as the OCI runtime
//! spec's JSON (the field names of runtime-spec's config.md), which keeps every field NRI
//! touches in one vocabulary whatever `oci_spec`'s typed API calls it.
//!
//! Adjustments follow NRI's conventions: a key, mount destination, device path, namespace type
//! or environment variable prefixed with `-` is removed; an argument list starting with an
//! empty string replaces the arguments; hooks are appended. What crust cannot apply (network
//! devices, the scheduler, RDT, memory policy, block I/O and RDT classes, which need host
//! configuration crust does not have) is refused, named.

use serde_json::{Map, Value, json};

use super::api;
use super::{ContainerInfo, State, Status};

/// The container as NRI plugins see it.
pub fn container(info: &ContainerInfo, spec: &Value, status: &Status) -> api::Container {
    let process = &spec["process"];
    let linux = &spec["linux"];
    api::Container {
        id: info.id.clone(),
        pod_sandbox_id: info.pod_id.clone(),
        name: info.name.clone(),
        state: state(status.state) as i32,
        labels: info.labels.clone().into_iter().collect(),
        annotations: string_map(&spec["annotations"]),
        args: strings(&process["args"]),
        env: strings(&process["env"]),
        mounts: array(&spec["mounts"]).map(mount).collect(),
        hooks: Some(hooks(&spec["hooks"])),
        linux: Some(api::LinuxContainer {
            namespaces: array(&linux["namespaces"])
                .map(|n| api::LinuxNamespace {
                    r#type: str_of(&n["type"]),
                    path: str_of(&n["path"]),
                })
                .collect(),
            devices: array(&linux["devices"]).map(device).collect(),
            resources: Some(resources(&linux["resources"])),
            oom_score_adj: process["oomScoreAdj"]
                .as_i64()
                .map(|v| api::OptionalInt { value: v }),
            cgroups_path: str_of(&linux["cgroupsPath"]),
            sysctl: string_map(&linux["sysctl"]),
            ..Default::default()
        }),
        pid: status.pid,
        rlimits: array(&process["rlimits"])
            .map(|r| api::PosixRlimit {
                r#type: str_of(&r["type"]),
                hard: r["hard"].as_u64().unwrap_or_default(),
                soft: r["soft"].as_u64().unwrap_or_default(),
            })
            .collect(),
        created_at: info.created_at,
        started_at: status.started_at,
        finished_at: status.finished_at,
        exit_code: status.exit_code,
        status_reason: status.reason.clone(),
        status_message: status.message.clone(),
        user: Some(api::User {
            uid: process["user"]["uid"].as_u64().unwrap_or_default() as u32,
            gid: process["user"]["gid"].as_u64().unwrap_or_default() as u32,
            additional_gids: array(&process["user"]["additionalGids"])
                .filter_map(|g| g.as_u64().map(|g| g as u32))
                .collect(),
        }),
        image: Some(api::Image {
            name: info.image.0.clone(),
            digest: info.image.1.clone(),
            config_digest: info.image.2.clone(),
        }),
        ..Default::default()
    }
}

pub fn state(s: State) -> api::ContainerState {
    match s {
        State::Created => api::ContainerState::ContainerCreated,
        State::Running => api::ContainerState::ContainerRunning,
        State::Stopped => api::ContainerState::ContainerStopped,
    }
}

/// Writes one plugin's adjustment into `spec`. CDI devices are resolved by the caller.
pub fn apply(adjust: &api::ContainerAdjustment, spec: &mut Value) -> Result<(), String> {
    let root = object(spec);
    apply_map(
        object(root.entry("annotations").or_insert_with(|| json!({}))),
        &adjust.annotations,
    );
    apply_mounts(root, &adjust.mounts);
    let process = object(root.entry("process").or_insert_with(|| json!({})));
    apply_env(process, &adjust.env);
    if let Some((first, rest)) = adjust.args.split_first() {
        let args = if first.is_empty() { rest } else { &adjust.args };
        process.insert("args".into(), json!(args));
    }
    apply_rlimits(process, &adjust.rlimits);
    if let Some(h) = &adjust.hooks {
        apply_hooks(root, h);
    }
    match &adjust.linux {
        Some(l) => apply_linux(object(spec), l),
        None => Ok(()),
    }
}

fn apply_linux(
    root: &mut Map<String, Value>,
    l: &api::LinuxContainerAdjustment,
) -> Result<(), String> {
    unsupported(l)?;
    if let Some(oom) = &l.oom_score_adj {
        let process = object(root.entry("process").or_insert_with(|| json!({})));
        process.insert("oomScoreAdj".into(), json!(oom.value));
    }
    if let Some(io) = &l.io_priority {
        let class = api::IoPrioClass::try_from(io.class)
            .map_err(|_| format!("unknown I/O priority class {}", io.class))?;
        let name = match class {
            api::IoPrioClass::IoprioClassNone => None,
            api::IoPrioClass::IoprioClassRt => Some("IOPRIO_CLASS_RT"),
            api::IoPrioClass::IoprioClassBe => Some("IOPRIO_CLASS_BE"),
            api::IoPrioClass::IoprioClassIdle => Some("IOPRIO_CLASS_IDLE"),
        };
        let process = object(root.entry("process").or_insert_with(|| json!({})));
        match name {
            Some(n) => process.insert(
                "ioPriority".into(),
                json!({"class": n, "priority": io.priority}),
            ),
            None => process.remove("ioPriority"),
        };
    }
    let linux = object(root.entry("linux").or_insert_with(|| json!({})));
    if !l.cgroups_path.is_empty() {
        linux.insert("cgroupsPath".into(), json!(l.cgroups_path));
    }
    apply_map(
        object(linux.entry("sysctl").or_insert_with(|| json!({}))),
        &l.sysctl,
    );
    apply_namespaces(linux, &l.namespaces);
    apply_devices(linux, &l.devices);
    if let Some(r) = &l.resources {
        let res = linux.entry("resources").or_insert_with(|| json!({}));
        overlay_resources(res, r)?;
    }
    if let Some(s) = &l.seccomp_policy {
        linux.insert("seccomp".into(), seccomp(s));
    }
    Ok(())
}

/// What NRI lets plugins set that crust has nothing to apply it with.
fn unsupported(l: &api::LinuxContainerAdjustment) -> Result<(), String> {
    let refuse = |what: &str| Err(format!("crust does not support {what}"));
    if !l.net_devices.is_empty() {
        return refuse("moving network devices into containers (linux.net_devices)");
    }
    if l.scheduler.is_some() {
        return refuse("scheduling policies (linux.scheduler)");
    }
    if l.rdt.as_ref().is_some_and(|r| !r.remove) {
        return refuse("RDT (linux.rdt): no resctrl configuration");
    }
    if l.memory_policy.is_some() {
        return refuse("NUMA memory policies (linux.memory_policy)");
    }
    Ok(())
}

/// Sets the fields `r` sets on OCI resources (`dst`, runtime-spec JSON).
pub fn overlay_resources(dst: &mut Value, r: &api::LinuxResources) -> Result<(), String> {
    if let Some(c) = &r.blockio_class {
        return Err(format!(
            "crust has no block I/O classes (blockio_class {:?})",
            c.value
        ));
    }
    if let Some(c) = &r.rdt_class {
        return Err(format!(
            "crust has no RDT classes (rdt_class {:?})",
            c.value
        ));
    }
    let dst = object(dst);
    if let Some(m) = &r.memory {
        let mem = object(dst.entry("memory").or_insert_with(|| json!({})));
        set_opt(mem, "limit", m.limit.as_ref().map(|v| json!(v.value)));
        set_opt(
            mem,
            "reservation",
            m.reservation.as_ref().map(|v| json!(v.value)),
        );
        set_opt(mem, "swap", m.swap.as_ref().map(|v| json!(v.value)));
        set_opt(mem, "kernel", m.kernel.as_ref().map(|v| json!(v.value)));
        set_opt(
            mem,
            "kernelTCP",
            m.kernel_tcp.as_ref().map(|v| json!(v.value)),
        );
        set_opt(
            mem,
            "swappiness",
            m.swappiness.as_ref().map(|v| json!(v.value)),
        );
        set_opt(
            mem,
            "disableOOMKiller",
            m.disable_oom_killer.as_ref().map(|v| json!(v.value)),
        );
        set_opt(
            mem,
            "useHierarchy",
            m.use_hierarchy.as_ref().map(|v| json!(v.value)),
        );
    }
    if let Some(c) = &r.cpu {
        let cpu = object(dst.entry("cpu").or_insert_with(|| json!({})));
        set_opt(cpu, "shares", c.shares.as_ref().map(|v| json!(v.value)));
        set_opt(cpu, "quota", c.quota.as_ref().map(|v| json!(v.value)));
        set_opt(cpu, "period", c.period.as_ref().map(|v| json!(v.value)));
        set_opt(
            cpu,
            "realtimeRuntime",
            c.realtime_runtime.as_ref().map(|v| json!(v.value)),
        );
        set_opt(
            cpu,
            "realtimePeriod",
            c.realtime_period.as_ref().map(|v| json!(v.value)),
        );
        set_opt(cpu, "cpus", (!c.cpus.is_empty()).then(|| json!(c.cpus)));
        set_opt(cpu, "mems", (!c.mems.is_empty()).then(|| json!(c.mems)));
    }
    if !r.hugepage_limits.is_empty() {
        let list = dst.entry("hugepageLimits").or_insert_with(|| json!([]));
        let list = array_mut(list);
        for h in &r.hugepage_limits {
            list.retain(|e| e["pageSize"] != json!(h.page_size));
            list.push(json!({"pageSize": h.page_size, "limit": h.limit}));
        }
    }
    if !r.unified.is_empty() {
        let unified = object(dst.entry("unified").or_insert_with(|| json!({})));
        for (k, v) in &r.unified {
            unified.insert(k.clone(), json!(v));
        }
    }
    if let Some(p) = &r.pids {
        dst.insert("pids".into(), json!({"limit": p.limit}));
    }
    for d in &r.devices {
        let list = array_mut(dst.entry("devices").or_insert_with(|| json!([])));
        let mut rule = json!({"allow": d.allow, "access": d.access});
        if !d.r#type.is_empty() {
            rule["type"] = json!(d.r#type);
        }
        if let Some(m) = &d.major {
            rule["major"] = json!(m.value);
        }
        if let Some(m) = &d.minor {
            rule["minor"] = json!(m.value);
        }
        list.push(rule);
    }
    Ok(())
}

/// NRI resources as OCI resources (runtime-spec JSON), only the fields `r` sets.
pub fn oci_resources(r: &api::LinuxResources) -> Result<Value, String> {
    let mut v = json!({});
    overlay_resources(&mut v, r)?;
    Ok(v)
}

/// OCI resources (runtime-spec JSON) as NRI describes them.
pub fn resources(r: &Value) -> api::LinuxResources {
    let mem = &r["memory"];
    let cpu = &r["cpu"];
    let i64_of = |v: &Value| v.as_i64().map(|value| api::OptionalInt64 { value });
    let u64_of = |v: &Value| v.as_u64().map(|value| api::OptionalUInt64 { value });
    let bool_of = |v: &Value| v.as_bool().map(|value| api::OptionalBool { value });
    api::LinuxResources {
        memory: mem.is_object().then(|| api::LinuxMemory {
            limit: i64_of(&mem["limit"]),
            reservation: i64_of(&mem["reservation"]),
            swap: i64_of(&mem["swap"]),
            kernel: i64_of(&mem["kernel"]),
            kernel_tcp: i64_of(&mem["kernelTCP"]),
            swappiness: u64_of(&mem["swappiness"]),
            disable_oom_killer: bool_of(&mem["disableOOMKiller"]),
            use_hierarchy: bool_of(&mem["useHierarchy"]),
        }),
        cpu: cpu.is_object().then(|| api::LinuxCpu {
            shares: u64_of(&cpu["shares"]),
            quota: i64_of(&cpu["quota"]),
            period: u64_of(&cpu["period"]),
            realtime_runtime: i64_of(&cpu["realtimeRuntime"]),
            realtime_period: u64_of(&cpu["realtimePeriod"]),
            cpus: str_of(&cpu["cpus"]),
            mems: str_of(&cpu["mems"]),
        }),
        hugepage_limits: array(&r["hugepageLimits"])
            .map(|h| api::HugepageLimit {
                page_size: str_of(&h["pageSize"]),
                limit: h["limit"].as_u64().unwrap_or_default(),
            })
            .collect(),
        unified: string_map(&r["unified"]),
        pids: r["pids"]["limit"]
            .as_i64()
            .map(|limit| api::LinuxPids { limit }),
        devices: array(&r["devices"])
            .map(|d| api::LinuxDeviceCgroup {
                allow: d["allow"].as_bool().unwrap_or_default(),
                r#type: str_of(&d["type"]),
                major: i64_of(&d["major"]),
                minor: i64_of(&d["minor"]),
                access: str_of(&d["access"]),
            })
            .collect(),
        ..Default::default()
    }
}

fn apply_map(dst: &mut Map<String, Value>, adjust: &std::collections::HashMap<String, String>) {
    for (k, v) in adjust {
        match k.strip_prefix('-') {
            Some(removed) => {
                dst.remove(removed);
            }
            None => {
                dst.insert(k.clone(), json!(v));
            }
        }
    }
}

fn apply_mounts(root: &mut Map<String, Value>, mounts: &[api::Mount]) {
    if mounts.is_empty() {
        return;
    }
    let list = array_mut(root.entry("mounts").or_insert_with(|| json!([])));
    for m in mounts {
        let dest = m.destination.strip_prefix('-').unwrap_or(&m.destination);
        list.retain(|e| e["destination"] != json!(dest));
        if !m.destination.starts_with('-') {
            list.push(json!({
                "destination": m.destination,
                "type": m.r#type,
                "source": m.source,
                "options": m.options,
            }));
        }
    }
}

fn apply_env(process: &mut Map<String, Value>, env: &[api::KeyValue]) {
    if env.is_empty() {
        return;
    }
    let list = array_mut(process.entry("env").or_insert_with(|| json!([])));
    for e in env {
        let key = e.key.strip_prefix('-').unwrap_or(&e.key);
        let prefix = format!("{key}=");
        list.retain(|v| {
            v.as_str()
                .is_none_or(|s| !s.starts_with(&prefix) && s != key)
        });
        if !e.key.starts_with('-') {
            list.push(json!(format!("{key}={}", e.value)));
        }
    }
}

fn apply_rlimits(process: &mut Map<String, Value>, rlimits: &[api::PosixRlimit]) {
    if rlimits.is_empty() {
        return;
    }
    let list = array_mut(process.entry("rlimits").or_insert_with(|| json!([])));
    for r in rlimits {
        list.retain(|e| e["type"] != json!(r.r#type));
        list.push(json!({"type": r.r#type, "hard": r.hard, "soft": r.soft}));
    }
}

fn apply_hooks(root: &mut Map<String, Value>, h: &api::Hooks) {
    let lists = [
        ("prestart", &h.prestart),
        ("createRuntime", &h.create_runtime),
        ("createContainer", &h.create_container),
        ("startContainer", &h.start_container),
        ("poststart", &h.poststart),
        ("poststop", &h.poststop),
    ];
    for (name, hooks) in lists.into_iter().filter(|(_, l)| !l.is_empty()) {
        let all = object(root.entry("hooks").or_insert_with(|| json!({})));
        let list = array_mut(all.entry(name).or_insert_with(|| json!([])));
        for hook in hooks {
            let mut v = json!({"path": hook.path});
            if !hook.args.is_empty() {
                v["args"] = json!(hook.args);
            }
            if !hook.env.is_empty() {
                v["env"] = json!(hook.env);
            }
            if let Some(t) = &hook.timeout {
                v["timeout"] = json!(t.value);
            }
            list.push(v);
        }
    }
}

fn apply_namespaces(linux: &mut Map<String, Value>, namespaces: &[api::LinuxNamespace]) {
    if namespaces.is_empty() {
        return;
    }
    let list = array_mut(linux.entry("namespaces").or_insert_with(|| json!([])));
    for n in namespaces {
        let kind = n.r#type.strip_prefix('-').unwrap_or(&n.r#type);
        list.retain(|e| e["type"] != json!(kind));
        if !n.r#type.starts_with('-') {
            let mut v = json!({"type": kind});
            if !n.path.is_empty() {
                v["path"] = json!(n.path);
            }
            list.push(v);
        }
    }
}

/// Devices go into the container (`linux.devices`) and are allowed by its device cgroup.
fn apply_devices(linux: &mut Map<String, Value>, devices: &[api::LinuxDevice]) {
    for d in devices {
        let path = d.path.strip_prefix('-').unwrap_or(&d.path);
        let list = array_mut(linux.entry("devices").or_insert_with(|| json!([])));
        list.retain(|e| e["path"] != json!(path));
        if d.path.starts_with('-') {
            continue;
        }
        let mut v = json!({"path": path, "type": d.r#type, "major": d.major, "minor": d.minor});
        if let Some(m) = &d.file_mode {
            v["fileMode"] = json!(m.value);
        }
        if let Some(u) = &d.uid {
            v["uid"] = json!(u.value);
        }
        if let Some(g) = &d.gid {
            v["gid"] = json!(g.value);
        }
        list.push(v);
        let res = object(linux.entry("resources").or_insert_with(|| json!({})));
        let rules = array_mut(res.entry("devices").or_insert_with(|| json!([])));
        rules.push(json!({
            "allow": true, "type": d.r#type, "major": d.major, "minor": d.minor, "access": "rwm"
        }));
    }
}

fn seccomp(s: &api::LinuxSeccomp) -> Value {
    let syscalls: Vec<Value> = s
        .syscalls
        .iter()
        .map(|c| {
            let mut v = json!({"names": c.names, "action": c.action});
            if let Some(e) = &c.errno_ret {
                v["errnoRet"] = json!(e.value);
            }
            if !c.args.is_empty() {
                v["args"] = c
                    .args
                    .iter()
                    .map(|a| json!({"index": a.index, "value": a.value, "valueTwo": a.value_two, "op": a.op}))
                    .collect();
            }
            v
        })
        .collect();
    let mut v = json!({"defaultAction": s.default_action, "syscalls": syscalls});
    if let Some(e) = &s.default_errno {
        v["defaultErrnoRet"] = json!(e.value);
    }
    for (key, list) in [("architectures", &s.architectures), ("flags", &s.flags)] {
        if !list.is_empty() {
            v[key] = json!(list);
        }
    }
    if !s.listener_path.is_empty() {
        v["listenerPath"] = json!(s.listener_path);
        v["listenerMetadata"] = json!(s.listener_metadata);
    }
    v
}

fn mount(m: &Value) -> api::Mount {
    api::Mount {
        destination: str_of(&m["destination"]),
        r#type: str_of(&m["type"]),
        source: str_of(&m["source"]),
        options: strings(&m["options"]),
    }
}

fn device(d: &Value) -> api::LinuxDevice {
    api::LinuxDevice {
        path: str_of(&d["path"]),
        r#type: str_of(&d["type"]),
        major: d["major"].as_i64().unwrap_or_default(),
        minor: d["minor"].as_i64().unwrap_or_default(),
        file_mode: d["fileMode"]
            .as_u64()
            .map(|v| api::OptionalFileMode { value: v as u32 }),
        uid: d["uid"]
            .as_u64()
            .map(|v| api::OptionalUInt32 { value: v as u32 }),
        gid: d["gid"]
            .as_u64()
            .map(|v| api::OptionalUInt32 { value: v as u32 }),
    }
}

fn hooks(h: &Value) -> api::Hooks {
    let list = |name: &str| {
        array(&h[name])
            .map(|x| api::Hook {
                path: str_of(&x["path"]),
                args: strings(&x["args"]),
                env: strings(&x["env"]),
                timeout: x["timeout"]
                    .as_i64()
                    .map(|value| api::OptionalInt { value }),
            })
            .collect()
    };
    api::Hooks {
        prestart: list("prestart"),
        create_runtime: list("createRuntime"),
        create_container: list("createContainer"),
        start_container: list("startContainer"),
        poststart: list("poststart"),
        poststop: list("poststop"),
    }
}

fn set_opt(m: &mut Map<String, Value>, key: &str, v: Option<Value>) {
    if let Some(v) = v {
        m.insert(key.into(), v);
    }
}

/// `v` as an object, made one if it is not.
fn object(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = json!({});
    }
    v.as_object_mut().expect("made an object above")
}

fn array_mut(v: &mut Value) -> &mut Vec<Value> {
    if !v.is_array() {
        *v = json!([]);
    }
    v.as_array_mut().expect("made an array above")
}

fn array(v: &Value) -> impl Iterator<Item = &Value> {
    v.as_array().into_iter().flatten()
}

fn strings(v: &Value) -> Vec<String> {
    array(v)
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}

fn str_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

fn string_map(v: &Value) -> std::collections::HashMap<String, String> {
    v.as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Value {
        json!({
            "ociVersion": "1.2.0",
            "process": {"args": ["sleep", "9"], "env": ["A=1", "B=2"], "user": {"uid": 0, "gid": 0},
                        "cwd": "/"},
            "root": {"path": "/r"},
            "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
            "annotations": {"keep": "x", "drop": "y"},
            "linux": {"resources": {"memory": {"limit": 1000}}, "cgroupsPath": "/a/b"}
        })
    }

    #[test]
    fn a_container_reads_from_its_spec() {
        let info = ContainerInfo {
            id: "c1".into(),
            pod_id: "p1".into(),
            name: "web".into(),
            ..Default::default()
        };
        let c = container(&info, &base(), &Status::default());
        assert_eq!(c.args, ["sleep", "9"]);
        assert_eq!(c.env, ["A=1", "B=2"]);
        assert_eq!(c.mounts[0].destination, "/proc");
        assert_eq!(c.annotations["keep"], "x");
        let linux = c.linux.unwrap();
        assert_eq!(linux.cgroups_path, "/a/b");
        let mem = linux.resources.unwrap().memory.unwrap();
        assert_eq!(mem.limit.unwrap().value, 1000);
        assert_eq!(c.state, api::ContainerState::ContainerCreated as i32);
    }

    #[test]
    fn every_adjustment_kind_lands_in_the_spec() {
        let mut spec = base();
        let adjust = api::ContainerAdjustment {
            annotations: [("new".into(), "1".into()), ("-drop".into(), String::new())].into(),
            mounts: vec![
                api::Mount {
                    destination: "/data".into(),
                    r#type: "bind".into(),
                    source: "/srv".into(),
                    options: vec!["rbind".into(), "ro".into()],
                },
                api::Mount {
                    destination: "-/proc".into(),
                    ..Default::default()
                },
            ],
            env: vec![
                api::KeyValue {
                    key: "A".into(),
                    value: "9".into(),
                },
                api::KeyValue {
                    key: "-B".into(),
                    value: String::new(),
                },
            ],
            args: vec![String::new(), "true".into()],
            rlimits: vec![api::PosixRlimit {
                r#type: "RLIMIT_NOFILE".into(),
                hard: 512,
                soft: 256,
            }],
            hooks: Some(api::Hooks {
                prestart: vec![api::Hook {
                    path: "/bin/true".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            linux: Some(api::LinuxContainerAdjustment {
                devices: vec![api::LinuxDevice {
                    path: "/dev/xnull".into(),
                    r#type: "c".into(),
                    major: 1,
                    minor: 3,
                    ..Default::default()
                }],
                oom_score_adj: Some(api::OptionalInt { value: 123 }),
                cgroups_path: "/elsewhere/c1".into(),
                resources: Some(api::LinuxResources {
                    cpu: Some(api::LinuxCpu {
                        shares: Some(api::OptionalUInt64 { value: 512 }),
                        ..Default::default()
                    }),
                    pids: Some(api::LinuxPids { limit: 64 }),
                    ..Default::default()
                }),
                sysctl: [("net.ipv4.ip_forward".into(), "1".into())].into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        apply(&adjust, &mut spec).unwrap();
        assert_eq!(spec["annotations"], json!({"keep": "x", "new": "1"}));
        assert_eq!(spec["mounts"].as_array().unwrap().len(), 1);
        assert_eq!(spec["mounts"][0]["source"], "/srv");
        assert_eq!(spec["process"]["env"], json!(["A=9"]));
        assert_eq!(spec["process"]["args"], json!(["true"]));
        assert_eq!(spec["process"]["oomScoreAdj"], 123);
        assert_eq!(spec["process"]["rlimits"][0]["hard"], 512);
        assert_eq!(spec["hooks"]["prestart"][0]["path"], "/bin/true");
        let linux = &spec["linux"];
        assert_eq!(linux["cgroupsPath"], "/elsewhere/c1");
        assert_eq!(linux["devices"][0]["major"], 1);
        assert_eq!(linux["resources"]["devices"][0]["access"], "rwm");
        assert_eq!(linux["resources"]["cpu"]["shares"], 512);
        assert_eq!(linux["resources"]["memory"]["limit"], 1000);
        assert_eq!(linux["resources"]["pids"]["limit"], 64);
        assert_eq!(linux["sysctl"]["net.ipv4.ip_forward"], "1");
        // What oci_spec reads back is what libcontainer will get.
        let typed: oci_spec::runtime::Spec = serde_json::from_value(spec).unwrap();
        let res = typed
            .linux()
            .as_ref()
            .unwrap()
            .resources()
            .as_ref()
            .unwrap();
        assert_eq!(res.pids().as_ref().unwrap().limit(), 64);
        assert_eq!(typed.process().as_ref().unwrap().oom_score_adj(), Some(123));
    }

    #[test]
    fn what_crust_cannot_apply_is_named() {
        let mut spec = base();
        let adjust = api::ContainerAdjustment {
            linux: Some(api::LinuxContainerAdjustment {
                scheduler: Some(Default::default()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(
            apply(&adjust, &mut spec)
                .unwrap_err()
                .contains("linux.scheduler")
        );
        let r = api::LinuxResources {
            blockio_class: Some(api::OptionalString {
                value: "slow".into(),
            }),
            ..Default::default()
        };
        assert!(oci_resources(&r).unwrap_err().contains("slow"));
    }
}
