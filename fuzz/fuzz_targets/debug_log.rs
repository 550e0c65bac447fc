//! A server's debug log, whatever its bytes: replay reads the calls in it
//! without panicking, each with a request it found.

#![no_main]

use libfuzzer_sys::fuzz_target;
use megamind_tools::dialog::replay;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for call in replay::parse_log(&text) {
        assert!(text.contains(call.request.lines().next().unwrap_or_default()));
    }
});
