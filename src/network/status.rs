//! Whether pods can be networked now: the configuration loads, its plugins are installed, and,
//! for a list of cniVersion 1.1.0 or later, every plugin's STATUS succeeds (CNI spec 1.1,
//! "STATUS: Check plugin status"; libcni's `GetStatusNetworkList`, which containerd 2.0.1+ and
//! CRI-O 1.36 call from the CRI Status). A plugin whose agent is down (Cilium's at boot or
//! during an upgrade) then turns NetworkReady false with its own words, and kubelet marks the
//! node NotReady instead of failing every new sandbox on ADD. Lists of older versions are not
//! asked: their plugins predate the command.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Attachment, Cni, CniError, NetworkList, exec};

/// kubelet asks for Status every few seconds, and `crictl info` in a loop can ask far more
/// often: a round younger than this is answered again instead of starting every plugin anew.
const REUSE: Duration = Duration::from_secs(1);
/// The most a STATUS may take, whatever ADD's deadline: a plugin that cannot say within it is
/// not ready, and kubelet's Status call is not held for ADD's 30 s.
const STATUS_TIMEOUT: Duration = Duration::from_secs(10);

/// One STATUS round: for which list, when, and the plugin that failed with its words.
pub(super) struct Seen {
    list: Arc<NetworkList>,
    at: Instant,
    failed: Option<(String, String)>,
}

impl NetworkList {
    /// Whether the list's version has STATUS (1.1.0 or later).
    pub fn has_status(&self) -> bool {
        version(&self.cni_version) >= Some((1, 1, 0))
    }
}

impl Cni {
    /// Whether pods can be networked now; the error says why not.
    pub async fn ready(&self) -> Result<(), CniError> {
        let list = self.network()?;
        if !list.has_status() {
            return Ok(());
        }
        let mut seen = self.status.lock().await;
        let fresh = seen
            .as_ref()
            .filter(|s| Arc::ptr_eq(&s.list, &list) && s.at.elapsed() < REUSE);
        let failed = match fresh {
            Some(s) => s.failed.clone(),
            None => {
                let failed = self.status_round(&list).await;
                *seen = Some(Seen {
                    list: list.clone(),
                    at: Instant::now(),
                    failed: failed.clone(),
                });
                failed
            }
        };
        match failed {
            None => Ok(()),
            Some((plugin, msg)) => Err(CniError::NotReady {
                network: list.name.clone(),
                plugin,
                msg,
            }),
        }
    }

    /// `ready` for a command outside the daemon (`crust check`, `crust diagnose`), which has
    /// no async runtime of its own.
    pub fn ready_now(&self) -> Result<(), CniError> {
        let list = self.network()?;
        if !list.has_status() {
            return Ok(());
        }
        match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime.block_on(self.ready()),
            Err(e) => Err(CniError::Spawn {
                plugin: list
                    .plugins
                    .first()
                    .map(|p| p.kind.clone())
                    .unwrap_or_default(),
                command: "STATUS",
                source: e,
            }),
        }
    }

    /// Runs STATUS on each plugin in the list's order; the first that fails, with its message.
    async fn status_round(&self, list: &NetworkList) -> Option<(String, String)> {
        // STATUS concerns no pod: no container, namespace or interface (libcni passes them
        // empty), only the plugin's configuration.
        let none = Attachment {
            container_id: String::new(),
            netns: Default::default(),
            ifname: String::new(),
            args: Vec::new(),
            port_mappings: Vec::new(),
        };
        let timeout = self.settings().plugin_timeout.min(STATUS_TIMEOUT);
        for plugin in &list.plugins {
            let conf = list.plugin_conf(plugin, &none, None);
            let ran = exec::run_for(
                self,
                &plugin.kind,
                &list.name,
                "STATUS",
                &none,
                &conf,
                timeout,
            );
            match ran.await {
                Ok(_) => {}
                Err(CniError::PluginFailed { msg, .. }) => return Some((plugin.kind.clone(), msg)),
                Err(e) => return Some((plugin.kind.clone(), e.to_string())),
            }
        }
        None
    }
}

/// "1.1.0" as (1, 1, 0); a missing part is 0; None for what is not a version.
fn version(v: &str) -> Option<(u32, u32, u32)> {
    let mut parts = v.trim().split('.').map(|p| p.parse::<u32>());
    let major = parts.next()?.ok()?;
    let minor = parts.next().unwrap_or(Ok(0)).ok()?;
    let patch = parts.next().unwrap_or(Ok(0)).ok()?;
    parts.next().is_none().then_some((major, minor, patch))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lists_of_1_1_and_later_are_asked() {
        let list = |v: &str| NetworkList {
            name: "n".into(),
            cni_version: v.into(),
            plugins: Vec::new(),
            source: Default::default(),
        };
        for v in ["1.1.0", "1.1", "1.2.0", "2.0.0", " 1.1.0 "] {
            assert!(list(v).has_status(), "{v}");
        }
        for v in ["1.0.0", "0.4.0", "0.3.1", "", "1.1.0-rc1", "one", "1.1.0.0"] {
            assert!(!list(v).has_status(), "{v}");
        }
    }
}
