//! Port forwarding's two ends for tests: an echo server inside a pod's network namespace and
//! crictl forwarding a local port to it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{Daemon, tools};

/// A server on 127.0.0.1 inside the namespace pinned at `pin`, serving each of its first
/// `limit` connections with `serve` on a thread of its own; answers its port.
pub fn serve_in_netns(pin: PathBuf, limit: usize, serve: fn(TcpStream)) -> u16 {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let ns = std::fs::File::open(&pin).unwrap();
        nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        tx.send(l.local_addr().unwrap().port()).unwrap();
        for conn in l.incoming().take(limit) {
            let Ok(conn) = conn else { continue };
            std::thread::spawn(move || serve(conn));
        }
    });
    rx.recv().unwrap()
}

/// An echo server on 127.0.0.1 inside the namespace pinned at `pin`; answers its port.
pub fn echo_in_netns(pin: PathBuf) -> u16 {
    serve_in_netns(pin, 1000, |mut conn| {
        let mut buf = [0u8; 16 * 1024];
        while let Ok(n) = conn.read(&mut buf) {
            if n == 0 || conn.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    })
}

/// Sends `data` through a forwarded connection and reads the echo back.
pub fn round_trip(local: u16, data: &[u8]) {
    let mut s = TcpStream::connect(("127.0.0.1", local)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut writer = s.try_clone().unwrap();
    let owned = data.to_vec();
    let w = std::thread::spawn(move || writer.write_all(&owned).unwrap());
    let mut back = vec![0u8; data.len()];
    s.read_exact(&mut back).unwrap();
    w.join().unwrap();
    assert!(back == data, "echo differs");
}

pub struct Crictl(Child);

impl Drop for Crictl {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn crictl_forward(d: &Daemon, id: &str, transport: &str, local: u16, remote: u16) -> Crictl {
    let mut child = Command::new(tools::crictl())
        .arg("--runtime-endpoint")
        .arg(format!("unix://{}", d.socket.display()))
        .args(["port-forward", "--transport", transport, id])
        .arg(format!("{local}:{remote}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !String::from_utf8_lossy(&seen).contains("Forwarding from") {
        assert_eq!(out.read(&mut byte).unwrap(), 1, "crictl ended: {seen:?}");
        seen.push(byte[0]);
    }
    // Keep draining its output ("Handling connection for ...") so it never blocks.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    Crictl(child)
}
