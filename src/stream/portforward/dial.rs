//! Connecting to a port on a pod's loopback. The socket is made inside the pod's network
//! namespace (see `sys::tcp_socket_in_netns`) and connected from the async runtime; IPv4's
//! 127.0.0.1 is tried first, then ::1 when nothing listens there.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use tokio::net::{TcpSocket, TcpStream};

use super::PodNetwork;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn dial(network: &PodNetwork, port: u16) -> io::Result<TcpStream> {
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
        PodNetwork::Host if addr.is_ipv4() => TcpSocket::new_v4()?,
        PodNetwork::Host => TcpSocket::new_v6()?,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn host_network_reaches_loopback_and_reports_refusal() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(dial(&PodNetwork::Host, port).await.is_ok());
        drop(l);
        let e = dial(&PodNetwork::Host, port).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused);
    }
}
