//! Daemon configuration: a TOML file (default `/etc/crust/config.toml`, optional) and the
//! drop-ins of `config.d` beside it over embedded defaults, with command-line flags applied last
//! (`layers.rs`, which keeps where each value came from). It is validated whole before it is
//! used, at start and at each reload, so the rest of the daemon can rely on every value in it.
//! `default.toml` is the default configuration with a comment per key (`crust config
//! default`, the file the package installs); `dump.rs` prints an effective one with the origin
//! of each value; `changes.rs` tells what a reload changed and which changes apply live.

pub mod changes;
pub mod dump;
pub mod layers;
mod registry;
mod runtimes;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use registry::{
    MirrorConfig, RegistryConfig, RegistryCredentials, RegistryHostConfig, decode_basic_auth,
    endpoint_api_root, endpoint_host, endpoint_parts,
};
pub use runtimes::RuntimeHandlerConfig;

/// Where the configuration file is looked for when `--config` is not given.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/crust/config.toml";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// One line: it reaches logs, `STATUS=` lines and gRPC messages.
    #[error("parsing {path}: {msg}")]
    Parse { path: PathBuf, msg: String },
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupDriver {
    Cgroupfs,
    Systemd,
}

/// What CreateContainer makes of the volumes an image's config declares (`Volumes`, a
/// Dockerfile's `VOLUME`) that no request mount covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageVolumes {
    /// containerd's default: a directory of the container's own, filled with the image's
    /// content at that path, bound there read-write.
    Bind,
    /// CRI-O's default: an empty directory in the root filesystem where the image has none.
    Mkdir,
    /// Nothing (containerd's `ignore_image_defined_volumes`, CRI-O's `ignore`).
    Ignore,
}

/// What a node lets pod authors do with checkpoints (CRI-O's `enable_criu_support` and its
/// checkpoint-only mode): a restore recreates processes with whatever the checkpoint held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum RestorePolicy {
    /// CheckpointContainer and restores (CreateContainer of a checkpoint) both work.
    #[default]
    Enabled,
    /// Checkpoints are made (kubelet's forensic checkpointing); restores are refused.
    CheckpointOnly,
    /// Both are refused.
    Disabled,
}

/// `[checkpoint]`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CheckpointConfig {
    pub restore: RestorePolicy,
}

/// The default configuration with a comment per key, as `crust config default` prints it.
pub const DEFAULT_TOML: &str = include_str!("default.toml");

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The format version of the configuration (`layers::CURRENT_VERSION`).
    pub version: u32,
    /// gRPC endpoint: `unix:///path` or a bare path.
    pub listen: String,
    /// Persistent data: images, container layers.
    pub root: PathBuf,
    /// Runtime state that dies with the machine: sandboxes, namespaces, sockets.
    pub state: PathBuf,
    pub log_level: String,
    pub log_format: LogFormat,
    pub cgroup_driver: CgroupDriver,
    /// Parent cgroup for pods whose request names none.
    pub default_cgroup_parent: String,
    /// With the systemd driver, containers' scopes are `<prefix>-<id>.scope`: "crust" by
    /// default; "cri-containerd" or "crio" for agents that recognise only those (Falco's
    /// container plugin).
    pub cgroup_scope_prefix: String,
    /// The runtime handler used when a request names none.
    pub default_runtime_handler: String,
    /// Runtime handlers a pod may ask for.
    pub runtime_handlers: Vec<String>,
    /// CDI spec directories, read at every CreateContainer that asks for CDI devices; a device
    /// in a later directory wins over the same device in an earlier one.
    pub cdi_spec_dirs: Vec<PathBuf>,
    /// A container's devices (CRI `devices`, as raw block volumes) belong to its run_as_user
    /// and run_as_group where those are not root, instead of the host node's owner
    /// (containerd's and CRI-O's key of the same name; off by default, as there).
    pub device_ownership_from_security_context: bool,
    /// Directories of OCI hook files (CRI-O's `hooks_dir`, read as CRI-O reads them), read at
    /// every CreateContainer; a file in a later directory replaces one of the same name.
    pub hooks_dir: Vec<PathBuf>,
    /// Resource limits every container's process starts with, as CRI-O's `default_ulimits`:
    /// `name=soft:hard` or `name=limit` (`nofile=1024:4096`); they replace crust's
    /// RLIMIT_NOFILE of 1048576 when they name `nofile`.
    pub default_ulimits: Vec<String>,
    /// What becomes of the image's declared volumes (`Volumes`): `bind` (containerd's
    /// default), `mkdir` (CRI-O's default) or `ignore`.
    pub image_volumes: ImageVolumes,
    /// The CRIU binary checkpoints are made with; empty: the `criu` on PATH. It must be
    /// CRIU 3.16 or later and pass `criu check` on this kernel (docs/checkpoint.md).
    pub criu_path: PathBuf,
    /// RuntimeClass handlers whose containers an OCI runtime binary runs (CRI-O's
    /// `[crio.runtime.runtimes.NAME]`), by handler name. Each is a handler a pod may ask for
    /// besides `runtime_handlers`, which youki's libcontainer runs; a name in both is the
    /// binary's.
    pub runtimes: BTreeMap<String, RuntimeHandlerConfig>,
    pub network: NetworkConfig,
    pub registry: RegistryConfig,
    pub image: ImageStoreConfig,
    pub stream: StreamConfig,
    pub metrics: MetricsConfig,
    pub nri: NriConfig,
    pub checkpoint: CheckpointConfig,
}

/// NRI (Node Resource Interface) plugins, as containerd 2.x hosts them: on by default.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NriConfig {
    pub enable: bool,
    /// The unix socket external plugins connect to.
    pub socket_path: PathBuf,
    /// Pre-installed plugins (executables named `NN-name`), started by crust.
    pub plugin_path: PathBuf,
    /// Configuration of pre-installed plugins: `NN-name.conf`, else `name.conf`.
    pub plugin_config_path: PathBuf,
    /// How long a plugin may take to register once connected (`5s`, `500ms`).
    pub registration_timeout: Seconds,
    /// How long a plugin may take to answer one event; one that takes longer is dropped.
    pub request_timeout: Seconds,
}

impl Default for NriConfig {
    fn default() -> Self {
        NriConfig {
            enable: true,
            socket_path: "/var/run/nri/nri.sock".into(),
            plugin_path: "/opt/nri/plugins".into(),
            plugin_config_path: "/etc/nri/conf.d".into(),
            registration_timeout: Seconds(std::time::Duration::from_secs(5)),
            request_timeout: Seconds(std::time::Duration::from_secs(2)),
        }
    }
}

impl NriConfig {
    fn validate(&self) -> Result<(), String> {
        for (name, p) in [
            ("socket_path", &self.socket_path),
            ("plugin_path", &self.plugin_path),
            ("plugin_config_path", &self.plugin_config_path),
        ] {
            if !p.is_absolute() {
                return Err(format!(
                    "nri.{name} must be an absolute path, got {}",
                    p.display()
                ));
            }
        }
        for (name, t) in [
            ("registration_timeout", self.registration_timeout),
            ("request_timeout", self.request_timeout),
        ] {
            if t.0.is_zero() || t.0 > std::time::Duration::from_secs(600) {
                return Err(format!("nri.{name} must be between 1ms and 10m"));
            }
        }
        Ok(())
    }
}

/// One of `default_ulimits`: a resource limit by its name in `setrlimit(2)` without `RLIMIT_`
/// (`nofile`, `nproc`, `core`, ...), with its soft and hard values (`u64::MAX`: unlimited).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ulimit {
    pub name: String,
    pub soft: u64,
    pub hard: u64,
}

impl Ulimit {
    const NAMES: [&'static str; 16] = [
        "as",
        "core",
        "cpu",
        "data",
        "fsize",
        "locks",
        "memlock",
        "msgqueue",
        "nice",
        "nofile",
        "nproc",
        "rss",
        "rtprio",
        "rttime",
        "sigpending",
        "stack",
    ];

    /// `name=soft:hard` or `name=limit` (both the same), as CRI-O and Docker write ulimits; a
    /// value may be `-1` or `unlimited`.
    pub fn parse(text: &str) -> Result<Ulimit, String> {
        let (name, values) = text
            .split_once('=')
            .ok_or("not name=soft:hard (as \"nofile=1024:4096\")")?;
        if !Self::NAMES.contains(&name) {
            return Err(format!(
                "{name:?} is not a resource limit ({})",
                Self::NAMES.join(", ")
            ));
        }
        let value = |v: &str| match v {
            "-1" | "unlimited" => Ok(u64::MAX),
            v => v
                .parse::<u64>()
                .map_err(|_| format!("{v:?} is not a number, -1 or unlimited")),
        };
        let (soft, hard) = match values.split_once(':') {
            Some((soft, hard)) => (value(soft)?, value(hard)?),
            None => (value(values)?, value(values)?),
        };
        if soft > hard {
            return Err("the soft limit is above the hard one".into());
        }
        Ok(Ulimit {
            name: name.to_owned(),
            soft,
            hard,
        })
    }

    /// Every entry of `default_ulimits`, parsed (the configuration was validated).
    pub fn all(config: &Config) -> Vec<Ulimit> {
        config
            .default_ulimits
            .iter()
            .filter_map(|u| Ulimit::parse(u).ok())
            .collect()
    }
}

/// A duration written as Go writes them in containerd's configuration: `2s`, `500ms`, `1m`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seconds(pub std::time::Duration);

impl Seconds {
    pub fn parse(s: &str) -> Option<Seconds> {
        let s = s.trim();
        let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let (num, unit) = s.split_at(split);
        let n: f64 = num.parse().ok()?;
        let secs = match unit {
            "ms" => n / 1000.0,
            "s" => n,
            "m" => n * 60.0,
            _ => return None,
        };
        (secs.is_finite() && secs >= 0.0).then(|| Seconds(std::time::Duration::from_secs_f64(secs)))
    }
}

impl Serialize for Seconds {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{}ms", self.0.as_millis()))
    }
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Seconds, D::Error> {
        let s = String::deserialize(d)?;
        Seconds::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format!("{s:?} is not a duration like \"2s\" or \"500ms\""))
        })
    }
}

/// crust's own Prometheus metrics.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// `host:port` to serve them on (`GET /metrics`), e.g. `127.0.0.1:9100`; unset: not served.
    pub address: Option<std::net::SocketAddr>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkConfig {
    /// CNI network configuration directory; the lexically first config in it is used.
    pub conf_dir: PathBuf,
    /// A CNI config with `{{.PodCIDR}}` in it, written to `conf_dir` when kubelet sends the
    /// node's pod CIDR (clusters without a network add-on, like containerd's conf_template).
    pub conf_template: Option<PathBuf>,
    /// Directories searched, in order, for CNI plugin binaries.
    pub bin_dirs: Vec<PathBuf>,
    /// How long one CNI plugin invocation may take.
    pub plugin_timeout_ms: u64,
    /// Pod subnets whose traffic leaving the subnet is masqueraded (one iptables rule each, set
    /// at start). The default covers the network crust ships in cni/10-crust.conflist.
    pub masquerade_subnets: Vec<String>,
    /// Pods not on the host network get `net.ipv4.ip_unprivileged_port_start = 0` unless they
    /// set it themselves: any user may bind a port below 1024 in the pod (containerd 2.x's
    /// `enable_unprivileged_ports`, on by default).
    pub enable_unprivileged_ports: bool,
    /// Pods not on the host network get `net.ipv4.ping_group_range = 0 2147483647` unless they
    /// set it themselves: any group may open ICMP echo sockets, so `ping` works as non-root
    /// (containerd 2.x's `enable_unprivileged_icmp`, on by default).
    pub enable_unprivileged_icmp: bool,
}

/// The image store and pulls.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ImageStoreConfig {
    /// Layer downloads running at once, across all pulls.
    pub max_concurrent_downloads: usize,
    /// A pull that receives no data for this many seconds is aborted.
    pub pull_progress_timeout_secs: u64,
    /// A layer download that averages less than this many KiB/s over a window of
    /// `pull_progress_timeout_secs` is aborted, freeing its download slot; 0 turns it off.
    pub pull_min_kib_per_sec: u64,
    /// Pulls stop (ResourceExhausted) rather than leave less than this share of the image
    /// filesystem's space or inodes free; 0 turns the check off.
    pub min_free_percent: u8,
    /// Images kubelet's garbage collection must leave alone (CRI `Image.pinned`), as references
    /// or globs (`*` for any run of characters) over an image's full names.
    pub pinned_images: Vec<String>,
}

impl Default for ImageStoreConfig {
    fn default() -> Self {
        ImageStoreConfig {
            max_concurrent_downloads: 3,
            pull_progress_timeout_secs: 60,
            pull_min_kib_per_sec: 16,
            min_free_percent: 5,
            pinned_images: Vec::new(),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            version: layers::CURRENT_VERSION,
            listen: "unix:///run/crust/crust.sock".into(),
            root: "/var/lib/crust".into(),
            state: "/run/crust".into(),
            log_level: "info".into(),
            log_format: LogFormat::Text,
            cgroup_driver: CgroupDriver::Cgroupfs,
            default_cgroup_parent: "/crust".into(),
            cgroup_scope_prefix: "crust".into(),
            default_runtime_handler: "runc".into(),
            runtime_handlers: vec!["runc".into()],
            cdi_spec_dirs: vec!["/etc/cdi".into(), "/var/run/cdi".into()],
            device_ownership_from_security_context: false,
            hooks_dir: Vec::new(),
            default_ulimits: Vec::new(),
            image_volumes: ImageVolumes::Bind,
            criu_path: PathBuf::new(),
            runtimes: BTreeMap::new(),
            network: NetworkConfig::default(),
            registry: RegistryConfig::default(),
            image: ImageStoreConfig::default(),
            stream: StreamConfig::default(),
            metrics: MetricsConfig::default(),
            nri: NriConfig::default(),
            checkpoint: CheckpointConfig::default(),
        }
    }
}

impl Default for NetworkConfig {
    fn default() -> Self {
        NetworkConfig {
            conf_dir: "/etc/cni/net.d".into(),
            conf_template: None,
            bin_dirs: vec!["/opt/cni/bin".into(), "/usr/lib/cni".into()],
            plugin_timeout_ms: 30_000,
            masquerade_subnets: vec!["10.88.0.0/16".into()],
            enable_unprivileged_ports: true,
            enable_unprivileged_icmp: true,
        }
    }
}

/// The exec / attach / port-forward server (kubelet and crictl connect to the URLs the Exec,
/// Attach and PortForward RPCs answer).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StreamConfig {
    /// IP address to listen on.
    pub address: String,
    /// TCP port; 0 takes any free port.
    pub port: u16,
    /// PEM certificate chain; with `tls_key`, the server speaks HTTPS.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// A stream with no traffic either way for this long is closed (kubelet's 4 h).
    pub idle_timeout_secs: u64,
    /// Streaming connections open at once; more are refused with 429.
    pub max_sessions: usize,
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            address: "127.0.0.1".into(),
            port: 0,
            tls_cert: None,
            tls_key: None,
            idle_timeout_secs: 4 * 3600,
            max_sessions: 1000,
        }
    }
}

impl StreamConfig {
    fn validate(&self) -> Result<(), String> {
        if self.address.parse::<std::net::IpAddr>().is_err() {
            return Err(format!(
                "stream.address {:?} is not an IP address",
                self.address
            ));
        }
        match (&self.tls_cert, &self.tls_key) {
            (None, None) => {}
            (Some(c), Some(k)) => {
                for f in [c, k] {
                    if !f.is_file() {
                        return Err(format!("stream TLS file {} is not a file", f.display()));
                    }
                }
            }
            _ => return Err("stream.tls_cert and stream.tls_key go together".into()),
        }
        if self.idle_timeout_secs == 0 {
            return Err("stream.idle_timeout_secs must be positive".into());
        }
        if !(1..=100_000).contains(&self.max_sessions) {
            return Err("stream.max_sessions must be between 1 and 100000".into());
        }
        Ok(())
    }
}

/// Values given on the command line; each one set replaces the file's.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub listen: Option<String>,
    pub root: Option<PathBuf>,
    pub state: Option<PathBuf>,
    pub log_level: Option<String>,
    pub log_format: Option<LogFormat>,
}

impl Config {
    /// Loads `path` (or the default path when it exists) and the drop-ins beside it, applies
    /// `overrides` and validates.
    pub fn load(path: Option<&Path>, overrides: Overrides) -> Result<Config, ConfigError> {
        layers::load(layers::LoadRequest {
            path: path.map(Path::to_owned),
            overrides,
        })
        .map(|l| l.config)
    }

    pub fn parse(text: &str) -> Result<Config, toml::de::Error> {
        toml::from_str(text)
    }

    /// Applies the flags given; returns the keys they set, each with its flag.
    fn apply(&mut self, o: Overrides) -> Vec<(&'static str, &'static str)> {
        let mut set = Vec::new();
        if let Some(v) = o.listen {
            self.listen = v;
            set.push(("listen", "--listen"));
        }
        if let Some(v) = o.root {
            self.root = v;
            set.push(("root", "--root"));
        }
        if let Some(v) = o.state {
            self.state = v;
            set.push(("state", "--state"));
        }
        if let Some(v) = o.log_level {
            self.log_level = v;
            set.push(("log_level", "--log-level"));
        }
        if let Some(v) = o.log_format {
            self.log_format = v;
            set.push(("log_format", "--log-format"));
        }
        set
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        if self.version != layers::CURRENT_VERSION {
            return invalid(format!(
                "version {} is not the format this crust reads ({})",
                self.version,
                layers::CURRENT_VERSION
            ));
        }
        self.socket_path()?;
        for (name, dir) in [("root", &self.root), ("state", &self.state)] {
            if !dir.is_absolute() {
                return invalid(format!(
                    "{name} must be an absolute path, got {}",
                    dir.display()
                ));
            }
        }
        if let Some(dir) = self.cdi_spec_dirs.iter().find(|d| !d.is_absolute()) {
            return invalid(format!(
                "cdi_spec_dirs must hold absolute paths, got {}",
                dir.display()
            ));
        }
        for u in &self.default_ulimits {
            Ulimit::parse(u)
                .map_err(|why| ConfigError::Invalid(format!("default_ulimits: {u:?}: {why}")))?;
        }
        if let Some(dir) = self.hooks_dir.iter().find(|d| !d.is_absolute()) {
            return invalid(format!(
                "hooks_dir: {} is not an absolute path",
                dir.display()
            ));
        }
        if !self.criu_path.as_os_str().is_empty() && !self.criu_path.is_absolute() {
            return invalid(format!(
                "criu_path: {} is not an absolute path",
                self.criu_path.display()
            ));
        }
        if self.root == self.state {
            return invalid("root and state must be different directories".into());
        }
        for (handler, runtime) in &self.runtimes {
            runtime
                .validate(handler, self.cgroup_driver)
                .map_err(ConfigError::Invalid)?;
        }
        if !self.handler_names().contains(&self.default_runtime_handler) {
            return invalid(format!(
                "default_runtime_handler {:?} is not one of runtime_handlers {:?} nor of runtimes",
                self.default_runtime_handler, self.runtime_handlers
            ));
        }
        let prefix = &self.cgroup_scope_prefix;
        if prefix.is_empty()
            || !prefix
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            || prefix.starts_with('-')
            || prefix.ends_with('-')
        {
            return Err(ConfigError::Invalid(format!(
                "cgroup_scope_prefix {prefix:?}: lowercase letters, digits and inner dashes only \
                 (a systemd unit name's part)"
            )));
        }
        if !self.default_cgroup_parent.starts_with('/')
            && self.cgroup_driver == CgroupDriver::Cgroupfs
        {
            return invalid(
                "default_cgroup_parent must start with / for the cgroupfs driver".into(),
            );
        }
        if self.network.plugin_timeout_ms == 0 {
            return invalid("network.plugin_timeout_ms must be positive".into());
        }
        for subnet in &self.network.masquerade_subnets {
            if !is_cidr(subnet) {
                return invalid(format!(
                    "network.masquerade_subnets: {subnet:?} is not a CIDR"
                ));
            }
        }
        self.validate_registry()?;
        self.stream.validate().map_err(ConfigError::Invalid)?;
        self.nri.validate().map_err(ConfigError::Invalid)?;
        tracing_subscriber::EnvFilter::try_new(&self.log_level)
            .map_err(|e| ConfigError::Invalid(format!("log_level {:?}: {e}", self.log_level)))?;
        Ok(())
    }

    fn validate_registry(&self) -> Result<(), ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        for (host, mirror) in &self.registry.mirrors {
            for e in &mirror.endpoints {
                if endpoint_host(e).is_none() {
                    return invalid(format!(
                        "registry.mirrors.{host:?}: endpoint {e:?} must be http://host[:port][/path] or https://host[:port][/path]"
                    ));
                }
            }
        }
        for (host, c) in &self.registry.configs {
            if let Some(Err(e)) = c.auth.as_ref().map(RegistryCredentials::validate) {
                return invalid(format!("registry.configs.{host:?}.auth: {e}"));
            }
            match (&c.cert_file, &c.key_file) {
                (Some(_), None) | (None, Some(_)) => {
                    return invalid(format!(
                        "registry.configs.{host:?}: cert_file and key_file go together (a client \
                         certificate and its private key)"
                    ));
                }
                (Some(cert), Some(key)) => {
                    for (name, f) in [("cert_file", cert), ("key_file", key)] {
                        if !f.is_file() {
                            return invalid(format!(
                                "registry.configs.{host:?}: {name} {} is not a file",
                                f.display()
                            ));
                        }
                    }
                }
                (None, None) => {}
            }
            if let Some(ca) = &c.ca_file {
                if !ca.is_file() {
                    return invalid(format!(
                        "registry.configs.{host:?}: ca_file {} is not a file",
                        ca.display()
                    ));
                }
            }
        }
        let image = &self.image;
        if !(1..=64).contains(&image.max_concurrent_downloads) {
            return invalid("image.max_concurrent_downloads must be between 1 and 64".into());
        }
        if image.pull_progress_timeout_secs == 0 {
            return invalid("image.pull_progress_timeout_secs must be positive".into());
        }
        if image.min_free_percent > 50 {
            return invalid("image.min_free_percent must be between 0 and 50".into());
        }
        if let Some(p) = image
            .pinned_images
            .iter()
            .find(|p| p.is_empty() || p.contains(char::is_whitespace))
        {
            return invalid(format!(
                "image.pinned_images: {p:?} is not an image reference or glob"
            ));
        }
        Ok(())
    }

    /// The unix socket path named by `listen`.
    pub fn socket_path(&self) -> Result<PathBuf, ConfigError> {
        let path = self.listen.strip_prefix("unix://").unwrap_or(&self.listen);
        if path.contains("://") || !path.starts_with('/') {
            return Err(ConfigError::Invalid(format!(
                "listen must be unix:///absolute/path or an absolute path, got {:?}",
                self.listen
            )));
        }
        Ok(PathBuf::from(path))
    }
}

/// Whether `s` is an IPv4 or IPv6 network in CIDR notation (`10.88.0.0/16`).
pub fn is_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    match (ip.parse::<std::net::IpAddr>(), bits.parse::<u8>()) {
        (Ok(std::net::IpAddr::V4(_)), Ok(b)) => b <= 32,
        (Ok(std::net::IpAddr::V6(_)), Ok(b)) => b <= 128,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        let c = Config::default();
        c.validate().unwrap();
        assert_eq!(
            c.socket_path().unwrap(),
            PathBuf::from("/run/crust/crust.sock")
        );
    }

    #[test]
    fn file_values_and_overrides() {
        let mut c = Config::parse(
            r#"
            root = "/data/crust"
            [network]
            conf_dir = "/tmp/net.d"
            [registry.mirrors."registry.k8s.io"]
            endpoints = ["http://127.0.0.1:5000"]
            "#,
        )
        .unwrap();
        c.apply(Overrides {
            listen: Some("/tmp/c.sock".into()),
            ..Default::default()
        });
        c.validate().unwrap();
        assert_eq!(c.root, PathBuf::from("/data/crust"));
        assert_eq!(c.state, PathBuf::from("/run/crust"));
        assert_eq!(c.network.conf_dir, PathBuf::from("/tmp/net.d"));
        assert_eq!(c.socket_path().unwrap(), PathBuf::from("/tmp/c.sock"));
        assert_eq!(
            c.registry.mirrors["registry.k8s.io"].endpoints,
            ["http://127.0.0.1:5000"]
        );
    }

    #[test]
    fn registry_and_image_settings() {
        let c = Config::parse(
            r#"
            [registry.mirrors."docker.io"]
            endpoints = ["http://127.0.0.1:5000", "https://mirror.example:8443/"]
            [registry.configs."mirror.example:8443"]
            insecure_skip_verify = true
            [image]
            max_concurrent_downloads = 5
            pull_progress_timeout_secs = 7
            "#,
        )
        .unwrap();
        c.validate().unwrap();
        assert_eq!(c.image.max_concurrent_downloads, 5);
        assert!(c.registry.configs["mirror.example:8443"].insecure_skip_verify);
        assert_eq!(
            endpoint_host("https://mirror.example:8443/"),
            Some("mirror.example:8443")
        );
        for bad in [
            "ftp://x",
            "http://",
            "127.0.0.1:5000",
            "http://host/a/../b",
            "http://host/a?x=1",
            "http://host//a",
            "http://host/%2e",
        ] {
            assert!(endpoint_host(bad).is_none(), "{bad}");
        }
        assert_eq!(
            endpoint_parts("https://harbor.example/v2/hub-proxy/"),
            Some(("harbor.example", "/v2/hub-proxy"))
        );
        assert_eq!(endpoint_parts("http://m:5000"), Some(("m:5000", "")));
        // containerd's hosts.toml reading: a v2 segment is the API root as given.
        assert_eq!(endpoint_api_root(""), "/v2");
        assert_eq!(endpoint_api_root("/v2/hub-proxy"), "/v2/hub-proxy");
        assert_eq!(endpoint_api_root("/repository/hub"), "/repository/hub/v2");
        assert_eq!(endpoint_api_root("/v2"), "/v2");
        let mut c = Config::default();
        c.image.max_concurrent_downloads = 0;
        assert!(c.validate().is_err());
        assert!(Config::parse("[image]\nbogus = 1").is_err());
    }

    #[test]
    fn registry_credentials_are_checked_and_never_shown() {
        let c = Config::parse(
            r#"
            [registry.configs."mirror.example".auth]
            username = "alice"
            password = "s3cret"
            [registry.configs."other.example".auth]
            auth = "Ym9iOnB3"
            "#,
        )
        .unwrap();
        c.validate().unwrap();
        let shown = format!("{:?} {}", c.registry, serde_json::to_string(&c).unwrap());
        assert!(
            shown.contains("alice") && shown.contains("<redacted>"),
            "{shown}"
        );
        assert!(
            !shown.contains("s3cret") && !shown.contains("Ym9iOnB3"),
            "{shown}"
        );
        for (bad, why) in [
            ("username = \"u\"", "go together"),
            ("password = \"p\"\nauth = \"Ym9iOnB3\"", "only one"),
            ("auth = \"bm9jb2xvbg==\"", "username:password"),
            ("auth = \"%%%\"", "username:password"),
            ("", "set username"),
        ] {
            let c = Config::parse(&format!("[registry.configs.\"h\".auth]\n{bad}")).unwrap();
            let e = c.validate().unwrap_err().to_string();
            assert!(
                e.contains("registry.configs.\"h\".auth") && e.contains(why),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn stream_settings() {
        let c = Config::default();
        assert_eq!(
            (
                c.stream.address.as_str(),
                c.stream.port,
                c.stream.idle_timeout_secs
            ),
            ("127.0.0.1", 0, 14_400)
        );
        let c =
            Config::parse("[stream]\naddress = \"::\"\nport = 10010\nmax_sessions = 5").unwrap();
        c.validate().unwrap();
        assert_eq!(c.stream.port, 10010);
        for (bad, why) in [
            ("address = \"localhost\"", "not an IP"),
            ("tls_cert = \"/etc/hostname\"", "go together"),
            (
                "tls_cert = \"/nonexistent\"\ntls_key = \"/nonexistent\"",
                "not a file",
            ),
            ("idle_timeout_secs = 0", "positive"),
            ("max_sessions = 0", "between"),
        ] {
            let c = Config::parse(&format!("[stream]\n{bad}")).unwrap();
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert!(Config::parse("[stream]\nbogus = 1").is_err());
    }

    #[test]
    fn metrics_endpoint_is_off_unless_an_address_is_given() {
        assert_eq!(Config::default().metrics.address, None);
        let c = Config::parse("[metrics]\naddress = \"127.0.0.1:9100\"").unwrap();
        assert_eq!(c.metrics.address, Some("127.0.0.1:9100".parse().unwrap()));
        let e = Config::parse("[metrics]\naddress = \"localhost\"").unwrap_err();
        assert!(e.to_string().contains("address"), "{e}");
    }

    #[test]
    fn nri_is_on_by_default_with_nris_own_paths_and_timeouts() {
        let c = Config::default();
        assert!(c.nri.enable);
        assert_eq!(c.nri.socket_path, PathBuf::from("/var/run/nri/nri.sock"));
        assert_eq!(c.nri.plugin_path, PathBuf::from("/opt/nri/plugins"));
        assert_eq!(c.nri.plugin_config_path, PathBuf::from("/etc/nri/conf.d"));
        assert_eq!(
            c.nri.registration_timeout.0,
            std::time::Duration::from_secs(5)
        );
        assert_eq!(c.nri.request_timeout.0, std::time::Duration::from_secs(2));
        let c = Config::parse(
            "[nri]\nenable = false\nsocket_path = \"/tmp/n.sock\"\nrequest_timeout = \"500ms\"",
        )
        .unwrap();
        c.validate().unwrap();
        assert!(!c.nri.enable);
        assert_eq!(
            c.nri.request_timeout.0,
            std::time::Duration::from_millis(500)
        );
        let e = Config::parse("[nri]\nrequest_timeout = \"2 hours\"").unwrap_err();
        assert!(e.to_string().contains("not a duration"), "{e}");
        let c = Config::parse("[nri]\nsocket_path = \"nri.sock\"").unwrap();
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("nri.socket_path")
        );
        let c = Config::parse("[nri]\nregistration_timeout = \"0s\"").unwrap();
        assert!(c.validate().is_err());
    }

    #[test]
    fn unknown_keys_and_bad_values_are_rejected() {
        assert!(Config::parse("nonsense = 1").is_err());
        let c = Config {
            listen: "tcp://0.0.0.0:1".into(),
            ..Default::default()
        };
        assert!(c.validate().unwrap_err().to_string().contains("listen"));
        let c = Config {
            default_runtime_handler: "kata".into(),
            ..Default::default()
        };
        assert!(c.validate().unwrap_err().to_string().contains("kata"));
    }

    #[test]
    fn node_defaults_are_checked_when_read() {
        let c = Config::parse(
            "device_ownership_from_security_context = true\nhooks_dir = [\"/h\"]\n\
             default_ulimits = [\"nofile=1024:4096\", \"core=unlimited\"]\n\
             image_volumes = \"mkdir\"\n\
             [image]\npinned_images = [\"registry.k8s.io/pause:3.10\", \"*base*\"]\n",
        )
        .unwrap();
        c.validate().unwrap();
        assert!(c.device_ownership_from_security_context);
        assert_eq!(c.image_volumes, ImageVolumes::Mkdir);
        assert_eq!(Config::default().image_volumes, ImageVolumes::Bind);
        let nofile = Ulimit {
            name: "nofile".into(),
            soft: 1024,
            hard: 4096,
        };
        assert_eq!(Ulimit::all(&c)[0], nofile);
        assert_eq!(Ulimit::all(&c)[1].soft, u64::MAX);
        assert_eq!(Ulimit::parse("nproc=5").unwrap().hard, 5);
        let refused = [
            ("default_ulimits = [\"nofile\"]", "not name=soft:hard"),
            ("default_ulimits = [\"files=1\"]", "not a resource limit"),
            ("default_ulimits = [\"nofile=9:1\"]", "soft limit is above"),
            ("default_ulimits = [\"nofile=x\"]", "not a number"),
            ("hooks_dir = [\"rel\"]", "hooks_dir: rel"),
            ("[image]\npinned_images = [\"\"]", "pinned_images"),
        ];
        for (text, want) in refused {
            let err = Config::parse(text).unwrap().validate().unwrap_err();
            assert!(err.to_string().contains(want), "{text}: {err}");
        }
        assert!(Config::parse("image_volumes = \"copy\"").is_err());
    }

    #[test]
    fn runtime_handlers_of_oci_binaries_are_resolved_and_checked() {
        let c = Config::parse(
            "default_runtime_handler = \"crun\"\n\
             [runtimes.crun]\nruntime_path = \"/usr/bin/crun\"\n\
             [runtimes.runc]\nruntime_path = \"/usr/sbin/runc\"\nruntime_root = \"/run/r\"\n\
             runtime_args = [\"--debug\"]\n\
             [runtimes.gvisor]\nruntime_path = \"/opt/runsc\"\nsandbox = true\n\
             [runtimes.runsc]\nruntime_path = \"/usr/bin/runsc\"\n",
        )
        .unwrap();
        c.validate().unwrap();
        assert_eq!(c.handler_names(), ["runc", "crun", "gvisor", "runsc"]);
        let runtimes = c.oci_runtimes();
        assert_eq!(runtimes["crun"].root, Path::new("/run/crust/runtimes/crun"));
        assert_eq!(runtimes["runc"].root, Path::new("/run/r"));
        assert_eq!(runtimes["runc"].args, ["--debug"]);
        assert!(!runtimes["crun"].systemd_cgroup);
        // runsc makes a sandbox per pod: named so, or said so.
        assert!(runtimes["gvisor"].sandbox && runtimes["runsc"].sandbox);
        assert!(!runtimes["crun"].sandbox);
        let refused = [
            (
                "[runtimes.crun]\nruntime_path = \"crun\"",
                "runtimes.crun.runtime_path",
            ),
            (
                "[runtimes.crun]\nruntime_path = \"/c\"\nruntime_root = \"r\"",
                "runtimes.crun.runtime_root",
            ),
            (
                "[runtimes.crun]\nruntime_path = \"/c\"\nsystemd_cgroup = true",
                "runtimes.crun.systemd_cgroup",
            ),
            (
                "[runtimes.crun]\nruntime_path = \"/c\"\nruntime_args = [\"x\"]",
                "runtimes.crun.runtime_args",
            ),
            (
                "[runtimes.\"a b\"]\nruntime_path = \"/c\"",
                "not a handler name",
            ),
        ];
        for (text, want) in refused {
            let err = Config::parse(text).unwrap().validate().unwrap_err();
            assert!(err.to_string().contains(want), "{text}: {err}");
        }
        assert!(Config::parse("[runtimes.crun]\nruntime = \"/c\"").is_err());
    }

    /// `crust config default` is the whole default configuration: it reads back as the
    /// defaults, names every key (an optional one in a comment), and comments each one.
    #[test]
    fn the_default_file_is_the_defaults_with_a_comment_per_key() {
        let parsed = Config::parse(DEFAULT_TOML).unwrap();
        parsed.validate().unwrap();
        assert_eq!(
            serde_json::to_value(&parsed).unwrap(),
            serde_json::to_value(Config::default()).unwrap()
        );
        let mut full = Config::default();
        full.network.conf_template = Some("/t".into());
        full.stream.tls_cert = Some("/c".into());
        full.stream.tls_key = Some("/k".into());
        full.metrics.address = Some("127.0.0.1:1".parse().unwrap());
        let lines: Vec<&str> = DEFAULT_TOML.lines().collect();
        for key in changes::leaves(&full).keys() {
            let name = key.rsplit('.').next().unwrap();
            let at = lines.iter().position(|l| {
                let l = l.trim_start_matches("# ");
                l.starts_with(&format!("{name} = ")) || l.contains(&format!("[{key}"))
            });
            let at = at.unwrap_or_else(|| panic!("{key} is not in default.toml"));
            assert!(
                at > 0 && lines[at - 1].starts_with('#'),
                "{key} has no comment before it in default.toml"
            );
        }
    }
}
