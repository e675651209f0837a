//! Container root filesystems: overlayfs mounts of an image's unpacked layers (which `image`
//! keeps, one directory per chain id) under a writable layer per container.

mod overlay;

pub use overlay::{OverlayError, Upper, lowerdirs_of, mount_overlay};
