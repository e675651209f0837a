//! Where a pod or a container gets a namespace of one kind from (CRI `NamespaceMode`).

use serde::{Deserialize, Serialize};

/// Where a pod gets a namespace of one kind from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NamespaceMode {
    /// Its own, shared by its containers.
    #[default]
    Pod,
    /// One per container (PID only).
    Container,
    /// The host's.
    Node,
    /// Another container's (containers only; not valid for a pod).
    Target,
}
