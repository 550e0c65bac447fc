//! The pipeline over a store that behaves as one shared by replicas may:
//! asking `may_lead` before it knows whether the caller leads, and failing
//! a wait when Redis goes away mid-call. A caller holds one admission slot
//! at most, none while it waits, and a `/run` whose wait failed runs.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use bytes::Bytes;
use tokio::time::Instant;

use super::{tests::*, *};
use crate::{
    rules::idempotency::{CacheCounters, Limits},
    scenario::Scenario,
    store::{FlightStore, Lease, MemoryStore, Usage, Waiter, memory::unregistered_evictions},
};

/// Over this replica's memory, as a shared store over Redis: `may_lead` is
/// asked before the inner store asks it again (a shared store asks before
/// its one round trip, then the memory behind it when Redis fails it), and
/// once a wait has failed (`waits_fail`), calls begin on `fallback`.
#[derive(Debug)]
struct SharedLike {
    shared: MemoryStore,
    fallback: MemoryStore,
    waits_fail: bool,
    /// Waits end at their deadline finding the first call gone, as a poll
    /// of Redis does when that call's lease ran out just then.
    gone_at_deadline: bool,
    lost: AtomicBool,
    waiting: tokio::sync::Notify,
}

impl SharedLike {
    fn new(waits_fail: bool) -> Arc<SharedLike> {
        let memory = || MemoryStore::new(Limits::default(), unregistered_evictions());
        Arc::new(SharedLike {
            shared: memory(),
            fallback: memory(),
            waits_fail,
            gone_at_deadline: false,
            lost: AtomicBool::new(false),
            waiting: tokio::sync::Notify::new(),
        })
    }

    fn now(&self) -> &MemoryStore {
        if self.lost.load(Ordering::SeqCst) { &self.fallback } else { &self.shared }
    }
}

#[async_trait::async_trait]
impl FlightStore for SharedLike {
    async fn begin(
        &self,
        key: Key,
        lease_ttl: std::time::Duration,
        deadline: Instant,
        may_lead: &mut (dyn FnMut() -> bool + Send),
    ) -> Result<Begin, StoreError> {
        let _ = may_lead();
        self.now().begin(key, lease_ttl, deadline, may_lead).await
    }

    async fn complete(&self, lease: Lease, value: Bytes) -> Result<(), StoreError> {
        self.now().complete(lease, value).await
    }

    async fn abandon(&self, lease: Lease) -> Result<(), StoreError> {
        self.now().abandon(lease).await
    }

    async fn wait(&self, waiter: &Waiter, deadline: Instant) -> Result<Waited, StoreError> {
        self.waiting.notify_one();
        if self.waits_fail {
            self.lost.store(true, Ordering::SeqCst);
            return Err(StoreError::Unavailable("connection lost".into()));
        }
        if self.gone_at_deadline {
            tokio::time::sleep_until(deadline).await;
            return Ok(Waited::Abandoned);
        }
        self.shared.wait(waiter, deadline).await
    }

    async fn purge_expired(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn usage(&self) -> Usage {
        self.now().usage()
    }
}

fn dispatcher_over(store: Arc<SharedLike>, scenario: Arc<dyn Scenario>, max_in_flight: usize) -> Dispatcher {
    let mut registry = Registry::new();
    registry.register("s", scenario).unwrap();
    let cache = IdempotencyCache::with_store(store, CacheCounters::default());
    let admission = Admission::new(max_in_flight, 0);
    Dispatcher::new(registry, None, DispatchLimits::default(), cache, admission, ServerMetrics::new())
}

#[tokio::test]
async fn a_store_that_asks_twice_takes_one_slot() {
    let dispatcher = dispatcher_over(SharedLike::new(false), Arc::new(Echo), 1);
    let echo = dispatcher.scenario(Some("s")).unwrap();
    assert_eq!(version(dispatcher.dispatch(echo, run_call("r1", Some("led"))).await), "led");
}

#[tokio::test]
async fn a_repeat_that_waits_gives_its_slot_back() {
    let store = SharedLike::new(false);
    let scenario = Arc::new(Gated::default());
    let dispatcher = Arc::new(dispatcher_over(store.clone(), scenario.clone(), 2));
    let commit = |id: &str| {
        let (dispatcher, call) = (dispatcher.clone(), commit_call(id));
        tokio::spawn(async move {
            let gated = dispatcher.scenario(Some("s")).unwrap();
            dispatcher.dispatch(gated, call).await
        })
    };
    // The first call holds one slot while it runs; its repeat waits for it.
    let first = commit("pay");
    scenario.started.notified().await;
    let repeat = commit("pay");
    store.waiting.notified().await;
    // The second slot is free for another call.
    let s = dispatcher.scenario(Some("s")).unwrap();
    let other = dispatcher.dispatch(s, run_call("other", None)).await;
    assert!(matches!(other, Reply::Answer(_)), "refused while a repeat only waits: {other:?}");
    scenario.gate.notify_one();
    let (first, repeat) = (first.await.unwrap(), repeat.await.unwrap());
    assert_eq!(first, repeat, "the repeat replays the first call's answer");
}

#[tokio::test]
async fn a_run_whose_wait_the_store_failed_runs_on_the_fallback() {
    let store = SharedLike::new(true);
    // Another replica's first call holds the key.
    let key = Key::new("s", Handler::Run, "r1");
    let held = store.shared.begin_now(key, std::time::Duration::from_secs(30), &mut || true);
    assert!(matches!(held, Begin::Lead(_)));
    let dispatcher = dispatcher_over(store.clone(), Arc::new(Echo), 8);
    let echo = dispatcher.scenario(Some("s")).unwrap();
    assert_eq!(version(dispatcher.dispatch(echo, run_call("r1", Some("here"))).await), "here");
    // A side effect is never run without the claim every replica sees.
    let key = Key::new("s", Handler::Commit, "c1");
    let held = store.fallback.begin_now(key, std::time::Duration::from_secs(30), &mut || true);
    assert!(matches!(held, Begin::Lead(_)));
    let refused = dispatcher.dispatch(echo, commit_call("c1")).await;
    assert_eq!(commit_error(&refused).0, "unavailable", "{refused:?}");
}

#[tokio::test(start_paused = true)]
async fn a_first_call_found_gone_only_at_the_deadline_is_a_timeout() {
    let mut store = SharedLike::new(false);
    Arc::get_mut(&mut store).unwrap().gone_at_deadline = true;
    // Another replica's first call holds the key, and its lease runs out
    // just as this repeat's time does: no time is left to run it here.
    let key = Key::new("s", Handler::Commit, "c1");
    let held = store.shared.begin_now(key, std::time::Duration::from_secs(30), &mut || true);
    assert!(matches!(held, Begin::Lead(_)));
    let dispatcher = dispatcher_over(store.clone(), Arc::new(Echo), 8);
    let echo = dispatcher.scenario(Some("s")).unwrap();
    let answer = dispatcher.dispatch(echo, commit_call("c1")).await;
    let (kind, message) = commit_error(&answer);
    assert_eq!(kind, "timeout", "{message}");
    assert!(message.contains("ended without an answer"), "{message}");
}
