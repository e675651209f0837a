//! Readiness for a service manager (sd_notify(3)): one datagram per state change on the unix
//! socket `$NOTIFY_SOCKET` names, when it names one (systemd sets it for `Type=notify`
//! services). `READY=1` once the CRI socket serves, `RELOADING=1` with the monotonic clock
//! while a SIGHUP reload runs (systemd needs `MONOTONIC_USEC` to tell one reload from the
//! next), `STOPPING=1` when a stop begins, and a `STATUS=` line with each.
//!
//! Written here rather than through libsystemd or a crate: the protocol is one `sendto` of
//! `KEY=value` lines, on a socket path or an abstract one (`@name`). Without `$NOTIFY_SOCKET`
//! (`crust serve` by hand, a test) nothing is sent.

use std::os::unix::net::{SocketAddr, UnixDatagram};

/// The variable systemd names its socket in.
pub const SOCKET_ENV: &str = "NOTIFY_SOCKET";

/// Sends `message` (newline-separated `KEY=value` lines) to the service manager, if there is
/// one. Failing to reach it changes nothing for the daemon: it is logged and dropped.
pub fn send(message: &str) {
    let Some(path) = std::env::var_os(SOCKET_ENV) else {
        return;
    };
    let path = path.to_string_lossy().into_owned();
    let sent = address(&path).and_then(|addr| {
        let socket = UnixDatagram::unbound()?;
        socket.send_to_addr(message.as_bytes(), &addr)
    });
    if let Err(e) = sent {
        tracing::warn!(socket = %path, error = %e, "telling the service manager {message:?}");
    }
}

/// `path`, or the abstract socket `@name` names.
fn address(path: &str) -> std::io::Result<SocketAddr> {
    match path.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name.as_bytes())
        }
        None => SocketAddr::from_pathname(path),
    }
}

/// `READY=1`: the daemon serves (at start, and when a reload ends).
pub fn ready(status: &str) {
    send(&format!("READY=1\nSTATUS={}", one_line(status)));
}

/// `RELOADING=1`: a reload began (ended by `ready`).
pub fn reloading() {
    send(&format!(
        "RELOADING=1\nMONOTONIC_USEC={}\nSTATUS=reloading the configuration",
        monotonic_usec()
    ));
}

/// `STOPPING=1`: the daemon is stopping.
pub fn stopping(status: &str) {
    send(&format!("STOPPING=1\nSTATUS={}", one_line(status)));
}

/// A status on one line: every line of a message is a `KEY=value` of its own.
fn one_line(status: &str) -> String {
    status.replace('\n', " ")
}

/// CLOCK_MONOTONIC in microseconds, as systemd reads it.
fn monotonic_usec() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000 + t.tv_nsec as u64 / 1_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abstract_and_path_sockets_are_told_apart() {
        let a = address("@/org/freedesktop/systemd1/notify").unwrap();
        assert!(a.as_pathname().is_none());
        let p = address("/run/systemd/notify").unwrap();
        assert_eq!(
            p.as_pathname(),
            Some(std::path::Path::new("/run/systemd/notify"))
        );
        assert!(monotonic_usec() > 0);
    }
}
