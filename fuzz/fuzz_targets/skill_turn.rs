//! One turn of a skill dialog from a hostile state, a hostile input and a
//! hostile model answer: never a panic, and a model call's history never
//! past the session's byte cap, whatever the state brought back.

#![no_main]

use libfuzzer_sys::fuzz_target;
use megamind_assistant::skills::dialog::fuzz_turn;

fuzz_target!(|data: &[u8]| {
    // [state length: u16 LE][state][input length: u16 LE][input][answer]
    let Some((state, rest)) = take(data) else { return };
    let Some((input, answer)) = take(rest) else { return };
    fuzz_turn(state, input, &String::from_utf8_lossy(answer));
});

fn take(data: &[u8]) -> Option<(&[u8], &[u8])> {
    let [a, b, rest @ ..] = data else { return None };
    let len = usize::from(u16::from_le_bytes([*a, *b])).min(rest.len());
    Some(rest.split_at(len))
}
