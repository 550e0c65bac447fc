//! What another replica, or another version of this server, may have left
//! in the shared store for a model call (its journal and its outcome), read
//! from any bytes as this replica reads them: for the fuzz target
//! `call_journal`, built with the `fuzzing` feature.

use bytes::{Bytes, BytesMut};

use super::{
    entry::Entry,
    journal::{self, apply, latest_run, mirror_of},
    outcome,
    record::{CallRecord, END_ALLOWANCE, EVENT_COST, Ending, View},
};
use crate::{
    backend::ModelEvent,
    jsonseq::{Format, parse_transcript, validate},
    llm::stream::{Sequencer, write_event},
};

const FORMATS: [Format; 4] = [Format::Auto, Format::ThinkingMl, Format::Text, Format::Jsonl];

/// Reads `data` as a call's stored outcome and journal and checks what
/// every replica makes of them; panics when an invariant breaks:
///
/// - an outcome reads back as it is written again (what a replica reads,
///   it would store alike);
/// - a mirror of the journal's latest run keeps its text within its
///   bound, ends failed when an entry of it cannot be read, is the same
///   however its entries are read in batches, and follows again as itself
///   from its own events;
/// - its readers read exactly its events, and the JSONSeq stream made of
///   them breaks no rule of the validator, whatever the call's end.
///
/// `data`: a byte for the answer's format (modulo 4), a byte for the
/// bound (64 bytes a step), a byte where the journal is cut into two
/// reads, a byte for the outcome's length and the outcome, then the
/// journal's entries, each after a byte of its length.
pub fn journal(data: &[u8]) {
    let [format, bound, cut, outcome_len, rest @ ..] = data else { return };
    let (stored, mut rest) = rest.split_at(usize::from(*outcome_len).min(rest.len()));
    let read = outcome::decode(stored);
    assert_eq!(outcome::decode(&outcome::encode(&read)), read, "an outcome read back otherwise");

    let mut entries = Vec::new();
    while let [len, tail @ ..] = rest {
        let (entry, tail) = tail.split_at(usize::from(*len).min(tail.len()));
        entries.push(Bytes::copy_from_slice(entry));
        rest = tail;
    }
    let max_bytes = 64 * (1 + usize::from(*bound));
    let run = latest_run(&entries);
    assert!(entries.ends_with(run), "the latest run is not the journal's end");
    let record = mirror_of(run, max_bytes);
    let View { events, ending, .. } = record.view().0;

    let text: usize = events.iter().filter(|e| !matches!(e, ModelEvent::Finish { .. })).map(|e| e.text_len()).sum();
    assert!(text <= max_bytes, "{text} bytes of text kept within a bound of {max_bytes}");
    let cost: usize = events.iter().map(|e| EVENT_COST + e.text_len()).sum();
    assert!(cost <= max_bytes + END_ALLOWANCE, "events costing {cost} within a bound of {max_bytes}");
    let unreadable = run.iter().position(|e| Entry::decode(e).is_none());
    let ended =
        run.iter().position(|e| matches!(Entry::decode(e), Some(Entry::Completed { .. } | Entry::Failed { .. })));
    if unreadable.is_some_and(|at| ended.is_none_or(|end| at < end)) {
        assert!(matches!(ending, Ending::Failed(_)), "an unreadable entry taken as {ending:?}");
    }

    // A mirror reads its journal in batches: where they are cut changes nothing.
    let (first, second) = run.split_at(usize::from(*cut).min(run.len()));
    let batched = CallRecord::mirror(max_bytes, tokio::time::Instant::now());
    let mut started = false;
    if apply(&batched, first, &mut started).is_none() {
        apply(&batched, second, &mut started);
    }
    // What it says, apart from when a reader ended it.
    let said = |record: &CallRecord| {
        let View { events, truncated, ending, .. } = record.view().0;
        (events, truncated, ending)
    };
    assert_eq!(said(&batched), said(&record), "read in two batches, another record");
    // And every version it had while it ran, by which a replica makes a
    // snapshot's parts again: the same, and cut only once the cut came.
    let mut mark = 0;
    while let Some(view) = record.view_at(mark) {
        assert_eq!(batched.view_at(mark).as_ref(), Some(&view), "the version at {mark} read in two batches");
        assert_eq!(view.events.len() + usize::from(view.truncated), mark, "the steps of the version at {mark}");
        mark += 1;
    }

    // Its events, journaled again, make the same record.
    let again = std::iter::once(Entry::started_now())
        .chain(events.iter().map(|event| Entry::Event { event: event.clone(), at: Default::default() }.encode()))
        .collect::<Vec<_>>();
    assert_eq!(mirror_of(&again, max_bytes).view().0.events, events, "its own events mirrored otherwise");

    let mut follower = record.follow();
    let mut read = Vec::new();
    while let Some(Some(event)) = futures_util::FutureExt::now_or_never(follower.next()) {
        read.push(event);
    }
    assert_eq!(read, events, "a reader read other events");

    // A stream of a call still running ends when its runner is found gone.
    let ending = match ending {
        Ending::Running => Ending::Failed(journal::GONE.into()),
        ending => ending,
    };
    let mut sequencer = Sequencer::new("fuzz", FORMATS[usize::from(*format) % FORMATS.len()]);
    let mut numbered = Vec::new();
    sequencer.start(&mut numbered);
    events.iter().for_each(|event| sequencer.model_event(event, &mut numbered));
    sequencer.end(&ending, &mut numbered);
    let mut sse = BytesMut::new();
    numbered.iter().for_each(|event| write_event(event, &mut sse));
    let (sent, cut_short) = parse_transcript(&String::from_utf8_lossy(&sse));
    assert!(!cut_short && sent.len() == numbered.len(), "{} events read back as {}", numbered.len(), sent.len());
    let violations = validate(&sent);
    assert!(violations.is_empty(), "{violations:#?}\n{events:#?}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(format: u8, bound: u8, cut: u8, stored: &[u8], entries: &[Bytes]) -> Vec<u8> {
        let mut data = vec![format, bound, cut, u8::try_from(stored.len()).unwrap()];
        data.extend_from_slice(stored);
        for entry in entries {
            data.push(u8::try_from(entry.len()).unwrap());
            data.extend_from_slice(entry);
        }
        data
    }

    fn event(event: ModelEvent, ms: u64) -> Bytes {
        Entry::Event { event, at: std::time::Duration::from_millis(ms) }.encode()
    }

    #[test]
    fn journals_a_replica_may_read_hold_every_invariant() {
        let text = |piece: &str, ms| event(ModelEvent::TextDelta(piece.into()), ms);
        let long = "слово ".repeat(20);
        let answered = [
            Entry::started_now(),
            event(ModelEvent::ReasoningDelta("думаю".into()), 5),
            text("Привет", 10),
            text(&long, 20),
            event(ModelEvent::Finish { reason: "stop".into() }, 30),
            event(ModelEvent::Usage { prompt_tokens: 3, completion_tokens: 4 }, 30),
            Entry::Completed { at: std::time::Duration::from_millis(31) }.encode(),
        ];
        let stored = outcome::encode(&Ok(Default::default()));
        for cut in [0, 2, 9] {
            for bound in [0, 1, 200] {
                journal(&input(1, bound, cut, &stored, &answered));
            }
        }
        let restarted = [Entry::started_now(), text("Сей", 1), Entry::started_now(), text("Привет", 1)];
        journal(&input(0, 3, 1, b"\xff", &restarted));
        let unreadable = [Entry::started_now(), text("Сей", 1), Bytes::from_static(b"Z?"), text("час", 2)];
        journal(&input(2, 3, 3, b"", &unreadable));
        let running = [Entry::started_now(), text("<final>Сей", 1)];
        journal(&input(1, 3, 1, b"", &running));
        journal(b"");
    }
}
