//! crust: a Kubernetes container runtime speaking CRI v1.
#![deny(unsafe_code)]

pub mod accept;
pub mod cdi;
pub mod check;
pub mod clock;
pub mod config;
pub mod container;
pub mod cri;
pub mod criu;
pub mod daemon;
pub mod diagnose;
pub mod durable;
pub mod events;
pub mod failpoint;
pub mod history;
pub mod hooks;
pub mod image;
pub mod logging;
pub mod metrics;
pub mod model;
pub mod monitor;
pub mod network;
pub mod notify;
pub mod nri;
pub mod oci;
pub mod sandbox;
pub mod snapshot;
pub mod stats;
pub mod store;
pub mod stream;
pub mod sys;
