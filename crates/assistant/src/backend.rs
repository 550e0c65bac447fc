//! The model backend seam: one chat completion per call, its text delivered
//! whole at the end and, on the way, as typed [`ModelEvent`]s (text and
//! reasoning pieces, how it finished, the tokens it cost) to an [`EventSink`].
//!
//! Implementations: [`openai::OpenAi`] (any OpenAI-compatible server) and
//! [`offline::Offline`] (embedded, no network), each built by its factory
//! from `[assistant.backend]`, chosen by its `kind` ([`BUILT_IN`]). Errors
//! are tagged by cause so that metrics, retries and the breaker agree on what
//! happened.

pub(crate) mod backoff;
pub(crate) mod breaker;
pub mod config;
pub mod offline;
pub mod openai;
pub(crate) mod warmup;

use std::{fmt, sync::Arc, time::Duration};

use async_trait::async_trait;
use serde::Serialize;
use tokio::time::Instant;

use crate::{backend::config::BackendConfig, error::AssistantError};

/// Who said a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The instructions.
    System,
    /// The user.
    User,
    /// The model, in earlier turns.
    Assistant,
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChatMessage {
    /// Who said it.
    pub role: Role,
    /// What was said.
    pub content: String,
}

impl ChatMessage {
    /// A message of `role`.
    pub fn new(role: Role, content: impl Into<String>) -> ChatMessage {
        ChatMessage { role, content: content.into() }
    }
}

/// One completion to make.
#[derive(Debug, Clone)]
pub struct ModelRequest {
    /// System prompt, history, then the user's words.
    pub messages: Vec<ChatMessage>,
    /// The session id the model is told to echo in commands; backends that
    /// do not read the prompt (the offline one) take it from here.
    pub session_id: String,
    /// When the whole call, retries included, must be over.
    pub deadline: Instant,
    /// Sampling of this call instead of the configured one (a skill's step).
    pub sampling: Option<Sampling>,
}

/// A call's own sampling: `temperature` and `max_tokens` replace the
/// configured ones, and the answer is free text (no `response_format`,
/// `json_schema` or `grammar` of `extra_body`: a skill answers in markers,
/// not the chat's JSON) unless `extra_body` says otherwise.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampling {
    /// `temperature` of the request body.
    pub temperature: f64,
    /// `max_tokens` of the request body.
    pub max_tokens: u32,
    /// More request body fields, over the configured ones (a grammar that
    /// keeps a small model to the skills' markers).
    pub extra_body: Arc<serde_json::Map<String, serde_json::Value>>,
}

impl ModelRequest {
    /// The last user message: what this call answers.
    pub fn utterance(&self) -> &str {
        self.messages.iter().rev().find(|m| m.role == Role::User).map_or("", |m| m.content.as_str())
    }
}

/// Largest answer a backend hands back (and largest event it reads), in bytes.
pub const MAX_ANSWER_BYTES: usize = 1 << 20;

/// Longest `finish_reason` kept, in bytes: the known ones are a word
/// (`stop`, `length`, `content_filter`, `tool_calls`), the rest is the
/// backend's invention.
pub const MAX_FINISH_REASON_BYTES: usize = 64;

/// A `finish_reason` as kept, wherever it is read from (a backend's
/// answer, another replica's stored outcome): trimmed, clipped to
/// [`MAX_FINISH_REASON_BYTES`], none when it says nothing.
pub(crate) fn bounded_finish_reason(text: &str) -> Option<String> {
    // Trimmed after the clip too: cut inside, it may end in blanks.
    let reason = megamind_core::text::clip(text.trim(), MAX_FINISH_REASON_BYTES).trim_end();
    (!reason.is_empty()).then(|| reason.to_owned())
}

/// A finished completion.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Completion {
    /// The model's whole answer.
    pub text: String,
    /// From the request to the first token (of the answer or of its
    /// reasoning), when the backend streamed.
    pub first_token: Option<Duration>,
    /// Attempts made, 1 without retries.
    pub attempts: u32,
    /// Why the model stopped (`stop`, `length`, ...), when the backend said.
    pub finish_reason: Option<String>,
    /// Tokens the call cost, when the backend said.
    pub usage: Option<TokenUsage>,
}

/// Tokens one completion cost, as the backend counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenUsage {
    /// Tokens of the messages sent.
    pub prompt_tokens: u64,
    /// Tokens the model produced, reasoning included.
    pub completion_tokens: u64,
}

/// One thing a backend reports while it answers, in the order it happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelEvent {
    /// More text of the answer.
    TextDelta(String),
    /// More of the model's reasoning before (or beside) the answer; never
    /// part of the answer's text.
    ReasoningDelta(String),
    /// The model stopped, for `reason` (`stop`, `length`, ...).
    Finish {
        /// The backend's `finish_reason`, at most [`MAX_FINISH_REASON_BYTES`].
        reason: String,
    },
    /// What the call cost.
    Usage {
        /// Tokens of the messages sent.
        prompt_tokens: u64,
        /// Tokens the model produced.
        completion_tokens: u64,
    },
}

impl ModelEvent {
    /// The event of `usage`.
    pub fn usage(usage: TokenUsage) -> ModelEvent {
        ModelEvent::Usage { prompt_tokens: usage.prompt_tokens, completion_tokens: usage.completion_tokens }
    }

    /// Bytes of text it carries.
    pub fn text_len(&self) -> usize {
        match self {
            ModelEvent::TextDelta(text) | ModelEvent::ReasoningDelta(text) => text.len(),
            ModelEvent::Finish { reason } => reason.len(),
            ModelEvent::Usage { .. } => 0,
        }
    }
}

/// Receives a backend's events while it answers.
pub trait EventSink: Send + Sync {
    /// One more event.
    fn event(&self, event: ModelEvent);
}

/// Ignores the events.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoEvents;

impl EventSink for NoEvents {
    fn event(&self, _event: ModelEvent) {}
}

/// Why a model call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// No connection, or it broke before a whole answer arrived.
    #[error("connection failed: {0}")]
    Connect(String),
    /// A timeout: `connect`, `first_token` or `call`.
    #[error("no answer in time ({0} timeout)")]
    Timeout(&'static str),
    /// The backend answered an HTTP error status.
    #[error("the backend answered HTTP {status}: {message}")]
    Status {
        /// The status code.
        status: u16,
        /// The start of the body, for the log.
        message: String,
    },
    /// The answer was not a chat completion.
    #[error("malformed answer: {0}")]
    BadResponse(String),
    /// The circuit breaker is open: the backend failed too often lately.
    #[error("the backend is failing; calls are paused")]
    CircuitOpen,
}

impl BackendError {
    /// Every [`BackendError::kind`], for the metrics listed at 0 from the start.
    pub const KINDS: [&'static str; 6] =
        ["connect", "timeout", "rate_limited", "status", "bad_response", "circuit_open"];

    /// The stable label for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            BackendError::Connect(_) => "connect",
            BackendError::Timeout(_) => "timeout",
            BackendError::Status { status: 429, .. } => "rate_limited",
            BackendError::Status { .. } => "status",
            BackendError::BadResponse(_) => "bad_response",
            BackendError::CircuitOpen => "circuit_open",
        }
    }

    /// What a screen following the call is told: the kind of failure and
    /// its status, never the backend's own words (an error body may quote
    /// the request's credentials) nor where the backend is. The log line
    /// has the whole error.
    pub fn for_screens(&self) -> String {
        match self {
            BackendError::Connect(_) => "the model could not be reached".into(),
            BackendError::Status { status, .. } => format!("the model answered HTTP {status}"),
            BackendError::BadResponse(_) => "the model's answer was malformed".into(),
            BackendError::Timeout(_) | BackendError::CircuitOpen => self.to_string(),
        }
    }

    /// Worth another attempt: the backend may answer the same request next time.
    pub fn is_retryable(&self) -> bool {
        match self {
            BackendError::Connect(_) => true,
            BackendError::Status { status, .. } => *status == 429 || *status >= 500,
            _ => false,
        }
    }

    /// Says the backend is unwell (not that our request was wrong): counts
    /// towards opening the breaker.
    pub fn is_backend_failure(&self) -> bool {
        match self {
            BackendError::Connect(_) | BackendError::Timeout(_) => true,
            BackendError::Status { status, .. } => *status == 429 || *status >= 500,
            BackendError::BadResponse(_) | BackendError::CircuitOpen => false,
        }
    }
}

/// A chat model.
#[async_trait]
pub trait ModelBackend: Send + Sync + fmt::Debug + 'static {
    /// The label of metrics: `openai`, `offline`.
    fn name(&self) -> &'static str;

    /// Completes `request`, handing its events to `events` as they come:
    /// the text in [`ModelEvent::TextDelta`]s that add up to the returned
    /// text, then [`ModelEvent::Finish`] and [`ModelEvent::Usage`] when the
    /// backend reports them. Events handed out are never taken back, so a
    /// backend does not retry once it has sent one. Must return by
    /// `request.deadline` (the caller enforces it as well).
    async fn complete(&self, request: &ModelRequest, events: &dyn EventSink) -> Result<Completion, BackendError>;

    /// The circuit breaker's state for the metric: 0 closed, 1 half-open, 2 open.
    fn breaker_state(&self) -> i64 {
        0
    }

    /// Whether the backend follows the prompts it is sent, as a language
    /// model does. One that answers by rules of its own (the offline
    /// backend) is not given skills to run.
    fn follows_prompts(&self) -> bool {
        true
    }

    /// Whether [`ModelBackend::warm_up`] is worth sending: a model server
    /// that keeps a prefix cache and does not bill the call.
    fn wants_warm_up(&self) -> bool {
        false
    }

    /// Sends `messages` once, so that the model server's prefix cache holds
    /// them, by `deadline`: no retries, no breaker, not a model call. `Ok`
    /// when the server took them; by default there is nothing to warm.
    async fn warm_up(&self, _messages: &[ChatMessage], _deadline: Instant) -> Result<(), BackendError> {
        Ok(())
    }
}

/// Builds a backend from `[assistant.backend]`, counting its retries in
/// `retries`.
pub type Factory = fn(&BackendConfig, &prometheus::IntCounter) -> Result<Arc<dyn ModelBackend>, AssistantError>;

/// The backends built in, by their `kind`. A new backend is a file of its
/// own and one line here (or, from outside the crate,
/// `AssistantModule::with_backend`).
pub const BUILT_IN: &[(&str, Factory)] = &[("openai", openai::build), ("offline", offline::build)];

/// The factory of the backend `kind` among `factories`.
pub fn factory_of(kind: &str, factories: &[(&'static str, Factory)]) -> Result<Factory, AssistantError> {
    match factories.iter().find(|(name, _)| *name == kind) {
        Some((_, factory)) => Ok(*factory),
        None => {
            let known: Vec<&str> = factories.iter().map(|(name, _)| *name).collect();
            Err(AssistantError::Setup(format!("backend.kind = {kind:?}: no such backend ({})", known.join(", "))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::BackendError;

    #[test]
    fn every_kind_is_listed() {
        let errors = [
            BackendError::Connect(String::new()),
            BackendError::Timeout("call"),
            BackendError::Status { status: 429, message: String::new() },
            BackendError::Status { status: 500, message: String::new() },
            BackendError::BadResponse(String::new()),
            BackendError::CircuitOpen,
        ];
        let kinds: Vec<&str> = errors.iter().map(BackendError::kind).collect();
        assert_eq!(kinds, BackendError::KINDS, "one of each, in order");
    }
}
