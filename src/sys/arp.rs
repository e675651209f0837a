//! Gratuitous ARP: a pod announcing its IPv4 addresses on its own interface once CNI gave them.
//!
//! Pod addresses are reused (host-local hands out a /24 in turn and wraps), and a node keeps the
//! neighbour entry of an address whose pod is gone: below `gc_thresh1` (128 entries) the kernel
//! never collects a stale entry. The first packet the node sends to the new pod then goes to the
//! old pod's MAC, which no port of the bridge has any more, and is lost; the kernel only probes
//! the address again after `delay_first_probe_time` (5 s). A kubelet probe with a 1 s timeout
//! (a TCP liveness probe, say) fails on it and the container is restarted. Debian's bridge
//! plugin (1.1) sends no gratuitous ARP, so crust does, as the plugin once did and as the kernel
//! does with `arp_notify` for an address present when a link comes up: a broadcast ARP request
//! for the address itself from its own MAC, which makes every neighbour holding an entry for it
//! (the node's bridge) take the new MAC, and teaches the bridge which port the MAC is on.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

const ETH_P_ARP: u16 = 0x0806;
const ETH_P_IP: u16 = 0x0800;
const ARPHRD_ETHER: u16 = 1;
const ARPOP_REQUEST: u16 = 1;

/// Sends one gratuitous ARP request for each of `ips` on `ifname`, inside the network namespace
/// pinned at `netns` (entered by a thread of its own: `sys::in_netns`).
pub fn announce_ipv4(netns: &Path, ifname: &str, ips: &[Ipv4Addr]) -> io::Result<()> {
    let (ifname, ips) = (ifname.to_owned(), ips.to_vec());
    super::in_netns(netns, "netns-arp", move || {
        let sock = packet_socket()?;
        let index = nix::net::if_::if_nametoindex(ifname.as_str())?;
        let mac = hardware_address(&sock, &ifname)?;
        for ip in ips {
            send(&sock, index, &request(mac, ip))?;
        }
        Ok(())
    })
}

/// The ARP payload of a gratuitous request: sender and target are both `ip`, at `mac`.
fn request(mac: [u8; 6], ip: Ipv4Addr) -> [u8; 28] {
    let mut p = [0u8; 28];
    p[0..2].copy_from_slice(&ARPHRD_ETHER.to_be_bytes());
    p[2..4].copy_from_slice(&ETH_P_IP.to_be_bytes());
    p[4] = 6;
    p[5] = 4;
    p[6..8].copy_from_slice(&ARPOP_REQUEST.to_be_bytes());
    p[8..14].copy_from_slice(&mac);
    p[14..18].copy_from_slice(&ip.octets());
    // Target hardware address: zero, as the kernel's own gratuitous requests have it.
    p[24..28].copy_from_slice(&ip.octets());
    p
}

/// An AF_PACKET datagram socket for ARP: the kernel adds the Ethernet header.
fn packet_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) takes no pointers; the result is checked before it becomes an OwnedFd.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            i32::from(ETH_P_ARP.to_be()),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a new, valid descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The MAC of `ifname` (SIOCGIFHWADDR).
fn hardware_address(sock: &OwnedFd, ifname: &str) -> io::Result<[u8; 6]> {
    let mut req = super::ifreq_named(ifname)?;
    // SAFETY: `req` is a valid ifreq naming the interface; SIOCGIFHWADDR fills ifru_hwaddr.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFHWADDR, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFHWADDR just filled in the union member ifru_hwaddr.
    let data = unsafe { req.ifr_ifru.ifru_hwaddr.sa_data };
    let mut mac = [0u8; 6];
    for (dst, src) in mac.iter_mut().zip(data.iter()) {
        *dst = *src as u8;
    }
    Ok(mac)
}

/// Broadcasts `payload` as an ARP packet on interface `index`.
fn send(sock: &OwnedFd, index: u32, payload: &[u8]) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain data; all zeroes is a valid value.
    let mut to: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    to.sll_family = libc::AF_PACKET as u16;
    to.sll_protocol = ETH_P_ARP.to_be();
    to.sll_ifindex =
        i32::try_from(index).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    to.sll_halen = 6;
    to.sll_addr[..6].copy_from_slice(&[0xff; 6]);
    // SAFETY: `payload` is valid for its length; `to` is a sockaddr_ll of the size passed.
    let sent = unsafe {
        libc::sendto(
            sock.as_raw_fd(),
            payload.as_ptr().cast(),
            payload.len(),
            0,
            (&to as *const libc::sockaddr_ll).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gratuitous_request_names_the_address_as_sender_and_target() {
        let mac = [0x0a, 0x58, 0x0a, 0x64, 0x00, 0x5b];
        let p = request(mac, Ipv4Addr::new(10, 100, 0, 91));
        assert_eq!(&p[0..8], &[0, 1, 8, 0, 6, 4, 0, 1]);
        assert_eq!(&p[8..14], &mac);
        assert_eq!(&p[14..18], &[10, 100, 0, 91]);
        assert_eq!(&p[18..24], &[0; 6]);
        assert_eq!(&p[24..28], &[10, 100, 0, 91]);
    }
}
