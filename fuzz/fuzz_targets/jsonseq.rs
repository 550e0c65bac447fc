//! A JSONSeq v1 transcript, whatever its bytes: read and validated without
//! panicking, each violation naming an event that exists (or the end); the
//! same text ended by a blank line ends no event inside, and keeps the
//! events read before in order.

#![no_main]

use libfuzzer_sys::fuzz_target;
use megamind_assistant::jsonseq::{read_transcript, validate};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let transcript = read_transcript(&text);
    for violation in validate(&transcript.events) {
        assert!(violation.index <= transcript.events.len(), "{violation}");
    }
    if !transcript.more {
        let ended = read_transcript(&format!("{text}\n\n"));
        assert!(ended.more || !ended.unterminated, "a blank line ends every event");
        assert!(ended.events.starts_with(&transcript.events), "the events read before come first");
    }
});
