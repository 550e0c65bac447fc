//! A model call's answer as a JSONSeq v1 event stream for screen
//! clients: `GET /llm/stream/{request_id}` writes these events as
//! Server-Sent Events.
//!
//! [`Sequencer`] turns the call's [record](crate::calls::record) into numbered
//! events: `status` first, then what the [mapper](crate::jsonseq::mapper)
//! makes of the model's text and reasoning, then `final_end` and
//! `completed` — or, when the call failed, `error` and `completed`. Every
//! `data` carries `message_id` and `request_id`. The numbering depends on the
//! record alone, so every subscriber, however late, reads the same events
//! under the same ids, and `Last-Event-ID: N` resumes after event N of any
//! earlier connection.
//!
//! [`sse`] is one subscriber. The events of a call are made and written as
//! SSE text once, for all its subscribers (the call's `Rendered`, kept while
//! one of them reads), as the first of them asks for them, and no further
//! than `AHEAD` (64) events past the one it writes next: a subscriber far
//! behind the model makes its events as it writes them, so that a slow
//! server or client buffers nothing more. Each subscriber copies what it has
//! not sent yet, as its client reads (the body is pulled). Events every
//! subscriber has sent are let go, so a call's subscribers hold the events
//! between the slowest and the newest, not the whole answer; one that joins
//! after some were let go makes its own from the record until it reaches
//! the others, then reads theirs. A subscriber that does not read holds its
//! place and nothing else — no buffer grows for it; the server's send
//! timeout closes its connection, and it resumes with `Last-Event-ID`.
//! Heartbeats (every `heartbeat_secs` while the model is silent) are written
//! with the id of the event before them, so resuming after one skips
//! nothing; so is the `error` (`code: "shutdown"`, `retry: true`) that ends
//! an open stream when the server drains.

use std::{
    collections::VecDeque,
    convert::Infallible,
    sync::{Arc, Mutex},
    time::Duration,
};

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::{FutureExt, Stream, stream};
use megamind_core::scenario::Shutdown;
use serde_json::{Map, Value, json};
use tokio::time::{Instant, sleep_until};

use crate::{
    backend::ModelEvent,
    calls::record::{CallRecord, Ending, Follower},
    jsonseq::mapper::{Format, Mapper, SeqEvent},
};

/// Bytes written at most in one piece of the body: a subscriber far behind
/// (or new to a long answer) catches up in pieces of about this size.
const MAX_WRITE_BYTES: usize = 16 * 1024;
/// Events made at most past the next one the subscriber asking for them
/// writes: enough for several events per write when it is behind.
const AHEAD: usize = 64;

/// One numbered event.
#[derive(Debug, Clone, PartialEq)]
pub struct Numbered {
    /// Its place in the stream, from 1.
    pub id: u64,
    /// Its `event:` name.
    pub name: &'static str,
    /// Its `data`, ids included.
    pub data: Map<String, Value>,
}

/// The events of one call, numbered.
#[derive(Debug)]
pub struct Sequencer {
    mapper: Mapper,
    request_id: String,
    message_id: String,
    last: u64,
    finish_reason: Option<String>,
    usage: Option<(u64, u64)>,
    mapped: Vec<SeqEvent>,
}

impl Sequencer {
    /// The events of call `request_id`, its answer read as `format`.
    pub fn new(request_id: &str, format: Format) -> Sequencer {
        Sequencer {
            mapper: Mapper::new(format),
            request_id: request_id.to_owned(),
            message_id: message_id(request_id),
            last: 0,
            finish_reason: None,
            usage: None,
            mapped: Vec::new(),
        }
    }

    /// The id of the last event made.
    pub fn last_id(&self) -> u64 {
        self.last
    }

    /// The first event: the call's `status`.
    pub fn start(&mut self, out: &mut Vec<Numbered>) {
        let mut data = Map::new();
        data.insert("state".into(), "started".into());
        self.push("status", data, out);
    }

    /// The events of one of the call's model events.
    pub fn model_event(&mut self, event: &ModelEvent, out: &mut Vec<Numbered>) {
        let mut mapped = std::mem::take(&mut self.mapped);
        match event {
            ModelEvent::TextDelta(text) => self.mapper.text(text, &mut mapped),
            ModelEvent::ReasoningDelta(text) => self.mapper.reasoning(text, &mut mapped),
            ModelEvent::Finish { reason } => self.finish_reason = Some(reason.clone()),
            ModelEvent::Usage { prompt_tokens, completion_tokens } => {
                self.usage = Some((*prompt_tokens, *completion_tokens))
            }
        }
        self.push_mapped(&mut mapped, out);
        self.mapped = mapped;
    }

    /// The last events, by how the call ended (nothing while it runs).
    pub fn end(&mut self, ending: &Ending, out: &mut Vec<Numbered>) {
        let mut completed = Map::new();
        match ending {
            Ending::Running => return,
            Ending::Completed => {
                let mut mapped = std::mem::take(&mut self.mapped);
                self.mapper.finish(&mut mapped);
                self.push_mapped(&mut mapped, out);
                completed.insert("status".into(), "ok".into());
            }
            Ending::Failed(reason) => {
                let data = json!({"code": "model_failed", "message": reason, "retry": false});
                self.push("error", into_map(data), out);
                completed.insert("status".into(), "failed".into());
            }
        }
        if let Some(reason) = &self.finish_reason {
            completed.insert("finish_reason".into(), reason.clone().into());
        }
        if let Some(usage) = self.usage() {
            completed.insert("usage".into(), usage);
        }
        self.push("completed", completed, out);
    }

    /// Why the model stopped, once it said.
    pub fn finish_reason(&self) -> Option<&str> {
        self.finish_reason.as_deref()
    }

    /// What the call cost (`prompt_tokens`, `completion_tokens`), once the
    /// backend said.
    pub fn usage(&self) -> Option<Value> {
        let (prompt, completion) = self.usage?;
        Some(json!({"prompt_tokens": prompt, "completion_tokens": completion}))
    }

    fn push_mapped(&mut self, mapped: &mut Vec<SeqEvent>, out: &mut Vec<Numbered>) {
        for event in mapped.drain(..) {
            self.push(event.name, event.data, out);
        }
    }

    fn push(&mut self, name: &'static str, data: Map<String, Value>, out: &mut Vec<Numbered>) {
        self.last += 1;
        out.push(Numbered { id: self.last, name, data: self.with_ids(data) });
    }

    fn with_ids(&self, mut data: Map<String, Value>) -> Map<String, Value> {
        data.insert("message_id".into(), self.message_id.clone().into());
        data.insert("request_id".into(), self.request_id.clone().into());
        data
    }
}

fn into_map(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// The message id of call `request_id`'s answer: stable (every replica and
/// subscriber says the same) and opaque (FNV-1a of the id).
pub fn message_id(request_id: &str) -> String {
    let hash = request_id
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3));
    format!("msg_{hash:016x}")
}

/// `event` as Server-Sent Event text, appended to `buf`.
pub fn write_event(event: &Numbered, buf: &mut BytesMut) {
    buf.put_slice(b"id: ");
    buf.put_slice(itoa::Buffer::new().format(event.id).as_bytes());
    buf.put_slice(b"\nevent: ");
    buf.put_slice(event.name.as_bytes());
    buf.put_slice(b"\ndata: ");
    // Compact JSON escapes every newline: the data is one line.
    let mut writer = buf.writer();
    let _ = serde_json::to_writer(&mut writer, &event.data);
    writer.into_inner().put_slice(b"\n\n");
}

/// How one subscriber's stream goes.
#[derive(Debug, Clone)]
pub struct Subscription {
    /// How the answer is read.
    pub format: Format,
    /// Between heartbeats while nothing else is written.
    pub heartbeat: Duration,
    /// Events up to this id were read before (`Last-Event-ID`): not written.
    pub after: u64,
    /// Observes, for each model event read live (the subscriber had caught
    /// up and waited for it), the seconds from its arrival to the write
    /// that carries its events.
    pub delay: Option<prometheus::Histogram>,
}

/// A call's events made and written as SSE text once, for every subscriber
/// of the call: the mapper and the JSON run once per event, however many
/// read it. Attached to the call's record while a subscriber holds it, so
/// that it is dropped with the last one and made again, the same, for a
/// later one (the numbering depends on the record alone).
#[derive(Debug)]
struct Rendered {
    render: Mutex<Render>,
}

#[derive(Debug)]
struct Render {
    sequencer: Sequencer,
    /// Its own place in the record.
    follower: Follower,
    /// The events not yet sent by every reader: event `base + k` (from 0,
    /// its id `base + k + 1`) is `events[k]`.
    events: VecDeque<RenderedEvent>,
    base: usize,
    /// Each reader's next event to send, by slot; `None` for a free slot.
    readers: Vec<Option<usize>>,
    /// Readers whose next event is `base`: when the last of them moves on,
    /// the events before the new slowest are let go. Looking for the
    /// slowest visits every reader, so it is done only then.
    at_base: usize,
    /// `completed` was made.
    done: bool,
    scratch: Vec<Numbered>,
}

#[derive(Debug)]
struct RenderedEvent {
    bytes: Bytes,
    /// When the model event it came from arrived: on the first event made
    /// of a model event only, so that each counts once in the delay.
    arrived: Option<Instant>,
}

impl Rendered {
    fn new(request_id: &str, format: Format, follower: Follower) -> Rendered {
        let mut render = Render {
            sequencer: Sequencer::new(request_id, format),
            follower,
            events: VecDeque::new(),
            base: 0,
            readers: Vec::new(),
            at_base: 0,
            done: false,
            scratch: Vec::new(),
        };
        let mut status = Vec::new();
        render.sequencer.start(&mut status);
        render.add(status, None);
        Rendered { render: Mutex::new(render) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Render> {
        // Every change is whole before the lock is let go: a panic
        // elsewhere leaves nothing half made.
        self.render.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Render {
    /// A new reader's slot, reading from event `next` on, when it is still
    /// kept or the next to make.
    fn join_at(&mut self, next: usize) -> Option<usize> {
        if next < self.base || next > self.made() {
            return None;
        }
        self.at_base += usize::from(next == self.base);
        let slot = match self.readers.iter().position(Option::is_none) {
            Some(slot) => {
                self.readers[slot] = Some(next);
                slot
            }
            None => {
                self.readers.push(Some(next));
                self.readers.len() - 1
            }
        };
        // A reader resuming past `base` with none at it (`Last-Event-ID`
        // on a call nobody else reads): nobody will leave `base`, so what
        // every reader is past is let go now, not kept to the end.
        if self.at_base == 0 {
            self.let_go();
        }
        Some(slot)
    }

    fn leave(&mut self, slot: usize) {
        if self.readers[slot].take() == Some(self.base) {
            self.left_base();
        }
    }

    /// The reader in `slot` goes on from event `next`.
    fn moved(&mut self, slot: usize, next: usize) {
        let was = self.readers[slot].replace(next);
        if was == Some(self.base) && next != self.base {
            self.left_base();
        }
    }

    /// One reader left `base`; after the last, what every reader sent is let go.
    fn left_base(&mut self) {
        self.at_base = self.at_base.saturating_sub(1);
        if self.at_base == 0 {
            self.let_go();
        }
    }

    /// Lets go of the events before the slowest reader's next.
    fn let_go(&mut self) {
        let Some(slowest) = self.readers.iter().flatten().min().copied() else { return };
        let sent = slowest.saturating_sub(self.base).min(self.events.len());
        self.events.drain(..sent);
        self.base += sent;
        // A reader far behind made room for many: given back once it caught up.
        if self.events.capacity() > 4 * AHEAD && self.events.len() < self.events.capacity() / 4 {
            self.events.shrink_to(2 * self.events.len().max(AHEAD));
        }
        self.at_base = self.readers.iter().flatten().filter(|&&next| next == self.base).count();
    }

    /// Event `index` (from 0), while some reader has not sent it.
    fn get(&self, index: usize) -> Option<&RenderedEvent> {
        self.events.get(index.checked_sub(self.base)?)
    }

    /// Events made so far.
    fn made(&self) -> usize {
        self.base + self.events.len()
    }

    /// Makes the events of what the record holds now, up to [`AHEAD`] past
    /// event `next`.
    fn advance(&mut self, next: usize) {
        while !self.done && self.made() < next.saturating_add(AHEAD) {
            let mut out = std::mem::take(&mut self.scratch);
            match self.follower.next().now_or_never() {
                Some(Some(event)) => {
                    self.sequencer.model_event(&event, &mut out);
                    let arrived = self.follower.arrived();
                    self.add(out, arrived);
                }
                Some(None) => {
                    self.sequencer.end(&self.follower.ending(), &mut out);
                    self.add(out, None);
                    self.done = true;
                }
                None => {
                    self.scratch = out;
                    return;
                }
            }
        }
    }

    fn add(&mut self, mut made: Vec<Numbered>, mut arrived: Option<Instant>) {
        for event in made.drain(..) {
            let mut buf = BytesMut::new();
            write_event(&event, &mut buf);
            self.events.push_back(RenderedEvent { bytes: buf.freeze(), arrived: arrived.take() });
        }
        self.scratch = made;
    }
}

struct Subscriber {
    record: Arc<CallRecord>,
    /// The call's events shared by its subscribers, or this one's own while
    /// it catches up with them.
    rendered: Arc<Rendered>,
    /// Its reader slot in `rendered`.
    slot: usize,
    /// `rendered` is its own.
    own: bool,
    /// Wakes the subscriber when the record changes.
    waiter: Follower,
    /// The index of the next event to write (its id minus 1).
    next: usize,
    request_id: String,
    subscription: Subscription,
    shutdown: Shutdown,
    next_heartbeat: Instant,
    /// It waited for the events it writes next: they are read live.
    waited: bool,
    done: bool,
}

/// The SSE body of one subscriber of the call `record` records (started by
/// `request_id`), following it from its first event; ends after `completed`
/// (or the drain's `error`). `None` when the call has ended and the
/// subscription starts after its last event: there is nothing to send.
pub(crate) fn sse(
    request_id: &str,
    record: &Arc<CallRecord>,
    subscription: Subscription,
    shutdown: Shutdown,
) -> Result<impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static, Unserved> {
    let format = subscription.format;
    let shared = record.shared(|| Rendered::new(request_id, format, record.follow()));
    // Where the stream resumes, when the shared events hold it; else from the first.
    let after = usize::try_from(subscription.after).unwrap_or(usize::MAX);
    let joined = {
        let mut render = shared.lock();
        render.advance(after);
        render.join_at(after).map(|slot| (slot, after)).or_else(|| render.join_at(0).map(|slot| (slot, 0)))
    };
    let (rendered, slot, next, own) = match joined {
        Some((slot, next)) => (shared, slot, next, false),
        None => {
            // Late: the first events were let go. Made again for this one
            // alone until it reaches the others.
            let own = Arc::new(Rendered::new(request_id, format, record.follow()));
            let slot = own.lock().join_at(0).expect("a new one has let nothing go");
            (own, slot, 0, true)
        }
    };
    let subscriber = Subscriber {
        record: record.clone(),
        rendered,
        slot,
        own,
        waiter: record.follow(),
        next,
        request_id: request_id.to_owned(),
        next_heartbeat: Instant::now() + subscription.heartbeat,
        subscription,
        shutdown,
        waited: false,
        done: false,
    };
    let ended = {
        let mut render = subscriber.rendered.lock();
        render.advance(after);
        render.done.then(|| render.made() as u64)
    };
    // Dropped, the subscriber leaves its slot.
    match ended {
        Some(last) if last == subscriber.subscription.after => Err(Unserved::Ended),
        Some(last) if last < subscriber.subscription.after => Err(Unserved::Past { last }),
        _ => Ok(stream::unfold(subscriber, |mut subscriber| async move {
            let chunk = subscriber.next_chunk().await?;
            Some((Ok(chunk), subscriber))
        })),
    }
}

/// Why a stream of an ended call has nothing to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unserved {
    /// Resumed after its last event: it was all sent.
    Ended,
    /// Resumed after an event it never had: the id is another run's (the
    /// call was run again) or made up.
    Past {
        /// The call's last event.
        last: u64,
    },
}

impl Unserved {
    /// What a client resuming after event `after` is told.
    pub(crate) fn past_message(last: u64, after: u64) -> String {
        format!(
            "the call's last event is {last}, and it never had event {after}: the id is another run's of the call; \
             read it from the start, without Last-Event-ID"
        )
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.rendered.lock().leave(self.slot);
    }
}

impl Subscriber {
    /// The next piece of the body: every event ready now, up to
    /// [`MAX_WRITE_BYTES`]; `None` once the stream is over.
    async fn next_chunk(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        loop {
            // A subscriber behind always has events ready: the drain is
            // looked for first, or it would write on to the drain timeout
            // and be cut without its `error`.
            if self.shutdown.is_shutdown() {
                return Some(self.shut());
            }
            // Seen before reading, so that a change after it wakes the wait below.
            self.waiter.mark_seen();
            let mut buf = BytesMut::new();
            let mut arrivals = Vec::new();
            let was = self.next;
            let over = {
                let mut render = self.rendered.lock();
                render.advance(self.next);
                while let Some(event) = render.get(self.next).filter(|_| buf.len() < MAX_WRITE_BYTES) {
                    self.next += 1;
                    if self.next as u64 > self.subscription.after {
                        buf.put_slice(&event.bytes);
                    }
                    arrivals.extend(event.arrived.filter(|_| self.waited));
                }
                render.moved(self.slot, self.next);
                render.done && self.next == render.made()
            };
            self.waited = false;
            self.rejoin();
            if !buf.is_empty() {
                self.observe(&arrivals);
                self.next_heartbeat = Instant::now() + self.subscription.heartbeat;
                return Some(buf.freeze());
            }
            if over {
                // Ended short of the event it was resumed after: the
                // client is told, or it would wait on, then reconnect to a
                // 204 and never hear of the call again.
                let after = self.subscription.after;
                if (self.next as u64) < after {
                    self.done = true;
                    let message = Unserved::past_message(self.next as u64, after);
                    let data = json!({"code": "past_last_event", "message": message, "retry": false});
                    return Some(self.system_event("error", into_map(data)));
                }
                return None;
            }
            if self.next > was {
                // Skipped events read before (`Last-Event-ID`); more may be there to make.
                continue;
            }
            tokio::select! {
                biased;
                () = self.shutdown.recv() => return Some(self.shut()),
                () = self.waiter.changed() => self.waited = true,
                () = sleep_until(self.next_heartbeat) => {
                    self.next_heartbeat = Instant::now() + self.subscription.heartbeat;
                    return Some(self.system_event("heartbeat", Map::new()));
                }
            }
        }
    }

    /// The `error` that ends the stream as the server drains.
    fn shut(&mut self) -> Bytes {
        self.done = true;
        let message = "the server is shutting down; resume with Last-Event-ID";
        self.system_event("error", into_map(json!({"code": "shutdown", "message": message, "retry": true})))
    }

    /// Moves a subscriber that made its own events over to the call's
    /// shared ones once it reached them, letting its own go.
    fn rejoin(&mut self) {
        if !self.own {
            return;
        }
        let Some(shared) = self.record.held::<Rendered>() else { return };
        let Some(slot) = shared.lock().join_at(self.next) else { return };
        let own = std::mem::replace(&mut self.rendered, shared);
        own.lock().leave(self.slot);
        (self.slot, self.own) = (slot, false);
    }

    /// A system event of this subscriber alone, under the id of the last
    /// event it was sent, so that resuming after it skips nothing. Before
    /// any was, that is the one it resumed after: a lower id would become
    /// the client's last, and its next resume would send events again.
    fn system_event(&self, name: &'static str, mut data: Map<String, Value>) -> Bytes {
        data.insert("message_id".into(), message_id(&self.request_id).into());
        data.insert("request_id".into(), self.request_id.clone().into());
        let mut buf = BytesMut::new();
        let id = (self.next as u64).max(self.subscription.after);
        write_event(&Numbered { id, name, data }, &mut buf);
        buf.freeze()
    }

    /// The live events' delays, as they are written.
    fn observe(&self, arrivals: &[Instant]) {
        if let Some(delay) = &self.subscription.delay {
            let now = Instant::now();
            for arrived in arrivals {
                delay.observe(now.saturating_duration_since(*arrived).as_secs_f64());
            }
        }
    }
}

#[cfg(test)]
mod tests;
