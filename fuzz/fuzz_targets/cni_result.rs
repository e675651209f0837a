//! Whatever a CNI plugin prints: read as a result and as an error object; accepted results list
//! IPv4 first and survive the record round trip.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    crust::network::fuzz::plugin_output(data);
});
