//! Why a layer could not be unpacked, naming the entry or the file and what was wrong.

use std::io;

use crate::image::digest::Digest;
use crate::image::store::space::NoSpace;

#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    #[error("entry {path:?} escapes the layer directory")]
    Traversal { path: String },
    #[error("hard link {path:?} points to {target:?}, which is not a file in this layer")]
    BadLink { path: String, target: String },
    #[error("uncompressed layer has digest {actual}, but the image config says {expected}")]
    DiffId { expected: Digest, actual: Digest },
    #[error("layer is not a valid (compressed) tar: {0}")]
    Corrupt(String),
    #[error("entry {path:?} is a {format} file, which crust cannot unpack")]
    UnsupportedEntry { path: String, format: String },
    #[error("entry {path:?} is malformed: {detail}")]
    BadEntry { path: String, detail: String },
    #[error("layer has {what}, over crust's limit")]
    Limit { what: String },
    #[error("{op} {path}: {source}")]
    Fs {
        op: &'static str,
        path: String,
        source: io::Error,
    },
    #[error("unpacking stopped: {0}")]
    NoSpace(#[from] NoSpace),
}
