use std::{collections::VecDeque, iter::once};

use megamind_core::store::{Entries, StoreError, Usage, Waited, Waiter};

use super::*;
use crate::{backend::ModelEvent, calls::record::Ending};

/// When each scripted event came, into its call.
const AT: Duration = Duration::from_millis(5);

/// A piece of the answer's text, as a journal keeps it.
fn text(piece: &str) -> Bytes {
    Entry::Event { event: ModelEvent::TextDelta(piece.into()), at: AT }.encode()
}

/// The end of a call that answered.
fn completed() -> Bytes {
    Entry::Completed { at: AT }.encode()
}

/// The start of the run a mirror follows, and of another run under its key.
fn starts() -> (Bytes, Bytes) {
    (Entry::Started { unix_us: 1 }.encode(), Entry::Started { unix_us: 2 }.encode())
}

/// A read answering `entries`, the first numbered `first`.
fn entries(first: u64, entries: Vec<Bytes>) -> ScriptedRead {
    Ok(Some(Entries { first, entries, ..Entries::default() }))
}

/// The key of call `id`.
fn key(id: &str) -> Key {
    Key::new("assistant", megamind_core::scenario::Handler::Run, id)
}

/// That `record`'s mirror ended as `ends` says, and said it followed its
/// call to its end only if the call completed.
fn assert_ended(record: &CallRecord, followed: Followed, ends: &Ending) {
    assert_eq!(&record.view().0.ending, ends);
    let to_its_end = if *ends == Ending::Completed { Followed::ToItsEnd } else { Followed::Short };
    assert_eq!(followed, to_its_end);
}

#[test]
fn a_run_begun_again_ends_its_mirrors_and_new_readers_read_it_alone() {
    let first_run = [Entry::started_now(), text("Сей")];
    let mirror = mirror_of(latest_run(&first_run), 1024);
    let second_run = [Entry::started_now(), text("Сейчас."), completed()];
    assert_eq!(apply(&mirror, &second_run, &mut true), Some(Followed::Short), "the new start ends the mirror");
    let early = mirror_of(&[], 1024);
    assert_eq!(apply(&early, &first_run, &mut false), None, "a mirror made before the start reads it as the start");
    assert_eq!(early.text(), "Сей");
    assert_eq!(mirror.view().0.ending, super::super::record::Ending::Failed(RESTARTED.into()));
    let journal: Vec<Bytes> = first_run.iter().chain(&second_run).cloned().collect();
    let fresh = mirror_of(latest_run(&journal), 1024);
    assert_eq!(fresh.text(), "Сейчас.", "a new reader reads the new run alone");
    assert_eq!(fresh.view().0.ending, super::super::record::Ending::Completed);
}

#[tokio::test(start_paused = true)]
async fn after_a_failed_read_a_mirror_reads_on_only_if_the_journal_still_begins_with_its_run() {
    let (ours, theirs) = starts();
    let key = key("m1");
    for (head, ends) in [(theirs.clone(), Ending::Failed(RESTARTED.into())), (ours.clone(), Ending::Completed)] {
        let record = Arc::new(mirror_of(&[ours.clone(), text("Сей")], 1024));
        let script = [
            Err(StoreError::Unavailable("Redis restarted".into())),
            entries(3, vec![text("час."), completed()]),
            // The check of the journal's first entry.
            entries(1, vec![head, text("Сей")]),
        ];
        let journal = Arc::new(Flushed::new(script.into_iter().map(Some), None));
        let followed = mirror(journal, key.clone(), record.clone(), 2, Some(ours.clone())).await;
        assert_ended(&record, followed, &ends);
    }
}

/// The check of the journal's first entry after a failed read fails too:
/// the read it was made for is not taken until a check tells, so that
/// another run's entries past this one's are never read as this run's.
#[tokio::test(start_paused = true)]
async fn a_check_that_cannot_tell_holds_the_read_back_until_one_can() {
    let (ours, theirs) = starts();
    let key = key("m7");
    for (head, ends) in [(theirs.clone(), Ending::Failed(RESTARTED.into())), (ours.clone(), Ending::Completed)] {
        let record = Arc::new(mirror_of(&[ours.clone(), text("Сей")], 1024));
        let script = [
            Err(StoreError::Unavailable("Redis restarted".into())),
            entries(3, vec![text("час."), completed()]),
            // The check, timed out.
            Err(StoreError::Timeout(Duration::from_millis(50))),
            // The same read again, and its check, which tells.
            entries(3, vec![text("час."), completed()]),
            entries(1, vec![head, text("Сей")]),
        ];
        let journal = Arc::new(Flushed::new(script.into_iter().map(Some), None));
        let followed = mirror(journal, key.clone(), record.clone(), 2, Some(ours.clone())).await;
        assert_ended(&record, followed, &ends);
        assert_eq!(record.text(), if ends == Ending::Completed { "Сейчас." } else { "Сей" });
    }
    // A store that never lets the check tell ends the mirror, as failed reads do.
    let record = Arc::new(mirror_of(&[ours.clone(), text("Сей")], 1024));
    let script = once(Err(StoreError::Unavailable("Redis restarted".into()))).chain(
        std::iter::repeat_with(|| [entries(3, vec![text("час.")]), Err(StoreError::Timeout(Duration::ZERO))])
            .take(MAX_READ_FAILURES as usize)
            .flatten(),
    );
    let journal = Arc::new(Flushed::new(script.map(Some), None));
    let followed = mirror(journal, key.clone(), record.clone(), 2, Some(ours.clone())).await;
    assert_eq!(followed, Followed::Short);
    assert_eq!(record.text(), "Сей", "nothing taken unchecked");
}

#[tokio::test(start_paused = true)]
async fn a_journal_gone_just_after_a_failed_read_is_waited_for_a_while() {
    type Script = VecDeque<ScriptedRead>;
    let (ours, _) = starts();
    let key = key("m2");
    let restarted = || once(Err(StoreError::Unavailable("Redis restarted".into())));
    let gone = |reads: usize| std::iter::repeat_with(|| Ok(None)).take(reads);
    let written_anew = [
        entries(3, vec![text("час."), completed()]),
        // The check of the journal's first entry.
        entries(1, vec![ours.clone(), text("Сей")]),
    ];
    let short = Duration::from_millis(1);
    // Each script, how its mirror ends, and the least and most time it may take.
    let cases: [(Script, _, _); 3] = [
        // Written anew by its runner a moment after Redis came back empty.
        (restarted().chain(gone(5)).chain(written_anew).collect(), Ending::Completed, (short, REAPPEAR_WAIT)),
        // Its runner never comes back.
        (restarted().chain(gone(40)).collect(), Ending::Failed(GONE.into()), (REAPPEAR_WAIT, Duration::MAX)),
        // Gone with no failed read before: nothing to wait for.
        (gone(1).collect(), Ending::Failed(GONE.into()), (Duration::ZERO, short)),
    ];
    for (script, ends, (least, most)) in cases {
        let record = Arc::new(mirror_of(&[ours.clone(), text("Сей")], 1024));
        let journal = Arc::new(Flushed::new(script.into_iter().map(Some), None));
        let began = Instant::now();
        let followed = mirror(journal, key.clone(), record.clone(), 2, Some(ours.clone())).await;
        let took = began.elapsed();
        assert_ended(&record, followed, &ends);
        assert!(least <= took && took < most, "{ends:?} after {took:?}");
        if ends == Ending::Completed {
            assert_eq!(record.text(), "Сейчас.", "read on from where it was");
        }
    }
}

type ScriptedRead = Result<Option<Entries>, StoreError>;

/// A journal whose reads answer in turn from a script (`None`: a read
/// that blocks until it is dropped, as one waiting for entries does),
/// and whose store finds a loss when told to, or as a given read is
/// served.
#[derive(Debug, Default)]
struct Flushed {
    reads: std::sync::Mutex<VecDeque<Option<ScriptedRead>>>,
    /// Reads served so far.
    served: std::sync::atomic::AtomicUsize,
    /// The read (from 0) as which a loss is found.
    lose_at_read: Option<usize>,
    troubled: std::sync::Mutex<Option<Instant>>,
    lost: tokio::sync::Notify,
}

impl Flushed {
    /// Answering `reads`, its store last troubled at `troubled`.
    fn new(reads: impl IntoIterator<Item = Option<ScriptedRead>>, troubled: Option<Instant>) -> Flushed {
        let reads = std::sync::Mutex::new(reads.into_iter().collect());
        Flushed { reads, troubled: std::sync::Mutex::new(troubled), ..Flushed::default() }
    }

    fn losing_at_read(self, read: usize) -> Flushed {
        Flushed { lose_at_read: Some(read), ..self }
    }

    fn lose(&self) {
        *self.troubled.lock().unwrap() = Some(Instant::now());
        self.lost.notify_waiters();
    }
}

#[async_trait::async_trait]
impl Journal for Flushed {
    async fn append(&self, _lease: &Lease, _appending: Appending<'_>) -> Result<bool, StoreError> {
        Ok(true)
    }

    async fn read(&self, _key: &Key, _after: u64, _deadline: Instant) -> Result<Option<Entries>, StoreError> {
        let served = self.served.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if self.lose_at_read == Some(served) {
            self.lose();
        }
        let next = self.reads.lock().unwrap().pop_front();
        match next {
            Some(Some(read)) => read,
            Some(None) => std::future::pending().await,
            None => Err(StoreError::Unavailable("the script is over".into())),
        }
    }

    fn troubled_since(&self) -> Option<Instant> {
        *self.troubled.lock().unwrap()
    }

    async fn loss_found(&self) {
        self.lost.notified().await;
    }
}

/// Redis restarted empty, found by another command of the replica (or
/// by the mirror's own read, sent again on a connection made anew):
/// the mirror's reads never failed, and it waits for the journal all
/// the same, then checks that it still begins with its run.
#[tokio::test(start_paused = true)]
async fn a_journal_gone_just_after_its_store_was_troubled_is_waited_for_too() {
    type Script = VecDeque<ScriptedRead>;
    let (ours, theirs) = starts();
    let key = key("m5");
    let gone = |reads: usize| std::iter::repeat_with(|| Ok(None)).take(reads);
    let anew =
        |head: &Bytes| [entries(3, vec![text("час."), completed()]), entries(1, vec![head.clone(), text("Сей")])];
    let short = Duration::from_millis(1);
    let now = Instant::now();
    let cases: [(Script, Instant, _, _); 3] = [
        (gone(5).chain(anew(&ours)).collect(), now, Ending::Completed, (short, REAPPEAR_WAIT)),
        (gone(5).chain(anew(&theirs)).collect(), now, Ending::Failed(RESTARTED.into()), (short, REAPPEAR_WAIT)),
        // A trouble long past: nothing to wait for.
        (gone(1).collect(), now - REAPPEAR_WAIT, Ending::Failed(GONE.into()), (Duration::ZERO, short)),
    ];
    for (script, troubled, ends, (least, most)) in cases {
        let record = Arc::new(mirror_of(&[ours.clone(), text("Сей")], 1024));
        let journal = Arc::new(Flushed::new(script.into_iter().map(Some), Some(troubled)));
        let began = Instant::now();
        let followed = mirror(journal, key.clone(), record.clone(), 2, Some(ours.clone())).await;
        let took = began.elapsed();
        assert_ended(&record, followed, &ends);
        assert!(least <= took && took < most, "{ends:?} after {took:?}");
    }
}

/// Redis flushed while a mirror followed its call, and another run's
/// journal written under the key before the mirror read again: its
/// reads neither failed nor found the journal gone. Once its replica
/// notes the trouble (its mark gone), the mirror checks that the
/// journal still begins with its run before it reads on, rather than
/// take the other run's entries past its own for its run's.
#[tokio::test(start_paused = true)]
async fn a_journal_read_after_a_trouble_is_checked_to_begin_with_the_mirrors_run() {
    let (ours, theirs) = starts();
    let key = key("m6");
    for (head, ends) in [(theirs.clone(), Ending::Failed(RESTARTED.into())), (ours.clone(), Ending::Completed)] {
        let record = Arc::new(mirror_of(&[ours.clone(), text("Сей")], 1024));
        let script = [
            entries(3, vec![text("час ")]),
            // Served as the trouble is noted.
            entries(4, vec![text("ровно."), completed()]),
            // The check of the journal's first entry.
            entries(1, vec![head, text("Сей")]),
        ];
        let journal = Arc::new(Flushed::new(script.into_iter().map(Some), None).losing_at_read(1));
        let followed = mirror(journal, key.clone(), record.clone(), 2, Some(ours.clone())).await;
        assert_ended(&record, followed, &ends);
    }
}

/// A mirror blocked waiting for entries when its replica finds that
/// Redis lost its data: woken, it is not spoken from until it has
/// checked that the journal (written anew) still begins with its run,
/// and it ends if the journal is another run's.
#[tokio::test(start_paused = true)]
async fn a_mirror_waiting_for_entries_is_woken_by_a_loss_and_not_spoken_from_until_checked() {
    let (ours, theirs) = starts();
    let key = key("m7");
    for (head, ends) in [(ours.clone(), Ending::Completed), (theirs.clone(), Ending::Failed(RESTARTED.into()))] {
        let record = Arc::new(mirror_of(&[ours.clone(), text("Сей")], 1024));
        let script = [
            // Blocked until the loss is found.
            None,
            // Gone for now.
            Some(Ok(None)),
            Some(entries(3, vec![text("час."), completed()])),
            // The check of the journal's first entry.
            Some(entries(1, vec![head, text("Сей")])),
        ];
        let journal = Arc::new(Flushed::new(script, None));
        let mirroring = tokio::spawn(mirror(journal.clone(), key.clone(), record.clone(), 2, Some(ours.clone())));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(record.speakable(), "read on, not in doubt");
        journal.lose();
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!record.speakable(), "in doubt while the journal is gone");
        mirroring.await.unwrap();
        assert_eq!(record.view().0.ending, ends);
        assert_eq!(record.speakable(), ends == Ending::Completed);
    }
}

/// The writer of call `id`'s journal, under a lease taken in this
/// replica's memory (not a claim in the shared store), offered to
/// `store`: what the call's record sends it, where it says the call
/// stands, and its task.
fn writer_of(
    id: &str,
    journal: Arc<dyn Journal>,
    store: Option<Arc<dyn FlightStore>>,
) -> (mpsc::UnboundedSender<(Bytes, bool)>, watch::Receiver<Standing>, tokio::task::JoinHandle<()>) {
    let writing = Writing {
        journal,
        store,
        lease: Duration::from_secs(3),
        kept_ttl: Duration::from_secs(60),
        lease_lost: prometheus::IntCounter::new("lost", "Leases lost.").unwrap(),
    };
    let lease = Lease { key: Key::new("assistant", megamind_core::scenario::Handler::Run, id), token: Arc::new(()) };
    let (tap, entries) = mpsc::unbounded_channel();
    let (standing, told) = watch::channel(Standing::default());
    (tap, told, tokio::spawn(write(writing, lease, entries, standing)))
}

/// A shared store out of reach until told otherwise, which records
/// when a call was offered to it and leads every offer once reachable.
#[derive(Debug, Default)]
struct Returning {
    down: std::sync::atomic::AtomicBool,
    offers: std::sync::Mutex<Vec<(Instant, bool)>>,
}

#[async_trait::async_trait]
impl FlightStore for Returning {
    async fn begin(
        &self,
        _key: Key,
        _lease_ttl: Duration,
        _deadline: Instant,
        _may_lead: &mut (dyn FnMut() -> bool + Send),
    ) -> Result<Begin, StoreError> {
        unreachable!("a journal's writer only offers")
    }

    async fn complete(&self, _lease: Lease, _value: Bytes) -> Result<(), StoreError> {
        unreachable!("a journal's writer only offers")
    }

    async fn abandon(&self, _lease: Lease) -> Result<(), StoreError> {
        unreachable!("a journal's writer only offers")
    }

    async fn wait(&self, _waiter: &Waiter, _deadline: Instant) -> Result<Waited, StoreError> {
        unreachable!("a journal's writer only offers")
    }

    async fn purge_expired(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn usage(&self) -> Usage {
        Usage::default()
    }

    async fn share(&self, lease: &Lease, _ttl: Duration, _deadline: Instant) -> Result<Option<Begin>, StoreError> {
        let down = self.out_of_reach();
        self.offers.lock().unwrap().push((Instant::now(), down));
        Ok((!down).then(|| Begin::Lead(Lease { key: lease.key.clone(), token: Arc::new(()) })))
    }

    fn out_of_reach(&self) -> bool {
        self.down.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_begun_in_memory_offers_itself_a_margin_after_the_store_is_back() {
    let store = Arc::new(Returning::default());
    store.down.store(true, std::sync::atomic::Ordering::SeqCst);
    let journal = Arc::new(Flushed::default());
    let (tap, mut told, writer) = writer_of("m3", journal, Some(store.clone()));
    // The model streams a word every 50 ms.
    let gap = Duration::from_millis(50);
    let words = tokio::spawn(async move {
        while tap.send((Bytes::from_static(b"word"), false)).is_ok() {
            tokio::time::sleep(gap).await;
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    store.down.store(false, std::sync::atomic::Ordering::SeqCst);
    let back = Instant::now();
    let held = tokio::time::timeout(Duration::from_secs(5), told.wait_for(|standing| standing.claim.is_some()));
    held.await.expect("held in the store once it is back").expect("the writer goes on");
    let offers = store.offers.lock().unwrap().clone();
    assert!(offers.iter().any(|(_, down)| *down), "offered while the store was out of reach: {offers:?}");
    let offered = offers.iter().find(|(_, down)| !down).map(|(at, _)| *at - back).expect("offered once back");
    // Found back at its next offer (within SHARE_EVERY and a word), then offered a margin later.
    assert!(offered >= BACK_MARGIN && offered <= BACK_MARGIN + SHARE_EVERY + 2 * gap, "offered {offered:?} after");
    words.abort();
    writer.abort();
}

/// A journal whose appends go unanswered until `back`, recording when
/// each was tried.
#[derive(Debug)]
struct Unanswered {
    back: Instant,
    tried: std::sync::Mutex<Vec<Instant>>,
}

#[async_trait::async_trait]
impl Journal for Unanswered {
    async fn append(&self, _lease: &Lease, _appending: Appending<'_>) -> Result<bool, StoreError> {
        let now = Instant::now();
        self.tried.lock().unwrap().push(now);
        if now < self.back { Err(StoreError::Unavailable("down".into())) } else { Ok(true) }
    }

    async fn read(&self, _key: &Key, _after: u64, _deadline: Instant) -> Result<Option<Entries>, StoreError> {
        Ok(None)
    }
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_append_is_tried_again_soon_while_the_model_is_silent() {
    let start = Instant::now();
    let back = start + Duration::from_millis(1500);
    let journal = Arc::new(Unanswered { back, tried: std::sync::Mutex::default() });
    let (tap, mut told, writer) = writer_of("m4", journal.clone(), None);
    // One word, then the model is silent.
    tap.send((Bytes::from_static(b"word"), false)).unwrap();
    told.wait_for(|standing| standing.unheld).await.unwrap();
    tokio::time::sleep_until(back + 3 * HEARTBEAT).await;
    let tried: Vec<Duration> = journal.tried.lock().unwrap().iter().map(|at| *at - start).collect();
    let answered = tried.iter().position(|at| start + *at >= back).expect("tried again once back");
    assert!(tried[answered] - (back - start) <= UNANSWERED_RETRY, "found back soon: {tried:?}");
    assert!(tried[..answered].windows(2).all(|pair| pair[1] - pair[0] == UNANSWERED_RETRY), "{tried:?}");
    let after: Vec<Duration> = tried[answered..].windows(2).map(|pair| pair[1] - pair[0]).collect();
    assert!(after.iter().all(|gap| *gap == HEARTBEAT), "a heartbeat once answered: {tried:?}");
    assert!(!told.borrow().unheld, "held again");
    drop(tap);
    writer.abort();
}

#[tokio::test(start_paused = true)]
async fn a_mirror_says_what_the_runners_record_says() {
    let (tap, mut entries) = mpsc::unbounded_channel();
    let runner = CallRecord::journaled(crate::calls::record::Bound::new(1 << 20), tap);
    tokio::time::advance(Duration::from_millis(40)).await;
    runner.push(ModelEvent::TextDelta("Сей".into()));
    tokio::time::advance(Duration::from_millis(60)).await;
    runner.push(ModelEvent::TextDelta("час.".into()));
    runner.push(ModelEvent::Finish { reason: "stop".into() });
    runner.finish();
    let mut written = Vec::new();
    while let Ok((entry, last)) = entries.try_recv() {
        written.push(entry);
        assert_eq!(last, written.len() == 5, "only the end is last");
    }
    let mirror = mirror_of(latest_run(&written), 1 << 20);
    let timings = |record: &CallRecord| record.view().0.timings;
    assert_eq!(
        (timings(&mirror).first_event, timings(&mirror).ended),
        (timings(&runner).first_event, timings(&runner).ended)
    );
    assert_eq!(mirror.view(), runner.view());
    for count in 0..=3 {
        assert_eq!(mirror.view_at(count), runner.view_at(count), "the running call at {count} events");
    }
}

#[tokio::test(start_paused = true)]
async fn a_mirror_of_a_cut_answer_says_what_the_runners_record_says_at_every_mark() {
    let (tap, mut entries) = mpsc::unbounded_channel();
    // A runner's events cost more than a mirror's: their request id too.
    let id = "r".repeat(200);
    let bound = crate::calls::record::Bound::for_call(2 * (crate::calls::record::EVENT_COST + 200) + 5, &id);
    let runner = CallRecord::journaled(bound, tap);
    for piece in ["abc", "яяя", "d"] {
        tokio::time::advance(Duration::from_millis(10)).await;
        runner.push(ModelEvent::TextDelta(piece.into()));
    }
    runner.push(ModelEvent::Finish { reason: "length".into() });
    let written: Vec<Bytes> = std::iter::from_fn(|| entries.try_recv().ok().map(|(entry, _)| entry)).collect();
    let (view, mark) = runner.view();
    assert_eq!((view.truncated, mark), (true, Some(4)), "three events and the cut");
    // Fed one entry at a time, it holds at every step what the runner held.
    let mirror = CallRecord::mirror(1 << 20, tokio::time::Instant::now());
    let mut started = false;
    for (at, entry) in written.iter().enumerate() {
        apply(&mirror, std::slice::from_ref(entry), &mut started);
        let held = mirror.view().1.expect("running");
        assert_eq!(mirror.view_at(held), runner.view_at(held), "after entry {at}");
    }
    for mark in 0..=4 {
        assert_eq!(mirror.view_at(mark), runner.view_at(mark), "the running call at mark {mark}");
    }
}
