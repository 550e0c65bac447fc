//! [`Journal`]: the append-only log of a work's progress beside its single
//! flight, read from any offset by followers on any replica.
//!
//! A journal belongs to one entry of a [`FlightStore`](super::FlightStore)
//! and is written only by the holder of its [`Lease`]: an append whose lease
//! no longer holds the key (it ran out, another caller took the key over,
//! the value was stored) appends nothing. Entries are numbered from 1 in
//! the order they were appended, across leases: a caller that takes a key
//! over goes on after the entries its predecessor left. An append says how
//! many entries its holder had appended before ([`Appending::from`]), so
//! that one sent again after a failure that was none appends nothing twice.
//! The last append may end the journal; nothing is appended after that (an
//! ending append sent again answers as it did). An append (an
//! empty one too) may also renew the lease: a holder that appends now and
//! then keeps its key however long its work takes, and one that died loses
//! it a lease after its last append, while its journal stays for its own
//! TTL, so that whoever takes the key over goes on after it.
//!
//! - In memory, the journal lives in the entry itself: it goes when the
//!   entry expires or is evicted, and its bytes count in the entry's cost.
//! - In Redis, it is a stream beside the entry's key in its hash-tagged
//!   slot, `<key>:journal`, entry `0-N` holding entry N: `XADD` with an exact
//!   `MAXLEN` in a script that first checks the claim, `PEXPIRE` by the TTL
//!   given, `XREAD BLOCK` (on a connection of its own, so that no other
//!   command waits behind it) bounded by the reader's deadline.

use std::{fmt, time::Duration};

use async_trait::async_trait;
use bytes::Bytes;
use tokio::time::Instant;

use super::{Key, Lease, StoreError};

/// What one [`Journal::append`] writes.
#[derive(Debug, Clone, Copy)]
pub struct Appending<'a> {
    /// The entries, in order.
    pub entries: &'a [Bytes],
    /// How many entries the lease's holder had appended before these, by
    /// its own count of the appends that answered `Ok(true)`. An append
    /// that failed (a timeout) may have been carried out all the same, and
    /// its holder sends its entries again with the next: the store appends
    /// only those it does not have yet, so that none is written twice. A
    /// count above what the store has means entries were lost: nothing is
    /// appended and the append answers `Ok(false)`.
    pub from: u64,
    /// Whether the journal ends after them.
    pub end: bool,
    /// The journal keeps its last this many entries (the first go past it).
    pub max_len: usize,
    /// How long the journal is kept from this append on (a shared store's;
    /// in memory, the entry's own TTL governs).
    pub ttl: Duration,
    /// How long the lease lasts from now on, when the append renews it.
    pub lease: Option<Duration>,
}

/// Entries read from a journal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Entries {
    /// The number of the first of `entries`: past the one read after when
    /// the length cap let entries go in between.
    pub first: u64,
    /// The entries, in order.
    pub entries: Vec<Bytes>,
    /// The journal has ended: nothing will follow these.
    pub ended: bool,
    /// Neither a lease nor a value holds the journal's key (its holder
    /// went away and its lease ran out): nothing will follow these until a
    /// caller takes the key over. (In memory, such a journal is gone.)
    pub abandoned: bool,
}

impl Entries {
    /// The number of the last entry read, or `after` if none was.
    pub fn last(&self, after: u64) -> u64 {
        // Saturating: a journal's numbers come from the store, whatever it holds.
        if self.entries.is_empty() { after } else { self.first.saturating_add(self.entries.len() as u64 - 1) }
    }
}

/// The journals of a store's entries. Every method is async, so that a
/// store over the network implements it as well as the in-memory one.
#[async_trait]
pub trait Journal: fmt::Debug + Send + Sync + 'static {
    /// Appends to the journal of `lease`'s key; `Ok(false)` when the lease
    /// no longer holds the key or the journal had ended, and nothing was
    /// appended.
    async fn append(&self, lease: &Lease, appending: Appending<'_>) -> Result<bool, StoreError>;

    /// The entries of `key`'s journal after number `after`: at once when
    /// there are some or the journal ended, else as soon as one comes, or
    /// none at `deadline`. `None` when there is no journal: never written
    /// and no lease out on the key, or expired.
    async fn read(&self, key: &Key, after: u64, deadline: Instant) -> Result<Option<Entries>, StoreError>;

    /// When the store last failed a command, dropped a connection or was
    /// found back, if ever: a journal it says it lacks soon after may be
    /// one it lost (a Redis restarted empty), which its writer writes anew
    /// at its next append. A store that never fails says `None`.
    fn troubled_since(&self) -> Option<Instant> {
        None
    }

    /// Asks the store, by `deadline`, whether it lost what it held, so that
    /// [`Journal::troubled_since`] also covers a loss that no command failed
    /// on (a Redis flushed with every connection open). A store that never
    /// loses anything has nothing to ask.
    async fn recheck(&self, _deadline: Instant) {}

    /// Resolves when the store next finds that it lost what it held (see
    /// [`Journal::recheck`]): a reader waiting for entries of a journal
    /// that may have been written anew since reads again at once. Never,
    /// for a store that never loses anything.
    async fn loss_found(&self) {
        std::future::pending().await
    }
}

/// Entries read in one go at most.
pub const READ_BATCH: usize = 512;
