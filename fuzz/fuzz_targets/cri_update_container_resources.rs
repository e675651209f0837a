//! UpdateContainerResources requests: the resources as libcgroups would receive them, on either
//! hierarchy.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    crust::cri::fuzz::update_container_resources(data);
});
