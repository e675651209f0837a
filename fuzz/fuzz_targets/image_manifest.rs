//! Manifests, indexes and configs as a registry may send them, under any content type the
//! first byte picks: never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

const TYPES: [Option<&str>; 6] = [
    None,
    Some("application/vnd.oci.image.manifest.v1+json"),
    Some("application/vnd.oci.image.index.v1+json"),
    Some("application/vnd.docker.distribution.manifest.v2+json"),
    Some("application/vnd.docker.distribution.manifest.list.v2+json"),
    Some("application/json"),
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    crust::image::fuzz::manifest(body, TYPES[usize::from(pick) % TYPES.len()]);
});
