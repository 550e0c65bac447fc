//! tvmtool's verdicts, kept a short while and keyed by a keyed hash of the
//! ticket (never the ticket): steady traffic with one ticket costs tvmtool a
//! check per TTL, the same refused ticket repeated one check per a much
//! shorter TTL, and identical checks in flight are made once.

use std::{
    collections::VecDeque,
    hash::{BuildHasher, RandomState},
    sync::{Arc, Mutex},
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

/// Where a verdict goes once made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Among the good ones, for the full TTL.
    Good,
    /// Among the refused ones, for their short TTL: in a shelf of their
    /// own, so that a flood of made-up tickets never pushes a good verdict
    /// out.
    Refused,
    /// Not kept: asked again next time.
    No,
}

/// Verdicts of type `V` by ticket.
#[derive(Debug)]
pub struct Verdicts<V> {
    hashers: [RandomState; 2],
    good: Shelf<V>,
    refused: Shelf<V>,
    in_flight: DashMap<TicketKey, Pending<V>, Fast>,
}

/// Verdicts of one kind, each until it expires, at most `max_entries`.
#[derive(Debug)]
struct Shelf<V> {
    kept: DashMap<TicketKey, (Instant, V), Fast>,
    /// Each verdict put, oldest first, with when it expires: with one TTL
    /// per shelf the oldest is also the first to expire, so room is made
    /// from the front, one verdict per verdict put, never by a scan. A key
    /// put again leaves its older record behind, which removes nothing.
    order: Mutex<VecDeque<(TicketKey, Instant)>>,
    ttl: Duration,
    max_entries: usize,
}

impl<V: Clone + Send + Sync + 'static> Verdicts<V> {
    /// Good verdicts kept `ttl`, refusals `refused_ttl`, at most
    /// `max_entries` of each.
    pub fn new(ttl: Duration, refused_ttl: Duration, max_entries: usize) -> Verdicts<V> {
        Verdicts {
            hashers: [RandomState::new(), RandomState::new()],
            good: Shelf::new(ttl, max_entries),
            refused: Shelf::new(refused_ttl, max_entries),
            in_flight: DashMap::default(),
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
        self.good.get(key).or_else(|| self.refused.get(key))
    }

    /// The check of `key` in flight, or `check` started now as that check.
    /// The check runs on a task of its own, so that it ends (and is kept
    /// where `keep` says) even if every caller waiting for it gave up.
    pub fn check(
        self: &Arc<Self>,
        key: TicketKey,
        check: BoxFuture<'static, V>,
        keep: impl FnOnce(&V) -> Keep + Send + 'static,
    ) -> Pending<V> {
        use dashmap::mapref::entry::Entry;
        let pending = match self.in_flight.entry(key) {
            Entry::Occupied(running) => return running.get().clone(),
            // A check that ended since the caller looked for a kept
            // verdict left one: a ticket repeated costs one check.
            Entry::Vacant(_) if let Some(kept) = self.kept(key) => {
                let verdict = kept.value().1.clone();
                return async move { verdict }.boxed().shared();
            }
            Entry::Vacant(slot) => {
                let verdicts = Arc::clone(self);
                let pending = async move {
                    let verdict = check.await;
                    match keep(&verdict) {
                        Keep::Good => verdicts.good.put(key, verdict.clone()),
                        Keep::Refused => verdicts.refused.put(key, verdict.clone()),
                        Keep::No => {}
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

    /// Verdicts kept now, good and refused.
    #[cfg(test)]
    pub fn len(&self) -> (usize, usize) {
        (self.good.kept.len(), self.refused.kept.len())
    }
}

impl<V> Shelf<V> {
    fn new(ttl: Duration, max_entries: usize) -> Shelf<V> {
        Shelf { kept: DashMap::default(), order: Mutex::default(), ttl, max_entries: max_entries.max(1) }
    }

    fn get(&self, key: TicketKey) -> Option<Kept<'_, V>> {
        self.kept.get(&key).filter(|entry| Instant::now() < entry.0)
    }

    /// Keeps `verdict` for `key`, making room first: the expired go, and
    /// when the shelf is full, the oldest. Every verdict kept has a record
    /// in `order`, so bounding the records bounds the verdicts.
    fn put(&self, key: TicketKey, verdict: V) {
        let now = Instant::now();
        let expires = now + self.ttl;
        // Held while the map changes too, so that the newest record of a
        // key is the one its kept verdict carries.
        let mut order = self.order.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        while order.front().is_some_and(|(_, until)| *until <= now) || order.len() >= self.max_entries {
            let Some((old, old_until)) = order.pop_front() else { break };
            self.kept.remove_if(&old, |_, (until, _)| *until == old_until);
        }
        order.push_back((key, expires));
        self.kept.insert(key, (expires, verdict));
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

    const MINUTE: Duration = Duration::from_secs(60);
    const SECONDS: Duration = Duration::from_secs(5);

    fn good(_: &u32) -> Keep {
        Keep::Good
    }

    #[tokio::test]
    async fn identical_checks_in_flight_are_made_once_and_kept() {
        let verdicts = Arc::new(Verdicts::new(MINUTE, SECONDS, 16));
        let calls = Arc::new(AtomicUsize::new(0));
        let key = verdicts.key("3:serv:ticket");
        let waiting: Vec<_> = (0..20).map(|_| verdicts.check(key, counted(&calls, 7), good)).collect();
        for pending in waiting {
            assert_eq!(pending.await, 7);
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(verdicts.kept(key).map(|kept| kept.1), Some(7));
        assert!(verdicts.in_flight.is_empty());
    }

    /// A caller that found no verdict kept, then asks for a check after
    /// the one in flight ended, gets the verdict it left: no second check.
    #[tokio::test]
    async fn a_check_asked_for_after_one_ended_gets_its_verdict() {
        let verdicts = Arc::new(Verdicts::new(MINUTE, SECONDS, 16));
        let calls = Arc::new(AtomicUsize::new(0));
        let key = verdicts.key("3:serv:forged");
        let refused = |_: &u32| Keep::Refused;
        assert_eq!(verdicts.check(key, counted(&calls, 3), refused).await, 3);
        assert_eq!(verdicts.check(key, counted(&calls, 4), refused).await, 3, "the kept verdict");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert!(verdicts.in_flight.is_empty());
    }

    #[tokio::test]
    async fn a_verdict_not_to_keep_is_asked_again() {
        let verdicts = Arc::new(Verdicts::new(MINUTE, SECONDS, 16));
        let calls = Arc::new(AtomicUsize::new(0));
        let key = verdicts.key("t");
        let unless_zero = |v: &u32| if *v == 0 { Keep::No } else { Keep::Good };
        assert_eq!(verdicts.check(key, counted(&calls, 0), unless_zero).await, 0);
        assert!(verdicts.kept(key).is_none());
        assert_eq!(verdicts.check(key, counted(&calls, 1), unless_zero).await, 1);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn verdicts_expire_and_their_number_is_bounded() {
        let verdicts = Arc::new(Verdicts::new(MINUTE, SECONDS, 4));
        let calls = Arc::new(AtomicUsize::new(0));
        for n in 0..10 {
            let key = verdicts.key(&format!("ticket {n}"));
            verdicts.check(key, counted(&calls, n), good).await;
            assert!(verdicts.len().0 <= 4, "{:?} kept", verdicts.len());
        }
        let last = verdicts.key("ticket 9");
        assert_eq!(verdicts.kept(last).map(|kept| kept.1), Some(9));
        tokio::time::advance(Duration::from_secs(61)).await;
        assert!(verdicts.kept(last).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn refusals_are_kept_briefly_on_a_shelf_of_their_own_that_never_pushes_a_good_verdict_out() {
        let verdicts = Arc::new(Verdicts::new(MINUTE, SECONDS, 4));
        let calls = Arc::new(AtomicUsize::new(0));
        // Odd verdicts are refusals.
        let by_parity = |v: &u32| if v % 2 == 1 { Keep::Refused } else { Keep::Good };
        let megamind = verdicts.key("megamind");
        verdicts.check(megamind, counted(&calls, 2), by_parity).await;
        for n in 0..100 {
            let key = verdicts.key(&format!("made up {n}"));
            verdicts.check(key, counted(&calls, 1), by_parity).await;
        }
        assert_eq!(verdicts.len(), (1, 4), "the refusals are bounded apart");
        assert_eq!(verdicts.kept(megamind).map(|kept| kept.1), Some(2), "the good verdict stays");
        let repeated = verdicts.key("made up 99");
        assert_eq!(verdicts.kept(repeated).map(|kept| kept.1), Some(1), "a refusal repeated is not asked again");
        tokio::time::advance(SECONDS).await;
        assert!(verdicts.kept(repeated).is_none(), "a refusal is kept only briefly");
        assert!(verdicts.kept(megamind).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_shelf_makes_room_by_its_oldest_verdict_and_a_verdict_put_again_is_as_new() {
        let shelf = Shelf::new(MINUTE, 3);
        for (key, verdict) in [(1, 10), (2, 20), (1, 11), (3, 30)] {
            shelf.put(key, verdict);
            tokio::time::advance(Duration::from_millis(1)).await;
        }
        let kept = |key| shelf.get(key).map(|kept| kept.1);
        assert_eq!(
            [kept(1), kept(2), kept(3)],
            [Some(11), Some(20), Some(30)],
            "the first record of 1 removed nothing"
        );
        shelf.put(4, 40);
        assert_eq!([kept(1), kept(2), kept(3), kept(4)], [Some(11), None, Some(30), Some(40)], "2 was the oldest");
        shelf.put(5, 50);
        assert_eq!([kept(1), kept(5)], [None, Some(50)], "then 1, as put again");
        assert_eq!(shelf.kept.len(), 3);
        assert!(shelf.order.lock().unwrap().len() <= 3, "the records are bounded as the verdicts are");
    }

    #[tokio::test(start_paused = true)]
    async fn expired_verdicts_leave_the_shelf_as_new_ones_come() {
        let shelf = Shelf::new(SECONDS, 100);
        for key in 0..50 {
            shelf.put(key, key as u32);
        }
        tokio::time::advance(SECONDS).await;
        shelf.put(1000, 0);
        assert_eq!(shelf.kept.len(), 1, "the expired went with the next put, not only when full");
        assert_eq!(shelf.order.lock().unwrap().len(), 1);
    }

    #[test]
    fn keys_differ_by_ticket_and_hold_no_ticket_text() {
        let verdicts = Verdicts::<u32>::new(SECONDS, SECONDS, 1);
        assert_ne!(verdicts.key("a"), verdicts.key("b"));
        assert_eq!(verdicts.key("a"), verdicts.key("a"));
        let other = Verdicts::<u32>::new(SECONDS, SECONDS, 1);
        assert_ne!(verdicts.key("a"), other.key("a"), "keyed at random per cache");
    }
}
