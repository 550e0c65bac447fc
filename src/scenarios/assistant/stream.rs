//! A model call's answer as a JSONSeq v1 event stream for screen
//! clients: `GET /llm/stream/{request_id}` writes these events as
//! Server-Sent Events.
//!
//! [`Sequencer`] turns the call's [record](super::record) into numbered
//! events: `status` first, then what the [mapper](crate::jsonseq::mapper)
//! makes of the model's text and reasoning, then `final_end` and
//! `completed` — or, when the call failed, `error` and `completed`. Every
//! `data` carries `message_id` and `request_id`. The numbering depends on the
//! record alone, so every subscriber, however late, reads the same events
//! under the same ids, and `Last-Event-ID: N` resumes after event N of any
//! earlier connection.
//!
//! [`sse`] is one subscriber: events are made as the client reads them (the
//! body is pulled), so a subscriber that does not read holds its place in
//! the record and nothing else — no buffer grows for it; the server's send
//! timeout closes its connection, and it resumes with `Last-Event-ID`.
//! Heartbeats (every `heartbeat_secs` while the model is silent) are written
//! with the id of the event before them, so resuming after one skips
//! nothing. When the server drains, an open stream ends with an `error`
//! event (`code: "shutdown"`, `retry: true`).

use std::{convert::Infallible, time::Duration};

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::{FutureExt, Stream, stream};
use serde_json::{Map, Value, json};
use tokio::time::{Instant, sleep_until};

use super::{
    backend::ModelEvent,
    record::{Ending, Follower},
};
use crate::{
    app::Shutdown,
    jsonseq::mapper::{Format, Mapper, SeqEvent},
};

/// Bytes written at most in one piece of the body: a subscriber far behind
/// (or new to a long answer) catches up in pieces of about this size.
const MAX_WRITE_BYTES: usize = 16 * 1024;

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

    /// A `heartbeat`, under the id of the event before it.
    pub fn heartbeat(&self) -> Numbered {
        Numbered { id: self.last, name: "heartbeat", data: self.with_ids(Map::new()) }
    }

    /// The `error` that ends a stream when the server drains.
    pub fn shutdown(&mut self, out: &mut Vec<Numbered>) {
        let data = json!({"code": "shutdown", "message": "the server is shutting down; resume with Last-Event-ID", "retry": true});
        self.push("error", into_map(data), out);
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

struct Subscriber {
    sequencer: Sequencer,
    follower: Follower,
    subscription: Subscription,
    shutdown: Shutdown,
    next_heartbeat: Instant,
    started: bool,
    done: bool,
    events: Vec<Numbered>,
    /// This write's model events were read live.
    live: bool,
    /// When this write's live model events arrived.
    arrivals: Vec<Instant>,
}

/// The SSE body of one subscriber of call `request_id`, following the call
/// from its first event; ends after `completed` (or the drain's `error`).
pub fn sse(
    request_id: &str,
    follower: Follower,
    subscription: Subscription,
    shutdown: Shutdown,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    let subscriber = Subscriber {
        sequencer: Sequencer::new(request_id, subscription.format),
        follower,
        next_heartbeat: Instant::now() + subscription.heartbeat,
        subscription,
        shutdown,
        started: false,
        done: false,
        events: Vec::new(),
        live: false,
        arrivals: Vec::new(),
    };
    stream::unfold(subscriber, |mut subscriber| async move {
        let chunk = subscriber.next_chunk().await?;
        Some((Ok(chunk), subscriber))
    })
}

impl Subscriber {
    /// The next piece of the body: every event ready now, up to
    /// [`MAX_WRITE_BYTES`]; `None` once the stream is over.
    async fn next_chunk(&mut self) -> Option<Bytes> {
        let mut buf = BytesMut::new();
        loop {
            for event in self.events.drain(..) {
                if event.id > self.subscription.after {
                    write_event(&event, &mut buf);
                }
            }
            if buf.len() >= MAX_WRITE_BYTES || (self.done && !buf.is_empty()) {
                return Some(self.written(buf));
            }
            if self.done {
                return None;
            }
            if !self.started {
                self.started = true;
                self.sequencer.start(&mut self.events);
                continue;
            }
            // What is ready now joins this write; then the write goes out.
            if !buf.is_empty() {
                match self.follower.next().now_or_never() {
                    Some(event) => self.read(event),
                    None => return Some(self.written(buf)),
                }
                continue;
            }
            self.live = self.follower.caught_up();
            tokio::select! {
                biased;
                () = self.shutdown.recv() => {
                    self.sequencer.shutdown(&mut self.events);
                    self.done = true;
                }
                event = self.follower.next() => self.read(event),
                () = sleep_until(self.next_heartbeat) => {
                    let heartbeat = self.sequencer.heartbeat();
                    write_event(&heartbeat, &mut buf);
                    self.next_heartbeat = Instant::now() + self.subscription.heartbeat;
                    return Some(buf.freeze());
                }
            }
        }
    }

    /// `buf` goes out: the live events' delays are observed.
    fn written(&mut self, buf: BytesMut) -> Bytes {
        if let Some(delay) = &self.subscription.delay {
            let now = Instant::now();
            for arrived in self.arrivals.drain(..) {
                delay.observe(now.saturating_duration_since(arrived).as_secs_f64());
            }
        }
        buf.freeze()
    }

    fn read(&mut self, event: Option<ModelEvent>) {
        self.next_heartbeat = Instant::now() + self.subscription.heartbeat;
        match event {
            Some(event) => {
                if self.live
                    && self.subscription.delay.is_some()
                    && let Some(arrived) = self.follower.arrived()
                {
                    self.arrivals.push(arrived);
                }
                self.sequencer.model_event(&event, &mut self.events)
            }
            None => {
                self.sequencer.end(&self.follower.ending(), &mut self.events);
                self.done = true;
            }
        }
    }
}

#[cfg(test)]
mod tests;
