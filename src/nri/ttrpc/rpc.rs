//! The envelopes of a ttrpc call (ttrpc's `request.proto`, with google.rpc's `Status`): the
//! Request names the service and method and carries the encoded argument and the caller's
//! deadline; the Response carries a status and the encoded result. Written out here with
//! prost's derive, as small as they are, rather than compiled from ttrpc's .proto.

use prost::Message as _;

#[derive(Clone, PartialEq, prost::Message)]
pub struct Request {
    #[prost(string, tag = "1")]
    pub service: String,
    #[prost(string, tag = "2")]
    pub method: String,
    #[prost(bytes = "vec", tag = "3")]
    pub payload: Vec<u8>,
    /// How long the caller waits; 0: no deadline. The server's handler gets it as its
    /// context's deadline.
    #[prost(int64, tag = "4")]
    pub timeout_nano: i64,
    #[prost(message, repeated, tag = "5")]
    pub metadata: Vec<KeyValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Response {
    #[prost(message, optional, tag = "1")]
    pub status: Option<Status>,
    #[prost(bytes = "vec", tag = "2")]
    pub payload: Vec<u8>,
}

/// google.rpc.Status without its details (which prost skips as unknown fields).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Status {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

/// gRPC's codes, as ttrpc answers them.
pub const OK: i32 = 0;
pub const INVALID_ARGUMENT: i32 = 3;
pub const NOT_FOUND: i32 = 5;
pub const UNIMPLEMENTED: i32 = 12;

/// What a call's answer says: the result's bytes, or the status the server refused with.
pub fn outcome(response: &[u8]) -> Result<Result<Vec<u8>, Status>, prost::DecodeError> {
    let r = Response::decode(response)?;
    Ok(match r.status {
        Some(s) if s.code != OK => Err(s),
        _ => Ok(r.payload),
    })
}

pub fn ok(payload: Vec<u8>) -> Vec<u8> {
    Response {
        status: Some(Status {
            code: OK,
            message: String::new(),
        }),
        payload,
    }
    .encode_to_vec()
}

pub fn refused(code: i32, message: String) -> Vec<u8> {
    Response {
        status: Some(Status { code, message }),
        payload: Vec::new(),
    }
    .encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_read_back() {
        assert_eq!(outcome(&ok(b"x".to_vec())).unwrap(), Ok(b"x".to_vec()));
        let no_status = Response {
            status: None,
            payload: b"y".to_vec(),
        }
        .encode_to_vec();
        assert_eq!(outcome(&no_status).unwrap(), Ok(b"y".to_vec()));
        let e = outcome(&refused(NOT_FOUND, "gone".into()))
            .unwrap()
            .unwrap_err();
        assert_eq!((e.code, e.message.as_str()), (NOT_FOUND, "gone"));
        assert!(outcome(&[0xff]).is_err());
    }
}
