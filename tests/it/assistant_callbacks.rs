//! The callback contract (docs/callbacks.md) over HTTP, against the mock model: an
//! answer past the window reaches the user without a repeat, through
//! `CallbackDirective`s the client sends back, over one model call; complete
//! sentences of a streamed answer are spoken as they are ready; a client that
//! does not follow callbacks still gets the answer on the user's repeat.

use std::time::Duration;

use megamind_core::{
    proto::n_alice::n_scenarios::{
        TCallbackDirective, TInput, t_directive, t_input, t_scenario_run_response::Response as RunResponse,
    },
    scenario::Handler,
};
use megamind_tools::client::{Request, Turn};
use prost_types::{Struct, Value, value::Kind};

use crate::{
    assistant_harness::{
        OPEN_SAFARI, apology, ask, assert_in_budget, client, metrics_text, run_request, spawn, speech, state_of,
    },
    helpers::Transport,
    mock_llm::{MockLlm, Reply},
};

fn fillers() -> Vec<String> {
    megamind_assistant::config::AssistantConfig::default().dialog.filler_texts
}

/// The callback hops of a turn: the `/run`s after the first.
fn callback_runs(turn: &Turn) -> usize {
    turn.hops.iter().filter(|hop| hop.handler() == Handler::Run).count() - 1
}

fn callback_of(turn_body: &megamind_core::proto::n_alice::n_scenarios::TScenarioResponseBody) -> bool {
    let directives = &turn_body.layout.as_ref().unwrap().directives;
    directives.iter().any(|d| matches!(d.directive, Some(t_directive::Directive::CallbackDirective(_))))
}

#[tokio::test]
async fn a_slow_answer_arrives_through_callbacks_over_one_call_without_a_repeat() {
    let mock = MockLlm::start(Reply::content_after(Duration::from_millis(1200), OPEN_SAFARI)).await;
    let h = spawn(&mock, |_| {}).await;
    for transport in [Transport::Http, Transport::Grpc] {
        // Each transport's dialog its own RequestIds, so its own call.
        let mut client = client(&h.app, transport).with_request_id_prefix(&format!("{transport:?}-"));
        let served = mock.calls();
        let turn = ask(&mut client, "открой Safari").await;

        assert_eq!(turn.speech(), "Открываю Safari.", "{transport:?}: {:?}", turn.speeches());
        assert!(
            matches!(turn.directives()[0].directive, Some(t_directive::Directive::OpenAppDirective(_))),
            "{:?}",
            turn.directives()
        );
        assert_eq!(mock.calls(), served + 1, "every hop joined the one call");
        assert!(callback_runs(&turn) >= 1, "{transport:?}: at least one hop: {:?}", turn.hops);
        let speeches = turn.speeches();
        let (held, last) = speeches.split_at(speeches.len() - 1);
        assert_eq!(last, ["Открываю Safari."]);
        assert!(held.iter().all(|s| fillers().iter().any(|f| f == s)), "only fillers while waiting: {held:?}");
        assert!(held.windows(2).all(|pair| pair[0] != pair[1]), "never the same twice in a row: {held:?}");
        assert!(state_of(turn.body()).pending.is_none(), "nothing left pending");
    }
    let text = metrics_text(&h.metrics);
    let fillers =
        crate::metrics::sample(&text, r#"megamind_assistant_answers_total{handler="continue",kind="filler"}"#);
    assert!(fillers >= Some(1.0), "{text}");
}

#[tokio::test]
async fn complete_sentences_of_a_stream_are_spoken_as_they_are_ready_and_the_rest_follows() {
    let pieces = ["Жили-были дед и баба. ", "У них была курочка Ряба. ", "Снесла курочка яичко. ", "Конец."];
    let mock = MockLlm::start(Reply::stream(&pieces, Duration::from_millis(300))).await;
    let h = spawn(&mock, |c| c.backend.stream = true).await;
    let turn = ask(&mut client(&h.app, Transport::Http), "расскажи сказку").await;

    let speeches = turn.speeches();
    let said: Vec<&str> = speeches.iter().copied().filter(|s| !fillers().iter().any(|f| f == s)).collect();
    assert!(said.len() >= 2, "spoken in parts: {speeches:?}");
    assert_eq!(said.join(" "), pieces.concat().trim(), "each sentence once, in order: {speeches:?}");
    assert!(said[0].starts_with("Жили-были дед и баба."), "{speeches:?}");
    let card = &turn.body().layout.as_ref().unwrap().cards[0];
    assert_eq!(format!("{:?}", card.card).matches("Жили-были").count(), 1);
    assert!(format!("{:?}", card.card).contains("Конец."), "the card holds the whole answer: {card:?}");
    assert_eq!(mock.calls(), 1);
}

#[tokio::test]
async fn a_streamed_json_answer_is_not_spoken_before_it_is_whole() {
    let json = OPEN_SAFARI;
    let (head, tail) = json.split_at(json.find("\"text\"").unwrap());
    let mock = MockLlm::start(Reply::stream(&[head, tail], Duration::from_millis(500))).await;
    let h = spawn(&mock, |c| c.backend.stream = true).await;
    let turn = ask(&mut client(&h.app, Transport::Http), "открой Safari").await;
    let speeches = turn.speeches();
    let (held, last) = speeches.split_at(speeches.len() - 1);
    assert!(held.iter().all(|s| fillers().iter().any(|f| f == s)), "{speeches:?}");
    assert_eq!(last, ["Открываю Safari."]);
    assert!(!turn.directives().is_empty());
}

/// Prose, then the object whose `text` says it again, spread over lines:
/// the object's strings are never spoken as sentences while it streams, and
/// what the prose said is not said again by the final answer.
#[tokio::test]
async fn prose_before_a_streamed_object_is_said_once_and_the_object_never_aloud() {
    let pieces = [
        "Открываю Safari.\n{\n  \"session_id\": \"{session_id}\",\n",
        "  \"command\": \"open_app\",\n  \"args\": {\"app_name\": \"Safari\"},\n  \"text\": \"Открываю Safari.\"\n",
        "}",
    ];
    let mock = MockLlm::start(Reply::stream(&pieces, Duration::from_millis(400))).await;
    let h = spawn(&mock, |c| c.backend.stream = true).await;
    let turn = ask(&mut client(&h.app, Transport::Http), "открой Safari").await;
    let speeches = turn.speeches();
    let said: Vec<&str> = speeches.iter().copied().filter(|s| !fillers().iter().any(|f| f == s)).collect();
    assert!(said.iter().all(|s| !s.contains('{') && !s.contains("command")), "{speeches:?}");
    assert_eq!(said.concat().matches("Открываю Safari.").count(), 1, "said once: {speeches:?}");
    assert!(!turn.directives().is_empty(), "the object's command is taken");
}

#[tokio::test]
async fn a_client_that_does_not_follow_callbacks_gets_the_answer_on_the_repeat() {
    let mock = MockLlm::start(Reply::content_after(Duration::from_millis(700), "Сейчас полдень.")).await;
    let h = spawn(&mock, |_| {}).await;
    let mut client = client(&h.app, Transport::Http).ignoring_callbacks();
    let turn = ask(&mut client, "Который час?").await;
    assert_eq!(turn.speech(), fillers()[0]);
    assert!(callback_of(turn.body()), "the callback is offered even so");
    assert!(turn.body().layout.as_ref().unwrap().should_listen, "and the microphone stays open");

    mock.wait_for_served(1).await;
    let repeat = ask(&mut client, "который час").await;
    assert_eq!(repeat.speech(), "Сейчас полдень.");
    assert_eq!(mock.calls(), 1, "the repeat joined the call");
}

#[tokio::test]
async fn a_model_that_never_answers_ends_in_one_apology_when_the_call_times_out() {
    let mock = MockLlm::start(Reply::Hang).await;
    let h = spawn(&mock, |c| c.calls.call_timeout_ms = 1500).await;
    let turn = ask(&mut client(&h.app, Transport::Http), "вопрос").await;
    assert_eq!(turn.speech(), apology(), "{:?}", turn.speeches());
    assert!(!callback_of(turn.body()), "no more callbacks after the apology");
    let hops = callback_runs(&turn);
    assert!((1..=8).contains(&hops), "bounded by the call's own timeout: {hops} hops");
    assert_eq!(mock.calls(), 1);
}

#[tokio::test]
async fn a_failed_pending_call_is_apologized_for_once_then_the_repeat_calls_again() {
    let failed = Reply::Json { delay: Duration::from_millis(700), status: 400, body: "{}".into() };
    let mock = MockLlm::start(Reply::content("Теперь получилось.")).await;
    mock.push(failed);
    let h = spawn(&mock, |_| {}).await;
    let mut client = client(&h.app, Transport::Http).ignoring_callbacks();
    assert_eq!(ask(&mut client, "вопрос").await.speech(), fillers()[0]);
    mock.wait_for_served(1).await;

    let repeat = ask(&mut client, "вопрос").await;
    assert_eq!(repeat.speech(), apology(), "the failed call's apology, not a silent new call");
    assert_eq!(mock.calls(), 1);
    assert!(state_of(repeat.body()).pending.is_none());
    let again = ask(&mut client, "вопрос").await;
    assert_eq!(again.speech(), "Теперь получилось.");
    assert_eq!(mock.calls(), 2);
}

#[tokio::test]
async fn a_callback_for_no_pending_call_is_declined() {
    let mock = MockLlm::start(Reply::content("Ответ.")).await;
    let h = spawn(&mock, |_| {}).await;
    let client = client(&h.app, Transport::Http);
    let payload = Struct {
        fields: [("call_id".to_owned(), Value { kind: Some(Kind::StringValue("someone-else".into())) })]
            .into_iter()
            .collect(),
    };
    let callback = TCallbackDirective { name: "assistant_answer".into(), payload: Some(payload), ..Default::default() };
    let mut request = run_request("req-9", "ignored");
    request.input = Some(TInput { event: Some(t_input::Event::Callback(callback)), ..Default::default() });
    let hop = client.call(Request::Run(request)).await.unwrap();
    assert_in_budget(&hop);
    let run = hop.response.as_run().unwrap();
    assert!(run.features.as_ref().unwrap().is_irrelevant, "declined: {run:?}");
    let Some(RunResponse::ResponseBody(body)) = &run.response else { panic!("{run:?}") };
    assert!(!speech(body).is_empty(), "saying why");
    assert_eq!(mock.calls(), 0, "it joins no call and starts none");
}
