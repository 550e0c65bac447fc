//! The margin a handler keeps before its deadline to build, encode and write
//! its answer: the configured floor plus how late answers have recently been
//! built, measured. On a loaded machine a timer fires late and building the
//! answer takes longer, so the margin grows with what was seen and decays
//! again (by an eighth per answer) when the machine calms down.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

/// The measured part never adds more than this: past it the machine is too
/// loaded for any margin, and a handler still has to wait for something.
const MAX_MEASURED: Duration = Duration::from_millis(100);

/// The configured floor and a decaying maximum of the lateness seen.
#[derive(Debug)]
pub(crate) struct Margin {
    floor: Duration,
    late_micros: AtomicU64,
}

impl Margin {
    /// A margin of at least `floor`.
    pub(crate) fn new(floor: Duration) -> Margin {
        Margin { floor, late_micros: AtomicU64::new(0) }
    }

    /// The margin to keep now.
    pub(crate) fn get(&self) -> Duration {
        self.floor + Duration::from_micros(self.late_micros.load(Ordering::Relaxed)).min(MAX_MEASURED)
    }

    /// An answer was ready `late` after the moment waiting stopped.
    pub(crate) fn observe(&self, late: Duration) {
        let sample = u64::try_from(late.as_micros()).unwrap_or(u64::MAX);
        // Lost updates between racing handlers only make the figure a little
        // less exact; it is a heuristic, not an account.
        let old = self.late_micros.load(Ordering::Relaxed);
        self.late_micros.store(sample.max(old - old / 8), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_with_lateness_decays_without_and_is_bounded() {
        let margin = Margin::new(Duration::from_millis(30));
        assert_eq!(margin.get(), Duration::from_millis(30));
        margin.observe(Duration::from_millis(16));
        assert_eq!(margin.get(), Duration::from_millis(46));
        for _ in 0..100 {
            margin.observe(Duration::ZERO);
        }
        assert!(margin.get() < Duration::from_millis(31), "decays: {:?}", margin.get());
        margin.observe(Duration::from_secs(5));
        assert_eq!(margin.get(), Duration::from_millis(130), "bounded");
    }
}
