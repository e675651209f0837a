//! What this end of a SPDY connection accepts from its peer: the sizes both codecs (`frame`
//! and `headers`) check before they allocate.

/// What this end accepts from a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Payload of one DATA frame. Go's framer sends each write as one frame (32 KiB from
    /// `io.Copy`); anything past this is refused, not buffered.
    pub max_data_payload: usize,
    /// Payload of one control frame (a compressed header block at most).
    pub max_control_payload: usize,
    /// A header block once decompressed.
    pub max_header_block: usize,
    /// Entries of one header block.
    pub max_header_count: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_data_payload: 1 << 20,
            max_control_payload: 64 * 1024,
            max_header_block: 64 * 1024,
            max_header_count: 128,
        }
    }
}
