//! The values of a request's head read before any scenario runs, a
//! `Content-Type`, an `Accept`, a `grpc-timeout` and a parts query alike:
//! reading them never panics, an `Accept` picks only a format one of its
//! entries names, a timeout taken has at most eight digits (so no clock
//! overflows adding it), a parts query's values grow no larger than it,
//! and the mark a snapshot's name carries is written in it.

#![no_main]

use libfuzzer_sys::fuzz_target;
use megamind_assistant::parts::{PartQuery, snapshot_mark};
use megamind_core::{codec::Format, transport::grpc::timeout_header::parse_timeout};

/// The longest `grpc-timeout`: 99,999,999 hours.
const LONGEST_HOURS: u64 = 99_999_999;

fuzz_target!(|data: &[u8]| {
    if let Some(timeout) = parse_timeout(data) {
        assert!(data.len() <= 9, "{} bytes taken", data.len());
        assert!(timeout.as_secs() <= LONGEST_HOURS * 3600);
    }
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = Format::from_media_type(text);
    if let Some(format) = Format::from_accept(text) {
        let named = text.split(',').any(|entry| Format::from_media_type(entry) == Some(format));
        assert!(named, "{text:?} picked {format:?}, which none of its entries names");
    }
    let query = PartQuery::from_query(Some(text));
    for (key, value) in [("part", &query.part), ("snapshot", &query.snapshot)] {
        // Decoding shrinks a value, or makes a byte not UTF-8 three (U+FFFD).
        if let Some(value) = value {
            assert!(value.len() <= text.len() * 3, "{key} = {value:?} grew past its query {text:?}");
        }
    }
    if let Some(mark) = query.snapshot.as_deref().and_then(snapshot_mark) {
        let snapshot = query.snapshot.as_deref().unwrap_or_default();
        assert!(snapshot.contains(&format!("-{mark}")), "{snapshot:?} read as mark {mark}");
    }
});
