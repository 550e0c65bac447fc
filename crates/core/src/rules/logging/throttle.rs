//! [`Throttle`]: a warning that would come once a call during an incident
//! (a model server down, a cap reached, a store out of reach), kept to one
//! line a second, each saying how many it left out since the last: the
//! metrics count every call, and the log stays readable.

use std::{
    sync::{
        OnceLock,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

// tokio's clock, so that tests can move time on instead of sleeping.
use tokio::time::Instant;

/// Lines one throttle lets through at most, one per this.
const EVERY: Duration = Duration::from_secs(1);

/// One kind of warning's pace. A `static` per call site.
#[derive(Debug, Default)]
pub struct Throttle {
    /// When the next line is due, in ms since [`epoch`] (0: at once).
    due_at: AtomicU64,
    /// Lines left out since the last one written.
    left_out: AtomicU64,
}

impl Throttle {
    /// A throttle whose first line is due at once.
    pub const fn new() -> Throttle {
        Throttle { due_at: AtomicU64::new(0), left_out: AtomicU64::new(0) }
    }

    /// `Some(lines left out since the last)` when a line is due now, which
    /// the caller then writes (with that count); `None` when it is to be
    /// left out, counted for the next.
    pub fn due(&self) -> Option<u64> {
        let now = u64::try_from(epoch().elapsed().as_millis()).unwrap_or(u64::MAX);
        let due_at = self.due_at.load(Ordering::Acquire);
        let next = now.saturating_add(u64::try_from(EVERY.as_millis()).unwrap_or(u64::MAX));
        if now < due_at || self.due_at.compare_exchange(due_at, next, Ordering::AcqRel, Ordering::Acquire).is_err() {
            self.left_out.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(self.left_out.swap(0, Ordering::Relaxed))
    }
}

/// The instant throttles count from.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_line_a_second_saying_how_many_were_left_out() {
        let throttle = Throttle::new();
        assert_eq!(throttle.due(), Some(0), "the first at once");
        for _ in 0..5 {
            assert_eq!(throttle.due(), None);
        }
        tokio::time::advance(Duration::from_millis(999)).await;
        assert_eq!(throttle.due(), None, "not before a second");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(throttle.due(), Some(6), "the next says how many it left out");
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(throttle.due(), Some(0), "none since");
    }
}
