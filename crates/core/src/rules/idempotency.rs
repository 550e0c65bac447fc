//! The idempotency cache: one answer per (scenario, handler, `RequestId`),
//! a rule over a [`FlightStore`].
//!
//! The first call leads: it gets a [`Lease`] and runs the scenario. Repeats
//! that arrive while it runs wait for it (single flight); repeats after it get
//! its answer byte for byte. Only answers are kept: a lead that ends without
//! one (a panic, work dropped past its detach limit, a cancelled call)
//! abandons its lease so that a retry runs again. The lease belongs to the
//! scenario's work, not to the request, so a call that outlives its budget
//! still completes the entry; its TTL (the handler's budget plus the detach
//! limit) covers that work, and a lease lost anyway is taken over once it
//! runs out.
//!
//! The bounds, eviction and the `/commit` and `/apply` reserve are the
//! store's: see [`crate::store::memory`]. The cache counts hits, misses,
//! waits and refusals by what the store answers.

mod counters;

use std::{
    sync::{Arc, Weak},
    time::Duration,
};

use bytes::Bytes;
pub use counters::CacheCounters;
use futures_util::{
    FutureExt,
    future::{BoxFuture, Either, Ready, ready},
};
use tokio::time::Instant;

pub use crate::store::memory::Limits;
use crate::{
    background::Background,
    store::{Begin, FlightStore, Key, Lease, MemoryStore, StoreError, Usage, Waited, Waiter},
};

/// A cheap-clone handle to the cache.
#[derive(Debug, Clone)]
pub struct IdempotencyCache {
    store: Arc<dyn FlightStore>,
    /// The same store when it is the memory one, called directly: its
    /// answers are ready at once, and a boxed future per call would cost
    /// more than the call itself.
    memory: Option<Arc<MemoryStore>>,
    counters: CacheCounters,
    /// Work calls leave running past their answers: leases given back,
    /// work past its budget completing its entry.
    background: Background,
}

/// A store's answer: ready at once (memory) or to be awaited (a shared store).
type StoreFuture<'a, T> = Either<Ready<Result<T, StoreError>>, BoxFuture<'a, Result<T, StoreError>>>;

impl IdempotencyCache {
    /// An empty cache in memory with these bounds.
    pub fn new(limits: Limits) -> IdempotencyCache {
        let counters = CacheCounters::default();
        let store = MemoryStore::new(limits, counters.evictions_by_handler());
        IdempotencyCache::in_memory(Arc::new(store), counters)
    }

    /// A cache over `store`, counting in `counters`.
    pub fn with_store(store: Arc<dyn FlightStore>, counters: CacheCounters) -> IdempotencyCache {
        IdempotencyCache { store, memory: None, counters, background: Background::new() }
    }

    /// The same cache, leaving its work after answers in `background` (the
    /// store's own, so that a stopping server waits for both at once).
    pub fn with_background(self, background: Background) -> IdempotencyCache {
        IdempotencyCache { background, ..self }
    }

    /// The work calls left running past their answers.
    pub fn background(&self) -> &Background {
        &self.background
    }

    /// A cache over a memory store, counting in `counters` (which the store
    /// should have been given too, for its evictions).
    pub fn in_memory(store: Arc<MemoryStore>, counters: CacheCounters) -> IdempotencyCache {
        IdempotencyCache { store: store.clone(), memory: Some(store), counters, background: Background::new() }
    }

    // `begin`, `wait` and `end` hand the store's future on rather than being
    // `async fn`s of their own, which would copy the key or the lease into a
    // future of theirs and grow every call's future by as much.

    /// Finds the answer for `key`, or the call to wait for, or makes this
    /// call the first, with a lease lasting `lease_ttl`, by `deadline`. A
    /// call that would lead asks `may_lead` (see [`FlightStore::begin`]) and
    /// is [`Begin::Refused`] with no entry left behind if it says no.
    pub fn begin<'a>(
        &'a self,
        key: Key,
        lease_ttl: Duration,
        deadline: Instant,
        may_lead: &'a mut (dyn FnMut() -> bool + Send),
    ) -> impl Future<Output = Result<Begin, StoreError>> + Send + 'a {
        let handler = key.handler;
        let begin: StoreFuture<'a, Begin> = match &self.memory {
            Some(memory) => Either::Left(ready(Ok(memory.begin_now(key, lease_ttl, may_lead)))),
            None => Either::Right(self.store.begin(key, lease_ttl, deadline, may_lead)),
        };
        async move {
            let begin = begin.await?;
            match &begin {
                Begin::Hit(_) => self.counters.hits.inc(),
                Begin::Wait(_) => self.counters.waits.inc(),
                Begin::Lead(_) => self.counters.misses.inc(),
                Begin::Full => self.counters.refused(handler).inc(),
                Begin::Refused => {}
            }
            Ok(begin)
        }
    }

    /// The first call's answer, or how waiting for it ended.
    pub fn wait<'a>(&'a self, waiter: &'a Waiter, deadline: Instant) -> BoxFuture<'a, Result<Waited, StoreError>> {
        self.store.wait(waiter, deadline)
    }

    /// Ends a lease: with the answer to keep for repeats, or, for `None`,
    /// without one (its waiters get [`Waited::Abandoned`], a retry leads).
    pub fn end(&self, lease: Lease, answer: Option<Bytes>) -> StoreFuture<'_, ()> {
        match (&self.memory, answer) {
            (Some(memory), Some(answer)) => Either::Left(ready(memory.complete_now(lease, answer))),
            (Some(memory), None) => Either::Left(ready(memory.abandon_now(lease))),
            (None, Some(answer)) => Either::Right(self.store.complete(lease, answer)),
            (None, None) => Either::Right(self.store.abandon(lease)),
        }
    }

    /// Guards `lease` for a call under way: see [`Leading`].
    pub fn leading(&self, lease: Lease) -> Leading<'_> {
        Leading { cache: self, lease: Some(lease) }
    }

    /// Drops expired answers now.
    pub async fn purge_expired(&self) -> Result<(), StoreError> {
        self.store.purge_expired().await
    }

    /// Starts the store's background work, and purges expired answers
    /// every `period` while the store lives, so an idle server gives their
    /// memory back too.
    pub fn spawn_purger(&self, period: Duration) {
        self.store.start();
        let weak: Weak<dyn FlightStore> = Arc::downgrade(&self.store);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(store) = weak.upgrade() else { return };
                if let Err(error) = store.purge_expired().await {
                    tracing::warn!(%error, "idempotency cache not purged");
                }
            }
        });
    }

    /// What the store holds now.
    pub fn usage(&self) -> Usage {
        self.store.usage()
    }

    /// Hit, miss, wait, eviction and refusal counters.
    pub fn counters(&self) -> &CacheCounters {
        &self.counters
    }
}

/// A lease held by a call under way, ended with [`Leading::end`].
///
/// Dropped before that (the call was cancelled: its connection closed), it
/// abandons the lease, so that a retry leads at once rather than waiting for
/// the lease to run out.
#[derive(Debug)]
pub struct Leading<'a> {
    cache: &'a IdempotencyCache,
    /// `Some` until ended or handed on, both of which consume the guard.
    lease: Option<Lease>,
}

impl<'a> Leading<'a> {
    /// Ends the lease as [`IdempotencyCache::end`] does.
    pub fn end(mut self, answer: Option<Bytes>) -> StoreFuture<'a, ()> {
        match self.lease.take() {
            Some(lease) => self.cache.end(lease, answer),
            None => Either::Left(ready(Ok(()))),
        }
    }

    /// The lease, unguarded, for work that goes on elsewhere and ends it there.
    pub fn into_lease(mut self) -> Lease {
        self.lease.take().expect("a lease is held until ended or handed on")
    }
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        let Some(lease) = self.lease.take() else { return };
        let store = self.cache.store.clone();
        let mut abandon = Box::pin(async move {
            if let Err(error) = store.abandon(lease).await {
                tracing::warn!(%error, "the lease of a cancelled call was not abandoned; it runs out by its TTL");
            }
        });
        // The memory store abandons at once; another may need the runtime
        // (without one, the lease runs out by its TTL).
        if abandon.as_mut().now_or_never().is_none()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            self.cache.background.spawn_on(abandon, &runtime);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Handler;

    const TTL: Duration = Duration::from_secs(30);

    async fn begin(cache: &IdempotencyCache, handler: Handler, id: &str) -> Begin {
        cache.begin(Key::new("demo", handler, id), TTL, Instant::now() + TTL, &mut || true).await.unwrap()
    }

    #[tokio::test]
    async fn hits_misses_waits_and_refusals_are_counted_by_what_the_store_answers() {
        let cache = IdempotencyCache::new(Limits { commit_max_entries: 1, ..Limits::default() });
        let Begin::Lead(lease) = begin(&cache, Handler::Run, "a").await else { panic!("a first call leads") };
        assert!(matches!(begin(&cache, Handler::Run, "a").await, Begin::Wait(_)));
        cache.end(lease, Some(Bytes::from_static(b"answer"))).await.unwrap();
        for _ in 0..3 {
            assert!(matches!(begin(&cache, Handler::Run, "a").await, Begin::Hit(body) if &body[..] == b"answer"));
        }
        let refused =
            cache.begin(Key::new("demo", Handler::Run, "b"), TTL, Instant::now() + TTL, &mut || false).await.unwrap();
        assert!(matches!(refused, Begin::Refused));
        let _running = begin(&cache, Handler::Commit, "c").await;
        assert!(matches!(begin(&cache, Handler::Apply, "d").await, Begin::Full));
        let counters = cache.counters();
        assert_eq!((counters.hits.get(), counters.misses.get(), counters.waits.get()), (3, 2, 1));
        assert_eq!((counters.refused(Handler::Apply).get(), counters.refused(Handler::Commit).get()), (1, 0));
        assert_eq!(cache.usage().entries, 1);
    }

    #[tokio::test]
    async fn a_lead_dropped_unended_abandons_its_lease() {
        let cache = IdempotencyCache::new(Limits::default());
        let Begin::Lead(lease) = begin(&cache, Handler::Commit, "a").await else { panic!("a first call leads") };
        let Begin::Wait(waiter) = begin(&cache, Handler::Commit, "a").await else { panic!("a repeat waits") };
        drop(cache.leading(lease));
        let deadline = Instant::now() + TTL;
        assert_eq!(cache.wait(&waiter, deadline).await.unwrap(), Waited::Abandoned);
        assert!(matches!(begin(&cache, Handler::Commit, "a").await, Begin::Lead(_)), "a retry leads at once");
        assert_eq!(cache.usage().entries, 0);
    }

    #[tokio::test]
    async fn a_lead_ended_with_nothing_keeps_nothing() {
        let cache = IdempotencyCache::new(Limits::default());
        let Begin::Lead(lease) = begin(&cache, Handler::Run, "a").await else { panic!("a first call leads") };
        cache.leading(lease).end(None).await.unwrap();
        assert!(matches!(begin(&cache, Handler::Run, "a").await, Begin::Lead(_)));
    }
}
