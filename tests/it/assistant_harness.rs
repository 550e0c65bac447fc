//! What the assistant's black-box tests over HTTP and gRPC share: the server
//! hosting only the assistant pointed at the mock model, the requests of a
//! turn, the budget check and readers of the answer.

#![allow(dead_code)]

use std::{sync::Arc, time::Duration};

use megamind_scenario::{
    config::Config,
    proto::{
        megamind_scenario::v1::TAssistantState,
        n_alice::n_scenarios::{
            TInput, TScenarioApplyRequest, TScenarioBaseRequest, TScenarioContinueResponse, TScenarioResponseBody,
            TScenarioRunRequest, TTextInput, t_input, t_scenario_continue_response,
        },
    },
    scenarios::assistant::{Assistant, config::AssistantConfig},
};
use prost::Message;
use prost_types::Any;

use crate::{
    helpers::{TestApp, registry_of, spawn_app},
    mock_llm::MockLlm,
};

/// Allowed lateness past the budget: scheduling on a shared 2-core machine.
pub const MARGIN: Duration = Duration::from_millis(60);
pub const BUDGET: Duration = Duration::from_millis(300);
pub const OPEN_SAFARI: &str = r#"{"session_id": "session_1.000001", "command": "open_app", "args": {"app_name": "Safari"}, "text": "Открываю Safari."}"#;

/// The server and the registry the assistant's metrics went to.
pub struct Harness {
    pub app: TestApp,
    pub metrics: prometheus::Registry,
}

/// The server hosting only the assistant, pointed at `mock` (API key
/// `sk-test`, no streaming), `tweak` applied last.
pub async fn spawn(mock: &MockLlm, tweak: impl FnOnce(&mut AssistantConfig)) -> Harness {
    let mut config = AssistantConfig::with_base_url(mock.base_url());
    config.api_key = "sk-test".into();
    config.stream = false;
    tweak(&mut config);
    let metrics = prometheus::Registry::new();
    let registry = registry_of("assistant", Arc::new(Assistant::from_config(&config, &metrics).expect("assistant")));
    Harness { app: spawn_app(Config::default(), registry).await, metrics }
}

fn base(request_id: &str, state: Option<Any>) -> TScenarioBaseRequest {
    TScenarioBaseRequest {
        request_id: request_id.into(),
        server_time_ms: 1_764_210_832_530,
        state,
        ..Default::default()
    }
}

/// `/run` of the user's typed `words`, with the state of the previous turn.
pub fn run_request(request_id: &str, words: &str, state: Option<Any>) -> TScenarioRunRequest {
    TScenarioRunRequest {
        base_request: Some(base(request_id, state)),
        input: Some(TInput {
            event: Some(t_input::Event::Text(TTextInput { utterance: words.into(), ..Default::default() })),
            ..Default::default()
        }),
    }
}

/// `/continue` with the `arguments` `/run` handed over.
pub fn continue_request(request_id: &str, arguments: Any) -> TScenarioApplyRequest {
    TScenarioApplyRequest {
        arguments: Some(arguments),
        base_request: Some(base(request_id, None)),
        ..Default::default()
    }
}

/// What a handler answered and how long it took.
pub struct Timed<T> {
    pub answer: T,
    pub took: Duration,
}

pub fn assert_in_budget(handler: &str, took: Duration) {
    assert!(took < BUDGET + MARGIN, "/{handler} answered after {took:?}");
}

pub fn continue_body(response: TScenarioContinueResponse) -> TScenarioResponseBody {
    match response.response {
        Some(t_scenario_continue_response::Response::ResponseBody(body)) => body,
        other => panic!("/continue answered {other:?}"),
    }
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
    AssistantConfig::default().fallback_text
}

pub fn apology() -> String {
    AssistantConfig::default().apology_text
}
