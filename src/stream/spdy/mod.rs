//! SPDY/3.1, as Kubernetes clients speak it (moby/spdystream): `frame` and `headers` are the
//! pure codecs (one file per frame type, header blocks with zlib and the SPDY dictionary),
//! both bounded by `limits`,
//! `codec` turns bytes into frames and back, `proto` is the connection state (streams, windows,
//! pings, GOAWAY, resets) and `conn` drives it over a socket with stream handles; `splice`
//! moves DATA payloads between TCP sockets without copying them through this process.

pub mod codec;
pub mod conn;
pub mod frame;
pub mod headers;
pub mod limits;
pub mod proto;
pub mod splice;

pub use conn::{Connection, Incoming, RecvHalf, SendHalf, Settings, Stream};
pub use proto::Role;
