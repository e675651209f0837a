//! Kubernetes' channel protocols over WebSocket, for exec and attach: every message carries one
//! channel's bytes, the channel number in front (0 stdin, 1 stdout, 2 stderr, 3 error, 4
//! resize). Pure: messages in, frames out.
//!
//! - `channel.k8s.io` (also what a client offering no subprotocol gets) and
//!   `v4.channel.k8s.io`: binary messages, the channel as one byte. v4's error channel carries
//!   a Status JSON; v1's a plain message, only on failure.
//! - `base64.channel.k8s.io`, `v4.base64.channel.k8s.io`: text messages, the channel as an
//!   ASCII digit, the bytes base64-encoded.
//! - `v5.channel.k8s.io`: v4 plus a close signal: `[255, channel]` ends the client's side of
//!   one channel (stdin EOF), which v4 cannot say without closing the whole connection.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

pub const STDIN: u8 = 0;
pub const STDOUT: u8 = 1;
pub const STDERR: u8 = 2;
pub const ERROR: u8 = 3;
pub const RESIZE: u8 = 4;
/// The first byte of a v5 close signal.
pub const CLOSE_SIGNAL: u8 = 255;

/// The WebSocket subprotocol of port forwarding: SPDY/3.1 inside binary messages.
pub const SPDY_TUNNEL_PORTFORWARD: &str = "SPDY/3.1+portforward.k8s.io";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelProtocol {
    V1 { base64: bool },
    V4 { base64: bool },
    V5,
}

/// Subprotocols in the order this server prefers them when a client offers several.
const SUPPORTED: &[(&str, ChannelProtocol)] = &[
    ("v5.channel.k8s.io", ChannelProtocol::V5),
    ("v4.channel.k8s.io", ChannelProtocol::V4 { base64: false }),
    (
        "v4.base64.channel.k8s.io",
        ChannelProtocol::V4 { base64: true },
    ),
    ("channel.k8s.io", ChannelProtocol::V1 { base64: false }),
    (
        "base64.channel.k8s.io",
        ChannelProtocol::V1 { base64: true },
    ),
];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ChannelError {
    #[error("close signal must name exactly one channel, got {0} bytes")]
    BadCloseSignal(usize),
    #[error("base64 channel {0:?} is not a digit")]
    BadChannel(u8),
    #[error("channel {channel} data is not base64: {error}")]
    BadBase64 { channel: u8, error: String },
}

/// One decoded client message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelFrame {
    Data {
        channel: u8,
        data: Vec<u8>,
    },
    /// v5: the client will send nothing more on `channel`.
    Close {
        channel: u8,
    },
}

/// One message to send: binary, or text for the base64 protocols.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outgoing {
    Binary(Vec<u8>),
    Text(String),
}

impl ChannelProtocol {
    /// Picks a protocol from the comma-separated values of the client's
    /// `Sec-WebSocket-Protocol` headers: the first offered one this server speaks. A client
    /// that offers none gets `channel.k8s.io` semantics and no protocol in the answer
    /// (`Some((V1, None))`); one that offers only unknown protocols gets None.
    pub fn negotiate<'a>(
        offered: impl IntoIterator<Item = &'a str>,
    ) -> Option<(ChannelProtocol, Option<&'static str>)> {
        let offered: Vec<&str> = offered
            .into_iter()
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .collect();
        if offered.is_empty() {
            return Some((ChannelProtocol::V1 { base64: false }, None));
        }
        offered.iter().find_map(|o| {
            SUPPORTED
                .iter()
                .find(|(name, _)| name == o)
                .map(|(name, p)| (*p, Some(*name)))
        })
    }

    pub fn base64(self) -> bool {
        matches!(
            self,
            ChannelProtocol::V1 { base64: true } | ChannelProtocol::V4 { base64: true }
        )
    }

    /// Whether the error channel carries a Status JSON (v4, v5) rather than a plain message.
    pub fn status_json(self) -> bool {
        !matches!(self, ChannelProtocol::V1 { .. })
    }

    pub fn close_signal(self) -> bool {
        self == ChannelProtocol::V5
    }

    /// Decodes one client message; None for an empty one (clients send those as keepalives).
    pub fn decode(self, msg: &[u8]) -> Result<Option<ChannelFrame>, ChannelError> {
        let Some((&first, rest)) = msg.split_first() else {
            return Ok(None);
        };
        if self.close_signal() && first == CLOSE_SIGNAL {
            return match rest {
                [channel] => Ok(Some(ChannelFrame::Close { channel: *channel })),
                _ => Err(ChannelError::BadCloseSignal(rest.len())),
            };
        }
        if !self.base64() {
            return Ok(Some(ChannelFrame::Data {
                channel: first,
                data: rest.to_vec(),
            }));
        }
        if !first.is_ascii_digit() {
            return Err(ChannelError::BadChannel(first));
        }
        let channel = first - b'0';
        let data = STANDARD.decode(rest).map_err(|e| ChannelError::BadBase64 {
            channel,
            error: e.to_string(),
        })?;
        Ok(Some(ChannelFrame::Data { channel, data }))
    }

    /// The message carrying `data` on `channel`.
    pub fn encode(self, channel: u8, data: &[u8]) -> Outgoing {
        if self.base64() {
            let mut s = String::with_capacity(1 + data.len().div_ceil(3) * 4);
            s.push(char::from(b'0' + channel % 10));
            STANDARD.encode_string(data, &mut s);
            Outgoing::Text(s)
        } else {
            let mut v = Vec::with_capacity(1 + data.len());
            v.push(channel);
            v.extend_from_slice(data);
            Outgoing::Binary(v)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_follows_the_clients_order_and_falls_back_to_v1() {
        let n = |v: &[&str]| ChannelProtocol::negotiate(v.iter().copied());
        assert_eq!(
            n(&["v5.channel.k8s.io"]),
            Some((ChannelProtocol::V5, Some("v5.channel.k8s.io")))
        );
        assert_eq!(
            n(&["bogus, v4.base64.channel.k8s.io", "v5.channel.k8s.io"]),
            Some((
                ChannelProtocol::V4 { base64: true },
                Some("v4.base64.channel.k8s.io")
            ))
        );
        assert_eq!(n(&[]), Some((ChannelProtocol::V1 { base64: false }, None)));
        assert_eq!(n(&["v6.channel.k8s.io"]), None);
    }

    #[test]
    fn binary_protocols_put_the_channel_in_front() {
        let p = ChannelProtocol::V4 { base64: false };
        assert_eq!(
            p.encode(STDOUT, b"hi"),
            Outgoing::Binary(vec![1, b'h', b'i'])
        );
        assert_eq!(
            p.decode(&[0, b'x']).unwrap(),
            Some(ChannelFrame::Data {
                channel: STDIN,
                data: b"x".to_vec()
            })
        );
        assert_eq!(p.decode(&[]).unwrap(), None);
        // 255 is only a close signal in v5; in v4 it is a (meaningless) channel.
        assert!(matches!(
            p.decode(&[255, 0]).unwrap(),
            Some(ChannelFrame::Data { channel: 255, .. })
        ));
    }

    #[test]
    fn base64_protocols_use_text_and_a_digit() {
        let p = ChannelProtocol::V1 { base64: true };
        assert_eq!(p.encode(STDERR, b"hi"), Outgoing::Text("2aGk=".into()));
        assert_eq!(
            p.decode(b"0aGk=").unwrap(),
            Some(ChannelFrame::Data {
                channel: 0,
                data: b"hi".to_vec()
            })
        );
        assert!(matches!(
            p.decode(b"x"),
            Err(ChannelError::BadChannel(b'x'))
        ));
        assert!(matches!(
            p.decode(b"0!!!"),
            Err(ChannelError::BadBase64 { .. })
        ));
    }

    #[test]
    fn v5_close_signals() {
        let p = ChannelProtocol::V5;
        assert_eq!(
            p.decode(&[255, 0]).unwrap(),
            Some(ChannelFrame::Close { channel: 0 })
        );
        assert_eq!(p.decode(&[255]), Err(ChannelError::BadCloseSignal(0)));
        assert_eq!(p.decode(&[255, 0, 1]), Err(ChannelError::BadCloseSignal(2)));
        assert!(p.status_json() && !p.base64());
    }
}
