//! The plugins crust hosts and what they are told about: plugins in index order, the socket
//! external ones connect to, the pre-installed ones crust starts, and crust's pods and
//! containers as NRI describes them (what a plugin that connects is synchronized with).
//!
//! The gate: every event holds it shared while it goes out to the plugins and changes the
//! table; a plugin's synchronization holds it alone, from the table's snapshot until the plugin
//! is in the list. So a pod or container either is in the snapshot or its event reaches the new
//! plugin. Events wait while a plugin synchronizes (at most the request timeout).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use prost::Message as _;
use tokio::sync::mpsc;

use super::plugin::{Launched, Plugin};
use super::ttrpc::{Conn, Incoming, rpc};
use super::{Eviction, Executor, NriError, NriSettings, ResourceUpdate, api, spec};

/// One pod or container as plugins know it, and which of its events went out.
pub(super) struct Known<T> {
    pub object: T,
    /// Bit `e` set: event `e` was delivered.
    pub sent: u32,
    /// An object's events go out one at a time, in order.
    pub turn: Arc<tokio::sync::Mutex<()>>,
}

impl<T> Known<T> {
    pub(super) fn new(object: T) -> Known<T> {
        Known {
            object,
            sent: 0,
            turn: Arc::new(tokio::sync::Mutex::new(())),
        }
    }
}

#[derive(Default)]
pub(super) struct Table {
    pub pods: HashMap<String, Known<api::PodSandbox>>,
    pub containers: HashMap<String, Known<api::Container>>,
}

pub struct Nri {
    pub(super) settings: NriSettings,
    plugins: Mutex<Vec<Arc<Plugin>>>,
    pub(super) gate: tokio::sync::RwLock<()>,
    pub(super) table: Mutex<Table>,
    executor: OnceLock<Arc<dyn Executor>>,
    /// Set when the daemon stops: the pre-installed plugins' keepers kill them.
    stopping: tokio::sync::watch::Sender<bool>,
    keepers: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Nri {
    pub fn new(settings: NriSettings) -> Arc<Nri> {
        Arc::new(Nri {
            settings,
            plugins: Mutex::new(Vec::new()),
            gate: tokio::sync::RwLock::new(()),
            table: Mutex::new(Table::default()),
            executor: OnceLock::new(),
            stopping: tokio::sync::watch::channel(false).0,
            keepers: Mutex::new(Vec::new()),
        })
    }

    /// NRI turned off: every hook returns at once.
    pub fn disabled() -> Arc<Nri> {
        Nri::new(NriSettings {
            enable: false,
            socket_path: Default::default(),
            plugin_path: Default::default(),
            plugin_config_path: Default::default(),
            registration_timeout: Default::default(),
            request_timeout: Default::default(),
            runtime_version: String::new(),
        })
    }

    pub fn enabled(&self) -> bool {
        self.settings.enable
    }

    /// Who applies plugins' updates and evictions (the container service).
    pub fn set_executor(&self, executor: Arc<dyn Executor>) {
        let _ = self.executor.set(executor);
    }

    pub(super) fn executor(&self) -> Option<Arc<dyn Executor>> {
        self.executor.get().cloned()
    }

    pub(super) fn lock_table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The live plugins, in index order.
    pub(super) fn plugins(&self) -> Vec<Arc<Plugin>> {
        let mut list = self.plugins.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|p| !p.is_closed());
        list.clone()
    }

    /// The names of the plugins connected now, in index order.
    pub fn plugin_names(&self) -> Vec<String> {
        self.plugins().iter().map(|p| p.name()).collect()
    }

    /// Starts the pre-installed plugins, then listens for external ones. Call once the table
    /// holds what recovery found, so the plugins are synchronized with it.
    pub async fn start(self: &Arc<Self>) -> Result<(), NriError> {
        if !self.enabled() {
            return Ok(());
        }
        for (launched, path) in discover(&self.settings) {
            let name = format!("{}-{}", launched.idx, launched.base);
            match self.launch(launched, &path).await {
                Ok(()) => tracing::info!(plugin = %name, "pre-installed NRI plugin started"),
                Err(e) => {
                    tracing::warn!(plugin = %name, error = %e, "pre-installed NRI plugin not started")
                }
            }
        }
        let listener = bind(&self.settings.socket_path)?;
        tracing::info!(socket = %self.settings.socket_path.display(), "NRI plugins may connect");
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                let Some(nri) = me.upgrade() else { return };
                tokio::spawn(async move {
                    let (conn, incoming) = Conn::start(socket);
                    if let Err(e) = nri.take_on(conn, incoming, None).await {
                        tracing::warn!(error = %e, "NRI plugin refused");
                    }
                });
            }
        });
        Ok(())
    }

    /// Tells every plugin crust is going down and stops the pre-installed ones.
    pub async fn stop(&self) {
        if !self.enabled() {
            return;
        }
        let plugins = self.plugins();
        futures_util::future::join_all(plugins.iter().map(|p| p.shutdown())).await;
        self.stopping.send_replace(true);
        let keepers = std::mem::take(&mut *self.keepers.lock().unwrap_or_else(|e| e.into_inner()));
        futures_util::future::join_all(keepers).await;
        let _ = crate::durable::remove_file(&self.settings.socket_path);
    }

    /// Starts pre-installed plugin `path` on a socket pair and takes it on.
    async fn launch(self: &Arc<Self>, launched: Launched, path: &Path) -> Result<(), String> {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().map_err(|e| e.to_string())?;
        let mut cmd = std::process::Command::new(path);
        cmd.env_clear()
            .env("NRI_PLUGIN_NAME", &launched.base)
            .env("NRI_PLUGIN_IDX", &launched.idx)
            .env("NRI_PLUGIN_SOCKET", "3")
            .stdin(std::process::Stdio::null());
        crate::sys::pass_fd_as_3(&mut cmd, theirs.into());
        let mut cmd = tokio::process::Command::from(cmd);
        cmd.kill_on_drop(true);
        let child = cmd
            .spawn()
            .map_err(|e| format!("starting {}: {e}", path.display()))?;
        // The child's copy of the socket is its own now: drop ours, so its end closes with it.
        drop(cmd);
        let keeper = keep(
            child,
            format!("{}-{}", launched.idx, launched.base),
            self.stopping.subscribe(),
        );
        self.keepers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(keeper);
        ours.set_nonblocking(true).map_err(|e| e.to_string())?;
        let socket = tokio::net::UnixStream::from_std(ours).map_err(|e| e.to_string())?;
        let (conn, incoming) = Conn::start(socket);
        self.take_on(conn, incoming, Some(launched)).await
    }

    /// Registration, configuration and synchronization of a new plugin; then it is in the list.
    async fn take_on(
        self: &Arc<Self>,
        conn: Conn,
        incoming: mpsc::Receiver<Incoming>,
        launched: Option<Launched>,
    ) -> Result<(), String> {
        let (plugin, incoming) = Plugin::connect(conn.clone(), incoming, launched, &self.settings)
            .await
            .map_err(|e| {
                conn.close();
                e.to_string()
            })?;
        let plugin = Arc::new(plugin);
        let name = plugin.name();
        let gate = self.gate.write().await;
        let (pods, containers) = {
            let t = self.lock_table();
            (
                t.pods.values().map(|k| k.object.clone()).collect(),
                t.containers.values().map(|k| k.object.clone()).collect(),
            )
        };
        let updates = match plugin.synchronize(pods, containers).await {
            Ok(u) => u,
            Err(e) => {
                plugin.close();
                return Err(format!("plugin {name}: {e}"));
            }
        };
        {
            let mut list = self.plugins.lock().unwrap_or_else(|e| e.into_inner());
            list.push(plugin.clone());
            // Stable: plugins of one index keep the order they came in.
            list.sort_by(|a, b| a.idx.cmp(&b.idx));
        }
        drop(gate);
        tracing::info!(plugin = %name, order = ?self.plugin_names(), "NRI plugin synchronized");
        let me = Arc::downgrade(self);
        tokio::spawn(serve(me, plugin, incoming));
        if !updates.is_empty() {
            let (updates, _refused) = self.resource_updates(&updates);
            self.apply_effects(updates, Vec::new());
        }
        Ok(())
    }

    /// NRI updates as the container room applies them; an update crust cannot express is
    /// dropped with a warning (no live container takes it).
    /// The updates as OCI resources, and the ids of the containers whose update crust cannot
    /// express (a block I/O or RDT class): those are failed updates, never silently dropped.
    pub(super) fn resource_updates(
        &self,
        updates: &[api::ContainerUpdate],
    ) -> (Vec<ResourceUpdate>, Vec<String>) {
        let (mut out, mut refused) = (Vec::new(), Vec::new());
        for u in updates {
            let Some(r) = u.linux.as_ref().and_then(|l| l.resources.as_ref()) else {
                continue;
            };
            match to_oci(r) {
                Ok(resources) => out.push(ResourceUpdate {
                    container_id: u.container_id.clone(),
                    resources,
                    ignore_failure: u.ignore_failure,
                }),
                Err(e) => {
                    tracing::warn!(container_id = %u.container_id, error = %e, "NRI update not applied");
                    refused.push(u.container_id.clone());
                }
            }
        }
        (out, refused)
    }

    /// Applies plugins' updates and evictions in the background: they change other containers,
    /// whose own verbs take their locks.
    pub(super) fn apply_effects(&self, updates: Vec<ResourceUpdate>, evictions: Vec<Eviction>) {
        let Some(executor) = self.executor() else {
            return;
        };
        tokio::spawn(async move {
            if !updates.is_empty() {
                let failed = executor.update(updates).await;
                if !failed.is_empty() {
                    tracing::warn!(?failed, "NRI updates of containers failed");
                }
            }
            for e in evictions {
                let id = e.container_id.clone();
                if let Err(err) = executor.evict(e).await {
                    tracing::warn!(container_id = %id, error = %err, "NRI eviction failed");
                }
            }
        });
    }
}

/// Reaps a pre-installed plugin when it exits, and kills it when the daemon stops.
fn keep(
    mut child: tokio::process::Child,
    name: String,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        tokio::select! {
            status = child.wait() => {
                tracing::warn!(plugin = %name, ?status, "pre-installed NRI plugin exited");
            }
            () = super::ttrpc::conn::until_set(&mut stopping) => {
                let _ = child.kill().await;
            }
        }
    })
}

/// NRI resources as OCI's typed resources.
pub(super) fn to_oci(r: &api::LinuxResources) -> Result<oci_spec::runtime::LinuxResources, String> {
    let json = spec::oci_resources(r)?;
    serde_json::from_value(json).map_err(|e| e.to_string())
}

/// Answers a plugin's own calls (UpdateContainers) until its connection closes; then it
/// leaves the list.
async fn serve(me: Weak<Nri>, plugin: Arc<Plugin>, mut incoming: mpsc::Receiver<Incoming>) {
    let name = plugin.name();
    loop {
        let call = tokio::select! {
            c = incoming.recv() => c,
            () = plugin.closed() => None,
        };
        let Some(call) = call else { break };
        let Some(nri) = me.upgrade() else { break };
        let answer = match (call.service.as_str(), call.method.as_str()) {
            (super::plugin::RUNTIME_SERVICE, "UpdateContainers") => {
                nri.update_containers(&name, &call.payload).await
            }
            (_, "RegisterPlugin") => {
                rpc::refused(rpc::INVALID_ARGUMENT, "already registered".into())
            }
            (s, m) => rpc::refused(
                rpc::UNIMPLEMENTED,
                format!("{s}/{m} is not served by crust"),
            ),
        };
        let _ = call.reply.send(answer);
    }
    plugin.close();
    tracing::info!(plugin = %name, "NRI plugin disconnected");
}

impl Nri {
    /// A plugin's unsolicited UpdateContainers: its updates and evictions of live containers.
    async fn update_containers(&self, plugin: &str, payload: &[u8]) -> Vec<u8> {
        let req = match api::UpdateContainersRequest::decode(payload) {
            Ok(r) => r,
            Err(e) => return rpc::refused(rpc::INVALID_ARGUMENT, e.to_string()),
        };
        tracing::info!(
            plugin,
            updates = req.update.len(),
            evictions = req.evict.len(),
            "NRI plugin updates containers"
        );
        let Some(executor) = self.executor() else {
            return rpc::refused(rpc::UNIMPLEMENTED, "crust is not ready for updates".into());
        };
        let (updates, refused) = self.resource_updates(&req.update);
        let mut failed_ids = executor.update(updates).await;
        failed_ids.extend(refused);
        for e in req.evict {
            let eviction = Eviction {
                container_id: e.container_id,
                reason: e.reason,
            };
            let id = eviction.container_id.clone();
            if let Err(err) = executor.evict(eviction).await {
                tracing::warn!(plugin, container_id = %id, error = %err, "NRI eviction failed");
            }
        }
        let failed = req
            .update
            .into_iter()
            .filter(|u| failed_ids.contains(&u.container_id))
            .collect();
        rpc::ok(api::UpdateContainersResponse { failed }.encode_to_vec())
    }
}

/// The pre-installed plugins: executables named `NN-name` in the plugin directory, with their
/// configuration (`NN-name.conf`, else `name.conf`, in the configuration directory).
fn discover(settings: &NriSettings) -> Vec<(Launched, std::path::PathBuf)> {
    use std::os::unix::fs::PermissionsExt;
    let Ok(dir) = std::fs::read_dir(&settings.plugin_path) else {
        return Vec::new();
    };
    let mut found: Vec<_> = dir
        .flatten()
        .filter(|e| {
            e.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some((idx, base)) = name.split_once('-') else {
                tracing::warn!(file = %name, "not an NRI plugin name (NN-name); skipped");
                return None;
            };
            if super::plugin::check_index(idx).is_err() {
                tracing::warn!(file = %name, "not an NRI plugin name (NN-name); skipped");
                return None;
            }
            let conf =
                |f: String| std::fs::read_to_string(settings.plugin_config_path.join(f)).ok();
            let config = conf(format!("{name}.conf"))
                .or_else(|| conf(format!("{base}.conf")))
                .unwrap_or_default();
            let launched = Launched {
                idx: idx.to_owned(),
                base: base.to_owned(),
                config,
            };
            Some((launched, e.path()))
        })
        .collect();
    found.sort_by(|a, b| a.1.cmp(&b.1));
    found
}

/// Binds the NRI socket (mode 0600 in a 0700 directory, as NRI). A stale socket is replaced;
/// one another runtime serves is an error: plugins would not know which runtime they talk to.
fn bind(path: &Path) -> Result<tokio::net::UnixListener, NriError> {
    let fail = |message: String| NriError::Socket {
        path: path.to_owned(),
        message,
    };
    if let Some(parent) = path.parent() {
        if !parent.exists() {
            crate::durable::create_dir_all(parent)
                .map_err(|e| fail(format!("creating its directory: {e}")))?;
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o700));
        }
    }
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(fail(
                "another runtime serves NRI there (set nri.socket_path, or nri.enable = false)"
                    .into(),
            ));
        }
        crate::durable::remove_file(path)
            .map_err(|e| fail(format!("removing the stale socket: {e}")))?;
    }
    let listener =
        tokio::net::UnixListener::bind(path).map_err(|e| fail(format!("binding: {e}")))?;
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
    Ok(listener)
}
