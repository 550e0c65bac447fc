//! [`MemoryStore`]: the single-flight store in this process's memory, a
//! sharded map of slots shared with a completion-order FIFO per pool.
//!
//! Values expire after their pool's TTL. Values of `/run` and `/continue` are bounded
//! by entries and bytes and the oldest are evicted past a bound; values of
//! `/commit` and `/apply` ([`is_reserved`]) have bounds of
//! their own that no other traffic can use up: each is kept for the whole TTL,
//! and while their reserve is full a new lead gets [`Begin::Full`] rather
//! than a value being evicted. Entries in flight are never evicted.
//! Identical values are kept once (`memory/shelf.rs`) and their bytes count
//! once in their pool's bound. The map holds a hash and a pointer per
//! entry (`memory/table.rs`); the entry's key lives in its slot.
//!
//! A lease ends by its completion, its abandon, or its TTL, which each
//! append to its journal that does not end it renews: an entry whose
//! lease ran out is abandoned, and the next `begin` of its key leads in its
//! place. The old lease's waiters then get [`Waited::Abandoned`], as do
//! waiters still waiting when a lease runs out, whoever begins next; a
//! completion or abandon past the lease's TTL stores nothing and leaves any
//! new entry alone.

use std::{
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use bytes::Bytes;
use hashbrown::hash_table::Entry as MapEntry;
// tokio's clock, so that tests can move time on instead of sleeping through a TTL.
use tokio::{sync::Notify, time::Instant};

use self::{
    journal::Log,
    pool::{Charge, Completed, Pool, Stale, WhenFull},
    table::Table,
};
use super::{Begin, FlightStore, Key, Lease, StoreError, Token, Usage, Waited, Waiter, is_reserved};

mod journal;
mod pool;
mod shelf;
mod table;

/// Bounds of a memory store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `/run` and `/continue` values kept at most; past it the oldest go.
    pub max_entries: usize,
    /// Bytes of `/run` and `/continue` values kept at most; past it the oldest go.
    pub max_bytes: usize,
    /// `/commit` and `/apply` values kept at most; past it new leads are refused.
    pub commit_max_entries: usize,
    /// Bytes of `/commit` and `/apply` values kept at most; past it new leads are refused.
    pub commit_max_bytes: usize,
    /// How long a `/run` or `/continue` value is kept.
    pub ttl: Duration,
    /// How long a `/commit` or `/apply` value is kept.
    pub commit_ttl: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_entries: 100_000,
            max_bytes: 16 << 20,
            commit_max_entries: 100_000,
            commit_max_bytes: 32 << 20,
            ttl: Duration::from_secs(300),
            commit_ttl: Duration::from_secs(300),
        }
    }
}

/// The single-flight store in memory.
#[derive(Debug)]
pub struct MemoryStore {
    map: Table,
    /// `/run` and `/continue` values.
    evicting: Pool,
    /// `/commit` and `/apply` values.
    reserved: Pool,
    ttl: Duration,
    commit_ttl: Duration,
    /// Where evictions are counted (the callers count hits, waits and the rest).
    evictions: Evictions,
    /// Set when the reserve refused a lead: the next purge then looks for
    /// leases that ran out unended, whose room no `begin` of their key gave back.
    refused_lately: AtomicBool,
}

/// One entry: in flight until its outcome is set, then a value until it
/// expires. The map and the FIFO share it, so completing an entry touches
/// the map not at all.
#[derive(Debug)]
struct Slot {
    /// Kept here once: the map and the FIFO reach it through the slot.
    key: Key,
    /// The key's hash in the map.
    hash: u64,
    /// When the lease runs out if nobody ends or renews it before.
    lease_base: Instant,
    /// How far past `lease_base` its holder renewed it, in µs.
    renewed_us: AtomicU64,
    /// Set by whoever ends the lease first (its completion, its abandon, or
    /// whoever finds it run out), so that it ends once: one outcome, one
    /// claim given back.
    ended: AtomicBool,
    /// `Some(value)`, or `None` when the lease ended without one.
    outcome: OnceLock<Option<Bytes>>,
    /// Set just before the value.
    expires: OnceLock<Instant>,
    ready: Notify,
    /// Whether the value is counted in its pool's totals: whoever counts it
    /// out clears it, so that it is counted out once.
    counted: AtomicBool,
    /// What the value counts in its pool's bytes, set as it is counted in.
    charge: OnceLock<Charge>,
    /// The entry's journal, made by its first append or read: an entry
    /// nobody journals pays a pointer.
    journal: OnceLock<Box<Log>>,
}

impl Slot {
    fn new(key: Key, hash: u64, lease_until: Instant) -> Slot {
        Slot {
            key,
            hash,
            lease_base: lease_until,
            renewed_us: AtomicU64::new(0),
            ended: AtomicBool::new(false),
            outcome: OnceLock::new(),
            expires: OnceLock::new(),
            ready: Notify::new(),
            counted: AtomicBool::new(false),
            charge: OnceLock::new(),
            journal: OnceLock::new(),
        }
    }

    /// When the lease runs out if nobody ends or renews it before.
    fn lease_until(&self) -> Instant {
        self.lease_base + Duration::from_micros(self.renewed_us.load(Ordering::Acquire))
    }

    /// Makes the lease last until `until` at least.
    fn renew(&self, until: Instant) {
        let past = u64::try_from(until.saturating_duration_since(self.lease_base).as_micros()).unwrap_or(u64::MAX);
        self.renewed_us.fetch_max(past, Ordering::AcqRel);
    }

    fn journal(&self) -> &Log {
        self.journal.get_or_init(Box::default)
    }

    /// Takes the right to end the lease; `false` if someone else has.
    fn end(&self) -> bool {
        !self.ended.swap(true, Ordering::AcqRel)
    }

    fn publish(&self, outcome: Option<Bytes>) {
        let _ = self.outcome.set(outcome);
        self.ready.notify_waiters();
    }
}

/// What a store counts its evictions in: one counter per handler, in
/// [`Handler::ALL`](crate::scenario::Handler::ALL) order (expiry is not eviction).
pub type Evictions = [prometheus::IntCounter; 4];

/// Eviction counters of a store no registry renders.
pub fn unregistered_evictions() -> Evictions {
    std::array::from_fn(|_| prometheus::IntCounter::new("evictions", "Values evicted.").expect("a valid counter"))
}

impl MemoryStore {
    /// An empty store with these bounds, counting its evictions in `evictions`.
    pub fn new(limits: Limits, evictions: Evictions) -> MemoryStore {
        MemoryStore {
            map: Table::new(),
            evicting: Pool::new(limits.max_entries, limits.max_bytes, WhenFull::Evict),
            reserved: Pool::new(limits.commit_max_entries, limits.commit_max_bytes, WhenFull::Refuse),
            ttl: limits.ttl,
            commit_ttl: limits.commit_ttl,
            evictions,
            refused_lately: AtomicBool::new(false),
        }
    }

    fn pool(&self, key: &Key) -> &Pool {
        if is_reserved(key.handler) { &self.reserved } else { &self.evicting }
    }

    /// The entry behind a lease or waiter of this store.
    fn slot(token: &Token) -> Result<&Slot, StoreError> {
        token.downcast_ref::<Slot>().ok_or(StoreError::Foreign)
    }

    /// Stores the value of a lease that is still running and was not ended.
    fn store_value(&self, key: Key, slot: Arc<Slot>, value: Bytes, now: Instant) {
        let expires = now + if is_reserved(key.handler) { self.commit_ttl } else { self.ttl };
        let pool = self.pool(&key);
        let kept = pool.keep(value);
        let apart = if kept.shelved.is_some() { 0 } else { kept.value.len() };
        // The journal is sealed and goes with the value: one bound for both.
        let own = key.cost(&[]) + apart + slot.journal.get().map_or(0, |journal| journal.seal());
        let _ = slot.expires.set(expires);
        // Counted in before it is published, so that a lead replacing it once
        // expired always finds it counted.
        let charge = Charge { own, shelved: kept.shelved };
        let stale = pool.push(Completed { slot: slot.clone(), expires }, charge, kept.first_bytes, now);
        slot.publish(Some(kept.value));
        self.drop_stale(stale);
    }

    /// Ends a lease without a value, unless it was ended already.
    fn end_empty(&self, slot: &Arc<Slot>) {
        if slot.end() {
            self.map.remove(slot);
            self.pool(&slot.key).release();
            slot.publish(None);
        }
    }

    fn drop_stale(&self, stale: Stale) {
        for (record, expired) in stale {
            // The entry may have been replaced since (expired, then led again):
            // only the slot this record holds is removed.
            if self.map.remove(&record.slot) && !expired {
                self.evictions[record.slot.key.handler as usize].inc();
            }
        }
    }

    /// Abandons the entries whose lease ran out unended. A scan of the whole
    /// map, so only after the reserve refused a lead: there a forgotten
    /// lease would hold room until a `begin` of its own key.
    fn end_lapsed_leases(&self, now: Instant) {
        self.map.retain(|slot| {
            let lapsed = slot.outcome.get().is_none() && slot.lease_until() <= now && slot.end();
            if lapsed {
                self.pool(&slot.key).release();
                slot.publish(None);
            }
            !lapsed
        });
    }
}

impl MemoryStore {
    /// [`FlightStore::begin`], answered at once: the idempotency cache calls
    /// this directly, with no future to allocate.
    pub fn begin_now(&self, key: Key, lease_ttl: Duration, may_lead: &mut (dyn FnMut() -> bool + Send)) -> Begin {
        let now = Instant::now();
        let pool = self.pool(&key);
        // Expired values popped to make room; removed from the map once its
        // entry is no longer locked.
        let mut stale = Stale::new();
        let mut admit = || {
            let mut claimed = pool.claim();
            if !claimed {
                // A full reserve may hold values expired since the last purge.
                stale = pool.purge(now);
                claimed = pool.claim();
            }
            if !claimed {
                self.refused_lately.store(true, Ordering::Relaxed);
                return Some(Begin::Full);
            }
            // Asked while the entry is locked, so that no caller starts
            // waiting for a lead that is then refused.
            if !may_lead() {
                pool.release();
                return Some(Begin::Refused);
            }
            None
        };
        let hash = self.map.hash(&key);
        let lead = |key: Key| {
            let slot = Arc::new(Slot::new(key.clone(), hash, now + lease_ttl));
            (slot.clone(), Begin::Lead(Lease { key, token: slot }))
        };
        let mut shard = self.map.shard(hash);
        let begin = match shard.entry(hash, table::holds(hash, &key), |(held, _)| *held) {
            MapEntry::Occupied(mut occupied) => {
                let old = &occupied.get().1;
                match old.outcome.get() {
                    Some(Some(value)) if old.expires.get().is_some_and(|e| *e > now) => Begin::Hit(value.clone()),
                    // In flight: wait, unless its lease ran out and this call is
                    // the one to end it (one that ran out but was ended by its own
                    // completion is publishing its value now).
                    None if old.lease_until() > now || !old.end() => Begin::Wait(Waiter { key, token: old.clone() }),
                    done => {
                        match done {
                            // Its lease ran out (ended just above): its waiters learn it now.
                            None => {
                                pool.release();
                                old.publish(None);
                            }
                            // Expired, not yet purged: counted out now so that its room
                            // is free; its FIFO record no longer matches the new slot, so
                            // the purge will leave the new entry alone.
                            Some(Some(_)) => pool.count_out(old),
                            Some(None) => {}
                        }
                        match admit() {
                            Some(refusal) => {
                                occupied.remove();
                                refusal
                            }
                            None => {
                                let (slot, begin) = lead(key);
                                occupied.get_mut().1 = slot;
                                begin
                            }
                        }
                    }
                }
            }
            MapEntry::Vacant(vacant) => match admit() {
                Some(refusal) => refusal,
                None => {
                    let (slot, begin) = lead(key);
                    vacant.insert((hash, slot));
                    begin
                }
            },
        };
        drop(shard);
        if !stale.is_empty() {
            self.drop_stale(stale);
        }
        begin
    }

    /// [`FlightStore::complete`], done at once.
    pub fn complete_now(&self, lease: Lease, value: Bytes) -> Result<(), StoreError> {
        let Ok(slot) = Arc::downcast::<Slot>(lease.token) else { return Err(StoreError::Foreign) };
        let now = Instant::now();
        if now >= slot.lease_until() {
            self.end_empty(&slot);
        } else if slot.end() {
            self.store_value(lease.key, slot, value, now);
        }
        Ok(())
    }

    /// [`FlightStore::abandon`], done at once.
    pub fn abandon_now(&self, lease: Lease) -> Result<(), StoreError> {
        let Ok(slot) = Arc::downcast::<Slot>(lease.token) else { return Err(StoreError::Foreign) };
        self.end_empty(&slot);
        Ok(())
    }
}

#[async_trait]
impl FlightStore for MemoryStore {
    async fn begin(
        &self,
        key: Key,
        lease_ttl: Duration,
        // Memory answers at once.
        _deadline: Instant,
        may_lead: &mut (dyn FnMut() -> bool + Send),
    ) -> Result<Begin, StoreError> {
        Ok(self.begin_now(key, lease_ttl, may_lead))
    }

    async fn complete(&self, lease: Lease, value: Bytes) -> Result<(), StoreError> {
        self.complete_now(lease, value)
    }

    async fn abandon(&self, lease: Lease) -> Result<(), StoreError> {
        self.abandon_now(lease)
    }

    async fn wait(&self, waiter: &Waiter, deadline: Instant) -> Result<Waited, StoreError> {
        let slot = Self::slot(&waiter.token)?;
        let outcome = |outcome: &Option<Bytes>| match outcome {
            Some(value) => Waited::Done(value.clone()),
            None => Waited::Abandoned,
        };
        loop {
            // Registered before the check, so a publish in between is not missed.
            let notified = slot.ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(done) = slot.outcome.get() {
                return Ok(outcome(done));
            }
            // Read anew each time round: its holder may have renewed it.
            let (now, lease_until) = (Instant::now(), slot.lease_until());
            if now >= deadline && deadline <= lease_until {
                return Ok(Waited::TimedOut);
            }
            if now >= lease_until {
                return Ok(Waited::Abandoned);
            }
            let _ = tokio::time::timeout_at(deadline.min(lease_until), notified).await;
        }
    }

    async fn purge_expired(&self) -> Result<(), StoreError> {
        let now = Instant::now();
        for pool in [&self.evicting, &self.reserved] {
            let stale = pool.purge(now);
            self.drop_stale(stale);
        }
        if self.refused_lately.swap(false, Ordering::Relaxed) {
            self.end_lapsed_leases(now);
        }
        Ok(())
    }

    fn usage(&self) -> Usage {
        let (evicting, reserved) = (&self.evicting, &self.reserved);
        let entries = evicting.entries() + reserved.entries();
        Usage {
            entries,
            bytes: evicting.bytes() + reserved.bytes(),
            reserved_entries: reserved.entries(),
            reserved_bytes: reserved.bytes(),
            in_flight: self.map.len().saturating_sub(entries),
        }
    }
}

#[cfg(test)]
mod tests;
