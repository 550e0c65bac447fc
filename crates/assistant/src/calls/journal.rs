//! A model call's journal: its events as the store's [`Journal`] keeps
//! them, written by the replica that runs the call and read by every other
//! one that needs it (`/continue`, `/llm/stream`, `/llm/answers`).
//!
//! Each entry is one [`Entry`] (`calls/entry.rs`). The runner's record
//! sends what it keeps through a [`Tap`](super::entry::Tap); [`write()`]
//! drains it in batches, one append per batch, the last one ending the
//! journal. [`mirror`] feeds a record on another replica from it.

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use megamind_core::store::{Appending, Begin, FlightStore, Journal, Key, Lease, redis::is_claim};
use tokio::{
    sync::{mpsc, watch},
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
/// How often a call the shared store does not hold is offered to it
/// ([`FlightStore::share`]).
const SHARE_EVERY: Duration = Duration::from_millis(250);
/// How long an offer may take.
const SHARE_WAIT: Duration = Duration::from_millis(50);
/// How long a call begun in this replica's memory while the shared store
/// was out of reach waits, once it finds the store back, before it offers
/// itself there. A runner whose claim the store lost (Redis restarted
/// empty) claims its call again at its next append, within a model batch,
/// an [`UNANSWERED_RETRY`] or an [`END_PAUSE`] of the store's return: the
/// call begun first, whose words are already out, should be the one that
/// goes on.
const BACK_MARGIN: Duration = Duration::from_millis(300);
/// How soon an append that went unanswered is tried again while the model
/// is silent (instead of at the next [`HEARTBEAT`]): a runner whose claim
/// Redis lost (it restarted empty) finds it lost within this of Redis's
/// return and claims the call again, before a call begun in another
/// replica's memory offers itself, [`BACK_MARGIN`] after its replica found
/// Redis back.
const UNANSWERED_RETRY: Duration = Duration::from_millis(200);
const _: () = assert!(UNANSWERED_RETRY.as_millis() < BACK_MARGIN.as_millis());
/// How long the end of a journal is tried again, the call over, while the
/// store does not take it: longer than a shared lease, so that a claim
/// lost meanwhile is found lost and offered again.
const END_TRIES_FOR: Duration = Duration::from_secs(10);
/// The pause between tries of a journal's end.
const END_PAUSE: Duration = Duration::from_millis(100);
/// How long a call that ended unheld by the shared store is offered to
/// it while that store is taken for down: a store back is found so within
/// a probe or two.
const END_WHILE_DOWN: Duration = Duration::from_secs(2);
/// Why this replica's record of a call ends that it ran while the shared
/// store was out of reach, and another replica runs.
pub(crate) const GAVE_WAY: &str = "another replica runs the model call, which this replica ran too while it could not \
                                   reach the shared store: open the stream anew, without Last-Event-ID";
/// Why a mirror of a call that another replica began again ends.
pub(crate) const RESTARTED: &str = "the replica running the model call went away; another replica started the call \
                                    again: open the stream anew, without Last-Event-ID";
/// Why a mirror ends whose call's claim ran out unended: its replica may
/// have died, or only lost Redis (a stall, a restart) for longer than the
/// lease, and then runs on unseen.
const UNHELD: &str = "the model call ended without an answer here: its replica went away or lost the shared store \
                      for longer than its lease; another replica may start the call again";
/// How long a reader that finds a journal gone just after its own read
/// failed, or its replica's store failed a command or came back, waits for
/// it to come back: Redis restarted empty knows no journal until
/// the call's runner, at its next append (within a [`HEARTBEAT`]), claims
/// the call again and writes it anew.
pub(crate) const REAPPEAR_WAIT: Duration = Duration::from_secs(2);
/// How often a journal that may come back is looked for meanwhile.
pub(crate) const REAPPEAR_POLL: Duration = Duration::from_millis(100);
/// Why a mirror ends whose call's journal is gone.
pub(crate) const GONE: &str = "the model call's journal is gone: its replica went away, or the shared store lost it";
/// Failed reads in a row after which a mirror gives up.
const MAX_READ_FAILURES: u32 = 20;

/// How the runner's task writes its call's journal.
#[derive(Debug, Clone)]
pub(crate) struct Writing {
    pub(crate) journal: Arc<dyn Journal>,
    /// The call's store, offered a call it does not hold (begun in this
    /// replica's memory, or its claim lost); `None` when replicas share
    /// nothing.
    pub(crate) store: Option<Arc<dyn FlightStore>>,
    /// The call's lease, renewed by every append but the last.
    pub(crate) lease: Duration,
    /// The journal's TTL: the answer's.
    pub(crate) kept_ttl: Duration,
    /// Counts a call whose lease ran out while it ran.
    pub(crate) lease_lost: prometheus::IntCounter,
}

/// Where the call stands in the shared store, as its writer tells the
/// call's task.
#[derive(Debug, Clone, Default)]
pub(crate) struct Standing {
    /// A claim in the shared store taken by an offer, which the outcome
    /// completes as well as the lease the call began with.
    pub(crate) claim: Option<Lease>,
    /// The shared store is not known to hold the call now: begun in this
    /// replica's memory, its claim lost, or its last append unanswered.
    /// Another replica may run it too, so its words wait.
    pub(crate) unheld: bool,
    /// Another replica holds the call there (it began it too): this
    /// replica's run gives way, its lease ended so that its waiters begin
    /// the call again and find the other one.
    pub(crate) taken: bool,
}

/// One place the journal is written: a lease, the entries it took, and
/// whether it took the end.
#[derive(Debug)]
struct Target {
    lease: Lease,
    written: u64,
    ended: bool,
}

/// Writes what `entries` brings to the journal of `lease`'s key, in
/// batches, until the last entry, renewing the lease every [`HEARTBEAT`]
/// while the model is silent; gives up on a lease in memory that no
/// longer holds the key. A failed append is tried again with the next
/// batch (the end, every [`END_PAUSE`] until [`END_TRIES_FOR`] has
/// passed): it may have been carried out all the same (a store that
/// answered late), so each append says how many entries went before it,
/// and the store skips those it has.
///
/// With a shared store, the call is offered to it ([`FlightStore::share`])
/// with each batch, every [`SHARE_EVERY`] at most, while it is not held
/// there: begun in this replica's memory while the store was out of
/// reach, or its claim lost (run out during a stall, or forgotten by a
/// Redis restarted empty). Offered, it is claimed there and the whole run
/// so far written anew, so that every replica follows it; or, held there by
/// another replica already, given way to (`standing` says so, and the
/// writing ends). A call begun here while the store was out of reach
/// waits [`BACK_MARGIN`] once it finds the store back, so that a runner
/// whose claim was lost claims its call again first; a runner offers its
/// call at once. The entries are kept for this while the call runs.
pub(crate) async fn write(
    writing: Writing,
    lease: Lease,
    mut entries: mpsc::UnboundedReceiver<(Bytes, bool)>,
    standing: watch::Sender<Standing>,
) {
    let store = writing.store.clone();
    // Begun in this replica's memory, not claimed in the shared store.
    let begun_here = !is_claim(&lease.token);
    let mut offer = store.is_some() && begun_here;
    let mut next_offer = Instant::now();
    // The first target is `lease`; with a shared store, a claim there once
    // it is offered.
    let mut targets = vec![Target { lease, written: 0, ended: false }];
    // Entries not yet written everywhere, from number `base + 1` on; with
    // a shared store, every entry of the run, which an offer writes anew.
    let (mut pending, mut base) = (Vec::new(), 0u64);
    let (mut end, mut ended_at) = (false, None);
    // The last offer found the shared store taken for down.
    let mut unreachable = false;
    // A claim was just found lost: offered at once, not after a wait.
    let mut at_once = false;
    // How long a silent model is waited for before the next append.
    let mut silence = HEARTBEAT;
    loop {
        if !end && !at_once {
            match tokio::time::timeout(silence, entries.recv()).await {
                Ok(Some((entry, last))) => {
                    pending.push(entry);
                    end = last;
                }
                // The record went without ending (its task was dropped).
                Ok(None) => return,
                // Nothing new: an empty append renews the lease.
                Err(_) => {}
            }
        } else if end && !at_once {
            // Only the end is left to write: tried again after a pause.
            tokio::time::sleep(END_PAUSE).await;
        }
        at_once = false;
        while !end {
            let Ok((entry, last)) = entries.try_recv() else { break };
            pending.push(entry);
            end = last;
        }
        let offer_now = store.as_ref().filter(|_| offer && Instant::now() >= next_offer);
        if offer_now.is_some_and(|store| unreachable && begun_here && !store.out_of_reach()) {
            // Back: a runner that held the call there before goes first.
            (unreachable, next_offer) = (false, Instant::now() + BACK_MARGIN);
        } else if let Some(store) = offer_now {
            next_offer = Instant::now() + SHARE_EVERY;
            let first = &targets[0].lease;
            unreachable = false;
            match store.share(first, writing.lease, Instant::now() + SHARE_WAIT).await {
                Ok(Some(Begin::Lead(claim))) => {
                    tracing::info!(key = %claim.key, "assistant: a model call the shared store did not hold is held there now");
                    standing.send_modify(|standing| standing.claim = Some(claim.clone()));
                    targets.push(Target { lease: claim, written: 0, ended: false });
                    offer = false;
                }
                Ok(Some(Begin::Wait(_) | Begin::Hit(_))) => {
                    tracing::info!(key = %first.key, "assistant: another replica runs a model call this one ran too; this one gives way");
                    standing.send_modify(|standing| standing.taken = true);
                    return;
                }
                Ok(None) => unreachable = true,
                // Out of reach for now, or no room there yet: tried again later.
                Ok(Some(Begin::Full | Begin::Refused)) | Err(_) => {}
            }
        }
        // The journal outlives the lease, so that a replica taking the call
        // over goes on after its entries; the ending append leaves the lease
        // to the outcome's completion.
        let renewal = (!end).then_some(writing.lease);
        let (mut lost, mut unanswered) = (false, false);
        for target in targets.iter_mut().filter(|target| !target.ended) {
            let new = usize::try_from(target.written - base).unwrap_or(usize::MAX).min(pending.len());
            let appending = Appending {
                entries: &pending[new..],
                from: target.written,
                end,
                max_len: MAX_ENTRIES,
                ttl: writing.kept_ttl,
                lease: renewal,
            };
            match writing.journal.append(&target.lease, appending).await {
                Ok(true) => {
                    target.written = base + pending.len() as u64;
                    target.ended = end;
                }
                Ok(false) => {
                    writing.lease_lost.inc();
                    if store.is_none() || !is_claim(&target.lease.token) {
                        tracing::warn!(key = %target.lease.key, "assistant: a running model call lost its lease; another caller may run it");
                        return;
                    }
                    tracing::warn!(key = %target.lease.key, "assistant: a running model call lost its claim in the shared store; it is offered again");
                    // Its claim is gone: it takes no more appends.
                    target.ended = true;
                    lost = true;
                }
                Err(error) => {
                    tracing::debug!(%error, key = %target.lease.key, end, "assistant: a journal append failed; tried again");
                    unanswered = true;
                }
            }
        }
        if lost {
            (offer, next_offer, at_once) = (true, Instant::now(), true);
        }
        silence = if unanswered { UNANSWERED_RETRY } else { HEARTBEAT };
        let unheld = offer || unanswered;
        standing.send_if_modified(|standing| std::mem::replace(&mut standing.unheld, unheld) != unheld);
        if end && !at_once {
            if targets.iter().all(|target| target.ended) && !offer {
                return;
            }
            // A store taken for down is found back within a second or so.
            let since = *ended_at.get_or_insert_with(Instant::now);
            if Instant::now() >= since + if unreachable { END_WHILE_DOWN } else { END_TRIES_FOR } {
                if offer {
                    // One per call while Redis is down, which is logged once already.
                    tracing::debug!(key = %targets[0].lease.key, "assistant: a model call the shared store does not hold ended before it could be offered there");
                } else {
                    tracing::warn!(key = %targets[0].lease.key, "assistant: the end of a model call's journal was not written");
                }
                return;
            }
        }
        // A claim in a shared store may be lost at any time: its entries stay.
        if store.is_none() {
            let everywhere = targets.iter().map(|target| target.written).min().unwrap_or(base);
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

/// Whether `bytes` are a run's start ([`Entry::Started`]), told by their tag.
fn is_start(bytes: &Bytes) -> bool {
    bytes.first() == Some(&b'S')
}

/// The start of a run among `entries`, if they hold it.
pub(crate) fn start_of(entries: &[Bytes]) -> Option<Bytes> {
    entries.iter().find(|bytes| is_start(bytes)).cloned()
}

/// Where the latest run of a call begins in `entries` (read from the
/// journal's first): after a runner died and another replica began the call
/// again, a new reader follows the new run alone.
pub(crate) fn latest_run(entries: &[Bytes]) -> &[Bytes] {
    let start = entries.iter().rposition(is_start).unwrap_or(0);
    &entries[start..]
}

/// How a mirror's following of its call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Followed {
    /// The call's own end was read: the mirror holds the whole call.
    ToItsEnd,
    /// Short of it: the call begun again, its claim let go, its journal
    /// gone, unreadable or out of reach. The mirror is no record of the
    /// call any more: its readers are told so, and readers to come read
    /// the journal anew.
    Short,
}

/// Feeds `record` what `entries` say, `started` saying whether its run's
/// start was read (and set once it is); how the following ended, once
/// the call has ended (or was begun again).
pub(crate) fn apply(record: &CallRecord, entries: &[Bytes], started: &mut bool) -> Option<Followed> {
    for bytes in entries {
        match Entry::decode(bytes) {
            Some(Entry::Started { .. }) if *started => {
                record.fail(RESTARTED);
                return Some(Followed::Short);
            }
            Some(Entry::Started { .. }) => *started = true,
            Some(Entry::Event { event, at }) => record.push_at(event, at),
            Some(Entry::Cut) => record.cut(),
            Some(Entry::Completed { at }) => {
                record.finish_at(at);
                return Some(Followed::ToItsEnd);
            }
            Some(Entry::Failed { reason, at }) => {
                record.fail_at(&reason, at);
                return Some(Followed::ToItsEnd);
            }
            None => {
                record.fail("the model call's journal holds what this server cannot read");
                return Some(Followed::Short);
            }
        }
    }
    None
}

/// Follows the journal of `key` after entry `after` into `record`
/// (`head` the start of the run it follows, when that was among what it
/// read) until the call ends, its journal goes (a runner that died: its
/// lease and the journal's TTL ran out), or the store stays out of reach.
/// After a failed read (Redis may have restarted empty meanwhile, and
/// another run's journal begun from its first entry), it checks that the
/// journal still begins with its run before it reads on. Says how it
/// ended.
pub(crate) async fn mirror(
    journal: Arc<dyn Journal>,
    key: Key,
    record: Arc<CallRecord>,
    mut after: u64,
    mut head: Option<Bytes>,
) -> Followed {
    let mut started = head.is_some();
    let (mut failures, mut failed) = (0, false);
    // When the journal was first found gone since the last failed read.
    let mut gone_since = None;
    // The store's last trouble when the journal was last read.
    let mut troubled = journal.troubled_since();
    loop {
        let read = tokio::select! {
            read = journal.read(&key, after, Instant::now() + MIRROR_WAIT) => read,
            // The store lost what it held: the journal under the key may be
            // another run's by now, read (and checked) at once.
            () = journal.loss_found() => {
                record.doubt(true);
                continue;
            }
        };
        match read {
            Ok(Some(read)) if read.entries.is_empty() && read.abandoned => {
                record.fail(UNHELD);
                return Followed::Short;
            }
            Ok(Some(read)) => {
                gone_since = None;
                // A store troubled since (a loss its mark shows, a connection
                // made anew) may hold another run's journal under the key by
                // now, never found gone by a read of this one: its entries
                // past this run's would be read as this run's.
                let last = journal.troubled_since();
                let anew = std::mem::replace(&mut troubled, last) != last;
                if failed || anew {
                    match begins_with(&*journal, &key, head.as_ref()).await {
                        Begins::Yes => failed = false,
                        Begins::No => {
                            record.fail(RESTARTED);
                            return Followed::Short;
                        }
                        // Not told: this read is not taken, and the check is
                        // made again before the next one is; a store that
                        // keeps failing it ends the mirror, as failed reads do.
                        Begins::Unknown => {
                            (failures, failed) = (failures + 1, true);
                            record.doubt(true);
                            if failures >= MAX_READ_FAILURES {
                                record.fail("the model call is out of reach: its journal's start cannot be read");
                                return Followed::Short;
                            }
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    }
                }
                failures = 0;
                record.doubt(false);
                if read.first > after.saturating_add(1) && !read.entries.is_empty() {
                    record.fail("the model call's journal lost events");
                    return Followed::Short;
                }
                if head.is_none() {
                    head = start_of(&read.entries);
                }
                after = read.last(after);
                let followed = apply(&record, &read.entries, &mut started);
                if let Some(followed) = followed.or(read.ended.then_some(Followed::ToItsEnd)) {
                    record.finish();
                    return followed;
                }
            }
            Ok(None)
                if (failed || reappear_until(&*journal).is_some_and(|until| until > Instant::now()))
                    && *gone_since.get_or_insert_with(Instant::now) + REAPPEAR_WAIT > Instant::now() =>
            {
                // Once back, it is checked to begin with this run still.
                failed = true;
                record.doubt(true);
                tokio::time::sleep(REAPPEAR_POLL).await;
            }
            Ok(None) => {
                record.fail(GONE);
                return Followed::Short;
            }
            Err(error) => {
                (failures, failed) = (failures + 1, true);
                if failures >= MAX_READ_FAILURES {
                    record.fail(&format!("the model call is out of reach: {error}"));
                    return Followed::Short;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Until when a journal that `journal`'s store says it lacks may come back:
/// [`REAPPEAR_WAIT`] after the store last failed a command, dropped a
/// connection or came back. A Redis restarted empty may have lost a journal
/// that its reader's own reads never failed on (their connection made
/// anew, or the drop found and the read sent again).
pub(crate) fn reappear_until(journal: &dyn Journal) -> Option<Instant> {
    journal.troubled_since().map(|since| since + REAPPEAR_WAIT)
}

/// What a check of a journal's first entry told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Begins {
    /// With the run followed, or as far as can ever be told: its start was
    /// not read, or the journal no longer holds its first entries.
    Yes,
    /// With another run's start.
    No,
    /// Not now: the read failed, timed out or found no journal.
    Unknown,
}

/// Whether the journal of `key` still begins with `head`.
async fn begins_with(journal: &dyn Journal, key: &Key, head: Option<&Bytes>) -> Begins {
    let Some(head) = head else { return Begins::Yes };
    match journal.read(key, 0, Instant::now() + SHARE_WAIT).await {
        Ok(Some(all)) if all.first > 1 => Begins::Yes,
        Ok(Some(all)) if all.entries.first().is_none_or(|first| first == head) => Begins::Yes,
        Ok(Some(_)) => Begins::No,
        Ok(None) | Err(_) => Begins::Unknown,
    }
}

#[cfg(test)]
mod tests;
