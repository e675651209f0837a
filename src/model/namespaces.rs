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

/// A range of ids: `size` ids from `container` inside a user namespace are `host` onward
/// outside it (one line of `/proc/<pid>/uid_map`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdRange {
    pub container: u32,
    pub host: u32,
    pub size: u32,
}

impl IdRange {
    /// The host id that `id` inside maps to, if the range holds it.
    pub fn to_host(&self, id: u32) -> Option<u32> {
        let offset = id.checked_sub(self.container)?;
        (offset < self.size).then(|| self.host + offset)
    }

    /// The line the kernel takes in `uid_map` / `gid_map`.
    pub fn map_line(&self) -> String {
        format!("{} {} {}\n", self.container, self.host, self.size)
    }
}

/// What a request asked of its user namespace (CRI `UserNamespace`), before validation.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct UserNsRequest {
    pub mode: NamespaceMode,
    pub uids: Vec<IdRange>,
    pub gids: Vec<IdRange>,
}

/// A pod's user namespace, validated: one uid and one gid range, each from container id 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdMaps {
    pub uid: IdRange,
    pub gid: IdRange,
}

impl IdMaps {
    /// The host uid and gid of the namespace's root.
    pub fn root(&self) -> (u32, u32) {
        (self.uid.host, self.gid.host)
    }
}

impl UserNsRequest {
    /// The maps a request of mode POD with one range each gives (validation has checked the
    /// rest); `None` for every other request, which puts the pod in the node's namespace.
    pub fn id_maps(&self) -> Option<IdMaps> {
        match (self.mode, self.uids.as_slice(), self.gids.as_slice()) {
            (NamespaceMode::Pod, [uid], [gid]) => Some(IdMaps {
                uid: *uid,
                gid: *gid,
            }),
            _ => None,
        }
    }
}
