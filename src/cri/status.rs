//! The one table from domain errors to gRPC status codes.

use tonic::{Code, Status};

use crate::container::{CheckpointError, ContainerError};
use crate::image::{ImageError, ImportError, PullError, UnpackError};
use crate::monitor::{Fault, MonitorError};
use crate::network::CniError;
use crate::nri::NriError;
use crate::oci::SpecError;
use crate::sandbox::{RunFailure, SandboxError};
use crate::store::StoreError;
use crate::stream::StreamError;
use crate::stream::backend::BackendError;

pub fn unimplemented(rpc: &str) -> Status {
    Status::unimplemented(format!("{rpc} is not implemented by this version of crust"))
}

pub fn invalid(msg: impl Into<String>) -> Status {
    Status::invalid_argument(msg.into())
}

/// UpdateRuntimeConfig's pod CIDR: one that is not a CIDR is the request's fault; a CNI config
/// that could not be written from the template is the node's network setup's.
pub fn pod_cidr(pod_cidr: &str, e: &CniError) -> Status {
    match e {
        CniError::BadPodCidr(_) => invalid(e.to_string()),
        _ => Status::failed_precondition(format!("writing the CNI config for {pod_cidr}: {e}")),
    }
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
        SandboxError::NetworkNotReady(_)
        | SandboxError::HostLacks(_)
        | SandboxError::NotReady(_)
        | SandboxError::NotRunning(_) => Code::FailedPrecondition,
        // The kernel refused a value for this pod's cgroup (a memory limit under its usage, a
        // cpuset outside the node's): the node's state, not a bug.
        SandboxError::Resources { .. } => Code::FailedPrecondition,
        SandboxError::Nri { source, .. } => nri_code(source),
        SandboxError::Run { cause, .. } => run_code(cause),
        // What is left can be released by another Stop or Remove.
        SandboxError::Teardown { .. } => Code::Unavailable,
        SandboxError::Stats { .. } => Code::FailedPrecondition,
        SandboxError::Store(s) => store_code(s),
    }
}

/// A step of RunPodSandbox failed (and was undone): by whose fault.
fn run_code(e: &RunFailure) -> Code {
    match e {
        RunFailure::Cni(e) => cni_code(e),
        RunFailure::Monitor(e) => monitor_code(e),
        RunFailure::Cgroup(_) => Code::FailedPrecondition,
        RunFailure::Io { source, .. } => io_code(source),
        RunFailure::Store(s) => store_code(s),
        RunFailure::Task(_) => Code::Internal,
        RunFailure::Nri(e) => nri_code(e),
    }
}

/// An NRI plugin refused (its error, two plugins' conflicting claims, an adjustment crust
/// cannot apply): the node's plugins decide, not the request. A plugin that timed out or
/// disconnected never gets here: it is dropped and the call goes on.
fn nri_code(e: &NriError) -> Code {
    match e {
        NriError::Plugin { .. } | NriError::Conflict { .. } | NriError::Adjustment { .. } => {
            Code::FailedPrecondition
        }
        NriError::Socket { .. } => Code::Unavailable,
    }
}

/// A plugin that ran and refused (or did not finish) may succeed on a retry: Unavailable, with
/// the plugin's own message. A network configuration that cannot work is the node's state.
fn cni_code(e: &CniError) -> Code {
    match e {
        // The plugin's agent may be back on a retry.
        CniError::PluginFailed { .. } | CniError::NotReady { .. } => Code::Unavailable,
        // The plugin was killed at its deadline; a retry may find it quicker.
        CniError::Timeout { .. } => Code::DeadlineExceeded,
        CniError::Spawn { source, .. } => io_code(source),
        CniError::NoConfig(_) | CniError::BadConfig { .. } | CniError::PluginMissing { .. } => {
            Code::FailedPrecondition
        }
        CniError::BadPodCidr(_) => Code::InvalidArgument,
    }
}

impl From<ContainerError> for Status {
    fn from(e: ContainerError) -> Status {
        Status::new(container_code(&e), e.to_string())
    }
}

/// No usable CRIU, or something CRIU cannot keep: the node's or the container's state. A dump
/// CRIU ran and failed is the container's state too (what it holds, as CRIU's log says).
fn checkpoint_code(e: &CheckpointError) -> Code {
    match e {
        CheckpointError::Location(_)
        | CheckpointError::NotACheckpoint { .. }
        | CheckpointError::MissingMount { .. } => Code::InvalidArgument,
        CheckpointError::Io { source, .. } => io_code(source),
        CheckpointError::Criu(_)
        | CheckpointError::Unsupported { .. }
        | CheckpointError::NotAllowed { .. } => Code::FailedPrecondition,
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
        // Holding the image writes to the store: a full disk there is ResourceExhausted.
        ContainerError::Image(ImageError::Store(s)) => store_code(s),
        ContainerError::Image(ImageError::Io { source, .. }) => io_code(source),
        ContainerError::Image(_) => Code::FailedPrecondition,
        ContainerError::Spec(SpecError::Bug(_)) => Code::Internal,
        ContainerError::Spec(s) if s.is_host_limit() => Code::FailedPrecondition,
        ContainerError::Spec(_) => Code::InvalidArgument,
        ContainerError::Cdi(e) if e.is_host_limit() => Code::FailedPrecondition,
        ContainerError::Cdi(_) => Code::InvalidArgument,
        ContainerError::PodNotReady(_) | ContainerError::State { .. } => Code::FailedPrecondition,
        ContainerError::Create { source, .. } => container_code(source),
        ContainerError::Monitor { source, .. } => monitor_code(source),
        ContainerError::Io { source, .. } => io_code(source),
        ContainerError::Store(StoreError::Write { source, .. }) => io_code(source),
        ContainerError::Rootfs(e) if e.out_of_room => Code::ResourceExhausted,
        ContainerError::Store(_) | ContainerError::Cgroup(_) | ContainerError::Rootfs(_) => {
            Code::FailedPrecondition
        }
        ContainerError::ExecTimeout { .. } | ContainerError::Unkillable { .. } => {
            Code::DeadlineExceeded
        }
        ContainerError::ExecOutputTooLarge { .. } => Code::ResourceExhausted,
        ContainerError::Teardown { .. } => Code::Unavailable,
        // AppArmor on, but crust's profile cannot be loaded (no parser, a parser error).
        ContainerError::AppArmor(_) => Code::FailedPrecondition,
        ContainerError::Nri(e) => nri_code(e),
        ContainerError::Checkpoint(e) => checkpoint_code(e),
    }
}

/// The pod's monitor answered with a refusal (its fault says why) or could not be reached.
fn monitor_code(e: &MonitorError) -> Code {
    match e {
        MonitorError::Refused { fault, .. } => match fault {
            Fault::Invalid => Code::InvalidArgument,
            Fault::NotFound => Code::NotFound,
            Fault::NoRoom => Code::ResourceExhausted,
            Fault::State | Fault::Failed => Code::FailedPrecondition,
        },
        MonitorError::Setup { .. } => Code::FailedPrecondition,
        MonitorError::Protocol(_) => Code::Internal,
        MonitorError::Spawn(_)
        | MonitorError::Vanished { .. }
        | MonitorError::Died(_)
        | MonitorError::Timeout(_)
        | MonitorError::Io(_) => Code::Unavailable,
    }
}

/// A full disk or quota is ResourceExhausted; any other I/O failure is the host's state.
/// A failed system call on the node: a full disk or quota and exhausted descriptors or
/// memory are ResourceExhausted (messages name the directory), a failing disk Unavailable,
/// anything else (read-only or forbidden paths, a store changed behind crust's back) the
/// node's state, FailedPrecondition. Never Internal: these are not crust's bugs.
fn io_code(e: &std::io::Error) -> Code {
    match e.raw_os_error() {
        Some(libc::ENOSPC | libc::EDQUOT | libc::EMFILE | libc::ENFILE | libc::ENOMEM) => {
            Code::ResourceExhausted
        }
        Some(libc::EIO) => Code::Unavailable,
        _ if e.kind() == std::io::ErrorKind::StorageFull => Code::ResourceExhausted,
        _ => Code::FailedPrecondition,
    }
}

impl From<ImageError> for Status {
    fn from(e: ImageError) -> Status {
        let code = match &e {
            ImageError::Reference(_) | ImageError::Ambiguous(_) => Code::InvalidArgument,
            ImageError::NotFound(_) => Code::NotFound,
            ImageError::Pull { error, .. } => pull_code(error),
            ImageError::Import { error, .. } => import_code(error),
            ImageError::Store(s) => store_code(s),
            ImageError::Io { source, .. } => io_code(source),
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
            StreamError::Backend(BackendError::Failed(_)) | StreamError::Io { .. } => {
                Code::Unavailable
            }
            StreamError::Tls(_) => Code::FailedPrecondition,
        };
        Status::new(code, e.to_string())
    }
}

/// Image errors, by who can fix them. DataLoss only for content that differs from what its
/// digest or size promised (a retry may get good bytes); FailedPrecondition for an image that
/// is as published but cannot be used; the node's own faults by their errno.
fn pull_code(e: &PullError) -> Code {
    match e {
        PullError::NotFound { .. } => Code::NotFound,
        PullError::Unauthenticated { .. } => Code::Unauthenticated,
        PullError::Denied { .. } => Code::PermissionDenied,
        PullError::BadCredentials(_) => Code::InvalidArgument,
        PullError::DigestMismatch { .. } | PullError::SizeMismatch { .. } => Code::DataLoss,
        PullError::Layer { error, .. } => unpack_code(error),
        PullError::Invalid(_) | PullError::Unsupported(_) => Code::FailedPrecondition,
        PullError::NoSpace(_) => Code::ResourceExhausted,
        PullError::Stalled { .. } | PullError::TooSlow { .. } => Code::DeadlineExceeded,
        PullError::Unreachable { .. } | PullError::Registry { .. } => Code::Unavailable,
        PullError::ShuttingDown => Code::Unavailable,
        PullError::Local { source, .. } => io_code(source),
        PullError::Store(s) => store_code(s),
        PullError::Internal(_) => Code::Internal,
    }
}

fn unpack_code(e: &UnpackError) -> Code {
    match e {
        UnpackError::DiffId { .. } => Code::DataLoss,
        // The blob matched its digest: the layer is hostile or broken as published.
        UnpackError::Traversal { .. }
        | UnpackError::BadLink { .. }
        | UnpackError::Corrupt(_)
        | UnpackError::UnsupportedEntry { .. }
        | UnpackError::BadEntry { .. }
        | UnpackError::Limit { .. } => Code::FailedPrecondition,
        UnpackError::NoSpace(_) => Code::ResourceExhausted,
        UnpackError::Fs { source, .. } => io_code(source),
    }
}

fn import_code(e: &ImportError) -> Code {
    match e {
        ImportError::Format | ImportError::Invalid(_) => Code::InvalidArgument,
        ImportError::Archive(u) => unpack_code(u),
        ImportError::Content(p) => pull_code(p),
        ImportError::Io { source, .. } => io_code(source),
        ImportError::Internal(_) => Code::Internal,
    }
}

fn store_code(e: &StoreError) -> Code {
    match e {
        StoreError::Write { source, .. } | StoreError::Read { source, .. } => io_code(source),
        // Written by a newer crust: this one cannot use the store as it is.
        StoreError::Version { .. } => Code::FailedPrecondition,
        StoreError::Decode { .. } => Code::Internal,
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
        assert_eq!(pull_code(&layer(other_fs)), Code::FailedPrecondition);
        let traversal = UnpackError::Traversal {
            path: "../x".into(),
        };
        assert_eq!(pull_code(&layer(traversal)), Code::FailedPrecondition);
        let sparse = UnpackError::UnsupportedEntry {
            path: "f".into(),
            format: "GNU sparse PAX format 2.0".into(),
        };
        assert_eq!(pull_code(&layer(sparse)), Code::FailedPrecondition);
    }

    #[test]
    fn sandbox_run_failures_keep_their_cause_code() {
        let run = |cause| SandboxError::Run {
            step: "x",
            cause: Box::new(cause),
            cleanup: None,
        };
        let refused = CniError::PluginFailed {
            plugin: "bridge".into(),
            command: "ADD",
            msg: "no IP addresses available".into(),
        };
        let s = Status::from(run(RunFailure::Cni(refused)));
        assert_eq!(s.code(), Code::Unavailable);
        assert!(s.message().contains("no IP addresses available"), "{s}");
        let missing = CniError::PluginMissing {
            plugin: "p".into(),
            network: "n".into(),
            dirs: "/opt/cni/bin".into(),
        };
        assert_eq!(
            Status::from(run(RunFailure::Cni(missing))).code(),
            Code::FailedPrecondition
        );
        let full = StoreError::Write {
            path: "/state/sandboxes/abc/sandbox.json".into(),
            source: std::io::Error::from_raw_os_error(libc::ENOSPC),
        };
        let s = Status::from(run(RunFailure::Store(full)));
        assert_eq!(s.code(), Code::ResourceExhausted);
        assert!(s.message().contains("/state/sandboxes/abc"), "{s}");
        let quota = RunFailure::Io {
            path: "/state/sandboxes/abc".into(),
            source: std::io::Error::from_raw_os_error(libc::EDQUOT),
        };
        let s = Status::from(run(quota));
        assert_eq!(s.code(), Code::ResourceExhausted);
        assert!(s.message().contains("/state/sandboxes/abc"), "{s}");
        assert_eq!(
            Status::from(run(RunFailure::Task("panicked".into()))).code(),
            Code::Internal
        );
    }

    #[test]
    fn only_content_that_breaks_its_digest_is_data_loss() {
        let d = crate::image::Digest::of(b"x");
        let mismatch = PullError::DigestMismatch {
            what: "blob".into(),
            expected: d.to_string(),
            actual: d.to_string(),
        };
        assert_eq!(pull_code(&mismatch), Code::DataLoss);
        let diff = UnpackError::DiffId {
            expected: d.clone(),
            actual: d.clone(),
        };
        assert_eq!(unpack_code(&diff), Code::DataLoss);
        assert_eq!(pull_code(&PullError::Internal("x".into())), Code::Internal);
        assert_eq!(pull_code(&PullError::ShuttingDown), Code::Unavailable);
        assert_eq!(
            pull_code(&PullError::Invalid("malformed manifest".into())),
            Code::FailedPrecondition
        );
        let errno = |n| std::io::Error::from_raw_os_error(n);
        for (n, code) in [
            (libc::EDQUOT, Code::ResourceExhausted),
            (libc::ENOSPC, Code::ResourceExhausted),
            (libc::EROFS, Code::FailedPrecondition),
            (libc::EIO, Code::Unavailable),
            (libc::EBADF, Code::FailedPrecondition),
        ] {
            let store = StoreError::Write {
                path: "/r/images/records/x.json".into(),
                source: errno(n),
            };
            assert_eq!(
                Status::from(ImageError::Store(store)).code(),
                code,
                "errno {n}"
            );
        }
    }
}
