//! Whole frames from a byte buffer and back: the decoder takes frames off the front of what
//! has been read so far and keeps the receiving zlib stream; the encoder keeps the sending one.
//! Neither does I/O, so both can be driven by a socket, a WebSocket tunnel, a test or a fuzzer.
//!
//! Invariant: the decoder never buffers more than one frame's head and payload, and refuses a
//! frame over `Limits` from its 8-byte head, so a hostile peer cannot make it allocate more.

use bytes::{Buf, BytesMut};

use super::frame::{
    Data, Frame, FrameError, GoAway, HEAD_LEN, Head, Headers, Limits, Ping, RstStream, Settings,
    SynReply, SynStream, WindowUpdate,
};
use super::headers::{HeaderDecoder, HeaderEncoder};

pub struct Decoder {
    headers: HeaderDecoder,
    limits: Limits,
}

impl Decoder {
    pub fn new(limits: Limits) -> Decoder {
        Decoder {
            headers: HeaderDecoder::new(),
            limits,
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Takes the next whole frame off the front of `buf`; None while `buf` holds only part of
    /// one (append more and call again). Control frames of unknown types are skipped, as the
    /// spec asks. An error leaves the connection unusable (the header zlib stream may be out of
    /// step): the caller ends it.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        loop {
            let Some(head) = buf.first_chunk::<HEAD_LEN>().copied().map(Head::parse) else {
                return Ok(None);
            };
            head.check(&self.limits)?;
            let total = HEAD_LEN + head.payload_len();
            if buf.len() < total {
                return Ok(None);
            }
            buf.advance(HEAD_LEN);
            let payload = buf.split_to(head.payload_len()).freeze();
            match head {
                Head::Data {
                    stream_id, flags, ..
                } => return Data::decode(stream_id, flags, payload).map(|d| Some(Frame::Data(d))),
                Head::Control { kind, flags, .. } => {
                    if let Some(frame) = self.control(kind, flags, &payload)? {
                        return Ok(Some(frame));
                    }
                }
            }
        }
    }

    /// How many bytes the frame at the front of `buf` takes in all, once its head is there:
    /// what the reader must make room for (`decode` allocates nothing itself).
    pub fn wanted(buf: &[u8]) -> Option<usize> {
        let head = buf.first_chunk::<HEAD_LEN>().copied().map(Head::parse)?;
        Some(HEAD_LEN + head.payload_len())
    }

    fn control(&mut self, kind: u16, flags: u8, p: &[u8]) -> Result<Option<Frame>, FrameError> {
        let (dec, limits) = (&mut self.headers, &self.limits);
        Ok(Some(match kind {
            1 => Frame::SynStream(SynStream::decode(flags, p, dec, limits)?),
            2 => Frame::SynReply(SynReply::decode(flags, p, dec, limits)?),
            3 => Frame::RstStream(RstStream::decode(p)?),
            4 => Frame::Settings(Settings::decode(flags, p)?),
            6 => Frame::Ping(Ping::decode(p)?),
            7 => Frame::GoAway(GoAway::decode(p)?),
            8 => Frame::Headers(Headers::decode(flags, p, dec, limits)?),
            9 => Frame::WindowUpdate(WindowUpdate::decode(p)?),
            _ => return Ok(None),
        }))
    }
}

#[derive(Default)]
pub struct Encoder {
    headers: HeaderEncoder,
}

impl Encoder {
    pub fn new() -> Encoder {
        Encoder::default()
    }

    /// Appends `frame` to `dst`.
    pub fn encode(&mut self, frame: &Frame, dst: &mut Vec<u8>) -> Result<(), FrameError> {
        let enc = &mut self.headers;
        match frame {
            Frame::SynStream(f) => f.encode(enc, dst)?,
            Frame::SynReply(f) => f.encode(enc, dst)?,
            Frame::Headers(f) => f.encode(enc, dst)?,
            Frame::RstStream(f) => f.encode(dst),
            Frame::Settings(f) => f.encode(dst),
            Frame::Ping(f) => f.encode(dst),
            Frame::GoAway(f) => f.encode(dst),
            Frame::WindowUpdate(f) => f.encode(dst),
            Frame::Data(f) => f.encode(dst),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::stream::spdy::frame::{GoAwayStatus, RstStatus};
    use crate::stream::spdy::headers::HeaderBlock;

    /// Frames as Go's SPDY framer (moby/spdystream) writes them; regenerate with
    /// `frame/testdata/gen_go_frames.go.txt`.
    const GO_FRAMES: &str = include_str!("frame/testdata/go_frames.hex");

    fn decode_all(dec: &mut Decoder, wire: &[u8], step: usize) -> Vec<Frame> {
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for chunk in wire.chunks(step) {
            buf.extend_from_slice(chunk);
            while let Some(f) = dec.decode(&mut buf).unwrap() {
                out.push(f);
            }
        }
        assert!(buf.is_empty());
        out
    }

    #[test]
    fn decodes_what_go_clients_send_in_any_chunking() {
        let wire = hex::decode(GO_FRAMES.trim()).unwrap();
        for step in [1, 3, 8, 64, wire.len()] {
            let frames = decode_all(&mut Decoder::new(Limits::default()), &wire, step);
            assert_eq!(frames.len(), 6, "step {step}");
            let Frame::SynStream(s) = &frames[1] else {
                panic!("{:?}", frames[1])
            };
            assert_eq!((s.stream_id, s.fin), (3, true));
            assert_eq!(s.headers.get("streamtype"), Some("data"));
            assert_eq!(
                frames[2],
                Frame::Data(Data {
                    stream_id: 3,
                    fin: true,
                    payload: Bytes::from_static(b"hello")
                })
            );
            assert_eq!(frames[3], Frame::Ping(Ping { id: 1 }));
            assert_eq!(
                frames[4],
                Frame::RstStream(RstStream::new(3, RstStatus::Cancel))
            );
            assert_eq!(
                frames[5],
                Frame::GoAway(GoAway {
                    last_good_stream_id: 3,
                    status: GoAwayStatus::Ok
                })
            );
        }
    }

    #[test]
    fn encoder_output_decodes_back() {
        let mut enc = Encoder::new();
        let mut h = HeaderBlock::new();
        h.insert("streamtype", "stdout");
        let frames = vec![
            Frame::SynStream(SynStream::new(1, h.clone())),
            Frame::SynReply(SynReply {
                stream_id: 1,
                fin: false,
                headers: HeaderBlock::new(),
            }),
            Frame::Data(Data {
                stream_id: 1,
                fin: false,
                payload: Bytes::from(vec![7u8; 40_000]),
            }),
            Frame::WindowUpdate(WindowUpdate {
                stream_id: 0,
                delta: 100,
            }),
            Frame::Settings(Settings::default()),
            Frame::Headers(Headers {
                stream_id: 1,
                fin: true,
                headers: h,
            }),
        ];
        let mut wire = Vec::new();
        for f in &frames {
            enc.encode(f, &mut wire).unwrap();
        }
        assert_eq!(
            decode_all(&mut Decoder::new(Limits::default()), &wire, 1000),
            frames
        );
    }

    #[test]
    fn unknown_control_frames_are_skipped_and_oversized_refused_from_the_head() {
        let mut buf = BytesMut::new();
        // NOOP (type 5, gone since SPDY/3) with a 2-byte payload, then a PING.
        buf.extend_from_slice(&[0x80, 3, 0, 5, 0, 0, 0, 2, 9, 9]);
        buf.extend_from_slice(&[0x80, 3, 0, 6, 0, 0, 0, 4, 0, 0, 0, 2]);
        let mut dec = Decoder::new(Limits::default());
        assert_eq!(
            dec.decode(&mut buf).unwrap(),
            Some(Frame::Ping(Ping { id: 2 }))
        );
        // A DATA head announcing 16 MiB: refused before any of it is buffered.
        let mut big = BytesMut::from(&[0, 0, 0, 1, 0, 0xff, 0xff, 0xff][..]);
        assert!(matches!(
            dec.decode(&mut big),
            Err(FrameError::TooLarge { .. })
        ));
        assert!(big.capacity() < 1024);
    }
}
