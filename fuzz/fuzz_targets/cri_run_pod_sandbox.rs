//! RunPodSandbox requests: decoded, converted and validated as the RPC does; accepted names never
//! carry CNI_ARGS separators.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    crust::cri::fuzz::run_pod_sandbox(data);
});
