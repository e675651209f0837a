//! The one table from domain errors to gRPC status codes.

use tonic::{Code, Status};

use crate::sandbox::SandboxError;

pub fn unimplemented(rpc: &str) -> Status {
    Status::unimplemented(format!("{rpc} is not implemented by this version of crust"))
}

pub fn invalid(msg: impl Into<String>) -> Status {
    Status::invalid_argument(msg.into())
}

impl From<SandboxError> for Status {
    fn from(e: SandboxError) -> Status {
        let code = match &e {
            SandboxError::Invalid(_)
            | SandboxError::Ambiguous(_)
            | SandboxError::UnknownHandler { .. } => Code::InvalidArgument,
            SandboxError::NameTaken { .. } => Code::AlreadyExists,
            SandboxError::NotFound(_) => Code::NotFound,
            SandboxError::NetworkNotReady(_) => Code::FailedPrecondition,
            SandboxError::Run { .. } | SandboxError::Teardown { .. } | SandboxError::Store(_) => {
                Code::Internal
            }
        };
        Status::new(code, e.to_string())
    }
}
