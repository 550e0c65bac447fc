use std::sync::Arc;

use futures_util::StreamExt;

use super::*;
use crate::{
    backend::EventSink,
    calls::record::{Bound, CallRecord},
    jsonseq::{parse_transcript, validate},
};

const HEARTBEAT: Duration = Duration::from_secs(15);

fn subscription(after: u64) -> Subscription {
    Subscription { format: Format::Auto, heartbeat: HEARTBEAT, after, delay: None }
}

fn text(piece: &str) -> ModelEvent {
    ModelEvent::TextDelta(piece.into())
}

/// The whole body of one subscriber, as text.
/// The next piece a stream writes, as text.
async fn next_text(body: &mut (impl Stream<Item = Result<Bytes, Infallible>> + Unpin)) -> String {
    String::from_utf8(body.next().await.expect("a piece").unwrap().to_vec()).unwrap()
}

async fn read_all(body: impl Stream<Item = Result<Bytes, Infallible>>) -> String {
    let chunks: Vec<_> = body.collect().await;
    let bytes: Vec<u8> = chunks.into_iter().flat_map(|chunk| chunk.unwrap().to_vec()).collect();
    String::from_utf8(bytes).unwrap()
}

fn assert_valid(transcript: &str) -> Vec<crate::jsonseq::Event> {
    let (events, more) = parse_transcript(transcript);
    assert!(!more);
    let violations = validate(&events);
    assert!(violations.is_empty(), "{violations:?}\n{transcript}");
    events
}

fn finished(events: &[ModelEvent]) -> Arc<CallRecord> {
    let record = Arc::new(CallRecord::new(1 << 20));
    for event in events {
        record.event(event.clone());
    }
    record.finish();
    record
}

/// The bound of the records below.
const MAX: usize = 64 * 1024;

/// The bytes a subscriber is sent of a call whose model gave `MAX` pieces
/// of one character, its record bounded by `bound`.
async fn streamed_bytes(id: &str, bound: Bound) -> usize {
    let record = Arc::new(CallRecord::bounded(bound));
    for _ in 0..MAX {
        record.event(text("a"));
    }
    record.finish();
    read_all(sse(id, &record, subscription(0), Shutdown::new()).expect("a stream")).await.len()
}

#[tokio::test(start_paused = true)]
async fn what_a_stream_sends_stays_near_its_records_bound_whatever_the_id_and_pieces() {
    let id = "r".repeat(256);
    let sent = streamed_bytes(&id, Bound::for_call(MAX, &id)).await;
    assert!(sent <= 2 * MAX, "{sent} bytes sent of a record of {MAX}");
    // Counted without the id, the same record is sent ten times over.
    let without = streamed_bytes(&id, Bound::new(MAX)).await;
    assert!(without > 8 * MAX, "{without} bytes sent of a record of {MAX}");
    let short = streamed_bytes("r-1", Bound::for_call(MAX, "r-1")).await;
    assert!(short <= 4 * MAX, "{short} bytes sent of a record of {MAX}");
}

#[tokio::test(start_paused = true)]
async fn a_finished_call_streams_valid_numbered_events_with_its_ids() {
    let record = finished(&[
        ModelEvent::ReasoningDelta("Думаю".into()),
        text("Сейчас "),
        text("полдень."),
        ModelEvent::Finish { reason: "stop".into() },
        ModelEvent::Usage { prompt_tokens: 7, completion_tokens: 3 },
    ]);
    let body = read_all(sse("r-1", &record, subscription(0), Shutdown::new()).expect("a stream")).await;
    let events = assert_valid(&body);
    let names: Vec<_> = events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names.first(), Some(&"status"));
    assert_eq!(&names[names.len() - 2..], ["final_end", "completed"]);
    for (n, event) in events.iter().enumerate() {
        assert_eq!(event.id.as_deref(), Some((n + 1).to_string().as_str()), "ids count from 1 without gaps");
        let data: Value = serde_json::from_str(&event.data).unwrap();
        assert_eq!(data["request_id"], "r-1");
        assert_eq!(data["message_id"], message_id("r-1"));
    }
    let final_text: String = events
        .iter()
        .filter(|e| e.name == "final_delta")
        .map(|e| serde_json::from_str::<Value>(&e.data).unwrap()["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(final_text, "Сейчас полдень.");
    let completed: Value = serde_json::from_str(&events.last().unwrap().data).unwrap();
    assert_eq!(completed["finish_reason"], "stop");
    assert_eq!(completed["usage"]["completion_tokens"], 3);
}

#[tokio::test(start_paused = true)]
async fn every_subscriber_reads_the_same_events_and_resumes_after_any_id() {
    let record = Arc::new(CallRecord::new(1 << 20));
    let early = tokio::spawn(read_all(sse("r", &record, subscription(0), Shutdown::new()).expect("a stream")));
    for piece in ["Раз. ", "Два. ", "Три."] {
        tokio::time::sleep(Duration::from_millis(300)).await;
        record.event(text(piece));
    }
    // Joins mid-answer: still reads from the first event.
    let late = tokio::spawn(read_all(sse("r", &record, subscription(0), Shutdown::new()).expect("a stream")));
    tokio::time::sleep(Duration::from_millis(300)).await;
    record.finish();
    let (early, late) = (early.await.unwrap(), late.await.unwrap());
    assert_eq!(early, late, "the same events under the same ids");
    let events = assert_valid(&early);

    for after in 0..events.len() as u64 {
        let resumed = read_all(sse("r", &record, subscription(after), Shutdown::new()).expect("a stream")).await;
        let (rest, _) = parse_transcript(&resumed);
        assert_eq!(rest, events[after as usize..], "resumed after {after}");
    }
    let last = events.len() as u64;
    assert!(matches!(sse("r", &record, subscription(last), Shutdown::new()), Err(Unserved::Ended)), "all sent");
    // An id the call never had is another run's: not "all sent".
    let past = sse("r", &record, subscription(1_000), Shutdown::new());
    assert!(matches!(past, Err(Unserved::Past { last: l }) if l == last), "past its last event");
    // Those left their slots: a new subscriber still reads from the first event.
    let again = read_all(sse("r", &record, subscription(0), Shutdown::new()).expect("a stream")).await;
    assert_eq!(again, early);
}

#[tokio::test(start_paused = true)]
async fn a_silent_model_gets_heartbeats_under_the_last_id() {
    let record = Arc::new(CallRecord::new(1 << 20));
    let mut body = Box::pin(sse("r", &record, subscription(0), Shutdown::new()).expect("a stream"));
    let first = next_text(&mut body).await;
    assert!(first.starts_with("id: 1\nevent: status\n"), "{first}");
    let started = Instant::now();
    let second = next_text(&mut body).await;
    assert_eq!(started.elapsed(), HEARTBEAT);
    assert!(second.starts_with("id: 1\nevent: heartbeat\n"), "{second}");
    record.event(text("Готово."));
    record.finish();
    let rest = read_all(body).await;
    assert_valid(&format!("{first}{second}{rest}"));
}

/// A client resumes after event 5 on a replica whose record has fewer yet
/// (its copy lags the runner's): a heartbeat meanwhile keeps the client's
/// last id at 5, or its next resume would be sent events 2 to 5 again.
#[tokio::test(start_paused = true)]
async fn a_heartbeat_before_the_resumed_events_keeps_the_last_id() {
    let record = Arc::new(CallRecord::new(1 << 20));
    let mut body = Box::pin(sse("r", &record, subscription(5), Shutdown::new()).expect("a stream"));
    let heartbeat = next_text(&mut body).await;
    assert!(heartbeat.starts_with("id: 5\nevent: heartbeat\n"), "{heartbeat}");
}

/// A client resumed after an event the call then never makes (an id of
/// another run of the call) is told so as the call ends, rather than left
/// with heartbeats, an end and, reconnecting, a 204 that stops it for good.
#[tokio::test(start_paused = true)]
async fn a_stream_resumed_past_the_call_s_last_event_ends_with_an_error() {
    let record = Arc::new(CallRecord::new(1 << 20));
    let body = tokio::spawn(read_all(sse("r", &record, subscription(50), Shutdown::new()).expect("a stream")));
    record.event(text("Готово."));
    record.finish();
    let body = body.await.unwrap();
    let (events, _) = parse_transcript(&body);
    let error = events.last().expect("an event");
    assert_eq!((error.name.as_str(), error.id.as_deref()), ("error", Some("50")), "{body}");
    let data: Value = serde_json::from_str(&error.data).unwrap();
    assert_eq!((data["code"].as_str(), data["retry"].as_bool()), (Some("past_last_event"), Some(false)), "{data}");
    assert!(data["message"].as_str().unwrap().contains("without Last-Event-ID"), "{data}");
}

#[tokio::test(start_paused = true)]
async fn a_failed_call_ends_with_error_then_completed() {
    let record = Arc::new(CallRecord::new(1 << 20));
    record.event(text("<thinking><phase id=\"1\"><title>План</title>шаг"));
    record.fail("no answer in time (call timeout)");
    let body = read_all(sse("r", &record, subscription(0), Shutdown::new()).expect("a stream")).await;
    let events = assert_valid(&body);
    let names: Vec<_> = events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(&names[names.len() - 2..], ["error", "completed"], "{names:?}");
    let error: Value = serde_json::from_str(&events[events.len() - 2].data).unwrap();
    assert_eq!(error["code"], "model_failed");
    assert!(error["message"].as_str().unwrap().contains("timeout"));
}

#[tokio::test(start_paused = true)]
async fn a_drain_ends_an_open_stream_with_a_retryable_error() {
    let record = Arc::new(CallRecord::new(1 << 20));
    record.event(text("Начало"));
    let shutdown = Shutdown::new();
    let reader = tokio::spawn(read_all(sse("r", &record, subscription(0), shutdown.clone()).expect("a stream")));
    tokio::time::sleep(Duration::from_secs(1)).await;
    shutdown.fire();
    let body = reader.await.unwrap();
    let events = assert_valid(&body);
    let last: Value = serde_json::from_str(&events.last().unwrap().data).unwrap();
    assert_eq!(
        (events.last().unwrap().name.as_str(), &last["code"], &last["retry"]),
        ("error", &json!("shutdown"), &json!(true))
    );
    let ids: Vec<_> = events.iter().map(|e| e.id.clone()).collect();
    assert_eq!(ids[ids.len() - 1], ids[ids.len() - 2], "under the last event's id: resuming skips nothing");
}

#[tokio::test(start_paused = true)]
async fn a_drain_ends_a_stream_far_behind_at_its_next_piece() {
    let pieces: Vec<ModelEvent> = (0..5000).map(|i| text(&format!("слово{i} "))).collect();
    let shutdown = Shutdown::new();
    let mut body = Box::pin(sse("r", &finished(&pieces), subscription(0), shutdown.clone()).expect("a stream"));
    let first = next_text(&mut body).await;
    shutdown.fire();
    let rest = read_all(body).await;
    let events = assert_valid(&format!("{first}{rest}"));
    assert_eq!(rest.matches("\nevent: ").count(), 1, "one event, the error: {rest}");
    let last = events.last().unwrap();
    assert_eq!(last.name, "error", "its events ready are left for the resume");
    assert_eq!(last.id, events[events.len() - 2].id, "under the last event's id");
}

#[tokio::test(start_paused = true)]
async fn subscribers_of_a_call_share_its_events_made_once() {
    let record = Arc::new(CallRecord::new(1 << 20));
    let first = tokio::spawn(read_all(sse("r", &record, subscription(0), Shutdown::new()).expect("a stream")));
    let second = tokio::spawn(read_all(sse("r", &record, subscription(0), Shutdown::new()).expect("a stream")));
    tokio::time::sleep(Duration::from_millis(10)).await;
    let held = record.shared(|| -> Rendered { unreachable!("made by the first subscriber") });
    for piece in ["Раз. ", "Два."] {
        record.event(text(piece));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    record.finish();
    let (first, second) = (first.await.unwrap(), second.await.unwrap());
    assert_eq!(first, second);
    assert_valid(&first);
    assert_eq!(held.lock().made(), first.matches("\nevent: ").count(), "{first}");
    drop(held);
    let again = read_all(sse("r", &record, subscription(0), Shutdown::new()).expect("a stream")).await;
    assert_eq!(again, first, "made again, the same, once no one held it");
}

#[tokio::test(start_paused = true)]
async fn events_every_subscriber_sent_are_let_go_and_a_late_one_makes_its_own_until_it_joins() {
    let record = Arc::new(CallRecord::new(1 << 20));
    for i in 0..300 {
        record.event(text(&format!("слово{i}. ")));
    }
    let (slow_tx, slow_rx) = tokio::sync::oneshot::channel::<()>();
    let fast = tokio::spawn(read_all(sse("r", &record, subscription(0), Shutdown::new()).expect("a stream")));
    // Holds its place at the first event until told to read.
    let slow_body = sse("r", &record, subscription(0), Shutdown::new()).expect("a stream");
    let slow = tokio::spawn(async move {
        let _ = slow_rx.await;
        read_all(slow_body).await
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    let held = record.shared(|| -> Rendered { unreachable!("made by the first subscriber") });
    assert_eq!(held.lock().base, 0, "the slow one has sent nothing: nothing is let go");
    let _ = slow_tx.send(());
    tokio::time::sleep(Duration::from_millis(10)).await;
    let (base, kept, made) = {
        let render = held.lock();
        (render.base, render.events.len(), render.made())
    };
    assert_eq!((base, kept), (made, 0), "both sent everything: all let go");

    let late = tokio::spawn(read_all(sse("r", &record, subscription(0), Shutdown::new()).expect("a stream")));
    tokio::time::sleep(Duration::from_millis(10)).await;
    let readers = held.lock().readers.iter().flatten().count();
    assert_eq!(readers, 3, "the late one made its own until it reached the others, then read theirs");
    record.event(text("конец."));
    record.finish();
    let (fast, slow, late) = (fast.await.unwrap(), slow.await.unwrap(), late.await.unwrap());
    assert_valid(&fast);
    assert_eq!(slow, fast);
    assert_eq!(late, fast, "the late one reads every event from the first, under the same ids");
}

#[tokio::test(start_paused = true)]
async fn a_lone_subscriber_resuming_midway_lets_go_of_what_it_has_read() {
    let record = Arc::new(CallRecord::new(1 << 20));
    for i in 0..600 {
        record.event(text(&format!("слово{i}. ")));
    }
    let body = sse("r", &record, subscription(200), Shutdown::new()).expect("a stream");
    let reader = tokio::spawn(read_all(body));
    tokio::time::sleep(Duration::from_millis(10)).await;
    let held = record.shared(|| -> Rendered { unreachable!("made by the subscriber") });
    let (base, kept, made) = {
        let render = held.lock();
        (render.base, render.events.len(), render.made())
    };
    assert_eq!((base, kept), (made, 0), "what it resumed after and what it sent are let go");
    record.event(text("конец."));
    record.finish();
    let resumed = reader.await.unwrap();
    let whole = read_all(sse("r", &record, subscription(0), Shutdown::new()).expect("a stream")).await;
    let (events, _) = parse_transcript(&whole);
    let (rest, _) = parse_transcript(&resumed);
    assert_eq!(rest, events[200..], "every event after the one it resumed after");
}

#[tokio::test(start_paused = true)]
async fn a_long_answer_is_written_in_bounded_pieces() {
    let pieces: Vec<ModelEvent> = (0..5000).map(|i| text(&format!("слово{i} "))).collect();
    let record = finished(&pieces);
    let chunks: Vec<_> = sse("r", &record, subscription(0), Shutdown::new()).expect("a stream").collect().await;
    assert!(chunks.len() > 5, "{} pieces", chunks.len());
    for chunk in &chunks {
        assert!(chunk.as_ref().unwrap().len() < 2 * MAX_WRITE_BYTES);
    }
}

#[test]
fn message_ids_are_stable_and_differ_by_call() {
    assert_eq!(message_id("a"), message_id("a"));
    assert_ne!(message_id("a"), message_id("b"));
    assert_eq!(message_id("a").len(), 20);
}

#[tokio::test(start_paused = true)]
async fn only_events_read_live_count_in_the_delay() {
    let delay = prometheus::Histogram::with_opts(prometheus::HistogramOpts::new("d", "d")).unwrap();
    let record = Arc::new(CallRecord::new(1 << 20));
    record.event(text("Раньше. "));
    let live = Subscription { delay: Some(delay.clone()), ..subscription(0) };
    let reader = tokio::spawn(read_all(sse("r", &record, live, Shutdown::new()).expect("a stream")));
    tokio::time::sleep(Duration::from_secs(1)).await;
    for piece in ["Раз. ", "Два."] {
        record.event(text(piece));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    record.finish();
    reader.await.unwrap();
    assert_eq!(delay.get_sample_count(), 2, "the event there before the subscriber came is not live");
    assert_eq!(delay.get_sample_sum(), 0.0, "paused time: written the instant it came");
}

#[tokio::test(start_paused = true)]
async fn events_are_made_a_few_ahead_of_the_subscriber_not_all_at_once() {
    let pieces: Vec<ModelEvent> = (0..2000).map(|i| text(&format!("слово{i} "))).collect();
    let record = finished(&pieces);
    let mut body = Box::pin(sse("r", &record, subscription(0), Shutdown::new()).expect("a stream"));
    let first = next_text(&mut body).await;
    let held = record.shared(|| -> Rendered { unreachable!("made by the subscriber") });
    let (made, kept) = {
        let render = held.lock();
        (render.made(), render.events.len())
    };
    assert!(first.matches("\nevent: ").count() <= AHEAD + 1, "{first}");
    assert!(made <= 2 * AHEAD + 2, "made {made} of some 2000: a slow reader buffers no more");
    assert!(kept <= AHEAD + 2, "kept {kept}");
    let rest = read_all(body).await;
    let whole = read_all(sse("r", &finished(&pieces), subscription(0), Shutdown::new()).expect("a stream")).await;
    assert_eq!(format!("{first}{rest}"), whole, "made a few at a time, the same events");
}

#[tokio::test(start_paused = true)]
async fn a_subscriber_falling_behind_still_gets_every_event_in_order_and_resumes_from_any_id() {
    let record = Arc::new(CallRecord::new(1 << 20));
    let fast = tokio::spawn(read_all(sse("r", &record, subscription(0), Shutdown::new()).expect("a stream")));
    let mut slow = Box::pin(sse("r", &record, subscription(0), Shutdown::new()).expect("a stream"));
    let mut slow_read = String::new();
    for i in 0..1000 {
        record.event(text(&format!("слово{i}. ")));
        if i % 100 == 0 {
            // Reads a piece now and then: always behind the model and the other one.
            let piece = slow.next().await.expect("a piece").unwrap();
            slow_read.push_str(std::str::from_utf8(&piece).unwrap());
        }
        tokio::task::yield_now().await;
    }
    record.finish();
    slow_read.push_str(&read_all(slow).await);
    let fast = fast.await.unwrap();
    assert_eq!(slow_read, fast, "the same events, in order, under the same ids");
    let events = assert_valid(&fast);
    for after in [1, 17, 500, events.len() as u64 - 1] {
        let resumed = read_all(sse("r", &record, subscription(after), Shutdown::new()).expect("a stream")).await;
        let ids: Vec<u64> = assert_resumed(&resumed);
        assert_eq!(ids, (after + 1..=events.len() as u64).collect::<Vec<_>>(), "after {after}");
        let from = fast.find(&format!("id: {}\n", after + 1)).unwrap();
        assert_eq!(resumed, fast[from..], "after {after}");
    }
    assert!(sse("r", &record, subscription(events.len() as u64), Shutdown::new()).is_err(), "nothing after the last");
}

fn assert_resumed(transcript: &str) -> Vec<u64> {
    let (events, more) = parse_transcript(transcript);
    assert!(!more);
    events.iter().map(|event| event.id.as_deref().unwrap().parse().unwrap()).collect()
}
