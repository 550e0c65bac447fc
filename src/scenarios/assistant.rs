//! `assistant`: a voice assistant backed by a chat model (any
//! OpenAI-compatible server, or the embedded offline backend) that answers
//! in words and opens or closes apps on the client (the app-action answer
//! format: `{session_id, command, args, text}`).
//!
//! # Timing
//! A model takes 0.3-10 s; Megamind gives each handler 300 ms. So:
//! - `/run` starts the model call in a task of its own, once per `RequestId`
//!   ([`calls`]; however often Megamind retries, and on top of the server's
//!   idempotency cache), waits `run_wait_ms` (150 ms) and answers the model's
//!   answer if it is there; otherwise it hands over at once with
//!   `ContinueArguments` (`TAssistantContinueArguments`) and `Features`.
//! - `/continue` waits for the same call until its own deadline minus
//!   `answer_margin_ms` and answers. If the model is still thinking it
//!   speaks the fallback ("Секунду, ещё думаю — спросите меня ещё раз") with
//!   the microphone open, and records the call as pending in the state.
//! - The call goes on, bounded by `call_timeout_ms` (30 s), and its answer is
//!   kept `result_ttl_secs`. The user's repeat of the same question (same
//!   words, case and punctuation aside) in the next turn gets that answer
//!   instead of a new call; a different question starts a new one.
//! - `ContinueArguments` carry the words and the state, so a `/continue`
//!   that lands on another instance (or after the answer expired) starts the
//!   call itself instead of failing.
//!
//! # Decisions
//! - Past `max_in_flight` model calls, `/run` declines with `IsIrrelevant`
//!   and a spoken reason: the `Scenario` trait cannot answer HTTP 429, the
//!   cap is this scenario's own resource (the server-wide 429 stays the
//!   server's), and declining lets Megamind answer with another scenario.
//!   `/continue` at the cap (the call was lost) speaks the apology.
//! - A failed model call (connection, timeout, HTTP error, garbage, open
//!   breaker) is answered with the spoken apology and counted in
//!   `megamind_assistant_model_calls_total{outcome}`: the user asked and deserves an
//!   answer. So is a model answer with nothing to say (empty, or JSON that
//!   does not parse). A protocol `Error` is kept for requests that make no
//!   sense: `/continue` without our arguments (`bad_request`).
//! - The session id the model echoes in commands: see [`state`].
//!
//! # Layout
//! This file is the timing shell: it starts, waits for, hands over and
//! falls back on model calls, and knows no prompt or answer format. What a
//! turn means is a [`policy`]'s ([`policy::ChatPolicy`]: [`prompt`] the
//! messages, [`answer`] the app-action answer parser, [`reply`] the protocol
//! answers); [`turn`] reads the input it is given. [`config`] the
//! `[assistant]` table and [`module`] the scenario module `serve` builds;
//! [`backend`] the model trait and its events; [`openai`] with
//! [`upstream_sse`], [`upstream_json`], [`backoff`] and [`breaker`] the HTTP
//! backend; [`offline`] the embedded one; [`calls`] single flight over a
//! [`crate::store::FlightStore`], each call with its [`record`] of events and
//! its [`outcome`] stored as bytes; [`state`] the dialog state and the
//! handover arguments; [`metrics`].

pub mod answer;
pub mod backend;
mod backoff;
mod breaker;
pub(crate) mod calls;
pub mod config;
pub mod metrics;
pub mod module;
pub mod offline;
pub mod openai;
mod outcome;
pub(crate) mod policy;
pub mod prompt;
pub mod record;
// Public, but hidden, only so the fuzz targets under `fuzz/` can reach them.
#[doc(hidden)]
pub mod reply;
pub(crate) mod speech;
pub(crate) mod state;
pub(crate) mod turn;
mod upstream_json;
#[doc(hidden)]
pub mod upstream_sse;

pub use module::AssistantModule;

use std::sync::Arc;

use async_trait::async_trait;
use prost_types::Any;
use tokio::time::{Instant, timeout_at};

use self::{
    backend::{BackendError, ModelBackend, ModelRequest},
    calls::{AtCapacity, Calls, Handle},
    config::AssistantConfig,
    metrics::AssistantMetrics,
    outcome::ModelOutcome,
    policy::{ChatPolicy, DialogPolicy, Interpretation, TurnPlan},
    record::{CallRecord, Follower},
    state::Caps,
    turn::TurnInput,
};
use crate::{
    proto::{
        megamind_scenario::v1::{TAssistantContinueArguments, TAssistantPending, TAssistantState},
        n_alice::n_scenarios::{
            TScenarioApplyRequest, TScenarioContinueResponse, TScenarioResponseBody, TScenarioRunRequest,
            TScenarioRunResponse, t_scenario_continue_response, t_scenario_run_response,
        },
    },
    scenario::{CallContext, Handler, Scenario, ScenarioError, ScenarioResult},
};

/// Spoken when declining a turn that brings nothing to answer.
const NO_WORDS: &str = "Я отвечаю только на сказанное или написанное.";
const BUSY: &str = "Сейчас я отвечаю слишком многим — спросите меня чуть позже.";

/// Why the assistant could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum AssistantError {
    /// A configuration value that passed validation but cannot be used.
    #[error("assistant: {0}")]
    Setup(String),
    /// Metrics could not be registered.
    #[error("assistant metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}

/// The assistant scenario.
#[derive(Debug)]
pub struct Assistant {
    backend: Arc<dyn ModelBackend>,
    policy: Arc<dyn DialogPolicy>,
    calls: Calls,
    metrics: AssistantMetrics,
    config: AssistantConfig,
    caps: Caps,
}

impl Assistant {
    /// The assistant of `config`: the HTTP backend at `config.base_url`, or
    /// the offline one without it; metrics registered into `registry`.
    pub fn from_config(config: &AssistantConfig, registry: &prometheus::Registry) -> Result<Assistant, AssistantError> {
        let metrics = AssistantMetrics::new(registry)?;
        if config.is_offline() {
            tracing::info!("assistant: no llm base_url; the embedded offline backend answers");
        } else if config.base_url.contains('@') {
            tracing::info!(model = %config.model, "assistant: OpenAI-compatible backend (URL with credentials not logged)");
        } else {
            tracing::info!(base_url = %config.base_url, model = %config.model, "assistant: OpenAI-compatible backend");
        }
        let backend: Arc<dyn ModelBackend> = if config.is_offline() {
            Arc::new(offline::Offline)
        } else {
            Arc::new(openai::OpenAi::new(config, metrics.retries.clone())?)
        };
        Assistant::with_backend(config, backend, metrics)
    }

    /// The assistant over any backend (tests, benchmarks, other backends).
    pub fn with_backend(
        config: &AssistantConfig,
        backend: Arc<dyn ModelBackend>,
        metrics: AssistantMetrics,
    ) -> Result<Assistant, AssistantError> {
        let policy = Arc::new(ChatPolicy::from_config(config, &metrics)?);
        Ok(Assistant::with_policy(config, backend, policy, metrics))
    }

    /// The assistant over any backend and dialog policy.
    pub(crate) fn with_policy(
        config: &AssistantConfig,
        backend: Arc<dyn ModelBackend>,
        policy: Arc<dyn DialogPolicy>,
        metrics: AssistantMetrics,
    ) -> Assistant {
        let retention = calls::Retention {
            ttl: config.result_ttl(),
            max_entries: config.max_retained,
            max_bytes: config.max_retained_bytes,
        };
        let calls = Calls::new(
            config.max_in_flight,
            config.call_timeout(),
            retention,
            metrics.in_flight.clone(),
            metrics.evicted.clone(),
        );
        let caps = Caps { turns: config.history_turns, bytes: config.history_max_bytes };
        Assistant { backend, policy, calls, metrics, config: config.clone(), caps }
    }

    /// The backend's name: `openai` or `offline`.
    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    /// Model calls running now.
    pub fn calls_in_flight(&self) -> usize {
        self.calls.in_flight()
    }

    /// A reader of the events of the model call `call_id` (the `RequestId`
    /// that started it), from its first event, while it runs or is kept.
    pub fn follow(&self, call_id: &str) -> Option<Follower> {
        self.calls.follow(call_id)
    }

    /// The call `args.call_id`: the running or kept one, else a new one.
    async fn start(&self, args: &TAssistantContinueArguments) -> Result<Handle, AtCapacity> {
        let call = |record: Arc<CallRecord>| {
            let state = args.state.clone().unwrap_or_default();
            let messages = self.policy.messages(&state, &args.utterance);
            let (backend, metrics) = (self.backend.clone(), self.metrics.clone());
            let timeout = self.config.call_timeout();
            let session_id = state.session_id;
            async move {
                let started = Instant::now();
                let request = ModelRequest { messages, session_id, deadline: started + timeout };
                let outcome = timeout_at(request.deadline, backend.complete(&request, &*record))
                    .await
                    .unwrap_or(Err(BackendError::Timeout("call")));
                metrics.model_call(&*backend, &outcome, started.elapsed());
                outcome
            }
        };
        let (handle, _) = self.calls.begin(&args.call_id, call).await?;
        Ok(handle)
    }

    /// The answer body of a finished call.
    fn finish(
        &self,
        handler: Handler,
        args: &TAssistantContinueArguments,
        outcome: &ModelOutcome,
    ) -> TScenarioResponseBody {
        let mut state = args.state.clone().unwrap_or_default();
        state.pending = None;
        let completion = match outcome {
            Ok(completion) => completion,
            Err(error) => {
                tracing::warn!(call_id = %args.call_id, %error, "assistant: the model call failed; apologizing");
                return self.apology(handler, &state);
            }
        };
        match self.policy.interpret(&args.utterance, completion, &state, "") {
            Interpretation::Answer(body) => {
                self.metrics.answer(handler.as_str(), "model");
                *body
            }
            Interpretation::Unusable => {
                tracing::warn!(call_id = %args.call_id, "assistant: the model answered nothing usable; apologizing");
                self.apology(handler, &state)
            }
        }
    }

    fn apology(&self, handler: Handler, state: &TAssistantState) -> TScenarioResponseBody {
        self.metrics.answer(handler.as_str(), "apology");
        reply::spoken(&self.config.apology_text, false, state, "assistant.apology")
    }

    /// Where waiting must stop to answer by `deadline`.
    fn stop_by(&self, deadline: Instant) -> Instant {
        deadline.checked_sub(self.config.answer_margin()).unwrap_or(deadline)
    }

    /// The pending call the user's `utterance` repeats, if it can still answer.
    async fn repeated_call(&self, pending: Option<TAssistantPending>, utterance: &str) -> Option<String> {
        let pending = pending?;
        if turn::normalize(&pending.utterance) != turn::normalize(utterance) {
            return None;
        }
        // A failed call is not worth repeating: the repeat calls again.
        let handle = self.calls.get(&pending.call_id).await?;
        if handle.ready().is_some_and(|outcome| outcome.is_err()) {
            return None;
        }
        Some(pending.call_id)
    }
}

/// The longest prefix of `text` of at most `max_bytes` that ends on a
/// character boundary.
pub(crate) fn clip(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[async_trait]
impl Scenario for Assistant {
    async fn run(&self, request: TScenarioRunRequest, ctx: CallContext) -> ScenarioResult<TScenarioRunResponse> {
        let stop_by = (Instant::now() + self.config.run_wait()).min(self.stop_by(ctx.deadline));
        let base = request.base_request.unwrap_or_default();
        let Some(input) = request.input.as_ref().and_then(TurnInput::from_input) else {
            self.metrics.answer("run", "irrelevant");
            return Ok(reply::irrelevant(NO_WORDS).into());
        };
        let mut state = state::of_request(&base, &ctx.request_id, self.caps);
        let utterance = match self.policy.plan(&input, &state) {
            TurnPlan::CallModel { utterance } => utterance,
            TurnPlan::Decline { reason } => {
                self.metrics.answer("run", "irrelevant");
                return Ok(reply::irrelevant(&reason).into());
            }
        };
        let pending = state.pending.take();
        let call_id = self.repeated_call(pending, &utterance).await.unwrap_or_else(|| ctx.request_id.clone());
        let args = TAssistantContinueArguments { call_id, utterance, state: Some(state), ..Default::default() };
        let Ok(handle) = self.start(&args).await else {
            tracing::warn!(request_id = %ctx.request_id, "assistant: at the in-flight model call cap; declining");
            self.metrics.answer("run", "refused");
            return Ok(reply::irrelevant(BUSY).into());
        };
        let response = match handle.wait_until(stop_by).await {
            Some(outcome) => {
                t_scenario_run_response::Response::ResponseBody(self.finish(Handler::Run, &args, &outcome))
            }
            None => {
                self.metrics.answer("run", "handover");
                let any = Any::from_msg(&args).map_err(|e| ScenarioError::Internal(e.to_string()))?;
                t_scenario_run_response::Response::ContinueArguments(any)
            }
        };
        Ok(TScenarioRunResponse { response: Some(response), features: Some(reply::features()), ..Default::default() }
            .into())
    }

    async fn r#continue(
        &self,
        request: TScenarioApplyRequest,
        ctx: CallContext,
    ) -> ScenarioResult<TScenarioContinueResponse> {
        let stop_by = self.stop_by(ctx.deadline);
        let args = state::continue_arguments(request.arguments.as_ref())?;
        let body = match self.start(&args).await {
            Err(AtCapacity) => {
                tracing::warn!(call_id = %args.call_id, "assistant: at the in-flight model call cap in /continue");
                let mut state = args.state.clone().unwrap_or_default();
                state.pending = None;
                self.metrics.answer("continue", "refused");
                reply::spoken(&self.config.apology_text, false, &state, "assistant.apology")
            }
            Ok(handle) => match handle.wait_until(stop_by).await {
                Some(outcome) => self.finish(Handler::Continue, &args, &outcome),
                None => {
                    let mut state = args.state.clone().unwrap_or_default();
                    state.pending = Some(TAssistantPending {
                        call_id: args.call_id.clone(),
                        utterance: args.utterance,
                        ..Default::default()
                    });
                    self.metrics.answer("continue", "fallback");
                    reply::spoken(&self.config.filler_texts[0], true, &state, "assistant.fallback")
                }
            },
        };
        Ok(TScenarioContinueResponse {
            response: Some(t_scenario_continue_response::Response::ResponseBody(body)),
            ..Default::default()
        }
        .into())
    }
}

#[cfg(test)]
mod tests;
