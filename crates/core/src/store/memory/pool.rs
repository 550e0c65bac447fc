//! One bounded share of the memory store: its values in completion order and
//! what they cost.
//!
//! Values of `/run` and `/continue` share an evicting pool: past a bound the
//! oldest value goes. Values of `/commit` and `/apply` have a reserve of their
//! own that never evicts: a live value stays for its whole TTL, and a new
//! lead is refused while the reserve is full. With one TTL per pool,
//! completion order is also expiry order, so eviction and expiry both pop
//! from the FIFO's front.

use std::{
    collections::VecDeque,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicUsize, Ordering},
    },
};

use bytes::Bytes;
use smallvec::SmallVec;
use tokio::time::Instant;

use super::{
    Slot,
    shelf::{Kept, Shelf},
};

/// A completed entry, oldest first. It repeats what eviction needs (its
/// expiry) so that popping it reads no more behind `slot` than the charge
/// it counts out and what finds it in the map.
#[derive(Debug)]
pub(super) struct Completed {
    pub(super) slot: Arc<Slot>,
    pub(super) expires: Instant,
}

/// What a kept value counts in its pool's bytes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Charge {
    /// The entry's own: its key, bookkeeping and journal, and its value's
    /// bytes unless the value is shelved.
    pub(super) own: usize,
    /// The value's hash on the shelf, whose bytes count once for all holders.
    pub(super) shelved: Option<u64>,
}

/// Records popped in one go, with whether each had expired (rather than
/// been evicted); usually one per completion, so no allocation.
pub(super) type Stale = SmallVec<[(Completed, bool); 4]>;

/// What happens when a pool is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WhenFull {
    /// The oldest values are evicted.
    Evict,
    /// New entries are refused; values leave only when they expire.
    Refuse,
}

#[derive(Debug)]
pub(super) struct Pool {
    // A std mutex: held for a few pointer moves, never across an await.
    fifo: Mutex<VecDeque<Completed>>,
    /// Values of this pool kept once however many entries hold them.
    shelf: Shelf,
    completed: AtomicUsize,
    bytes: AtomicUsize,
    /// Entries led and not yet completed; counted only by a `Refuse` pool,
    /// whose bound covers them so that completing them never overfills it.
    leading: AtomicUsize,
    max_entries: usize,
    max_bytes: usize,
    when_full: WhenFull,
}

impl Pool {
    pub(super) fn new(max_entries: usize, max_bytes: usize, when_full: WhenFull) -> Pool {
        Pool {
            fifo: Mutex::new(VecDeque::new()),
            shelf: Shelf::default(),
            completed: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            leading: AtomicUsize::new(0),
            max_entries,
            max_bytes,
            when_full,
        }
    }

    pub(super) fn entries(&self) -> usize {
        self.completed.load(Ordering::Relaxed)
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Takes room for one more entry; `false` when a `Refuse` pool is full.
    /// Its byte bound is checked here, before the value's size is known,
    /// so it may be passed by the values of the entries led meanwhile.
    pub(super) fn claim(&self) -> bool {
        if self.when_full == WhenFull::Evict {
            return true;
        }
        self.leading
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |leading| {
                let room = self.entries() + leading < self.max_entries && self.bytes() < self.max_bytes;
                room.then_some(leading + 1)
            })
            .is_ok()
    }

    /// Gives back a claim whose entry ended without a value or completed.
    pub(super) fn release(&self) {
        if self.when_full == WhenFull::Refuse {
            self.leading.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Takes `value` for one more entry: the shelf's copy when it holds the
    /// same bytes.
    pub(super) fn keep(&self, value: Bytes) -> Kept {
        self.shelf.keep(value)
    }

    /// Counts a completed value in (`charge`, and `first_bytes` of a value
    /// the shelf took from it) and queues it; returns what must go now
    /// (expired values, and for an `Evict` pool the oldest ones past a bound).
    pub(super) fn push(&self, record: Completed, charge: Charge, first_bytes: usize, now: Instant) -> Stale {
        // Set before it is counted in: whoever counts it out reads it.
        let _ = record.slot.charge.set(charge);
        self.completed.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(charge.own + first_bytes, Ordering::Relaxed);
        // Counted in before the claim is given back, so a concurrent claim
        // never sees room that is not there.
        record.slot.counted.store(true, Ordering::Release);
        self.release();
        let mut fifo = self.lock();
        fifo.push_back(record);
        self.take_stale(&mut fifo, now)
    }

    /// Pops the expired records at the front.
    pub(super) fn purge(&self, now: Instant) -> Stale {
        let mut fifo = self.lock();
        self.take_stale(&mut fifo, now)
    }

    /// Counts one value out of the totals, once: the FIFO's pop and a new
    /// lead replacing an expired entry may both try, whichever comes first.
    /// A shelved value's bytes go with its last holder.
    pub(super) fn count_out(&self, slot: &Slot) {
        if slot.counted.swap(false, Ordering::AcqRel) {
            // Set by `push` before it counted the value in.
            let charge = slot.charge.get();
            let shelved = charge.and_then(|charge| charge.shelved).map_or(0, |hash| self.shelf.release(hash));
            self.completed.fetch_sub(1, Ordering::Relaxed);
            self.bytes.fetch_sub(charge.map_or(0, |charge| charge.own) + shelved, Ordering::Relaxed);
        }
    }

    /// Distinct values on the shelf.
    #[cfg(test)]
    pub(super) fn shelved(&self) -> usize {
        self.shelf.len()
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<Completed>> {
        self.fifo.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Pops the front records while they are expired or, in an `Evict`
    /// pool, the pool is over a bound, counting them out at once so that
    /// concurrent completions do not pop more than needed. The map work
    /// happens outside the FIFO's lock.
    fn take_stale(&self, fifo: &mut VecDeque<Completed>, now: Instant) -> Stale {
        let mut stale = Stale::new();
        while let Some(front) = fifo.front() {
            let expired = front.expires <= now;
            let over = self.when_full == WhenFull::Evict
                && (self.entries() > self.max_entries || self.bytes() > self.max_bytes);
            if !expired && !over {
                break;
            }
            let Some(front) = fifo.pop_front() else { break };
            self.count_out(&front.slot);
            stale.push((front, expired));
        }
        stale
    }
}
