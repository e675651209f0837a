//! Port forwarding: `portforward.k8s.io` over SPDY (directly, or tunnelled in WebSocket binary
//! messages as `SPDY/3.1+portforward.k8s.io`). The client opens two streams per forwarded
//! connection, `error` and `data`, with the same `requestID` and `port` headers; the server
//! connects to that port on the pod's loopback, inside the pod's network namespace, and
//! copies bytes both ways. A failure (a refused port) is written on that request's error
//! stream and ends only that request.

mod dial;
mod spdy;
mod target;

pub use dial::{PodConn, dial};
pub use spdy::serve;
pub use target::pod_network;

use std::path::PathBuf;

/// Where a pod's ports are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodNetwork {
    /// The pod's own network namespace, by its pin.
    Namespace(PathBuf),
    /// A host-network pod: the host's loopback, as kubelet does.
    Host,
    /// A pod in a sandbox of its own (gVisor's runsc), whose network stack is the sandbox's:
    /// reached through `<runtime> port-forward --stream`, with its socket in the pod's
    /// directory `dir`.
    Sandbox {
        runtime: crate::model::OciRuntime,
        pod: String,
        dir: PathBuf,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortForwardRequest {
    pub pod_sandbox_id: String,
    pub network: PodNetwork,
}
