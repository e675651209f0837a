//! Header blocks: zlib decompression with the SPDY dictionary over a run of blocks (the first
//! byte of each says its length), then parsing. Output stays within `Limits` however small the
//! compressed input; a parsed block serializes and parses back to itself.
#![no_main]

use crust::stream::spdy::frame::Limits;
use crust::stream::spdy::headers::{HeaderBlock, HeaderDecoder};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default();
    if let Ok(block) = HeaderBlock::parse(data, &limits) {
        let mut raw = Vec::new();
        block.serialize(&mut raw);
        assert_eq!(HeaderBlock::parse(&raw, &limits).as_ref(), Ok(&block));
    }
    let mut dec = HeaderDecoder::new();
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let n = usize::from(len).min(tail.len());
        let (block, tail) = tail.split_at(n);
        rest = tail;
        if dec.decode(block, &limits).is_err() {
            return;
        }
    }
});
