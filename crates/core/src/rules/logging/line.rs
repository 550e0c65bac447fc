//! The log line format: `2026-11-23T11:45:57.144282Z INFO target: message key=value ...`.
//!
//! tracing-subscriber's default format quotes every string through `Debug`
//! and builds its timestamp generically; the request log writes one line per
//! call, so this one writes plain values as they are and quotes only those
//! that need it (spaces, quotes, `=`, control characters), keeping each line
//! one unambiguous line whatever a client puts in a RequestId.
//!
//! Every value is capped: a field at [`MAX_FIELD`] bytes, a message (the
//! debug bodies) at [`MAX_MESSAGE`], so that no request can make a line of
//! its own size.

use std::{
    fmt::{self, Write},
    time::{SystemTime, UNIX_EPOCH},
};

use tracing::{Event, Subscriber, field::Field};
use tracing_subscriber::{
    fmt::{FmtContext, FormatEvent, FormatFields, format::Writer},
    registry::LookupSpan,
};

/// Longest field value written, in bytes; longer ones end in `…(N bytes)`.
pub const MAX_FIELD: usize = 512;
/// Longest message written (a debug body's text), in bytes.
pub const MAX_MESSAGE: usize = 64 * 1024;

/// The event formatter of our logs.
#[derive(Debug, Clone, Copy, Default)]
pub struct LineFormat;

impl<S, N> FormatEvent<S, N> for LineFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, _ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let metadata = event.metadata();
        write_head(&mut writer, SystemTime::now(), metadata.level(), metadata.target())?;
        let mut visitor = Visitor { writer: &mut writer, result: Ok(()) };
        event.record(&mut visitor);
        visitor.result?;
        writer.write_char('\n')
    }
}

struct Visitor<'a, 'w> {
    writer: &'a mut Writer<'w>,
    result: fmt::Result,
}

impl tracing::field::Visit for Visitor<'_, '_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if self.result.is_ok() {
            self.result = write_field(self.writer, field.name(), value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_err() {
            return;
        }
        let message = field.name() == "message";
        let mut text = Capped::new(if message { MAX_MESSAGE } else { MAX_FIELD });
        let _ = write!(text, "{value:?}");
        let text = text.finish();
        self.result = if message {
            // `format_args!` messages: written as the text they are, newlines kept
            // for the multi-line debug bodies.
            write!(self.writer, " {text}")
        } else {
            write_field(self.writer, field.name(), &text)
        };
    }
}

/// Writes ` name=value`, quoting the value when it is empty or holds a
/// space, quote, `=`, backslash or control character; ` value` for the message.
pub(super) fn write_field(writer: &mut impl Write, name: &str, value: &str) -> fmt::Result {
    writer.write_char(' ')?;
    if name == "message" {
        return writer.write_str(value);
    }
    let capped;
    let value = if value.len() > MAX_FIELD {
        let mut text = Capped::new(MAX_FIELD);
        let _ = text.write_str(value);
        capped = text.finish();
        capped.as_str()
    } else {
        value
    };
    writer.write_str(name)?;
    writer.write_char('=')?;
    let plain = !value.is_empty() && value.chars().all(plain_char);
    if plain { writer.write_str(value) } else { write!(writer, "{value:?}") }
}

/// Whether `c` may stand in a field unquoted: none that ends a line for a
/// log viewer (U+2028, U+2029 and other white space), reorders the text
/// around it (bidirectional marks) or reads as the line's own syntax.
fn plain_char(c: char) -> bool {
    !crate::text::misleads_a_line(c) && !c.is_whitespace() && !matches!(c, '"' | '=' | '\\')
}

/// Text that keeps its first `limit` bytes (at a character boundary) and
/// counts the rest.
struct Capped {
    text: String,
    limit: usize,
    dropped: usize,
}

impl Capped {
    fn new(limit: usize) -> Capped {
        Capped { text: String::new(), limit, dropped: 0 }
    }

    fn finish(mut self) -> String {
        if self.dropped > 0 {
            let _ = write!(self.text, "…(+{} bytes)", self.dropped);
        }
        self.text
    }
}

impl Write for Capped {
    fn write_str(&mut self, part: &str) -> fmt::Result {
        let room = self.limit.saturating_sub(self.text.len());
        if self.dropped > 0 || part.len() > room {
            let mut end = room.min(part.len());
            while !part.is_char_boundary(end) {
                end -= 1;
            }
            if self.dropped == 0 {
                self.text.push_str(&part[..end]);
                self.dropped = part.len() - end;
            } else {
                self.dropped += part.len();
            }
        } else {
            self.text.push_str(part);
        }
        Ok(())
    }
}

/// The start of every line: the timestamp, the level and the target.
pub(super) fn write_head(
    writer: &mut impl Write,
    now: SystemTime,
    level: &tracing::Level,
    target: &str,
) -> fmt::Result {
    write_timestamp(writer, now)?;
    writer.write_char(' ')?;
    let level = level.as_str();
    for _ in level.len()..5 {
        writer.write_char(' ')?;
    }
    writer.write_str(level)?;
    writer.write_char(' ')?;
    writer.write_str(target)?;
    writer.write_char(':')
}

/// RFC 3339 in UTC with microseconds, digit by digit: it starts every line.
fn write_timestamp(writer: &mut impl Write, now: SystemTime) -> fmt::Result {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    let rest = secs % 86_400;
    let mut text = *b"0000-00-00T00:00:00.000000Z";
    let mut put = |at: usize, width: usize, mut value: u64| {
        for digit in text[at..at + width].iter_mut().rev() {
            *digit = b'0' + (value % 10) as u8;
            value /= 10;
        }
    };
    put(0, 4, year.clamp(0, 9999) as u64);
    put(5, 2, u64::from(month));
    put(8, 2, u64::from(day));
    put(11, 2, rest / 3600);
    put(14, 2, rest % 3600 / 60);
    put(17, 2, rest % 60);
    put(20, 6, u64::from(since.subsec_micros()));
    // ASCII digits and punctuation only.
    writer.write_str(std::str::from_utf8(&text).unwrap_or_default())
}

/// Days since 1970-01-01 to (year, month, day): Howard Hinnant's algorithm.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        let mut out = String::new();
        write_timestamp(&mut out, UNIX_EPOCH + Duration::from_micros(1_795_434_357_144_282)).unwrap();
        assert_eq!(out, "2026-11-23T11:45:57.144282Z");
        out.clear();
        write_timestamp(&mut out, UNIX_EPOCH + Duration::from_secs(951_782_400)).unwrap();
        assert_eq!(out, "2000-02-29T00:00:00.000000Z");
        out.clear();
        write_timestamp(&mut out, UNIX_EPOCH).unwrap();
        assert_eq!(out, "1970-01-01T00:00:00.000000Z");
    }

    #[test]
    fn lines_are_formatted_and_hostile_values_quoted() {
        let sink = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let writer = {
            let sink = sink.clone();
            move || Sink(sink.clone())
        };
        let subscriber = tracing_subscriber::fmt().event_format(LineFormat).with_writer(writer).finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(target: "megamind_scenario::access", transport = "http", request_id = "a b\n\"c", latency_us = 42u64, "served");
        });
        let text = String::from_utf8(sink.lock().unwrap().clone()).unwrap();
        let line = text.strip_suffix('\n').expect("one line");
        assert!(!line.contains('\n'), "{line}");
        let (_, rest) = line.split_once('Z').unwrap();
        assert_eq!(
            rest,
            r#"  INFO megamind_scenario::access: served transport=http request_id="a b\n\"c" latency_us=42"#
        );
    }

    #[test]
    fn separators_and_bidirectional_marks_are_quoted_and_escaped() {
        for (value, shown) in [
            ("a\u{2028}b", r#"x="a\u{2028}b""#),
            ("a\u{2029}b", r#"x="a\u{2029}b""#),
            ("a\u{202e}b", r#"x="a\u{202e}b""#),
            ("a\u{a0}b", r#"x="a\u{a0}b""#),
            ("ид-1", "x=ид-1"),
        ] {
            let mut out = String::new();
            write_field(&mut out, "x", value).unwrap();
            assert_eq!(out, format!(" {shown}"), "{value:?}");
        }
    }

    #[test]
    fn huge_values_are_capped() {
        let mut out = String::new();
        write_field(&mut out, "request_id", &"x".repeat(1_000_000)).unwrap();
        assert!(out.len() < MAX_FIELD + 64, "{}", out.len());
        assert!(out.ends_with("…(+999488 bytes)\""), "{out}");
        let mut capped = Capped::new(5);
        capped.write_str("яяя").unwrap();
        capped.write_str("abc").unwrap();
        assert_eq!(capped.finish(), "яя…(+5 bytes)");
    }

    struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(data);
            Ok(data.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
}
