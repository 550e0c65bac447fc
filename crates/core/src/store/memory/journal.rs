//! The memory store's [`Journal`]: a list per entry, kept in the entry's
//! slot, so that the entry's expiry and eviction take its journal along and
//! its bytes count in the entry's cost once the value is stored.
//!
//! A std mutex guards each list, held to copy a few entries out and never
//! across an await; a `Notify` wakes its readers.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex, MutexGuard},
};

use async_trait::async_trait;
use bytes::Bytes;
use tokio::{sync::Notify, time::Instant};

use super::{MemoryStore, Slot};
use crate::store::{
    Key, Lease, StoreError,
    journal::{Appending, Entries, Journal, READ_BATCH},
};

/// What keeping one entry costs besides its bytes: where it ends.
const ENTRY_COST: usize = std::mem::size_of::<usize>();

/// One entry's journal.
#[derive(Debug, Default)]
pub(super) struct Log {
    list: Mutex<List>,
    grew: Notify,
}

/// The entries back to back in one buffer, each found by where it ends: a
/// model call's journal is hundreds of entries of a few bytes each (a
/// token), which a handle and an allocation apiece would cost several times
/// over.
#[derive(Debug, Default)]
struct List {
    /// The number of the first entry kept, less one.
    base: u64,
    /// The entries' bytes, from `front` on (those before it went past the
    /// length cap and are dropped when the buffer next grows).
    data: Vec<u8>,
    front: usize,
    /// Where each entry kept ends in `data`.
    ends: VecDeque<usize>,
    ended: bool,
    /// No more appends: the value was stored.
    sealed: bool,
    /// Until when a copy of this journal in the shared store is kept, once
    /// it was copied there: no reader finds it here after it is gone there.
    copy_until: Option<Instant>,
}

impl List {
    /// What the journal costs now.
    fn bytes(&self) -> usize {
        self.data.len() - self.front + self.ends.len() * ENTRY_COST
    }

    /// Where entry `index` (from 0, among those kept) begins.
    fn start(&self, index: usize) -> usize {
        index.checked_sub(1).map_or(self.front, |before| self.ends[before])
    }

    fn push(&mut self, entry: &[u8]) {
        if self.data.len() + entry.len() > self.data.capacity() && self.front > 0 {
            // Growing anyway: what went past the cap goes first.
            self.compact();
        }
        self.data.extend_from_slice(entry);
        self.ends.push_back(self.data.len());
    }

    /// Drops the bytes of the entries that went past the cap.
    fn compact(&mut self) {
        self.data.drain(..self.front);
        let front = std::mem::take(&mut self.front);
        self.ends.iter_mut().for_each(|end| *end -= front);
    }

    /// Lets the oldest entry go.
    fn pop(&mut self) {
        if let Some(end) = self.ends.pop_front() {
            self.front = end;
            self.base += 1;
        }
    }

    /// Gives back the room a journal that takes no more entries will not use.
    fn shrink(&mut self) {
        self.compact();
        self.data.shrink_to_fit();
        self.ends.shrink_to_fit();
    }
}

impl Log {
    fn lock(&self) -> MutexGuard<'_, List> {
        // Every change is whole before the lock is let go.
        self.list.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Refuses further appends; what the journal costs from now on.
    pub(super) fn seal(&self) -> usize {
        let mut list = self.lock();
        list.sealed = true;
        list.shrink();
        list.bytes()
    }

    /// What the journal costs now.
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.lock().bytes()
    }

    /// Whether the journal's copy in the shared store is gone by `now`.
    fn outlived_copy(&self, now: Instant) -> bool {
        self.lock().copy_until.is_some_and(|until| until <= now)
    }

    fn append(&self, appending: Appending<'_>) -> bool {
        let mut list = self.lock();
        // One slot, one lease: every entry it holds is its holder's.
        let held = list.base + list.ends.len() as u64;
        let Some(had) = held.checked_sub(appending.from) else { return false };
        let fresh = appending.entries.get(usize::try_from(had).unwrap_or(usize::MAX)..).unwrap_or_default();
        if list.ended || list.sealed {
            // The ending append, sent again, answers as it did.
            return list.ended && !list.sealed && appending.end && fresh.is_empty();
        }
        for entry in fresh {
            list.push(entry);
        }
        while list.ends.len() > appending.max_len {
            list.pop();
        }
        list.ended = appending.end;
        if list.ended {
            list.shrink();
        }
        drop(list);
        self.grew.notify_waiters();
        true
    }

    /// What there is after `after`, if anything (or the end): copied out in
    /// one piece, which the entries read are slices of.
    fn read(&self, after: u64) -> Option<Entries> {
        let list = self.lock();
        let skip = after.saturating_sub(list.base);
        let from = usize::try_from(skip).unwrap_or(usize::MAX).min(list.ends.len());
        let to = list.ends.len().min(from.saturating_add(READ_BATCH));
        let first = list.base + from as u64 + 1;
        let ended = list.ended && to == list.ends.len();
        if from == to {
            return ended.then_some(Entries { first, entries: Vec::new(), ended, abandoned: false });
        }
        let start = list.start(from);
        let piece = Bytes::copy_from_slice(&list.data[start..list.ends[to - 1]]);
        let entries =
            (from..to).map(|index| piece.slice(list.start(index) - start..list.ends[index] - start)).collect();
        Some(Entries { first, entries, ended, abandoned: false })
    }
}

impl MemoryStore {
    /// The live slot of `key`: in flight, or holding a value not yet expired.
    fn live_slot(&self, key: &Key, now: Instant) -> Option<Arc<Slot>> {
        let slot = self.map.get(key)?;
        let expired = slot.expires.get().is_some_and(|expires| *expires <= now);
        let lapsed = slot.outcome.get().is_none() && slot.lease_until() <= now;
        (!expired && !lapsed && !matches!(slot.outcome.get(), Some(None))).then_some(slot)
    }

    /// Records that `key`'s journal here, if it has one, was copied to the
    /// shared store, which keeps the copy until `until` at least: the
    /// replicas that read it there are told it is gone once it is, and a
    /// reader here must not be served on from this one's memory.
    pub(crate) fn copied(&self, key: &Key, until: Instant) {
        let Some(slot) = self.live_slot(key, Instant::now()) else { return };
        let Some(log) = slot.journal.get() else { return };
        let mut list = log.lock();
        list.copy_until = list.copy_until.max(Some(until));
    }
}

#[async_trait]
impl Journal for MemoryStore {
    async fn append(&self, lease: &Lease, appending: Appending<'_>) -> Result<bool, StoreError> {
        let slot = Self::slot(&lease.token)?;
        let now = Instant::now();
        if now >= slot.lease_until() || slot.outcome.get().is_some() {
            return Ok(false);
        }
        let appended = slot.journal().append(appending);
        if let (true, Some(lease)) = (appended, appending.lease) {
            slot.renew(now + lease);
        }
        Ok(appended)
    }

    async fn read(&self, key: &Key, after: u64, deadline: Instant) -> Result<Option<Entries>, StoreError> {
        let now = Instant::now();
        let Some(slot) = self.live_slot(key, now) else { return Ok(None) };
        let log = slot.journal();
        if log.outlived_copy(now) {
            return Ok(None);
        }
        loop {
            // Registered before the check, so that an append in between is not missed.
            let grew = log.grew.notified();
            tokio::pin!(grew);
            grew.as_mut().enable();
            if let Some(entries) = log.read(after) {
                return Ok(Some(entries));
            }
            // A lease that runs out appends no more: no point waiting past it
            // (read anew each time round: its holder may have renewed it).
            let until = if slot.outcome.get().is_none() { deadline.min(slot.lease_until()) } else { deadline };
            if Instant::now() >= until {
                return Ok(Some(Entries { first: after.saturating_add(1), ..Entries::default() }));
            }
            let _ = tokio::time::timeout_at(until, grew).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn appending(entries: &[Bytes], from: u64, max_len: usize, end: bool) -> Appending<'_> {
        Appending { entries, from, end, max_len, ttl: Duration::from_secs(1), lease: None }
    }

    /// Every entry kept after `after`, in as many reads as it takes.
    fn read_all(log: &Log, mut after: u64) -> Vec<Bytes> {
        let mut all = Vec::new();
        while let Some(read) = log.read(after) {
            assert!(all.is_empty() || read.first == after + 1, "no gaps between reads");
            after = read.last(after);
            all.extend(read.entries);
            if read.ended {
                break;
            }
        }
        all
    }

    #[test]
    fn entries_kept_back_to_back_read_back_as_appended_past_the_cap_and_batches() {
        let log = Log::default();
        let entries: Vec<Bytes> = (0..2000).map(|n| Bytes::from(format!("T{}", "x".repeat(n % 13)))).collect();
        for (n, chunk) in entries.chunks(37).enumerate() {
            assert!(log.append(appending(chunk, 37 * n as u64, 1500, false)));
        }
        assert_eq!(read_all(&log, 0), entries[500..], "the first 500 went past the cap; the rest in order");
        assert_eq!(read_all(&log, 1700), entries[1700..], "from any offset");
        let kept: usize = entries[500..].iter().map(|entry| entry.len() + ENTRY_COST).sum();
        assert_eq!(log.bytes(), kept, "what went past the cap no longer counts");
        assert!(log.append(appending(&[Bytes::from_static(b"E")], 2000, 1500, true)));
        assert!(!log.append(appending(&[Bytes::from_static(b"late")], 2001, 1500, false)), "ended");
        let read = read_all(&log, 2000);
        assert_eq!(read, [Bytes::from_static(b"E")]);
        assert_eq!(log.seal(), kept - entries[500].len() - ENTRY_COST + 1 + ENTRY_COST, "the cap still holds");
        let list = log.lock();
        assert_eq!(list.data.capacity(), list.data.len(), "an ended journal gives back its spare room");
    }
}
