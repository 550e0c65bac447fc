//! Model calls in flight and recently finished, by call id (the `RequestId`
//! that started them): one call per id however often `/run`, `/continue` or
//! the user's repeated question ask for it.
//!
//! Single flight is a [`FlightStore`]'s, keyed (`assistant`, `/run`, call
//! id). The first asker leads and runs the call in a task of its own, so that
//! it outlives the handler that started it (the server may drop a handler at
//! its budget); the others wait for it. The task completes the lease with the
//! call's [outcome](crate::calls::outcome) as bytes, kept for the retention's TTL
//! within its bounds (oldest evicted first), or abandons it if the call
//! panicked. A task dropped with neither (the runtime shutting down) leaves
//! its lease to run out after the call timeout and a margin; a retry then
//! calls again. New calls are capped through `may_lead` by a count of running
//! calls that a guard in the task gives back however the task ends.
//!
//! The store holds bytes only: each call's [`CallRecord`] (its events, for
//! followers) is kept in memory beside it, from the call's start to the TTL
//! after its end, within the retention's bounds of its own (the store evicts
//! without telling). A call that ends without an outcome drops its record. A
//! std mutex guards the records, held for a few map operations and never
//! across an await.

pub mod config;
pub(crate) mod outcome;
pub mod record;
pub(crate) mod thinking;

use std::{
    collections::{HashMap, VecDeque},
    future::Future,
    panic::AssertUnwindSafe,
    sync::{
        Arc, Mutex, MutexGuard, OnceLock, PoisonError,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use futures_util::FutureExt;
use megamind_core::{
    scenario::Handler,
    store::{Begin, FlightStore, Key, Lease, MemoryStore, StoreError, Waited, Waiter, memory::Limits},
};
use prometheus::{IntCounter, IntGauge};
use tokio::time::Instant;

use crate::{
    backend::{BackendError, MAX_ANSWER_BYTES},
    calls::{
        outcome::ModelOutcome,
        record::{CallRecord, Follower},
    },
    config::NAME,
};

/// How long a lease outlasts the model call timeout: the task starts a
/// little after its lease and stores the outcome after the call.
const LEASE_MARGIN: Duration = Duration::from_secs(1);
/// What keeping a record costs besides its id and events.
const RECORD_COST: usize = 128;

/// The calls, shared by the handlers of one scenario.
#[derive(Debug, Clone)]
pub(crate) struct Calls {
    shared: Arc<Shared>,
}

/// How finished calls are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Retention {
    /// How long after finishing.
    pub(crate) ttl: Duration,
    /// Finished calls kept at most.
    pub(crate) max_entries: usize,
    /// Bytes of outcomes kept at most, and as many of records.
    pub(crate) max_bytes: usize,
}

#[derive(Debug)]
struct Shared {
    store: Arc<dyn FlightStore>,
    lease_ttl: Duration,
    max_in_flight: usize,
    in_flight: AtomicUsize,
    in_flight_gauge: IntGauge,
    records: Mutex<Records>,
}

/// The records of running and kept calls.
#[derive(Debug)]
struct Records {
    retention: Retention,
    by_id: HashMap<Box<str>, Kept>,
    /// Records of finished calls in finishing order, which with one TTL is
    /// also expiry order.
    finished: VecDeque<Finished>,
    finished_bytes: usize,
    generation: u64,
    /// Ids of calls whose records went lately, oldest first, so that a
    /// reader is told "expired" rather than "never was"; bounded by count.
    gone: VecDeque<Box<str>>,
}

/// Ids of forgotten calls remembered at most.
const MAX_GONE: usize = 4096;

/// What is known of a call id.
#[derive(Debug)]
pub(crate) enum Lookup {
    /// Running, or finished and kept.
    Kept(Arc<CallRecord>),
    /// It was, and its record is gone (expired or evicted).
    Gone,
    /// No such call, as far as anyone remembers.
    Unknown,
}

#[derive(Debug)]
struct Kept {
    record: Arc<CallRecord>,
    // Tells a newer call under a reused id from the one a FIFO entry names.
    generation: u64,
}

#[derive(Debug)]
struct Finished {
    expiry: Instant,
    id: Box<str>,
    generation: u64,
    bytes: usize,
}

/// A call to wait for.
#[derive(Debug, Clone)]
pub(crate) struct Handle {
    store: Arc<dyn FlightStore>,
    /// The lease followed, while the outcome is unknown.
    waiter: Option<Waiter>,
    /// Decoded once per handle.
    outcome: OnceLock<Arc<ModelOutcome>>,
}

/// The in-flight cap is reached: no new call was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AtCapacity;

impl Handle {
    fn waiting(store: Arc<dyn FlightStore>, waiter: Waiter) -> Handle {
        Handle { store, waiter: Some(waiter), outcome: OnceLock::new() }
    }

    fn done(store: Arc<dyn FlightStore>, outcome: ModelOutcome) -> Handle {
        Handle { store, waiter: None, outcome: OnceLock::from(Arc::new(outcome)) }
    }

    /// The outcome if the call has finished, as far as the store knows
    /// without waiting.
    #[cfg(test)]
    pub(crate) fn ready(&self) -> Option<Arc<ModelOutcome>> {
        if let Some(outcome) = self.outcome.get() {
            return Some(outcome.clone());
        }
        // A wait until now answers at once whatever is there.
        let waited = self.store.wait(self.waiter.as_ref()?, Instant::now()).now_or_never()?;
        self.settle(waited)
    }

    /// Waits for the outcome until `deadline`; `None` when still running.
    pub(crate) async fn wait_until(&self, deadline: Instant) -> Option<Arc<ModelOutcome>> {
        if let Some(outcome) = self.outcome.get() {
            return Some(outcome.clone());
        }
        let waited = self.store.wait(self.waiter.as_ref()?, deadline).await;
        self.settle(waited)
    }

    fn settle(&self, waited: Result<Waited, StoreError>) -> Option<Arc<ModelOutcome>> {
        let outcome = match waited {
            Ok(Waited::TimedOut) => return None,
            Ok(Waited::Done(bytes)) => outcome::decode(&bytes),
            // The task went away without an outcome (a panic, or a runtime
            // shutting down and its lease run out).
            Ok(Waited::Abandoned) => Err(BackendError::Connect("the model call was abandoned".into())),
            Err(error) => Err(unavailable(&error)),
        };
        Some(self.outcome.get_or_init(|| Arc::new(outcome)).clone())
    }
}

impl Calls {
    /// At most `max_in_flight` calls at once, each over by `call_timeout`;
    /// finished ones kept in a memory store of their own as `retention` says,
    /// its evictions counted in `evicted`.
    pub(crate) fn new(
        max_in_flight: usize,
        call_timeout: Duration,
        retention: Retention,
        in_flight_gauge: IntGauge,
        evicted: IntCounter,
    ) -> Calls {
        let limits = Limits {
            ttl: retention.ttl,
            max_entries: retention.max_entries,
            max_bytes: retention.max_bytes,
            // No `/commit` or `/apply` keys here: the reserve stays empty.
            ..Limits::default()
        };
        let store = MemoryStore::new(limits, std::array::from_fn(|_| evicted.clone()));
        Calls::with_store(Arc::new(store), max_in_flight, call_timeout, retention, in_flight_gauge)
    }

    /// As [`Calls::new`], over any store, which keeps the outcomes by its own
    /// bounds (`retention` bounds the records).
    pub(crate) fn with_store(
        store: Arc<dyn FlightStore>,
        max_in_flight: usize,
        call_timeout: Duration,
        retention: Retention,
        in_flight_gauge: IntGauge,
    ) -> Calls {
        let shared = Shared {
            store,
            lease_ttl: call_timeout + LEASE_MARGIN,
            max_in_flight,
            in_flight: AtomicUsize::new(0),
            in_flight_gauge,
            records: Mutex::new(Records {
                retention,
                by_id: HashMap::new(),
                finished: VecDeque::new(),
                finished_bytes: 0,
                generation: 0,
                gone: VecDeque::new(),
            }),
        };
        Calls { shared: Arc::new(shared) }
    }

    /// The call `id`, if it is running or finished recently.
    #[cfg(test)]
    pub(crate) async fn get(&self, id: &str) -> Option<Handle> {
        let store = &self.shared.store;
        match store.begin(key(id), self.shared.lease_ttl, soon(), &mut || false).await {
            Ok(Begin::Hit(bytes)) => Some(Handle::done(store.clone(), outcome::decode(&bytes))),
            Ok(Begin::Wait(waiter)) => Some(Handle::waiting(store.clone(), waiter)),
            // Not asked to lead; a store that leads anyway gets its lease back.
            Ok(Begin::Lead(lease)) => {
                let _ = store.abandon(lease).await;
                None
            }
            Ok(Begin::Full | Begin::Refused) => None,
            Err(error) => {
                tracing::warn!(%error, call_id = id, "assistant: the model calls' store is out of reach");
                None
            }
        }
    }

    /// The call `id`: the running or recent one, else a new one running
    /// `call` in a task of its own, its events going to the record it is
    /// given. `true` when this started it.
    pub(crate) async fn begin<F>(
        &self,
        id: &str,
        call: impl FnOnce(Arc<CallRecord>) -> F,
    ) -> Result<(Handle, bool), AtCapacity>
    where
        F: Future<Output = ModelOutcome> + Send + 'static,
    {
        let shared = &self.shared;
        let mut claimed = None;
        let mut may_lead = || {
            claimed = InFlight::claim(shared);
            claimed.is_some()
        };
        let begun = shared.store.begin(key(id), shared.lease_ttl, soon(), &mut may_lead).await;
        let store = shared.store.clone();
        let lease = match begun {
            Ok(Begin::Hit(bytes)) => return Ok((Handle::done(store, outcome::decode(&bytes)), false)),
            Ok(Begin::Wait(waiter)) => return Ok((Handle::waiting(store, waiter), false)),
            // `Full`: a shared store out of room for new calls.
            Ok(Begin::Full | Begin::Refused) => return Err(AtCapacity),
            Err(error) => return Ok((Handle::done(store, Err(unavailable(&error))), false)),
            Ok(Begin::Lead(lease)) => lease,
        };
        let Some(in_flight) = claimed else {
            // A store that led without asking: the cap still holds.
            let _ = store.abandon(lease).await;
            return Err(AtCapacity);
        };
        let (record, generation) = shared.records().start(id);
        let running =
            Running { shared: shared.clone(), id: id.into(), generation, record: record.clone(), kept: false };
        let handle = Handle::waiting(store, lease.waiter());
        tokio::spawn(running.run(call(record), lease, in_flight));
        Ok((handle, true))
    }

    /// A reader of the events of call `id` from the first, if it is
    /// running or kept.
    pub(crate) fn follow(&self, id: &str) -> Option<Follower> {
        self.shared.records().get(id, Instant::now()).map(|record| record.follow())
    }

    /// The record of call `id`, or what is known of it.
    pub(crate) fn lookup(&self, id: &str) -> Lookup {
        let mut records = self.shared.records();
        match records.get(id, Instant::now()) {
            Some(record) => Lookup::Kept(record),
            None if records.gone.iter().any(|gone| &**gone == id) => Lookup::Gone,
            None => Lookup::Unknown,
        }
    }

    /// The text call `id` has streamed so far, if it is running or kept.
    pub(crate) fn partial_text(&self, id: &str) -> Option<String> {
        self.shared.records().get(id, Instant::now()).map(|record| record.text())
    }

    /// Calls running now.
    pub(crate) fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::Acquire)
    }
}

fn key(id: &str) -> Key {
    Key::new(NAME, Handler::Run, id)
}

fn unavailable(error: &StoreError) -> BackendError {
    BackendError::Connect(format!("the model call is out of reach: {error}"))
}

impl Shared {
    fn records(&self) -> MutexGuard<'_, Records> {
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Records {
    /// A new record for call `id`, in place of any older one.
    fn start(&mut self, id: &str) -> (Arc<CallRecord>, u64) {
        let record = Arc::new(CallRecord::new(MAX_ANSWER_BYTES));
        self.generation += 1;
        self.by_id.insert(id.into(), Kept { record: record.clone(), generation: self.generation });
        (record, self.generation)
    }

    fn get(&mut self, id: &str, now: Instant) -> Option<Arc<CallRecord>> {
        self.purge(now);
        self.by_id.get(id).map(|kept| kept.record.clone())
    }

    /// Keeps the record of a call that ended with an outcome for the TTL.
    fn keep(&mut self, id: Box<str>, generation: u64, bytes: usize, now: Instant) {
        let expiry = now + self.retention.ttl;
        self.finished_bytes += bytes;
        self.finished.push_back(Finished { expiry, id, generation, bytes });
        self.purge(now);
    }

    /// Drops the record of a call that ended without an outcome.
    fn forget(&mut self, id: &str, generation: u64) {
        if self.by_id.get(id).is_some_and(|kept| kept.generation == generation) {
            self.by_id.remove(id);
            if self.gone.len() == MAX_GONE {
                self.gone.pop_front();
            }
            self.gone.push_back(id.into());
        }
    }

    fn purge(&mut self, now: Instant) {
        let Retention { max_entries, max_bytes, .. } = self.retention;
        while let Some(oldest) = self.finished.front() {
            let over = self.finished.len() > max_entries || self.finished_bytes > max_bytes;
            if oldest.expiry > now && !over {
                break;
            }
            if let Some(Finished { id, generation, bytes, .. }) = self.finished.pop_front() {
                self.finished_bytes -= bytes;
                self.forget(&id, generation);
            }
        }
    }
}

/// One running call, counted against the cap.
#[derive(Debug)]
struct InFlight(Arc<Shared>);

impl InFlight {
    /// One more running call, unless the cap is reached.
    fn claim(shared: &Arc<Shared>) -> Option<InFlight> {
        let max = shared.max_in_flight;
        shared.in_flight.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1)).ok()?;
        shared.in_flight_gauge.inc();
        Some(InFlight(shared.clone()))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.0.in_flight_gauge.dec();
    }
}

/// The task of one call: ends its record however the task ends, kept for
/// the TTL with an outcome, dropped without one.
#[derive(Debug)]
struct Running {
    shared: Arc<Shared>,
    id: Box<str>,
    generation: u64,
    record: Arc<CallRecord>,
    kept: bool,
}

impl Running {
    async fn run(mut self, call: impl Future<Output = ModelOutcome>, lease: Lease, in_flight: InFlight) {
        // Given back when the task ends, even dropped unfinished.
        let _in_flight = in_flight;
        let outcome = AssertUnwindSafe(call).catch_unwind().await;
        // Whoever sees the outcome sees the whole record, and how it ended.
        match &outcome {
            Ok(Err(error)) => self.record.fail(&error.to_string()),
            Err(_) => self.record.fail("the model call failed"),
            Ok(Ok(_)) => self.record.finish(),
        }
        let store = &self.shared.store;
        let ended = match outcome {
            Ok(outcome) => {
                let ended = store.complete(lease, outcome::encode(&outcome)).await;
                self.kept = ended.is_ok();
                ended
            }
            // Abandoned at once, so that a retry calls again without waiting
            // for the lease to run out.
            Err(_) => {
                tracing::error!(call_id = %self.id, "assistant: the model call panicked");
                store.abandon(lease).await
            }
        };
        if let Err(error) = ended {
            tracing::warn!(%error, call_id = %self.id, "assistant: a model call's lease was not ended; it runs out");
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.record.finish();
        let mut records = self.shared.records();
        if self.kept {
            let bytes = RECORD_COST + self.id.len() + self.record.bytes();
            records.keep(std::mem::take(&mut self.id), self.generation, bytes, Instant::now());
        } else {
            records.forget(&self.id, self.generation);
        }
    }
}

#[cfg(test)]
mod tests;

/// When the store must have answered a lookup: the memory store answers at
/// once; a shared one gets the time of a few round trips.
fn soon() -> tokio::time::Instant {
    tokio::time::Instant::now() + std::time::Duration::from_millis(50)
}
