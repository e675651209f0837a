//! Image references as a PullImage request carries them: never a panic; what parses prints
//! as itself, normalised, and the registry client sees the same repository.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        crust::image::fuzz::reference(s);
    }
});
