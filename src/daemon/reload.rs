//! SIGHUP: the configuration read again from the same files and flags, and what may change live
//! applied to the running daemon (`config::changes::LIVE`): the log filter and format, the
//! registry mirrors, TLS settings and credentials, the CNI configuration directory, plugin
//! directories and timeout. Each goes in whole (an `Arc` swapped under a lock), so an RPC under
//! way finishes with what it started with and the next one sees the new value.
//!
//! A change to any other key is named in a warning (it takes effect at the next start) and kept
//! in the running configuration's record as pending. A file that does not load (bad TOML, an
//! unknown key, an invalid value) changes nothing: the error is logged and recorded, and the
//! daemon runs on as it was. Every outcome is written to `<state>/config.json`, which `crust
//! config dump` reads.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::config::changes::{self, Change};
use crate::config::dump::{RUNNING_FILE, ReloadOutcome, RunningConfig};
use crate::config::layers::{self, Loaded};
use crate::image::Images;
use crate::logging::LogHandle;
use crate::network::{Cni, CniSettings};

/// What a reload reads and changes.
pub struct Reloader {
    /// The configuration the daemon runs.
    pub current: Mutex<Loaded>,
    /// Changes the files made that wait for a restart.
    pub pending: Mutex<Vec<Change>>,
    pub log: Option<LogHandle>,
    pub images: Arc<Images>,
    pub cni: Arc<Cni>,
    /// `crictl info`'s configuration, as JSON.
    pub info: Arc<Mutex<String>>,
    pub state: PathBuf,
}

impl Reloader {
    /// Writes the running configuration's record (at start, and after each reload).
    pub fn record(&self, last_reload: Option<ReloadOutcome>) {
        let current = lock(&self.current).clone();
        let pending = lock(&self.pending).clone();
        let record = RunningConfig::new(&current, pending, last_reload);
        let path = self.state.join(RUNNING_FILE);
        if let Err(e) = crate::store::save(&path, &record) {
            tracing::warn!(error = %e, "saving the running configuration for crust config dump");
        }
    }

    /// Reads the configuration again and applies what can change live.
    pub async fn reload(&self) {
        crate::notify::reloading();
        let request = lock(&self.current).request.clone();
        let loaded = tokio::task::spawn_blocking(move || layers::load(request)).await;
        let outcome = match loaded {
            Ok(Ok(new)) => self.apply(new),
            Ok(Err(e)) => Err(e.to_string()),
            Err(e) => Err(format!("the reload's task failed: {e}")),
        };
        let now = now_nanos();
        let outcome = match outcome {
            Ok(applied) => ReloadOutcome {
                at: now,
                error: None,
                applied,
            },
            Err(error) => {
                tracing::warn!(%error, "configuration reload failed: the running configuration is kept");
                ReloadOutcome {
                    at: now,
                    error: Some(error),
                    applied: Vec::new(),
                }
            }
        };
        let status = match &outcome.error {
            None => "serving CRI; configuration reloaded".to_owned(),
            Some(e) => format!("serving CRI; the last reload failed: {e}"),
        };
        self.record(Some(outcome));
        crate::notify::ready(&status);
    }

    /// Applies `new`'s live keys; returns what changed live. Fails, changing nothing, when a
    /// live value cannot be used.
    fn apply(&self, new: Loaded) -> Result<Vec<Change>, String> {
        let old = lock(&self.current).clone();
        let all = changes::between(&old, &new);
        if let Some(t) = &new.config.network.conf_template {
            crate::network::template::check(t)
                .map_err(|e| format!("network.conf_template: {e}"))?;
        }
        let (live, later): (Vec<Change>, Vec<Change>) = all.into_iter().partition(|c| c.live);
        let n = &new.config;
        if live.iter().any(|c| c.key.starts_with("log_")) {
            if let Some(log) = &self.log {
                log.set(&n.log_level, n.log_format)
                    .map_err(|e| e.to_string())?;
            }
        }
        if live.iter().any(|c| c.key.starts_with("registry")) {
            self.images.set_registry(n.registry.clone());
        }
        if live.iter().any(|c| c.key.starts_with("network.")) {
            self.cni.set_settings(CniSettings::from_config(&n.network));
        }
        let running = changes::running(&old, &new);
        *lock(&self.info) = serde_json::to_string(&running.config).unwrap_or_default();
        *lock(&self.current) = running;
        if live.is_empty() {
            tracing::info!("configuration reloaded: nothing that applies live changed");
        }
        for c in &live {
            tracing::info!(change = %c, "configuration reloaded: applied");
        }
        for c in &later {
            tracing::warn!(
                change = %c,
                "configuration reloaded: {} needs a restart of crust to take effect; the running daemon keeps {}",
                c.key,
                c.old.as_deref().unwrap_or("it unset")
            );
        }
        *lock(&self.pending) = later;
        Ok(live)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or_default()
}

/// Reloads on every SIGHUP, one at a time, for the daemon's life.
pub async fn on_hangup(reloader: Arc<Reloader>) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot catch SIGHUP: configuration reloads are off");
        return;
    };
    while hup.recv().await.is_some() {
        tracing::info!("SIGHUP: reloading the configuration");
        reloader.reload().await;
    }
}
