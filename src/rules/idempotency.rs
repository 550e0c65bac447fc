//! The idempotency cache: one answer per (scenario, handler, `RequestId`).
//!
//! The first call leads: it gets a [`Lease`] and runs the scenario. Repeats
//! that arrive while it runs wait for it (single flight); repeats after it get
//! its answer byte for byte. Only answers are cached: a lease dropped without
//! an answer (a panic, an abandoned call) removes its entry so that a retry
//! runs again. The lease belongs to the scenario's work, not to the request,
//! so a call that outlives its budget still completes the entry.
//!
//! Answers expire after a TTL. `/run` and `/continue` answers are bounded by
//! entries and bytes and the oldest are evicted past a bound. `/commit` and
//! `/apply` answers, whose replay is what keeps a side effect from running
//! twice, have bounds of their own that no other traffic can use up: each is
//! kept for the whole TTL, and while their reserve is full a new call is
//! refused ([`Lookup::Full`]) rather than an answer evicted. In-flight
//! entries are never evicted.

use std::{
    sync::{Arc, OnceLock, Weak, atomic::AtomicBool},
    time::Duration,
};

use bytes::Bytes;
use dashmap::{DashMap, mapref::entry::Entry as MapEntry};
// tokio's clock, so that tests can move time on instead of sleeping through a TTL.
use tokio::{sync::Notify, time::Instant};

use self::pool::{Completed, Pool, Stale, WhenFull};
use super::metrics::CacheCounters;
use crate::scenario::Handler;

mod key;
mod pool;

pub use key::{Key, RequestId};

/// Bounds of the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `/run` and `/continue` answers kept at most; past it the oldest go.
    pub max_entries: usize,
    /// Bytes of `/run` and `/continue` answers kept at most; past it the oldest go.
    pub max_bytes: usize,
    /// `/commit` and `/apply` answers kept at most; past it new calls are refused.
    pub commit_max_entries: usize,
    /// Bytes of `/commit` and `/apply` answers kept at most; past it new calls are refused.
    pub commit_max_bytes: usize,
    /// How long an answer is replayed.
    pub ttl: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_entries: 100_000,
            max_bytes: 16 << 20,
            commit_max_entries: 100_000,
            commit_max_bytes: 32 << 20,
            ttl: Duration::from_secs(300),
        }
    }
}

/// How a call proceeds.
#[derive(Debug)]
pub enum Lookup {
    /// The first answer, to replay.
    Hit(Bytes),
    /// The first call is still running: wait for it.
    Wait(Waiter),
    /// This call is the first: run the scenario and complete the lease.
    Lead(Lease),
    /// This call would be the first, but the `/commit` and `/apply` reserve
    /// is full of answers still to be replayed: refuse it. Never for `/run`
    /// or `/continue`, whose oldest answers make room instead.
    Full,
    /// This call would be the first, but the caller's `may_lead` said no
    /// (see [`IdempotencyCache::begin_if`]).
    Refused,
}

/// A cheap-clone handle to the cache.
#[derive(Debug, Clone)]
pub struct IdempotencyCache {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    // foldhash: fast, and seeded per process, so RequestIds cannot be chosen to collide.
    map: DashMap<Key, Arc<Slot>, foldhash::fast::RandomState>,
    /// `/run` and `/continue` answers.
    evicting: Pool,
    /// `/commit` and `/apply` answers.
    reserved: Pool,
    ttl: Duration,
    counters: CacheCounters,
}

/// One entry: in flight until its outcome is set, then an answer until it
/// expires. The map and the FIFO share it, so completing an entry touches
/// the map not at all.
#[derive(Debug, Default)]
struct Slot {
    /// `Some(answer)`, or `None` when the first call ended without one.
    outcome: OnceLock<Option<Bytes>>,
    /// Set just before the answer.
    expires: OnceLock<Instant>,
    ready: Notify,
    /// Whether the answer is counted in its pool's totals: whoever counts it
    /// out clears it, so that it is counted out once.
    counted: AtomicBool,
}

impl Slot {
    fn publish(&self, outcome: Option<Bytes>) {
        let _ = self.outcome.set(outcome);
        self.ready.notify_waiters();
    }
}

impl IdempotencyCache {
    /// An empty cache with these bounds.
    pub fn new(limits: Limits) -> IdempotencyCache {
        IdempotencyCache {
            shared: Arc::new(Shared {
                map: DashMap::with_hasher(foldhash::fast::RandomState::default()),
                evicting: Pool::new(limits.max_entries, limits.max_bytes, WhenFull::Evict),
                reserved: Pool::new(limits.commit_max_entries, limits.commit_max_bytes, WhenFull::Refuse),
                ttl: limits.ttl,
                counters: CacheCounters::default(),
            }),
        }
    }

    /// Finds the answer for `key`, or the call to wait for, or makes this
    /// call the first (unless the reserve of its handler is full).
    pub fn begin(&self, key: Key) -> Lookup {
        self.begin_if(key, || true)
    }

    /// As [`IdempotencyCache::begin`], but a call that would lead asks
    /// `may_lead` first (once, and only then: replays and waits never do),
    /// and gets [`Lookup::Refused`] with no entry left behind if it says no.
    /// It is asked while the entry is locked, so no repeat can start waiting
    /// for a call that is then refused.
    pub fn begin_if(&self, key: Key, may_lead: impl FnOnce() -> bool) -> Lookup {
        let shared = &self.shared;
        let pool = shared.pool(key.handler);
        // Expired answers popped to make room; removed from the map once its
        // entry is no longer locked.
        let mut stale = Stale::new();
        let admit = || {
            let mut claimed = pool.claim();
            if !claimed {
                // A full reserve may hold answers expired since the last purge.
                stale = pool.purge(Instant::now());
                claimed = pool.claim();
            }
            if !claimed {
                shared.counters.refused(key.handler).inc();
                return Some(Lookup::Full);
            }
            if !may_lead() {
                pool.release();
                return Some(Lookup::Refused);
            }
            shared.counters.misses.inc();
            None
        };
        let lease =
            |key: Key, slot: Arc<Slot>| Lookup::Lead(Lease { shared: shared.clone(), entry: Some((key, slot)) });
        let lookup = match shared.map.entry(key.clone()) {
            MapEntry::Occupied(mut occupied) => {
                let old = occupied.get();
                match old.outcome.get() {
                    None => {
                        shared.counters.waits.inc();
                        Lookup::Wait(Waiter { slot: old.clone() })
                    }
                    Some(Some(body)) if old.expires.get().is_some_and(|e| *e > Instant::now()) => {
                        shared.counters.hits.inc();
                        Lookup::Hit(body.clone())
                    }
                    done => {
                        // Expired, not yet purged: counted out now so that its room
                        // is free; its FIFO record no longer matches the new slot, so
                        // the purge will leave the new entry alone.
                        if let Some(Some(body)) = done {
                            pool.count_out(old, key.cost(body));
                        }
                        match admit() {
                            Some(refusal) => {
                                occupied.remove();
                                refusal
                            }
                            None => {
                                let slot = Arc::new(Slot::default());
                                occupied.insert(slot.clone());
                                lease(key, slot)
                            }
                        }
                    }
                }
            }
            MapEntry::Vacant(vacant) => match admit() {
                Some(refusal) => refusal,
                None => {
                    let slot = Arc::new(Slot::default());
                    vacant.insert(slot.clone());
                    lease(key, slot)
                }
            },
        };
        if !stale.is_empty() {
            shared.drop_stale(stale);
        }
        lookup
    }

    /// Drops expired answers. Called on every completion and by [`IdempotencyCache::spawn_purger`].
    pub fn purge_expired(&self) {
        let now = Instant::now();
        for pool in [&self.shared.evicting, &self.shared.reserved] {
            let stale = pool.purge(now);
            self.shared.drop_stale(stale);
        }
    }

    /// Purges expired answers every `period` while the cache lives, so an
    /// idle server gives their memory back too.
    pub fn spawn_purger(&self, period: Duration) {
        let weak: Weak<Shared> = Arc::downgrade(&self.shared);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                match weak.upgrade() {
                    Some(shared) => IdempotencyCache { shared }.purge_expired(),
                    None => return,
                }
            }
        });
    }

    /// Completed answers held.
    pub fn entries(&self) -> usize {
        self.shared.evicting.entries() + self.shared.reserved.entries()
    }

    /// Bytes held by completed answers.
    pub fn bytes(&self) -> usize {
        self.shared.evicting.bytes() + self.shared.reserved.bytes()
    }

    /// Completed `/commit` and `/apply` answers held.
    pub fn commit_entries(&self) -> usize {
        self.shared.reserved.entries()
    }

    /// Bytes held by completed `/commit` and `/apply` answers.
    pub fn commit_bytes(&self) -> usize {
        self.shared.reserved.bytes()
    }

    /// Calls running now whose repeats would wait.
    pub fn in_flight(&self) -> usize {
        self.shared.map.len().saturating_sub(self.entries())
    }

    /// Hit, miss, wait, eviction and refusal counters.
    pub fn counters(&self) -> &CacheCounters {
        &self.shared.counters
    }
}

impl Shared {
    fn pool(&self, handler: Handler) -> &Pool {
        match handler {
            Handler::Run | Handler::Continue => &self.evicting,
            Handler::Commit | Handler::Apply => &self.reserved,
        }
    }

    fn complete(&self, key: Key, slot: Arc<Slot>, body: Bytes) {
        let now = Instant::now();
        let expires = now + self.ttl;
        let cost = key.cost(&body);
        let _ = slot.expires.set(expires);
        let pool = self.pool(key.handler);
        // Counted in before it is published, so that a lead replacing it once
        // expired always finds it counted.
        let stale = pool.push(Completed { key, slot: slot.clone(), expires, cost }, now);
        slot.publish(Some(body));
        self.drop_stale(stale);
    }

    fn drop_stale(&self, stale: Stale) {
        for (record, expired) in stale {
            // The entry may have been replaced since (expired, then led again):
            // only the slot this record holds is removed.
            let removed = self.map.remove_if(&record.key, |_, slot| Arc::ptr_eq(slot, &record.slot));
            if removed.is_some() && !expired {
                self.counters.evicted(record.key.handler).inc();
            }
        }
    }
}

/// The right and duty to produce the first answer for a key.
///
/// Dropped without [`Lease::complete`], it removes its entry and wakes the
/// waiters with nothing, so a later retry runs the scenario again.
#[derive(Debug)]
pub struct Lease {
    shared: Arc<Shared>,
    /// `Some` until the lease is completed or abandoned.
    entry: Option<(Key, Arc<Slot>)>,
}

impl Lease {
    /// Stores the answer and hands it to every waiter.
    pub fn complete(mut self, body: Bytes) {
        if let Some((key, slot)) = self.entry.take() {
            self.shared.complete(key, slot, body);
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some((key, slot)) = self.entry.take() {
            self.shared.map.remove_if(&key, |_, entry| Arc::ptr_eq(entry, &slot));
            self.shared.pool(key.handler).release();
            slot.publish(None);
        }
    }
}

/// A repeat waiting for the first call's answer.
#[derive(Debug)]
pub struct Waiter {
    slot: Arc<Slot>,
}

impl Waiter {
    /// The first call's answer, or `None` if it ended without one.
    pub async fn wait(self) -> Option<Bytes> {
        loop {
            // Registered before the check, so a publish in between is not missed.
            let notified = self.slot.ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(outcome) = self.slot.outcome.get() {
                return outcome.clone();
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests;
