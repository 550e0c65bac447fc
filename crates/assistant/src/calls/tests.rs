use megamind_core::store::Usage;
use tokio::sync::oneshot;

use super::*;
use crate::{
    backend::{Completion, ModelEvent},
    calls::record,
};

const TTL: Duration = Duration::from_secs(60);
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const SECOND: Duration = Duration::from_secs(1);

fn calls_with(max_in_flight: usize, retention: Retention) -> (Calls, IntCounter) {
    let evicted = IntCounter::new("e", "e").unwrap();
    let calls = Calls::new(max_in_flight, CALL_TIMEOUT, retention, IntGauge::new("g", "g").unwrap(), evicted.clone());
    (calls, evicted)
}

fn calls(max_in_flight: usize, max_entries: usize) -> Calls {
    calls_with(max_in_flight, Retention { ttl: TTL, max_entries, max_bytes: 1 << 20 }).0
}

fn done(text: &str) -> ModelOutcome {
    Ok(Completion { text: text.into(), attempts: 1, ..Completion::default() })
}

fn text(outcome: &ModelOutcome) -> &str {
    &outcome.as_ref().unwrap().text
}

async fn panics() -> ModelOutcome {
    panic!("a bug in the call")
}

/// A call that finishes when the returned sender says so.
fn controlled() -> (oneshot::Sender<ModelOutcome>, impl Future<Output = ModelOutcome> + Send + 'static) {
    let (tx, rx) = oneshot::channel();
    (tx, async move { rx.await.unwrap_or_else(|_| done("dropped")) })
}

impl Calls {
    fn usage(&self) -> Usage {
        self.shared.store.usage()
    }
}

#[tokio::test(start_paused = true)]
async fn one_call_per_id_and_everyone_gets_its_outcome() {
    let calls = calls(10, 100);
    let (tx, call) = controlled();
    let (first, started) = calls.begin("r1", false, |_| call).await.unwrap();
    assert!(started);
    let (second, started) = calls.begin("r1", false, |_| async { done("second call") }).await.unwrap();
    assert!(!started, "joined, not started");
    assert_eq!(calls.in_flight(), 1);

    let soon = Instant::now() + Duration::from_millis(150);
    assert!(first.wait_until(soon).await.is_none(), "still running at the deadline");
    assert!(first.ready().is_none());
    tx.send(done("answer")).unwrap();
    let outcome = second.wait_until(Instant::now() + SECOND).await.unwrap();
    assert_eq!(text(&outcome), "answer");
    assert_eq!(text(&first.ready().unwrap()), "answer");
    tokio::task::yield_now().await;
    assert_eq!(calls.in_flight(), 0);

    let (third, started) = calls.begin("r1", false, |_| async { done("again") }).await.unwrap();
    assert!(!started, "a finished call is reused within the TTL");
    assert_eq!(text(&third.ready().unwrap()), "answer");
}

#[tokio::test(start_paused = true)]
async fn finished_calls_expire_after_the_ttl() {
    let calls = calls(10, 100);
    let (handle, _) = calls.begin("r1", false, |_| async { done("a") }).await.unwrap();
    handle.wait_until(Instant::now() + SECOND).await.unwrap();
    tokio::task::yield_now().await;
    tokio::time::advance(TTL - SECOND).await;
    assert!(calls.get("r1").await.is_some() && calls.follow("r1").await.is_some());
    tokio::time::advance(2 * SECOND).await;
    assert!(calls.get("r1").await.is_none(), "expired");
    assert!(calls.follow("r1").await.is_none(), "and its record with it");
    let (_, started) = calls.begin("r1", false, |_| async { done("b") }).await.unwrap();
    assert!(started, "a new call after expiry");
}

#[tokio::test(start_paused = true)]
async fn in_flight_calls_are_capped_and_not_evicted() {
    let calls = calls(2, 1);
    let (tx1, c1) = controlled();
    let (_tx2, c2) = controlled();
    calls.begin("a", false, |_| c1).await.unwrap();
    calls.begin("b", false, |_| c2).await.unwrap();
    assert_eq!(calls.begin("c", false, |_| async { done("c") }).await.unwrap_err(), AtCapacity);
    assert!(calls.begin("a", false, |_| async { done("x") }).await.is_ok(), "joining is not capped");

    tx1.send(done("a")).unwrap();
    tokio::task::yield_now().await;
    let (c, started) = calls.begin("c", false, |_| async { done("c") }).await.unwrap();
    assert!(started, "a slot freed up");
    c.wait_until(Instant::now() + SECOND).await.unwrap();
    tokio::task::yield_now().await;
    let usage = calls.usage();
    assert_eq!((usage.entries, usage.in_flight), (1, 1), "max_retained 1 evicted finished 'a', kept 'c'");
    assert!(calls.get("a").await.is_none() && calls.get("b").await.is_some() && calls.get("c").await.is_some());
    assert!(
        calls.follow("a").await.is_none() && calls.follow("b").await.is_some() && calls.follow("c").await.is_some()
    );
}

#[tokio::test(start_paused = true)]
async fn finished_answers_and_records_are_bounded_by_bytes() {
    let run = |calls: Calls, id: &'static str| {
        // Answers of one length, each its own: identical ones would be kept once.
        let answer = format!("{id}{}", "x".repeat(999));
        async move {
            let call = move |record: Arc<CallRecord>| async move {
                record.push(ModelEvent::TextDelta(answer.clone()));
                done(&answer)
            };
            let (handle, _) = calls.begin(id, false, call).await.unwrap();
            handle.wait_until(Instant::now() + SECOND).await.unwrap();
            tokio::task::yield_now().await;
        }
    };
    // What one kept call costs: its outcome and its journal, one bound for both.
    let probe = calls(10, 100);
    run(probe.clone(), "a").await;
    let cost = probe.usage().bytes;
    assert!(cost > 2000, "the outcome and the journal's text: {cost}");
    let (calls, evicted) = calls_with(10, Retention { ttl: TTL, max_entries: 100, max_bytes: 3 * cost + 100 });
    for id in ["a", "b", "c", "d"] {
        run(calls.clone(), id).await;
    }
    assert!(calls.get("a").await.is_none(), "the oldest answer went first");
    assert!(calls.follow("a").await.is_none(), "and the oldest record");
    for id in ["b", "c", "d"] {
        assert!(calls.get(id).await.is_some() && calls.follow(id).await.is_some(), "{id}");
    }
    assert_eq!(calls.usage().bytes, 3 * cost);
    assert_eq!(evicted.get(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_call_abandons_its_lease_at_once() {
    let calls = calls(10, 100);
    let (handle, _) = calls.begin("r1", false, |_| panics()).await.unwrap();
    let outcome = handle.wait_until(Instant::now() + SECOND).await.expect("ended");
    assert!(matches!(outcome.as_ref(), Err(BackendError::Connect(_))), "{outcome:?}");
    tokio::task::yield_now().await;
    assert_eq!(calls.in_flight(), 0);
    assert!(calls.follow("r1").await.is_none(), "no outcome, no record");
    let (_, started) = calls.begin("r1", false, |_| async { done("again") }).await.unwrap();
    assert!(started, "a retry calls again");
}

#[test]
fn a_call_dropped_without_an_outcome_is_forgotten_after_its_lease_ttl() {
    let runtime = || tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
    let calls = calls(10, 100);
    let first = runtime();
    let (handle, follower) = first.block_on(async {
        let handle = calls.begin("r1", false, |_| std::future::pending::<ModelOutcome>()).await.unwrap().0;
        (handle, calls.follow("r1").await.expect("a running call"))
    });
    assert_eq!(calls.in_flight(), 1);
    // A runtime shutting down drops its tasks without an outcome.
    drop(first);
    assert_eq!(calls.in_flight(), 0, "the dropped task gave its slot back");
    assert!(matches!(follower.ending(), record::Ending::Failed(_)), "its record ended without an answer");
    drop(follower);

    runtime().block_on(async {
        let ended = handle.ready().expect("its starter learns at once that the run ended");
        assert!(ended.is_err() && handle.abandoned(), "without an answer: {ended:?}");
        assert!(calls.get("r1").await.is_some(), "the lease holds until its TTL");
        let (waiting, started) = calls.begin("r1", false, |_| async { done("b") }).await.unwrap();
        assert!(!started, "a retry waits for the lease meanwhile");
        tokio::time::advance(CALL_TIMEOUT + LEASE_MARGIN).await;
        let abandoned = waiting.wait_until(Instant::now() + SECOND).await.expect("ended");
        assert!(abandoned.is_err(), "waiters learn the call was abandoned");
        assert!(calls.get("r1").await.is_none());
        assert!(calls.follow("r1").await.is_none(), "nor its journal");
        let (retry, started) = calls.begin("r1", false, |_| async { done("b") }).await.unwrap();
        assert!(started, "a retry calls again");
        assert_eq!(text(&retry.wait_until(Instant::now() + SECOND).await.unwrap()), "b");
    });
}

#[tokio::test(start_paused = true)]
async fn a_failed_call_says_so_in_its_record_and_a_forgotten_one_is_gone() {
    let calls = calls(10, 100);
    let failing = |record: Arc<CallRecord>| async move {
        record.push(ModelEvent::TextDelta("Сейч".into()));
        Err(BackendError::Timeout("call"))
    };
    let (handle, _) = calls.begin("r1", false, failing).await.unwrap();
    handle.wait_until(Instant::now() + SECOND).await.unwrap();
    tokio::task::yield_now().await;
    let Lookup::Kept(record) = calls.lookup("r1").await else {
        panic!("a failed call's record is kept with its outcome")
    };
    assert_eq!(record.ending(), record::Ending::Failed(BackendError::Timeout("call").to_string()));
    assert!(matches!(calls.lookup("never").await, Lookup::Unknown));
    // A record lives while someone reads it.
    drop(record);
    tokio::time::advance(TTL + SECOND).await;
    assert!(matches!(calls.lookup("r1").await, Lookup::Gone), "expired, and remembered as such");
    assert!(matches!(calls.lookup("never").await, Lookup::Unknown));
}

/// Calls as replicas sharing a store run them, over `flights` (a memory
/// store when `None`) and `journal`.
fn shared_over(flights: Option<Arc<dyn FlightStore>>, journal: Arc<dyn megamind_core::store::Journal>) -> Calls {
    let retention = Retention { ttl: TTL, max_entries: 100, max_bytes: 1 << 20 };
    let flights = flights.unwrap_or_else(|| {
        Arc::new(megamind_core::store::MemoryStore::new(
            retention.limits(),
            megamind_core::store::memory::unregistered_evictions(),
        ))
    });
    let store = ScenarioStore { flights, journal, shared: true };
    let duplicated = IntCounterVec::new(prometheus::Opts::new("d", "d"), &["reason"]).unwrap();
    Calls::with_store(store, 10, CALL_TIMEOUT, retention, (IntGauge::new("g", "g").unwrap(), duplicated))
}

/// A journal in a store out of reach.
#[derive(Debug)]
struct Unreachable;

#[async_trait::async_trait]
impl megamind_core::store::Journal for Unreachable {
    async fn append(
        &self,
        _: &megamind_core::store::Lease,
        _: megamind_core::store::Appending<'_>,
    ) -> Result<bool, StoreError> {
        Err(StoreError::Unavailable("out of reach".into()))
    }

    async fn read(&self, _: &Key, _: u64, _: Instant) -> Result<Option<Entries>, StoreError> {
        Err(StoreError::Unavailable("out of reach".into()))
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_whose_journal_is_out_of_reach_is_unavailable_not_gone() {
    let calls = shared_over(None, Arc::new(Unreachable));
    let started = Instant::now();
    assert!(matches!(calls.lookup("run elsewhere").await, Lookup::Unavailable), "ask again, it is not lost");
    assert!(
        started.elapsed() >= journal::REAPPEAR_WAIT - journal::REAPPEAR_POLL,
        "once a store dropped as it restarts would be back"
    );
}

/// A hop reading another replica's call by `by` is done by `by`, even when
/// the journal holds exactly a full batch (the read after it waits for an
/// entry that has yet to come); what it did read is spoken, and is not kept
/// as the call's mirror: a reader with time reads the journal whole.
#[tokio::test(start_paused = true)]
async fn a_journal_of_a_full_batch_is_read_by_the_hop_s_time() {
    let journal = TestJournal::of(letters(READ_BATCH));
    let calls = shared_over(None, Arc::new(journal));
    let started = Instant::now();
    let text = calls.partial_text("elsewhere", started + Duration::from_millis(10)).await;
    assert!(started.elapsed() <= Duration::from_millis(10), "read for {:?}", started.elapsed());
    assert_eq!(text.map(|text| text.chars().count()), Some(READ_BATCH - 1), "the batch read is spoken");
    // Read to its end by then: kept, and followed from there.
    assert!(calls.shared.records().get("elsewhere").is_some(), "mirrored");

    // Batches that take 8 ms each: the second one is not read by 10 ms.
    let slow = TestJournal { read_takes: Duration::from_millis(8), ..TestJournal::of(letters(3 * READ_BATCH)) };
    let calls = shared_over(None, Arc::new(slow));
    let started = Instant::now();
    let text = calls.partial_text("slow", started + Duration::from_millis(10)).await;
    assert!(started.elapsed() <= Duration::from_millis(10), "read for {:?}", started.elapsed());
    assert_eq!(text.map(|text| text.chars().count()), Some(READ_BATCH - 1), "the first batch is spoken");
    assert!(calls.shared.records().get("slow").is_none(), "no mirror begun from a part");
    // A reader with time reads it whole, and keeps it.
    let Lookup::Kept(record) = calls.lookup("slow").await else { panic!("found") };
    assert_eq!(record.text().chars().count(), 3 * READ_BATCH - 1);
    assert!(calls.shared.records().get("slow").is_some());
}

/// A mirror whose call was begun again (a second start in its journal)
/// ends, and is let go as the call's record even while a reader still
/// holds it: the next lookup follows the new run, not the old one's end.
#[tokio::test(start_paused = true)]
async fn a_mirror_ended_short_of_its_call_gives_way_to_a_new_one() {
    let at = Duration::from_millis(5);
    let event = |text: &str| super::entry::Entry::Event { event: ModelEvent::TextDelta(text.into()), at }.encode();
    let journal = Arc::new(TestJournal::of(vec![super::entry::Entry::started_now(), event("а")]));
    let calls = shared_over(None, journal.clone());
    let Lookup::Kept(first) = calls.lookup("again").await else { panic!("found") };
    assert_eq!(first.text(), "а");
    journal.entries.lock().unwrap().extend([super::entry::Entry::started_now(), event("б")]);
    tokio::time::sleep(SECOND).await;
    assert_eq!(first.ending(), record::Ending::Failed(journal::RESTARTED.into()), "its readers are told");
    let Lookup::Kept(second) = calls.lookup("again").await else { panic!("found") };
    assert!(!Arc::ptr_eq(&first, &second), "a new mirror, though the old one is still held");
    assert_eq!((second.text().as_str(), second.has_ended()), ("б", false), "of the new run");
}

/// A run's start, then an event of one letter each, `count` entries in all.
fn letters(count: usize) -> Vec<bytes::Bytes> {
    let at = Duration::from_millis(5);
    let mut entries = vec![super::entry::Entry::started_now()];
    entries.extend(
        (1..count).map(|_| super::entry::Entry::Event { event: ModelEvent::TextDelta("а".into()), at }.encode()),
    );
    entries
}

/// A call's journal in a shared store, read a batch at a time: its
/// `entries` (which a test may add to while it is read), each read taking
/// `read_takes` (one that cannot end by its deadline times out at it, as
/// Redis's does), and a read with nothing new waiting until its deadline
/// unless the journal `ended`. Gone until `back` (a store restarted empty,
/// the journal written anew by its call's runner then), the store last
/// failed at `troubled`.
#[derive(Debug)]
struct TestJournal {
    entries: Mutex<Vec<bytes::Bytes>>,
    read_takes: Duration,
    ended: bool,
    back: Instant,
    troubled: Option<Instant>,
}

impl TestJournal {
    /// The running call's journal of `entries`, there now, read at once.
    fn of(entries: Vec<bytes::Bytes>) -> TestJournal {
        let entries = Mutex::new(entries);
        TestJournal { entries, read_takes: Duration::ZERO, ended: false, back: Instant::now(), troubled: None }
    }
}

#[async_trait::async_trait]
impl megamind_core::store::Journal for TestJournal {
    async fn append(
        &self,
        _: &megamind_core::store::Lease,
        _: megamind_core::store::Appending<'_>,
    ) -> Result<bool, StoreError> {
        Ok(false)
    }

    async fn read(&self, _: &Key, after: u64, deadline: Instant) -> Result<Option<Entries>, StoreError> {
        let ready = Instant::now() + self.read_takes;
        if deadline <= Instant::now() || ready > deadline {
            tokio::time::sleep_until(deadline).await;
            return Err(StoreError::Timeout(self.read_takes));
        }
        tokio::time::sleep_until(ready).await;
        let from = usize::try_from(after).unwrap();
        let read = || {
            let entries = self.entries.lock().unwrap();
            entries.get(from..).unwrap_or_default().iter().take(READ_BATCH).cloned().collect::<Vec<_>>()
        };
        let mut entries = read();
        if entries.is_empty() && !self.ended {
            tokio::time::sleep_until(deadline).await;
            entries = read();
        }
        let read = Entries { first: after + 1, entries, ended: self.ended, abandoned: false };
        Ok((Instant::now() >= self.back).then_some(read))
    }

    fn troubled_since(&self) -> Option<Instant> {
        self.troubled
    }
}

fn reappearing(back: Duration, troubled: Option<Instant>) -> Calls {
    let at = Duration::from_millis(5);
    let entries = vec![
        super::entry::Entry::started_now(),
        super::entry::Entry::Event { event: ModelEvent::TextDelta("Сейчас.".into()), at }.encode(),
        super::entry::Entry::Completed { at }.encode(),
    ];
    let journal = TestJournal { ended: true, back: Instant::now() + back, troubled, ..TestJournal::of(entries) };
    shared_over(None, Arc::new(journal))
}

/// Just after Redis restarted empty, a call's journal is gone until its
/// runner writes it anew: a reader that opens the call then waits for it,
/// for a while, rather than be told no such call was ever started.
#[tokio::test(start_paused = true)]
async fn a_journal_missing_just_after_the_store_was_troubled_is_waited_for() {
    let written_anew = Duration::from_millis(700);
    let started = Instant::now();
    let calls = reappearing(written_anew, Some(started));
    let Lookup::Kept(record) = calls.lookup("lost").await else { panic!("found once written anew") };
    assert_eq!(record.text(), "Сейчас.");
    let waited = started.elapsed();
    assert!(waited >= written_anew && waited <= written_anew + journal::REAPPEAR_POLL, "waited {waited:?}");

    let started = Instant::now();
    let calls = reappearing(journal::REAPPEAR_WAIT * 2, Some(started));
    assert!(matches!(calls.lookup("never").await, Lookup::Unknown), "not for ever");
    let waited = started.elapsed();
    let last_read = journal::REAPPEAR_WAIT - journal::REAPPEAR_POLL - LOOKUP_READ;
    assert!(
        waited > last_read && waited <= journal::REAPPEAR_WAIT,
        "until the wait from the trouble is over: {waited:?}"
    );

    let started = Instant::now();
    let calls = reappearing(written_anew, Some(started));
    assert_eq!(calls.partial_text("lost", started + SECOND / 5).await, None, "a hop keeps to its own deadline");
    assert!(started.elapsed() <= SECOND / 5);

    let started = Instant::now();
    let calls = reappearing(written_anew, Some(started - journal::REAPPEAR_WAIT));
    assert!(matches!(calls.lookup("never").await, Lookup::Unknown), "a trouble long past");
    let calls = reappearing(written_anew, None);
    assert!(matches!(calls.lookup("never").await, Lookup::Unknown), "a store never troubled");
    assert_eq!(started.elapsed(), Duration::ZERO, "both at once");
}

/// A shared store whose every call runs on another replica, out of reach
/// until `back`, then holding the call's answer.
#[derive(Debug)]
struct Elsewhere {
    back: Instant,
    asked: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl FlightStore for Elsewhere {
    async fn begin(
        &self,
        key: Key,
        _: Duration,
        _: Instant,
        _: &mut (dyn FnMut() -> bool + Send),
    ) -> Result<Begin, StoreError> {
        Ok(Begin::Wait(megamind_core::store::Waiter { key, token: Arc::new(()) }))
    }

    async fn complete(&self, _: megamind_core::store::Lease, _: bytes::Bytes) -> Result<(), StoreError> {
        unreachable!("another replica runs the call")
    }

    async fn abandon(&self, _: megamind_core::store::Lease) -> Result<(), StoreError> {
        unreachable!("another replica runs the call")
    }

    async fn wait(&self, _: &megamind_core::store::Waiter, _: Instant) -> Result<Waited, StoreError> {
        self.asked.fetch_add(1, Ordering::Relaxed);
        if Instant::now() < self.back {
            return Err(StoreError::Unavailable("connection refused".into()));
        }
        Ok(Waited::Done(outcome::encode(&done("answer"))))
    }

    async fn purge_expired(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn usage(&self) -> Usage {
        Usage::default()
    }
}

/// A hop waiting for a call another replica runs when Redis is killed:
/// the call is not lost, so the hop is told it still runs (and says a
/// filler), not that it failed (which the user would hear as an apology).
#[tokio::test(start_paused = true)]
async fn a_wait_the_store_fails_is_no_news_of_the_call() {
    let back = Instant::now() + SECOND;
    let flights = Arc::new(Elsewhere { back, asked: std::sync::atomic::AtomicUsize::new(0) });
    let calls = shared_over(Some(flights.clone()), Arc::new(Unreachable));
    let (handle, started) = calls.begin("elsewhere", false, |_| async { done("not here") }).await.unwrap();
    assert!(!started, "another replica runs it");
    let hop = Instant::now() + Duration::from_millis(300);
    assert!(handle.wait_until(hop).await.is_none(), "still running, as far as anyone can tell");
    assert_eq!(Instant::now(), hop, "asked again until the hop's deadline");
    assert!(flights.asked.load(Ordering::Relaxed) > 5, "asked again meanwhile");
    tokio::time::sleep_until(back).await;
    let outcome = handle.wait_until(Instant::now() + SECOND).await.expect("the answer once the store is back");
    assert_eq!(text(&outcome), "answer");
}

/// A deferred handle asks the store for its call and never leads it: a
/// claim given back meanwhile (as the replica that deferred gives its own
/// back) is asked again, not taken for the call's end, and a run begun
/// elsewhere after it is waited for, its outcome the handle's. With nobody
/// holding the call, it has no outcome at its deadline.
#[tokio::test(start_paused = true)]
async fn a_deferred_call_is_asked_for_until_its_deadline_and_never_led() {
    let calls = calls(10, 100);
    let store = calls.store().clone();
    let nobody = Handle::deferred(store.clone(), key("r0"));
    let started = Instant::now();
    assert!(nobody.wait_until(started + Duration::from_millis(300)).await.is_none());
    assert!(started.elapsed() >= Duration::from_millis(250), "asked until the deadline: {:?}", started.elapsed());
    assert!(calls.get("r0").await.is_none() && !nobody.abandoned(), "never led");

    let Ok(Begin::Lead(given_back)) = store.begin(key("r1"), TTL, soon(), &mut || true).await else {
        panic!("a first lead")
    };
    let deferred = Handle::deferred(store.clone(), key("r1"));
    let elsewhere = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        store.abandon(given_back).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        calls.begin("r1", false, |_| async { done("run elsewhere") }).await.unwrap()
    };
    let (outcome, (_, started)) = tokio::join!(deferred.wait_until(Instant::now() + SECOND), elsewhere);
    assert!(started);
    assert_eq!(text(&outcome.expect("the run begun after the claim was given back")), "run elsewhere");
    assert!(!deferred.abandoned());
}
