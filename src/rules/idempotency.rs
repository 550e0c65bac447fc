//! The idempotency cache: one answer per (scenario, handler, `RequestId`).
//!
//! The first call leads: it gets a [`Lease`] and runs the scenario. Repeats
//! that arrive while it runs wait for it (single flight); repeats after it get
//! its answer byte for byte. Only answers are cached: a lease dropped without
//! an answer (a panic, an abandoned call) removes its entry so that a retry
//! runs again. The lease belongs to the scenario's work, not to the request,
//! so a call that outlives its budget still completes the entry.
//!
//! Bounded by entries and bytes; entries expire after a TTL. Completed entries
//! sit in a FIFO in completion order, which with one TTL is also expiry order,
//! so both eviction and expiry pop from its front. In-flight entries are
//! never in the FIFO and so never evicted.

use std::{
    collections::VecDeque,
    sync::{
        Arc, Mutex, OnceLock, Weak,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use dashmap::{DashMap, mapref::entry::Entry as MapEntry};
use smallvec::SmallVec;
// tokio's clock, so that tests can move time on instead of sleeping through a TTL.
use tokio::{sync::Notify, time::Instant};

use super::metrics::CacheCounters;
use crate::scenario::Handler;

/// What identifies one answer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    /// The scenario's [`Registered::id`](crate::scenario::registry::Registered::id).
    pub scenario: u32,
    /// The handler called.
    pub handler: Handler,
    /// `BaseRequest.RequestId`.
    pub request_id: RequestId,
}

impl Key {
    /// A key for one call.
    pub fn new(scenario: u32, handler: Handler, request_id: &str) -> Key {
        Key { scenario, handler, request_id: RequestId::new(request_id) }
    }

    fn cost(&self, body: &Bytes) -> usize {
        // The body plus the key and the bookkeeping around them.
        body.len() + self.request_id.as_str().len() + 160
    }
}

/// RequestIds up to this many bytes are kept inside the key (a UUID has 36).
const INLINE_ID: usize = 46;

/// A RequestId, inline when short: a key then costs no allocation, and
/// hashing or comparing an old entry's key on eviction reads no other memory.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RequestId(Repr);

#[derive(Clone, PartialEq, Eq, Hash)]
enum Repr {
    /// Up to [`INLINE_ID`] bytes, zero-padded.
    Inline { len: u8, bytes: [u8; INLINE_ID] },
    /// Longer ones.
    Heap(Box<str>),
}

impl RequestId {
    /// `id` as a key part.
    pub fn new(id: &str) -> RequestId {
        if id.len() > INLINE_ID {
            return RequestId(Repr::Heap(id.into()));
        }
        let mut bytes = [0; INLINE_ID];
        bytes[..id.len()].copy_from_slice(id.as_bytes());
        RequestId(Repr::Inline { len: id.len() as u8, bytes })
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Only `new` fills the bytes: a whole `str`, so always UTF-8.
            Repr::Inline { len, bytes } => std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default(),
            Repr::Heap(id) => id,
        }
    }
}

impl std::fmt::Debug for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_str().fmt(f)
    }
}

/// Bounds of the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Completed answers kept at most.
    pub max_entries: usize,
    /// Bytes of completed answers kept at most.
    pub max_bytes: usize,
    /// How long an answer is replayed.
    pub ttl: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_entries: 100_000, max_bytes: 16 << 20, ttl: Duration::from_secs(300) }
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
    // A std mutex: held for a few pointer moves, never across an await.
    fifo: Mutex<VecDeque<Completed>>,
    completed: AtomicUsize,
    bytes: AtomicUsize,
    limits: Limits,
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
}

impl Slot {
    fn publish(&self, outcome: Option<Bytes>) {
        let _ = self.outcome.set(outcome);
        self.ready.notify_waiters();
    }
}

/// A completed entry, oldest first. It repeats what eviction needs (its
/// cost, its expiry) so that popping it reads nothing behind `slot`.
#[derive(Debug)]
struct Completed {
    key: Key,
    slot: Arc<Slot>,
    expires: Instant,
    cost: usize,
}

/// Records popped in one go; usually one per completion, so no allocation.
type Stale = SmallVec<[(Completed, bool); 4]>;

impl IdempotencyCache {
    /// An empty cache with these bounds.
    pub fn new(limits: Limits) -> IdempotencyCache {
        IdempotencyCache {
            shared: Arc::new(Shared {
                map: DashMap::with_hasher(foldhash::fast::RandomState::default()),
                fifo: Mutex::new(VecDeque::new()),
                completed: AtomicUsize::new(0),
                bytes: AtomicUsize::new(0),
                limits,
                counters: CacheCounters::default(),
            }),
        }
    }

    /// Finds the answer for `key`, or the call to wait for, or makes this call the first.
    pub fn begin(&self, key: Key) -> Lookup {
        let shared = &self.shared;
        let lead = |key: Key, slot: Arc<Slot>| {
            shared.counters.misses.inc();
            Lookup::Lead(Lease { shared: shared.clone(), entry: Some((key, slot)) })
        };
        match shared.map.entry(key.clone()) {
            MapEntry::Occupied(mut occupied) => match occupied.get().outcome.get() {
                None => {
                    shared.counters.waits.inc();
                    Lookup::Wait(Waiter { slot: occupied.get().clone() })
                }
                Some(Some(body)) if occupied.get().expires.get().is_some_and(|e| *e > Instant::now()) => {
                    shared.counters.hits.inc();
                    Lookup::Hit(body.clone())
                }
                done => {
                    // Expired (not yet purged): its FIFO record no longer matches the
                    // new slot, so the purge will leave the new entry alone.
                    if let Some(Some(body)) = done {
                        shared.forget(key.cost(body));
                    }
                    let slot = Arc::new(Slot::default());
                    occupied.insert(slot.clone());
                    lead(key, slot)
                }
            },
            MapEntry::Vacant(vacant) => {
                let slot = Arc::new(Slot::default());
                vacant.insert(slot.clone());
                lead(key, slot)
            }
        }
    }

    /// Drops expired answers. Called on every completion and by [`IdempotencyCache::spawn_purger`].
    pub fn purge_expired(&self) {
        let dropped = {
            let mut fifo = self.shared.fifo.lock().unwrap_or_else(|p| p.into_inner());
            self.shared.take_stale(&mut fifo, Instant::now())
        };
        self.shared.drop_stale(dropped);
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
        self.shared.completed.load(Ordering::Relaxed)
    }

    /// Bytes held by completed answers.
    pub fn bytes(&self) -> usize {
        self.shared.bytes.load(Ordering::Relaxed)
    }

    /// Calls running now whose repeats would wait.
    pub fn in_flight(&self) -> usize {
        self.shared.map.len().saturating_sub(self.entries())
    }

    /// Hit, miss, wait and eviction counters.
    pub fn counters(&self) -> &CacheCounters {
        &self.shared.counters
    }
}

impl Shared {
    fn count(&self, cost: usize) {
        self.completed.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(cost, Ordering::Relaxed);
    }

    fn forget(&self, cost: usize) {
        self.completed.fetch_sub(1, Ordering::Relaxed);
        self.bytes.fetch_sub(cost, Ordering::Relaxed);
    }

    fn complete(&self, key: Key, slot: Arc<Slot>, body: Bytes) {
        let now = Instant::now();
        let expires = now + self.limits.ttl;
        let cost = key.cost(&body);
        self.count(cost);
        let _ = slot.expires.set(expires);
        slot.publish(Some(body));
        let stale = {
            let mut fifo = self.fifo.lock().unwrap_or_else(|p| p.into_inner());
            fifo.push_back(Completed { key, slot, expires, cost });
            self.take_stale(&mut fifo, now)
        };
        self.drop_stale(stale);
    }

    /// Pops the FIFO's front records while they are expired or the cache is
    /// over a bound, counting them out at once so that concurrent completions
    /// do not pop more than needed. The map work happens in `drop_stale`,
    /// outside the FIFO's lock.
    fn take_stale(&self, fifo: &mut VecDeque<Completed>, now: Instant) -> Stale {
        let mut stale = Stale::new();
        while let Some(front) = fifo.front() {
            let expired = front.expires <= now;
            let over = self.completed.load(Ordering::Relaxed) > self.limits.max_entries
                || self.bytes.load(Ordering::Relaxed) > self.limits.max_bytes;
            if !expired && !over {
                break;
            }
            let Some(front) = fifo.pop_front() else { break };
            // Counted out now; `drop_stale` counts back in what turns out
            // to have been replaced already (and so counted out before).
            self.forget(front.cost);
            stale.push((front, expired));
        }
        stale
    }

    fn drop_stale(&self, stale: Stale) {
        for (record, expired) in stale {
            // The entry may have been replaced since (expired, then led again):
            // only the slot this record holds is removed.
            match self.map.remove_if(&record.key, |_, slot| Arc::ptr_eq(slot, &record.slot)) {
                Some(_) if !expired => self.counters.evictions.inc(),
                Some(_) => {}
                // Already replaced: `begin` counted it out when it replaced it.
                None => self.count(record.cost),
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
