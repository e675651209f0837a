//! What clients read of pod sandboxes, changing nothing: PodSandboxStatus and ListPodSandbox
//! (`status.rs`), their statistics (`stats.rs`), and the pods' part of RuntimeReady
//! (`ready.rs`).

pub(crate) mod ready;
pub(super) mod stats;
pub(super) mod status;
