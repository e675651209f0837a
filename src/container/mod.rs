//! Containers: their lifecycle (create, start, stop, remove), status and listing, exec, log
//! reopening and recovery at start. One file per verb; this file holds the table of
//! containers and what the verbs share.

pub mod model;

pub use model::*;
