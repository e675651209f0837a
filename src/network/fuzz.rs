//! Entry point for the cargo-fuzz target `cni_result` (built only with `--cfg fuzzing`, and for
//! the unit tests): whatever a CNI plugin prints, read as crust reads it after ADD.

use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Output};

use serde_json::Value;

use super::CniResult;

/// A plugin's stdout, read as a result (had it exited 0) and as a CNI error object (had it
/// failed); an accepted result lists the pod's addresses IPv4 first and survives the record's
/// round trip unchanged.
pub fn plugin_output(stdout: &[u8]) {
    let failed = Output {
        status: ExitStatus::from_raw(1 << 8),
        stdout: stdout.to_vec(),
        stderr: stdout.to_vec(),
    };
    let _ = super::exec::failure_message(&failed);
    let Ok(raw) = serde_json::from_slice::<Value>(stdout) else {
        return;
    };
    let Ok(result) = CniResult::parse(raw) else {
        return;
    };
    let first_v6 = result.ips.iter().position(|ip| ip.is_ipv6());
    if let Some(i) = first_v6 {
        assert!(result.ips[i..].iter().all(|ip| ip.is_ipv6()), "IPv4 first");
    }
    let saved = serde_json::to_vec(&result).expect("a result serialises");
    let back: CniResult = serde_json::from_slice(&saved).expect("a saved result reads back");
    assert_eq!(back, result, "a result's record round trip");
}

#[cfg(test)]
mod tests {
    #[test]
    fn bridge_results_and_damaged_ones() {
        let seed = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fuzz/seeds/cni_result/bridge-1.0.json"
        ))
        .expect("the bridge seed");
        super::plugin_output(&seed);
        for end in 0..seed.len() {
            super::plugin_output(&seed[..end]);
        }
        super::plugin_output(br#"{"code": 7, "msg": "failed to allocate", "details": "no IPs"}"#);
    }

    /// Found by the fuzzer: without serde_json's exact float parsing, a number saved in the
    /// prevResult read back with another last digit.
    #[test]
    fn numbers_survive_the_record_round_trip() {
        super::plugin_output(b"7077777777777777777777777777777777777777777777777777777 ");
        super::plugin_output(br#"{"ips": [], "mtu": 0.1, "x": 2.2250738585072011e-308}"#);
    }
}
