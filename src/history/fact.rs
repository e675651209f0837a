//! What a line of a pod's history says.

use serde::{Deserialize, Serialize};

/// One thing that happened to a pod or one of its containers. Container facts carry the
/// container's name and attempt, as kubelet names them, so the containers kubelet removed and
/// re-created read as one container's life.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "fact", rename_all = "snake_case")]
pub enum Fact {
    /// RunPodSandbox brought the pod up.
    SandboxReady {
        uid: String,
        attempt: u32,
        #[serde(default)]
        ip: Option<String>,
    },
    /// RunPodSandbox failed at `step` and undid what it had done.
    SandboxFailed {
        uid: String,
        attempt: u32,
        step: String,
        error: String,
    },
    SandboxStopped,
    /// The pod's monitor exited while the pod was ready (killed, or crashed); `cause` is what
    /// the node could tell of why (`sandbox::MonitorDeath`).
    MonitorDied {
        pid: i32,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        cause: String,
    },
    SandboxRemoved,
    /// crust started over records whose state was gone (the node rebooted, or the state
    /// directory was emptied): the pod and its containers ended with it.
    StateLost {
        cause: String,
    },
    ContainerCreated {
        container: String,
        name: String,
        attempt: u32,
        image: String,
        /// Its own memory limit in bytes (0: none).
        memory_limit: i64,
    },
    ContainerCreateFailed {
        name: String,
        attempt: u32,
        error: String,
    },
    ContainerStarted {
        container: String,
        name: String,
        attempt: u32,
    },
    ContainerStartFailed {
        container: String,
        name: String,
        attempt: u32,
        error: String,
    },
    /// StopContainer was called: the stop signal, then SIGKILL after `timeout_secs`.
    StopRequested {
        container: String,
        name: String,
        timeout_secs: u64,
    },
    ContainerExited {
        container: String,
        name: String,
        attempt: u32,
        /// Nanoseconds since the epoch (0: it never started).
        started_at: i64,
        /// As the monitor recorded it.
        #[serde(flatten)]
        exit: crate::monitor::ExitInfo,
    },
}

impl Fact {
    /// The container this fact is about, if it is about one.
    pub fn container(&self) -> Option<&str> {
        match self {
            Fact::ContainerCreated { container, .. }
            | Fact::ContainerStarted { container, .. }
            | Fact::ContainerStartFailed { container, .. }
            | Fact::StopRequested { container, .. }
            | Fact::ContainerExited { container, .. } => Some(container),
            _ => None,
        }
    }

    /// The name of the container this fact is about, if it is about one.
    pub fn container_name(&self) -> Option<&str> {
        match self {
            Fact::ContainerCreated { name, .. }
            | Fact::ContainerCreateFailed { name, .. }
            | Fact::ContainerStarted { name, .. }
            | Fact::ContainerStartFailed { name, .. }
            | Fact::StopRequested { name, .. }
            | Fact::ContainerExited { name, .. } => Some(name),
            _ => None,
        }
    }
}
