//! Server-sent events of an OpenAI-compatible stream: `data:` lines with
//! `choices[].delta` chunks, ended by `data: [DONE]`. A chunk carries answer
//! text (`delta.content`), reasoning (`delta.reasoning_content`, or
//! `delta.reasoning` as some servers name it), `finish_reason` and, in the
//! last chunk when the request asked for it (`stream_options`), `usage`.
//!
//! The network cuts the stream anywhere (inside a line, inside a UTF-8
//! character), so [`SseDecoder`] keeps the partial line until its end arrives
//! and hands out whole events only. It is bounded: a line or event past
//! `max_bytes` is an error, not an ever-growing buffer.

use serde::Deserialize;
use serde_json::Value;

use crate::backend::TokenUsage;

/// What a complete event means; one chunk may mean several, in this order:
/// reasoning, text, finish, usage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// More text of the answer (never empty).
    Delta(String),
    /// More of the model's reasoning (never empty).
    Reasoning(String),
    /// `finish_reason`: why the model stopped (at most
    /// [`crate::backend::MAX_FINISH_REASON_BYTES`]).
    Finish(String),
    /// `usage`: what the call cost.
    Usage(TokenUsage),
    /// `[DONE]`: the answer is complete.
    Done,
}

/// A stream that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// A line or event larger than the limit.
    #[error("stream event larger than {0} bytes")]
    TooLarge(usize),
    /// Bytes that are not UTF-8.
    #[error("stream is not UTF-8")]
    NotUtf8,
    /// A `data:` that is neither `[DONE]` nor a chat completion chunk.
    #[error("stream chunk is not a chat completion chunk: {0}")]
    BadChunk(String),
    /// The backend reported an error inside the stream (vLLM and others
    /// send an overload's 503 so once a stream has begun).
    #[error("the backend reported an error in the stream: {message}")]
    Backend {
        /// The HTTP status its `code` names, when it names one.
        status: Option<u16>,
        /// What it said, cut to a bound.
        message: String,
    },
}

/// Splits bytes into events, whatever the chunking.
#[derive(Debug)]
pub struct SseDecoder {
    partial: Vec<u8>,
    data: String,
    has_data: bool,
    max_bytes: usize,
    /// `[DONE]` was read: the stream is over, whatever follows it.
    done: bool,
}

impl SseDecoder {
    /// A decoder refusing lines and events past `max_bytes`.
    pub fn new(max_bytes: usize) -> SseDecoder {
        SseDecoder { partial: Vec::new(), data: String::new(), has_data: false, max_bytes, done: false }
    }

    /// Feeds received bytes; returns the events they complete, in order.
    /// Nothing after `[DONE]`, which ends the stream: what a server sends
    /// after it is read neither as events nor as errors, whether it comes
    /// with it or later.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<StreamEvent>, SseError> {
        let mut events = Vec::new();
        self.push_into(bytes, &mut events).map(|()| events)
    }

    /// As [`SseDecoder::push`], the events added to `events`: those before
    /// an error stay there, as they would have come had the stream been
    /// cut just before it.
    pub fn push_into(&mut self, bytes: &[u8], events: &mut Vec<StreamEvent>) -> Result<(), SseError> {
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            if self.done {
                return Ok(());
            }
            let (line, tail) = rest.split_at(end);
            rest = &tail[1..];
            if self.partial.is_empty() {
                self.line(line, events)?;
            } else {
                self.partial.extend_from_slice(line);
                let whole = std::mem::take(&mut self.partial);
                self.line(&whole, events)?;
            }
        }
        if self.done {
            return Ok(());
        }
        self.partial.extend_from_slice(rest);
        if self.partial.len() > self.max_bytes {
            return Err(SseError::TooLarge(self.max_bytes));
        }
        Ok(())
    }

    /// The stream ended: an event not closed by a blank line still counts
    /// (some servers close right after the last `data:` line).
    pub fn finish(&mut self) -> Result<Vec<StreamEvent>, SseError> {
        let mut events = Vec::new();
        self.finish_into(&mut events).map(|()| events)
    }

    /// As [`SseDecoder::finish`], the events added to `events`.
    pub fn finish_into(&mut self, events: &mut Vec<StreamEvent>) -> Result<(), SseError> {
        if self.done {
            return Ok(());
        }
        let last = std::mem::take(&mut self.partial);
        if !last.is_empty() {
            self.line(&last, events)?;
        }
        self.line(b"", events)
    }

    fn line(&mut self, line: &[u8], events: &mut Vec<StreamEvent>) -> Result<(), SseError> {
        // Whatever the line (a comment too): the same bound as a line still
        // arriving, so that it does not depend on how the stream was cut.
        if line.len() > self.max_bytes {
            return Err(SseError::TooLarge(self.max_bytes));
        }
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            if std::mem::take(&mut self.has_data) {
                let data = std::mem::take(&mut self.data);
                interpret(&data, events)?;
                self.done = events.last() == Some(&StreamEvent::Done);
            }
            return Ok(());
        }
        let line = std::str::from_utf8(line).map_err(|_| SseError::NotUtf8)?;
        // Only `data` matters; `event`, `id`, `retry` and `:` comments
        // (keep-alives) are skipped.
        let Some(value) = line.strip_prefix("data:") else { return Ok(()) };
        let value = value.strip_prefix(' ').unwrap_or(value);
        if self.has_data {
            self.data.push('\n');
        }
        self.data.push_str(value);
        self.has_data = true;
        if self.data.len() > self.max_bytes {
            return Err(SseError::TooLarge(self.max_bytes));
        }
        Ok(())
    }
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<ChunkChoice>,
    error: Option<Value>,
    // Read leniently: a cost the backend garbles is not worth the answer.
    usage: Option<Value>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    delta: Option<Delta>,
    finish_reason: Option<Value>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
}

/// Bytes kept of what the model server says of an error.
const MAX_PROBLEM_BYTES: usize = 200;

/// What is wrong with a model server's JSON, its quotes shortened: the
/// parser's message quotes a string found where it wanted another type,
/// which may be most of a megabyte of the answer (the user's words among
/// them), and the error goes on to the call's stored outcome, its readers
/// and the log.
pub(crate) fn json_problem(error: &serde_json::Error) -> String {
    megamind_core::codec::quote::sanitize(&error.to_string())
}

fn interpret(data: &str, events: &mut Vec<StreamEvent>) -> Result<(), SseError> {
    if data.trim() == "[DONE]" {
        events.push(StreamEvent::Done);
        return Ok(());
    }
    let chunk: Chunk = serde_json::from_str(data).map_err(|e| SseError::BadChunk(json_problem(&e)))?;
    if let Some(error) = chunk.error {
        let status = error.get("code").and_then(Value::as_u64).filter(|code| (400..600).contains(code));
        let message = megamind_core::text::clip(&error.to_string(), MAX_PROBLEM_BYTES).to_owned();
        return Err(SseError::Backend { status: status.and_then(|code| u16::try_from(code).ok()), message });
    }
    if let Some(choice) = chunk.choices.into_iter().next() {
        if let Some(delta) = choice.delta {
            let reasoning = [delta.reasoning_content, delta.reasoning].into_iter().flatten().find(|r| !r.is_empty());
            events.extend(reasoning.map(StreamEvent::Reasoning));
            events.extend(delta.content.filter(|text| !text.is_empty()).map(StreamEvent::Delta));
        }
        events.extend(finish_reason(choice.finish_reason.as_ref()).map(StreamEvent::Finish));
    }
    events.extend(usage(chunk.usage.as_ref()).map(StreamEvent::Usage));
    Ok(())
}

/// A `finish_reason` that says something, clipped.
pub(crate) fn finish_reason(value: Option<&Value>) -> Option<String> {
    crate::backend::bounded_finish_reason(value?.as_str()?)
}

/// A `usage` object's token counts; absent ones count 0.
pub(crate) fn usage(value: Option<&Value>) -> Option<TokenUsage> {
    let usage = value?.as_object()?;
    let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
    Some(TokenUsage { prompt_tokens: count("prompt_tokens"), completion_tokens: count("completion_tokens") })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(text: &str) -> String {
        format!("data: {}\n\n", serde_json::json!({"choices": [{"index": 0, "delta": {"content": text}}]}))
    }

    fn stream() -> Vec<u8> {
        let mut all = String::from(": keep-alive\n\n");
        all.push_str("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n");
        for piece in ["При", "вет, ", "мир! 👋"] {
            all.push_str(&chunk(piece));
        }
        all.push_str("data: [DONE]\n\n");
        all.into_bytes()
    }

    fn text_of(events: &[StreamEvent]) -> (String, bool) {
        let mut text = String::new();
        let mut done = false;
        for event in events {
            match event {
                StreamEvent::Delta(piece) => text.push_str(piece),
                StreamEvent::Done => done = true,
                _ => {}
            }
        }
        (text, done)
    }

    #[test]
    fn any_split_of_the_bytes_gives_the_same_events() {
        let bytes = stream();
        let whole = SseDecoder::new(1 << 20).push(&bytes).unwrap();
        assert_eq!(text_of(&whole), ("Привет, мир! 👋".to_owned(), true));
        // Every cut point, including inside multi-byte characters and "\n\n".
        for cut in 0..bytes.len() {
            let mut decoder = SseDecoder::new(1 << 20);
            let mut events = decoder.push(&bytes[..cut]).unwrap();
            events.extend(decoder.push(&bytes[cut..]).unwrap());
            assert_eq!(events, whole, "cut at {cut}");
        }
        // And byte by byte.
        let mut decoder = SseDecoder::new(1 << 20);
        let events: Vec<_> = bytes.iter().flat_map(|b| decoder.push(&[*b]).unwrap()).collect();
        assert_eq!(events, whole);
    }

    #[test]
    fn crlf_lines_and_multi_line_data() {
        let mut decoder = SseDecoder::new(1024);
        let events = decoder.push(b"event: message\r\nid: 7\r\ndata: [DONE]\r\n\r\n").unwrap();
        assert_eq!(events, [StreamEvent::Done]);
        let mut decoder = SseDecoder::new(1024);
        let events = decoder.push(b"data: {\"choices\":\r\ndata: [{\"delta\":{\"content\":\"a\"}}]}\r\n\r\n").unwrap();
        assert_eq!(events, [StreamEvent::Delta("a".into())]);
    }

    #[test]
    fn a_stream_cut_before_the_blank_line_still_yields_its_last_event() {
        let mut decoder = SseDecoder::new(1024);
        assert!(decoder.push(b"data: [DONE]").unwrap().is_empty());
        assert_eq!(decoder.finish().unwrap(), [StreamEvent::Done]);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(matches!(SseDecoder::new(1024).push(b"data: {not json\n\n"), Err(SseError::BadChunk(_))));
        let misplaced = format!("data: {{\"choices\":\"{}\"}}\n\n", "a".repeat(4000));
        let Err(SseError::BadChunk(problem)) = SseDecoder::new(1 << 20).push(misplaced.as_bytes()) else {
            panic!("a chunk whose choices are a string")
        };
        assert!(problem.starts_with("invalid type: string \"aaa…") && problem.len() < 100, "{problem}");
        assert!(matches!(SseDecoder::new(1024).push(b"data: \xff\xfe\n\n"), Err(SseError::NotUtf8)));
        let error = SseDecoder::new(1024).push(b"data: {\"error\":{\"message\":\"overloaded\"}}\n\n");
        assert!(
            matches!(error, Err(SseError::Backend { status: None, ref message }) if message.contains("overloaded"))
        );
        let error = SseDecoder::new(1024).push(b"data: {\"error\":{\"message\":\"busy\",\"code\":503}}\n\n");
        assert!(matches!(error, Err(SseError::Backend { status: Some(503), .. })), "the status it names: {error:?}");
        let error = SseDecoder::new(1024).push(b"data: {\"error\":{\"code\":\"rate_limit_exceeded\"}}\n\n");
        assert!(matches!(error, Err(SseError::Backend { status: None, .. })), "a name is no status: {error:?}");
    }

    #[test]
    fn a_backend_error_of_ten_thousand_characters_is_quoted_cut_to_its_bound() {
        for letter in ["x", "я"] {
            let event = format!("data: {}\n\n", serde_json::json!({"error": {"message": letter.repeat(10_000)}}));
            let Err(SseError::Backend { message: quoted, .. }) = SseDecoder::new(1 << 20).push(event.as_bytes()) else {
                panic!("a backend error")
            };
            // A two-byte letter may leave one byte of the bound unused.
            assert!(
                (MAX_PROBLEM_BYTES - 1..=MAX_PROBLEM_BYTES).contains(&quoted.len()),
                "{letter}: cut to the bound, not {} bytes",
                quoted.len()
            );
            assert!(quoted.starts_with(&format!("{{\"message\":\"{letter}{letter}")), "{quoted}");
        }
    }

    #[test]
    fn nothing_after_done_is_read_whatever_the_cuts() {
        let stream = b"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: [DONE]\n\n\xff\xfe\ndata: {\n\n";
        let expected = vec![StreamEvent::Delta("Hi".into()), StreamEvent::Done];
        for cut in 0..=stream.len() {
            let mut decoder = SseDecoder::new(1024);
            let (start, rest) = stream.split_at(cut);
            let mut events = decoder.push(start).unwrap();
            events.extend(decoder.push(rest).unwrap());
            events.extend(decoder.finish().unwrap());
            assert_eq!(events, expected, "cut at {cut}");
            assert_eq!(decoder.push(b"data: x\n\n"), Ok(Vec::new()), "over");
        }
    }

    #[test]
    fn bounded_by_max_bytes() {
        let mut decoder = SseDecoder::new(64);
        assert_eq!(decoder.push(&[b'x'; 65]), Err(SseError::TooLarge(64)), "a line without an end");
        let mut decoder = SseDecoder::new(64);
        let many_lines = "data: 0123456789\n".repeat(8);
        assert_eq!(decoder.push(many_lines.as_bytes()), Err(SseError::TooLarge(64)), "an event without an end");
        // A comment past the bound, whole or in pieces.
        let comment = format!(": {}\n\ndata: [DONE]\n\n", "x".repeat(63));
        assert_eq!(SseDecoder::new(64).push(comment.as_bytes()), Err(SseError::TooLarge(64)), "whole");
        let mut decoder = SseDecoder::new(64);
        let (start, rest) = comment.as_bytes().split_at(40);
        assert_eq!(decoder.push(start), Ok(Vec::new()));
        assert_eq!(decoder.push(rest), Err(SseError::TooLarge(64)), "in pieces");
        let comment = format!(": {}\n\ndata: [DONE]\n\n", "x".repeat(62));
        assert_eq!(SseDecoder::new(64).push(comment.as_bytes()), Ok(vec![StreamEvent::Done]), "at the bound");
    }

    #[test]
    fn reasoning_finish_reason_and_usage_are_read() {
        let stream = concat!(
            "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"reasoning_content\":\"Думаю\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"reasoning\":\"...\",\"content\":\"Ответ\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":7,\"total_tokens\":19}}\n\n",
            "data: [DONE]\n\n",
        );
        let events = SseDecoder::new(1024).push(stream.as_bytes()).unwrap();
        assert_eq!(
            events,
            [
                StreamEvent::Reasoning("Думаю".into()),
                StreamEvent::Reasoning("...".into()),
                StreamEvent::Delta("Ответ".into()),
                StreamEvent::Finish("length".into()),
                StreamEvent::Usage(TokenUsage { prompt_tokens: 12, completion_tokens: 7 }),
                StreamEvent::Done,
            ]
        );
    }

    #[test]
    fn odd_finish_reasons_and_usage_neither_fail_nor_grow() {
        let long = "x".repeat(500);
        let chunk = serde_json::json!({
            "choices": [{"delta": {"content": "a"}, "finish_reason": long}],
            "usage": {"prompt_tokens": "many", "completion_tokens": 3},
        });
        let events = SseDecoder::new(4096).push(format!("data: {chunk}\n\n").as_bytes()).unwrap();
        assert_eq!(
            events,
            [
                StreamEvent::Delta("a".into()),
                StreamEvent::Finish("x".repeat(crate::backend::MAX_FINISH_REASON_BYTES)),
                StreamEvent::Usage(TokenUsage { prompt_tokens: 0, completion_tokens: 3 }),
            ]
        );
        let quiet = b"data: {\"choices\":[{\"delta\":{},\"finish_reason\":null}],\"usage\":null}\n\n";
        assert!(SseDecoder::new(1024).push(quiet).unwrap().is_empty());
    }
}
