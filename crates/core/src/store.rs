//! The single-flight store: one value per key, produced once however many
//! callers ask for it at the same time, kept for a while after.
//!
//! The first caller for a key *leads*: it gets a [`Lease`] and produces the
//! value. Callers that arrive while it works *wait* for it, each by its own
//! deadline; callers after it get the value itself. A lease ends with
//! [`FlightStore::complete`] or [`FlightStore::abandon`]; one whose owner
//! vanished (a crash, a dropped task) ends by its own TTL, after which the
//! next caller leads again. Values are bytes, so that a store shared by
//! replicas (Redis) holds exactly what the in-memory one does.
//!
//! The idempotency cache uses it (answers by scenario, handler and
//! `RequestId`), and so may a scenario for single flights of its own (one
//! model call per call id, say). Each holds a store of its own with its own
//! bounds.
//!
//! - [`MemoryStore`]: this process's memory, the default.
//! - [`RedisStore`]: Redis, shared by replicas, so that a repeat on any
//!   replica replays and a side effect runs once.
//! - [`SharedStore`]: the Redis store with the memory one behind it for
//!   when Redis is out of reach; what `[store] url` selects.
//!
//! A work whose progress others follow (a model call streamed to readers on
//! any replica) keeps, beside its single flight, an append-only [`Journal`]
//! of its events readable from any offset, over the same keys: appended by
//! the lease's holder alone, read by anyone, gone with the entry. Each
//! store implements both traits.

use std::{any::Any, fmt, sync::Arc, time::Duration};

use async_trait::async_trait;
use bytes::Bytes;
use tokio::time::Instant;

use crate::scenario::Handler;

pub mod journal;
mod key;
pub mod memory;
pub mod metrics;
pub mod redis;
pub mod shared;
mod stores;

pub use journal::{Appending, Entries, Journal};
pub use key::{Key, RequestId, ScenarioName};
pub use memory::MemoryStore;
pub use redis::{RedisLink, RedisOptions, RedisStore, StoreUrl};
pub use shared::{CommitFallback, SharedStore, StoreHealth};
pub use stores::{CacheStore, ScenarioStore, Stores};

/// What a caller of [`FlightStore::begin`] does next.
#[derive(Debug)]
pub enum Begin {
    /// The value, produced earlier.
    Hit(Bytes),
    /// Another caller is producing it: wait with [`FlightStore::wait`].
    Wait(Waiter),
    /// This caller produces it, then completes (or abandons) the lease.
    Lead(Lease),
    /// This caller would lead, but the store's share for its handler is
    /// full of values it must keep (`/commit` and `/apply` answers): refused,
    /// nothing left behind.
    Full,
    /// This caller would lead, but its `may_lead` said no: nothing left behind.
    Refused,
}

/// How a wait ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waited {
    /// The value.
    Done(Bytes),
    /// The leader gave up without a value (or its lease expired): a caller
    /// may begin again.
    Abandoned,
    /// The deadline came first; the waiter may wait again.
    TimedOut,
}

/// A store that cannot serve (a shared store out of reach). The in-memory
/// store never fails. No variant ever holds a secret (a URL's password).
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The store could not be reached or answered garbage.
    #[error("the store is unavailable: {0}")]
    Unavailable(String),
    /// The store did not answer in time.
    #[error("the store did not answer within {} ms", .0.as_millis())]
    Timeout(Duration),
    /// The store is out of memory for new entries.
    #[error("the store is full")]
    Full,
    /// The store serves, but an entry refers to a value it no longer holds
    /// (an operator flushed it): the entry cannot be read.
    #[error("the store lost a value: {0}")]
    Lost(String),
    /// A lease or waiter whose token this store cannot read: it came from
    /// another kind of store.
    #[error("a lease or waiter from another kind of store")]
    Foreign,
    /// The store holds the key's answer (its call ran), which could not be
    /// read now (its body out of reach, or an entry this server cannot
    /// read): a call that keeps a side effect is not run again.
    #[error("the store holds the answer, which could not be read: {0}")]
    Unreadable(Box<StoreError>),
}

impl StoreError {
    /// What went wrong at the bottom: the cause of [`StoreError::Unreadable`].
    pub fn root(&self) -> &StoreError {
        match self {
            StoreError::Unreadable(cause) => cause.root(),
            other => other,
        }
    }

    /// `self`, met reading an answer the store holds: unreadable, unless
    /// the store lost it.
    pub fn reading_held(self) -> StoreError {
        match self {
            lost @ StoreError::Lost(_) => lost,
            other => StoreError::Unreadable(Box::new(other)),
        }
    }
}

/// The store's own handle on an entry, opaque to callers: the in-memory
/// store keeps its slot here, a shared store a claim token.
pub type Token = Arc<dyn Any + Send + Sync>;

/// The right and duty to produce the value of one key, until its TTL.
#[derive(Clone)]
pub struct Lease {
    /// The key led.
    pub key: Key,
    /// The store's handle on the entry.
    pub token: Token,
}

/// A caller waiting for another's value.
#[derive(Clone)]
pub struct Waiter {
    /// The key waited for.
    pub key: Key,
    /// The store's handle on the entry.
    pub token: Token,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease").field("key", &self.key).finish_non_exhaustive()
    }
}

impl fmt::Debug for Waiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Waiter").field("key", &self.key).finish_non_exhaustive()
    }
}

impl Lease {
    /// A waiter for this lease's own value (the leader hands the work to a
    /// task and waits like any other caller).
    pub fn waiter(&self) -> Waiter {
        Waiter { key: self.key.clone(), token: self.token.clone() }
    }
}

/// What a store holds now, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Values held.
    pub entries: usize,
    /// Bytes held by values (with their bookkeeping).
    pub bytes: usize,
    /// Values of `/commit` and `/apply` held.
    pub reserved_entries: usize,
    /// Bytes of `/commit` and `/apply` values held.
    pub reserved_bytes: usize,
    /// Leases out now.
    pub in_flight: usize,
}

/// One single-flight store. Every method is async, so that a store over the
/// network implements it as well as the in-memory one.
#[async_trait]
pub trait FlightStore: fmt::Debug + Send + Sync + 'static {
    /// Finds the value of `key`, or the lease to wait for, or makes this
    /// caller the leader with a lease lasting `lease_ttl`, answering by
    /// `deadline`. A caller that would lead asks `may_lead` once and gets
    /// [`Begin::Refused`] if it says no. The memory store asks only a
    /// caller that would lead; a shared store asks before its one round
    /// trip, so a hit or a wait may have asked too (and gives back what it
    /// was granted).
    async fn begin(
        &self,
        key: Key,
        lease_ttl: Duration,
        deadline: Instant,
        may_lead: &mut (dyn FnMut() -> bool + Send),
    ) -> Result<Begin, StoreError>;

    /// Stores the value of a lease and wakes its waiters. A lease that
    /// expired (and was perhaps led again since) stores nothing.
    async fn complete(&self, lease: Lease, value: Bytes) -> Result<(), StoreError>;

    /// Ends a lease without a value: its waiters get [`Waited::Abandoned`]
    /// and the next caller leads.
    async fn abandon(&self, lease: Lease) -> Result<(), StoreError>;

    /// Waits for the value of the lease `waiter` follows, until `deadline`.
    async fn wait(&self, waiter: &Waiter, deadline: Instant) -> Result<Waited, StoreError>;

    /// Drops expired values now (a store also does it as it goes).
    async fn purge_expired(&self) -> Result<(), StoreError>;

    /// What the store holds now.
    fn usage(&self) -> Usage;

    /// Starts what the store does in the background, once a runtime runs
    /// (a shared store watches whether it is reachable).
    fn start(&self) {}

    /// Begins `lease`'s key in the store replicas share, as [`begin`]
    /// would for a caller that may lead, when `lease` was taken in this
    /// replica's memory while that store was out of reach, or is a claim
    /// there that its holder found lost (run out, or forgotten by a
    /// restart): its holder then leads there (again), or finds that
    /// another replica holds the key (the same work begun twice) and gives
    /// way. A claim still held is found held, as by another caller: only
    /// its holder knows it is its own. `None` when there is nothing to
    /// share with: a store in memory alone, or a shared store still out of
    /// reach.
    ///
    /// [`begin`]: FlightStore::begin
    async fn share(
        &self,
        _lease: &Lease,
        _lease_ttl: Duration,
        _deadline: Instant,
    ) -> Result<Option<Begin>, StoreError> {
        Ok(None)
    }

    /// Whether the store replicas share is taken for down now, so that
    /// [`share`](FlightStore::share) would answer `None` without asking it;
    /// never, for a store in memory alone.
    fn out_of_reach(&self) -> bool {
        false
    }
}

/// Which share of a store a handler's values go to: `/commit` and `/apply`
/// answers, whose replay keeps a side effect from running twice, are
/// reserved (never evicted); the rest may be evicted oldest first.
pub fn is_reserved(handler: Handler) -> bool {
    handler.has_side_effect()
}
