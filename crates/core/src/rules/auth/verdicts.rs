//! tvmtool's verdicts, kept a short while and keyed by a keyed hash of the
//! ticket (never the ticket): steady traffic with one ticket costs tvmtool a
//! check per TTL, and identical checks in flight are made once.

use std::{
    hash::{BuildHasher, RandomState},
    sync::Arc,
    time::Duration,
};

use dashmap::{DashMap, mapref::one::Ref};
use futures_util::{
    FutureExt,
    future::{BoxFuture, Shared},
};
use tokio::time::Instant;

/// A ticket's key: two independent SipHash values, keyed at random per
/// process, so that nobody can make a ticket collide with another's.
pub type TicketKey = u128;

/// A check in flight, awaited by every call carrying the same ticket.
pub type Pending<V> = Shared<BoxFuture<'static, V>>;

/// The maps' hasher: their keys are keyed hashes already, so a fast one
/// serves (nobody can aim keys at one shard without the keys' keys).
type Fast = foldhash::fast::RandomState;

/// A kept verdict, read in place.
pub type Kept<'a, V> = Ref<'a, TicketKey, (Instant, V)>;

/// Verdicts of type `V` by ticket.
#[derive(Debug)]
pub struct Verdicts<V> {
    hashers: [RandomState; 2],
    kept: DashMap<TicketKey, (Instant, V), Fast>,
    in_flight: DashMap<TicketKey, Pending<V>, Fast>,
    ttl: Duration,
    max_entries: usize,
}

impl<V: Clone + Send + Sync + 'static> Verdicts<V> {
    /// Verdicts kept `ttl`, at most `max_entries` of them.
    pub fn new(ttl: Duration, max_entries: usize) -> Verdicts<V> {
        Verdicts {
            hashers: [RandomState::new(), RandomState::new()],
            kept: DashMap::default(),
            in_flight: DashMap::default(),
            ttl,
            max_entries: max_entries.max(1),
        }
    }

    /// The key of `ticket`.
    pub fn key(&self, ticket: &str) -> TicketKey {
        let [a, b] = &self.hashers;
        (u128::from(a.hash_one(ticket)) << 64) | u128::from(b.hash_one(ticket))
    }

    /// The verdict kept for `key`, while it is fresh, read in place: a
    /// kept verdict is what every call but one a minute finds, and it is
    /// not copied.
    pub fn kept(&self, key: TicketKey) -> Option<Kept<'_, V>> {
        self.kept.get(&key).filter(|entry| Instant::now() < entry.0)
    }

    /// The check of `key` in flight, or `check` started now as that check.
    /// The check runs on a task of its own, so that it ends (and is kept,
    /// when `keep` says so) even if every caller waiting for it gave up.
    pub fn check(self: &Arc<Self>, key: TicketKey, check: BoxFuture<'static, V>, keep: fn(&V) -> bool) -> Pending<V> {
        use dashmap::mapref::entry::Entry;
        let pending = match self.in_flight.entry(key) {
            Entry::Occupied(running) => return running.get().clone(),
            Entry::Vacant(slot) => {
                let verdicts = Arc::clone(self);
                let pending = async move {
                    let verdict = check.await;
                    if keep(&verdict) {
                        verdicts.keep(key, verdict.clone());
                    }
                    // Removed once kept: a caller arriving in between finds
                    // one or the other.
                    verdicts.in_flight.remove(&key);
                    verdict
                }
                .boxed()
                .shared();
                slot.insert(pending.clone());
                pending
            }
        };
        // Started only once it is in flight, so that its removal comes after.
        tokio::spawn(pending.clone());
        pending
    }

    /// Keeps `verdict` for `key`, making room first when full: the expired
    /// go, then, if that was not enough, any one.
    fn keep(&self, key: TicketKey, verdict: V) {
        if self.kept.len() >= self.max_entries {
            let now = Instant::now();
            self.kept.retain(|_, (expires, _)| *expires > now);
            if self.kept.len() >= self.max_entries {
                let any = self.kept.iter().next().map(|entry| *entry.key());
                if let Some(any) = any {
                    self.kept.remove(&any);
                }
            }
        }
        self.kept.insert(key, (Instant::now() + self.ttl, verdict));
    }

    /// Verdicts kept now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.kept.len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn counted(calls: &Arc<AtomicUsize>, verdict: u32) -> BoxFuture<'static, u32> {
        let calls = calls.clone();
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
            verdict
        }
        .boxed()
    }

    #[tokio::test]
    async fn identical_checks_in_flight_are_made_once_and_kept() {
        let verdicts = Arc::new(Verdicts::new(Duration::from_secs(60), 16));
        let calls = Arc::new(AtomicUsize::new(0));
        let key = verdicts.key("3:serv:ticket");
        let waiting: Vec<_> = (0..20).map(|_| verdicts.check(key, counted(&calls, 7), |_| true)).collect();
        for pending in waiting {
            assert_eq!(pending.await, 7);
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(verdicts.kept(key).map(|kept| kept.1), Some(7));
        assert!(verdicts.in_flight.is_empty());
    }

    #[tokio::test]
    async fn a_verdict_not_to_keep_is_asked_again() {
        let verdicts = Arc::new(Verdicts::new(Duration::from_secs(60), 16));
        let calls = Arc::new(AtomicUsize::new(0));
        let key = verdicts.key("t");
        assert_eq!(verdicts.check(key, counted(&calls, 0), |v| *v != 0).await, 0);
        assert!(verdicts.kept(key).is_none());
        assert_eq!(verdicts.check(key, counted(&calls, 1), |v| *v != 0).await, 1);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn verdicts_expire_and_their_number_is_bounded() {
        let verdicts = Arc::new(Verdicts::new(Duration::from_secs(60), 4));
        let calls = Arc::new(AtomicUsize::new(0));
        for n in 0..10 {
            let key = verdicts.key(&format!("ticket {n}"));
            verdicts.check(key, counted(&calls, n), |_| true).await;
            assert!(verdicts.len() <= 4, "{} kept", verdicts.len());
        }
        let last = verdicts.key("ticket 9");
        assert_eq!(verdicts.kept(last).map(|kept| kept.1), Some(9));
        tokio::time::advance(Duration::from_secs(61)).await;
        assert!(verdicts.kept(last).is_none());
    }

    #[test]
    fn keys_differ_by_ticket_and_hold_no_ticket_text() {
        let verdicts = Verdicts::<u32>::new(Duration::from_secs(1), 1);
        assert_ne!(verdicts.key("a"), verdicts.key("b"));
        assert_eq!(verdicts.key("a"), verdicts.key("a"));
        let other = Verdicts::<u32>::new(Duration::from_secs(1), 1);
        assert_ne!(verdicts.key("a"), other.key("a"), "keyed at random per cache");
    }
}
