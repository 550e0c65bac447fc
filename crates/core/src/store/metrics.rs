//! Metrics of the shared store: whether it serves, how its commands end and
//! how long they take, and the calls that fell back to this replica's memory.

use std::time::Duration;

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry};

/// Round trips to a store next door take well under a millisecond; its
/// timeout is tens of them.
const BUCKETS: &[f64] = &[0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1];

/// The store's metrics, registered in the server's registry.
#[derive(Debug, Clone)]
pub struct StoreMetrics {
    up: IntGauge,
    operations: IntCounterVec,
    latency: HistogramVec,
    fallbacks: IntCounterVec,
}

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
    /// Checking that the store answers.
    Ping,
}

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Op::Begin => "begin",
            Op::Complete => "complete",
            Op::Abandon => "abandon",
            Op::Wait => "wait",
            Op::Ping => "ping",
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
        StoreMetrics { up, operations, latency, fallbacks }
    }

    /// Records one command.
    pub fn observe(&self, op: Op, outcome: &str, took: Duration) {
        self.operations.with_label_values(&[op.as_str(), outcome]).inc();
        self.latency.with_label_values(&[op.as_str()]).observe(took.as_secs_f64());
    }

    /// Records one call that could not use the shared store.
    pub fn fell_back(&self, handler: &str) {
        self.fallbacks.with_label_values(&[handler]).inc();
    }

    /// Sets `megamind_store_up`.
    pub fn set_up(&self, up: bool) {
        self.up.set(i64::from(up));
    }
}
