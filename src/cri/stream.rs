//! Exec, Attach and PortForward: each request is converted to `stream`'s plain types and
//! handed to `stream::Streams`, which validates it and answers the one-shot URL.

use tonic::Status;

use super::pb;
use crate::sandbox::Sandboxes;
use crate::stream::backend::{AttachRequest, ExecRequest};
use crate::stream::{Streams, portforward};

pub fn exec(streams: &Streams, req: pb::ExecRequest) -> Result<pb::ExecResponse, Status> {
    let url = streams.exec(ExecRequest {
        container_id: req.container_id,
        cmd: req.cmd,
        tty: req.tty,
        stdin: req.stdin,
        stdout: req.stdout,
        stderr: req.stderr,
    })?;
    Ok(pb::ExecResponse { url })
}

pub fn attach(streams: &Streams, req: pb::AttachRequest) -> Result<pb::AttachResponse, Status> {
    let url = streams.attach(AttachRequest {
        container_id: req.container_id,
        tty: req.tty,
        stdin: req.stdin,
        stdout: req.stdout,
        stderr: req.stderr,
    })?;
    Ok(pb::AttachResponse { url })
}

/// The ports in the request are not used: every stream names its own port, as with kubelet.
pub fn port_forward(
    streams: &Streams,
    sandboxes: &Sandboxes,
    req: pb::PortForwardRequest,
) -> Result<pb::PortForwardResponse, Status> {
    if req.pod_sandbox_id.is_empty() {
        return Err(super::status::invalid("pod_sandbox_id is required"));
    }
    let target = portforward::pod_network(sandboxes, &req.pod_sandbox_id)?;
    let url = streams.port_forward(target)?;
    Ok(pb::PortForwardResponse { url })
}
