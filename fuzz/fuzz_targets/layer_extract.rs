//! Layer tars (gzip, zstd or plain, told by magic number) extracted into a fresh directory:
//! never a panic, nothing written outside the layer. Run as root, as the daemon does (owners,
//! devices, xattrs); seed the corpus with real layers for depth.
#![no_main]

use std::sync::atomic::{AtomicU64, Ordering};

use libfuzzer_sys::fuzz_target;

static RUN: AtomicU64 = AtomicU64::new(0);

fuzz_target!(|data: &[u8]| {
    let n = RUN.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("crust-fuzz-extract-{}-{n}", std::process::id()));
    std::fs::create_dir(&dir).expect("a fresh fuzz directory");
    crust::image::fuzz::extract(data, &dir);
    std::fs::remove_dir_all(&dir).expect("the fuzz directory removes");
});
