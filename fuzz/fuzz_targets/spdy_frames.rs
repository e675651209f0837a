//! SPDY frame decoding from any bytes, fed in any chunking: never a panic, never more buffered
//! than one frame within `Limits`; every frame decoded re-encodes.
#![no_main]

use bytes::BytesMut;
use crust::stream::spdy::codec::{Decoder, Encoder};
use crust::stream::spdy::frame::Limits;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&step, wire)) = data.split_first() else {
        return;
    };
    let step = usize::from(step).max(1);
    let limits = Limits::default();
    let mut dec = Decoder::new(limits);
    let mut enc = Encoder::new();
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for chunk in wire.chunks(step) {
        buf.extend_from_slice(chunk);
        loop {
            match dec.decode(&mut buf) {
                Ok(Some(frame)) => {
                    out.clear();
                    enc.encode(&frame, &mut out).expect("a decoded frame encodes");
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
        assert!(buf.len() <= 8 + limits.max_data_payload.max(limits.max_control_payload));
    }
});
