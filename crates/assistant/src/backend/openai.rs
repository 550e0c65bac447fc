//! The OpenAI-compatible HTTP backend: `POST {base_url}/chat/completions`
//! on vLLM, Ollama, llama.cpp's server, OpenAI and the like.
//!
//! One call is a few attempts inside its deadline: connection errors
//! (a connection refused, reset or closed mid-answer), 429 and 5xx are
//! retried after a jittered backoff when the backoff still fits; the breaker
//! counts calls, not attempts, and fails calls fast while the backend keeps
//! failing. The first-token timeout bounds only a stream: a server asked for
//! the whole answer may send even its headers only at the end. With `stream` on
//! the answer comes as SSE and each piece goes to the [`EventSink`] as it
//! comes; a server that ignores `stream` and answers plain JSON is read as
//! such, its events handed over at once. Once an event is out, the call is
//! not retried: a retry would repeat it. Streamed `usage` comes only from
//! servers asked for it: `extra_body.stream_options = {include_usage = true}`.

pub(crate) mod completion;
pub mod sse;
mod stream;

#[cfg(feature = "fuzzing")]
pub use completion::fuzz_completion;
#[cfg(feature = "fuzzing")]
pub use stream::fuzz_stream;

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use megamind_core::text::clip;
use prometheus::IntCounter;
use serde_json::{Map, Value, json};
use tokio::time::{Instant, timeout_at};

use crate::{
    backend::{
        BackendError, ChatMessage, Completion, EventSink, MAX_ANSWER_BYTES, ModelBackend, ModelEvent, ModelRequest,
        backoff,
        breaker::Breaker,
        config::{BackendConfig, Secret},
        openai::{completion::parse_completion, stream::Reading},
        warmup,
    },
    error::AssistantError,
};

/// Largest answer body (or stream event) read from the backend.
const MAX_BODY: usize = MAX_ANSWER_BYTES;
/// How much of an error body goes into the error message.
const MAX_ERROR_BODY: usize = 300;
/// The shortest start of the API key hidden at the end of a text cut
/// through it: shorter, it is a few letters any text may end with.
const MIN_KEY_START: usize = 4;
/// How long a stream is read after its `finish_reason`, for the usage and
/// `[DONE]` that may follow: a server that sends neither and keeps the
/// stream open has given its whole answer all the same.
const AFTER_FINISH: Duration = Duration::from_secs(1);

/// The OpenAI-compatible backend.
#[derive(Debug)]
pub struct OpenAi {
    client: reqwest::Client,
    url: String,
    api_key: Secret,
    body: Map<String, Value>,
    stream: bool,
    first_token_timeout: Duration,
    max_retries: u32,
    retry_backoff: Duration,
    breaker: Breaker,
    retries: IntCounter,
    /// Whether the warm-up is worth sending (the `warmup` setting and where the server is).
    warm: bool,
}

/// One failed attempt and what it tells about retrying.
#[derive(Debug)]
struct Failure {
    error: BackendError,
    retry_after: Option<Duration>,
    // Events already went to the sink: a retry would repeat them.
    streamed: bool,
}

impl From<BackendError> for Failure {
    fn from(error: BackendError) -> Failure {
        Failure { error, retry_after: None, streamed: false }
    }
}

impl OpenAi {
    /// The attempts of one call: retried while the error may pass and the
    /// backoff fits the deadline; each attempt asks the breaker first.
    async fn attempts(&self, request: &ModelRequest, events: &dyn EventSink) -> Result<Completion, BackendError> {
        let mut retry = 0;
        // What failed the attempt before, once there was one.
        let mut failed = None;
        loop {
            if !self.breaker.admit() {
                // A retry held back (the breaker opened meanwhile, or this
                // call is the one probe of a half-open breaker) ends with
                // its own failure: counted as what it was, and a failed
                // probe opens the breaker again.
                return Err(failed.unwrap_or(BackendError::CircuitOpen));
            }
            let failure = match self.attempt(request, events).await {
                Ok(completion) => return Ok(Completion { attempts: retry + 1, ..completion }),
                Err(failure) => failure,
            };
            if !failure.error.is_retryable() || failure.streamed || retry >= self.max_retries {
                return Err(failure.error);
            }
            let wait = backoff::delay(self.retry_backoff, retry, backoff::random())
                .max(failure.retry_after.unwrap_or_default());
            if Instant::now() + wait >= request.deadline {
                return Err(failure.error);
            }
            tracing::debug!(error = %failure.error, wait_ms = wait.as_millis() as u64, "assistant: retrying the model call");
            self.retries.inc();
            tokio::time::sleep(wait).await;
            failed = Some(failure.error);
            retry += 1;
        }
    }

    /// A client for `config.base_url`; counts retries in `retries`.
    pub fn new(config: &BackendConfig, retries: IntCounter) -> Result<OpenAi, AssistantError> {
        let client = megamind_core::http_client::client_builder()
            .connect_timeout(Duration::from_millis(config.connect_timeout_ms))
            .tcp_nodelay(true)
            .build()
            .map_err(|e| AssistantError::Setup(format!("cannot build the HTTP client: {e}")))?;
        let base = config.base_url.trim().trim_end_matches('/');
        let url =
            if base.ends_with("/chat/completions") { base.to_owned() } else { format!("{base}/chat/completions") };
        let mut body = Map::new();
        body.insert("model".into(), json!(config.model));
        body.insert("temperature".into(), json!(config.temperature));
        body.insert("max_tokens".into(), json!(config.max_tokens));
        body.insert("stream".into(), json!(config.stream));
        for (key, value) in &config.extra_body {
            body.entry(key.clone()).or_insert_with(|| value.clone());
        }
        Ok(OpenAi {
            client,
            url,
            api_key: config.api_key.clone(),
            body,
            stream: config.stream,
            first_token_timeout: Duration::from_millis(config.first_token_timeout_ms),
            max_retries: config.max_retries,
            retry_backoff: Duration::from_millis(config.retry_backoff_ms),
            breaker: Breaker::new(config.breaker_failures, Duration::from_millis(config.breaker_cooldown_ms)),
            warm: warmup::wanted(config.warmup, &config.base_url),
            retries,
        })
    }

    /// The endpoint called.
    pub fn url(&self) -> &str {
        &self.url
    }

    async fn attempt(&self, request: &ModelRequest, events: &dyn EventSink) -> Result<Completion, Failure> {
        let started = Instant::now();
        // Only a stream has a first token early: a server asked for the whole
        // answer (llama.cpp's) sends even its headers only at the end.
        let first_deadline =
            if self.stream { (started + self.first_token_timeout).min(request.deadline) } else { request.deadline };
        let first_timeout = if first_deadline < request.deadline { "first_token" } else { "call" };
        let mut body = self.body.clone();
        if let Some(sampling) = &request.sampling {
            body.insert("temperature".into(), json!(sampling.temperature));
            body.insert("max_tokens".into(), json!(sampling.max_tokens));
            for format in ["response_format", "json_schema", "grammar"] {
                body.shift_remove(format);
            }
            for (key, value) in sampling.extra_body.iter() {
                body.insert(key.clone(), value.clone());
            }
        }
        body.insert("messages".into(), json!(request.messages));
        let mut call = self.client.post(&self.url).json(&body);
        if !self.api_key.is_empty() {
            call = call.bearer_auth(self.api_key.expose());
        }
        let mut response = match timeout_at(first_deadline, call.send()).await {
            Err(_) => return Err(BackendError::Timeout(first_timeout).into()),
            Ok(Err(error)) => return Err(classify(&error).into()),
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        if !status.is_success() {
            let retry_after = backoff::retry_after(
                response.headers().get(reqwest::header::RETRY_AFTER).and_then(|v| v.to_str().ok()),
            );
            let body = read_body(&mut response, MAX_ERROR_BODY, error_body_deadline(request.deadline))
                .await
                .unwrap_or_default();
            let message = self.error_text(&body);
            return Err(Failure {
                error: BackendError::Status { status: status.as_u16(), message },
                retry_after,
                streamed: false,
            });
        }
        let is_sse = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
        if is_sse {
            let read = read_stream(response, started, (first_deadline, first_timeout), request.deadline, events).await;
            // An error the server wrote into the stream may quote the key
            // back, as an error body may.
            return read.map_err(|failure| Failure { error: self.key_hidden(failure.error), ..failure });
        }
        let body = match read_body(&mut response, MAX_BODY, request.deadline).await {
            Ok(body) if body.len() > MAX_BODY => {
                return Err(BackendError::BadResponse(format!("answer larger than {MAX_BODY} bytes")).into());
            }
            Ok(body) => body,
            Err(error) => return Err(error.into()),
        };
        let whole = parse_completion(&body)?;
        // Not streamed (by choice or by the server): the whole text is one piece.
        if let Some(reasoning) = whole.reasoning {
            events.event(ModelEvent::ReasoningDelta(reasoning));
        }
        events.event(ModelEvent::TextDelta(whole.text.clone()));
        if let Some(reason) = &whole.finish_reason {
            events.event(ModelEvent::Finish { reason: reason.clone() });
        }
        if let Some(usage) = whole.usage {
            events.event(ModelEvent::usage(usage));
        }
        Ok(Completion {
            text: whole.text,
            first_token: None,
            attempts: 1,
            finish_reason: whole.finish_reason,
            usage: whole.usage,
        })
    }

    /// The start of an error body, for the log, the API key hidden where
    /// the server quotes it back (cut first: a key the cut goes through is
    /// hidden as what is left of it).
    fn error_text(&self, body: &[u8]) -> String {
        let text = String::from_utf8_lossy(body);
        self.without_key(clip(&text, MAX_ERROR_BODY).to_owned()).trim().to_owned()
    }

    /// `text` with the API key hidden wherever it is quoted, and where a
    /// cut went through it: a text ending with the key's first
    /// [`MIN_KEY_START`] bytes or more ends with `<hidden>` instead.
    fn without_key(&self, text: String) -> String {
        let key = self.api_key.expose();
        if key.is_empty() {
            return text;
        }
        let mut text = if text.contains(key) { text.replace(key, "<hidden>") } else { text };
        let start = (MIN_KEY_START..key.len()).rev().find(|&n| key.is_char_boundary(n) && text.ends_with(&key[..n]));
        if let Some(start) = start {
            text.truncate(text.len() - start);
            text.push_str("<hidden>");
        }
        text
    }

    /// `error` with the API key hidden in its text.
    fn key_hidden(&self, error: BackendError) -> BackendError {
        match error {
            BackendError::Status { status, message } => {
                BackendError::Status { status, message: self.without_key(message) }
            }
            BackendError::BadResponse(message) => BackendError::BadResponse(self.without_key(message)),
            BackendError::Connect(message) => BackendError::Connect(self.without_key(message)),
            other => other,
        }
    }
}

/// The factory of `kind = "openai"`.
pub(crate) fn build(config: &BackendConfig, retries: &IntCounter) -> Result<Arc<dyn ModelBackend>, AssistantError> {
    Ok(Arc::new(OpenAi::new(config, retries.clone())?))
}

#[async_trait]
impl ModelBackend for OpenAi {
    fn name(&self) -> &'static str {
        "openai"
    }

    fn wants_warm_up(&self) -> bool {
        self.warm
    }

    /// One request with `max_tokens: 1`, so that the server's
    /// prefix cache holds them: no retries, no breaker, the body read and
    /// dropped. `Ok` when the server answered 2xx by `deadline`.
    async fn warm_up(&self, messages: &[ChatMessage], deadline: Instant) -> Result<(), BackendError> {
        let mut body = self.body.clone();
        body.insert("messages".into(), json!(messages));
        body.insert("max_tokens".into(), json!(1));
        body.insert("stream".into(), json!(false));
        // Refused beside `stream: false` (vLLM, SGLang, OpenAI answer 400),
        // and `extra_body` may set it for the calls that stream.
        body.shift_remove("stream_options");
        let mut call = self.client.post(&self.url).json(&body);
        if !self.api_key.is_empty() {
            call = call.bearer_auth(self.api_key.expose());
        }
        let mut response = match timeout_at(deadline, call.send()).await {
            Err(_) => return Err(BackendError::Timeout("call")),
            Ok(Err(error)) => return Err(classify(&error)),
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        let body = read_body(&mut response, MAX_ERROR_BODY, deadline).await?;
        if !status.is_success() {
            let message = self.error_text(&body);
            return Err(BackendError::Status { status: status.as_u16(), message });
        }
        Ok(())
    }

    async fn complete(&self, request: &ModelRequest, events: &dyn EventSink) -> Result<Completion, BackendError> {
        let outcome = self.attempts(request, events).await;
        // One call is one verdict for the breaker, however many attempts it
        // took: a turn against a dead server is one failure, not three.
        match &outcome {
            Ok(_) => self.breaker.success(),
            Err(BackendError::CircuitOpen) => {}
            Err(error) if error.is_backend_failure() => self.breaker.failure(),
            // The server answered, if not well: it is reachable.
            Err(_) => self.breaker.success(),
        }
        outcome
    }

    fn breaker_state(&self) -> i64 {
        self.breaker.state() as i64
    }
}

/// An error body is only for the log: a backend that sends the status and
/// then stalls must not hold the retry back.
fn error_body_deadline(deadline: Instant) -> Instant {
    (Instant::now() + Duration::from_millis(500)).min(deadline)
}

fn classify(error: &reqwest::Error) -> BackendError {
    if error.is_timeout() {
        BackendError::Timeout("connect")
    } else if error.is_decode() {
        BackendError::BadResponse(error.to_string())
    } else {
        // Refused, reset, closed early, or not HTTP at all: the wire failed.
        let mut message = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        BackendError::Connect(message)
    }
}

/// An error while reading a body that had begun: the connection broke
/// (closed or reset mid-answer), whatever reqwest calls it, so a retry may
/// pass where nothing was delivered yet.
fn broken(error: &reqwest::Error) -> BackendError {
    match classify(error) {
        BackendError::BadResponse(message) => BackendError::Connect(message),
        other => other,
    }
}

/// Reads the body up to `limit + 1` bytes (one more tells the caller it was
/// too large) before `deadline`.
async fn read_body(response: &mut reqwest::Response, limit: usize, deadline: Instant) -> Result<Vec<u8>, BackendError> {
    let mut body = Vec::new();
    loop {
        match timeout_at(deadline, response.chunk()).await {
            Err(_) => return Err(BackendError::Timeout("call")),
            Ok(Err(error)) => return Err(broken(&error)),
            Ok(Ok(None)) => return Ok(body),
            Ok(Ok(Some(bytes))) => {
                let room = (limit + 1).saturating_sub(body.len());
                body.extend_from_slice(&bytes[..bytes.len().min(room)]);
                if body.len() > limit {
                    return Ok(body);
                }
            }
        }
    }
}

async fn read_stream(
    mut response: reqwest::Response,
    started: Instant,
    (first_deadline, first_timeout): (Instant, &'static str),
    deadline: Instant,
    sink: &dyn EventSink,
) -> Result<Completion, Failure> {
    let mut reading = Reading::new(started, MAX_BODY);
    let fail = |error: BackendError, streamed: bool| Failure { error, retry_after: None, streamed };
    loop {
        let (until, which) =
            if reading.completion.first_token.is_none() { (first_deadline, first_timeout) } else { (deadline, "call") };
        let until = reading.finish_seen.map_or(until, |at| until.min(at + AFTER_FINISH));
        // Past its `finish_reason`, the answer is whole: a stream then
        // kept open, broken off or ending in bytes that do not read is
        // the server's trouble, not the answer's.
        let finished = reading.finish_seen.is_some();
        let chunk = match timeout_at(until, response.chunk()).await {
            Err(_) if finished => break,
            Err(_) => return Err(fail(BackendError::Timeout(which), reading.streamed)),
            Ok(Err(_)) if finished => break,
            Ok(Err(error)) => return Err(fail(broken(&error), reading.streamed)),
            Ok(Ok(chunk)) => chunk,
        };
        match reading.feed(chunk.as_deref(), sink) {
            Ok(false) => {}
            Ok(true) => break,
            // An answer over its bound after the finish is still over it.
            Err(error) if finished && reading.completion.text.len() <= MAX_BODY => {
                tracing::debug!(%error, "assistant: the model server's stream went on unreadably after its finish");
                break;
            }
            Err(error) => return Err(fail(error, reading.streamed)),
        }
    }
    let streamed = reading.streamed;
    reading.end().map_err(|error| fail(error, streamed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AssistantConfig;

    #[test]
    fn the_url_and_body_follow_the_config() {
        let mut config = AssistantConfig::with_base_url("http://llm:8000/v1/");
        config.backend.model = "qwen".into();
        config.backend.extra_body.insert("top_p".into(), json!(0.9));
        let backend = OpenAi::new(&config.backend, IntCounter::new("r", "r").unwrap()).unwrap();
        assert_eq!(backend.url(), "http://llm:8000/v1/chat/completions");
        assert_eq!(backend.body["model"], "qwen");
        assert_eq!(backend.body["temperature"], 0.3);
        assert_eq!(backend.body["max_tokens"], 512);
        assert_eq!(backend.body["top_p"], 0.9);
        let config = AssistantConfig::with_base_url("http://llm/v1/chat/completions");
        let backend = OpenAi::new(&config.backend, IntCounter::new("r", "r").unwrap()).unwrap();
        assert_eq!(backend.url(), "http://llm/v1/chat/completions");
    }

    #[test]
    fn an_error_body_quoting_the_api_key_is_logged_without_it() {
        let mut config = AssistantConfig::with_base_url("http://llm/v1");
        config.backend.api_key = "sk-secret-111".into();
        let backend = OpenAi::new(&config.backend, IntCounter::new("r", "r").unwrap()).unwrap();
        let body = br#"{"error":{"message":"Incorrect API key provided: Bearer sk-secret-111"}}"#;
        let text = backend.error_text(body);
        assert!(!text.contains("sk-secret-111") && text.contains("Bearer <hidden>"), "{text}");
        let error = BackendError::Status { status: 401, message: text };
        assert_eq!(error.for_screens(), "the model answered HTTP 401", "screens get no body at all");
    }

    #[test]
    fn a_key_the_error_s_bound_cuts_through_is_hidden_as_what_is_left_of_it() {
        let key = format!("sk-proj-{}", "Ab9".repeat(52));
        let mut config = AssistantConfig::with_base_url("http://llm/v1");
        config.backend.api_key = key.as_str().into();
        let backend = OpenAi::new(&config.backend, IntCounter::new("r", "r").unwrap()).unwrap();
        let leaks = |text: &str| (0..key.len() - 12).find(|&at| text.contains(&key[at..at + 12]));
        // The key starting anywhere before the bound, and the body going on past it.
        for filler in [0, 100, 150, 250, MAX_ERROR_BODY - 5] {
            let body = format!("{}Incorrect API key: {key} (see the docs)", "x".repeat(filler));
            let text = backend.error_text(body.as_bytes());
            assert!(leaks(&text).is_none(), "{filler}: {text}");
            assert!(text.len() <= MAX_ERROR_BODY + "<hidden>".len(), "{filler}: {}", text.len());
        }
        // A stream's error, cut to its own bound before it reaches the backend.
        let quoted = megamind_core::text::clip(&format!("{{\"error\":\"{}{key}\"}}", "y".repeat(150)), 200).to_owned();
        let error = backend.key_hidden(BackendError::Status { status: 401, message: quoted });
        assert!(leaks(&error.to_string()).is_none(), "{error}");
        // A text that merely ends as keys begin keeps its words.
        assert_eq!(backend.without_key("see sk-".into()), "see sk-");
    }
}
