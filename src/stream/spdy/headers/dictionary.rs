//! The zlib dictionary of SPDY/3 header compression (SPDY/3 spec, section 2.6.10.1), kept as
//! the spec describes it: common header names and values, each with a 32-bit big-endian length
//! before it, then a run of plain text (status lines, dates, media types). Both ends of every
//! SPDY/3 and SPDY/3.1 connection prime their zlib streams with exactly these 1423 bytes; a
//! peer asks for them by their Adler-32 checksum, `DICTIONARY_ID`.

use std::sync::LazyLock;

/// Adler-32 of the dictionary, as a zlib stream that needs it names it.
pub const DICTIONARY_ID: u32 = 0xe3c6_a7c2;

/// The length-prefixed words, in the spec's order.
const WORDS: &[&str] = &[
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
    "200 OK",
    "version",
    "HTTP/1.1",
    "url",
    "public",
    "set-cookie",
    "keep-alive",
    "origin",
];

/// The text after the words, in the spec's order, without separators.
const TAIL: &[&str] = &[
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505",
    "203 Non-Authoritative Information",
    "204 No Content",
    "301 Moved Permanently",
    "400 Bad Request",
    "401 Unauthorized",
    "403 Forbidden",
    "404 Not Found",
    "500 Internal Server Error",
    "501 Not Implemented",
    "503 Service Unavailable",
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT",
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,text/javascript,",
    "publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.",
];

/// The dictionary's bytes, assembled once.
pub static DICTIONARY: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let mut d = Vec::with_capacity(1423);
    for w in WORDS {
        d.extend_from_slice(&(w.len() as u32).to_be_bytes());
        d.extend_from_slice(w.as_bytes());
    }
    for t in TAIL {
        d.extend_from_slice(t.as_bytes());
    }
    d
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dictionary_is_the_one_peers_ask_for() {
        assert_eq!(DICTIONARY.len(), 1423);
        let mut z = flate2::Compress::new(flate2::Compression::default(), true);
        assert_eq!(z.set_dictionary(&DICTIONARY).unwrap(), DICTIONARY_ID);
    }
}
