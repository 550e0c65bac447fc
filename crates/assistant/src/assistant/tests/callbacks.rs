//! The callback contract on the paused clock: holds, hops and their bound.

use prost_types::{Struct, Value, value::Kind};

use super::*;
use crate::dialog::{callback, state};

/// `/run` of our callback for `call_id`, carrying `state`.
fn callback_request(request_id: &str, call_id: &str, state: &TAssistantState) -> TScenarioRunRequest {
    let mut request = run_request(request_id, "", Some(state::encode(state)));
    let payload = Struct {
        fields: [("call_id".to_owned(), Value { kind: Some(Kind::StringValue(call_id.into())) })].into_iter().collect(),
    };
    let callback = TCallbackDirective { name: callback::NAME.into(), payload: Some(payload), ..Default::default() };
    request.input = Some(TInput { event: Some(t_input::Event::Callback(callback)), ..Default::default() });
    request
}

#[tokio::test(start_paused = true)]
async fn callback_hops_join_the_one_call_and_fillers_take_turns() {
    let backend = Scripted::new(2_000, Ok("Сейчас 12 часов."));
    let (assistant, _) = assistant(backend.clone(), AssistantConfig::default());
    let fillers = AssistantConfig::default().dialog.filler_texts;

    let arguments =
        handover(&assistant.run(run_request("r1", "Который час?", None), ctx("r1")).await.unwrap().into_owned());
    let body = continue_body(assistant.r#continue(continue_request(arguments), ctx("r1")).await.unwrap().into_owned());
    assert_eq!(speech(&body), fillers[0]);
    let mut state = state_of(&body);

    for (hop, request_id) in [(2, "r2"), (3, "r3")] {
        let run = assistant.run(callback_request(request_id, "r1", &state), ctx(request_id)).await.unwrap();
        let arguments = handover(&run.into_owned());
        let body = continue_body(
            assistant.r#continue(continue_request(arguments), ctx(request_id)).await.unwrap().into_owned(),
        );
        assert_eq!(speech(&body), fillers[hop - 1], "the next filler");
        state = state_of(&body);
        let pending = state.pending.clone().unwrap();
        assert_eq!((pending.call_id.as_str(), pending.hops), ("r1", hop as u32));
    }
    tokio::time::advance(Duration::from_secs(2)).await;
    let body = body_of(assistant.run(callback_request("r4", "r1", &state), ctx("r4")).await.unwrap().into_owned());
    assert_eq!(speech(&body), "Сейчас 12 часов.");
    let state = state_of(&body);
    assert!(state.pending.is_none());
    assert_eq!(state.turns.len(), 1);
    assert_eq!(backend.calls(), 1, "every hop joined the first call");

    // The same callback again: the dialog no longer waits for that call.
    let stale = assistant.run(callback_request("r5", "r1", &state), ctx("r5")).await.unwrap().into_owned();
    assert!(stale.features.unwrap().is_irrelevant);
}

#[tokio::test(start_paused = true)]
async fn past_the_hops_a_call_may_take_the_apology() {
    let backend = Scripted::new(60_000, Ok("поздно"));
    let mut config = AssistantConfig::default();
    config.calls.call_timeout_ms = 120_000;
    let (assistant, registry) = assistant(backend.clone(), config.clone());
    let max = callback::max_hops(config.calls.call_timeout());
    assert_eq!(max, 481);

    let arguments = handover(&assistant.run(run_request("r1", "вопрос", None), ctx("r1")).await.unwrap().into_owned());
    let body = continue_body(assistant.r#continue(continue_request(arguments), ctx("r1")).await.unwrap().into_owned());
    let mut state = state_of(&body);
    state.pending.as_mut().unwrap().hops = max;
    let arguments =
        handover(&assistant.run(callback_request("r2", "r1", &state), ctx("r2")).await.unwrap().into_owned());
    let body = continue_body(assistant.r#continue(continue_request(arguments), ctx("r2")).await.unwrap().into_owned());
    assert_eq!(speech(&body), config.dialog.apology_text);
    assert!(state_of(&body).pending.is_none());
    assert!(body.layout.unwrap().directives.is_empty(), "no callback after the apology");
    assert!(metric(&registry, r#"megamind_assistant_answers_total{handler="continue",kind="apology"} 1"#));
}
