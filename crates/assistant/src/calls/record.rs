//! The recording of one model call: every [`ModelEvent`] its backend
//! reported, in order, for readers that follow the call from its start,
//! each at its own pace, however late they join (the JSONSeq stream,
//! `/continue`).
//!
//! Append-only and bounded by bytes (text plus a fixed cost per event). Past
//! the bound the text is cut at a character boundary, later pieces are not
//! kept and the record says it was truncated: a follower reads a prefix of
//! the answer, never one with holes. How the call ended (`Finish`, `Usage`,
//! a few bytes each) still fits in a small allowance past the bound. The
//! record ends when the call does, or when its writer goes away without
//! saying so; a follower then gets the rest and `None`.
//!
//! The record of the replica that runs the call also writes every event it
//! keeps to the call's journal ([`super::journal`]), through a channel a
//! task drains; a replica that follows the call from elsewhere keeps a
//! mirror record fed from the journal, with the times the runner gave.
//!
//! The events sit in a `tokio::sync::watch`: the writer appends under its
//! lock (never held across an await) and wakes every follower; a follower
//! keeps only its own position, so a slow one holds nothing back and costs
//! nothing but that position. They are kept back to back in one buffer in
//! the journal's form (a kind byte, the µs they came at, the text), each
//! found by where it ends: a token costs its text and a dozen bytes, not
//! an allocation of its own; a follower reads an event as a `ModelEvent`.

use std::{
    any::Any,
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use megamind_core::text::clip;
use tokio::{sync::watch, time::Instant};

use super::entry::{self, Entry, Tap};
use crate::backend::{EventSink, ModelEvent};

/// Room past the bound for how the call ended.
pub(crate) const END_ALLOWANCE: usize = 1024;
/// What an event counts against the bound besides its text: more than
/// its header, its numbers and its place take.
pub(crate) const EVENT_COST: usize = 32;

/// What a record keeps at most: its bytes, each event counted at its text
/// and a cost of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bound {
    max_bytes: usize,
    event_cost: usize,
}

impl Bound {
    /// At most about `max_bytes`, an event counting its text and [`EVENT_COST`].
    pub(crate) fn new(max_bytes: usize) -> Bound {
        Bound { max_bytes, event_cost: EVENT_COST }
    }

    /// As [`Bound::new`], each event also counting the length of
    /// `request_id`, which every event of the call's stream and of its
    /// `/llm/answers` repeats: what a reader is sent then stays within a
    /// small multiple of the bound, whatever id the client chose and however
    /// small the model's pieces (a character each, with a 256-byte id, made
    /// 10 MB of a 1 MiB record).
    pub(crate) fn for_call(max_bytes: usize, request_id: &str) -> Bound {
        Bound { max_bytes, event_cost: EVENT_COST + request_id.len() }
    }
}

/// The recording of one call; the writer and the source of followers.
#[derive(Debug)]
pub(crate) struct CallRecord {
    bound: Bound,
    started: Instant,
    tx: watch::Sender<Recording>,
    /// What the call's readers share (the stream's events, made once),
    /// kept while one of them holds it.
    shared: Mutex<Weak<dyn Any + Send + Sync>>,
    /// Where the runner's record sends what it keeps, for the journal.
    tap: Option<Tap>,
    /// Set on a mirror while its journal may be another run's (the store
    /// lost it lately) and it has not checked: not spoken from meanwhile.
    in_doubt: AtomicBool,
}

#[derive(Debug)]
struct Recording {
    started: Instant,
    /// The events as journal entries ([`Entry::Event`]), back to back: they
    /// say when each came, in µs from the start (a u32 spans 71 minutes,
    /// past any call's timeout).
    log: Vec<u8>,
    /// Where each event ends in `log` (within the bound: a u32 spans it).
    ends: Vec<u32>,
    bytes: usize,
    /// How many events it held when the text was cut at the bound, if it
    /// was: the journal's `Cut` entry comes after them.
    cut_at: Option<usize>,
    finished: bool,
    /// Why the call failed, when it did.
    failure: Option<String>,
    /// From the start to the first event and to the end.
    first_event: Option<Duration>,
    ended: Option<Duration>,
}

/// How a recorded call ended, as far as the record knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// Still running.
    Running,
    /// It answered.
    Completed,
    /// It failed, for this reason (as the error says it).
    Failed(String),
}

/// When a recorded call's events came, from its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timings {
    /// To the first event (a token of the answer or of its reasoning).
    pub first_event: Option<Duration>,
    /// To the end; `None` while it runs.
    pub ended: Option<Duration>,
    /// To the end once it ended; while it runs, to its latest event, so
    /// that what a record says of a running call is a function of its
    /// events alone.
    pub elapsed: Duration,
}

/// What a call's answer is rendered from, read at once.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct View {
    /// The events.
    pub(crate) events: Vec<ModelEvent>,
    /// Whether the text was cut at the bound.
    pub(crate) truncated: bool,
    /// How the call ended, or that it runs.
    pub(crate) ending: Ending,
    /// When its events came.
    pub(crate) timings: Timings,
}

/// Bytes kept of a failure's reason.
const MAX_FAILURE_BYTES: usize = 512;

/// One reader of a call's events, from the first.
#[derive(Debug)]
pub struct Follower {
    rx: watch::Receiver<Recording>,
    next: usize,
}

impl CallRecord {
    /// An empty record keeping at most about `max_bytes`.
    #[cfg(test)]
    pub(crate) fn new(max_bytes: usize) -> CallRecord {
        CallRecord::bounded(Bound::new(max_bytes))
    }

    /// An empty record keeping at most `bound`.
    #[cfg(test)]
    pub(crate) fn bounded(bound: Bound) -> CallRecord {
        CallRecord::started_at(bound, Instant::now(), None)
    }

    /// The runner's record: keeping at most `bound`, sending what it keeps
    /// to `tap`, its start first.
    pub(crate) fn journaled(bound: Bound, tap: Tap) -> CallRecord {
        let _ = tap.send((Entry::started_now(), false));
        CallRecord::started_at(bound, Instant::now(), Some(tap))
    }

    /// A mirror of a call that started at `started`, fed from its journal:
    /// its events cost no more than the runner's did, so it keeps
    /// everything the runner kept within `max_bytes`.
    pub(crate) fn mirror(max_bytes: usize, started: Instant) -> CallRecord {
        CallRecord::started_at(Bound::new(max_bytes), started, None)
    }

    fn started_at(bound: Bound, started: Instant, tap: Option<Tap>) -> CallRecord {
        let recording = Recording {
            started,
            log: Vec::new(),
            ends: Vec::new(),
            bytes: 0,
            cut_at: None,
            finished: false,
            failure: None,
            first_event: None,
            ended: None,
        };
        let shared = Mutex::new(Weak::<()>::new() as Weak<dyn Any + Send + Sync>);
        CallRecord { bound, started, tx: watch::Sender::new(recording), shared, tap, in_doubt: AtomicBool::new(false) }
    }

    /// Appends `event`, within the bound; nothing once finished.
    pub(crate) fn push(&self, event: ModelEvent) {
        self.push_at(event, self.started.elapsed());
    }

    /// Appends `event`, which came `at` into the call.
    pub(crate) fn push_at(&self, event: ModelEvent, at: Duration) {
        let at = whole_micros(at);
        self.tx.send_if_modified(|recording| {
            let (kept, cut) = recording.push(event, at, self.bound);
            if kept {
                if recording.first_event.is_none() {
                    recording.first_event = Some(at);
                }
                if let (Some(tap), Some(entry)) = (&self.tap, recording.entry(recording.ends.len() - 1)) {
                    let _ = tap.send((Bytes::copy_from_slice(entry), false));
                }
            }
            if let (Some(tap), true) = (&self.tap, cut) {
                let _ = tap.send((Entry::Cut.encode(), false));
            }
            kept || cut
        });
    }

    /// On a mirror: the text was cut at the bound after the events it
    /// holds, as the runner's journal says. (A runner's record cuts as it
    /// pushes, and journals its cut then.)
    pub(crate) fn cut(&self) {
        debug_assert!(self.tap.is_none(), "a runner's cut is journaled as it pushes");
        self.tx.send_if_modified(|recording| !recording.finished && recording.cut());
    }

    /// Hands the call's end (`failure`, or its completion) to the journal's
    /// writer, not yet to its followers here; returns when it ended, for
    /// [`CallRecord::finish_at`] or [`CallRecord::fail_at`] to end it alike
    /// once the journal is known to hold it.
    pub(crate) fn end_journal(&self, failure: Option<&str>) -> Duration {
        let at = whole_micros(self.started.elapsed());
        let recording = self.tx.borrow();
        if let (Some(tap), false) = (&self.tap, recording.finished) {
            let _ = tap.send((end_entry(failure.or(recording.failure.as_deref()), at), true));
        }
        at
    }

    /// The call is over: followers get the rest, then `None`.
    pub(crate) fn finish(&self) {
        self.finish_at(self.started.elapsed());
    }

    /// The call ended `at` into it.
    pub(crate) fn finish_at(&self, at: Duration) {
        let at = whole_micros(at);
        self.tx.send_if_modified(|recording| {
            let first = !std::mem::replace(&mut recording.finished, true);
            if first {
                recording.ended = Some(at);
                if let Some(tap) = &self.tap {
                    let _ = tap.send((end_entry(recording.failure.as_deref(), at), true));
                }
            }
            first
        });
    }

    /// The call failed for `reason` and is over.
    pub(crate) fn fail(&self, reason: &str) {
        self.fail_at(reason, self.started.elapsed());
    }

    /// The call failed for `reason`, `at` into it.
    pub(crate) fn fail_at(&self, reason: &str, at: Duration) {
        self.tx.send_if_modified(|recording| {
            if recording.finished {
                return false;
            }
            recording.failure = Some(clip(reason, MAX_FAILURE_BYTES).to_owned());
            true
        });
        self.finish_at(at);
    }

    /// Whether the record is finished: it then changes no more.
    pub(crate) fn has_ended(&self) -> bool {
        self.tx.borrow().finished
    }

    /// Whether a hop may speak from this record now: it has not failed,
    /// and, a mirror, it is not in doubt ([`CallRecord::doubt`]).
    pub(crate) fn speakable(&self) -> bool {
        !self.in_doubt.load(Ordering::Acquire) && self.tx.borrow().failure.is_none()
    }

    /// Marks a mirror in doubt (its journal may be another run's by now)
    /// or, checked, no longer.
    pub(crate) fn doubt(&self, in_doubt: bool) {
        self.in_doubt.store(in_doubt, Ordering::Release);
    }

    /// How the call ended, so far.
    #[cfg(test)]
    pub(crate) fn ending(&self) -> Ending {
        self.tx.borrow().ending()
    }

    /// The call as it is now, and, while it runs, its mark: how many of
    /// its steps (its events, and its cut when the text was cut) it holds,
    /// by which [`CallRecord::view_at`] gives the same view again.
    pub(crate) fn view(&self) -> (View, Option<usize>) {
        let recording = self.tx.borrow();
        let mark = recording.steps();
        let view = recording.running_view(mark);
        if !recording.finished {
            return (view, Some(mark));
        }
        let elapsed = recording.ended.unwrap_or_default();
        let timings = Timings { first_event: recording.first_event, ended: recording.ended, elapsed };
        let truncated = recording.cut_at.is_some();
        (View { truncated, ending: recording.ending(), timings, ..view }, None)
    }

    /// The running call as [`CallRecord::view`] saw it at `mark`, though it
    /// has gone on or ended since: the same on every replica that holds as
    /// many steps, for they come from the journal in one order, with the
    /// events' times. `None` while it holds fewer.
    pub(crate) fn view_at(&self, mark: usize) -> Option<View> {
        let recording = self.tx.borrow();
        (mark <= recording.steps()).then(|| recording.running_view(mark))
    }

    /// Waits until the record holds `mark` steps or has ended, by
    /// `deadline`: a mirror fed from the journal may lag the runner's
    /// record by a few entries. Whether it holds them.
    pub(crate) async fn reached(&self, mark: usize, deadline: Instant) -> bool {
        let mut rx = self.tx.subscribe();
        let reached = rx.wait_for(|recording| recording.finished || recording.steps() >= mark);
        match tokio::time::timeout_at(deadline, reached).await {
            Ok(Ok(recording)) => recording.steps() >= mark,
            _ => self.tx.borrow().steps() >= mark,
        }
    }

    /// What the call's readers share: the one a reader still holds, else
    /// `make`'s, held by the readers only (it goes with the last of them).
    pub(crate) fn shared<T: Any + Send + Sync>(&self, make: impl FnOnce() -> T) -> Arc<T> {
        let mut slot = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(held) = upgrade(&slot) {
            return held;
        }
        let made = Arc::new(make());
        let weak: Weak<dyn Any + Send + Sync> = Arc::downgrade(&made) as Weak<dyn Any + Send + Sync>;
        *slot = weak;
        made
    }

    /// What the call's readers share, if a reader holds it.
    pub(crate) fn held<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        upgrade(&self.shared.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// A reader from the first event.
    pub(crate) fn follow(&self) -> Follower {
        Follower { rx: self.tx.subscribe(), next: 0 }
    }

    /// What the record holds, in bytes.
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.tx.borrow().bytes
    }

    /// The answer's text so far: its text pieces, joined.
    pub(crate) fn text(&self) -> String {
        let recording = self.tx.borrow();
        let mut text = String::new();
        for index in 0..recording.ends.len() {
            if let Some(ModelEvent::TextDelta(piece)) = recording.event(index) {
                text.push_str(&piece);
            }
        }
        text
    }
}

/// What `slot` holds, if a reader holds it and it is a `T`.
fn upgrade<T: Any + Send + Sync>(slot: &Weak<dyn Any + Send + Sync>) -> Option<Arc<T>> {
    slot.upgrade().and_then(|held| held.downcast::<T>().ok())
}

/// The journal's last entry: the call ended `at`, failed for `failure` or
/// completed.
fn end_entry(failure: Option<&str>, at: Duration) -> Bytes {
    match failure {
        Some(reason) => Entry::Failed { reason: clip(reason, MAX_FAILURE_BYTES).to_owned(), at },
        None => Entry::Completed { at },
    }
    .encode()
}

/// `at` in whole µs, as a journal keeps it: a mirror's times are then the
/// runner's to the digit.
fn whole_micros(at: Duration) -> Duration {
    Duration::from_micros(u64::try_from(at.as_micros()).unwrap_or(u64::MAX))
}

impl EventSink for CallRecord {
    fn event(&self, event: ModelEvent) {
        self.push(event);
    }
}

impl Recording {
    fn ending(&self) -> Ending {
        match (&self.failure, self.finished) {
            (Some(reason), _) => Ending::Failed(reason.clone()),
            (None, true) => Ending::Completed,
            (None, false) => Ending::Running,
        }
    }

    /// The bytes of event `index`, as the journal keeps it.
    fn entry(&self, index: usize) -> Option<&[u8]> {
        let end = *self.ends.get(index)? as usize;
        let start = index.checked_sub(1).map_or(0, |before| self.ends[before] as usize);
        self.log.get(start..end)
    }

    /// Event `index`.
    fn event(&self, index: usize) -> Option<ModelEvent> {
        match Entry::decode(self.entry(index)?)? {
            Entry::Event { event, .. } => Some(event),
            _ => None,
        }
    }

    /// Its events, and its cut once the text was cut: the entries of the
    /// journal that a running view is made of, in their order.
    fn steps(&self) -> usize {
        self.ends.len() + usize::from(self.cut_at.is_some())
    }

    /// The text was cut after the events held; whether that is news.
    fn cut(&mut self) -> bool {
        let news = self.cut_at.is_none();
        self.cut_at.get_or_insert(self.ends.len());
        news
    }

    /// The first `mark` steps as a running call's view: its events, cut
    /// at the bound if the cut is among them.
    fn running_view(&self, mark: usize) -> View {
        let truncated = self.cut_at.is_some_and(|cut_at| cut_at < mark);
        let count = mark - usize::from(truncated);
        let mut events = Vec::with_capacity(count);
        let mut last = Duration::ZERO;
        for index in 0..count {
            if let Some(Entry::Event { event, at }) = self.entry(index).and_then(Entry::decode) {
                events.push(event);
                last = at;
            }
        }
        let first_event = (count > 0).then_some(self.first_event).flatten();
        View {
            events,
            truncated,
            ending: Ending::Running,
            timings: Timings { first_event, ended: None, elapsed: last },
        }
    }

    /// Whether `event`, or a part of it, was kept (as having come `at`),
    /// and whether the text was cut by it; a cut comes after what was kept.
    fn push(&mut self, event: ModelEvent, at: Duration, bound: Bound) -> (bool, bool) {
        let (kept, cut) = self.keep(event, at, bound);
        (kept, cut && self.cut())
    }

    /// As [`Recording::push`], but only saying that the bound cut the text,
    /// which [`Recording::cut`] records after what was kept.
    fn keep(&mut self, event: ModelEvent, at: Duration, bound: Bound) -> (bool, bool) {
        if self.finished {
            return (false, false);
        }
        let (event, cut) = match event {
            ModelEvent::TextDelta(text) => match self.fit(text, bound) {
                (Some(text), cut) => (ModelEvent::TextDelta(text), cut),
                (None, cut) => return (false, cut),
            },
            ModelEvent::ReasoningDelta(text) => match self.fit(text, bound) {
                (Some(text), cut) => (ModelEvent::ReasoningDelta(text), cut),
                (None, cut) => return (false, cut),
            },
            end => {
                if self.bytes + bound.event_cost + end.text_len() > bound.max_bytes + END_ALLOWANCE {
                    return (false, true);
                }
                (end, false)
            }
        };
        let (was, cost) = (self.log.len(), bound.event_cost + event.text_len());
        Entry::Event { event, at }.encode_into(&mut self.log);
        let Ok(end) = u32::try_from(self.log.len()) else {
            // Past what a u32 spans: no bound is that large, but kept a prefix all the same.
            self.log.truncate(was);
            return (false, true);
        };
        self.bytes += cost;
        self.ends.push(end);
        (true, cut)
    }

    /// What of `text` fits, if anything, and whether the bound cuts it
    /// now; past the bound no more is kept, so that the text stays a prefix.
    fn fit(&self, text: String, bound: Bound) -> (Option<String>, bool) {
        if self.cut_at.is_some() {
            return (None, false);
        }
        let room = bound.max_bytes.saturating_sub(self.bytes + bound.event_cost);
        if text.len() <= room {
            return (Some(text), false);
        }
        let kept = clip(&text, room);
        ((!kept.is_empty()).then(|| kept.to_owned()), true)
    }
}

impl Follower {
    /// The next event, waiting for it while the call runs; `None` once the
    /// call is over and every event was read.
    pub async fn next(&mut self) -> Option<ModelEvent> {
        loop {
            {
                let recording = self.rx.borrow_and_update();
                if let Some(event) = recording.event(self.next) {
                    self.next += 1;
                    return Some(event);
                }
                if recording.finished {
                    return None;
                }
            }
            if self.rx.changed().await.is_err() {
                // The writer went away without finishing: what it wrote is all.
                let event = self.rx.borrow().event(self.next);
                self.next += usize::from(event.is_some());
                return event;
            }
        }
    }

    /// Marks what the record holds now as seen: [`Follower::changed`] waits
    /// for what comes after.
    pub(crate) fn mark_seen(&mut self) {
        self.rx.borrow_and_update();
    }

    /// Waits for a change of the record since it was last seen; at once
    /// when its writer went away (the record will not change again).
    pub(crate) async fn changed(&mut self) {
        // An error is the writer gone: nothing more will come, and the
        // reader reads the end now.
        let _ = self.rx.changed().await;
    }

    /// Whether the record stopped keeping text at its bound.
    pub fn truncated(&self) -> bool {
        self.rx.borrow().cut_at.is_some()
    }

    /// How the call ended: once [`Follower::next`] gave `None`, `Completed`
    /// or `Failed`; a writer gone without a word failed.
    pub fn ending(&self) -> Ending {
        match self.rx.borrow().ending() {
            Ending::Running if self.rx.has_changed().is_err() => {
                Ending::Failed("the call ended without an answer".into())
            }
            ending => ending,
        }
    }

    /// Whether every event recorded so far was read: the next one, when it
    /// comes, is read live.
    pub fn caught_up(&self) -> bool {
        self.rx.borrow().ends.len() <= self.next
    }

    /// When the event read last came.
    pub fn arrived(&self) -> Option<Instant> {
        let recording = self.rx.borrow();
        let at = entry::at_of(recording.entry(self.next.checked_sub(1)?)?)?;
        Some(recording.started + at)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn text(piece: &str) -> ModelEvent {
        ModelEvent::TextDelta(piece.into())
    }

    async fn drain(follower: &mut Follower) -> Vec<ModelEvent> {
        let mut events = Vec::new();
        while let Some(event) = follower.next().await {
            events.push(event);
        }
        events
    }

    #[tokio::test(start_paused = true)]
    async fn every_follower_reads_every_event_from_the_start_at_its_own_pace() {
        let record = std::sync::Arc::new(CallRecord::new(1 << 20));
        let mut early = record.follow();
        let writer = record.clone();
        let call = tokio::spawn(async move {
            for piece in ["Сей", "час ", "полдень."] {
                tokio::time::sleep(Duration::from_millis(100)).await;
                writer.event(text(piece));
            }
            writer.event(ModelEvent::Finish { reason: "stop".into() });
            writer.finish();
        });
        assert_eq!(early.next().await, Some(text("Сей")), "the early follower waits for the first piece");
        tokio::time::sleep(Duration::from_millis(150)).await;
        // Joins after two pieces and still reads from the first.
        let mut late = record.follow();
        assert_eq!(late.next().await, Some(text("Сей")));
        assert_eq!(late.next().await, Some(text("час ")));
        assert_eq!(record.text(), "Сейчас ", "the text so far, without waiting");
        call.await.unwrap();
        assert_eq!(record.text(), "Сейчас полдень.");
        let whole = [text("Сей"), text("час "), text("полдень."), ModelEvent::Finish { reason: "stop".into() }];
        assert_eq!(drain(&mut early).await, whole[1..]);
        assert_eq!(drain(&mut late).await, whole[2..]);
        assert_eq!(drain(&mut record.follow()).await, whole, "after the end, from the start again");
        assert_eq!(early.next().await, None, "and it stays over");
        record.push(text("late"));
        assert_eq!(drain(&mut record.follow()).await, whole, "nothing is kept past the end");
    }

    #[test]
    fn the_journal_learns_the_end_before_the_records_followers_do() {
        let (tap, mut entries) = tokio::sync::mpsc::unbounded_channel();
        let record = CallRecord::journaled(Bound::new(1 << 20), tap);
        record.push(text("Полдень."));
        let at = record.end_journal(Some("the model failed"));
        let sent: Vec<_> = std::iter::from_fn(|| entries.try_recv().ok()).collect();
        let (last, end) = sent.last().expect("entries for the journal");
        assert!(*end, "the last entry ends the journal");
        let reason = "the model failed".to_owned();
        assert_eq!(Entry::decode(last), Some(Entry::Failed { reason, at }));
        assert_eq!(record.ending(), Ending::Running, "followers here do not know it yet");
        record.fail_at("the model failed", at);
        assert_eq!(record.ending(), Ending::Failed("the model failed".into()));
    }

    #[tokio::test]
    async fn text_past_the_bound_is_cut_to_a_prefix_but_the_end_is_kept() {
        let record = CallRecord::new(2 * EVENT_COST + 5);
        record.push(ModelEvent::ReasoningDelta("abc".into()));
        record.push(text("яяя"));
        record.push(text("d"));
        record.push(ModelEvent::Finish { reason: "length".into() });
        record.push(ModelEvent::Usage { prompt_tokens: 1, completion_tokens: 2 });
        record.finish();
        let mut follower = record.follow();
        let events = drain(&mut follower).await;
        let ended = [
            ModelEvent::Finish { reason: "length".into() },
            ModelEvent::Usage { prompt_tokens: 1, completion_tokens: 2 },
        ];
        assert_eq!(events[..2], [ModelEvent::ReasoningDelta("abc".into()), text("я")], "cut on a character boundary");
        assert_eq!(events[2..], ended, "no text after the cut, but how it ended");
        assert!(follower.truncated());
        assert!(record.bytes() <= 2 * EVENT_COST + 5 + END_ALLOWANCE);

        let flood = CallRecord::new(64);
        for _ in 0..1000 {
            flood.push(ModelEvent::Usage { prompt_tokens: 1, completion_tokens: 1 });
        }
        assert!(flood.bytes() <= 64 + END_ALLOWANCE, "ends are bounded too: {}", flood.bytes());
    }

    #[tokio::test]
    async fn a_writer_gone_without_finishing_ends_its_followers() {
        let record = CallRecord::new(1024);
        let mut follower = record.follow();
        record.push(text("a"));
        assert_eq!(follower.ending(), Ending::Running);
        drop(record);
        assert_eq!(drain(&mut follower).await, [text("a")]);
        assert!(matches!(follower.ending(), Ending::Failed(_)), "{:?}", follower.ending());
    }

    #[tokio::test(start_paused = true)]
    async fn a_running_calls_view_is_the_same_however_late_it_is_asked_for() {
        let record = CallRecord::new(1024);
        tokio::time::advance(Duration::from_millis(40)).await;
        record.push(text("a"));
        tokio::time::advance(Duration::from_millis(60)).await;
        record.push(text("b"));
        let (view, mark) = record.view();
        assert_eq!(
            (view.events.as_slice(), view.ending.clone(), mark),
            ([text("a"), text("b")].as_slice(), Ending::Running, Some(2))
        );
        let ms = Duration::from_millis;
        assert_eq!(view.timings, Timings { first_event: Some(ms(40)), ended: None, elapsed: ms(100) });
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(record.view(), (view.clone(), Some(2)), "time alone changes nothing");

        record.push(text("c"));
        record.finish();
        assert_eq!(record.view_at(2), Some(view), "nor later events, nor the end");
        assert_eq!(record.view_at(1).map(|v| (v.events, v.timings.elapsed)), Some((vec![text("a")], ms(40))));
        assert_eq!(record.view_at(4), None, "more than it holds");
        let (ended, mark) = record.view();
        assert_eq!(
            (ended.ending, ended.timings.elapsed, ended.events.len(), mark),
            (Ending::Completed, ms(5100), 3, None)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_cut_answers_views_are_the_same_at_every_mark_however_it_goes_on() {
        let record = CallRecord::new(2 * EVENT_COST + 5);
        let mut seen = Vec::new();
        let mut look = |record: &CallRecord| {
            let (view, mark) = record.view();
            seen.push((mark.expect("running"), view));
        };
        look(&record);
        for event in [
            text("abc"),
            text("яяя"),
            text("nothing of it fits"),
            ModelEvent::Finish { reason: "length".into() },
            ModelEvent::Usage { prompt_tokens: 1, completion_tokens: 2 },
        ] {
            tokio::time::advance(Duration::from_millis(10)).await;
            record.push(event);
            look(&record);
        }
        let marks: Vec<(usize, bool)> = seen.iter().map(|(mark, view)| (*mark, view.truncated)).collect();
        // The cut came with the piece cut short: its view says so at once.
        assert_eq!(marks, [(0, false), (1, false), (3, true), (3, true), (4, true), (5, true)]);
        assert_eq!(seen[2].1.events, [text("abc"), text("я")]);
        record.finish();
        for (mark, view) in seen {
            assert_eq!(record.view_at(mark), Some(view), "the view at {mark}, asked again once it ended");
        }
        assert_eq!(record.view_at(2).map(|view| (view.events.len(), view.truncated)), Some((2, false)));
        assert_eq!(record.view_at(6), None);

        // Past the bound with nothing of the piece kept: the cut is a step of its own.
        let record = CallRecord::new(EVENT_COST + 3);
        record.push(text("abc"));
        let before = record.view();
        record.push(text("d"));
        let (after, mark) = record.view();
        assert_eq!((before.1, mark, before.0.events == after.events), (Some(1), Some(2), true));
        assert!(!before.0.truncated && after.truncated, "two versions, told apart by their marks");
    }

    #[tokio::test(start_paused = true)]
    async fn a_view_at_events_not_yet_held_waits_for_them_by_its_deadline() {
        let record = Arc::new(CallRecord::new(1024));
        record.push(text("a"));
        let writer = record.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            writer.push(text("b"));
        });
        assert!(record.reached(2, Instant::now() + Duration::from_secs(1)).await);
        let started = Instant::now();
        assert!(!record.reached(3, started + Duration::from_millis(100)).await);
        assert_eq!(started.elapsed(), Duration::from_millis(100), "given up at its deadline");
        record.finish();
        assert!(!record.reached(3, Instant::now() + Duration::from_secs(60)).await, "an ended call holds no more");
        assert_eq!(started.elapsed(), Duration::from_millis(100), "and says so at once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_ends_the_record_with_its_reason_and_times() {
        let record = CallRecord::new(1024);
        let mut follower = record.follow();
        tokio::time::advance(Duration::from_millis(40)).await;
        record.push(text("a"));
        tokio::time::advance(Duration::from_millis(60)).await;
        record.fail(&"x".repeat(10_000));
        record.push(text("late"));
        assert_eq!(drain(&mut follower).await, [text("a")]);
        let Ending::Failed(reason) = follower.ending() else { panic!("{:?}", follower.ending()) };
        assert_eq!(reason.len(), MAX_FAILURE_BYTES, "the reason is bounded");
        let timings = record.view().0.timings;
        assert_eq!(timings.first_event, Some(Duration::from_millis(40)));
        assert_eq!(timings.ended, Some(Duration::from_millis(100)));
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(record.view().0.timings.elapsed, Duration::from_millis(100), "the end stops the clock");

        let ok = CallRecord::new(1024);
        assert_eq!(ok.ending(), Ending::Running);
        ok.finish();
        ok.fail("too late");
        assert_eq!(ok.ending(), Ending::Completed, "a finished call cannot fail afterwards");
    }

    #[test]
    fn readers_share_one_thing_while_one_holds_it() {
        let record = CallRecord::new(1024);
        let first = record.shared(|| String::from("made once"));
        let second = record.shared(|| String::from("made twice"));
        assert!(Arc::ptr_eq(&first, &second), "the one held is shared");
        drop((first, second));
        assert_eq!(*record.shared(|| String::from("made again")), "made again", "gone with the last holder");
        let other = record.shared(|| 7u32);
        assert_eq!(*other, 7, "another type is made anew");
    }
}
