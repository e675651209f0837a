//! After CNI ADD: the pod tells its neighbours where its addresses are now.

use super::{Attachment, CniResult};

/// Announces the pod's IPv4 addresses from its interface (a gratuitous ARP each), so that the
/// node's stale neighbour entry of a reused address, left by the pod that had it before, points
/// at the new pod at once: see `sys::arp`. Best effort, as in the bridge plugin that once did
/// it: a pod whose announcement fails is still reachable once the kernel probes the address
/// again, 5 s later, so the failure is logged, not returned.
pub async fn addresses(att: &Attachment, result: &CniResult) {
    let ips: Vec<std::net::Ipv4Addr> = result
        .ips
        .iter()
        .filter_map(|ip| match ip {
            std::net::IpAddr::V4(v4) => Some(*v4),
            std::net::IpAddr::V6(_) => None,
        })
        .collect();
    if ips.is_empty() {
        return;
    }
    let (netns, ifname) = (att.netns.clone(), att.ifname.clone());
    let sent =
        tokio::task::spawn_blocking(move || crate::sys::arp::announce_ipv4(&netns, &ifname, &ips))
            .await;
    match sent {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(ifname = %att.ifname, error = %e, "gratuitous ARP for the pod's address failed")
        }
        Err(e) => tracing::warn!(error = %e, "gratuitous ARP task failed"),
    }
}
