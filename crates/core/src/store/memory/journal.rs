//! The memory store's [`Journal`]: a list per entry, kept in the entry's
//! slot, so that the entry's expiry and eviction take its journal along and
//! its bytes count in the entry's cost once the value is stored.
//!
//! A std mutex guards each list, held to copy a few `Bytes` handles and
//! never across an await; a `Notify` wakes its readers.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex, MutexGuard},
};

use async_trait::async_trait;
use tokio::{sync::Notify, time::Instant};

use super::{MemoryStore, Slot};
use crate::store::{
    Key, Lease, StoreError,
    journal::{Appending, Entries, Journal, READ_BATCH},
};

/// What keeping one entry costs besides its bytes.
const ENTRY_COST: usize = 48;

/// One entry's journal.
#[derive(Debug, Default)]
pub(super) struct Log {
    list: Mutex<List>,
    grew: Notify,
}

#[derive(Debug, Default)]
struct List {
    /// The number of `entries[0]`, less one.
    base: u64,
    entries: VecDeque<bytes::Bytes>,
    bytes: usize,
    ended: bool,
    /// No more appends: the value was stored.
    sealed: bool,
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
        list.bytes
    }

    /// What the journal costs now.
    pub(super) fn bytes(&self) -> usize {
        self.lock().bytes
    }

    fn append(&self, appending: Appending<'_>) -> bool {
        let mut list = self.lock();
        if list.ended || list.sealed {
            return false;
        }
        for entry in appending.entries {
            list.bytes += entry.len() + ENTRY_COST;
            list.entries.push_back(entry.clone());
        }
        while list.entries.len() > appending.max_len {
            let Some(gone) = list.entries.pop_front() else { break };
            list.bytes -= gone.len() + ENTRY_COST;
            list.base += 1;
        }
        list.ended = appending.end;
        drop(list);
        self.grew.notify_waiters();
        true
    }

    /// What there is after `after`, if anything (or the end).
    fn read(&self, after: u64) -> Option<Entries> {
        let list = self.lock();
        let skip = after.saturating_sub(list.base);
        let from = usize::try_from(skip).unwrap_or(usize::MAX).min(list.entries.len());
        let entries: Vec<_> = list.entries.iter().skip(from).take(READ_BATCH).cloned().collect();
        let first = list.base + from as u64 + 1;
        let ended = list.ended && from + entries.len() == list.entries.len();
        (!entries.is_empty() || ended).then_some(Entries { first, entries, ended, abandoned: false })
    }
}

impl MemoryStore {
    /// The live slot of `key`: in flight, or holding a value not yet expired.
    fn live_slot(&self, key: &Key, now: Instant) -> Option<Arc<Slot>> {
        let slot = self.map.get(key)?.clone();
        let expired = slot.expires.get().is_some_and(|expires| *expires <= now);
        let lapsed = slot.outcome.get().is_none() && slot.lease_until() <= now;
        (!expired && !lapsed && !matches!(slot.outcome.get(), Some(None))).then_some(slot)
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
        let Some(slot) = self.live_slot(key, Instant::now()) else { return Ok(None) };
        let log = slot.journal();
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
                return Ok(Some(Entries { first: after + 1, ..Entries::default() }));
            }
            let _ = tokio::time::timeout_at(until, grew).await;
        }
    }
}
