//! One NRI plugin over its connection: registration (the plugin calls RegisterPlugin on the
//! runtime's service within the registration timeout), configuration (crust calls Configure
//! and learns the events the plugin subscribes to), synchronization in chunks that each fit a
//! ttrpc message, the calls of each event with the request timeout, and Shutdown.

use std::time::Duration;

use prost::Message as _;
use tokio::sync::mpsc;

use super::api;
use super::ttrpc::{CallError, Conn, Incoming, rpc};
use super::{NRI_VERSION, NriSettings};

pub const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";
pub const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";

/// Every event NRI defines (`ValidEvents`): what a plugin that names none subscribes to.
const VALID_EVENTS: i32 = (1 << (api::Event::Last as i32 - 1)) - 1;

/// How much of a ttrpc message one Synchronize chunk may fill: the envelope (service, method,
/// deadline) and the chunk's own fields take the rest.
const SYNC_BUDGET: usize = super::ttrpc::message::MAX_MESSAGE - 64 * 1024;

/// Why a plugin could not be taken on.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("it did not register within {0:?}")]
    NoRegistration(Duration),
    #[error("it closed the connection before registering")]
    Gone,
    #[error("its first call was {0}, not RegisterPlugin")]
    NotRegistration(String),
    #[error("invalid registration: {0}")]
    Invalid(String),
    #[error("Configure failed: {0}")]
    Configure(CallError),
    #[error("it subscribed to unknown events (mask 0x{0:x})")]
    Events(i32),
    #[error("Synchronize failed: {0}")]
    Sync(CallError),
    #[error("it cannot take Synchronize in chunks (it answered a chunk with updates)")]
    Chunks,
}

pub struct Plugin {
    pub idx: String,
    pub base: String,
    conn: Conn,
    events: i32,
    request_timeout: Duration,
}

/// Who a pre-installed plugin is, known before it registers.
pub struct Launched {
    pub idx: String,
    pub base: String,
    pub config: String,
}

impl Plugin {
    /// Takes a new connection through registration and configuration. The plugin's later
    /// calls (UpdateContainers) arrive on the receiver returned.
    pub async fn connect(
        conn: Conn,
        mut incoming: mpsc::Receiver<Incoming>,
        launched: Option<Launched>,
        settings: &NriSettings,
    ) -> Result<(Plugin, mpsc::Receiver<Incoming>), ConnectError> {
        let wait = settings.registration_timeout;
        let first = match tokio::time::timeout(wait, incoming.recv()).await {
            Err(_) => return Err(ConnectError::NoRegistration(wait)),
            Ok(None) => return Err(ConnectError::Gone),
            Ok(Some(call)) => call,
        };
        if first.service != RUNTIME_SERVICE || first.method != "RegisterPlugin" {
            let what = format!("{}/{}", first.service, first.method);
            let _ = first
                .reply
                .send(rpc::refused(rpc::INVALID_ARGUMENT, "register first".into()));
            return Err(ConnectError::NotRegistration(what));
        }
        let registered = api::RegisterPluginRequest::decode(first.payload.as_slice())
            .map_err(|e| e.to_string())
            .and_then(|r| identity(r, launched.as_ref()));
        let (idx, base) = match registered {
            Ok(id) => id,
            Err(e) => {
                let _ = first
                    .reply
                    .send(rpc::refused(rpc::INVALID_ARGUMENT, e.clone()));
                return Err(ConnectError::Invalid(e));
            }
        };
        let _ = first.reply.send(rpc::ok(api::Empty {}.encode_to_vec()));
        let mut plugin = Plugin {
            idx,
            base,
            conn,
            events: 0,
            request_timeout: settings.request_timeout,
        };
        let configure = api::ConfigureRequest {
            config: launched.map(|l| l.config).unwrap_or_default(),
            runtime_name: "crust".into(),
            runtime_version: settings.runtime_version.clone(),
            registration_timeout: settings.registration_timeout.as_millis() as i64,
            request_timeout: settings.request_timeout.as_millis() as i64,
            nri_version: NRI_VERSION.into(),
        };
        let answer: api::ConfigureResponse = plugin
            .call("Configure", &configure)
            .await
            .map_err(ConnectError::Configure)?;
        plugin.events = match answer.events {
            0 => VALID_EVENTS,
            e if e & !VALID_EVENTS != 0 => return Err(ConnectError::Events(e & !VALID_EVENTS)),
            e => e,
        };
        Ok((plugin, incoming))
    }

    /// `NN-name`, as NRI names plugins.
    pub fn name(&self) -> String {
        format!("{}-{}", self.idx, self.base)
    }

    pub fn subscribed(&self, event: api::Event) -> bool {
        let e = event as i32;
        e > 0 && self.events & (1 << (e - 1)) != 0
    }

    pub fn is_closed(&self) -> bool {
        self.conn.is_closed()
    }

    pub fn close(&self) {
        self.conn.close();
    }

    pub async fn closed(&self) {
        self.conn.closed().await
    }

    /// Calls `method` of the plugin's service with the request timeout. A plugin that does not
    /// know a notification (an older NRI) gets it as the StateChange it used to take.
    pub async fn call<Req: prost::Message, Resp: prost::Message + Default>(
        &self,
        method: &str,
        req: &Req,
    ) -> Result<Resp, CallError> {
        let t = self.request_timeout;
        let bytes = self
            .conn
            .call(PLUGIN_SERVICE, method, req.encode_to_vec(), t)
            .await?;
        Resp::decode(bytes.as_slice()).map_err(|e| CallError::Decode(e.to_string()))
    }

    /// Sends a notification; a plugin built against an NRI without its dedicated method
    /// (Unimplemented) gets it as a StateChange, as NRI itself falls back.
    pub async fn notify<Req: prost::Message>(
        &self,
        method: &str,
        req: &Req,
        event: api::Event,
        pod: &api::PodSandbox,
        container: Option<&api::Container>,
    ) -> Result<(), CallError> {
        match self.call::<Req, api::Empty>(method, req).await {
            Err(CallError::Status { code, .. }) if code == rpc::UNIMPLEMENTED => {
                let change = api::StateChangeEvent {
                    event: event as i32,
                    pod: Some(pod.clone()),
                    container: container.cloned(),
                };
                self.call::<_, api::Empty>("StateChange", &change)
                    .await
                    .map(drop)
            }
            other => other.map(drop),
        }
    }

    /// Sends the plugin every pod and container, in as many chunks as ttrpc's message limit
    /// needs; returns the updates the plugin asks for (only the last chunk may carry them).
    pub async fn synchronize(
        &self,
        pods: Vec<api::PodSandbox>,
        containers: Vec<api::Container>,
    ) -> Result<Vec<api::ContainerUpdate>, ConnectError> {
        let chunks = chunk(pods, containers);
        let last = chunks.len() - 1;
        for (i, (pods, containers)) in chunks.into_iter().enumerate() {
            let more = i < last;
            let req = api::SynchronizeRequest {
                pods,
                containers,
                more,
            };
            let answer: api::SynchronizeResponse = self
                .call("Synchronize", &req)
                .await
                .map_err(ConnectError::Sync)?;
            if !more {
                return Ok(answer.update);
            }
            if !answer.update.is_empty() || !answer.more {
                return Err(ConnectError::Chunks);
            }
        }
        Ok(Vec::new())
    }

    /// Tells the plugin crust is going down, briefly.
    pub async fn shutdown(&self) {
        let t = Duration::from_millis(500).min(self.request_timeout);
        let _ = self
            .conn
            .call(PLUGIN_SERVICE, "Shutdown", api::Empty {}.encode_to_vec(), t)
            .await;
        self.close();
    }
}

/// The plugin's index and name: a pre-installed plugin's come from its file name; an external
/// one names itself, under NRI's rules.
fn identity(
    r: api::RegisterPluginRequest,
    launched: Option<&Launched>,
) -> Result<(String, String), String> {
    if let Some(l) = launched {
        return Ok((l.idx.clone(), l.base.clone()));
    }
    check_name(&r.plugin_name)?;
    check_index(&r.plugin_idx)?;
    Ok((r.plugin_idx, r.plugin_name))
}

/// NRI's `CheckPluginName`: not empty, `[a-zA-Z0-9_.+-]` only.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the plugin name is empty".into());
    }
    match name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "-_.+".contains(*c)))
    {
        Some(c) => Err(format!("plugin name {name:?} contains {c:?}")),
        None => Ok(()),
    }
}

/// NRI's `CheckPluginIndex`: two digits.
pub fn check_index(idx: &str) -> Result<(), String> {
    if idx.len() == 2 && idx.bytes().all(|b| b.is_ascii_digit()) {
        Ok(())
    } else {
        Err(format!("plugin index {idx:?} is not two digits"))
    }
}

type Chunk = (Vec<api::PodSandbox>, Vec<api::Container>);

/// Pods first, then containers, in chunks whose encoding stays under `SYNC_BUDGET`; always at
/// least one chunk.
fn chunk(pods: Vec<api::PodSandbox>, containers: Vec<api::Container>) -> Vec<Chunk> {
    let mut out: Vec<Chunk> = vec![(Vec::new(), Vec::new())];
    let mut used = 0;
    // Each entry costs its bytes, a tag and a length prefix.
    let cost = |len: usize| len + 1 + prost::length_delimiter_len(len);
    for pod in pods {
        let c = cost(pod.encoded_len());
        if used + c > SYNC_BUDGET && used > 0 {
            out.push((Vec::new(), Vec::new()));
            used = 0;
        }
        used += c;
        out.last_mut().expect("one chunk at least").0.push(pod);
    }
    for ctr in containers {
        let c = cost(ctr.encoded_len());
        if used + c > SYNC_BUDGET && used > 0 {
            out.push((Vec::new(), Vec::new()));
            used = 0;
        }
        used += c;
        out.last_mut().expect("one chunk at least").1.push(ctr);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_indices_follow_nri() {
        assert!(check_name("logger_v1.2+x-y").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("bad/name").unwrap_err().contains("'/'"));
        assert!(check_index("07").is_ok());
        for bad in ["7", "007", "a1"] {
            assert!(check_index(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn synchronization_comes_in_chunks_under_the_message_limit() {
        let big = |i: usize| api::Container {
            id: format!("c{i}"),
            args: vec!["x".repeat(300 * 1024)],
            ..Default::default()
        };
        let pods = vec![api::PodSandbox::default(); 3];
        let chunks = chunk(pods, (0..40).map(big).collect());
        assert!(chunks.len() >= 3, "{}", chunks.len());
        let (mut p, mut c) = (0, 0);
        for (pods, ctrs) in &chunks {
            let req = api::SynchronizeRequest {
                pods: pods.clone(),
                containers: ctrs.clone(),
                more: true,
            };
            assert!(req.encoded_len() <= SYNC_BUDGET + 16);
            p += pods.len();
            c += ctrs.len();
        }
        assert_eq!((p, c), (3, 40));
        assert_eq!(chunk(Vec::new(), Vec::new()).len(), 1);
    }
}
