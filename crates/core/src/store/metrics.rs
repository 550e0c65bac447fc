//! Metrics of the shared store: whether it serves, how its commands end and
//! how long they take, and the calls that fell back to this replica's memory.

use std::time::Duration;

use prometheus::{Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

use crate::scenario::Handler;

/// Round trips to a store next door take well under a millisecond; its
/// timeout is tens of them.
const BUCKETS: &[f64] = &[0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1];

/// The store's metrics, registered in the server's registry. Every series
/// is resolved once, so that recording one looks no label up.
#[derive(Debug, Clone)]
pub struct StoreMetrics {
    up: IntGauge,
    /// By [`Op`], then by [`Outcome`].
    operations: [[IntCounter; 3]; 7],
    /// By [`Op`].
    latency: [Histogram; 7],
    /// By handler.
    fallbacks: [IntCounter; 4],
}

/// How a store command ended, as a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It answered.
    Ok,
    /// It failed.
    Error,
    /// It did not answer in time.
    Timeout,
}

const OPS: [Op; 7] = [Op::Begin, Op::Complete, Op::Abandon, Op::Wait, Op::Ping, Op::Append, Op::Read];
const OUTCOMES: [(Outcome, &str); 3] = [(Outcome::Ok, "ok"), (Outcome::Error, "error"), (Outcome::Timeout, "timeout")];

/// What a store command is, as a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Finding a value or claiming it.
    Begin,
    /// Storing a value.
    Complete,
    /// Ending a claim without a value.
    Abandon,
    /// One poll of a wait.
    Wait,
    /// Checking that the store answers (a probe), or that it still holds
    /// this replica's mark.
    Ping,
    /// Appending to a journal.
    Append,
    /// Reading a journal, its wait for the next entry included.
    Read,
}

impl Op {
    /// Whether it writes: one Redis carried out says it takes writes.
    pub(super) fn is_write(self) -> bool {
        matches!(self, Op::Begin | Op::Complete | Op::Abandon | Op::Append)
    }

    fn as_str(self) -> &'static str {
        match self {
            Op::Begin => "begin",
            Op::Complete => "complete",
            Op::Abandon => "abandon",
            Op::Wait => "wait",
            Op::Ping => "ping",
            Op::Append => "append",
            Op::Read => "read",
        }
    }
}

impl StoreMetrics {
    /// The metrics, registered in `registry` (`megamind_store_up` 1: a store
    /// is up until it fails).
    pub fn register(registry: &Registry) -> StoreMetrics {
        let up = IntGauge::new("megamind_store_up", "1 while the shared store serves, 0 while calls fall back.")
            .expect("valid metric");
        let operations = IntCounterVec::new(
            Opts::new("megamind_store_operations_total", "Shared store commands by outcome (ok, error, timeout)."),
            &["op", "outcome"],
        )
        .expect("valid metric");
        let latency = HistogramVec::new(
            HistogramOpts::new("megamind_store_latency_seconds", "Time shared store commands take.")
                .buckets(BUCKETS.to_vec()),
            &["op"],
        )
        .expect("valid metric");
        let fallbacks = IntCounterVec::new(
            Opts::new(
                "megamind_store_fallbacks_total",
                "Calls served by this replica's memory while the shared store was unavailable (refused /commit and \
                 /apply calls are counted as `unavailable` answers instead).",
            ),
            &["handler"],
        )
        .expect("valid metric");
        for collector in [
            Box::new(up.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(operations.clone()),
            Box::new(latency.clone()),
            Box::new(fallbacks.clone()),
        ] {
            // Registered once per server: a second registration is a bug of the caller's.
            let _ = registry.register(collector);
        }
        up.set(1);
        StoreMetrics {
            up,
            operations: OPS
                .map(|op| OUTCOMES.map(|(_, outcome)| operations.with_label_values(&[op.as_str(), outcome]))),
            latency: OPS.map(|op| latency.with_label_values(&[op.as_str()])),
            fallbacks: Handler::ALL.map(|handler| fallbacks.with_label_values(&[handler.as_str()])),
        }
    }

    /// Records one command.
    pub fn observe(&self, op: Op, outcome: Outcome, took: Duration) {
        self.operations[op as usize][outcome as usize].inc();
        self.latency[op as usize].observe(took.as_secs_f64());
    }

    /// Records one call that could not use the shared store.
    pub fn fell_back(&self, handler: Handler) {
        self.fallbacks[handler as usize].inc();
    }

    /// Sets `megamind_store_up`.
    pub fn set_up(&self, up: bool) {
        self.up.set(i64::from(up));
    }
}
