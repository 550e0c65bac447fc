//! The assistant over HTTP, against the mock model server: answers inside
//! the budget whatever the model does, one model call per request, app
//! directives, history across turns.

use std::time::Duration;

use megamind_core::{config::Config, proto::n_alice::n_scenarios::t_directive, scenario::module};
use megamind_tools::client::Request;
use prost::Message;

use crate::{
    assistant_harness::{
        OPEN_SAFARI, answer, apology, ask, assert_in_budget, client, r#continue, fallback, handed_over,
        history_carries_over_two_turns, metrics_text, open_safari_hands_over, run, run_request, spawn, speech,
    },
    helpers::{Transport, spawn_app},
    mock_llm::{MockLlm, Reply},
};

#[tokio::test]
async fn open_safari_run_then_continue_gives_the_directive_and_speech() {
    let (mock, h) = open_safari_hands_over(Transport::Http).await;
    let request = &mock.received()[0];
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.authorization.as_deref(), Some("Bearer sk-test"));
    assert_eq!(request.body["temperature"], 0.3);
    assert_eq!(request.body["max_tokens"], 512);
    assert_eq!(request.body["messages"][0]["role"], "system");
    let text = metrics_text(&h.metrics);
    assert!(text.contains(r#"megamind_assistant_model_calls_total{backend="openai",outcome="ok"} 1"#), "{text}");
    assert!(text.contains(r#"megamind_assistant_answers_total{handler="continue",kind="model"} 1"#), "{text}");
}

#[tokio::test]
async fn a_model_at_50_ms_is_answered_inside_run() {
    let mock = MockLlm::start(Reply::content_after(Duration::from_millis(50), "Привет!")).await;
    let h = spawn(&mock, |_| {}).await;
    let turn = ask(&mut client(&h.app, Transport::Http), "привет").await;
    assert_eq!(turn.hops.len(), 1, "answered inside /run: {:?}", turn.hops);
    assert_eq!(turn.speech(), "Привет!");
}

#[tokio::test]
async fn a_model_at_2_s_gets_both_handlers_answered_in_budget_and_the_repeat_gets_its_answer() {
    let mock = MockLlm::start(Reply::content_after(Duration::from_secs(2), "Сейчас полдень.")).await;
    let h = spawn(&mock, |_| {}).await;
    let mut client = client(&h.app, Transport::Http).ignoring_callbacks();

    let turn = ask(&mut client, "Который час?").await;
    let [run, continued] = &turn.hops[..] else { panic!("{:?}", turn.hops) };
    handed_over(run);
    assert!(run.took >= Duration::from_millis(140), "waited run_wait_ms first: {:?}", run.took);
    assert!(continued.took >= Duration::from_millis(250), "waited for the model first: {:?}", continued.took);
    assert_eq!(turn.speech(), fallback());

    // The model finishes; the user repeats the question and gets its answer.
    mock.wait_for_served(1).await;
    let repeat = ask(&mut client, "который час").await;
    assert_eq!(repeat.speech(), "Сейчас полдень.");
    assert_eq!(mock.calls(), 1, "the repeat was not a second model call");
    assert!(
        metrics_text(&h.metrics).contains(r#"megamind_assistant_answers_total{handler="continue",kind="filler"} 1"#)
    );
}

#[tokio::test]
async fn a_500_then_ok_is_retried() {
    let mock = MockLlm::start(Reply::content("Готово.")).await;
    mock.push(Reply::status(500));
    let h = spawn(&mock, |c| c.backend.retry_backoff_ms = 20).await;
    let turn = ask(&mut client(&h.app, Transport::Http), "сделай").await;
    assert_eq!(turn.speech(), "Готово.");
    assert_eq!(mock.calls(), 2);
    assert!(metrics_text(&h.metrics).contains("megamind_assistant_model_retries_total 1"));
}

#[tokio::test]
async fn a_hanging_model_is_answered_in_budget_with_the_fallback() {
    let mock = MockLlm::start(Reply::Hang).await;
    let h = spawn(&mock, |_| {}).await;
    let body = ask(&mut client(&h.app, Transport::Http).ignoring_callbacks(), "вопрос").await.into_body();
    assert_eq!(speech(&body), fallback());
}

#[tokio::test]
async fn garbage_and_resets_are_retried_then_apologized_for_in_budget() {
    let cases = [
        ("garbage", Reply::Garbage { delay: Duration::ZERO, bytes: b"\x00\xffSSH-2.0-nonsense\r\n\r\n".to_vec() }),
        ("reset", Reply::Reset { delay: Duration::ZERO }),
        ("not json", Reply::Json { delay: Duration::ZERO, status: 200, body: "<html>oops</html>".into() }),
    ];
    for (name, reply) in cases {
        let mock = MockLlm::start(reply).await;
        let h = spawn(&mock, |c| c.backend.retry_backoff_ms = 10).await;
        let body = ask(&mut client(&h.app, Transport::Http), "вопрос").await.into_body();
        assert_eq!(speech(&body), apology(), "{name}");
        let calls = if name == "not json" { 1 } else { 3 };
        assert_eq!(mock.calls(), calls, "{name}: retried only what may pass next time");
    }
}

#[tokio::test]
async fn megamind_retrying_run_makes_exactly_one_model_call() {
    let mock = MockLlm::start(Reply::content_after(Duration::from_millis(400), "Один ответ.")).await;
    let h = spawn(&mock, |_| {}).await;
    let client = client(&h.app, Transport::Http);
    // Five at once while the first is in flight, then five after it answered.
    let answers = futures_util::future::join_all((0..5).map(|_| run(&client, "req-1", "вопрос"))).await;
    for answer in &answers {
        assert_in_budget(answer);
    }
    for _ in 0..5 {
        run(&client, "req-1", "вопрос").await;
    }
    let arguments = handed_over(&answers[0]);
    let continued = r#continue(&client, "req-1", arguments).await;
    assert_eq!(speech(answer(&continued)), "Один ответ.");
    assert_eq!(mock.calls(), 1);
}

#[tokio::test]
async fn the_history_in_state_carries_over_two_turns() {
    history_carries_over_two_turns(Transport::Http).await;
}

#[tokio::test]
async fn a_stream_cut_anywhere_is_read_whole() {
    let mock = MockLlm::start(Reply::stream_cut(OPEN_SAFARI, 7, Duration::from_millis(2))).await;
    let h = spawn(&mock, |c| c.backend.stream = true).await;
    let body = ask(&mut client(&h.app, Transport::Http), "открой Safari").await.into_body();
    assert_eq!(speech(&body), "Открываю Safari.");
    assert_eq!(mock.received()[0].body["stream"], true);
    let text = metrics_text(&h.metrics);
    assert!(text.contains("megamind_assistant_model_first_token_seconds_count{backend=\"openai\"} 1"), "{text}");
}

#[tokio::test]
async fn the_breaker_stops_calling_a_failing_backend() {
    let mock = MockLlm::start(Reply::status(503)).await;
    let h = spawn(&mock, |c| {
        c.backend.max_retries = 0;
        c.backend.breaker_failures = 2;
    })
    .await;
    let mut client = client(&h.app, Transport::Http);
    for i in 0..4 {
        let turn = ask(&mut client, &format!("вопрос {i}")).await;
        assert_eq!(turn.speech(), apology(), "turn {i}");
    }
    assert_eq!(mock.calls(), 2, "calls after the breaker opened failed fast");
    let text = metrics_text(&h.metrics);
    assert!(text.contains(r#"outcome="circuit_open"} 2"#), "{text}");
    assert!(text.contains("megamind_assistant_breaker_state 2"), "{text}");
}

#[tokio::test]
async fn continue_arguments_print_as_json_for_debugging() {
    let mock = MockLlm::start(Reply::Hang).await;
    let h = spawn(&mock, |_| {}).await;
    let answer = h
        .app
        .post(
            "/assistant/run",
            "application/protobuf",
            Some("application/json"),
            run_request("req-1", "вопрос").encode_to_vec(),
        )
        .await;
    let json: serde_json::Value = serde_json::from_slice(&answer.bytes().await.unwrap()).unwrap();
    let arguments = &json["ContinueArguments"];
    assert_eq!(arguments["@type"], "type.googleapis.com/megamind_scenario.v1.TAssistantContinueArguments");
    assert_eq!(arguments["CallId"], "req-1");
    assert_eq!(arguments["Utterance"], "вопрос");
}

#[tokio::test]
async fn serve_hosts_the_offline_assistant_out_of_the_box() {
    let metrics = prometheus::Registry::new();
    let modules = megamind_scenario::scenarios::modules();
    let registry = module::build_all(&modules, &Config::default().scenarios, &metrics).unwrap().registry;
    assert!(registry.names().any(|name| name == "assistant"), "built in: {}", registry.listed());
    let app = spawn_app(Config::default(), registry).await;
    let body = ask(&mut client(&app, Transport::Http), "закрой калькулятор").await.into_body();
    assert_eq!(speech(&body), "Закрываю калькулятор.", "the user's words, in the user's language");
    let directive = &body.layout.as_ref().unwrap().directives[0].directive;
    assert!(matches!(directive, Some(t_directive::Directive::CloseAppDirective(d)) if d.app_name == "Calculator"));
}

#[tokio::test]
async fn the_call_timeout_ends_a_hanging_call_and_the_user_hears_why() {
    let mock = MockLlm::start(Reply::Hang).await;
    let h = spawn(&mock, |c| c.calls.call_timeout_ms = 200).await;
    let body = ask(&mut client(&h.app, Transport::Http), "вопрос").await.into_body();
    assert_eq!(speech(&body), apology(), "the call ended before /continue gave up, so no fallback");
    let text = metrics_text(&h.metrics);
    assert!(text.contains(r#"megamind_assistant_model_calls_total{backend="openai",outcome="timeout"} 1"#), "{text}");
    assert!(text.contains("megamind_assistant_model_calls_in_flight 0"), "{text}");
}

#[tokio::test]
async fn the_first_token_timeout_ends_a_silent_stream() {
    let Reply::Sse { mut chunks } = Reply::stream(&["поздно"], Duration::ZERO) else { unreachable!() };
    chunks[0].0 = Duration::from_secs(5);
    let mock = MockLlm::start(Reply::Sse { chunks }).await;
    let h = spawn(&mock, |c| {
        c.backend.stream = true;
        c.backend.first_token_timeout_ms = 100;
    })
    .await;
    let body = ask(&mut client(&h.app, Transport::Http), "вопрос").await.into_body();
    assert_eq!(speech(&body), apology());
    assert_eq!(mock.calls(), 1, "a timeout is not retried");
}

#[tokio::test]
async fn a_server_that_ignores_stream_is_read_as_json() {
    let mock = MockLlm::start(Reply::content("Без потока.")).await;
    let h = spawn(&mock, |c| c.backend.stream = true).await;
    let body = ask(&mut client(&h.app, Transport::Http), "вопрос").await.into_body();
    assert_eq!(speech(&body), "Без потока.");
    assert_eq!(mock.received()[0].body["stream"], true);
}

#[tokio::test]
async fn a_deeply_nested_model_answer_makes_an_answer_that_decodes_in_every_format() {
    let args = format!("{{\"app_name\": \"Safari\", \"x\": {}1{}}}", "{\"k\": ".repeat(46), "}".repeat(46));
    let reply =
        format!(r#"{{"session_id": "{{session_id}}", "command": "open_app", "args": {args}, "text": "Открываю."}}"#);
    let mock = MockLlm::start(Reply::content_after(Duration::from_millis(20), &reply)).await;
    let h = spawn(&mock, |_| {}).await;
    let turn = ask(&mut client(&h.app, Transport::Http), "открой").await;
    assert_eq!(turn.speech(), "Открываю.");
    assert!(turn.directives().is_empty(), "the oversized command is dropped");
    let Request::Run(sent) = &turn.hops[0].request else { panic!("a turn starts with /run") };
    // The repeat is replayed from the cache in each debug format: each renders.
    for accept in ["text/protobuf", "application/json"] {
        let request = sent.encode_to_vec();
        let answer = h.app.post("/assistant/run", "application/protobuf", Some(accept), request).await;
        assert_eq!(answer.status(), 200, "{accept}");
        let text = answer.text().await.unwrap();
        assert!(text.contains("Открываю."), "{accept}: {text}");
    }
    assert!(metrics_text(&h.metrics).contains("oversized_payload"), "the drop is counted");
}
