//! Processes and streams of a running container, through its pod's monitor: ExecSync
//! (`exec_sync`), interactive exec and attach for the streaming server (`interactive`), and
//! reopening the log file after kubelet rotated it (`reopen_log`).

mod exec_sync;
pub mod interactive;
mod reopen_log;
