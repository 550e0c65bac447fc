//! Model calls in flight and recently finished, by call id (the `RequestId`
//! that started them): one call per id however often `/run`, `/continue` or
//! the user's repeated question ask for it.
//!
//! A call runs in its own task, so it outlives the handler that started it
//! (the server may drop a handler at its budget); the caller bounds it with
//! the model call timeout. Its outcome is kept for `ttl` after it finishes so
//! that `/continue` and a follow-up turn get it instead of paying again;
//! finished entries sit in a FIFO in finishing order, which with one TTL is
//! also expiry order, and the oldest go first when the count or bytes bound
//! is reached. In-flight calls are capped and never evicted.
//!
//! Each call has its [`CallRecord`] beside its outcome: the events of the
//! backend, for followers, kept as long as the outcome and counted in its
//! bytes.
//!
//! A std mutex guards the map: it is held for a few map operations and never
//! across an await.

use std::{
    collections::{HashMap, VecDeque},
    future::Future,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use prometheus::IntGauge;
use tokio::{
    sync::watch,
    time::{Instant, timeout_at},
};

use super::{
    backend::{BackendError, Completion, MAX_ANSWER_BYTES},
    record::{CallRecord, Follower},
};

/// How a model call ended.
pub(crate) type ModelOutcome = Result<Completion, BackendError>;

type Slot = watch::Receiver<Option<Arc<ModelOutcome>>>;

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
    /// Bytes of answers kept at most.
    pub(crate) max_bytes: usize,
}

#[derive(Debug)]
struct Shared {
    max_in_flight: usize,
    retention: Retention,
    in_flight_gauge: IntGauge,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<Box<str>, Entry>,
    finished: VecDeque<Finished>,
    finished_bytes: usize,
    in_flight: usize,
    generation: u64,
}

/// A finished call in the FIFO.
#[derive(Debug)]
struct Finished {
    expiry: Instant,
    id: Box<str>,
    generation: u64,
    bytes: usize,
}

#[derive(Debug)]
struct Entry {
    slot: Slot,
    record: Arc<CallRecord>,
    // Tells a newer call under a reused id from the one a FIFO entry names.
    generation: u64,
}

/// A call to wait for.
#[derive(Debug, Clone)]
pub(crate) struct Handle {
    slot: Slot,
    record: Arc<CallRecord>,
}

/// The in-flight cap is reached: no new call was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AtCapacity;

impl Handle {
    /// The outcome if the call has finished.
    pub(crate) fn ready(&self) -> Option<Arc<ModelOutcome>> {
        self.slot.borrow().clone()
    }

    /// A reader of the call's events from the first.
    pub(crate) fn follow(&self) -> Follower {
        self.record.follow()
    }

    /// Waits for the outcome until `deadline`; `None` when still running.
    pub(crate) async fn wait_until(&mut self, deadline: Instant) -> Option<Arc<ModelOutcome>> {
        match timeout_at(deadline, self.slot.wait_for(Option::is_some)).await {
            Ok(Ok(outcome)) => outcome.clone(),
            // The task went away without an outcome (runtime shutting down).
            Ok(Err(_)) => Some(Arc::new(Err(BackendError::Connect("the model call was abandoned".into())))),
            Err(_) => None,
        }
    }
}

impl Calls {
    /// At most `max_in_flight` calls at once; finished ones kept as `retention` says.
    pub(crate) fn new(max_in_flight: usize, retention: Retention, in_flight_gauge: IntGauge) -> Calls {
        let shared = Shared { max_in_flight, retention, in_flight_gauge, state: Mutex::default() };
        Calls { shared: Arc::new(shared) }
    }

    /// The call `id`, if it is running or finished recently.
    pub(crate) fn get(&self, id: &str) -> Option<Handle> {
        let mut state = self.shared.lock();
        self.shared.purge(&mut state, Instant::now());
        state.entries.get(id).map(Entry::handle)
    }

    /// The call `id`: the running or recent one, else a new one running
    /// `call` in a task of its own, its events going to the record it is
    /// given. `true` when this started it.
    pub(crate) fn begin<F>(
        &self,
        id: &str,
        call: impl FnOnce(Arc<CallRecord>) -> F,
    ) -> Result<(Handle, bool), AtCapacity>
    where
        F: Future<Output = ModelOutcome> + Send + 'static,
    {
        let mut state = self.shared.lock();
        self.shared.purge(&mut state, Instant::now());
        if let Some(entry) = state.entries.get(id) {
            return Ok((entry.handle(), false));
        }
        if state.in_flight >= self.shared.max_in_flight {
            return Err(AtCapacity);
        }
        let (tx, slot) = watch::channel(None);
        let record = Arc::new(CallRecord::new(MAX_ANSWER_BYTES));
        state.generation += 1;
        let generation = state.generation;
        state.entries.insert(id.into(), Entry { slot: slot.clone(), record: record.clone(), generation });
        state.in_flight += 1;
        self.shared.in_flight_gauge.inc();
        drop(state);

        let guard =
            Finish { shared: self.shared.clone(), id: id.into(), generation, record: record.clone(), finished: None };
        let call = call(record.clone());
        tokio::spawn(async move {
            let mut guard = guard;
            let outcome = call.await;
            // Whoever sees the outcome sees the whole record.
            guard.record.finish();
            guard.finished = Some(cost(&outcome) + guard.record.bytes());
            tx.send_replace(Some(Arc::new(outcome)));
        });
        Ok((Handle { slot, record }, true))
    }

    /// A reader of the events of call `id` from the first, if it is
    /// running or kept.
    pub(crate) fn follow(&self, id: &str) -> Option<Follower> {
        self.get(id).map(|handle| handle.follow())
    }

    /// Calls running now.
    pub(crate) fn in_flight(&self) -> usize {
        self.shared.lock().in_flight
    }

    /// Calls running or kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shared.lock().entries.len()
    }
}

impl Entry {
    fn handle(&self) -> Handle {
        Handle { slot: self.slot.clone(), record: self.record.clone() }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn purge(&self, state: &mut State, now: Instant) {
        let limits = self.retention;
        while let Some(oldest) = state.finished.front() {
            let over = state.finished.len() > limits.max_entries || state.finished_bytes > limits.max_bytes;
            if oldest.expiry > now && !over {
                break;
            }
            if let Some(Finished { id, generation, bytes, .. }) = state.finished.pop_front() {
                state.finished_bytes -= bytes;
                if state.entries.get(&id).is_some_and(|e| e.generation == generation) {
                    state.entries.remove(&id);
                }
            }
        }
    }
}

/// What keeping an outcome costs: its text plus the bookkeeping around it
/// (its record is counted apart).
fn cost(outcome: &ModelOutcome) -> usize {
    128 + match outcome {
        Ok(completion) => completion.text.len(),
        Err(error) => error.to_string().len(),
    }
}

/// Marks the call finished when its task ends, however it ends: kept for
/// the TTL with an outcome, forgotten without one (a retry then calls again).
struct Finish {
    shared: Arc<Shared>,
    id: Box<str>,
    generation: u64,
    record: Arc<CallRecord>,
    // The outcome's cost once there is one.
    finished: Option<usize>,
}

impl Drop for Finish {
    fn drop(&mut self) {
        self.record.finish();
        let shared = &self.shared;
        let mut state = shared.lock();
        state.in_flight -= 1;
        shared.in_flight_gauge.dec();
        if let Some(bytes) = self.finished {
            let id = std::mem::take(&mut self.id);
            let expiry = Instant::now() + shared.retention.ttl;
            state.finished.push_back(Finished { expiry, id, generation: self.generation, bytes });
            state.finished_bytes += bytes;
            shared.purge(&mut state, Instant::now());
        } else if state.entries.get(&self.id).is_some_and(|e| e.generation == self.generation) {
            state.entries.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    const TTL: Duration = Duration::from_secs(60);

    fn calls(max_in_flight: usize, max_entries: usize) -> Calls {
        let retention = Retention { ttl: TTL, max_entries, max_bytes: 1 << 20 };
        Calls::new(max_in_flight, retention, IntGauge::new("g", "g").unwrap())
    }

    fn done(text: &str) -> ModelOutcome {
        Ok(Completion { text: text.into(), attempts: 1, ..Completion::default() })
    }

    /// A call that finishes when the returned sender says so.
    fn controlled() -> (oneshot::Sender<ModelOutcome>, impl Future<Output = ModelOutcome> + Send + 'static) {
        let (tx, rx) = oneshot::channel();
        (tx, async move { rx.await.unwrap_or_else(|_| done("dropped")) })
    }

    #[tokio::test(start_paused = true)]
    async fn one_call_per_id_and_everyone_gets_its_outcome() {
        let calls = calls(10, 100);
        let (tx, call) = controlled();
        let (mut first, started) = calls.begin("r1", |_| call).unwrap();
        assert!(started);
        let (mut second, started) = calls.begin("r1", |_| async { done("second call") }).unwrap();
        assert!(!started, "joined, not started");
        assert_eq!(calls.in_flight(), 1);

        let soon = Instant::now() + Duration::from_millis(150);
        assert!(first.wait_until(soon).await.is_none(), "still running at the deadline");
        tx.send(done("answer")).unwrap();
        let outcome = second.wait_until(Instant::now() + Duration::from_secs(1)).await.unwrap();
        assert_eq!(outcome.as_ref().as_ref().unwrap().text, "answer");
        assert_eq!(first.ready().unwrap().as_ref().as_ref().unwrap().text, "answer");
        tokio::task::yield_now().await;
        assert_eq!(calls.in_flight(), 0);

        let (third, started) = calls.begin("r1", |_| async { done("again") }).unwrap();
        assert!(!started, "a finished call is reused within the TTL");
        assert_eq!(third.ready().unwrap().as_ref().as_ref().unwrap().text, "answer");
    }

    #[tokio::test(start_paused = true)]
    async fn finished_calls_expire_after_the_ttl() {
        let calls = calls(10, 100);
        let (mut handle, _) = calls.begin("r1", |_| async { done("a") }).unwrap();
        handle.wait_until(Instant::now() + Duration::from_secs(1)).await.unwrap();
        tokio::time::advance(TTL - Duration::from_secs(1)).await;
        assert!(calls.get("r1").is_some());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(calls.get("r1").is_none(), "expired");
        let (_, started) = calls.begin("r1", |_| async { done("b") }).unwrap();
        assert!(started, "a new call after expiry");
    }

    #[tokio::test(start_paused = true)]
    async fn in_flight_calls_are_capped_and_not_evicted() {
        let calls = calls(2, 1);
        let (tx1, c1) = controlled();
        let (_tx2, c2) = controlled();
        calls.begin("a", |_| c1).unwrap();
        calls.begin("b", |_| c2).unwrap();
        assert_eq!(calls.begin("c", |_| async { done("c") }).unwrap_err(), AtCapacity);
        assert!(calls.begin("a", |_| async { done("x") }).is_ok(), "joining is not capped");

        tx1.send(done("a")).unwrap();
        tokio::task::yield_now().await;
        let (mut c, started) = calls.begin("c", |_| async { done("c") }).unwrap();
        assert!(started, "a slot freed up");
        c.wait_until(Instant::now() + Duration::from_secs(1)).await.unwrap();
        tokio::task::yield_now().await;
        assert_eq!(calls.len(), 2, "max_retained 1 evicted finished 'a', kept running 'b' and finished 'c'");
        assert!(calls.get("a").is_none() && calls.get("b").is_some() && calls.get("c").is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn finished_answers_are_bounded_by_bytes() {
        let retention = Retention { ttl: TTL, max_entries: 100, max_bytes: 3 * (128 + 1000) };
        let calls = Calls::new(10, retention, IntGauge::new("g", "g").unwrap());
        for id in ["a", "b", "c", "d"] {
            let (mut handle, _) = calls.begin(id, |_| async { done(&"x".repeat(1000)) }).unwrap();
            handle.wait_until(Instant::now() + Duration::from_secs(1)).await.unwrap();
            tokio::task::yield_now().await;
        }
        assert!(calls.get("a").is_none(), "the oldest answer went first");
        assert!(["b", "c", "d"].iter().all(|id| calls.get(id).is_some()));
        assert_eq!(calls.shared.lock().finished_bytes, 3 * 1128);
    }

    #[test]
    fn a_call_dropped_without_an_outcome_is_forgotten() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let calls = calls(10, 100);
        let handle =
            runtime.block_on(async { calls.begin("r1", |_| std::future::pending::<ModelOutcome>()).unwrap().0 });
        assert_eq!(calls.in_flight(), 1);
        // A runtime shutting down drops its tasks without an outcome.
        drop(runtime);
        assert_eq!(calls.in_flight(), 0);
        assert!(calls.get("r1").is_none(), "a retry calls again");
        assert!(handle.ready().is_none());
    }
}
