//! `assistant`: a voice assistant backed by a chat model (any
//! OpenAI-compatible server, or the embedded offline backend) that answers
//! in words and opens or closes apps on the client (the app-action answer
//! format: `{session_id, command, args, text}`).
//!
//! # Timing
//! A model takes 0.3-10 s; Megamind gives each handler 300 ms. So:
//! - `/run` starts the model call in a task of its own, once per `RequestId`
//!   ([`crate::calls`]; however often Megamind retries, and on top of the server's
//!   idempotency cache), waits `run_wait_ms` (150 ms) and answers the model's
//!   answer if it is there; otherwise it hands over at once with
//!   `ContinueArguments` (`TAssistantContinueArguments`) and `Features`.
//! - `/continue` waits for the same call until its own deadline minus the
//!   [margin] (`answer_margin_ms`, 30 ms, plus how late answers have
//!   recently been built) and answers. If the model is still thinking, it
//!   holds: it speaks the complete sentences a streamed answer has produced
//!   since the last hop, else the next filler (`filler_texts`, never the same
//!   twice in a row), and adds a `CallbackDirective` ([`crate::dialog::callback`]). The
//!   client sends it back as `Input.Callback` of a new `/run`, which joins
//!   the same call: it answers if the call is done, else hands over to
//!   `/continue` again. What was held (the hops, the sentences spoken, the
//!   last filler) rides in the state. The final answer speaks what was not
//!   spoken yet; the card holds the whole text. Hops are bounded by the
//!   call's own timeout (then the apology) and by [`callback::max_hops`].
//! - The call goes on, bounded by `call_timeout_ms` (30 s), and its answer is
//!   kept `result_ttl_secs`; a model still thinking `max_thinking_ms` into
//!   the call, with no word of its answer, is stopped (`calls::thinking`).
//!   A client that does not follow callbacks still works: a hold keeps the
//!   microphone open, and the user's repeat of the same question (same
//!   words, case and punctuation aside) joins the call too; a call that
//!   failed gives its apology once, and the next repeat calls again. A
//!   different question starts a new call.
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
//! - The session id the model echoes in commands: see [`crate::dialog::state`].
//!
//! # Layout
//! This file is the timing shell: it starts, waits for, hands over and
//! falls back on model calls, and knows no prompt or answer format. What a
//! turn means is a dialog policy's ([`crate::skills::dialog::SkillPolicy`]:
//! skills, around the chat of [`crate::dialog`]); the model behind it a
//! backend's ([`crate::backend`]); single flight over model calls and their
//! records [`crate::calls`]'; the screens' `/llm` routes [`crate::llm`]'s.
//! [`margin`] is the shell's own: the time it keeps to build an answer.

mod margin;

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use megamind_core::{
    proto::n_alice::n_scenarios::{
        TScenarioApplyRequest, TScenarioBaseRequest, TScenarioContinueResponse, TScenarioResponseBody,
        TScenarioRunRequest, TScenarioRunResponse, t_scenario_continue_response, t_scenario_run_response,
    },
    rules::{auth::AddressKey, logging::Throttle},
    scenario::{CallContext, Handler, Scenario, ScenarioError, ScenarioResult},
    store::Stores,
};
use prost_types::{Any, Struct};
use tokio::time::{Instant, timeout_at};

use crate::{
    assistant::margin::Margin,
    backend::{BackendError, Factory, ModelBackend, ModelRequest, warmup},
    background, calls,
    calls::{
        AtCapacity, Calls, Handle,
        outcome::ModelOutcome,
        record::{CallRecord, Follower},
        thinking,
    },
    config::AssistantConfig,
    dialog::{
        callback,
        policy::{DialogPolicy, Interpretation, TurnPlan},
        reply,
        reply::NO_WORDS,
        state,
        state::Caps,
        turn,
        turn::TurnInput,
    },
    error::AssistantError,
    llm::routes,
    metrics::AssistantMetrics,
    proto::megamind_scenario::v1::{TAssistantContinueArguments, TAssistantPending, TAssistantState},
    skills::dialog::SkillPolicy,
};

const BUSY: &str = "Сейчас я отвечаю слишком многим — спросите меня чуть позже.";
/// Spoken when declining a callback for a call the dialog no longer waits for.
const NOTHING_PENDING: &str = "Этот ответ уже не ждут.";

/// The assistant scenario.
#[derive(Debug)]
pub struct Assistant {
    backend: Arc<dyn ModelBackend>,
    policy: Arc<dyn DialogPolicy>,
    calls: Calls,
    metrics: AssistantMetrics,
    config: AssistantConfig,
    caps: Caps,
    margin: Margin,
    activity: Arc<warmup::Activity>,
    /// The skills policy, when it is the policy: for the catalog's route.
    skills: Option<Arc<SkillPolicy>>,
    /// What the stream and answer addresses are signed with.
    addresses: Arc<AddressKey>,
}

impl Assistant {
    /// The assistant of `config` with the built-in backends
    /// ([`crate::backend::BUILT_IN`]); metrics registered into `registry`.
    pub fn from_config(config: &AssistantConfig, registry: &prometheus::Registry) -> Result<Assistant, AssistantError> {
        Assistant::from_config_with(config, registry, crate::backend::BUILT_IN)
    }

    /// The assistant of `config`, its backend the one of `factories` that
    /// `[assistant.backend] kind` names; metrics registered into `registry`.
    pub fn from_config_with(
        config: &AssistantConfig,
        registry: &prometheus::Registry,
        factories: &[(&'static str, Factory)],
    ) -> Result<Assistant, AssistantError> {
        let metrics = AssistantMetrics::new(registry)?;
        let backend_config = &config.backend;
        let kind = backend_config.kind();
        let factory = crate::backend::factory_of(kind, factories)?;
        let backend = factory(backend_config, &metrics.retries)?;
        let warm = backend.wants_warm_up();
        let assistant = Assistant::with_backend(config, backend, metrics)?;
        if warm {
            assistant.keep_warm(factory)?;
        }
        // Said once it is built: a configuration refused is never preceded by it.
        if kind == "offline" {
            tracing::info!("assistant: no llm base_url; the embedded offline backend answers");
        } else if backend_config.base_url.contains('@') {
            tracing::info!(kind, model = %backend_config.model, "assistant: backend (URL with credentials not logged)");
        } else {
            tracing::info!(kind, base_url = %backend_config.base_url, model = %backend_config.model, "assistant: backend");
        }
        Ok(assistant)
    }

    /// Starts the warm-up task (`backend::warmup`) in the background, with
    /// a backend of its own made by `factory`, so that no connection outlives
    /// the runtime that drives it.
    fn keep_warm(&self, factory: Factory) -> Result<(), AssistantError> {
        // A session of its own: the prompt's static text is what warms.
        let state = TAssistantState { session_id: state::new_session_id(0, "warmup"), ..Default::default() };
        let messages = self.policy.messages(&state, "Привет");
        let (config, metrics) = (self.config.clone(), self.metrics.clone());
        let activity = Arc::downgrade(&self.activity);
        let task = async move {
            let backend = match factory(&config.backend, &metrics.retries) {
                Ok(backend) => backend,
                Err(error) => return tracing::warn!(%error, "assistant: no warm-up"),
            };
            let (timeout, counter) = (config.calls.call_timeout(), metrics.warmups.clone());
            let warm = move || {
                let (backend, messages, counter) = (backend.clone(), messages.clone(), counter.clone());
                async move {
                    let started = Instant::now();
                    match backend.warm_up(&messages, started + timeout).await {
                        Ok(()) => {
                            counter.with_label_values(&["ok"]).inc();
                            let ms = started.elapsed().as_millis() as u64;
                            tracing::info!(ms, "assistant: the model server is warm");
                        }
                        Err(error) => {
                            counter.with_label_values(&["failed"]).inc();
                            tracing::warn!(%error, "assistant: the model server's warm-up failed");
                        }
                    }
                }
            };
            let idle = Duration::from_secs(config.backend.warmup_idle_secs);
            warmup::keep_warm(activity, idle, warm).await;
        };
        background::spawn("assistant-warmup", task)
            .map_err(|e| AssistantError::Setup(format!("cannot start the warm-up: {e}")))
    }

    /// The assistant over any backend (tests, benchmarks, other backends).
    pub fn with_backend(
        config: &AssistantConfig,
        backend: Arc<dyn ModelBackend>,
        metrics: AssistantMetrics,
    ) -> Result<Assistant, AssistantError> {
        metrics.start_at_zero(backend.name());
        metrics.watch_breaker(&backend);
        let policy = Arc::new(SkillPolicy::from_config(config, &metrics, !backend.follows_prompts())?);
        let skills = Some(policy.clone());
        let mut assistant = Assistant::with_policy(config, backend, policy, metrics)?;
        assistant.skills = skills;
        Ok(assistant)
    }

    /// The assistant over any backend and dialog policy.
    pub(crate) fn with_policy(
        config: &AssistantConfig,
        backend: Arc<dyn ModelBackend>,
        policy: Arc<dyn DialogPolicy>,
        metrics: AssistantMetrics,
    ) -> Result<Assistant, AssistantError> {
        let addresses = Arc::new(config.llm.address_key().map_err(AssistantError::Setup)?);
        let calls = calls_of(config, &metrics, &Stores::memory())?;
        let caps = Caps::of(config);
        let margin = Margin::new(config.answer_margin());
        let activity = warmup::Activity::new();
        let config = config.clone();
        Ok(Assistant { backend, policy, calls, metrics, config, caps, margin, activity, skills: None, addresses })
    }

    /// The same assistant, its model calls in the server's stores: shared
    /// by replicas when `[store] url` is set, else this process's memory as
    /// before.
    pub(crate) fn with_stores(mut self, stores: &Stores) -> Result<Assistant, AssistantError> {
        self.calls = calls_of(&self.config, &self.metrics, stores)?;
        Ok(self)
    }

    /// The backend's name: `openai` or `offline`.
    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    /// What the `/llm` routes read of this assistant.
    pub(crate) fn llm_sources(&self) -> routes::Sources {
        routes::Sources {
            config: self.config.clone(),
            metrics: self.metrics.clone(),
            calls: self.calls.clone(),
            skills: self.skills.clone(),
            addresses: self.addresses.clone(),
        }
    }

    /// Model calls running now.
    pub fn calls_in_flight(&self) -> usize {
        self.calls.in_flight()
    }

    /// A reader of the events of the model call `call_id` (the `RequestId`
    /// that started it), from its first event, while it runs or is kept.
    pub async fn follow(&self, call_id: &str) -> Option<Follower> {
        self.calls.follow(call_id).await
    }

    /// The call `args.call_id`: the running or kept one, else a new one;
    /// `true` when this replica began it.
    async fn start(&self, args: &TAssistantContinueArguments) -> Result<(Handle, bool), AtCapacity> {
        // Made only if this replica begins the call: a join or a replay
        // copies no state.
        let call = |record| self.model_call(args).run(record);
        self.calls.begin(&args.call_id, !args.spoken.is_empty(), call).await
    }

    /// The model call `args` ask for, run only if this replica begins it.
    fn model_call(&self, args: &TAssistantContinueArguments) -> ModelCall {
        ModelCall {
            state: args.state.clone().unwrap_or_default(),
            utterance: args.utterance.clone(),
            call_id: args.call_id.clone(),
            policy: self.policy.clone(),
            backend: self.backend.clone(),
            metrics: self.metrics.clone(),
            timeout: self.config.calls.call_timeout(),
            thinking: self.config.calls.max_thinking(),
            format: self.config.llm.stream_format,
            activity: self.activity.clone(),
        }
    }

    /// The outcome of the call `handle` follows, by `stop_by`. A call
    /// whose lease ended without an outcome (its replica died mid-call, or
    /// it panicked) is begun again, once: this replica runs it, unless
    /// another one claimed it first, or Redis lost its claim lately and its
    /// runner is waited for.
    async fn outcome(
        &self,
        args: &TAssistantContinueArguments,
        handle: Handle,
        stop_by: Instant,
    ) -> Option<Arc<ModelOutcome>> {
        let outcome = handle.wait_until(stop_by).await;
        if !handle.abandoned() {
            return outcome;
        }
        // Begun again on a task of its own, waited for until `stop_by` only:
        // over a shared store, beginning takes up to three round trips, and
        // a hop that learns of the abandon at its `stop_by` would answer
        // late. Cut short instead, the call would be left unclaimed, or
        // claimed with no run, until its lease ran out; on its own, it runs
        // and the next hop finds it.
        let (calls, call_id, heard) = (self.calls.clone(), args.call_id.clone(), !args.spoken.is_empty());
        let call = self.model_call(args);
        let again = tokio::spawn(async move {
            let begun = calls.begin(&call_id, heard, move |record| call.run(record)).await;
            match &begun {
                Ok((_, true)) => {
                    static BEGUN_AGAIN: Throttle = Throttle::new();
                    if let Some(left_out) = BEGUN_AGAIN.due() {
                        tracing::warn!(%call_id, left_out, "assistant: a model call was left without an answer; begun again");
                    }
                }
                Ok((_, false)) => {
                    tracing::debug!(%call_id, "assistant: a model call was left without an answer; asked for again");
                }
                Err(AtCapacity) => {}
            }
            begun.ok().map(|(again, _)| again)
        });
        match timeout_at(stop_by, again).await {
            Ok(Ok(Some(again))) => again.wait_until(stop_by).await,
            // Still beginning: the hop holds, as for a call still running.
            Err(_elapsed) => None,
            // At the cap, or beginning failed: the abandon is the outcome.
            Ok(Ok(None) | Err(_)) => outcome,
        }
    }

    /// The answer body of a finished call; the call the policy goes on
    /// with by itself, if any, is started now, so that it is often done
    /// when its callback comes.
    async fn finish(
        &self,
        handler: Handler,
        args: &TAssistantContinueArguments,
        outcome: &ModelOutcome,
    ) -> TScenarioResponseBody {
        let mut state = args.state.clone().unwrap_or_default();
        state.pending = None;
        let Ok(completion) = outcome else {
            return self.apology(handler, &state);
        };
        let unusable = |state: &TAssistantState| {
            if let Some(left_out) = UNUSABLE.due() {
                tracing::warn!(call_id = %args.call_id, left_out, "assistant: the model answered nothing usable; apologizing");
            }
            self.apology(handler, state)
        };
        match self.policy.interpret(&args.call_id, &args.utterance, completion, &state, &args.spoken) {
            Interpretation::Answer(body) => {
                self.metrics.answer(handler.as_str(), "model");
                *body
            }
            Interpretation::AnswerThen(body, next) => {
                self.metrics.answer(handler.as_str(), "model");
                if self.start(&next).await.is_err() {
                    // Its callback starts it when there is room.
                    tracing::debug!(call_id = %next.call_id, "assistant: at the in-flight cap; the next call waits");
                }
                *body
            }
            Interpretation::Unusable => unusable(&state),
            Interpretation::UnusableIn(state) => unusable(&state),
        }
    }

    /// The answer of a `/continue` whose call is still running: what the
    /// model has said in complete sentences since the last hop, else the next
    /// filler; with the callback that fetches the rest (docs/callbacks.md).
    /// Past the hops a call may take, the apology. The sentences are read
    /// by `read_by` (from Redis when another replica runs the call), else
    /// the filler is spoken.
    async fn hold(&self, args: &TAssistantContinueArguments, read_by: Instant) -> TScenarioResponseBody {
        let mut state = args.state.clone().unwrap_or_default();
        if args.hops >= callback::max_hops(self.config.calls.call_timeout()) {
            // `Hops` is the caller's: a flood of them writes a line a second.
            static TOO_MANY_HOPS: Throttle = Throttle::new();
            if let Some(left_out) = TOO_MANY_HOPS.due() {
                tracing::warn!(call_id = %args.call_id, hops = args.hops, left_out, "assistant: the call took too many hops; apologizing");
            }
            state.pending = None;
            return self.apology(Handler::Continue, &state);
        }
        let partial = self.calls.partial_text(&args.call_id, read_by).await.unwrap_or_default();
        let ready = self.policy.ready_speech(&partial, &state);
        let new = ready.strip_prefix(args.spoken.as_str()).map(str::trim).filter(|new| !new.is_empty());
        let (speech, spoken, listen, kind) = match new {
            Some(new) => (new, ready.as_str(), false, "partial"),
            None => {
                let fillers = &self.config.dialog.filler_texts;
                let next = callback::next_filler(state.last_filler, fillers.len());
                state.last_filler = u32::try_from(next + 1).unwrap_or(0);
                // The microphone stays open for a client that does not follow
                // callbacks: the user's repeat joins the call too.
                (fillers[next].as_str(), args.spoken.as_str(), true, "filler")
            }
        };
        state.pending = Some(TAssistantPending {
            call_id: args.call_id.clone(),
            utterance: args.utterance.clone(),
            hops: args.hops.saturating_add(1),
            spoken: spoken.to_owned(),
        });
        self.metrics.answer("continue", kind);
        let mut body = reply::spoken(speech, listen, &state, "assistant.hold");
        if let Some(layout) = body.layout.as_mut() {
            layout.directives.push(callback::directive(&args.call_id));
        }
        body
    }

    /// On a client with a screen, the address of the call's JSONSeq stream
    /// beside the voice answer: the screen shows the whole answer as it
    /// streams while the voice speaks the short part.
    fn on_screen(&self, body: &mut TScenarioResponseBody, call_id: &str, screen: bool) {
        if let (true, Some(layout)) = (screen, body.layout.as_mut()) {
            layout.directives.push(reply::show_stream(&self.config.llm.stream_url(call_id, &self.addresses)));
        }
    }

    fn apology(&self, handler: Handler, state: &TAssistantState) -> TScenarioResponseBody {
        self.metrics.answer(handler.as_str(), "apology");
        reply::spoken(&self.config.dialog.apology_text, false, state, "assistant.apology")
    }

    /// Where waiting must stop to answer by `deadline`.
    fn stop_by(&self, deadline: Instant) -> Instant {
        deadline.checked_sub(self.margin.get()).unwrap_or(deadline)
    }

    /// Notes how late past `stop_by` an answer was ready, for the margin.
    fn answered(&self, stop_by: Instant) {
        self.margin.observe(Instant::now().saturating_duration_since(stop_by));
    }

    /// What the words of a `/run` ask: the pending call when they repeat its
    /// question (its answer, or its apology when it failed, given once),
    /// else a new call under this request's id.
    fn asked(&self, request_id: &str, utterance: String, mut state: TAssistantState) -> TAssistantContinueArguments {
        match state.pending.take() {
            Some(pending) if turn::normalize(&pending.utterance) == turn::normalize(&utterance) => {
                TAssistantContinueArguments {
                    call_id: pending.call_id,
                    utterance,
                    state: Some(state),
                    hops: pending.hops,
                    spoken: pending.spoken,
                }
            }
            _ => TAssistantContinueArguments {
                call_id: request_id.to_owned(),
                utterance,
                state: Some(state),
                ..Default::default()
            },
        }
    }

    /// The call our callback comes back for: the pending call its payload
    /// names, or `None` when the dialog holds no such call (a stale or
    /// foreign callback).
    fn resumed(&self, payload: Option<&Struct>, mut state: TAssistantState) -> Option<TAssistantContinueArguments> {
        let pending = state.pending.take().filter(|p| Some(p.call_id.as_str()) == callback::call_id(payload))?;
        Some(TAssistantContinueArguments {
            call_id: pending.call_id,
            utterance: pending.utterance,
            state: Some(state),
            hops: pending.hops,
            spoken: pending.spoken,
        })
    }
}

/// Whether the client of `base` has a screen.
fn has_screen(base: Option<&TScenarioBaseRequest>) -> bool {
    base.and_then(|base| base.interfaces.as_ref()).is_some_and(|interfaces| interfaces.has_screen)
}

/// The model calls of an assistant configured by `config`, over `stores`.
fn calls_of(config: &AssistantConfig, metrics: &AssistantMetrics, stores: &Stores) -> Result<Calls, AssistantError> {
    let retention = calls::Retention {
        ttl: config.calls.result_ttl(),
        max_entries: config.calls.max_retained,
        max_bytes: config.calls.max_retained_bytes,
    };
    let counters = (metrics.in_flight.clone(), metrics.evicted.clone(), metrics.duplicated.clone());
    Calls::over(stores, config.calls.max_in_flight, config.calls.call_timeout(), retention, counters)
        .map_err(|error| AssistantError::Setup(format!("the model calls' store: {error}")))
}

#[async_trait]
impl Scenario for Assistant {
    async fn run(&self, request: TScenarioRunRequest, ctx: CallContext) -> ScenarioResult<TScenarioRunResponse> {
        let stop_by = (Instant::now() + self.config.run_wait()).min(self.stop_by(ctx.deadline));
        let base = request.base_request.unwrap_or_default();
        let screen = has_screen(Some(&base));
        let Some(input) = request.input.as_ref().and_then(TurnInput::from_input) else {
            self.metrics.answer("run", "irrelevant");
            return Ok(reply::irrelevant(NO_WORDS, base.state.as_ref()).into());
        };
        let mut state = state::of_request(&base, &ctx.request_id, self.caps);
        let args = match input {
            TurnInput::Callback { name, payload } if name == callback::NAME => {
                let Some(args) = self.resumed(payload.as_ref(), state) else {
                    self.metrics.answer("run", "stale_callback");
                    return Ok(reply::irrelevant(NOTHING_PENDING, base.state.as_ref()).into());
                };
                args
            }
            input => match self.policy.plan(&ctx.request_id, &input, &mut state) {
                TurnPlan::CallModel { utterance } => self.asked(&ctx.request_id, utterance, state),
                TurnPlan::Decline { reason } => {
                    self.metrics.answer("run", "irrelevant");
                    return Ok(reply::irrelevant(&reason, base.state.as_ref()).into());
                }
                TurnPlan::Answer { body, kind } => {
                    self.metrics.answer("run", kind);
                    let response = t_scenario_run_response::Response::ResponseBody(*body);
                    let features = Some(reply::features());
                    return Ok(TScenarioRunResponse { response: Some(response), features, ..Default::default() }.into());
                }
            },
        };
        let Ok((handle, _)) = self.start(&args).await else {
            if let Some(left_out) = AT_CAP.due() {
                tracing::warn!(request_id = %ctx.request_id, left_out, "assistant: at the in-flight model call cap; declining");
            }
            self.metrics.answer("run", "refused");
            // A skill's step is answered with the state its plan made, in
            // which the next words ask for the step again: declined with the
            // state it came with, a command's result would be lost (its
            // callback is spent) and the session would wait for it for ever.
            if let Some(planned) = args.state.as_ref().filter(|state| state.skill.is_some()) {
                let mut state = planned.clone();
                state.pending = None;
                let body = reply::spoken(BUSY, false, &state, "assistant.busy");
                let response = t_scenario_run_response::Response::ResponseBody(body);
                let features = Some(reply::features());
                return Ok(TScenarioRunResponse { response: Some(response), features, ..Default::default() }.into());
            }
            return Ok(reply::irrelevant(BUSY, base.state.as_ref()).into());
        };
        let response = match self.outcome(&args, handle, stop_by).await {
            Some(outcome) => {
                let mut body = self.finish(Handler::Run, &args, &outcome).await;
                self.on_screen(&mut body, &args.call_id, screen);
                t_scenario_run_response::Response::ResponseBody(body)
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
        let args = state::continue_arguments(request.arguments.as_ref(), self.caps)?;
        let screen = has_screen(request.base_request.as_ref());
        let mut body = match self.start(&args).await {
            Err(AtCapacity) => {
                if let Some(left_out) = AT_CAP.due() {
                    tracing::warn!(call_id = %args.call_id, left_out, "assistant: at the in-flight model call cap in /continue");
                }
                let mut state = args.state.clone().unwrap_or_default();
                state.pending = None;
                self.metrics.answer("continue", "refused");
                reply::spoken(&self.config.dialog.apology_text, false, &state, "assistant.apology")
            }
            Ok((handle, _)) => match self.outcome(&args, handle, stop_by).await {
                Some(outcome) => self.finish(Handler::Continue, &args, &outcome).await,
                None => {
                    // Half the margin for reading, the rest to build and send the answer.
                    let read_by = stop_by + ctx.deadline.saturating_duration_since(stop_by) / 2;
                    let body = self.hold(&args, read_by).await;
                    self.answered(stop_by);
                    body
                }
            },
        };
        self.on_screen(&mut body, &args.call_id, screen);
        Ok(TScenarioContinueResponse {
            response: Some(t_scenario_continue_response::Response::ResponseBody(body)),
            ..Default::default()
        }
        .into())
    }
}

/// A model call as the dialog asks for it, owning all it needs to run
/// wherever it is begun.
struct ModelCall {
    state: TAssistantState,
    utterance: String,
    call_id: String,
    policy: Arc<dyn DialogPolicy>,
    backend: Arc<dyn ModelBackend>,
    metrics: AssistantMetrics,
    timeout: Duration,
    thinking: Option<Duration>,
    format: crate::jsonseq::mapper::Format,
    activity: Arc<warmup::Activity>,
}

impl ModelCall {
    /// The call, its events told to `record`; the prompt is made as it begins.
    fn run(self, record: Arc<CallRecord>) -> impl Future<Output = ModelOutcome> + Send + 'static {
        let ModelCall { state, utterance, call_id, policy, backend, metrics, timeout, thinking, format, activity } =
            self;
        let messages = policy.messages(&state, &utterance);
        let sampling = policy.sampling(&state);
        let session_id = state.session_id;
        activity.touch();
        async move {
            let started = Instant::now();
            let request = ModelRequest { messages, session_id, deadline: started + timeout, sampling };
            let call = timeout_at(request.deadline, backend.complete(&request, &*record));
            let overrun = async {
                match thinking {
                    Some(budget) => thinking::overrun(record.follow(), format, started + budget).await,
                    None => std::future::pending().await,
                }
            };
            let outcome = tokio::select! {
                biased;
                outcome = call => outcome.unwrap_or(Err(BackendError::Timeout("call"))),
                () = overrun => Err(BackendError::Timeout("thinking")),
            };
            metrics.model_call(&*backend, &outcome, started.elapsed());
            // Logged here, once, whether or not anyone still waits for it.
            if let Err(error) = &outcome {
                static FAILED: Throttle = Throttle::new();
                if let Some(left_out) = FAILED.due() {
                    tracing::warn!(%call_id, %error, left_out, "assistant: the model call failed");
                }
            }
            outcome
        }
    }
}

/// The warnings of calls declined at the in-flight cap: one a second.
static AT_CAP: Throttle = Throttle::new();
/// The warnings of answers the model gave nothing usable in: one a second
/// (every `/continue` of a call whose kept outcome is unusable says it).
static UNUSABLE: Throttle = Throttle::new();

#[cfg(test)]
mod tests;
