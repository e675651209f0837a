//! The one table from domain errors to gRPC status codes.

use tonic::{Code, Status};

use crate::image::{ImageError, PullError, UnpackError};
use crate::sandbox::SandboxError;

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
        let code = match &e {
            SandboxError::Invalid(_)
            | SandboxError::Ambiguous(_)
            | SandboxError::UnknownHandler { .. } => Code::InvalidArgument,
            SandboxError::NameTaken { .. } => Code::AlreadyExists,
            SandboxError::NotFound(_) => Code::NotFound,
            SandboxError::NetworkNotReady(_) | SandboxError::NotReady(_) => {
                Code::FailedPrecondition
            }
            SandboxError::Run { .. }
            | SandboxError::Teardown { .. }
            | SandboxError::Stats { .. }
            | SandboxError::Store(_) => Code::Internal,
        };
        Status::new(code, e.to_string())
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
        // A tar format crust does not unpack (an unknown GNU sparse version): not corrupt.
        PullError::Layer {
            error: UnpackError::UnsupportedEntry { .. },
            ..
        } => Code::FailedPrecondition,
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
        let sparse = UnpackError::UnsupportedEntry {
            path: "f".into(),
            format: "GNU sparse PAX format 2.0".into(),
        };
        assert_eq!(pull_code(&layer(sparse)), Code::FailedPrecondition);
    }
}
