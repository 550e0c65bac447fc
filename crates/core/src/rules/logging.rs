//! The request log: one summary line per call at `info`, and at `debug` the
//! request and the answer in text format with personal data redacted.
//!
//! Lines go through a batching writer ([`batch`]) so that neither a slow
//! terminal nor per-line wake-ups stall a handler; debug rendering runs only
//! when debug is enabled.

pub mod batch;
pub mod line;
pub mod panics;
pub mod throttle;

use std::{
    io::Write,
    sync::OnceLock,
    time::{Duration, SystemTime},
};

use batch::BatchWriter;
pub use batch::FlushGuard;
pub use throttle::Throttle;
use tracing_subscriber::{EnvFilter, fmt};

/// Target of the per-request summary lines, for filtering.
pub const ACCESS_TARGET: &str = "megamind_scenario::access";

/// Installs the global subscriber writing to `writer` with `filter`
/// (`info`, `debug`, or a full `RUST_LOG`-style directive). Keep the guard
/// alive: dropping it flushes and stops the writer.
pub fn init<W: Write + Send + 'static>(filter: &str, writer: W) -> Result<FlushGuard, String> {
    let filter = EnvFilter::try_new(filter).map_err(|e| format!("invalid log level {filter:?}: {e}"))?;
    let (writer, guard) = BatchWriter::new(writer);
    fmt()
        .with_env_filter(filter)
        .event_format(line::LineFormat)
        .with_writer(writer.clone())
        .try_init()
        .map_err(|e| format!("cannot install the logger: {e}"))?;
    let _ = SUMMARIES.set(writer);
    Ok(guard)
}

/// Where summary lines go when [`init`] installed our subscriber: straight
/// into its writer, since a line per call through tracing's field machinery
/// costs as much as a small scenario's answer.
static SUMMARIES: OnceLock<BatchWriter> = OnceLock::new();

/// Logs the summary line of one call.
pub fn summary(transport: &str, scenario: &str, handler: &str, request_id: &str, outcome: &str, latency: Duration) {
    if !tracing::enabled!(target: ACCESS_TARGET, tracing::Level::INFO) {
        return;
    }
    let latency_us = latency.as_micros() as u64;
    if let Some(writer) = SUMMARIES.get() {
        let fields = [("transport", transport), ("scenario", scenario), ("handler", handler)];
        writer.append(|buffer| {
            let _ = write_summary(&mut Utf8(buffer), SystemTime::now(), &fields, request_id, outcome, latency_us);
        });
        return;
    }
    tracing::info!(
        target: ACCESS_TARGET,
        transport,
        scenario,
        handler,
        request_id,
        outcome,
        latency_us,
    );
}

/// The line [`line::LineFormat`] makes of `summary`'s event, field for field.
fn write_summary(
    out: &mut impl std::fmt::Write,
    now: SystemTime,
    fields: &[(&str, &str)],
    request_id: &str,
    outcome: &str,
    latency_us: u64,
) -> std::fmt::Result {
    line::write_head(out, now, &tracing::Level::INFO, ACCESS_TARGET)?;
    for (name, value) in fields.iter().copied().chain([("request_id", request_id), ("outcome", outcome)]) {
        line::write_field(out, name, value)?;
    }
    out.write_str(" latency_us=")?;
    out.write_str(itoa::Buffer::new().format(latency_us))?;
    out.write_char('\n')
}

/// ` name=value` as a log line writes a field, the value quoted and
/// escaped where it must be: for a field written into a message.
pub fn field(name: &str, value: &str) -> String {
    let mut text = String::new();
    let _ = line::write_field(&mut text, name, value);
    text
}

/// Text written into a byte buffer.
struct Utf8<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Utf8<'_> {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        self.0.extend_from_slice(text.as_bytes());
        Ok(())
    }
}

/// Whether request and answer bodies are logged.
pub fn bodies_enabled() -> bool {
    tracing::enabled!(target: ACCESS_TARGET, tracing::Level::DEBUG)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(data);
            Ok(data.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The text after the timestamp.
    fn after_timestamp(line: &str) -> &str {
        line.split_once('Z').expect("a timestamp").1
    }

    #[test]
    fn the_direct_summary_line_is_the_line_tracing_writes() {
        let cases = [("plain-id", "ok", 1234), ("a b\n\"c", "timeout", 0), ("", "bad_request", 7)];
        for (request_id, outcome, micros) in cases {
            let sink = Sink::default();
            let subscriber = {
                let sink = sink.clone();
                tracing_subscriber::fmt().event_format(line::LineFormat).with_writer(move || sink.clone()).finish()
            };
            tracing::subscriber::with_default(subscriber, || {
                summary("http", "demo", "run", request_id, outcome, Duration::from_micros(micros));
            });
            let through_tracing = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
            let mut direct = Vec::new();
            let fields = [("transport", "http"), ("scenario", "demo"), ("handler", "run")];
            write_summary(&mut Utf8(&mut direct), SystemTime::now(), &fields, request_id, outcome, micros).unwrap();
            let direct = String::from_utf8(direct).unwrap();
            assert_eq!(after_timestamp(&direct), after_timestamp(&through_tracing));
            assert_eq!(direct.lines().count(), 1, "{direct}");
            assert!(direct.contains(&format!(" latency_us={micros}\n")), "{direct}");
        }
    }
}
