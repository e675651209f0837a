//! Connecting to a port on a pod's loopback. The socket is made inside the pod's network
//! namespace (see `sys::tcp_socket_in_netns`) and connected from the async runtime; IPv4's
//! 127.0.0.1 is tried first, then ::1 when nothing listens there.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::net::{TcpSocket, TcpStream, UnixListener, UnixStream};

use super::PodNetwork;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection to a pod's port.
pub enum PodConn {
    Tcp(TcpStream),
    /// The sandbox's end of `<runtime> port-forward --stream`, which the sandbox copies to and
    /// from its own connection to the port.
    Sandbox(UnixStream),
}

pub async fn dial(network: &PodNetwork, port: u16) -> io::Result<PodConn> {
    if let PodNetwork::Sandbox { runtime, pod, dir } = network {
        return sandbox_stream(runtime, pod, dir, port)
            .await
            .map(PodConn::Sandbox);
    }
    dial_tcp(network, port).await.map(PodConn::Tcp)
}

async fn dial_tcp(network: &PodNetwork, port: u16) -> io::Result<TcpStream> {
    let v4 = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let first = match connect(network, v4).await {
        Ok(s) => return Ok(s),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => e,
        Err(e) => return Err(e),
    };
    let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, port));
    // No listener on ::1 either, or no IPv6 in the pod: the IPv4 error says it best.
    connect(network, v6).await.map_err(|_| first)
}

async fn connect(network: &PodNetwork, addr: SocketAddr) -> io::Result<TcpStream> {
    let socket = match network {
        PodNetwork::Host | PodNetwork::Sandbox { .. } if addr.is_ipv4() => TcpSocket::new_v4()?,
        PodNetwork::Host | PodNetwork::Sandbox { .. } => TcpSocket::new_v6()?,
        PodNetwork::Namespace(pin) => {
            let pin = pin.clone();
            let v6 = addr.is_ipv6();
            let fd = tokio::task::spawn_blocking(move || crate::sys::tcp_socket_in_netns(&pin, v6))
                .await
                .map_err(io::Error::other)??;
            TcpSocket::from_std_stream(std::net::TcpStream::from(fd))
        }
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, socket.connect(addr)).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("connecting to {addr} timed out"),
        )),
    }
}

/// `<runtime> port-forward --stream <socket> <pod> <port>`: the binary connects to a socket
/// crust listens on (in the pod's directory, which only root may enter) and hands that
/// connection to the sandbox, which joins it to a connection to `port` on its loopback. The
/// binary exits once that is done, or fails saying why (nothing listens there).
async fn sandbox_stream(
    runtime: &crate::model::OciRuntime,
    pod: &str,
    dir: &std::path::Path,
    port: u16,
) -> io::Result<UnixStream> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = format!("portforward-{}.sock", NEXT.fetch_add(1, Ordering::Relaxed));
    let socket = dir.join(&name);
    let (_dir_handle, short) =
        crate::monitor::oci_cli::short_path(&socket).map_err(io::Error::other)?;
    let _ = crate::durable::remove_file(&socket);
    let listener = UnixListener::bind(&short)?;
    let _gone = scopeguard(socket.clone());
    let child = tokio::process::Command::new(&runtime.path)
        .args(runtime.global_args())
        .arg("port-forward")
        .arg("--stream")
        .arg(&short)
        .arg(pod)
        .arg(port.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let ended = child.wait_with_output();
    tokio::pin!(ended);
    let accepted = tokio::select! {
        a = listener.accept() => a?.0,
        out = &mut ended => return Err(port_forward_failed(runtime, out?)),
    };
    let out = tokio::time::timeout(CONNECT_TIMEOUT, ended)
        .await
        .map_err(|_| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "{} port-forward did not answer within {CONNECT_TIMEOUT:?}",
                    runtime.path.display()
                ),
            )
        })??;
    if out.status.success() {
        Ok(accepted)
    } else {
        Err(port_forward_failed(runtime, out))
    }
}

fn port_forward_failed(runtime: &crate::model::OciRuntime, out: std::process::Output) -> io::Error {
    let why = String::from_utf8_lossy(&out.stderr);
    let why = why
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let kind = if why.contains("connection refused") {
        io::ErrorKind::ConnectionRefused
    } else {
        io::ErrorKind::Other
    };
    io::Error::new(
        kind,
        format!(
            "{} port-forward failed ({}): {why}",
            runtime.path.display(),
            out.status
        ),
    )
}

/// Removes the socket file when the forward is set up, or failed.
fn scopeguard(path: std::path::PathBuf) -> impl Drop {
    struct Remove(std::path::PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = crate::durable::remove_file(&self.0);
        }
    }
    Remove(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn host_network_reaches_loopback_and_reports_refusal() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(dial(&PodNetwork::Host, port).await.is_ok());
        drop(l);
        let Err(e) = dial(&PodNetwork::Host, port).await else {
            panic!("nothing listens on {port}")
        };
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused);
    }
}
