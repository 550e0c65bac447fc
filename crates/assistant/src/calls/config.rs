//! `[assistant.calls]`: how many model calls run at once, how long one may
//! take (and think), and how long and how many finished answers are kept.

use std::time::Duration;

use megamind_core::config::{MAX_TIMEOUT_MS, MAX_TTL_SECS};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The `[assistant.calls]` table.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct CallsConfig {
    /// A whole model call, retries included, in ms.
    pub call_timeout_ms: u64,
    /// Model calls in flight before `/run` declines (`IsIrrelevant`).
    pub max_in_flight: usize,
    /// Seconds a finished answer is kept for `/continue` and the user's repeat.
    pub result_ttl_secs: u64,
    /// Finished answers kept at most.
    pub max_retained: usize,
    /// Bytes of finished answers kept at most, each with its events.
    pub max_retained_bytes: usize,
    /// A model still thinking, without a word of its answer, this long (ms)
    /// into its call is stopped and the apology said; 0: no budget.
    pub max_thinking_ms: u64,
}

impl Default for CallsConfig {
    fn default() -> CallsConfig {
        CallsConfig {
            call_timeout_ms: 30_000,
            max_in_flight: 256,
            result_ttl_secs: 120,
            max_retained: 10_000,
            max_retained_bytes: 64 << 20,
            max_thinking_ms: 0,
        }
    }
}

impl CallsConfig {
    /// Checks every value, reporting each problem with its key under `calls.`.
    pub(crate) fn validate(&self, check: &mut dyn FnMut(bool, String)) {
        // Upper bounds as the server's own times have: the clock's arithmetic and Redis's `PX` have limits.
        let (timeout, ttl) = (self.call_timeout_ms, self.result_ttl_secs);
        check(
            (1..=MAX_TIMEOUT_MS).contains(&timeout),
            format!("calls.call_timeout_ms = {timeout}: must be 1..={MAX_TIMEOUT_MS}"),
        );
        check(
            self.max_thinking_ms <= MAX_TIMEOUT_MS,
            format!("calls.max_thinking_ms = {}: must be at most {MAX_TIMEOUT_MS}", self.max_thinking_ms),
        );
        check(self.max_in_flight > 0, "calls.max_in_flight must be above 0".into());
        check((1..=MAX_TTL_SECS).contains(&ttl), format!("calls.result_ttl_secs = {ttl}: must be 1..={MAX_TTL_SECS}"));
        check(self.max_retained > 0, "calls.max_retained must be above 0".into());
        check(self.max_retained_bytes > 0, "calls.max_retained_bytes must be above 0".into());
    }

    pub(crate) fn call_timeout(&self) -> Duration {
        Duration::from_millis(self.call_timeout_ms)
    }

    /// The thinking budget, if there is one.
    pub(crate) fn max_thinking(&self) -> Option<Duration> {
        (self.max_thinking_ms > 0).then(|| Duration::from_millis(self.max_thinking_ms))
    }

    pub(crate) fn result_ttl(&self) -> Duration {
        Duration::from_secs(self.result_ttl_secs)
    }
}
