//! The shared request models as CRI messages in JSON, the way containerd puts them in a verbose
//! status: Go's `encoding/json` over the cri-api Go types, whose fields all carry their
//! protobuf names and `omitempty`. So a field at its zero value (false, 0, "", an empty list or
//! map) is left out, a message kubelet sent is an object even when empty, and an enum is its
//! number. An env value, `bytes` since cri-api 0.34, stays a string: cri-api's `KeyValue` has a
//! `MarshalJSON` of its own (`api_json.go`) that writes it as one, each byte that is not UTF-8
//! a U+FFFD, as crust records it. Node agents (Falco's container plugin, for one) read
//! containerd's `info.config` this way; crust writes the same from what it recorded.

use serde_json::{Map, Value, json};

use super::{
    Capabilities, ContainerSpec, IdRange, MountSpec, NamespaceMode, Profile, Propagation,
    Resources, SecurityContext, SupplementalGroupsPolicy, UserNsRequest,
};

/// A message being written: fields at their zero value are dropped, as `omitempty` drops them.
#[derive(Default)]
pub struct GoObject(Map<String, Value>);

impl GoObject {
    pub fn new() -> Self {
        Self::default()
    }

    /// A scalar, list or map field; left out at its zero value.
    pub fn field(mut self, name: &str, value: impl Into<Value>) -> Self {
        let value = value.into();
        if !is_zero(&value) {
            self.0.insert(name.to_owned(), value);
        }
        self
    }

    /// A message field that was sent: written even when all its fields are zero.
    pub fn message(mut self, name: &str, value: GoObject) -> Self {
        self.0.insert(name.to_owned(), Value::Object(value.0));
        self
    }

    /// A message field that may not have been sent.
    pub fn maybe(self, name: &str, value: Option<GoObject>) -> Self {
        match value {
            Some(v) => self.message(name, v),
            None => self,
        }
    }

    pub fn done(self) -> Value {
        Value::Object(self.0)
    }
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// A list of messages.
fn messages(items: impl IntoIterator<Item = GoObject>) -> Value {
    Value::Array(items.into_iter().map(GoObject::done).collect())
}

/// CRI `NamespaceMode`'s number.
pub fn namespace_mode(m: NamespaceMode) -> i32 {
    match m {
        NamespaceMode::Pod => 0,
        NamespaceMode::Container => 1,
        NamespaceMode::Node => 2,
        NamespaceMode::Target => 3,
    }
}

fn id_mappings(ranges: &[IdRange]) -> Value {
    messages(ranges.iter().map(|r| {
        GoObject::new()
            .field("host_id", r.host)
            .field("container_id", r.container)
            .field("length", r.size)
    }))
}

/// CRI `UserNamespace`.
pub fn userns(u: &UserNsRequest) -> GoObject {
    GoObject::new()
        .field("mode", namespace_mode(u.mode))
        .field("uids", id_mappings(&u.uids))
        .field("gids", id_mappings(&u.gids))
}

/// CRI `LinuxContainerResources`.
pub fn resources(r: &Resources) -> GoObject {
    GoObject::new()
        .field("cpu_period", r.cpu_period)
        .field("cpu_quota", r.cpu_quota)
        .field("cpu_shares", r.cpu_shares)
        .field("memory_limit_in_bytes", r.memory_limit)
        .field("oom_score_adj", r.oom_score_adj)
        .field("cpuset_cpus", r.cpuset_cpus.as_str())
        .field("cpuset_mems", r.cpuset_mems.as_str())
        .field(
            "hugepage_limits",
            messages(r.hugepage_limits.iter().map(|h| {
                GoObject::new()
                    .field("page_size", h.page_size.as_str())
                    .field("limit", h.limit)
            })),
        )
        .field("unified", json!(r.unified))
        .field("memory_swap_limit_in_bytes", r.memory_swap_limit)
}

/// CRI `SecurityProfile`.
pub fn profile(p: &Profile) -> GoObject {
    let (kind, reference) = match p {
        Profile::RuntimeDefault => (0, ""),
        Profile::Unconfined => (1, ""),
        Profile::Localhost(r) => (2, r.as_str()),
    };
    GoObject::new()
        .field("profile_type", kind)
        .field("localhost_ref", reference)
}

fn capabilities(c: &Capabilities) -> Option<GoObject> {
    let sent = !(c.add.is_empty() && c.drop.is_empty() && c.add_ambient.is_empty());
    sent.then(|| {
        GoObject::new()
            .field("add_capabilities", json!(c.add))
            .field("drop_capabilities", json!(c.drop))
            .field("add_ambient_capabilities", json!(c.add_ambient))
    })
}

/// An `Int64Value`.
fn int64(v: Option<i64>) -> Option<GoObject> {
    v.map(|v| GoObject::new().field("value", v))
}

/// CRI `LinuxContainerSecurityContext`. The container's network and IPC modes are its pod's
/// (kubelet sends the pod's); crust records only the PID mode per container.
fn security(s: &SecurityContext, pod: PodNamespaces) -> GoObject {
    let namespaces = GoObject::new()
        .field("network", namespace_mode(pod.network))
        .field("pid", namespace_mode(s.pid_mode))
        .field("ipc", namespace_mode(pod.ipc))
        .field("target_id", s.pid_target.as_str())
        .maybe("userns_options", s.userns.as_ref().map(userns));
    let selinux = s.selinux.as_ref().map(|o| {
        GoObject::new()
            .field("user", o.user.as_str())
            .field("role", o.role.as_str())
            .field("type", o.kind.as_str())
            .field("level", o.level.as_str())
    });
    let groups_policy = match s.supplemental_groups_policy {
        SupplementalGroupsPolicy::Merge => 0,
        SupplementalGroupsPolicy::Strict => 1,
    };
    GoObject::new()
        .maybe("capabilities", capabilities(&s.capabilities))
        .field("privileged", s.privileged)
        .message("namespace_options", namespaces)
        .maybe("selinux_options", selinux)
        .maybe("run_as_user", int64(s.run_as_user))
        .maybe("run_as_group", int64(s.run_as_group))
        .field("run_as_username", s.run_as_username.as_str())
        .field("readonly_rootfs", s.readonly_rootfs)
        .field("supplemental_groups", json!(s.supplemental_groups))
        .field("no_new_privs", s.no_new_privs)
        .field("masked_paths", json!(s.masked_paths))
        .field("readonly_paths", json!(s.readonly_paths))
        .maybe("seccomp", s.seccomp.as_ref().map(profile))
        .maybe("apparmor", s.apparmor.as_ref().map(profile))
        .field("supplemental_groups_policy", groups_policy)
}

fn mount(m: &MountSpec) -> GoObject {
    let propagation = match m.propagation {
        Propagation::Private => 0,
        Propagation::HostToContainer => 1,
        Propagation::Bidirectional => 2,
    };
    // kubelet sends an image volume with no host path; crust's record holds where it mounted it.
    let host_path = if m.image.is_some() { "" } else { &m.host_path };
    let maps = m.id_maps.as_ref();
    GoObject::new()
        .field("container_path", m.container_path.as_str())
        .field("host_path", host_path)
        .field("readonly", m.readonly)
        .field("selinux_relabel", m.selinux_relabel)
        .field("propagation", propagation)
        .field(
            "uidMappings",
            maps.map_or(json!([]), |u| id_mappings(&u.uids)),
        )
        .field(
            "gidMappings",
            maps.map_or(json!([]), |u| id_mappings(&u.gids)),
        )
        .field("recursive_read_only", m.recursive_readonly)
        .maybe(
            "image",
            m.image
                .as_ref()
                .map(|i| GoObject::new().field("image", i.as_str())),
        )
        .field("image_sub_path", m.image_sub_path.as_str())
        .field(
            "mount_options",
            json!(m.options.iter().map(|o| o.name()).collect::<Vec<_>>()),
        )
}

/// The pod's network and IPC modes, which a container's namespace options repeat.
#[derive(Debug, Clone, Copy, Default)]
pub struct PodNamespaces {
    pub network: NamespaceMode,
    pub ipc: NamespaceMode,
}

/// CRI `ContainerConfig`, as kubelet sent it to CreateContainer, from what crust recorded of it.
/// What crust does not keep is missing: the image spec's annotations and runtime handler, and a
/// `ro` among the mount options (it is `readonly`).
pub fn container_config(spec: &ContainerSpec, pod: PodNamespaces) -> Value {
    let envs = spec.envs.iter().map(|(k, v)| {
        GoObject::new()
            .field("key", k.as_str())
            .field("value", v.as_str())
    });
    let devices = spec.devices.iter().map(|d| {
        GoObject::new()
            .field("container_path", d.container_path.as_str())
            .field("host_path", d.host_path.as_str())
            .field("permissions", d.permissions.as_str())
    });
    let cdi = spec
        .cdi_devices
        .iter()
        .map(|n| GoObject::new().field("name", n.as_str()));
    let linux = GoObject::new()
        .message("resources", resources(&spec.resources))
        .message("security_context", security(&spec.security, pod));
    GoObject::new()
        .message(
            "metadata",
            GoObject::new()
                .field("name", spec.metadata.name.as_str())
                .field("attempt", spec.metadata.attempt),
        )
        .message(
            "image",
            GoObject::new()
                .field("image", spec.image.as_str())
                .field("user_specified_image", spec.user_specified_image.as_str()),
        )
        .field("command", json!(spec.command))
        .field("args", json!(spec.args))
        .field("working_dir", spec.working_dir.as_str())
        .field("envs", messages(envs))
        .field("mounts", messages(spec.mounts.iter().map(mount)))
        .field("devices", messages(devices))
        .field("labels", json!(spec.labels))
        .field("annotations", json!(spec.annotations))
        .field("log_path", spec.log_path.as_str())
        .field("stdin", spec.stdin)
        .field("stdin_once", spec.stdin_once)
        .field("tty", spec.tty)
        .message("linux", linux)
        .field("CDI_devices", messages(cdi))
        .field("stop_signal", stop_signal(&spec.stop_signal))
        .done()
}

/// CRI `Signal`'s number for a stop signal as the spec names it (`SIGTERM`, or a real-time
/// signal's number); 0 (RUNTIME_DEFAULT) for none.
fn stop_signal(name: &str) -> i32 {
    // The enum lists the named signals alphabetically from 1, then SIGRTMIN (34) as 35 onward.
    const NAMED: [&str; 34] = [
        "SIGABRT",
        "SIGALRM",
        "SIGBUS",
        "SIGCHLD",
        "SIGCLD",
        "SIGCONT",
        "SIGFPE",
        "SIGHUP",
        "SIGILL",
        "SIGINT",
        "SIGIO",
        "SIGIOT",
        "SIGKILL",
        "SIGPIPE",
        "SIGPOLL",
        "SIGPROF",
        "SIGPWR",
        "SIGQUIT",
        "SIGSEGV",
        "SIGSTKFLT",
        "SIGSTOP",
        "SIGSYS",
        "SIGTERM",
        "SIGTRAP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGUSR1",
        "SIGUSR2",
        "SIGVTALRM",
        "SIGWINCH",
        "SIGXCPU",
        "SIGXFSZ",
    ];
    if let Some(i) = NAMED.iter().position(|n| *n == name) {
        return i as i32 + 1;
    }
    match name.parse::<i32>() {
        Ok(n @ 34..=64) => n + 1,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{BindOption, ContainerMetadata};

    #[test]
    fn zero_fields_are_left_out_and_sent_messages_stay() {
        let spec = ContainerSpec {
            metadata: ContainerMetadata {
                name: "app".into(),
                attempt: 0,
            },
            image: "sha256:abc".into(),
            envs: vec![("A".into(), "b c".into()), ("EMPTY".into(), String::new())],
            ..Default::default()
        };
        let v = container_config(&spec, PodNamespaces::default());
        assert_eq!(v["metadata"], json!({"name": "app"}));
        assert_eq!(v["image"], json!({"image": "sha256:abc"}));
        assert_eq!(
            v["envs"],
            json!([{"key": "A", "value": "b c"}, {"key": "EMPTY"}])
        );
        assert_eq!(
            v["linux"]["security_context"],
            json!({"namespace_options": {}})
        );
        assert_eq!(v["linux"]["resources"], json!({}));
        for absent in [
            "command",
            "mounts",
            "labels",
            "tty",
            "stop_signal",
            "CDI_devices",
        ] {
            assert!(v.get(absent).is_none(), "{absent}: {v}");
        }
    }

    #[test]
    fn security_context_and_mounts_take_the_cri_names_and_numbers() {
        let mut spec = ContainerSpec::default();
        spec.security.privileged = true;
        spec.security.run_as_user = Some(0);
        spec.security.run_as_group = Some(1000);
        spec.security.pid_mode = NamespaceMode::Container;
        spec.security.capabilities.add = vec!["NET_ADMIN".into()];
        spec.security.seccomp = Some(Profile::Localhost("/p.json".into()));
        spec.security.supplemental_groups_policy = SupplementalGroupsPolicy::Strict;
        spec.stop_signal = "SIGTERM".into();
        spec.mounts = vec![MountSpec {
            container_path: "/data".into(),
            host_path: "/var/lib/data".into(),
            readonly: true,
            propagation: Propagation::HostToContainer,
            options: vec![BindOption::NoExec],
            ..Default::default()
        }];
        let pod = PodNamespaces {
            network: NamespaceMode::Node,
            ipc: NamespaceMode::Pod,
        };
        let v = container_config(&spec, pod);
        let s = &v["linux"]["security_context"];
        assert_eq!(s["privileged"], true);
        assert_eq!(s["run_as_user"], json!({}));
        assert_eq!(s["run_as_group"], json!({"value": 1000}));
        assert_eq!(s["namespace_options"], json!({"network": 2, "pid": 1}));
        assert_eq!(
            s["capabilities"],
            json!({"add_capabilities": ["NET_ADMIN"]})
        );
        assert_eq!(
            s["seccomp"],
            json!({"profile_type": 2, "localhost_ref": "/p.json"})
        );
        assert_eq!(s["supplemental_groups_policy"], 1);
        assert_eq!(v["stop_signal"], 23);
        assert_eq!(
            v["mounts"],
            json!([{"container_path": "/data", "host_path": "/var/lib/data", "readonly": true,
                    "propagation": 1, "mount_options": ["noexec"]}])
        );
    }

    #[test]
    fn stop_signals_take_the_cri_enum_numbers() {
        assert_eq!(stop_signal(""), 0);
        assert_eq!(stop_signal("SIGABRT"), 1);
        assert_eq!(stop_signal("SIGKILL"), 13);
        assert_eq!(stop_signal("SIGXFSZ"), 34);
        assert_eq!(stop_signal("34"), 35);
        assert_eq!(stop_signal("49"), 50);
        assert_eq!(stop_signal("50"), 51);
        assert_eq!(stop_signal("64"), 65);
    }
}
