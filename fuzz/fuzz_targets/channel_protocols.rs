//! WebSocket channel messages in every protocol, and the resize JSON stream: never a panic, a
//! decoded data message encodes back to the same bytes, the resize buffer stays bounded.
#![no_main]

use crust::stream::channel::{ChannelFrame, ChannelProtocol, Outgoing};
use crust::stream::remotecommand::ResizeDecoder;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for p in [
        ChannelProtocol::V1 { base64: false },
        ChannelProtocol::V1 { base64: true },
        ChannelProtocol::V4 { base64: false },
        ChannelProtocol::V4 { base64: true },
        ChannelProtocol::V5,
    ] {
        if let Ok(Some(ChannelFrame::Data { channel, data: bytes })) = p.decode(data) {
            if !p.base64() {
                assert_eq!(p.encode(channel, &bytes), Outgoing::Binary(data.to_vec()));
            }
        }
    }
    let mut resize = ResizeDecoder::default();
    for chunk in data.chunks(7) {
        if resize.push(chunk).is_err() {
            break;
        }
    }
});
