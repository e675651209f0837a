//! How a container ends, and what stays of it until it is gone: its exit as the pod's monitor
//! reports it (`exits.rs`), StopContainer (`stop.rs`), RemoveContainer and the background
//! reclaim it starts (`remove.rs`), the release of everything a container holds, shared by
//! the reclaim, a failed creation's rollback and recovery (`teardown.rs`), and a pod's stop
//! and removal reaching its containers first (`pod.rs`).

pub(super) mod exits;
pub(super) mod pod;
pub(super) mod remove;
pub(super) mod stop;
pub(super) mod teardown;
