//! Counters of the idempotency cache: hits, misses, waits, evictions and
//! refusals. The cache bumps them; [`crate::rules::metrics::ServerMetrics`]
//! registers them where `/metrics` renders them.

use prometheus::{IntCounter, IntCounterVec, Opts};

use crate::scenario::Handler;

/// Counters of the idempotency cache, shared with the cache that bumps them
/// (and with its memory store, which counts the evictions).
#[derive(Debug, Clone)]
pub struct CacheCounters {
    /// Repeats answered from a completed entry.
    pub hits: IntCounter,
    /// First calls.
    pub misses: IntCounter,
    /// Repeats that waited for an in-flight first call.
    pub waits: IntCounter,
    /// Answers dropped to stay within bounds, by handler (expiry is not eviction).
    pub evictions: IntCounterVec,
    /// First calls of `/commit` and `/apply` refused because their reserve was full, by handler.
    pub refusals: IntCounterVec,
    /// The children of `evictions` and `refusals` by [`Handler::ALL`] order,
    /// resolved once: an eviction at steady state comes with every `/run`.
    evicted: [IntCounter; 4],
    refused: [IntCounter; 4],
}

impl CacheCounters {
    /// The eviction counter of `handler`.
    pub fn evicted(&self, handler: Handler) -> &IntCounter {
        &self.evicted[handler as usize]
    }

    /// The eviction counters by handler, for a store to count in.
    pub fn evictions_by_handler(&self) -> [IntCounter; 4] {
        self.evicted.clone()
    }

    /// The refusal counter of `handler`.
    pub fn refused(&self, handler: Handler) -> &IntCounter {
        &self.refused[handler as usize]
    }
}

impl Default for CacheCounters {
    fn default() -> CacheCounters {
        let counter = |name: &str, help: &str| IntCounter::new(name, help).expect("valid metric name");
        let by_handler = |name: &str, help: &str| {
            let vec = IntCounterVec::new(Opts::new(name, help), &["handler"]).expect("valid metric");
            let children = Handler::ALL.map(|handler| vec.with_label_values(&[handler.as_str()]));
            (vec, children)
        };
        let (evictions, evicted) = by_handler(
            "megamind_idempotency_evictions_total",
            "Answers evicted to stay within the cache bounds (/run and /continue only).",
        );
        let (refusals, refused) = by_handler(
            "megamind_idempotency_refusals_total",
            "First /commit and /apply calls refused `overloaded` because their reserve was full.",
        );
        CacheCounters {
            hits: counter("megamind_idempotency_hits_total", "Repeats answered with the first call's answer."),
            misses: counter("megamind_idempotency_misses_total", "First calls for a (scenario, handler, RequestId)."),
            waits: counter("megamind_idempotency_waits_total", "Repeats that waited for the first call in flight."),
            evictions,
            refusals,
            evicted,
            refused,
        }
    }
}
