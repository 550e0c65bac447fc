//! Retry delays: exponential backoff with jitter, so that many calls failing
//! together do not retry together.

use std::{
    collections::hash_map::RandomState,
    hash::{BuildHasher, Hasher},
    time::Duration,
};

/// No single backoff waits longer than this.
const MAX_DELAY: Duration = Duration::from_secs(5);

/// The delay before retry number `retry` (0 for the first retry): `base`
/// doubled per retry, capped, then a uniformly random point of its upper half
/// picked by `random`.
pub(crate) fn delay(base: Duration, retry: u32, random: u64) -> Duration {
    let full = base.saturating_mul(1u32.checked_shl(retry.min(16)).unwrap_or(u32::MAX)).min(MAX_DELAY);
    let half = full / 2;
    let span = u64::try_from(half.as_micros()).unwrap_or(u64::MAX);
    half + Duration::from_micros(if span == 0 { 0 } else { random % (span + 1) })
}

/// A random number for the jitter: std's per-process random hash keys,
/// so no extra dependency is needed for something this unimportant.
pub(crate) fn random() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    hasher
        .write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    hasher.finish()
}

/// The delay of `Retry-After: <seconds>`, when the header holds seconds.
pub(crate) fn retry_after(value: Option<&str>) -> Option<Duration> {
    value?.trim().parse::<u64>().ok().map(|secs| Duration::from_secs(secs.min(60)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Duration = Duration::from_millis(100);

    #[test]
    fn doubles_per_retry_within_the_upper_half() {
        for (retry, full_ms) in [(0, 100), (1, 200), (2, 400), (3, 800)] {
            let full = Duration::from_millis(full_ms);
            assert_eq!(delay(BASE, retry, 0), full / 2, "retry {retry}: the lowest point");
            assert_eq!(delay(BASE, retry, full.as_micros() as u64 / 2), full, "retry {retry}: the highest point");
            for random in [1, 12_345, 987_654_321, u64::MAX] {
                let d = delay(BASE, retry, random);
                assert!(d >= full / 2 && d <= full, "retry {retry}: {d:?}");
            }
        }
    }

    #[test]
    fn capped_and_never_overflowing() {
        assert!(delay(BASE, 40, u64::MAX) <= MAX_DELAY);
        assert!(delay(Duration::MAX, 3, 7) <= MAX_DELAY);
        assert_eq!(delay(Duration::ZERO, 2, 99), Duration::ZERO);
    }

    #[test]
    fn random_numbers_differ() {
        let draws: std::collections::HashSet<u64> = (0..8).map(|_| random()).collect();
        assert!(draws.len() > 1);
    }

    #[test]
    fn retry_after_reads_seconds_only() {
        assert_eq!(retry_after(Some("2")), Some(Duration::from_secs(2)));
        assert_eq!(retry_after(Some(" 1 ")), Some(Duration::from_secs(1)));
        assert_eq!(retry_after(Some("Wed, 21 Oct 2015 07:28:00 GMT")), None);
        assert_eq!(retry_after(None), None);
    }
}
