//! A circuit breaker for the model backend: after `threshold` consecutive
//! failures calls fail fast for `cooldown`, then one probe call decides
//! whether the backend is back.
//!
//! A std mutex guards a few words and is never held across an await, so it is
//! cheaper than an async one. Time is tokio's, so tests pause and advance it.

use std::{
    sync::{Mutex, PoisonError},
    time::Duration,
};

use tokio::time::Instant;

/// The breaker's states, as the metric reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BreakerState {
    /// Calls go through.
    Closed = 0,
    /// One probe call is allowed through.
    HalfOpen = 1,
    /// Calls fail fast.
    Open = 2,
}

#[derive(Debug, Clone, Copy)]
enum State {
    Closed { failures: u32 },
    Open { until: Instant },
    // A probe that never reports (its task dropped) must not wedge the
    // breaker: after another cooldown a new probe is let through.
    HalfOpen { probe_until: Instant },
}

/// Counts failures and decides whether a call may go to the backend.
#[derive(Debug)]
pub(crate) struct Breaker {
    threshold: u32,
    cooldown: Duration,
    state: Mutex<State>,
}

impl Breaker {
    /// Opens after `threshold` consecutive failures, for `cooldown`.
    pub(crate) fn new(threshold: u32, cooldown: Duration) -> Breaker {
        Breaker { threshold: threshold.max(1), cooldown, state: Mutex::new(State::Closed { failures: 0 }) }
    }

    /// Whether a call may go to the backend now.
    pub(crate) fn admit(&self) -> bool {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match *state {
            State::Closed { .. } => true,
            State::Open { until } | State::HalfOpen { probe_until: until } if now >= until => {
                *state = State::HalfOpen { probe_until: now + self.cooldown };
                true
            }
            State::Open { .. } | State::HalfOpen { .. } => false,
        }
    }

    /// The backend answered (whatever it said): it is reachable.
    pub(crate) fn success(&self) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = State::Closed { failures: 0 };
    }

    /// The backend failed (connection, timeout, 429, 5xx).
    pub(crate) fn failure(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let open = State::Open { until: Instant::now() + self.cooldown };
        *state = match *state {
            State::Closed { failures } if failures + 1 < self.threshold => State::Closed { failures: failures + 1 },
            State::Closed { .. } | State::HalfOpen { .. } => open,
            // Late failures of calls admitted before it opened do not extend it.
            State::Open { until } => State::Open { until },
        };
    }

    /// The state now, for the metric.
    pub(crate) fn state(&self) -> BreakerState {
        match *self.state.lock().unwrap_or_else(PoisonError::into_inner) {
            State::Closed { .. } => BreakerState::Closed,
            State::Open { until } if Instant::now() >= until => BreakerState::HalfOpen,
            State::Open { .. } => BreakerState::Open,
            State::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COOLDOWN: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn opens_after_consecutive_failures_and_probes_after_the_cooldown() {
        let breaker = Breaker::new(3, COOLDOWN);
        breaker.failure();
        breaker.failure();
        assert!(breaker.admit());
        assert_eq!(breaker.state(), BreakerState::Closed);
        breaker.failure();
        assert_eq!(breaker.state(), BreakerState::Open);
        assert!(!breaker.admit(), "open: fails fast");

        tokio::time::advance(COOLDOWN - Duration::from_millis(1)).await;
        assert!(!breaker.admit(), "still cooling down");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(breaker.admit(), "one probe");
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
        assert!(!breaker.admit(), "only one probe at a time");

        breaker.success();
        assert_eq!(breaker.state(), BreakerState::Closed);
        assert!(breaker.admit());
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_probe_opens_it_again() {
        let breaker = Breaker::new(1, COOLDOWN);
        breaker.failure();
        tokio::time::advance(COOLDOWN).await;
        assert!(breaker.admit());
        breaker.failure();
        assert_eq!(breaker.state(), BreakerState::Open);
        assert!(!breaker.admit());
    }

    #[tokio::test(start_paused = true)]
    async fn a_success_resets_the_count() {
        let breaker = Breaker::new(2, COOLDOWN);
        breaker.failure();
        breaker.success();
        breaker.failure();
        assert_eq!(breaker.state(), BreakerState::Closed, "failures must be consecutive");
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_probe_does_not_wedge_it() {
        let breaker = Breaker::new(1, COOLDOWN);
        breaker.failure();
        tokio::time::advance(COOLDOWN).await;
        assert!(breaker.admit(), "the probe, which never reports");
        tokio::time::advance(COOLDOWN).await;
        assert!(breaker.admit(), "another probe after another cooldown");
    }
}
