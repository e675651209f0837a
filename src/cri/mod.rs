//! The CRI v1 gRPC adapters. Each RPC decodes its request, validates it, calls the domain
//! (`sandbox`, `image`, ...) with plain Rust types and encodes the answer. Protobuf types never
//! leave this module (and `stream`); `status.rs` is the one table from domain errors to codes.

pub mod client;
mod convert;
pub mod image;
pub mod runtime;
pub mod status;

/// Generated CRI v1 protobuf and gRPC types (package `runtime.v1`).
#[allow(clippy::all, unused_qualifications)]
pub mod pb {
    tonic::include_proto!("runtime.v1");
}

pub use image::ImageServer;
pub use runtime::RuntimeServer;
