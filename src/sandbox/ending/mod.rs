//! How a pod sandbox ends: StopPodSandbox (`stop.rs`), RemovePodSandbox (`remove.rs`), and the
//! release of what a pod holds (monitor, network, pins, cgroup, directory), shared by them,
//! a failed RunPodSandbox's rollback and recovery (`teardown.rs`).

pub(super) mod remove;
pub(super) mod stop;
pub(super) mod teardown;
