//! A stream connection's first bytes, read a byte at a time: the lane
//! decides once the bytes can say, never changes its mind as more arrive,
//! decides by the limit at the latest, and answers only a `GET` over
//! HTTP/1.1 itself.

#![no_main]

use libfuzzer_sys::fuzz_target;
use megamind_core::server::stream_head::{NotLean, decide};

/// What the fuzz target compares of a decision.
type Decision = Result<(String, Vec<(String, Vec<u8>)>), NotLean>;

fuzz_target!(|data: &[u8]| {
    // One byte picks the limit; the rest is what the client sent.
    let [limit, bytes @ ..] = data else { return };
    let limit = usize::from(*limit) * 8 + 1;
    let summary = |read: &[u8]| -> Option<Decision> {
        decide(read, limit).map(|decided| {
            decided.map(|request| {
                let headers = request.headers().iter().map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()));
                (request.uri().to_string(), headers.collect())
            })
        })
    };
    let Some((at, first)) = (0..=bytes.len()).find_map(|end| summary(&bytes[..end]).map(|d| (end, d))) else {
        assert!(bytes.len() < limit, "undecided past the limit of {limit}");
        return;
    };
    assert!(at <= limit, "decided only at {at}, past the limit of {limit}");
    for end in [at + 1, (at + bytes.len()) / 2, bytes.len()] {
        if end >= at && end <= bytes.len() {
            assert_eq!(summary(&bytes[..end]).as_ref(), Some(&first), "decided at {at}, changed at {end}");
        }
    }
    if first.is_ok() {
        // Empty lines before a request line are allowed (RFC 9112 §2.2).
        let start = bytes.iter().position(|&b| b != b'\r' && b != b'\n').expect("a request line");
        let line_end = start + bytes[start..].iter().position(|&b| b == b'\n').expect("a request line's end");
        let line = &bytes[start..line_end];
        assert!(line.starts_with(b"GET "), "lean but not a GET: {:?}", String::from_utf8_lossy(line));
        assert!(
            line.trim_ascii_end().ends_with(b" HTTP/1.1"),
            "lean but not HTTP/1.1: {:?}",
            String::from_utf8_lossy(line)
        );
    }
});
