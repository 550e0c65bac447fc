//! tvmtool's answer to a ticket check, as its status and body: reading it
//! never panics, and whatever tvmtool said reaches a log or a refusal only
//! shortened and without control characters.

#![no_main]

use libfuzzer_sys::fuzz_target;
use megamind_core::rules::auth::tvmtool::{Checked, Unavailable, read_service_answer, read_user_answer};

fn clean(text: &str) {
    assert!(text.chars().count() <= 160, "{text}");
    assert!(!text.chars().any(char::is_control), "{text:?}");
}

fn check<T>(verdict: Result<Checked<T>, Unavailable>) {
    match verdict {
        Ok(Checked::Valid(_)) => {}
        Ok(Checked::Refused { error, logging }) => {
            clean(&error);
            clean(&logging);
        }
        Err(Unavailable::Status { error, .. }) => clean(&error),
        Err(Unavailable::Unreadable(why) | Unavailable::DstUnknown(why)) => clean(&why),
        Err(_) => {}
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else { return };
    let status = [200, 403, 400, 401, 500, 206][usize::from(first) % 6];
    let body = String::from_utf8_lossy(rest);
    check(read_service_answer(status, &body));
    check(read_user_answer(status, &body));
});
