//! `crust serve`: prepares the directories, takes the state lock, recovers sandboxes, then serves
//! CRI on the unix socket until SIGTERM or SIGINT, letting in-flight RPCs finish. Pods and their
//! monitors keep running across a daemon stop. A service manager is told when the socket serves,
//! when a reload runs and when the daemon stops (`crate::notify`); SIGHUP reloads the
//! configuration (`reload.rs`).

mod reload;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::durable::mount;
use nix::fcntl::{Flock, FlockArg};
use nix::mount::MsFlags;
use tokio::net::UnixListener;

use crate::config::layers::Loaded;
use crate::config::{Config, ConfigError};
use crate::container::{ContainerContext, Containers};
use crate::cri::{ImageServer, RuntimeServer};
use crate::logging::LogHandle;
use crate::network::{Cni, CniSettings};
use crate::sandbox::{CgroupSettings, SandboxContext, Sandboxes};

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("another crust is serving {0}")]
    AlreadyRunning(String),
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("opening the image store: {0}")]
    Image(#[from] crate::image::ImageError),
    #[error("serving gRPC: {0}")]
    Serve(#[from] tonic::transport::Error),
    #[error("network.conf_template: {0}")]
    Network(String),
    #[error("starting the stream server: {0}")]
    Stream(#[from] crate::stream::StreamError),
    #[error("starting NRI: {0}")]
    Nri(#[from] crate::nri::NriError),
    #[error("the records' epoch: {0}")]
    Records(crate::store::StoreError),
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> DaemonError + 'a {
    move |source| DaemonError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

/// How long in-flight RPCs may take to finish after SIGTERM/SIGINT.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Runs the daemon until it is asked to stop. `log` changes the log on a reload (None: the
/// log stays as it is).
pub fn run(loaded: Loaded, log: Option<LogHandle>) -> Result<(), DaemonError> {
    crate::sys::tune_allocator();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(16)
        .enable_all()
        .build()
        .map_err(io("starting runtime", Path::new("-")))?;
    runtime.block_on(serve(loaded, log))
}

async fn serve(loaded: Loaded, log: Option<LogHandle>) -> Result<(), DaemonError> {
    let config = loaded.config.clone();
    let socket = config.socket_path()?;
    for dir in [&config.root, &config.state] {
        crate::durable::create_dir_all(dir).map_err(io("creating", dir))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711))
            .map_err(io("setting mode of", dir))?;
    }
    // Locked before the tmpfs is mounted: of two daemons started at once, the second stops
    // here and never mounts a tmpfs over the first one's state.
    let _lock = lock_state(&config.state, &socket)?;
    ensure_tmpfs(&config.state)?;
    let sandboxes = Sandboxes::new(sandbox_context(&config)?);
    prepare_ns_dir(&sandboxes.context().ns_dir())?;
    for dir in [
        sandboxes.context().sandboxes_dir(),
        sandboxes.context().records_dir.clone(),
    ] {
        crate::durable::create_dir_all(&dir).map_err(io("creating", &dir))?;
    }
    let records = crate::store::records_dir(&config.root);
    let epoch = crate::store::epoch::of_state(&config.state).map_err(DaemonError::Records)?;
    let continuity = crate::store::epoch::continuity(&records, &epoch);
    if let crate::store::epoch::Continuity::Lost(loss) = &continuity {
        tracing::warn!(
            "{}: every pod crust knows is NotReady and its containers exited; what they held is released",
            loss.describe(&config.state)
        );
    }
    let summary = sandboxes.recover(&continuity).await;
    tracing::info!(
        ready = summary.ready,
        not_ready = summary.not_ready,
        rolled_back = summary.rolled_back,
        outlived = summary.outlived,
        damaged = summary.damaged,
        newer = summary.newer,
        migrated = summary.migrated,
        "recovered pod sandboxes"
    );
    crate::metrics::monitors_adopted(summary.ready as u64);
    let subnets = config.network.masquerade_subnets.clone();
    tokio::spawn(async move {
        for problem in crate::network::masquerade::ensure(&subnets).await {
            tracing::warn!("{problem}; pods in that subnet cannot reach other networks");
        }
    });
    let images = Arc::new(tokio::task::block_in_place(|| {
        crate::image::Images::open(crate::image::ImageSettings::from_config(&config), true)
    })?);
    let containers = start_containers(&config, &sandboxes, &images, &continuity).await?;
    // Both rooms now describe this state directory's objects.
    crate::store::epoch::settle(&records, &epoch).map_err(DaemonError::Records)?;
    // Plugins start (and connect) once the pods and containers they are synchronized with are
    // recovered, and before any client can make new ones.
    let nri = sandboxes.context().nri.clone();
    nri.set_executor(Arc::new(crate::container::PluginExecutor(Arc::downgrade(
        &containers,
    ))));
    nri.start().await?;
    let listener = bind(&socket)?;
    let settings = crate::stream::ServerSettings::from_config(&config.stream);
    let backend = crate::stream::containers::ContainerBackend(containers.clone());
    let (stream_server, streams) =
        crate::stream::StreamServer::bind(settings, Some(Arc::new(backend))).await?;
    tracing::info!(url = %streams.base_url(), "stream server listening");
    tokio::spawn(stream_server.serve());
    if let Some(addr) = config.metrics.address {
        serve_metrics(addr, &sandboxes, &containers).await?;
    }
    let config_info = Arc::new(std::sync::Mutex::new(
        serde_json::to_string(&config).unwrap_or_default(),
    ));
    let reloader = Arc::new(reload::Reloader {
        current: std::sync::Mutex::new(loaded),
        pending: Default::default(),
        log,
        images: images.clone(),
        cni: sandboxes.context().cni.clone(),
        info: config_info.clone(),
        state: config.state.clone(),
    });
    reloader.record(None);
    let runtime = RuntimeServer {
        cni: sandboxes.context().cni.clone(),
        containers,
        sandboxes,
        cgroup_driver: config.cgroup_driver,
        handlers: config.handler_names(),
        config_info,
        streams: Arc::new(streams),
        listed: Default::default(),
    };
    tracing::info!(socket = %socket.display(), version = env!("CARGO_PKG_VERSION"), "crust serving CRI v1");
    tokio::spawn(reload::on_hangup(reloader));
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    let stopping = Arc::new(tokio::sync::Notify::new());
    let signalled = stopping.clone();
    let images = ImageServer {
        images,
        handlers: config.handler_names(),
    };
    let server = crate::cri::serve(runtime, images, incoming, async move {
        shutdown_signal().await;
        crate::notify::stopping("finishing in-flight requests; pods keep running");
        signalled.notify_one();
    });
    // The socket listens: connections from now on are served (those made before the server's
    // first poll wait in the backlog).
    crate::notify::ready(&format!("serving CRI on {}", socket.display()));
    // In-flight RPCs get a grace period; a client that never lets go of its connection does
    // not keep the daemon alive past it.
    tokio::select! {
        served = server => served?,
        () = async {
            stopping.notified().await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => tracing::warn!("connections still open after {SHUTDOWN_GRACE:?}; exiting anyway"),
    }
    nri.stop().await;
    let _ = crate::durable::remove_file(&socket);
    tracing::info!("crust stopped; pods keep running");
    Ok(())
}

/// The container service, after recovering the containers of the previous run.
async fn start_containers(
    config: &Config,
    sandboxes: &Arc<Sandboxes>,
    images: &Arc<crate::image::Images>,
    continuity: &crate::store::epoch::Continuity,
) -> Result<Arc<Containers>, DaemonError> {
    let mut ctx = ContainerContext::new(
        &config.state,
        &config.root,
        sandboxes.context().cgroups.clone(),
    );
    ctx.cdi_spec_dirs = config.cdi_spec_dirs.clone();
    ctx.device_ownership_from_security_context = config.device_ownership_from_security_context;
    ctx.hooks_dirs = config.hooks_dir.clone();
    ctx.image_volumes = config.image_volumes;
    ctx.criu_path = Some(config.criu_path.clone()).filter(|p| !p.as_os_str().is_empty());
    ctx.restore_policy = config.checkpoint.restore;
    ctx.host.default_ulimits = crate::config::Ulimit::all(config);
    ctx.runtimes = config.oci_runtimes();
    let runtimes = ctx.runtimes.clone();
    ctx.runtime_features = tokio::task::spawn_blocking(move || probe_runtimes(&runtimes))
        .await
        .map_err(|e| DaemonError::Config(ConfigError::Invalid(e.to_string())))??;
    ctx.prepare_dirs().map_err(io(
        "creating the container directories under",
        &config.state,
    ))?;
    load_apparmor_profile(ctx.apparmor.as_ref());
    let containers = Containers::new(ctx, sandboxes.clone(), images.clone());
    let summary = containers.recover(continuity).await;
    tracing::info!(
        live = summary.live,
        exited = summary.exited,
        rolled_back = summary.rolled_back,
        discarded = summary.discarded,
        failed = summary.failed,
        reclaiming = summary.reclaiming,
        "recovered containers"
    );
    Ok(containers)
}

/// Asks each handler's runtime binary its version (one that does not answer stops the start,
/// naming its key) and its features.
fn probe_runtimes(
    runtimes: &std::collections::BTreeMap<String, crate::model::OciRuntime>,
) -> Result<std::collections::BTreeMap<String, crate::monitor::oci_cli::RuntimeFeatures>, DaemonError>
{
    let mut out = std::collections::BTreeMap::new();
    for (handler, runtime) in runtimes {
        let version = crate::monitor::oci_cli::version(runtime)
            .map_err(|e| ConfigError::Invalid(format!("runtimes.{handler}.runtime_path: {e}")))?;
        let features = crate::monitor::oci_cli::features(runtime);
        tracing::info!(
            handler = %handler,
            path = %runtime.path.display(),
            version = %version,
            recursive_read_only_mounts = features.recursive_read_only_mounts,
            user_namespaces = features.user_namespaces,
            features_unknown = features.unknown.as_deref().unwrap_or(""),
            "runtime handler with an OCI runtime binary"
        );
        out.insert(handler.clone(), features);
    }
    Ok(out)
}

/// Starts crust's own metrics endpoint on `addr`.
async fn serve_metrics(
    addr: std::net::SocketAddr,
    sandboxes: &Arc<Sandboxes>,
    containers: &Arc<Containers>,
) -> Result<(), DaemonError> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(io(
        "binding the metrics endpoint",
        Path::new(&addr.to_string()),
    ))?;
    let (s, c, e) = (sandboxes.clone(), containers.clone(), containers.clone());
    let state = crate::metrics::StateSource {
        pods: Box::new(move || {
            let all = s.list(&Default::default());
            let ready = all.iter().filter(|v| v.ready).count() as u64;
            vec![("ready", ready), ("notready", all.len() as u64 - ready)]
        }),
        containers: Box::new(move || {
            let mut counts = vec![("created", 0), ("running", 0), ("exited", 0)];
            for r in c.list(&Default::default()) {
                if let Some(n) = counts.iter_mut().find(|(s, _)| *s == r.state_name()) {
                    n.1 += 1;
                }
            }
            counts
        }),
        events: Box::new(move || {
            let (now, dropped) = e.event_subscribers();
            (now as u64, dropped)
        }),
    };
    tokio::spawn(crate::metrics::serve(
        listener,
        crate::metrics::registry(state),
    ));
    tracing::info!(%addr, "serving metrics on /metrics");
    Ok(())
}

fn sandbox_context(config: &Config) -> Result<SandboxContext, DaemonError> {
    let exe = std::env::current_exe().map_err(io("locating", Path::new("/proc/self/exe")))?;
    let cni = Cni::new(CniSettings::from_config(&config.network));
    if let Some(t) = &config.network.conf_template {
        crate::network::template::check(t).map_err(|e| DaemonError::Network(e.to_string()))?;
    }
    Ok(SandboxContext {
        state_dir: config.state.clone(),
        records_dir: crate::store::records_dir(&config.root).join("sandboxes"),
        exe,
        cni: Arc::new(cni),
        cgroups: CgroupSettings::detect(
            config.cgroup_driver,
            config.default_cgroup_parent.clone(),
            "/sys/fs/cgroup".into(),
        )
        .with_scope_prefix(&config.cgroup_scope_prefix),
        default_handler: config.default_runtime_handler.clone(),
        handlers: config.handler_names(),
        runtimes: config.oci_runtimes(),
        monitor_timeout: Duration::from_secs(10),
        pod_sysctls: crate::sandbox::PodSysctlDefaults {
            unprivileged_ports: config.network.enable_unprivileged_ports,
            unprivileged_icmp: config.network.enable_unprivileged_icmp,
        },
        history: Arc::new(crate::history::History::new(&config.state)),
        nri: if config.nri.enable {
            crate::nri::Nri::new(crate::nri::NriSettings::from_config(&config.nri))
        } else {
            crate::nri::Nri::disabled()
        },
    })
}

/// Loads crust's AppArmor profile where the kernel enforces AppArmor. A failure is not fatal:
/// containers that need the profile fail, saying why, and `crust check` says it too.
fn load_apparmor_profile(apparmor: Option<&crate::container::apparmor::AppArmor>) {
    let Some(apparmor) = apparmor else {
        tracing::info!("AppArmor is not enabled on this host: RuntimeDefault means no profile");
        return;
    };
    let profile = crate::container::apparmor::DEFAULT_PROFILE;
    match apparmor.ensure_default() {
        Ok(true) => tracing::info!(profile, "loaded the AppArmor profile"),
        Ok(false) => tracing::info!(profile, "the AppArmor profile is loaded already; using it"),
        Err(e) => tracing::warn!(profile, error = %e, "AppArmor profile not loaded"),
    }
}

/// The state directory describes processes, mounts and namespaces, which all die with the
/// machine, so it lives in memory: if it is not on a tmpfs already (as `/run` is on most hosts),
/// one is mounted there (on an empty directory only). A reboot empties it; the records, on
/// disk under the root, say what ran before (`store::epoch`).
fn ensure_tmpfs(state: &Path) -> Result<(), DaemonError> {
    let on_tmpfs = nix::sys::statfs::statfs(state)
        .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC);
    if on_tmpfs {
        return Ok(());
    }
    // Never hide what is there already: records of running pods would vanish under the mount.
    let empty = std::fs::read_dir(state)
        .map(|mut d| d.next().is_none())
        .unwrap_or(false);
    if !empty {
        tracing::warn!(state = %state.display(), "state directory is not on a tmpfs and not empty; using it as it is");
        return Ok(());
    }
    mount(
        Some("tmpfs"),
        state,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=0711"),
    )
    .map_err(|e| DaemonError::Io {
        what: "mounting tmpfs on",
        path: state.to_owned(),
        source: e.into(),
    })?;
    tracing::info!(state = %state.display(), "mounted a tmpfs on the state directory");
    Ok(())
}

/// One daemon per state directory: the lock is held for the daemon's life. It lives beside the
/// state directory, not in it, so that it is the same file before and after the tmpfs is
/// mounted there.
fn lock_state(state: &Path, socket: &Path) -> Result<Flock<std::fs::File>, DaemonError> {
    let path = lock_path(state);
    if !path.exists() {
        crate::durable::write(&path, b"").map_err(io("creating", &path))?;
    }
    // Held read-only: flock needs no write access, and a writer would keep the state
    // filesystem from being remounted read-only.
    let file = std::fs::File::open(&path).map_err(io("opening", &path))?;
    Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|_| {
        DaemonError::AlreadyRunning(format!(
            "{} (it holds {}); stop it first",
            socket.display(),
            path.display()
        ))
    })
}

/// The configuration the daemon serving `state` runs (None when no daemon holds its lock, or
/// it left no record).
pub fn running_config(state: &Path) -> Option<crate::config::dump::RunningConfig> {
    if !daemon_running(state) {
        return None;
    }
    crate::store::load(&state.join(crate::config::dump::RUNNING_FILE)).ok()
}

/// Whether a daemon holds the lock of `state` (it is beside the state directory).
pub fn daemon_running(state: &Path) -> bool {
    let path = lock_path(state);
    let Ok(file) = std::fs::File::open(&path) else {
        return false;
    };
    Flock::lock(file, FlockArg::LockSharedNonblock).is_err()
}

fn lock_path(state: &Path) -> PathBuf {
    let name = state
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "state".into());
    state
        .parent()
        .unwrap_or(Path::new("/"))
        .join(format!(".{name}.lock"))
}

/// Namespace pins live in a directory that is its own shared mount (as `ip netns` does), so an
/// unmount of a pin reaches copies of it in other mount namespaces.
fn prepare_ns_dir(dir: &Path) -> Result<(), DaemonError> {
    crate::durable::create_dir_all(dir).map_err(io("creating", dir))?;
    let shared = |d: &Path| {
        mount(
            None::<&str>,
            d,
            None::<&str>,
            MsFlags::MS_SHARED | MsFlags::MS_REC,
            None::<&str>,
        )
    };
    if shared(dir).is_ok() {
        return Ok(());
    }
    mount(
        Some(dir),
        dir,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| DaemonError::Io {
        what: "bind-mounting",
        path: dir.to_owned(),
        source: e.into(),
    })?;
    shared(dir).map_err(|e| DaemonError::Io {
        what: "sharing mount",
        path: dir.to_owned(),
        source: e.into(),
    })
}

/// Binds the CRI socket (mode 0660). A stale socket file is replaced; a live one is an error.
fn bind(socket: &Path) -> Result<UnixListener, DaemonError> {
    if let Some(parent) = socket.parent() {
        crate::durable::create_dir_all(parent).map_err(io("creating", parent))?;
    }
    if socket.exists() {
        if std::os::unix::net::UnixStream::connect(socket).is_ok() {
            return Err(DaemonError::AlreadyRunning(socket.display().to_string()));
        }
        crate::durable::remove_file(socket).map_err(io("removing stale socket", socket))?;
    }
    let listener = UnixListener::bind(socket).map_err(io("binding", socket))?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o660))
        .map_err(io("setting mode of", socket))?;
    Ok(listener)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: finishing in-flight requests"),
        _ = int.recv() => tracing::info!("SIGINT: finishing in-flight requests"),
    }
}
