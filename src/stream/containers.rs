//! The container runtime behind the streaming protocols: `StreamBackend` over
//! `container::Containers`, converting the stream layer's channels and errors to the
//! container module's plain ones.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::backend::{
    AttachRequest, BackendError, BackendFuture, ExecRequest, StreamBackend, StreamIo, TerminalSize,
};
use crate::container::interactive::ClientIo;
use crate::container::{ContainerError, Containers};

pub struct ContainerBackend(pub Arc<Containers>);

impl StreamBackend for ContainerBackend {
    fn validate_exec(&self, req: &ExecRequest) -> Result<(), BackendError> {
        self.0
            .running(&req.container_id)
            .map(drop)
            .map_err(backend_error)
    }

    fn validate_attach(&self, req: &AttachRequest) -> Result<(), BackendError> {
        self.0
            .check_attach(&req.container_id, req.stdin)
            .map_err(backend_error)
    }

    fn exec(&self, req: ExecRequest, io: StreamIo) -> BackendFuture<i32> {
        let containers = self.0.clone();
        Box::pin(async move {
            containers
                .exec_interactive(&req.container_id, req.cmd, req.tty, client_io(io))
                .await
                .map_err(backend_error)
        })
    }

    fn attach(&self, req: AttachRequest, io: StreamIo) -> BackendFuture<()> {
        let containers = self.0.clone();
        Box::pin(async move {
            containers
                .attach(&req.container_id, req.tty, client_io(io))
                .await
                .map_err(backend_error)
        })
    }
}

fn client_io(io: StreamIo) -> ClientIo {
    ClientIo {
        stdin: io.stdin,
        stdout: io.stdout,
        stderr: io.stderr,
        resize: io.resize.map(sizes),
    }
}

/// Terminal sizes as (rows, columns); the forwarding ends with either side.
fn sizes(mut from: mpsc::Receiver<TerminalSize>) -> mpsc::Receiver<(u16, u16)> {
    let (tx, rx) = mpsc::channel(8);
    tokio::spawn(async move {
        while let Some(size) = from.recv().await {
            if tx.send((size.height, size.width)).await.is_err() {
                break;
            }
        }
    });
    rx
}

fn backend_error(e: ContainerError) -> BackendError {
    match e {
        ContainerError::NotFound(id) => BackendError::NotFound(id),
        ContainerError::State { id, .. } => BackendError::NotRunning(id),
        ContainerError::Invalid(msg) => BackendError::Invalid(msg),
        other => BackendError::Failed(other.to_string()),
    }
}
