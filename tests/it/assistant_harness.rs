//! What the assistant's black-box tests over HTTP and gRPC share: the server
//! hosting only the assistant pointed at the mock model, its client, turns
//! with every call checked against the budget, single calls for requests a
//! dialog would not send, and readers of the answer.

#![allow(dead_code)]

use std::{sync::Arc, time::Duration};

use megamind_assistant::{
    Assistant, AssistantModule,
    config::{AssistantConfig, Warmup},
    proto::megamind_scenario::v1::TAssistantState,
};
use megamind_core::{
    config::Config,
    proto::n_alice::n_scenarios::{
        TInput, TScenarioApplyRequest, TScenarioBaseRequest, TScenarioResponseBody, TScenarioRunRequest, TTextInput,
        t_card, t_directive, t_input, t_scenario_run_response,
    },
    scenario::Handler,
};
use megamind_tools::client::{Client, Hop, Request, Turn};
use prost::Message;
use prost_types::Any;

use crate::{
    helpers::{TestApp, Transport, registry_of, scenario_client, spawn_app, spawn_modules},
    mock_llm::{MockLlm, Reply},
};

/// Allowed lateness past the budget: scheduling on a shared 2-core machine.
pub const MARGIN: Duration = Duration::from_millis(60);
pub const BUDGET: Duration = Duration::from_millis(300);
/// The mock fills in the session id its request's prompt tells.
pub const OPEN_SAFARI: &str = r#"{"session_id": "{session_id}", "command": "open_app", "args": {"app_name": "Safari"}, "text": "Открываю Safari."}"#;

/// The key the module's `/llm` addresses are signed with in these tests.
pub const SIGNING_KEY: &str = "the key every test replica shares, 32 bytes or more";

/// `path` (`/llm/stream/{id}` or `/llm/answers/{id}`, with a query or not)
/// with the signature [`SIGNING_KEY`] gives its call, as
/// `ShowStreamDirective` would hand it out.
pub fn signed(path: &str) -> String {
    let (bare, query) = path.split_once('?').unwrap_or((path, ""));
    let id = bare.rsplit('/').next().expect("a call id");
    let signature = megamind_core::rules::auth::AddressKey::from_secret(SIGNING_KEY).sign_for(id, 600);
    if query.is_empty() { format!("{bare}?{signature}") } else { format!("{bare}?{query}&{signature}") }
}

/// The server and the registry the assistant's metrics went to.
pub struct Harness {
    pub app: TestApp,
    pub metrics: prometheus::Registry,
}

/// The server hosting only the assistant, pointed at `mock` (API key
/// `sk-test`, no streaming, no warm-up), `tweak` applied last.
pub async fn spawn(mock: &MockLlm, tweak: impl FnOnce(&mut AssistantConfig)) -> Harness {
    let mut config = AssistantConfig::with_base_url(mock.base_url());
    config.backend.api_key = "sk-test".into();
    config.backend.stream = false;
    config.backend.warmup = Warmup::Off;
    tweak(&mut config);
    let metrics = prometheus::Registry::new();
    let registry = registry_of("assistant", Arc::new(Assistant::from_config(&config, &metrics).expect("assistant")));
    Harness { app: spawn_app(Config::default(), registry).await, metrics }
}

/// The server as `serve` builds it (the assistant's module, its `/llm`
/// routes), its `[assistant]` table pointed at `mock` (no warm-up), `tweak`
/// applied last.
pub async fn spawn_module(mock: &MockLlm, tweak: impl FnOnce(&mut AssistantConfig)) -> TestApp {
    spawn_module_in(Config::default(), mock, tweak).await
}

/// As [`spawn_module`], in a server configured as `config`.
pub async fn spawn_module_in(mut config: Config, mock: &MockLlm, tweak: impl FnOnce(&mut AssistantConfig)) -> TestApp {
    let mut assistant = AssistantConfig::with_base_url(mock.base_url());
    assistant.backend.warmup = Warmup::Off;
    tweak(&mut assistant);
    let mut table = toml::Table::try_from(&assistant).expect("a table");
    // Written as a table, a secret shows only that it is set: the key goes in as itself.
    if assistant.llm.signing_key.is_empty() {
        let llm = table.get_mut("llm").and_then(toml::Value::as_table_mut).expect("[assistant.llm]");
        llm.insert("signing_key".into(), SIGNING_KEY.into());
    }
    config.scenarios.insert("assistant".into(), table);
    spawn_modules(config, &[Box::new(AssistantModule::default())]).await
}

fn base(request_id: &str) -> TScenarioBaseRequest {
    TScenarioBaseRequest { request_id: request_id.into(), server_time_ms: 1_764_210_832_530, ..Default::default() }
}

/// The assistant's client on `app` over `transport`: RequestIds `req-1`,
/// `req-2`, ..., the same `ServerTimeMs` as the single calls.
pub fn client(app: &TestApp, transport: Transport) -> Client {
    scenario_client(app, transport, "assistant").with_request_id_prefix("req-").with_base_request(base(""))
}

/// One turn of the user's `words`, each of its calls inside the budget.
pub async fn ask(client: &mut Client, words: &str) -> Turn {
    let turn = client.say(words).await.unwrap_or_else(|error| panic!("{words:?}: {error}"));
    for hop in &turn.hops {
        assert_in_budget(hop);
    }
    turn
}

/// `/run` of the user's typed `words` with no state.
pub fn run_request(request_id: &str, words: &str) -> TScenarioRunRequest {
    TScenarioRunRequest {
        base_request: Some(base(request_id)),
        input: Some(TInput {
            event: Some(t_input::Event::Text(TTextInput { utterance: words.into(), ..Default::default() })),
            ..Default::default()
        }),
    }
}

/// `/continue` with the `arguments` `/run` handed over.
fn continue_request(request_id: &str, arguments: Any) -> TScenarioApplyRequest {
    TScenarioApplyRequest { arguments: Some(arguments), base_request: Some(base(request_id)), ..Default::default() }
}

/// One `/run` of `words` under `request_id`, as Megamind retries it.
pub async fn run(client: &Client, request_id: &str, words: &str) -> Hop {
    client.call(Request::Run(run_request(request_id, words))).await.expect("/run answers")
}

/// One `/continue` with `arguments` under `request_id`.
pub async fn r#continue(client: &Client, request_id: &str, arguments: Any) -> Hop {
    client.call(Request::Continue(continue_request(request_id, arguments))).await.expect("/continue answers")
}

pub fn assert_in_budget(hop: &Hop) {
    assert!(hop.took < BUDGET + MARGIN, "/{} answered after {:?}", hop.handler(), hop.took);
}

/// The `ContinueArguments` a `/run` handed over.
pub fn handed_over(hop: &Hop) -> Any {
    match hop.response.as_run().and_then(|run| run.response.as_ref()) {
        Some(t_scenario_run_response::Response::ContinueArguments(arguments)) => arguments.clone(),
        other => panic!("/{} should hand over to /continue: {other:?}", hop.handler()),
    }
}

/// The answer for the user a call gave.
pub fn answer(hop: &Hop) -> &TScenarioResponseBody {
    hop.response.body().unwrap_or_else(|| panic!("/{} answered {:?}", hop.handler(), hop.response))
}

pub fn speech(body: &TScenarioResponseBody) -> &str {
    &body.layout.as_ref().expect("layout").output_speech
}

pub fn state_of(body: &TScenarioResponseBody) -> TAssistantState {
    TAssistantState::decode(body.state.as_ref().expect("state").value.as_slice()).expect("our state")
}

pub fn metrics_text(metrics: &prometheus::Registry) -> String {
    prometheus::TextEncoder::new().encode_to_string(&metrics.gather()).unwrap()
}

pub fn fallback() -> String {
    AssistantConfig::default().dialog.filler_texts[0].clone()
}

pub fn apology() -> String {
    AssistantConfig::default().dialog.apology_text
}

/// "открой Safari" over `transport`, the model answering in 250 ms:
/// `/run` hands over to `/continue`, whose answer opens Safari (one
/// directive, the text card, the speech) after one model call. The mock
/// and the server are given back for what a transport checks besides.
pub async fn open_safari_hands_over(transport: Transport) -> (MockLlm, Harness) {
    let mock = MockLlm::start(Reply::content_after(Duration::from_millis(250), OPEN_SAFARI)).await;
    let h = spawn(&mock, |_| {}).await;
    let turn = ask(&mut client(&h.app, transport), "открой Safari").await;
    let [run, continued] = &turn.hops[..] else { panic!("a 250 ms model hands over: {:?}", turn.hops) };
    let arguments = handed_over(run);
    assert!(arguments.type_url.ends_with("megamind_scenario.v1.TAssistantContinueArguments"));
    assert!(!run.response.as_run().unwrap().features.as_ref().expect("features").is_irrelevant);
    assert_eq!((continued.handler(), continued.request_id()), (Handler::Continue, "req-1"));

    let body = turn.body();
    assert_eq!(speech(body), "Открываю Safari.");
    let layout = body.layout.as_ref().unwrap();
    assert_eq!(layout.directives.len(), 1, "{:?}", layout.directives);
    let Some(t_directive::Directive::OpenAppDirective(open)) = &layout.directives[0].directive else {
        panic!("{:?}", layout.directives)
    };
    assert_eq!((open.name.as_str(), open.app_name.as_str()), ("open_app", "Safari"));
    assert!(open.payload.as_ref().is_some_and(|p| p.fields.contains_key("session_id")));
    assert!(matches!(&layout.cards[0].card, Some(t_card::Card::Text(text)) if text == "Открываю Safari."));
    assert_eq!(mock.calls(), 1);
    assert_eq!(mock.received()[0].body["messages"][1]["content"], "открой Safari");
    (mock, h)
}

/// Two turns over `transport`: the second's state keeps both, the answer
/// object in its canonical form, and the model is sent the first turn back.
pub async fn history_carries_over_two_turns(transport: Transport) {
    let mock = MockLlm::start(Reply::content("Закрываю.")).await;
    mock.push(Reply::content(OPEN_SAFARI));
    let h = spawn(&mock, |_| {}).await;
    let mut client = client(&h.app, transport);
    let first = ask(&mut client, "открой Safari").await;
    let session = state_of(first.body()).session_id;
    let second = ask(&mut client, "а теперь закрой").await;
    assert_eq!(second.speech(), "Закрываю.");

    let state = state_of(second.body());
    assert_eq!(state.session_id, session);
    let turns: Vec<(&str, &str)> = state.turns.iter().map(|t| (t.user.as_str(), t.assistant.as_str())).collect();
    // The history keeps the answer object in its canonical, compact form.
    let canonical = OPEN_SAFARI.replace("{session_id}", &session).replace("\": ", "\":").replace(", \"", ",\"");
    assert_eq!(turns, [("открой Safari", canonical.as_str()), ("а теперь закрой", "Закрываю.")]);

    let messages = &mock.received()[1].body["messages"];
    let sent: Vec<(&str, &str)> = messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    assert_eq!(sent[0].0, "system");
    assert!(sent[0].1.contains(&session), "the model is told the session id");
    assert_eq!(&sent[1..], [("user", "открой Safari"), ("assistant", canonical.as_str()), ("user", "а теперь закрой")]);
}
