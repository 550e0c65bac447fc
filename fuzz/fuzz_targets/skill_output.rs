//! A command's output, whatever its bytes: cleaned without panicking, no
//! longer than the cap, free of escape characters, blank lines and
//! adjacent repeats.

#![no_main]

use libfuzzer_sys::fuzz_target;
use megamind_assistant::skills::output::clean;

fuzz_target!(|data: &[u8]| {
    // The first two bytes choose the cap, so small caps are explored too.
    let (cap, raw) = match data {
        [a, b, rest @ ..] => (usize::from(u16::from_le_bytes([*a, *b]) % 4096), rest),
        _ => (64, data),
    };
    let raw = String::from_utf8_lossy(raw);
    let out = clean(&raw, cap);
    assert!(out.len() <= cap, "{} > {cap}", out.len());
    assert!(!out.contains('\u{1b}') && !out.contains('\r'));
    let lines: Vec<&str> = out.split('\n').collect();
    for pair in lines.windows(2) {
        assert_ne!(pair[0], pair[1], "adjacent repeat in {out:?}");
    }
    assert!(out.is_empty() || lines.iter().all(|line| !line.trim().is_empty()));
});
