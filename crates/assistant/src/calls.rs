//! Model calls in flight and recently finished, by call id (the `RequestId`
//! that started them): one call per id however often `/run`, `/continue` or
//! the user's repeated question ask for it, on whichever replica.
//!
//! Single flight is a [`FlightStore`]'s, keyed (`assistant`, `/run`, call
//! id): the server's `[store]` (`Setup::stores`), shared by replicas when
//! it is Redis. The first asker leads and runs the call in a task of its
//! own, so that it outlives the handler that started it (the server may
//! drop a handler at its budget); the others, on any replica, wait for it.
//! The task completes the lease with the call's
//! [outcome] as bytes, kept for the retention's TTL
//! within its bounds (oldest evicted first), or abandons it if the call
//! panicked. A task dropped with neither (the runtime shutting down) leaves
//! its lease to run out after the call timeout and a margin; a retry then
//! calls again. New calls are capped through `may_lead` by a count of
//! running calls that a guard in the task gives back however the task ends.
//!
//! The call's events go to its [`CallRecord`], which the runner's readers
//! follow, and from it to the entry's [journal] in the same store,
//! which every other reader follows: another replica (or this one, once
//! the runner's record is let go) makes a mirror record from the journal.
//! The journal expires and is evicted with the outcome: one bound, one
//! TTL. A call the shared store does not hold (begun in this replica's
//! memory while it was out of reach, or its claim lost) is offered to it
//! once it is back ([`journal::write`]): claimed there, its journal so far
//! written anew, or given way to the replica that holds it there. A
//! request on the replica that runs a call joins that run, without asking
//! the store. This replica keeps only weak references to the records it
//! holds (a record lives while its runner or a reader holds it), and the
//! ids of the calls it knew lately, so that an expired one is told from
//! one that never was. A std mutex guards them, held for a few map
//! operations and never across an await.

pub mod config;
mod entry;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub(crate) mod journal;
pub(crate) mod outcome;
pub mod record;
mod records;
pub(crate) mod thinking;

use std::{
    future::Future,
    panic::AssertUnwindSafe,
    sync::{
        Arc, Mutex, MutexGuard, Once, OnceLock, PoisonError,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use futures_util::FutureExt;
use megamind_core::{
    rules::logging::Throttle,
    scenario::Handler,
    store::{
        Begin, Entries, FlightStore, Journal, Key, Lease, ScenarioStore, StoreError, Stores, Waited, Waiter,
        journal::READ_BATCH,
        memory::{Evictions, Limits},
    },
};
use prometheus::{IntCounter, IntCounterVec, IntGauge};
use tokio::{sync::watch, time::Instant};

use crate::{
    backend::{BackendError, MAX_ANSWER_BYTES},
    calls::{
        journal::Writing,
        outcome::ModelOutcome,
        record::{Bound, CallRecord},
        records::Records,
    },
    config::NAME,
    metrics,
};

/// How long a lease outlasts the model call timeout: the task starts a
/// little after its lease and stores the outcome after the call.
const LEASE_MARGIN: Duration = Duration::from_secs(1);
/// A call's lease in a store replicas share, renewed every
/// [`journal::HEARTBEAT`] while the call runs: a replica that dies
/// mid-call loses it this long after its last renewal, and the next replica
/// that needs the call begins it again.
pub(crate) const SHARED_LEASE: Duration = Duration::from_secs(3);
/// Where the calls' keys go in a shared store, apart from the answers the
/// idempotency cache keeps under the same `RequestId`s.
const NAMESPACE: &str = "calls";

/// How finished calls are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Retention {
    /// How long after finishing.
    pub(crate) ttl: Duration,
    /// Finished calls kept at most.
    pub(crate) max_entries: usize,
    /// Bytes of outcomes and their journals kept at most.
    pub(crate) max_bytes: usize,
}

impl Retention {
    /// The bounds of the calls' store in memory (alone, or behind Redis).
    fn limits(self) -> Limits {
        Limits {
            ttl: self.ttl,
            max_entries: self.max_entries,
            max_bytes: self.max_bytes,
            // No `/commit` or `/apply` keys here: the reserve stays empty.
            ..Limits::default()
        }
    }
}

/// The calls, shared by the handlers of one scenario.
#[derive(Debug, Clone)]
pub(crate) struct Calls {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// Whether replicas share the store.
    is_shared: bool,
    duplicated: IntCounterVec,
    store: Arc<dyn FlightStore>,
    journal: Arc<dyn Journal>,
    started: Once,
    lease_ttl: Duration,
    kept_ttl: Duration,
    max_in_flight: usize,
    in_flight: AtomicUsize,
    in_flight_gauge: IntGauge,
    records: Mutex<Records>,
}

/// What is known of a call id.
#[derive(Debug)]
pub(crate) enum Lookup {
    /// Running, or finished and kept.
    Kept(Arc<CallRecord>),
    /// It was, and its record is gone (expired or evicted).
    Gone,
    /// No such call, as far as anyone remembers.
    Unknown,
    /// Its journal could not be read now: the shared store is out of reach.
    Unavailable,
}

/// A call to wait for.
#[derive(Debug, Clone)]
pub(crate) struct Handle {
    store: Arc<dyn FlightStore>,
    /// Where the outcome comes from while it is unknown.
    source: Source,
    /// Decoded once per handle.
    outcome: OnceLock<Arc<ModelOutcome>>,
    /// Set when the lease ended without an outcome.
    abandoned: OnceLock<()>,
}

/// Where a handle learns its call's outcome.
#[derive(Debug, Clone)]
enum Source {
    /// The lease in the store, which another caller (or replica) holds.
    Lease(Waiter),
    /// This replica's own run of the call, followed in its memory.
    Run(watch::Receiver<Run>),
    /// Nowhere: the outcome was known when the handle was made.
    Known,
    /// The store, asked again for `key` without leading it: its claim was
    /// lost with the store's data, and its runner may claim it again.
    Deferred(Key),
}

/// A run of a call on this replica: `None` while it runs. Its sender
/// dropped without an outcome means the run ended without one (it gave
/// way, panicked, or was dropped).
type Run = Option<Arc<ModelOutcome>>;

/// The in-flight cap is reached: no new call was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AtCapacity;

impl Handle {
    fn waiting(store: Arc<dyn FlightStore>, waiter: Waiter) -> Handle {
        Handle { store, source: Source::Lease(waiter), outcome: OnceLock::new(), abandoned: OnceLock::new() }
    }

    /// A handle on this replica's own run of the call: no store is asked,
    /// so a replica that runs a call never begins it again, even while the
    /// shared store is out of reach.
    fn joining(store: Arc<dyn FlightStore>, run: watch::Receiver<Run>) -> Handle {
        Handle { store, source: Source::Run(run), outcome: OnceLock::new(), abandoned: OnceLock::new() }
    }

    /// A handle that asks the store for call `key` until its deadline,
    /// leading it never.
    fn deferred(store: Arc<dyn FlightStore>, key: Key) -> Handle {
        Handle { store, source: Source::Deferred(key), outcome: OnceLock::new(), abandoned: OnceLock::new() }
    }

    fn done(store: Arc<dyn FlightStore>, outcome: ModelOutcome) -> Handle {
        let outcome = OnceLock::from(Arc::new(outcome));
        Handle { store, source: Source::Known, outcome, abandoned: OnceLock::new() }
    }

    /// The outcome if the call has finished, as far as the store knows
    /// without waiting.
    #[cfg(test)]
    pub(crate) fn ready(&self) -> Option<Arc<ModelOutcome>> {
        if let Some(outcome) = self.outcome.get() {
            return Some(outcome.clone());
        }
        match &self.source {
            Source::Run(_) => self.wait_until(Instant::now()).now_or_never()?,
            // A wait until now answers at once whatever is there.
            Source::Lease(waiter) => self.settle(self.store.wait(waiter, Instant::now()).now_or_never()?),
            Source::Known | Source::Deferred(_) => None,
        }
    }

    /// Waits for the outcome until `deadline`; `None` when still running.
    pub(crate) async fn wait_until(&self, deadline: Instant) -> Option<Arc<ModelOutcome>> {
        if let Some(outcome) = self.outcome.get() {
            return Some(outcome.clone());
        }
        let waiter = match &self.source {
            Source::Lease(waiter) => waiter,
            Source::Run(run) => {
                let mut run = run.clone();
                let waited = match tokio::time::timeout_at(deadline, run.wait_for(Option::is_some)).await {
                    Ok(Ok(done)) => {
                        let outcome = done.clone().expect("waited for an outcome");
                        return Some(self.outcome.get_or_init(|| outcome).clone());
                    }
                    Ok(Err(_gone)) => Waited::Abandoned,
                    Err(_elapsed) => Waited::TimedOut,
                };
                return self.settle(Ok(waited));
            }
            Source::Known => return None,
            Source::Deferred(key) => return self.ask_again(key, deadline).await,
        };
        loop {
            match self.store.wait(waiter, deadline).await {
                // The store out of reach (Redis killed mid-wait) says
                // nothing of the call, which runs on where it runs: asked
                // again until the deadline, then still running, so that the
                // hop says a filler and the next one asks anew (in this
                // replica's memory once it takes the store for down).
                Err(error) if Instant::now() < deadline => {
                    tracing::debug!(%error, key = %waiter.key, "assistant: a wait for a model call failed; asked again");
                    tokio::time::sleep_until((Instant::now() + WAIT_AGAIN).min(deadline)).await;
                }
                waited => return self.settle(waited),
            }
        }
    }

    /// Asks the store for call `key`, without leading it, until
    /// `deadline`: its runner claims it again (then waited for), or it
    /// ends; `None` when nobody holds it by then, and a later hop leads it.
    /// A claim that ends without an outcome is no outcome here (it may be
    /// the one this replica gave back, still being ended): asked again.
    async fn ask_again(&self, key: &Key, deadline: Instant) -> Option<Arc<ModelOutcome>> {
        loop {
            let done = match ask(&*self.store, key.clone(), soon().min(deadline)).await {
                Ok(Begin::Hit(bytes)) => Some(bytes),
                Ok(Begin::Wait(waiter)) => match self.store.wait(&waiter, deadline).await {
                    Ok(Waited::Done(bytes)) => Some(bytes),
                    Ok(Waited::TimedOut) => return None,
                    Ok(Waited::Abandoned) | Err(_) => None,
                },
                Ok(Begin::Lead(_) | Begin::Full | Begin::Refused) | Err(_) => None,
            };
            if let Some(bytes) = done {
                return Some(self.outcome.get_or_init(|| Arc::new(outcome::decode(&bytes))).clone());
            }
            let next = Instant::now() + ASK_AGAIN;
            if next >= deadline {
                return None;
            }
            tokio::time::sleep_until(next).await;
        }
    }

    /// Whether the call's lease ended without an outcome: its runner
    /// panicked, or went away (its replica died) and its lease ran out.
    pub(crate) fn abandoned(&self) -> bool {
        self.abandoned.get().is_some()
    }

    fn settle(&self, waited: Result<Waited, StoreError>) -> Option<Arc<ModelOutcome>> {
        let outcome = match waited {
            // A store out of reach says nothing of the call.
            Ok(Waited::TimedOut) | Err(_) => return None,
            Ok(Waited::Done(bytes)) => outcome::decode(&bytes),
            // The task went away without an outcome (a panic, or a runtime
            // shutting down and its lease run out).
            Ok(Waited::Abandoned) => {
                let _ = self.abandoned.set(());
                Err(BackendError::Connect("the model call was abandoned".into()))
            }
        };
        Some(self.outcome.get_or_init(|| Arc::new(outcome)).clone())
    }
}

impl Calls {
    /// At most `max_in_flight` calls at once, each over by `call_timeout`;
    /// finished ones kept in a memory store of their own as `retention` says,
    /// its evictions counted in `evicted`.
    #[cfg(test)]
    pub(crate) fn new(
        max_in_flight: usize,
        call_timeout: Duration,
        retention: Retention,
        in_flight_gauge: IntGauge,
        evicted: IntCounter,
    ) -> Calls {
        let store = Arc::new(megamind_core::store::MemoryStore::new(retention.limits(), evictions(&evicted)));
        let store = ScenarioStore { flights: store.clone(), journal: store, shared: false };
        let duplicated = IntCounterVec::new(prometheus::Opts::new("d", "d"), &["reason"]).expect("a valid counter");
        Calls::with_store(store, max_in_flight, call_timeout, retention, (in_flight_gauge, duplicated))
    }

    /// At most `max_in_flight` calls at once, each over by `call_timeout`,
    /// over the server's stores: shared by replicas when the server's
    /// `[store]` is; calls that ran, or may have run, on two
    /// replicas counted in `duplicated`.
    pub(crate) fn over(
        stores: &Stores,
        max_in_flight: usize,
        call_timeout: Duration,
        retention: Retention,
        (in_flight_gauge, evicted, duplicated): (IntGauge, IntCounter, IntCounterVec),
    ) -> Result<Calls, StoreError> {
        let store = stores.build(NAMESPACE, retention.limits(), evictions(&evicted))?;
        Ok(Calls::with_store(store, max_in_flight, call_timeout, retention, (in_flight_gauge, duplicated)))
    }

    /// As [`Calls::over`], over any store, which keeps the outcomes and
    /// journals by its own bounds.
    pub(crate) fn with_store(
        store: ScenarioStore,
        max_in_flight: usize,
        call_timeout: Duration,
        retention: Retention,
        (in_flight_gauge, duplicated): (IntGauge, IntCounterVec),
    ) -> Calls {
        // In memory, only this process runs the call: it holds its lease for
        // the whole call. Shared, the lease is short and renewed.
        let lease_ttl = if store.shared { SHARED_LEASE } else { call_timeout + LEASE_MARGIN };
        let shared = Shared {
            is_shared: store.shared,
            duplicated,
            store: store.flights,
            journal: store.journal,
            started: Once::new(),
            lease_ttl,
            kept_ttl: retention.ttl,
            max_in_flight,
            in_flight: AtomicUsize::new(0),
            in_flight_gauge,
            records: Mutex::new(Records::default()),
        };
        Calls { shared: Arc::new(shared) }
    }

    /// The store, its background work started once a runtime runs.
    fn store(&self) -> &Arc<dyn FlightStore> {
        let store = &self.shared.store;
        self.shared.started.call_once(|| store.start());
        store
    }

    /// The call `id`, if it is running or finished recently.
    #[cfg(test)]
    pub(crate) async fn get(&self, id: &str) -> Option<Handle> {
        let store = self.store();
        match ask(&**store, key(id), soon()).await {
            Ok(Begin::Hit(bytes)) => Some(Handle::done(store.clone(), outcome::decode(&bytes))),
            Ok(Begin::Wait(waiter)) => Some(Handle::waiting(store.clone(), waiter)),
            Ok(Begin::Lead(_) | Begin::Full | Begin::Refused) => None,
            Err(error) => {
                if let Some(left_out) = OUT_OF_REACH.due() {
                    tracing::warn!(%error, call_id = id, left_out, "assistant: the model calls' store is out of reach");
                }
                None
            }
        }
    }

    /// The call `id`: the running or recent one, else a new one running
    /// `call` in a task of its own, its events going to the record it is
    /// given. `true` when this started it. `heard`: the user heard words of
    /// the call already (a run of it began on some replica).
    pub(crate) async fn begin<F>(
        &self,
        id: &str,
        heard: bool,
        call: impl FnOnce(Arc<CallRecord>) -> F,
    ) -> Result<(Handle, bool), AtCapacity>
    where
        F: Future<Output = ModelOutcome> + Send + 'static,
    {
        let shared = &self.shared;
        let store = self.store().clone();
        // Running here: joined without asking the store, which may be out
        // of reach and would then have this replica run it twice.
        if let Some(run) = shared.records().run(id) {
            return Ok((Handle::joining(store, run), false));
        }
        // A call the user is hearing is first asked for without claiming
        // it: a claim held meanwhile, however briefly, would be the one its
        // runner gives way to (see `lost_lately`).
        let asked = if heard && shared.is_shared && !store.out_of_reach() {
            match ask(&*store, key(id), soon()).await {
                Ok(Begin::Refused) if self.lost_lately().await => {
                    return Ok((Handle::deferred(store, key(id)), false));
                }
                Ok(Begin::Refused) => None,
                asked => Some(asked),
            }
        } else {
            None
        };
        let mut claimed = None;
        let mut may_lead = || {
            claimed = InFlight::claim(shared);
            claimed.is_some()
        };
        let begun = match asked {
            Some(asked) => asked,
            None => store.begin(key(id), shared.lease_ttl, soon(), &mut may_lead).await,
        };
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
        let unheld = shared.is_shared && !megamind_core::store::redis::is_claim(&lease.token);
        if unheld {
            // Claimed in this replica's memory: another replica may run it too.
            shared.duplicated.with_label_values(&[metrics::STORE_DOWN]).inc();
        }
        let (tap, entries) = tokio::sync::mpsc::unbounded_channel();
        let record = Arc::new(CallRecord::journaled(Bound::for_call(MAX_ANSWER_BYTES, id), tap));
        let (done, run) = watch::channel(None);
        let (told, standing) = watch::channel(journal::Standing { unheld, ..Default::default() });
        {
            let mut records = shared.records();
            records.hold(id, &record);
            records.hold_run(id, &run, &standing);
        }
        let writing = Writing {
            journal: shared.journal.clone(),
            store: shared.is_shared.then(|| store.clone()),
            lease: shared.lease_ttl,
            kept_ttl: shared.kept_ttl,
            lease_lost: shared.duplicated.with_label_values(&[metrics::LEASE_LOST]),
        };
        let writer = tokio::spawn(journal::write(writing, lease.clone(), entries, told));
        let running = Running { shared: shared.clone(), id: id.into(), record: record.clone(), done };
        let handle = Handle::joining(store, run);
        tokio::spawn(running.run(call(record), lease, in_flight, (writer, standing)));
        Ok((handle, true))
    }

    /// Whether a call the user is hearing, found unclaimed in the shared
    /// store, may still run on its replica: so it is taken within 2 s of a
    /// trouble of the store (a loss the recheck finds, a failure, a
    /// restart), for Redis may have lost the claim of a runner that runs on
    /// and claims the call again at its next append. Run here then, the
    /// call would make that runner give way and the user hear the answer
    /// begin again. Past that window, its runner is taken for gone (its
    /// lease ran out).
    async fn lost_lately(&self) -> bool {
        let journal = &self.shared.journal;
        journal.recheck(soon()).await;
        journal::reappear_until(&**journal).is_some_and(|until| until > Instant::now())
    }

    /// A reader of the events of call `id` from the first, if it is
    /// running or kept.
    pub(crate) async fn follow(&self, id: &str) -> Option<record::Follower> {
        match self.lookup(id).await {
            Lookup::Kept(record) => Some(record.follow()),
            Lookup::Gone | Lookup::Unknown | Lookup::Unavailable => None,
        }
    }

    /// The record of call `id` (this replica's, or a mirror of its
    /// journal), or what is known of it.
    pub(crate) async fn lookup(&self, id: &str) -> Lookup {
        self.lookup_by(id, soon(), Instant::now() + journal::REAPPEAR_WAIT, None).await
    }

    /// As [`Calls::lookup`], waiting for the first events of a journal that
    /// has none yet until `by` at most (a handler that must answer soon
    /// cannot wait as long as a reader of the stream can), and for a
    /// journal the store may have lost lately until `reappear_by`. With
    /// `all_by`, a journal of many batches is read until then at most: a
    /// record of what was read by then is not kept as the call's mirror
    /// unless it was all, since a mirror goes on from where it began.
    async fn lookup_by(&self, id: &str, by: Instant, reappear_by: Instant, all_by: Option<Instant>) -> Lookup {
        let shared = &self.shared;
        if let Some(record) = shared.records().get(id) {
            return Lookup::Kept(record);
        }
        let key = key(id);
        let _ = self.store();
        let mut read_by = by;
        let read = loop {
            // Until when the journal is looked for again, and why it could not be read.
            let (until, failed) = match self.read_all(&key, read_by, all_by).await {
                Ok(Some(read)) => break read,
                // A store that failed or came back lately may have lost the
                // journal (a Redis restarted empty), which the call's runner
                // writes anew at its next append.
                Ok(None) => {
                    let reappear = journal::reappear_until(&*shared.journal);
                    (reappear.map_or_else(Instant::now, |until| until.min(reappear_by)), None)
                }
                // A connection Redis dropped as it restarted is made anew.
                Err(error) => (reappear_by, Some(error)),
            };
            // The next read gets the time the first one had, before `until`.
            let next = Instant::now() + journal::REAPPEAR_POLL;
            if next + LOOKUP_READ > until {
                let Some(error) = failed else {
                    return if shared.records().knows(id) { Lookup::Gone } else { Lookup::Unknown };
                };
                if let Some(left_out) = OUT_OF_REACH.due() {
                    tracing::warn!(%error, call_id = id, left_out, "assistant: the model calls' journal is out of reach");
                }
                return Lookup::Unavailable;
            }
            tokio::time::sleep_until(next).await;
            read_by = next + LOOKUP_READ;
        };
        let (read, whole) = read;
        let run = journal::latest_run(&read.entries);
        if !whole {
            return Lookup::Kept(Arc::new(journal::mirror_of(run, MAX_ANSWER_BYTES)));
        }
        let mut records = shared.records();
        // Another reader may have made one meanwhile: one mirror per call.
        if let Some(record) = records.get(id) {
            return Lookup::Kept(record);
        }
        let record = Arc::new(journal::mirror_of(run, MAX_ANSWER_BYTES));
        records.hold(id, &record);
        drop(records);
        let ended = record.has_ended() || read.ended;
        if !ended {
            let head = journal::start_of(run);
            let (shared, id, record) = (shared.clone(), id.to_owned(), record.clone());
            tokio::spawn(async move {
                let followed = journal::mirror(shared.journal.clone(), key, record.clone(), read.last(0), head).await;
                // Ended short of the call's end (begun again elsewhere, its
                // journal gone or out of reach): readers still holding this
                // record are told so; those to come read the journal anew,
                // not this record's failure.
                if followed == journal::Followed::Short {
                    shared.records().forget(&id, &record);
                }
            });
        }
        Lookup::Kept(record)
    }

    /// Everything the journal of `key` holds now, from its first entry, and
    /// whether that is all of it; an empty journal is waited for until
    /// `by`. With `all_by`, the batches after the first are read until then
    /// at most, and a read that fails ends them: what was read is not all.
    async fn read_all(
        &self,
        key: &Key,
        by: Instant,
        all_by: Option<Instant>,
    ) -> Result<Option<(Entries, bool)>, StoreError> {
        let journal = &self.shared.journal;
        let Some(mut all) = journal.read(key, 0, by).await? else { return Ok(None) };
        while !all.ended && all.entries.len() % READ_BATCH == 0 && !all.entries.is_empty() {
            let after = all.last(0);
            // The batch after a full one: there now, unless the full one was
            // the last (a read of a running call's then waits for its next entry).
            let more = match all_by {
                None => journal.read(key, after, soon()).await?,
                Some(all_by) if Instant::now() >= all_by => return Ok(Some((all, false))),
                Some(all_by) => match journal.read(key, after, soon().min(all_by)).await {
                    Ok(more) => more,
                    Err(_) => return Ok(Some((all, false))),
                },
            };
            match more {
                Some(more) if !more.entries.is_empty() || more.ended => {
                    all.ended = more.ended;
                    all.entries.extend(more.entries);
                }
                _ => break,
            }
        }
        Ok(Some((all, true)))
    }

    /// The text call `id` has streamed so far, if it is running or kept;
    /// read from another replica's journal by `by`.
    ///
    /// Nothing while this replica runs it unheld by the shared store: another
    /// replica may run it too, and the user should not hear the openings of
    /// two answers.
    pub(crate) async fn partial_text(&self, id: &str, by: Instant) -> Option<String> {
        if self.shared.records().is_unheld(id) {
            return Some(String::new());
        }
        match self.lookup_by(id, by, by, Some(by)).await {
            // Not spoken from: a run that gave way, a stream of one that did
            // (a call that failed has its outcome in the hop's handle), or
            // one whose journal the store may have lost to another run.
            Lookup::Kept(record) if !record.speakable() => None,
            Lookup::Kept(record) => Some(record.text()),
            Lookup::Gone | Lookup::Unknown | Lookup::Unavailable => None,
        }
    }

    /// Calls running now.
    pub(crate) fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::Acquire)
    }
}

fn key(id: &str) -> Key {
    Key::new(NAME, Handler::Run, id)
}

fn evictions(evicted: &IntCounter) -> Evictions {
    std::array::from_fn(|_| evicted.clone())
}

fn unavailable(error: &StoreError) -> BackendError {
    BackendError::Connect(format!("the model call is out of reach: {error}"))
}

impl Shared {
    fn records(&self) -> MutexGuard<'_, Records> {
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
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

/// The task of one call: ends its record however the task ends.
#[derive(Debug)]
struct Running {
    shared: Arc<Shared>,
    id: Box<str>,
    record: Arc<CallRecord>,
    /// Gives this replica's joiners the outcome; dropped without one, it
    /// tells them the run ended without.
    done: watch::Sender<Run>,
}

impl Running {
    /// Runs the call to its outcome, which completes its lease, unless the
    /// writer of its journal finds that another replica runs it too
    /// ([`journal::Standing`]).
    async fn run(
        self,
        call: impl Future<Output = ModelOutcome>,
        lease: Lease,
        in_flight: InFlight,
        (writer, mut standing): (tokio::task::JoinHandle<()>, watch::Receiver<journal::Standing>),
    ) {
        // Given back when the task ends, even dropped unfinished.
        let _in_flight = in_flight;
        let mut call = std::pin::pin!(AssertUnwindSafe(call).catch_unwind());
        let mut writing = true;
        let outcome = loop {
            tokio::select! {
                outcome = &mut call => break outcome,
                changed = standing.changed(), if writing => match changed {
                    Ok(()) if standing.borrow_and_update().taken => return self.give_way(lease).await,
                    Ok(()) => {}
                    Err(_writer_ended) => writing = false,
                },
            }
        };
        let failure = match &outcome {
            Ok(Err(error)) => Some(error.for_screens()),
            Err(_) => Some("the model call failed".to_owned()),
            Ok(Ok(_)) => None,
        };
        // The journal ends before the outcome is stored: a replica that
        // sees the outcome finds the whole journal. Its appends are bounded
        // by the store's timeouts. Joiners and followers here wait for it
        // too: until it is written, another replica may turn out to hold
        // the call, and this run then ends as one that gave way.
        let at = self.record.end_journal(failure.as_deref());
        let _ = writer.await;
        let journal::Standing { claim, taken, .. } = standing.borrow().clone();
        if taken {
            return self.give_way(lease).await;
        }
        // Whoever sees the outcome sees the whole record, and how it ended.
        match &failure {
            Some(reason) => self.record.fail_at(reason, at),
            None => self.record.finish_at(at),
        }
        let value = match &outcome {
            Ok(outcome) => Some(outcome::encode(outcome)),
            Err(_) => {
                tracing::error!(call_id = %self.id, "assistant: the model call panicked");
                None
            }
        };
        // Joiners here are answered as they would be from the store.
        if let Some(value) = &value {
            self.done.send_replace(Some(Arc::new(outcome::decode(value))));
        }
        let store = &self.shared.store;
        for lease in std::iter::once(lease).chain(claim) {
            let ended = match &value {
                Some(value) => store.complete(lease, value.clone()).await,
                // Abandoned at once, so that a retry calls again without waiting
                // for the lease to run out.
                None => store.abandon(lease).await,
            };
            if let Err(error) = ended {
                tracing::warn!(%error, call_id = %self.id, "assistant: a model call's lease was not ended; it runs out");
            }
        }
    }

    /// Gives way to the run of this call that another replica holds in the
    /// shared store: this replica's record ends and is let go, so that its
    /// readers look again and follow the other run, and its lease is
    /// abandoned, so that its waiters (and those joining it here, once
    /// this task is dropped) begin the call again and find it.
    async fn give_way(self, lease: Lease) {
        self.shared.records().forget(&self.id, &self.record);
        self.record.fail(journal::GAVE_WAY);
        if let Err(error) = self.shared.store.abandon(lease).await {
            tracing::warn!(%error, call_id = %self.id, "assistant: a model call's lease was not ended; it runs out");
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Before `done` goes: joiners told the run ended begin the call
        // again, and must not find this run.
        self.shared.records().end_run(&self.id, &self.done.subscribe());
        // Nothing if the call ended; a task dropped before (the runtime
        // shutting down) ended without an answer.
        self.record.fail("the model call was dropped before it ended");
    }
}

#[cfg(test)]
mod tests;

/// The pause before a wait the store failed is asked again.
const WAIT_AGAIN: Duration = Duration::from_millis(20);

/// The pause before a deferred call is asked for again.
const ASK_AGAIN: Duration = Duration::from_millis(50);

/// The lease an [`ask`] names: it never leads.
const ASK_LEASE: Duration = Duration::from_secs(1);

/// Asks `store` for call `key` by `deadline` without leading it: a store
/// that leads all the same gets its lease back, and answers `Refused`.
async fn ask(store: &dyn FlightStore, key: Key, deadline: Instant) -> Result<Begin, StoreError> {
    match store.begin(key, ASK_LEASE, deadline, &mut || false).await {
        Ok(Begin::Lead(lease)) => {
            let _ = store.abandon(lease).await;
            Ok(Begin::Refused)
        }
        asked => asked,
    }
}

/// How long the store has to answer a lookup: the memory store answers at
/// once; a shared one gets the time of a few round trips.
const LOOKUP_READ: Duration = Duration::from_millis(50);

/// The warnings of calls whose store or journal was out of reach: one a
/// second during an outage, not one a call.
static OUT_OF_REACH: Throttle = Throttle::new();

/// When the store must have answered a lookup.
fn soon() -> tokio::time::Instant {
    tokio::time::Instant::now() + LOOKUP_READ
}
