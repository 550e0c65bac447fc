//! The request log: one summary line per call at `info`, and at `debug` the
//! request and the answer in text format with personal data redacted.
//!
//! Lines go through a batching writer ([`batch`]) so that neither a slow
//! terminal nor per-line wake-ups stall a handler; debug rendering runs only
//! when debug is enabled.

pub mod batch;
pub mod line;

use std::{io::Write, time::Duration};

use tracing_subscriber::{EnvFilter, fmt};

pub use batch::FlushGuard;

/// Target of the per-request summary lines, for filtering.
pub const ACCESS_TARGET: &str = "megamind_scenario::access";

/// Installs the global subscriber writing to `writer` with `filter`
/// (`info`, `debug`, or a full `RUST_LOG`-style directive). Keep the guard
/// alive: dropping it flushes and stops the writer.
pub fn init<W: Write + Send + 'static>(filter: &str, writer: W) -> Result<FlushGuard, String> {
    let filter = EnvFilter::try_new(filter).map_err(|e| format!("invalid log level {filter:?}: {e}"))?;
    let (writer, guard) = batch::BatchWriter::new(writer);
    fmt()
        .with_env_filter(filter)
        .event_format(line::LineFormat)
        .with_writer(writer)
        .try_init()
        .map_err(|e| format!("cannot install the logger: {e}"))?;
    Ok(guard)
}

/// Logs the summary line of one call.
pub fn summary(transport: &str, scenario: &str, handler: &str, request_id: &str, outcome: &str, latency: Duration) {
    tracing::info!(
        target: ACCESS_TARGET,
        transport,
        scenario,
        handler,
        request_id,
        outcome,
        latency_us = latency.as_micros() as u64,
    );
}

/// Whether request and answer bodies are logged.
pub fn bodies_enabled() -> bool {
    tracing::enabled!(target: ACCESS_TARGET, tracing::Level::DEBUG)
}
