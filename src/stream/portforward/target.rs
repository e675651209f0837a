//! Which network a port-forward reaches: checked when the PortForward RPC is made, so a URL is
//! only handed out for a ready pod with a network of its own (or the host's).

use super::{PodNetwork, PortForwardRequest};
use crate::sandbox::Sandboxes;
use crate::stream::StreamError;

/// The pod `id` (full id or unique prefix) as a port-forward target.
pub fn pod_network(sandboxes: &Sandboxes, id: &str) -> Result<PortForwardRequest, StreamError> {
    let record = sandboxes.get(id)?;
    if !record.phase.is_ready() {
        return Err(StreamError::PodNotReady(record.id.clone()));
    }
    let sandboxed = record.runtime.as_ref().filter(|r| r.sandbox);
    let network = if record.spec.namespaces.host_network() {
        PodNetwork::Host
    } else if let Some(runtime) = sandboxed {
        PodNetwork::Sandbox {
            runtime: runtime.clone(),
            pod: record.id.clone(),
            dir: record.dir.clone(),
        }
    } else {
        match &record.pins.net {
            Some(pin) => PodNetwork::Namespace(pin.clone()),
            None => return Err(StreamError::NoNetwork(record.id.clone())),
        }
    };
    Ok(PortForwardRequest {
        pod_sandbox_id: record.id.clone(),
        network,
    })
}
