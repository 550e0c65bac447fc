//! The scenario's handlers called directly over a scripted backend, on
//! tokio's paused clock: the timing design without the server around it.

use std::{
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use megamind_core::proto::n_alice::n_scenarios::{
    TCallbackDirective, TInput, TScenarioBaseRequest, TTextInput, TVoiceInput, t_directive, t_input,
};

use super::*;
use crate::{
    backend::ModelEvent,
    dialog::{callback, state},
    proto::megamind_scenario::v1::TAssistantTurn,
    skills::dialog,
};

/// Answers `reply` after `delay`, counting calls and keeping the requests.
#[derive(Debug)]
struct Scripted {
    delay: Duration,
    reply: Result<String, BackendError>,
    calls: AtomicUsize,
    requests: Mutex<Vec<ModelRequest>>,
}

impl Scripted {
    fn new(delay_ms: u64, reply: Result<&str, BackendError>) -> Arc<Scripted> {
        Arc::new(Scripted {
            delay: Duration::from_millis(delay_ms),
            reply: reply.map(str::to_owned),
            calls: AtomicUsize::new(0),
            requests: Mutex::new(Vec::new()),
        })
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl ModelBackend for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }

    async fn complete(
        &self,
        request: &ModelRequest,
        events: &dyn crate::backend::EventSink,
    ) -> Result<crate::backend::Completion, BackendError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.requests.lock().unwrap().push(request.clone());
        tokio::time::sleep(self.delay).await;
        let text = self.reply.clone()?.replace("{session_id}", &request.session_id);
        events.event(ModelEvent::TextDelta(text.clone()));
        events.event(ModelEvent::Finish { reason: "stop".into() });
        Ok(crate::backend::Completion { text, attempts: 1, ..crate::backend::Completion::default() })
    }
}

/// The backend fills in the session id of its request.
const OPEN_SAFARI: &str =
    r#"{"session_id":"{session_id}","command":"open_app","args":{"app_name":"Safari"},"text":"Открываю Safari."}"#;

fn assistant(backend: Arc<Scripted>, config: AssistantConfig) -> (Assistant, prometheus::Registry) {
    let registry = prometheus::Registry::new();
    let metrics = AssistantMetrics::new(&registry).unwrap();
    (Assistant::with_backend(&config, backend, metrics).unwrap(), registry)
}

fn ctx(request_id: &str) -> CallContext {
    // Deadlines on tokio's clock, which the tests pause and advance.
    let deadline = Instant::now() + Duration::from_millis(290);
    CallContext { request_id: request_id.into(), deadline, meta: Default::default() }
}

fn run_request(request_id: &str, words: &str, state: Option<Any>) -> TScenarioRunRequest {
    TScenarioRunRequest {
        base_request: Some(TScenarioBaseRequest {
            request_id: request_id.into(),
            server_time_ms: 1_764_210_832_530,
            state,
            ..Default::default()
        }),
        input: Some(TInput {
            event: Some(t_input::Event::Text(TTextInput { utterance: words.into(), ..Default::default() })),
            ..Default::default()
        }),
    }
}

fn continue_request(arguments: Any) -> TScenarioApplyRequest {
    TScenarioApplyRequest { arguments: Some(arguments), ..Default::default() }
}

fn body_of(response: TScenarioRunResponse) -> TScenarioResponseBody {
    match response.response {
        Some(t_scenario_run_response::Response::ResponseBody(body)) => body,
        other => panic!("expected a ResponseBody, got {other:?}"),
    }
}

fn continue_body(response: TScenarioContinueResponse) -> TScenarioResponseBody {
    match response.response {
        Some(t_scenario_continue_response::Response::ResponseBody(body)) => body,
        other => panic!("expected a ResponseBody, got {other:?}"),
    }
}

fn handover(response: &TScenarioRunResponse) -> Any {
    match &response.response {
        Some(t_scenario_run_response::Response::ContinueArguments(any)) => any.clone(),
        other => panic!("expected ContinueArguments, got {other:?}"),
    }
}

fn speech(body: &TScenarioResponseBody) -> &str {
    &body.layout.as_ref().unwrap().output_speech
}

fn state_of(body: &TScenarioResponseBody) -> TAssistantState {
    state::decode(body.state.as_ref(), Caps { turns: 100, bytes: 1 << 20, utterance: 16 << 10 })
}

fn metric(registry: &prometheus::Registry, needle: &str) -> bool {
    prometheus::TextEncoder::new().encode_to_string(&registry.gather()).unwrap().contains(needle)
}

#[tokio::test(start_paused = true)]
async fn a_fast_model_is_answered_inside_run() {
    let backend = Scripted::new(50, Ok(OPEN_SAFARI));
    let (assistant, registry) = assistant(backend.clone(), AssistantConfig::default());
    let started = Instant::now();
    let response = assistant.run(run_request("r1", "открой Safari", None), ctx("r1")).await.unwrap().into_owned();
    assert_eq!(started.elapsed(), Duration::from_millis(50), "answered when the model did");
    assert_eq!(response.features.as_ref().unwrap().intent, "assistant");
    let body = body_of(response);
    assert_eq!(speech(&body), "Открываю Safari.");
    let directive = body.layout.as_ref().unwrap().directives[0].directive.clone();
    assert!(matches!(directive, Some(t_directive::Directive::OpenAppDirective(ref d)) if d.app_name == "Safari"));
    let state = state_of(&body);
    let remembered = OPEN_SAFARI.replace("{session_id}", &state.session_id);
    assert_eq!(state.turns, [TAssistantTurn { user: "открой Safari".into(), assistant: remembered }]);
    assert!(state.session_id.starts_with("session_1764210832.530"), "{}", state.session_id);
    assert!(metric(&registry, r#"megamind_assistant_answers_total{handler="run",kind="model"} 1"#));
    assert!(metric(&registry, r#"megamind_assistant_model_calls_total{backend="scripted",outcome="ok"} 1"#));
}

#[tokio::test(start_paused = true)]
async fn a_slow_model_hands_over_then_holds_with_a_callback_then_answers_the_repeat() {
    let backend = Scripted::new(2_000, Ok("Сейчас 12 часов."));
    let (assistant, registry) = assistant(backend.clone(), AssistantConfig::default());

    let started = Instant::now();
    let run = assistant.run(run_request("r1", "Который час?", None), ctx("r1")).await.unwrap().into_owned();
    assert_eq!(started.elapsed(), Duration::from_millis(150), "run_wait_ms");
    let arguments = handover(&run);
    assert_eq!(run.features.unwrap().intent, "assistant");

    let started = Instant::now();
    let body = continue_body(assistant.r#continue(continue_request(arguments), ctx("r1")).await.unwrap().into_owned());
    assert_eq!(started.elapsed(), Duration::from_millis(290 - 30), "the deadline minus the margin");
    assert_eq!(speech(&body), AssistantConfig::default().dialog.filler_texts[0].clone());
    let layout = body.layout.as_ref().unwrap();
    assert!(layout.should_listen && body.expects_request, "a client without callbacks lets the user repeat");
    let Some(t_directive::Directive::CallbackDirective(callback)) = &layout.directives[0].directive else {
        panic!("{:?}", layout.directives)
    };
    assert_eq!(
        (callback.name.as_str(), callback::call_id(callback.payload.as_ref())),
        ("assistant_answer", Some("r1"))
    );
    let state = state_of(&body);
    let pending = state.pending.clone().unwrap();
    assert_eq!((pending.call_id.as_str(), pending.utterance.as_str(), pending.hops), ("r1", "Который час?", 1));
    assert_eq!(state.last_filler, 1);
    assert!(state.turns.is_empty());

    // The user repeats (other case and punctuation) after the model finished.
    tokio::time::advance(Duration::from_secs(2)).await;
    let repeat = run_request("r2", "который час", Some(state::encode(&state)));
    let body = body_of(assistant.run(repeat, ctx("r2")).await.unwrap().into_owned());
    assert_eq!(speech(&body), "Сейчас 12 часов.");
    let state = state_of(&body);
    assert!(state.pending.is_none());
    assert_eq!(state.turns.len(), 1);
    assert_eq!(backend.calls(), 1, "the repeat got the first call's answer");
    assert!(metric(&registry, r#"megamind_assistant_answers_total{handler="continue",kind="filler"} 1"#));
}

#[tokio::test(start_paused = true)]
async fn a_different_question_after_the_fallback_calls_the_model_again() {
    let backend = Scripted::new(2_000, Ok("Ответ."));
    let (assistant, _) = assistant(backend.clone(), AssistantConfig::default());
    let arguments =
        handover(&assistant.run(run_request("r1", "вопрос один", None), ctx("r1")).await.unwrap().into_owned());
    let body = continue_body(assistant.r#continue(continue_request(arguments), ctx("r1")).await.unwrap().into_owned());
    let state = state_of(&body);
    let next = run_request("r2", "вопрос два", Some(state::encode(&state)));
    let run = assistant.run(next, ctx("r2")).await.unwrap().into_owned();
    handover(&run);
    assert_eq!(backend.calls(), 2);
    assert_eq!(backend.requests.lock().unwrap()[1].utterance(), "вопрос два");
}

#[tokio::test(start_paused = true)]
async fn retries_of_run_and_the_continue_make_one_model_call() {
    let backend = Scripted::new(400, Ok("Готово."));
    let (assistant, _) = assistant(backend.clone(), AssistantConfig::default());
    let assistant = Arc::new(assistant);
    let runs: Vec<_> = (0..5)
        .map(|_| {
            let assistant = assistant.clone();
            tokio::spawn(async move {
                assistant.run(run_request("r1", "привет", None), ctx("r1")).await.unwrap().into_owned()
            })
        })
        .collect();
    let mut arguments = Vec::new();
    for run in runs {
        arguments.push(handover(&run.await.unwrap()));
    }
    assert!(arguments.windows(2).all(|w| w[0] == w[1]), "every retry hands over the same arguments");
    let body = continue_body(
        assistant.r#continue(continue_request(arguments[0].clone()), ctx("r1")).await.unwrap().into_owned(),
    );
    assert_eq!(speech(&body), "Готово.");
    let again = assistant.run(run_request("r1", "привет", None), ctx("r1")).await.unwrap().into_owned();
    assert_eq!(speech(&body_of(again)), "Готово.", "a late retry gets the kept answer");
    assert_eq!(backend.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn history_and_session_id_carry_over_and_reset() {
    let backend = Scripted::new(10, Ok("Ок."));
    let (assistant, _) = assistant(backend.clone(), AssistantConfig::default());
    let first = body_of(assistant.run(run_request("r1", "раз", None), ctx("r1")).await.unwrap().into_owned());
    let state = state_of(&first);
    let second =
        body_of(assistant.run(run_request("r2", "два", first.state.clone()), ctx("r2")).await.unwrap().into_owned());
    let second_state = state_of(&second);
    assert_eq!(second_state.session_id, state.session_id, "stable over the session");
    assert_eq!(second_state.turns.len(), 2);
    {
        let requests = backend.requests.lock().unwrap();
        let contents: Vec<&str> = requests[1].messages.iter().skip(1).map(|m| m.content.as_str()).collect();
        assert_eq!(contents, ["раз", "Ок.", "два"]);
        assert!(requests[1].messages[0].content.contains(&state.session_id));
        assert_eq!(requests[1].session_id, state.session_id);
    }
    let mut reset = run_request("r3", "три", second.state.clone());
    reset.base_request.as_mut().unwrap().is_session_reset = true;
    let third = state_of(&body_of(assistant.run(reset, ctx("r3")).await.unwrap().into_owned()));
    assert_eq!(third.turns.len(), 1, "the reset forgot the history");
    assert_ne!(third.session_id, state.session_id, "and started a new session");
}

#[tokio::test(start_paused = true)]
async fn model_failures_are_spoken_apologies() {
    for error in [BackendError::Timeout("call"), BackendError::CircuitOpen, BackendError::BadResponse("x".into())] {
        let kind = error.kind();
        let backend = Scripted::new(10, Err(error));
        let (assistant, registry) = assistant(backend, AssistantConfig::default());
        let body = body_of(assistant.run(run_request("r1", "привет", None), ctx("r1")).await.unwrap().into_owned());
        assert_eq!(speech(&body), AssistantConfig::default().dialog.apology_text, "{kind}");
        assert!(state_of(&body).turns.is_empty(), "{kind}: a failure is not history");
        assert!(metric(&registry, &format!(r#"outcome="{kind}"}} 1"#)), "{kind}");
        assert!(metric(&registry, r#"megamind_assistant_answers_total{handler="run",kind="apology"} 1"#));
    }
    // An answer with nothing to say is apologized for as well.
    let (assistant, _) = assistant(Scripted::new(10, Ok("{\"text\": \"")), AssistantConfig::default());
    let body = body_of(assistant.run(run_request("r1", "привет", None), ctx("r1")).await.unwrap().into_owned());
    assert_eq!(speech(&body), AssistantConfig::default().dialog.apology_text);
}

/// An assistant allowed one model call in flight, which the `/run` of
/// another dialog holds (its model, `backend`, slow).
async fn at_the_cap(backend: &Arc<Scripted>) -> (Assistant, prometheus::Registry) {
    let mut config = AssistantConfig::default();
    config.calls.max_in_flight = 1;
    let (assistant, registry) = assistant(backend.clone(), config);
    handover(&assistant.run(run_request("r1", "раз", None), ctx("r1")).await.unwrap().into_owned());
    (assistant, registry)
}

/// A `/run` bringing a command's result (`payload`) back with `state`.
fn command_result(request_id: &str, payload: serde_json::Value, state: Option<Any>) -> TScenarioRunRequest {
    let callback = TCallbackDirective {
        name: "skill_command_result".into(),
        payload: Some(megamind_core::codec::structs::struct_from_json(payload.as_object().unwrap().clone())),
        ..Default::default()
    };
    let mut request = run_request(request_id, "", state);
    request.input.as_mut().unwrap().event = Some(t_input::Event::Callback(callback));
    request
}

#[tokio::test(start_paused = true)]
async fn past_the_in_flight_cap_run_declines_and_says_why() {
    let backend = Scripted::new(10_000, Ok("..."));
    let (assistant, registry) = at_the_cap(&backend).await;
    let refused = assistant.run(run_request("r2", "два", None), ctx("r2")).await.unwrap().into_owned();
    assert!(refused.features.as_ref().unwrap().is_irrelevant);
    assert_eq!(speech(&body_of(refused)), BUSY);
    assert_eq!(backend.calls(), 1);
    assert!(metric(&registry, r#"megamind_assistant_answers_total{handler="run",kind="refused"} 1"#));
    // The running call is still served.
    handover(&assistant.run(run_request("r1", "раз", None), ctx("r1")).await.unwrap().into_owned());
}

#[tokio::test(start_paused = true)]
async fn past_the_in_flight_cap_a_command_result_is_kept_for_the_next_words() {
    use crate::proto::megamind_scenario::v1::{ESkillWait, TSkillSession};
    let backend = Scripted::new(10_000, Ok("[DONE] Готово."));
    let (assistant, registry) = at_the_cap(&backend).await;
    let session = TSkillSession {
        skill: "disk-usage".into(),
        session_id: "s1".into(),
        step: 1,
        wait: ESkillWait::SkillWaitCommand as i32,
        command: "df -h".into(),
        ..Default::default()
    };
    let state = TAssistantState { skill: Some(session), ..Default::default() };
    let payload = serde_json::json!({"skill": "disk-usage", "step": 1, "session": "s1", "output": "sda1 93%"});
    let request = command_result("r2", payload, Some(state::encode(&state)));
    let busy = assistant.run(request, ctx("r2")).await.unwrap().into_owned();
    assert!(!busy.features.as_ref().unwrap().is_irrelevant, "the result is taken, not declined");
    let body = body_of(busy);
    assert_eq!(speech(&body), BUSY);
    assert!(metric(&registry, r#"megamind_assistant_answers_total{handler="run",kind="refused"} 1"#));
    let kept = state_of(&body);
    let session = kept.skill.as_ref().expect("the session goes on");
    assert_eq!(session.wait, ESkillWait::SkillWaitIdle as i32, "no longer waiting for the spent result");
    assert!(session.next.contains("sda1 93%"), "the step to ask again holds the output: {}", session.next);
    assert_eq!(backend.calls(), 1);

    // The other call ends; the user's next words ask for the step with the output.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let _ = assistant.run(run_request("r3", "ну что там", Some(state::encode(&kept))), ctx("r3")).await.unwrap();
    assert_eq!(backend.calls(), 2);
    let asked = backend.requests.lock().unwrap()[1].utterance().to_owned();
    assert!(asked.contains("sda1 93%") && !asked.contains("ну что там"), "{asked}");
}

#[tokio::test(start_paused = true)]
async fn continue_on_another_instance_starts_the_call_itself() {
    let (first, _) =
        assistant(Scripted::new(100, Ok("Ответ.")), AssistantConfig { run_wait_ms: 20, ..Default::default() });
    let arguments = handover(&first.run(run_request("r1", "вопрос", None), ctx("r1")).await.unwrap().into_owned());
    let backend = Scripted::new(100, Ok("Ответ с другой машины."));
    let (other, _) = assistant(backend.clone(), AssistantConfig::default());
    let body = continue_body(other.r#continue(continue_request(arguments), ctx("r1")).await.unwrap().into_owned());
    assert_eq!(speech(&body), "Ответ с другой машины.");
    assert_eq!(backend.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn requests_that_make_no_sense_are_declined_or_errors() {
    let backend = Scripted::new(10, Ok("x"));
    let (assistant, _) = assistant(backend.clone(), AssistantConfig::default());
    let mut callback = run_request("r1", "", None);
    callback.input.as_mut().unwrap().event = Some(t_input::Event::Callback(TCallbackDirective::default()));
    let declined = assistant.run(callback, ctx("r1")).await.unwrap().into_owned();
    assert!(declined.features.unwrap().is_irrelevant);
    let declined = assistant.run(run_request("r1", "   ", None), ctx("r1")).await.unwrap().into_owned();
    assert!(declined.features.unwrap().is_irrelevant);
    assert_eq!(backend.calls(), 0);

    let foreign = Any { type_url: "type.googleapis.com/google.protobuf.StringValue".into(), value: vec![] };
    for arguments in [None, Some(foreign)] {
        let request = TScenarioApplyRequest { arguments, ..Default::default() };
        let error = assistant.r#continue(request, ctx("r1")).await.unwrap_err();
        assert_eq!(error.error_type(), "bad_request", "{error}");
    }
}

/// A declined answer that Megamind gives all the same must not wipe the
/// dialog's state: it carries the request's state as it came.
#[tokio::test(start_paused = true)]
async fn a_declined_answer_keeps_the_state_it_was_given() {
    let (assistant, _) = assistant(Scripted::new(10, Ok("x")), AssistantConfig::default());
    let kept = Any { type_url: "type.googleapis.com/NAlice.TAssistantState".into(), value: vec![8, 1] };
    let declined = assistant.run(run_request("r1", "   ", Some(kept.clone())), ctx("r1")).await.unwrap().into_owned();
    assert!(declined.features.as_ref().unwrap().is_irrelevant);
    assert_eq!(body_of(declined).state, Some(kept));
}

#[tokio::test(start_paused = true)]
async fn voice_input_is_heard_too() {
    let backend = Scripted::new(10, Ok("Слышу."));
    let (assistant, _) = assistant(backend.clone(), AssistantConfig::default());
    let mut request = run_request("r1", "", None);
    request.input.as_mut().unwrap().event =
        Some(t_input::Event::Voice(TVoiceInput { utterance: "алло".into(), ..Default::default() }));
    assert_eq!(speech(&body_of(assistant.run(request, ctx("r1")).await.unwrap().into_owned())), "Слышу.");
    assert_eq!(backend.requests.lock().unwrap()[0].utterance(), "алло");
}

#[tokio::test(start_paused = true)]
async fn run_never_waits_past_its_deadline() {
    let backend = Scripted::new(10_000, Ok("x"));
    let config = AssistantConfig { run_wait_ms: 5_000, ..AssistantConfig::default() };
    let (assistant, _) = assistant(backend, config);
    let started = Instant::now();
    handover(&assistant.run(run_request("r1", "вопрос", None), ctx("r1")).await.unwrap().into_owned());
    assert_eq!(started.elapsed(), Duration::from_millis(290 - 30));
}

#[tokio::test(start_paused = true)]
async fn a_command_result_without_a_skill_session_is_declined() {
    let backend = Scripted::new(10, Ok("x"));
    let (assistant, registry) = assistant(backend.clone(), AssistantConfig::default());
    let request = command_result("r1", serde_json::json!({"output": "ok", "exit_code": 0}), None);
    let declined = assistant.run(request, ctx("r1")).await.unwrap().into_owned();
    assert!(declined.features.as_ref().unwrap().is_irrelevant);
    assert_eq!(speech(&body_of(declined)), dialog::STALE_RESULT);
    assert_eq!(backend.calls(), 0);
    assert!(metric(&registry, r#"megamind_assistant_answers_total{handler="run",kind="irrelevant"} 1"#));
}

#[tokio::test(start_paused = true)]
async fn followers_of_a_call_read_its_events_from_the_start() {
    let (assistant, _) = assistant(Scripted::new(2_000, Ok("Ответ.")), AssistantConfig::default());
    handover(&assistant.run(run_request("r1", "вопрос", None), ctx("r1")).await.unwrap().into_owned());
    let events = [ModelEvent::TextDelta("Ответ.".into()), ModelEvent::Finish { reason: "stop".into() }];
    let mut early = assistant.follow("r1").await.expect("a running call");
    let started = Instant::now();
    assert_eq!(early.next().await.as_ref(), Some(&events[0]));
    assert_eq!(started.elapsed(), Duration::from_millis(2_000 - 150), "waited for the model");
    assert_eq!(early.next().await.as_ref(), Some(&events[1]));
    assert_eq!(early.next().await, None, "over with the call");
    let mut late = assistant.follow("r1").await.expect("a kept call");
    assert_eq!(
        (late.next().await, late.next().await, late.next().await),
        (Some(events[0].clone()), Some(events[1].clone()), None)
    );
    assert!(assistant.follow("r2").await.is_none(), "no such call");
}

mod callbacks;

#[tokio::test(start_paused = true)]
async fn a_continue_bringing_more_history_than_run_keeps_calls_the_model_with_the_capped_history() {
    let backend = Scripted::new(10, Ok("Сейчас 12 часов."));
    let config = AssistantConfig::default();
    let (assistant, _) = assistant(backend.clone(), config.clone());
    let turns =
        (0..40).map(|i| TAssistantTurn { user: format!("вопрос {i}"), assistant: format!("ответ {i}") });
    let args = TAssistantContinueArguments {
        call_id: "r-9".into(),
        utterance: "Который час?".into(),
        state: Some(TAssistantState { session_id: "s".into(), turns: turns.collect(), ..Default::default() }),
        ..Default::default()
    };
    let request = continue_request(Any::from_msg(&args).unwrap());
    continue_body(assistant.r#continue(request, ctx("r-9")).await.unwrap().into_owned());

    let requests = backend.requests.lock().unwrap();
    let asked: Vec<&str> = requests[0].messages.iter().map(|m| m.content.as_str()).collect();
    let kept = config.dialog.history_turns;
    // The system prompt, the kept turns' two messages each, the question.
    assert_eq!(asked.len(), 1 + 2 * kept + 1, "{asked:?}");
    assert_eq!(asked[1], format!("вопрос {}", 40 - kept), "the last turns are kept");
    assert_eq!(asked.last(), Some(&"Который час?"));
}

/// A store whose `begin` answers only after `delay`, as one far away does;
/// the rest as the memory store it wraps.
#[derive(Debug)]
struct SlowToBegin {
    delay: Duration,
    store: Arc<megamind_core::store::MemoryStore>,
}

#[async_trait]
impl megamind_core::store::FlightStore for SlowToBegin {
    async fn begin(
        &self,
        key: megamind_core::store::Key,
        lease_ttl: Duration,
        deadline: Instant,
        may_lead: &mut (dyn FnMut() -> bool + Send),
    ) -> Result<megamind_core::store::Begin, megamind_core::store::StoreError> {
        tokio::time::sleep(self.delay).await;
        self.store.begin(key, lease_ttl, deadline, may_lead).await
    }

    async fn complete(
        &self,
        lease: megamind_core::store::Lease,
        value: bytes::Bytes,
    ) -> Result<(), megamind_core::store::StoreError> {
        self.store.complete(lease, value).await
    }

    async fn abandon(&self, lease: megamind_core::store::Lease) -> Result<(), megamind_core::store::StoreError> {
        self.store.abandon(lease).await
    }

    async fn wait(
        &self,
        waiter: &megamind_core::store::Waiter,
        deadline: Instant,
    ) -> Result<megamind_core::store::Waited, megamind_core::store::StoreError> {
        self.store.wait(waiter, deadline).await
    }

    async fn purge_expired(&self) -> Result<(), megamind_core::store::StoreError> {
        self.store.purge_expired().await
    }

    fn usage(&self) -> megamind_core::store::Usage {
        self.store.usage()
    }
}

/// A call whose run dies just before a hop's `stop_by`, over a store that
/// takes 100 ms to begin it again: the hop answers by its deadline (a
/// filler), and the call is begun again all the same, on its own, so that
/// the next hop has its answer.
#[tokio::test(start_paused = true)]
async fn a_call_abandoned_at_stop_by_is_begun_again_without_making_the_hop_late() {
    use megamind_core::store::{MemoryStore, ScenarioStore, memory};
    let backend = Scripted::new(10, Ok("Сейчас 12 часов."));
    let (mut assistant, _) = assistant(backend.clone(), AssistantConfig::default());
    let memory = Arc::new(MemoryStore::new(memory::Limits::default(), memory::unregistered_evictions()));
    let slow = Arc::new(SlowToBegin { delay: Duration::from_millis(100), store: memory.clone() });
    let store = ScenarioStore { flights: slow, journal: memory, shared: false };
    let retention = calls::Retention { ttl: Duration::from_secs(60), max_entries: 100, max_bytes: 1 << 20 };
    let counters = (
        prometheus::IntGauge::new("g", "g").unwrap(),
        prometheus::IntCounterVec::new(prometheus::Opts::new("d", "d"), &["reason"]).unwrap(),
    );
    assistant.calls = Calls::with_store(store, 10, Duration::from_secs(10), retention, counters);

    // The run dies 250 ms after it began: 10 ms before the hop's `stop_by`.
    let dies = || async {
        tokio::time::sleep(Duration::from_millis(250)).await;
        panic!("the run dies")
    };
    assistant.calls.begin("r1", false, |_| dies()).await.unwrap();
    let args = TAssistantContinueArguments {
        call_id: "r1".into(),
        utterance: "Который час?".into(),
        state: Some(TAssistantState { session_id: "s".into(), ..Default::default() }),
        ..Default::default()
    };
    let hop = ctx("r1");
    let deadline = hop.deadline;
    let request = continue_request(Any::from_msg(&args).unwrap());
    let body = continue_body(assistant.r#continue(request, hop).await.unwrap().into_owned());
    assert!(Instant::now() <= deadline, "answered {:?} late", Instant::now() - deadline);
    assert_eq!(speech(&body), AssistantConfig::default().dialog.filler_texts[0], "the call is not over");
    assert_eq!(backend.calls(), 0, "still beginning");

    // Begun again meanwhile: the next hop has the answer.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(backend.calls(), 1, "begun again once");
    let next = TAssistantContinueArguments { hops: 1, ..args };
    let request = continue_request(Any::from_msg(&next).unwrap());
    let body = continue_body(assistant.r#continue(request, ctx("r1")).await.unwrap().into_owned());
    assert_eq!(speech(&body), "Сейчас 12 часов.");
    assert_eq!(backend.calls(), 1);
}
