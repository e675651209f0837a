//! ttrpc over NRI's multiplexer, as crust's own code rather than containerd's `ttrpc` crate:
//! that crate generates its stubs with rust-protobuf (crust's messages are prost's), owns the
//! socket it serves (NRI puts two ttrpc streams on one socket, one served by each side), and
//! brings a second protobuf runtime into the build. What NRI needs of ttrpc is small: unary
//! calls both ways, deadlines, status codes.
//!
//! `mux` (the multiplexer's frames), `message` (ttrpc messages) and `rpc` (the call
//! envelopes) are pure codecs, fuzzed by `fuzz/fuzz_targets/nri_ttrpc.rs` through `fuzz_wire`;
//! `conn` drives them over a socket.

pub mod conn;
pub mod message;
pub mod mux;
pub mod rpc;

pub use conn::{CallError, Conn, Incoming};

/// Feeds `wire` (any bytes, as a plugin could send them) through the decoders the connection
/// uses, in pieces of `step` bytes: multiplexer frames, then the ttrpc messages of each
/// stream, then the envelopes. Returns what decoded. Never panics, and never buffers more than
/// one frame and one message per stream beyond the bytes given.
pub fn fuzz_wire(wire: &[u8], step: usize) -> usize {
    use bytes::BytesMut;
    use prost::Message as _;
    let mut trunk = BytesMut::new();
    let mut streams = [BytesMut::new(), BytesMut::new()];
    let mut decoded = 0;
    for piece in wire.chunks(step.max(1)) {
        trunk.extend_from_slice(piece);
        loop {
            let frame = match mux::decode(&mut trunk) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(_) => return decoded,
            };
            let Some(buf) = streams.get_mut(frame.conn.wrapping_sub(1) as usize) else {
                continue;
            };
            buf.extend_from_slice(&frame.payload);
            loop {
                match message::decode(buf) {
                    Ok(Some(m)) => {
                        decoded += 1;
                        let re = message::encode(&m).expect("a decoded message encodes");
                        assert_eq!(re.len(), message::HEADER_LEN + m.payload.len());
                        match m.kind {
                            message::Kind::Request => {
                                let _ = rpc::Request::decode(m.payload.as_slice());
                            }
                            message::Kind::Response => {
                                let _ = rpc::outcome(&m.payload);
                            }
                        }
                    }
                    Ok(None) => break,
                    Err(_) => return decoded,
                }
            }
            assert!(buf.len() <= message::HEADER_LEN + message::MAX_MESSAGE);
        }
        assert!(trunk.len() <= mux::HEADER_LEN + mux::MAX_PAYLOAD + step);
    }
    decoded
}
