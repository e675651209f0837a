//! CreateContainer requests: decoded, converted, validated and built into an OCI spec (cgroup v1
//! and v2) that serialises.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    crust::cri::fuzz::create_container(data);
});
