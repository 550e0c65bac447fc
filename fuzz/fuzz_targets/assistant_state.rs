//! Any bytes as the assistant's `State` and as a `/continue`'s
//! `Arguments`, read as its handlers read them: never a panic, and what is
//! let through within its caps (history, session id, call id, words).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| megamind_assistant::dialog::fuzz_read_state(data));
