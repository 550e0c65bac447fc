//! A streamed answer read event by event: the SSE decoder's events turned
//! into the sink's, the answer's text and reasoning held to their bound,
//! and the stream's end judged (a `finish_reason` or `[DONE]`, else a
//! connection broken). Time stays with the caller, which feeds the body's
//! chunks as they come.

use tokio::time::Instant;

use crate::backend::{
    BackendError, Completion, EventSink, ModelEvent,
    openai::sse::{SseDecoder, SseError, StreamEvent},
};

/// What a streamed answer has told so far.
#[derive(Debug)]
pub(super) struct Reading {
    decoder: SseDecoder,
    /// The largest answer (and reasoning) taken, in bytes.
    max_bytes: usize,
    pub(super) completion: Completion,
    /// Any event handed to the sink, not only a token, rules out a retry.
    pub(super) streamed: bool,
    reasoned: usize,
    /// The model said it was done: `[DONE]`, or a `finish_reason`.
    finished: bool,
    /// When the `finish_reason` came: what follows is only waited for a while.
    pub(super) finish_seen: Option<Instant>,
    started: Instant,
}

impl Reading {
    /// An answer asked for at `started`, of at most `max_bytes` of text
    /// and as many of reasoning.
    pub(super) fn new(started: Instant, max_bytes: usize) -> Reading {
        Reading {
            decoder: SseDecoder::new(max_bytes),
            max_bytes,
            completion: Completion { attempts: 1, ..Completion::default() },
            streamed: false,
            reasoned: 0,
            finished: false,
            finish_seen: None,
            started,
        }
    }

    /// Reads `chunk` of the body (`None`: the body ended), its events
    /// handed to `sink`; `true` once the stream is over.
    pub(super) fn feed(&mut self, chunk: Option<&[u8]>, sink: &dyn EventSink) -> Result<bool, BackendError> {
        let mut events = Vec::new();
        let (decoded, ended) = match chunk {
            None => (self.decoder.finish_into(&mut events), true),
            Some(bytes) => (self.decoder.push_into(bytes, &mut events), false),
        };
        // The events before a fault in the stream are taken first, as they
        // would be had the stream been cut just before it.
        let mut done = ended;
        for event in events {
            let event = match event {
                // The end: what a server sends after it is no part of the
                // answer, whether it came in the same chunk or not.
                StreamEvent::Done => {
                    (done, self.finished) = (true, true);
                    break;
                }
                StreamEvent::Delta(piece) => {
                    self.completion.text.push_str(&piece);
                    if self.completion.text.len() > self.max_bytes {
                        return Err(BackendError::BadResponse(format!("answer larger than {} bytes", self.max_bytes)));
                    }
                    ModelEvent::TextDelta(piece)
                }
                StreamEvent::Reasoning(piece) => {
                    // A model that only thinks is held to the same bound as its words.
                    self.reasoned += piece.len();
                    if self.reasoned > self.max_bytes {
                        let error = format!("reasoning larger than {} bytes", self.max_bytes);
                        return Err(BackendError::BadResponse(error));
                    }
                    ModelEvent::ReasoningDelta(piece)
                }
                StreamEvent::Finish(reason) => {
                    self.finished = true;
                    self.finish_seen.get_or_insert_with(Instant::now);
                    self.completion.finish_reason = Some(reason.clone());
                    ModelEvent::Finish { reason }
                }
                StreamEvent::Usage(usage) => {
                    self.completion.usage = Some(usage);
                    ModelEvent::usage(usage)
                }
            };
            // Reasoning is the model at work too: it ends the first-token wait.
            if matches!(event, ModelEvent::TextDelta(_) | ModelEvent::ReasoningDelta(_)) {
                let started = self.started;
                self.completion.first_token.get_or_insert_with(|| started.elapsed());
            }
            sink.event(event);
            self.streamed = true;
        }
        decoded.map_err(|error| match error {
            // Said with a status: as that status had come as the answer's,
            // retried while nothing was streamed (an overload's 503).
            SseError::Backend { status: Some(status), message } => BackendError::Status { status, message },
            other => BackendError::BadResponse(other.to_string()),
        })?;
        Ok(done)
    }

    /// The answer, the stream over (or waited for long enough after its
    /// `finish_reason`).
    pub(super) fn end(self) -> Result<Completion, BackendError> {
        // A body closed cleanly mid-answer (a server or proxy that closes a
        // response without a length) is a connection broken, not an answer:
        // its last words may be cut in the middle, and so may a command.
        if !self.finished {
            let why = "the stream ended before the model finished (no finish_reason, no [DONE])";
            return Err(BackendError::Connect(why.into()));
        }
        if self.completion.text.trim().is_empty() {
            return Err(BackendError::BadResponse("the stream carried no text".into()));
        }
        Ok(self.completion)
    }
}

/// The events a stream handed over, kept.
#[cfg(any(test, feature = "fuzzing"))]
#[derive(Debug, Default)]
struct Kept(std::sync::Mutex<Vec<ModelEvent>>);

#[cfg(any(test, feature = "fuzzing"))]
impl EventSink for Kept {
    fn event(&self, event: ModelEvent) {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(event);
    }
}

/// A stream read from `chunks` under a bound of `max_bytes`: the answer or
/// the error, and the events handed over meanwhile.
#[cfg(any(test, feature = "fuzzing"))]
fn read(chunks: &[&[u8]], max_bytes: usize) -> (Result<Completion, BackendError>, Vec<ModelEvent>) {
    let mut reading = Reading::new(Instant::now(), max_bytes);
    let sink = Kept::default();
    let mut read = None;
    for chunk in chunks.iter().map(|chunk| Some(*chunk)).chain([None]) {
        match reading.feed(chunk, &sink) {
            Ok(false) => {}
            Ok(true) => break,
            Err(error) => {
                read = Some(Err(error));
                break;
            }
        }
    }
    let read = read.unwrap_or_else(|| reading.end());
    (read, sink.0.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner))
}

/// For the fuzz target `model_stream`: a model server's stream, read
/// whole and cut into `chunks`, under a bound of `max_bytes`. Never a
/// panic; the answer (or the error) and the events the same however the
/// stream is cut;
/// the text handed over is the answer's, within the bound; an answer taken
/// is not blank and said why it ended.
#[cfg(any(test, feature = "fuzzing"))]
pub fn fuzz_stream(chunks: &[&[u8]], max_bytes: usize) {
    let whole: Vec<u8> = chunks.concat();
    let (read, events) = read(chunks, max_bytes);
    let (read_whole, events_whole) = self::read(&[&whole], max_bytes);
    let outcome = |read: &Result<Completion, BackendError>| match read {
        Ok(completion) => Ok((completion.text.clone(), completion.finish_reason.clone(), completion.usage)),
        Err(error) => Err(error.to_string()),
    };
    assert_eq!(outcome(&read), outcome(&read_whole), "the answer depends on the cuts");
    assert_eq!(events, events_whole, "the events depend on the cuts");
    let text: String = events
        .iter()
        .filter_map(|event| match event {
            ModelEvent::TextDelta(piece) => Some(piece.as_str()),
            _ => None,
        })
        .collect();
    assert!(text.len() <= max_bytes, "{} bytes of text handed over under a bound of {max_bytes}", text.len());
    let reasoned: usize = events
        .iter()
        .map(|event| match event {
            ModelEvent::ReasoningDelta(piece) => piece.len(),
            _ => 0,
        })
        .sum();
    assert!(reasoned <= max_bytes, "{reasoned} bytes of reasoning under a bound of {max_bytes}");
    if let Ok(completion) = read {
        assert_eq!(completion.text, text, "the answer is what was handed over");
        assert!(!completion.text.trim().is_empty(), "a blank answer taken");
        let finished = events.iter().any(|event| matches!(event, ModelEvent::Finish { .. }));
        assert!(finished || whole.windows(6).any(|w| w == b"[DONE]"), "an answer taken with no end");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &str = concat!(
        "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"Думаю.\"}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"Сейчас \"}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"12 часов.\"},\"finish_reason\":\"stop\"}]}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3}}\n\n",
        "data: [DONE]\n\n",
    );

    #[test]
    fn a_stream_is_read_into_its_answer_and_events_however_it_is_cut() {
        let bytes = STREAM.as_bytes();
        let (read, events) = read(&[bytes], 1 << 20);
        let completion = read.unwrap();
        assert_eq!(completion.text, "Сейчас 12 часов.");
        assert_eq!(completion.finish_reason.as_deref(), Some("stop"));
        assert_eq!(completion.usage.map(|u| (u.prompt_tokens, u.completion_tokens)), Some((5, 3)));
        assert_eq!(events.first(), Some(&ModelEvent::ReasoningDelta("Думаю.".into())));
        for cut in 1..bytes.len() {
            fuzz_stream(&[&bytes[..cut], &bytes[cut..]], 1 << 20);
        }
    }

    #[test]
    fn a_stream_that_ends_unfinished_past_its_bound_or_blank_is_refused() {
        let unfinished = "data: {\"choices\":[{\"delta\":{\"content\":\"Сейчас\"}}]}\n\n";
        let error = read(&[unfinished.as_bytes()], 1 << 20).0.unwrap_err();
        assert!(matches!(error, BackendError::Connect(_)), "{error}");
        let error = read(&[STREAM.as_bytes()], 10).0.unwrap_err();
        assert!(error.to_string().contains("larger than 10 bytes"), "{error}");
        let blank = "data: {\"choices\":[{\"delta\":{\"content\":\"  \"},\"finish_reason\":\"stop\"}]}\n\n";
        let error = read(&[blank.as_bytes()], 1 << 20).0.unwrap_err();
        assert!(error.to_string().contains("no text"), "{error}");
        for stream in [unfinished, STREAM, blank, "data: {\n\n", "event: error\ndata: {\"error\":{}}\n\n", ""] {
            for bound in [0, 1, 10, 1 << 20] {
                fuzz_stream(&[stream.as_bytes()], bound);
            }
        }
    }
}
