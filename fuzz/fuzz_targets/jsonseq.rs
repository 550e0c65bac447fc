//! A JSONSeq v1 transcript, whatever its bytes: read and validated without
//! panicking, each violation naming an event that exists (or the end).

#![no_main]

use libfuzzer_sys::fuzz_target;
use megamind_assistant::jsonseq::{parse_transcript, validate};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (events, _) = parse_transcript(&text);
    for violation in validate(&events) {
        assert!(violation.index <= events.len(), "{violation}");
    }
});
