//! Panics reported on one line of stderr. A panic's message may quote what
//! the code choked on (a slice of a client's text); the standard report
//! writes it as it is, so a newline in it starts a line that log collectors
//! take for a record of its own, and a megabyte goes out whole. Here its
//! quoted segments are shortened as an answer's problems are (the words
//! of a user stay out of the log), and a panic that every request makes
//! writes a line a second, saying how many it left out; a panic elsewhere
//! than the last one reported is always written (it may be the one that
//! ends the process).

use std::{
    any::Any,
    backtrace::{Backtrace, BacktraceStatus},
    io::Write,
    panic::Location,
};

/// Longest message written, in bytes.
const MAX_MESSAGE: usize = 512;

/// Replaces the standard panic report with [`report`]'s line, and the
/// backtrace when `RUST_BACKTRACE` asks for one (a backtrace names code,
/// never data).
pub fn install() {
    static REPORTED: super::throttle::Throttle = super::throttle::Throttle::new();
    static LAST_PLACE: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());
    std::panic::set_hook(Box::new(|info| {
        let place = info.location().map(ToString::to_string).unwrap_or_default();
        let mut last = LAST_PLACE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let repeated = *last == place;
        *last = place;
        drop(last);
        let left_out = match REPORTED.due() {
            Some(left_out) => left_out,
            None if repeated => return,
            None => 0,
        };
        let thread = std::thread::current();
        let mut line = report(thread.name(), info.location(), message(info.payload()));
        if left_out > 0 {
            line.push_str(&format!(" ({left_out} panics left out before it)"));
        }
        let backtrace = Backtrace::capture();
        let mut stderr = std::io::stderr().lock();
        let _ = writeln!(stderr, "{line}");
        if backtrace.status() == BacktraceStatus::Captured {
            let _ = writeln!(stderr, "{backtrace}");
        }
    }));
}

/// A panic's message, as `panic!` and `expect` leave it.
pub fn message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// One line: the thread, where, and the message with its quoted segments
/// shortened and its control characters (and the characters that end a
/// line or reorder it for a log viewer) escaped, at most [`MAX_MESSAGE`]
/// bytes of it.
fn report(thread: Option<&str>, location: Option<&Location<'_>>, message: &str) -> String {
    let message = crate::codec::quote::sanitize(message);
    let escaped = crate::codec::quote::cap_at(crate::text::escape(&message, crate::text::misleads_a_line), MAX_MESSAGE);
    let thread = thread.unwrap_or("<unnamed>").escape_default();
    match location {
        Some(at) => format!("thread '{thread}' panicked at {at}: {escaped}"),
        None => format!("thread '{thread}' panicked: {escaped}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_one_line_escaped_and_bounded() {
        let at = Location::caller();
        let forged = "bad \"кафе\"\n{\"level\":\"INFO\",\"msg\":\"forged\"}\r\u{1b}[31m\u{2028}x\u{202e}";
        let line = report(Some("tokio-runtime-worker"), Some(at), forged);
        assert!(!line.contains(['\n', '\r', '\u{1b}', '\u{2028}', '\u{202e}']), "{line}");
        assert!(
            line.starts_with(&format!(
                "thread 'tokio-runtime-worker' panicked at {at}: bad \"каф…(4 characters)\"\\n{{"
            ))
        );
        assert!(line.ends_with("\\r\\u{1b}[31m\\u{2028}x\\u{202e}"), "{line}");
        // What the code choked on, quoted, is a user's words: shortened.
        let slicing = "byte index 5 is not a char boundary; it is inside 'и' (bytes 4..6) of `мой адрес улица Пушкина`";
        let line = report(None, None, slicing);
        assert!(!line.contains("Пушкина") && line.contains("`мой…(23 characters)`"), "{line}");

        let long = report(None, None, &"x".repeat(1 << 20));
        assert!(long.starts_with("thread '<unnamed>' panicked: xxx") && long.ends_with('…'));
        assert!(long.len() < MAX_MESSAGE + 64, "{}", long.len());
    }

    #[test]
    fn the_message_is_read_from_either_kind_of_payload() {
        let caught = |f: fn()| std::panic::catch_unwind(f).expect_err("it panics");
        assert_eq!(message(&*caught(|| panic!("static"))), "static");
        assert_eq!(message(&*caught(|| panic!("formatted {}", 7))), "formatted 7");
        assert_eq!(message(&*caught(|| std::panic::panic_any(7_u8))), "(no message)");
    }
}
