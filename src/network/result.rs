//! The result of a CNI ADD: kept whole (it is the prevResult for DEL and CHECK), read for the
//! pod's IP addresses, and shown as containerd shows it. The 0.3.x, 0.4.0 and 1.x result
//! formats share the fields read here.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

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
        for ip in raw
            .get("ips")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if !in_pod(ip) {
                continue;
            }
            let addr = ip
                .get("address")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let host = addr.split('/').next().unwrap_or_default();
            let parsed: IpAddr = host
                .parse()
                .map_err(|_| format!("result has a bad address {addr:?}"))?;
            ips.push(parsed);
        }
        ips.sort_by_key(|ip| ip.is_ipv6());
        Ok(CniResult { raw, ips })
    }

    /// The result as containerd shows it (`cniResult` in a pod's verbose status): go-cni's
    /// `Result`, whose Go fields have no JSON names. Each interface by name, the pod's
    /// (`ifname`) always among them, with the addresses on it; the DNS of each network's
    /// result; the routes. Built the way go-cni's `createResult` builds it.
    pub fn go_cni(&self, ifname: &str) -> Value {
        let empty =
            || json!({"IPConfigs": null, "Mac": "", "Sandbox": "", "PciID": "", "SocketPath": ""});
        let text =
            |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
        let mut interfaces = serde_json::Map::new();
        interfaces.insert(ifname.to_owned(), empty());
        let listed = self.raw.get("interfaces").and_then(Value::as_array);
        for i in listed.into_iter().flatten() {
            let mut config = empty();
            for (go, cni) in [
                ("Mac", "mac"),
                ("Sandbox", "sandbox"),
                ("PciID", "pciID"),
                ("SocketPath", "socketPath"),
            ] {
                config[go] = text(i, cni).into();
            }
            interfaces.insert(text(i, "name"), config);
        }
        let ips = self.raw.get("ips").and_then(Value::as_array);
        for ip in ips.into_iter().flatten() {
            let name = ip
                .get("interface")
                .and_then(Value::as_u64)
                .and_then(|n| listed?.get(n as usize))
                .map_or_else(|| ifname.to_owned(), |i| text(i, "name"));
            let address = text(ip, "address");
            let host = address.split('/').next().unwrap_or_default();
            // Go's net.IP prints canonically (and a nil gateway as "").
            let canonical = |s: &str| s.parse::<IpAddr>().map_or(s.to_owned(), |a| a.to_string());
            let entry = json!({"IP": canonical(host), "Gateway": canonical(&text(ip, "gateway"))});
            let config = interfaces.entry(name).or_insert_with(empty);
            match config["IPConfigs"].as_array_mut() {
                Some(list) => list.push(entry),
                None => config["IPConfigs"] = json!([entry]),
            }
        }
        // `types.DNS` leaves its empty fields out; a result with no DNS still adds one entry.
        let dns: serde_json::Map<String, Value> = self
            .raw
            .get("dns")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter(|(_, v)| {
                !matches!(v, Value::Null)
                    && v.as_str() != Some("")
                    && v.as_array().is_none_or(|a| !a.is_empty())
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let routes = match self.raw.get("routes").and_then(Value::as_array) {
            Some(r) if !r.is_empty() => Value::Array(r.clone()),
            _ => Value::Null,
        };
        json!({"Interfaces": interfaces, "DNS": [dns], "Routes": routes})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_cni_shape_puts_each_address_on_its_interface() {
        let raw = serde_json::json!({
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": "crust0", "mac": "aa"},
                {"name": "eth0", "mac": "cc", "sandbox": "/run/crust/ns/x.net"}
            ],
            "ips": [
                {"address": "10.88.0.5/16", "gateway": "10.88.0.1", "interface": 1},
                {"address": "fd00:0::5/64", "interface": 1}
            ],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dns": {"nameservers": ["10.0.0.10"], "search": []}
        });
        let v = CniResult::parse(raw).unwrap().go_cni("eth0");
        assert_eq!(
            v["Interfaces"]["eth0"],
            json!({"IPConfigs": [{"IP": "10.88.0.5", "Gateway": "10.88.0.1"},
                                 {"IP": "fd00::5", "Gateway": ""}],
                   "Mac": "cc", "Sandbox": "/run/crust/ns/x.net", "PciID": "", "SocketPath": ""})
        );
        assert_eq!(v["Interfaces"]["crust0"]["IPConfigs"], Value::Null);
        assert_eq!(v["Interfaces"]["crust0"]["Mac"], "aa");
        assert_eq!(v["DNS"], json!([{"nameservers": ["10.0.0.10"]}]));
        assert_eq!(v["Routes"], json!([{"dst": "0.0.0.0/0"}]));
    }

    #[test]
    fn go_cni_shape_of_a_result_naming_no_interface() {
        let raw = serde_json::json!({"ips": [{"address": "10.1.0.2/24"}]});
        let v = CniResult::parse(raw).unwrap().go_cni("eth0");
        assert_eq!(
            v["Interfaces"]["eth0"]["IPConfigs"],
            json!([{"IP": "10.1.0.2", "Gateway": ""}])
        );
        assert_eq!(v["DNS"], json!([{}]));
        assert_eq!(v["Routes"], Value::Null);
    }

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
        assert_eq!(
            r.ips,
            [
                "10.88.0.5".parse::<IpAddr>().unwrap(),
                "fd00::5".parse().unwrap()
            ]
        );
    }

    #[test]
    fn garbage_addresses_are_refused() {
        let raw = serde_json::json!({"ips": [{"address": "ten.0.0.1/8"}]});
        assert!(CniResult::parse(raw).unwrap_err().contains("ten.0.0.1"));
        assert!(
            CniResult::parse(serde_json::json!({}))
                .unwrap()
                .ips
                .is_empty()
        );
    }
}
