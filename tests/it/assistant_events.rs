//! The OpenAI-compatible backend's events over real HTTP from the mock
//! model: reasoning, text, finish reason and usage, streamed and whole.

use std::{sync::Mutex, time::Duration};

use megamind_assistant::{
    backend::{ChatMessage, EventSink, ModelBackend, ModelEvent, ModelRequest, Role, TokenUsage, openai::OpenAi},
    config::{AssistantConfig, BackendConfig},
};
use tokio::time::Instant;

use crate::mock_llm::{MockLlm, Reply};

/// Keeps every event.
#[derive(Default)]
struct Collect(Mutex<Vec<ModelEvent>>);

impl EventSink for Collect {
    fn event(&self, event: ModelEvent) {
        self.0.lock().unwrap().push(event);
    }
}

fn backend(mock: &MockLlm, stream: bool) -> OpenAi {
    let config = BackendConfig { stream, ..AssistantConfig::with_base_url(mock.base_url()).backend };
    OpenAi::new(&config, prometheus::IntCounter::new("retries", "retries").unwrap()).unwrap()
}

fn request() -> ModelRequest {
    ModelRequest {
        messages: vec![ChatMessage::new(Role::User, "Сколько будет 2+2?")],
        session_id: "session_1.000001".into(),
        deadline: Instant::now() + Duration::from_secs(5),
        sampling: None,
    }
}

const USAGE: TokenUsage = TokenUsage { prompt_tokens: 11, completion_tokens: 5 };

fn usage_event() -> ModelEvent {
    ModelEvent::Usage { prompt_tokens: USAGE.prompt_tokens, completion_tokens: USAGE.completion_tokens }
}

#[tokio::test]
async fn a_streamed_answer_reports_reasoning_text_finish_and_usage_in_order() {
    let reply = Reply::stream_reasoned(&["Считаю: ", "2+2=4."], &["Четыре", "."], "stop", Duration::from_millis(2));
    let mock = MockLlm::start(reply).await;
    let events = Collect::default();
    let completion = backend(&mock, true).complete(&request(), &events).await.unwrap();
    assert_eq!(completion.text, "Четыре.");
    assert_eq!(completion.finish_reason.as_deref(), Some("stop"));
    assert_eq!(completion.usage, Some(USAGE));
    assert!(completion.first_token.is_some());
    assert_eq!(
        events.0.into_inner().unwrap(),
        [
            ModelEvent::ReasoningDelta("Считаю: ".into()),
            ModelEvent::ReasoningDelta("2+2=4.".into()),
            ModelEvent::TextDelta("Четыре".into()),
            ModelEvent::TextDelta(".".into()),
            ModelEvent::Finish { reason: "stop".into() },
            usage_event(),
        ]
    );
}

#[tokio::test]
async fn a_whole_answer_reports_the_same_at_once() {
    let mock = MockLlm::start(Reply::content_reasoned("2+2=4.", "Четыре.", "length")).await;
    let events = Collect::default();
    let completion = backend(&mock, false).complete(&request(), &events).await.unwrap();
    assert_eq!(completion.text, "Четыре.");
    assert_eq!((completion.finish_reason.as_deref(), completion.usage), (Some("length"), Some(USAGE)));
    assert_eq!(
        events.0.into_inner().unwrap(),
        [
            ModelEvent::ReasoningDelta("2+2=4.".into()),
            ModelEvent::TextDelta("Четыре.".into()),
            ModelEvent::Finish { reason: "length".into() },
            usage_event(),
        ]
    );
}

#[tokio::test]
async fn an_answer_without_them_reports_only_its_text() {
    let mock = MockLlm::start(Reply::stream(&["Да", "."], Duration::ZERO)).await;
    let events = Collect::default();
    let completion = backend(&mock, true).complete(&request(), &events).await.unwrap();
    assert_eq!((completion.finish_reason, completion.usage), (None, None));
    assert_eq!(events.0.into_inner().unwrap(), [ModelEvent::TextDelta("Да".into()), ModelEvent::TextDelta(".".into())]);
}

/// An error the model server writes into a stream may quote the request's
/// key back, as an error body may: it is hidden there too, for the log.
#[tokio::test]
async fn an_error_inside_a_stream_quoting_the_api_key_is_told_without_it() {
    for error in [
        serde_json::json!({"error": {"message": "invalid key sk-secret-333 for this model", "code": 401}}),
        serde_json::json!({"error": {"message": "invalid key sk-secret-333 for this model"}}),
    ] {
        let mock =
            MockLlm::start(Reply::Sse { chunks: vec![(Duration::ZERO, crate::mock_llm::sse_event(&error))] }).await;
        let mut config =
            BackendConfig { stream: true, max_retries: 0, ..AssistantConfig::with_base_url(mock.base_url()).backend };
        config.api_key = "sk-secret-333".into();
        let backend = OpenAi::new(&config, prometheus::IntCounter::new("retries", "retries").unwrap()).unwrap();
        let failed = backend.complete(&request(), &Collect::default()).await.expect_err("a failed call").to_string();
        assert!(failed.contains("invalid key <hidden> for this model") && !failed.contains("sk-secret"), "{failed}");
    }
}
