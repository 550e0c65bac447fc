//! A model call's journal: its events as the store's [`Journal`] keeps
//! them, written by the replica that runs the call and read by every other
//! one that needs it (`/continue`, `/llm/stream`, `/llm/answers`).
//!
//! Each entry is one [`Entry`] (`calls/entry.rs`). The runner's record
//! sends what it keeps through a [`Tap`](super::entry::Tap); [`write`]
//! drains it in batches, one append per batch, the last one ending the
//! journal. [`mirror`] feeds a record on another replica from it.

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use megamind_core::store::{Appending, Begin, FlightStore, Journal, Key, Lease, redis::is_claim};
use tokio::{
    sync::{mpsc, oneshot},
    time::Instant,
};

use super::{entry::Entry, record::CallRecord};

/// Entries a journal keeps at most: more than a record within its bound
/// ever holds, so that nothing is cut from its start.
pub(crate) const MAX_ENTRIES: usize = 1 << 16;
/// How long a mirror waits for the next entry before it looks again.
const MIRROR_WAIT: Duration = Duration::from_secs(1);
/// How often a runner with nothing new to write renews its lease with an
/// empty append: a third of the shortest lease (a shared store's).
pub(crate) const HEARTBEAT: Duration = Duration::from_secs(1);
/// How often a call begun in this replica's memory while the shared store
/// was out of reach is offered to it ([`FlightStore::share`]).
const SHARE_EVERY: Duration = Duration::from_millis(250);
/// How long an offer may take.
const SHARE_WAIT: Duration = Duration::from_millis(50);
/// Why this replica's record of a call ends that it began while the
/// shared store was out of reach, and another replica runs.
pub(crate) const GAVE_WAY: &str = "the model call was begun here while the shared store was out of reach, and another \
                                   replica runs it: open the stream anew, without Last-Event-ID";
/// Why a mirror of a call that another replica began again ends.
pub(crate) const RESTARTED: &str = "the replica running the model call went away; another replica started the call \
                                    again: open the stream anew, without Last-Event-ID";
/// Why a mirror ends whose call's claim ran out unended: its replica may
/// have died, or only lost Redis (a stall, a restart) for longer than the
/// lease, and then runs on unseen.
const UNHELD: &str = "the model call ended without an answer here: its replica went away or lost the shared store \
                      for longer than its lease; another replica may start the call again";
/// Why a mirror ends whose call's journal is gone.
const GONE: &str = "the model call's journal is gone: its replica went away, or the shared store lost it";
/// Failed reads in a row after which a mirror gives up.
const MAX_READ_FAILURES: u32 = 20;

/// How the runner's task writes its call's journal.
#[derive(Debug, Clone)]
pub(crate) struct Writing {
    pub(crate) journal: Arc<dyn Journal>,
    /// The call's store, asked to share a lease taken in this replica's
    /// memory once the shared store is back; `None` when replicas share
    /// nothing.
    pub(crate) store: Option<Arc<dyn FlightStore>>,
    /// The call's lease, renewed by every append but the last.
    pub(crate) lease: Duration,
    /// The journal's TTL: the answer's.
    pub(crate) kept_ttl: Duration,
    /// Counts a call whose lease ran out while it ran.
    pub(crate) lease_lost: prometheus::IntCounter,
}

/// How a call begun in this replica's memory while the shared store was
/// out of reach stands once it is back.
#[derive(Debug)]
pub(crate) enum Shared {
    /// Claimed in the shared store too, its journal so far copied there:
    /// the outcome completes this lease as well as the one in memory.
    Claimed(Lease),
    /// Another replica holds the call there (it began it too): this
    /// replica's run gives way, its lease ended so that its waiters
    /// begin the call again and find the other one.
    Taken,
    /// Neither (what the call's task takes a writer that said nothing
    /// for): the call's lease was the shared store's from the start, or
    /// the store stayed out of reach.
    Alone,
}

/// Writes what `entries` brings to the journal of `lease`'s key, in
/// batches, until the last entry, renewing the lease every [`HEARTBEAT`]
/// while the model is silent; gives up on a lease that no longer holds the
/// key. A failed append is tried again with the next batch: it may have
/// been carried out all the same (a store that answered late), so each
/// append says how many entries went before it, and the store skips those
/// it has.
///
/// A lease this replica took in its own memory while the shared store was
/// out of reach is offered to the shared store with each batch, every
/// [`SHARE_EVERY`] at most, until it is back ([`FlightStore::share`]): the call is then claimed there
/// and its journal so far copied, so that every replica follows it, or,
/// held there by another replica already, given way to (`shared` is told
/// at once, and the writing ends).
pub(crate) async fn write(
    writing: Writing,
    lease: Lease,
    mut entries: mpsc::UnboundedReceiver<(Bytes, bool)>,
    shared: oneshot::Sender<Shared>,
) {
    let mut shared = Some(shared);
    let mut sharing = writing.store.clone().filter(|_| !is_claim(&lease.token));
    let mut next_share = Instant::now();
    // Where the entries go, each with the count of those it took; the
    // first is `lease`, a second the shared store's claim once it is back.
    let mut targets = vec![(lease, 0u64)];
    // Entries not yet written everywhere, from number `base + 1` on; while
    // the call may yet be shared, all of them.
    let (mut pending, mut base) = (Vec::new(), 0u64);
    let mut end = false;
    while !end {
        match tokio::time::timeout(HEARTBEAT, entries.recv()).await {
            Ok(Some((entry, last))) => {
                pending.push(entry);
                end = last;
            }
            // The record went without ending (its task was dropped).
            Ok(None) => return,
            // Nothing new: an empty append renews the lease.
            Err(_) => {}
        }
        while !end {
            let Ok((entry, last)) = entries.try_recv() else { break };
            pending.push(entry);
            end = last;
        }
        if let Some(store) = sharing.as_ref().filter(|_| Instant::now() >= next_share) {
            next_share = Instant::now() + SHARE_EVERY;
            let local = &targets[0].0;
            match store.share(local, writing.lease, Instant::now() + SHARE_WAIT).await {
                Ok(Some(Begin::Lead(claim))) => {
                    tracing::info!(key = %claim.key, "assistant: a model call begun while the shared store was away is shared now");
                    if let Some(tell) = shared.take() {
                        let _ = tell.send(Shared::Claimed(claim.clone()));
                    }
                    targets.push((claim, 0));
                    sharing = None;
                }
                Ok(Some(Begin::Wait(_) | Begin::Hit(_))) => {
                    tracing::info!(key = %local.key, "assistant: a model call begun while the shared store was away runs on another replica; this one gives way");
                    if let Some(tell) = shared.take() {
                        let _ = tell.send(Shared::Taken);
                    }
                    return;
                }
                // Still out of reach, or no room there yet: tried again later.
                Ok(Some(Begin::Full | Begin::Refused) | None) | Err(_) => {}
            }
        }
        // The journal outlives the lease, so that a replica taking the call
        // over goes on after its entries; the ending append leaves the lease
        // to the outcome's completion.
        let renewal = (!end).then_some(writing.lease);
        for (lease, written) in &mut targets {
            let new = usize::try_from(*written - base).unwrap_or(usize::MAX).min(pending.len());
            let appending = Appending {
                entries: &pending[new..],
                from: *written,
                end,
                max_len: MAX_ENTRIES,
                ttl: writing.kept_ttl,
                lease: renewal,
            };
            match writing.journal.append(lease, appending).await {
                Ok(true) => *written = base + pending.len() as u64,
                Ok(false) => {
                    tracing::warn!(key = %lease.key, "assistant: a running model call lost its lease; another replica may run it");
                    writing.lease_lost.inc();
                    return;
                }
                Err(error) if end => {
                    tracing::warn!(%error, key = %lease.key, "assistant: the end of a model call's journal was not written");
                }
                Err(error) => {
                    tracing::debug!(%error, key = %lease.key, "assistant: a journal append failed; tried again");
                }
            }
        }
        if sharing.is_none() {
            let everywhere = targets.iter().map(|(_, written)| *written).min().unwrap_or(base);
            pending.drain(..usize::try_from(everywhere - base).unwrap_or(usize::MAX).min(pending.len()));
            base = everywhere;
        }
    }
}

/// A mirror of the call whose journal begins with `entries` (read from
/// its first).
pub(crate) fn mirror_of(entries: &[Bytes], max_bytes: usize) -> CallRecord {
    let started = match entries.first().and_then(|first| Entry::decode(first)) {
        Some(Entry::Started { unix_us }) => {
            let ago = Duration::from_micros(super::entry::unix_micros().saturating_sub(unix_us));
            Instant::now().checked_sub(ago).unwrap_or_else(Instant::now)
        }
        _ => Instant::now(),
    };
    let record = CallRecord::mirror(max_bytes, started);
    apply(&record, entries, &mut false);
    record
}

/// Whether `entries` hold a run's start.
pub(crate) fn has_start(entries: &[Bytes]) -> bool {
    entries.iter().any(|bytes| bytes.first() == Some(&b'S'))
}

/// Where the latest run of a call begins in `entries` (read from the
/// journal's first): after a runner died and another replica began the call
/// again, a new reader follows the new run alone.
pub(crate) fn latest_run(entries: &[Bytes]) -> &[Bytes] {
    let start = entries.iter().rposition(|bytes| bytes.first() == Some(&b'S')).unwrap_or(0);
    &entries[start..]
}

/// Feeds `record` what `entries` say, `started` saying whether its run's
/// start was read (and set once it is); `true` once the call has ended (or
/// was begun again).
pub(crate) fn apply(record: &CallRecord, entries: &[Bytes], started: &mut bool) -> bool {
    for bytes in entries {
        match Entry::decode(bytes) {
            Some(Entry::Started { .. }) if *started => {
                record.fail(RESTARTED);
                return true;
            }
            Some(Entry::Started { .. }) => *started = true,
            Some(Entry::Event { event, at }) => record.push_at(event, at),
            Some(Entry::Cut) => record.cut(),
            Some(Entry::Completed { at }) => {
                record.finish_at(at);
                return true;
            }
            Some(Entry::Failed { reason, at }) => {
                record.fail_at(&reason, at);
                return true;
            }
            None => {
                record.fail("the model call's journal holds what this server cannot read");
                return true;
            }
        }
    }
    false
}

/// Follows the journal of `key` after entry `after` into `record`
/// (`started` when the run's start was among what it read) until
/// the call ends, its journal goes (a runner that died: its lease and the
/// journal's TTL ran out), or the store stays out of reach.
pub(crate) async fn mirror(
    journal: Arc<dyn Journal>,
    key: Key,
    record: Arc<CallRecord>,
    mut after: u64,
    mut started: bool,
) {
    let mut failures = 0;
    loop {
        match journal.read(&key, after, Instant::now() + MIRROR_WAIT).await {
            Ok(Some(read)) if read.entries.is_empty() && read.abandoned => {
                record.fail(UNHELD);
                return;
            }
            Ok(Some(read)) => {
                failures = 0;
                if read.first > after.saturating_add(1) && !read.entries.is_empty() {
                    record.fail("the model call's journal lost events");
                    return;
                }
                after = read.last(after);
                if apply(&record, &read.entries, &mut started) || read.ended {
                    record.finish();
                    return;
                }
            }
            Ok(None) => {
                record.fail(GONE);
                return;
            }
            Err(error) => {
                failures += 1;
                if failures >= MAX_READ_FAILURES {
                    record.fail(&format!("the model call is out of reach: {error}"));
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::ModelEvent;

    #[test]
    fn a_run_begun_again_ends_its_mirrors_and_new_readers_read_it_alone() {
        let at = Duration::from_millis(5);
        let text = |piece: &str| Entry::Event { event: ModelEvent::TextDelta(piece.into()), at }.encode();
        let first_run = [Entry::started_now(), text("Сей")];
        let mirror = mirror_of(latest_run(&first_run), 1024);
        let second_run = [Entry::started_now(), text("Сейчас."), Entry::Completed { at }.encode()];
        assert!(apply(&mirror, &second_run, &mut true), "the new start ends the mirror");
        let early = mirror_of(&[], 1024);
        assert!(!apply(&early, &first_run, &mut false), "a mirror made before the start reads it as the start");
        assert_eq!(early.text(), "Сей");
        assert_eq!(mirror.snapshot().2, super::super::record::Ending::Failed(RESTARTED.into()));
        let journal: Vec<Bytes> = first_run.iter().chain(&second_run).cloned().collect();
        let fresh = mirror_of(latest_run(&journal), 1024);
        assert_eq!(fresh.text(), "Сейчас.", "a new reader reads the new run alone");
        assert_eq!(fresh.snapshot().2, super::super::record::Ending::Completed);
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
        assert_eq!(mirror.snapshot(), runner.snapshot());
        assert_eq!(mirror.timings().first_event, runner.timings().first_event);
        assert_eq!(mirror.timings().ended, runner.timings().ended);
    }
}
