//! The SPDY connection state machine fed any frame sequence (decoded from the input), with
//! this end's actions mixed in: never a panic, the stream table never over its limit.
#![no_main]

use bytes::BytesMut;
use crust::stream::spdy::codec::Decoder;
use crust::stream::spdy::frame::{Frame, Limits, RstStatus};
use crust::stream::spdy::headers::HeaderBlock;
use crust::stream::spdy::proto::{Conn, Role};
use libfuzzer_sys::fuzz_target;

const MAX_STREAMS: usize = 8;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, wire)) = data.split_first() else {
        return;
    };
    let role = if mode & 1 == 0 { Role::Server } else { Role::Client };
    let mut conn = Conn::new(role, MAX_STREAMS);
    let mut dec = Decoder::new(Limits::default());
    let mut buf = BytesMut::from(wire);
    let mut n = 0u32;
    while let Ok(Some(frame)) = dec.decode(&mut buf) {
        let id = match &frame {
            Frame::SynStream(s) => s.stream_id,
            Frame::Data(d) => d.stream_id,
            _ => 1,
        };
        if conn.recv(frame).is_err() {
            return;
        }
        n = n.wrapping_add(1);
        // This end's actions, chosen by the input too.
        match (mode >> 1).wrapping_add(n as u8) % 6 {
            0 => drop(conn.reply(id, HeaderBlock::new())),
            1 => drop(conn.take_send_window(id, 1 << 20)),
            2 => drop(conn.close(id)),
            3 => drop(conn.reset(id, RstStatus::Cancel)),
            4 => drop(conn.open(HeaderBlock::new(), false)),
            _ => drop(conn.ping()),
        }
        assert!(conn.open_streams() <= MAX_STREAMS);
    }
});
