//! The one table from domain errors to gRPC status codes.

use tonic::{Code, Status};

use crate::container::ContainerError;
use crate::image::{ImageError, PullError, UnpackError};
use crate::monitor::{Fault, MonitorError};
use crate::sandbox::SandboxError;
use crate::stream::StreamError;
use crate::stream::backend::BackendError;

pub fn unimplemented(rpc: &str) -> Status {
    Status::unimplemented(format!("{rpc} is not implemented by this version of crust"))
}

pub fn invalid(msg: impl Into<String>) -> Status {
    Status::invalid_argument(msg.into())
}

/// The pod CIDR's CNI config could not be written from the template: the node's network
/// setup, not the request, is at fault.
pub fn network_template(pod_cidr: &str, e: &crate::network::CniError) -> Status {
    Status::failed_precondition(format!("writing the CNI config for {pod_cidr}: {e}"))
}

impl From<SandboxError> for Status {
    fn from(e: SandboxError) -> Status {
        Status::new(sandbox_code(&e), e.to_string())
    }
}

fn sandbox_code(e: &SandboxError) -> Code {
    match e {
        SandboxError::Invalid(_)
        | SandboxError::Ambiguous(_)
        | SandboxError::UnknownHandler { .. } => Code::InvalidArgument,
        SandboxError::NameTaken { .. } => Code::AlreadyExists,
        SandboxError::NotFound(_) => Code::NotFound,
        SandboxError::NetworkNotReady(_) | SandboxError::NotReady(_) => Code::FailedPrecondition,
        SandboxError::Run { .. }
        | SandboxError::Teardown { .. }
        | SandboxError::Stats { .. }
        | SandboxError::Store(_) => Code::Internal,
    }
}

impl From<ContainerError> for Status {
    fn from(e: ContainerError) -> Status {
        Status::new(container_code(&e), e.to_string())
    }
}

fn container_code(e: &ContainerError) -> Code {
    match e {
        ContainerError::Invalid(_) | ContainerError::Ambiguous(_) => Code::InvalidArgument,
        ContainerError::NotFound(_) => Code::NotFound,
        ContainerError::NameTaken { .. } => Code::AlreadyExists,
        ContainerError::Sandbox(e) => sandbox_code(e),
        ContainerError::Image(ImageError::Reference(_)) => Code::InvalidArgument,
        ContainerError::Image(ImageError::NotFound(_)) => Code::NotFound,
        ContainerError::Image(_) => Code::FailedPrecondition,
        ContainerError::Spec(s) if s.is_host_limit() => Code::FailedPrecondition,
        ContainerError::Spec(_) => Code::InvalidArgument,
        ContainerError::PodNotReady(_) | ContainerError::State { .. } => Code::FailedPrecondition,
        ContainerError::Create { source, .. } => container_code(source),
        ContainerError::Monitor { source, .. } => monitor_code(source),
        ContainerError::Io { source, .. } => io_code(source),
        ContainerError::Store(crate::store::StoreError::Write { source, .. }) => io_code(source),
        ContainerError::Store(_) | ContainerError::Cgroup(_) | ContainerError::Rootfs(_) => {
            Code::FailedPrecondition
        }
        ContainerError::ExecTimeout { .. } | ContainerError::Unkillable { .. } => {
            Code::DeadlineExceeded
        }
        ContainerError::ExecOutputTooLarge { .. } => Code::ResourceExhausted,
        ContainerError::Teardown { .. } => Code::Unavailable,
    }
}

/// The pod's monitor answered with a refusal (its fault says why) or could not be reached.
fn monitor_code(e: &MonitorError) -> Code {
    match e {
        MonitorError::Refused { fault, .. } => match fault {
            Fault::Invalid => Code::InvalidArgument,
            Fault::NotFound => Code::NotFound,
            Fault::State | Fault::Failed => Code::FailedPrecondition,
        },
        MonitorError::Setup { .. } => Code::FailedPrecondition,
        MonitorError::Protocol(_) => Code::Internal,
        MonitorError::Spawn(_)
        | MonitorError::Vanished(_)
        | MonitorError::Timeout(_)
        | MonitorError::Io(_) => Code::Unavailable,
    }
}

/// A full disk or quota is ResourceExhausted; any other I/O failure is the host's state.
fn io_code(e: &std::io::Error) -> Code {
    match e.raw_os_error() {
        Some(libc::ENOSPC | libc::EDQUOT) => Code::ResourceExhausted,
        _ => Code::FailedPrecondition,
    }
}

impl From<ImageError> for Status {
    fn from(e: ImageError) -> Status {
        let code = match &e {
            ImageError::Reference(_) | ImageError::Ambiguous(_) => Code::InvalidArgument,
            ImageError::NotFound(_) => Code::NotFound,
            ImageError::Pull { error, .. } => pull_code(error),
            ImageError::Import { .. } | ImageError::Store(_) | ImageError::Io { .. } => {
                Code::Internal
            }
        };
        Status::new(code, e.to_string())
    }
}

impl From<StreamError> for Status {
    fn from(e: StreamError) -> Status {
        let code = match e {
            StreamError::NoBackend(rpc) => return unimplemented(rpc),
            StreamError::Sandbox(inner) => return inner.into(),
            StreamError::Invalid(_) | StreamError::Backend(BackendError::Invalid(_)) => {
                Code::InvalidArgument
            }
            StreamError::Backend(BackendError::NotFound(_)) => Code::NotFound,
            StreamError::Backend(BackendError::NotRunning(_))
            | StreamError::PodNotReady(_)
            | StreamError::NoNetwork(_) => Code::FailedPrecondition,
            StreamError::TooManyWaiting(_) => Code::ResourceExhausted,
            StreamError::Backend(BackendError::Failed(_))
            | StreamError::Io { .. }
            | StreamError::Tls(_) => Code::Internal,
        };
        Status::new(code, e.to_string())
    }
}

fn pull_code(e: &PullError) -> Code {
    match e {
        PullError::NotFound { .. } => Code::NotFound,
        PullError::Unauthenticated { .. } => Code::Unauthenticated,
        PullError::Denied { .. } => Code::PermissionDenied,
        PullError::BadCredentials(_) => Code::InvalidArgument,
        // Content that does not match its digest, or a layer that is not a safe tar: the
        // image is corrupt or hostile; retrying the same source will not help.
        PullError::DigestMismatch { .. }
        | PullError::SizeMismatch { .. }
        | PullError::Invalid(_) => Code::DataLoss,
        // The node's disk, not the image: pulling again after cleanup can work.
        PullError::NoSpace(_)
        | PullError::Layer {
            error: UnpackError::NoSpace(_),
            ..
        } => Code::ResourceExhausted,
        PullError::Layer {
            error: UnpackError::Fs { source, .. },
            ..
        }
        | PullError::Local { source, .. }
            if source.kind() == std::io::ErrorKind::StorageFull =>
        {
            Code::ResourceExhausted
        }
        PullError::Layer {
            error: UnpackError::Fs { .. },
            ..
        } => Code::Internal,
        PullError::Layer { .. } => Code::DataLoss,
        PullError::Stalled { .. } => Code::DeadlineExceeded,
        PullError::Unreachable { .. } | PullError::Registry { .. } => Code::Unavailable,
        PullError::Unsupported(_) => Code::FailedPrecondition,
        PullError::Local { .. } | PullError::Store(_) => Code::Internal,
    }
}

/// A request's work ran in a task of its own and that task failed (it panicked or the runtime
/// is shutting down): nothing of the request's outcome is known.
pub fn task_failed(e: tokio::task::JoinError) -> Status {
    Status::internal(format!("the request's task failed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_is_resource_exhausted_not_a_bad_image() {
        let full = || std::io::Error::from(std::io::ErrorKind::StorageFull);
        let local = PullError::Local {
            what: "writing",
            path: "/x".into(),
            source: full(),
        };
        let layer = |error| PullError::Layer {
            blob: crate::image::Digest::of(b"l"),
            error,
        };
        let unpack_fs = UnpackError::Fs {
            op: "creating file",
            path: "/x".into(),
            source: full(),
        };
        let other_fs = UnpackError::Fs {
            op: "creating file",
            path: "/x".into(),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        };
        assert_eq!(pull_code(&local), Code::ResourceExhausted);
        assert_eq!(pull_code(&layer(unpack_fs)), Code::ResourceExhausted);
        assert_eq!(pull_code(&layer(other_fs)), Code::Internal);
        let traversal = UnpackError::Traversal {
            path: "../x".into(),
        };
        assert_eq!(pull_code(&layer(traversal)), Code::DataLoss);
    }
}
