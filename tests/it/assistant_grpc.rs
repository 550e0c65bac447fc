//! The assistant over gRPC (the generated tonic client, `x-scenario:
//! assistant`), against the mock model server: the same promises as over
//! HTTP (answers inside the budget whatever the model does, one model call
//! per `RequestId`, across transports too, app directives, history), and
//! protocol errors as OK responses.

use std::time::{Duration, Instant};

use megamind_scenario::{
    codec::Format,
    proto::{
        megamind_scenario::v1::scenario_client::ScenarioClient,
        n_alice::n_scenarios::{
            TScenarioApplyRequest, TScenarioContinueResponse, TScenarioResponseBody, TScenarioRunResponse, t_card,
            t_directive, t_scenario_continue_response, t_scenario_run_response,
        },
    },
};
use prost::Message;
use prost_types::Any;
use tonic::transport::Channel;

use crate::{
    assistant_harness::{
        OPEN_SAFARI, Timed, apology, assert_in_budget, continue_body, continue_request, fallback, metrics_text,
        run_request, spawn, speech, state_of,
    },
    helpers::{decode_answer, fixture, grpc_client, grpc_request},
    mock_llm::{MockLlm, Reply},
};

type Client = ScenarioClient<Channel>;

async fn run(client: &Client, request_id: &str, words: &str, state: Option<Any>) -> Timed<TScenarioRunResponse> {
    let request = grpc_request(run_request(request_id, words, state), Some("assistant"));
    let started = Instant::now();
    let answer = client.clone().run(request).await;
    let took = started.elapsed();
    Timed { answer: answer.expect("Run is an OK response").into_inner(), took }
}

async fn call_continue(client: &Client, request: TScenarioApplyRequest) -> Timed<TScenarioContinueResponse> {
    let request = grpc_request(request, Some("assistant"));
    let started = Instant::now();
    let answer = client.clone().r#continue(request).await;
    let took = started.elapsed();
    Timed { answer: answer.expect("Continue is an OK response").into_inner(), took }
}

async fn r#continue(client: &Client, request_id: &str, arguments: Any) -> Timed<TScenarioContinueResponse> {
    call_continue(client, continue_request(request_id, arguments)).await
}

fn handed_over(run: &Timed<TScenarioRunResponse>) -> Any {
    match &run.answer.response {
        Some(t_scenario_run_response::Response::ContinueArguments(arguments)) => arguments.clone(),
        other => panic!("Run should hand over to Continue: {other:?}"),
    }
}

/// Run, then Continue when Run handed over, each inside the budget: the user's answer.
async fn ask(client: &Client, request_id: &str, words: &str, state: Option<Any>) -> TScenarioResponseBody {
    let run = run(client, request_id, words, state).await;
    assert_in_budget("run", run.took);
    match run.answer.response {
        Some(t_scenario_run_response::Response::ResponseBody(body)) => body,
        Some(t_scenario_run_response::Response::ContinueArguments(arguments)) => {
            let answer = r#continue(client, request_id, arguments).await;
            assert_in_budget("continue", answer.took);
            continue_body(answer.answer)
        }
        other => panic!("Run answered {other:?}"),
    }
}

#[tokio::test]
async fn open_safari_run_then_continue_gives_the_directive_and_speech() {
    let mock = MockLlm::start(Reply::content_after(Duration::from_millis(250), OPEN_SAFARI)).await;
    let h = spawn(&mock, |_| {}).await;
    let client = grpc_client(&h.app).await;

    let run = run(&client, "req-1", "открой Safari", None).await;
    assert_in_budget("run", run.took);
    let arguments = handed_over(&run);
    assert!(arguments.type_url.ends_with("megamind_scenario.v1.TAssistantContinueArguments"));
    assert!(!run.answer.features.expect("features").is_irrelevant);

    let answer = r#continue(&client, "req-1", arguments).await;
    assert_in_budget("continue", answer.took);
    let body = continue_body(answer.answer);
    assert_eq!(speech(&body), "Открываю Safari.");
    let layout = body.layout.as_ref().unwrap();
    assert_eq!(layout.directives.len(), 1, "{:?}", layout.directives);
    let Some(t_directive::Directive::OpenAppDirective(open)) = &layout.directives[0].directive else {
        panic!("{:?}", layout.directives)
    };
    assert_eq!((open.name.as_str(), open.app_name.as_str()), ("open_app", "Safari"));
    assert!(matches!(&layout.cards[0].card, Some(t_card::Card::Text(text)) if text == "Открываю Safari."));
    assert_eq!(mock.calls(), 1);
    assert_eq!(mock.received()[0].body["messages"][1]["content"], "открой Safari");
}

#[tokio::test]
async fn a_model_at_50_ms_is_answered_inside_run() {
    let mock = MockLlm::start(Reply::content_after(Duration::from_millis(50), "Привет!")).await;
    let h = spawn(&mock, |_| {}).await;
    let client = grpc_client(&h.app).await;
    let run = run(&client, "req-1", "привет", None).await;
    assert_in_budget("run", run.took);
    let Some(t_scenario_run_response::Response::ResponseBody(body)) = &run.answer.response else {
        panic!("answered inside Run: {:?}", run.answer)
    };
    assert_eq!(speech(body), "Привет!");
    assert_eq!(state_of(body).turns.len(), 1);
    assert!(metrics_text(&h.metrics).contains(r#"megamind_assistant_answers_total{handler="run",kind="model"} 1"#));
}

#[tokio::test]
async fn a_model_at_2_s_gets_run_and_continue_answered_in_budget_with_the_fallback() {
    let mock = MockLlm::start(Reply::content_after(Duration::from_secs(2), "Сейчас полдень.")).await;
    let h = spawn(&mock, |_| {}).await;
    let client = grpc_client(&h.app).await;

    let run = run(&client, "req-1", "Который час?", None).await;
    assert_in_budget("run", run.took);
    assert!(run.took >= Duration::from_millis(140), "waited run_wait_ms first: {:?}", run.took);
    let answer = r#continue(&client, "req-1", handed_over(&run)).await;
    assert_in_budget("continue", answer.took);
    assert!(answer.took >= Duration::from_millis(250), "waited for the model first: {:?}", answer.took);
    let body = continue_body(answer.answer);
    assert_eq!(speech(&body), fallback());
    assert!(body.layout.as_ref().unwrap().should_listen, "the microphone stays open for the repeat");
    let pending = state_of(&body).pending.expect("the call is pending in the state");
    assert_eq!(pending.call_id, "req-1");

    // The call goes on once, unretried, and its answer is kept for the repeat.
    mock.wait_for_served(1).await;
    assert_eq!(mock.calls(), 1);
    let repeat = ask(&client, "req-2", "который час", body.state.clone()).await;
    assert_eq!(speech(&repeat), "Сейчас полдень.");
    assert_eq!(mock.calls(), 1, "the repeat was not a second model call");
}

#[tokio::test]
async fn a_500_then_ok_is_retried_and_the_model_answers() {
    let mock = MockLlm::start(Reply::content("Готово.")).await;
    mock.push(Reply::status(500));
    let h = spawn(&mock, |c| c.retry_backoff_ms = 20).await;
    let client = grpc_client(&h.app).await;
    let body = ask(&client, "req-1", "сделай", None).await;
    assert_eq!(speech(&body), "Готово.");
    assert_eq!(mock.calls(), 2);
    assert!(metrics_text(&h.metrics).contains("megamind_assistant_model_retries_total 1"));
}

#[tokio::test]
async fn hangs_garbage_and_resets_get_answers_in_budget() {
    // Connection failures are retried (twice by default); a hang is not a failure yet.
    let cases = [
        ("hang", Reply::Hang, fallback(), 1),
        (
            "garbage",
            Reply::Garbage { delay: Duration::ZERO, bytes: b"\x00\xffnot http\r\n\r\n".to_vec() },
            apology(),
            3,
        ),
        ("reset", Reply::Reset { delay: Duration::ZERO }, apology(), 3),
    ];
    for (name, reply, expected, calls) in cases {
        let mock = MockLlm::start(reply).await;
        let h = spawn(&mock, |c| c.retry_backoff_ms = 10).await;
        let client = grpc_client(&h.app).await;
        let body = ask(&client, "req-1", "вопрос", None).await;
        assert_eq!(speech(&body), expected, "{name}");
        assert_eq!(mock.calls(), calls, "{name}");
    }
}

#[tokio::test]
async fn run_retried_five_times_at_once_and_five_after_makes_one_model_call() {
    let mock = MockLlm::start(Reply::content_after(Duration::from_millis(400), "Один ответ.")).await;
    let h = spawn(&mock, |_| {}).await;
    let client = grpc_client(&h.app).await;

    let at_once = futures_util::future::join_all((0..5).map(|_| run(&client, "req-1", "вопрос", None))).await;
    let mut after = Vec::new();
    for _ in 0..5 {
        after.push(run(&client, "req-1", "вопрос", None).await);
    }
    let arguments = handed_over(&at_once[0]);
    for run in at_once.iter().chain(&after) {
        assert_in_budget("run", run.took);
        assert_eq!(handed_over(run), arguments, "every retry gets the same hand-over");
    }
    let body = continue_body(r#continue(&client, "req-1", arguments).await.answer);
    assert_eq!(speech(&body), "Один ответ.");
    assert_eq!(mock.calls(), 1);
}

#[tokio::test]
async fn run_over_http_then_continue_over_grpc_makes_one_model_call() {
    let mock = MockLlm::start(Reply::content_after(Duration::from_millis(250), "Через оба транспорта.")).await;
    let h = spawn(&mock, |_| {}).await;
    let client = grpc_client(&h.app).await;

    let (status, over_http) =
        h.app.post_binary("/assistant/run", run_request("req-1", "вопрос", None).encode_to_vec()).await;
    assert_eq!(status, 200);
    let over_http: TScenarioRunResponse = decode_answer(&over_http, Format::Binary);
    let Some(t_scenario_run_response::Response::ContinueArguments(arguments)) = over_http.response else {
        panic!("a 250 ms model hands over: {over_http:?}")
    };
    let answer = r#continue(&client, "req-1", arguments).await;
    assert_in_budget("continue", answer.took);
    assert_eq!(speech(&continue_body(answer.answer)), "Через оба транспорта.");
    assert_eq!(mock.calls(), 1);
}

#[tokio::test]
async fn the_history_in_state_carries_over_two_turns() {
    let mock = MockLlm::start(Reply::content("Закрываю.")).await;
    mock.push(Reply::content(OPEN_SAFARI));
    let h = spawn(&mock, |_| {}).await;
    let client = grpc_client(&h.app).await;

    let first = ask(&client, "req-1", "открой Safari", None).await;
    let session = state_of(&first).session_id;
    let second = ask(&client, "req-2", "а теперь закрой", first.state.clone()).await;
    assert_eq!(speech(&second), "Закрываю.");

    let state = state_of(&second);
    assert_eq!(state.session_id, session);
    let turns: Vec<(&str, &str)> = state.turns.iter().map(|t| (t.user.as_str(), t.assistant.as_str())).collect();
    assert_eq!(turns, [("открой Safari", OPEN_SAFARI), ("а теперь закрой", "Закрываю.")]);
    let messages = mock.received()[1].body["messages"].clone();
    let sent: Vec<(&str, &str)> = messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    assert_eq!(&sent[1..], [("user", "открой Safari"), ("assistant", OPEN_SAFARI), ("user", "а теперь закрой")]);
}

#[tokio::test]
async fn continue_with_foreign_arguments_is_a_bad_request_error_not_a_status() {
    let mock = MockLlm::start(Reply::content("не должен звучать")).await;
    let h = spawn(&mock, |_| {}).await;
    let client = grpc_client(&h.app).await;

    // The demo scenario's Continue, as Megamind would send it to the wrong scenario.
    let foreign: TScenarioApplyRequest = fixture("music_continue_request");
    let foreign_type = foreign.arguments.as_ref().expect("the fixture has Arguments").type_url.clone();
    let answer = call_continue(&client, foreign).await;
    assert_in_budget("continue", answer.took);
    let Some(t_scenario_continue_response::Response::Error(error)) = &answer.answer.response else {
        panic!("expected the protocol Error: {:?}", answer.answer)
    };
    assert_eq!(error.r#type, "bad_request");
    assert!(error.message.contains(&foreign_type), "{}", error.message);
    assert_eq!(mock.calls(), 0);
}
