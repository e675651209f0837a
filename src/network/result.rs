//! The result of a CNI ADD: kept whole (it is the prevResult for DEL and CHECK) and read for the
//! pod's IP addresses. The 0.3.x, 0.4.0 and 1.x result formats share the fields read here.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CniResult {
    /// The result as the last plugin printed it.
    pub raw: Value,
    /// The pod's addresses, IPv4 first, in the order the plugins reported them.
    pub ips: Vec<IpAddr>,
}

impl CniResult {
    pub fn parse(raw: Value) -> Result<CniResult, String> {
        let ifaces = raw.get("interfaces").and_then(Value::as_array);
        // An address belongs to the pod when its interface lives in a sandbox (the pod netns);
        // results that name no interface are taken whole.
        let in_pod = |ip: &Value| match (ip.get("interface").and_then(Value::as_u64), ifaces) {
            (Some(i), Some(list)) => list
                .get(i as usize)
                .and_then(|f| f.get("sandbox"))
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty()),
            _ => true,
        };
        let mut ips = Vec::new();
        for ip in raw.get("ips").and_then(Value::as_array).into_iter().flatten() {
            if !in_pod(ip) {
                continue;
            }
            let addr = ip.get("address").and_then(Value::as_str).unwrap_or_default();
            let host = addr.split('/').next().unwrap_or_default();
            let parsed: IpAddr =
                host.parse().map_err(|_| format!("result has a bad address {addr:?}"))?;
            ips.push(parsed);
        }
        ips.sort_by_key(|ip| ip.is_ipv6());
        Ok(CniResult { raw, ips })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_addresses_ipv4_first() {
        let raw = serde_json::json!({
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": "crust0", "mac": "aa"},
                {"name": "veth1", "mac": "bb"},
                {"name": "eth0", "mac": "cc", "sandbox": "/run/crust/ns/x.net"}
            ],
            "ips": [
                {"address": "fd00::5/64", "interface": 2},
                {"address": "10.88.0.5/16", "gateway": "10.88.0.1", "interface": 2},
                {"address": "10.88.0.1/16", "interface": 0}
            ]
        });
        let r = CniResult::parse(raw).unwrap();
        assert_eq!(r.ips, ["10.88.0.5".parse::<IpAddr>().unwrap(), "fd00::5".parse().unwrap()]);
    }

    #[test]
    fn garbage_addresses_are_refused() {
        let raw = serde_json::json!({"ips": [{"address": "ten.0.0.1/8"}]});
        assert!(CniResult::parse(raw).unwrap_err().contains("ten.0.0.1"));
        assert!(CniResult::parse(serde_json::json!({})).unwrap().ips.is_empty());
    }
}
