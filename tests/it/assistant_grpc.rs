//! The assistant over gRPC (the protocol client over tonic, `x-scenario:
//! assistant`), against the mock model server: the same promises as over
//! HTTP (answers inside the budget whatever the model does, one model call
//! per `RequestId`, across transports too, app directives, history), and
//! protocol errors as OK responses.

use std::time::Duration;

use megamind_core::proto::n_alice::n_scenarios::TScenarioApplyRequest;
use megamind_tools::client::Request;

use crate::{
    assistant_harness::{
        answer, apology, ask, assert_in_budget, client, r#continue, fallback, handed_over,
        history_carries_over_two_turns, metrics_text, open_safari_hands_over, run, spawn, speech, state_of,
    },
    helpers::{Transport, fixture},
    mock_llm::{MockLlm, Reply},
};

#[tokio::test]
async fn open_safari_run_then_continue_gives_the_directive_and_speech() {
    open_safari_hands_over(Transport::Grpc).await;
}

#[tokio::test]
async fn a_model_at_50_ms_is_answered_inside_run() {
    let mock = MockLlm::start(Reply::content_after(Duration::from_millis(50), "Привет!")).await;
    let h = spawn(&mock, |_| {}).await;
    let turn = ask(&mut client(&h.app, Transport::Grpc), "привет").await;
    assert_eq!(turn.hops.len(), 1, "answered inside Run: {:?}", turn.hops);
    assert_eq!(turn.speech(), "Привет!");
    assert_eq!(state_of(turn.body()).turns.len(), 1);
    assert!(metrics_text(&h.metrics).contains(r#"megamind_assistant_answers_total{handler="run",kind="model"} 1"#));
}

#[tokio::test]
async fn a_model_at_2_s_gets_run_and_continue_answered_in_budget_with_the_fallback() {
    let mock = MockLlm::start(Reply::content_after(Duration::from_secs(2), "Сейчас полдень.")).await;
    let h = spawn(&mock, |_| {}).await;
    let mut client = client(&h.app, Transport::Grpc).ignoring_callbacks();

    let turn = ask(&mut client, "Который час?").await;
    let [run, continued] = &turn.hops[..] else { panic!("{:?}", turn.hops) };
    handed_over(run);
    assert!(run.took >= Duration::from_millis(140), "waited run_wait_ms first: {:?}", run.took);
    assert!(continued.took >= Duration::from_millis(250), "waited for the model first: {:?}", continued.took);
    let body = turn.body();
    assert_eq!(speech(body), fallback());
    assert!(body.layout.as_ref().unwrap().should_listen, "the microphone stays open for the repeat");
    let pending = state_of(body).pending.expect("the call is pending in the state");
    assert_eq!(pending.call_id, "req-1");

    // The call goes on once, unretried, and its answer is kept for the repeat.
    mock.wait_for_served(1).await;
    assert_eq!(mock.calls(), 1);
    let repeat = ask(&mut client, "который час").await;
    assert_eq!(repeat.speech(), "Сейчас полдень.");
    assert_eq!(mock.calls(), 1, "the repeat was not a second model call");
}

#[tokio::test]
async fn a_500_then_ok_is_retried_and_the_model_answers() {
    let mock = MockLlm::start(Reply::content("Готово.")).await;
    mock.push(Reply::status(500));
    let h = spawn(&mock, |c| c.backend.retry_backoff_ms = 20).await;
    let turn = ask(&mut client(&h.app, Transport::Grpc), "сделай").await;
    assert_eq!(turn.speech(), "Готово.");
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
        let h = spawn(&mock, |c| c.backend.retry_backoff_ms = 10).await;
        let turn = ask(&mut client(&h.app, Transport::Grpc).ignoring_callbacks(), "вопрос").await;
        assert_eq!(turn.speech(), expected, "{name}");
        assert_eq!(mock.calls(), calls, "{name}");
    }
}

#[tokio::test]
async fn run_retried_five_times_at_once_and_five_after_makes_one_model_call() {
    let mock = MockLlm::start(Reply::content_after(Duration::from_millis(400), "Один ответ.")).await;
    let h = spawn(&mock, |_| {}).await;
    let client = client(&h.app, Transport::Grpc);

    let at_once = futures_util::future::join_all((0..5).map(|_| run(&client, "req-1", "вопрос"))).await;
    let mut after = Vec::new();
    for _ in 0..5 {
        after.push(run(&client, "req-1", "вопрос").await);
    }
    let arguments = handed_over(&at_once[0]);
    for run in at_once.iter().chain(&after) {
        assert_in_budget(run);
        assert_eq!(handed_over(run), arguments, "every retry gets the same hand-over");
    }
    let continued = r#continue(&client, "req-1", arguments).await;
    assert_eq!(speech(answer(&continued)), "Один ответ.");
    assert_eq!(mock.calls(), 1);
}

#[tokio::test]
async fn run_over_http_then_continue_over_grpc_makes_one_model_call() {
    let mock = MockLlm::start(Reply::content_after(Duration::from_millis(250), "Через оба транспорта.")).await;
    let h = spawn(&mock, |_| {}).await;
    let (over_http, over_grpc) = (client(&h.app, Transport::Http), client(&h.app, Transport::Grpc));

    let arguments = handed_over(&run(&over_http, "req-1", "вопрос").await);
    let continued = r#continue(&over_grpc, "req-1", arguments).await;
    assert_in_budget(&continued);
    assert_eq!(speech(answer(&continued)), "Через оба транспорта.");
    assert_eq!(mock.calls(), 1);
}

#[tokio::test]
async fn the_history_in_state_carries_over_two_turns() {
    history_carries_over_two_turns(Transport::Grpc).await;
}

#[tokio::test]
async fn continue_with_foreign_arguments_is_a_bad_request_error_not_a_status() {
    let mock = MockLlm::start(Reply::content("не должен звучать")).await;
    let h = spawn(&mock, |_| {}).await;
    let client = client(&h.app, Transport::Grpc);

    // The demo scenario's Continue, as Megamind would send it to the wrong scenario.
    let foreign: TScenarioApplyRequest = fixture("music_continue_request");
    let foreign_type = foreign.arguments.as_ref().expect("the fixture has Arguments").type_url.clone();
    let continued = client.call(Request::Continue(foreign)).await.expect("Continue is an OK response");
    assert_in_budget(&continued);
    let Some(error) = continued.response.error() else {
        panic!("expected the protocol Error: {:?}", continued.response)
    };
    assert_eq!(error.r#type, "bad_request");
    assert!(error.message.contains(&foreign_type), "{}", error.message);
    assert_eq!(mock.calls(), 0);
}
