//! Only sound words are spoken, against the mock model: voice-length
//! answers with the whole text on the card, answers cut at `max_tokens`
//! trimmed to whole sentences and never taken for commands, commands of
//! another session dropped, no raw JSON, Markdown or session line read aloud,
//! and a history of what was said.

use megamind_core::proto::n_alice::n_scenarios::{TScenarioResponseBody, t_card};

use crate::{
    assistant_harness::{OPEN_SAFARI, ask, client, metrics_text, spawn, state_of},
    helpers::Transport,
    mock_llm::{MockLlm, Reply},
};

fn card(body: &TScenarioResponseBody) -> &str {
    match &body.layout.as_ref().unwrap().cards[0].card {
        Some(t_card::Card::Text(text)) => text,
        other => panic!("a text card: {other:?}"),
    }
}

#[tokio::test]
async fn a_long_answer_is_spoken_to_a_sentence_end_within_the_cap_and_shown_whole() {
    let long: String = (1..=30).map(|i| format!("Это предложение номер {i} длинного ответа модели. ")).collect();
    let mock = MockLlm::start(Reply::content(&long)).await;
    let h = spawn(&mock, |_| {}).await;
    let turn = ask(&mut client(&h.app, Transport::Http), "расскажи подробно").await;
    let speech = turn.speech();
    assert!(speech.chars().count() <= 400, "{} chars", speech.chars().count());
    assert!(speech.len() > 200 && speech.ends_with("модели."), "{speech}");
    assert_eq!(card(turn.body()), long.trim(), "the card holds it all");
}

#[tokio::test]
async fn an_answer_cut_at_max_tokens_is_said_to_its_last_sentence_and_commands_no_app() {
    let mock = MockLlm::start(Reply::content_reasoned("", "Жили-были дед и баба. У них была кур", "length")).await;
    let h = spawn(&mock, |_| {}).await;
    let turn = ask(&mut client(&h.app, Transport::Http), "сказку").await;
    assert_eq!(turn.speech(), "Жили-были дед и баба.");

    let cut_command = OPEN_SAFARI.replace("\"text\": \"Открываю Safari.\"}", "\"text\": \"Открываю\"");
    let mock = MockLlm::start(Reply::content_reasoned("", &cut_command, "length")).await;
    let h = spawn(&mock, |_| {}).await;
    let turn = ask(&mut client(&h.app, Transport::Http), "открой Safari").await;
    assert!(turn.directives().is_empty(), "{:?}", turn.directives());
    assert!(!turn.speech().contains('{'), "{}", turn.speech());
    let whole = Reply::content_reasoned("", OPEN_SAFARI, "length");
    let mock = MockLlm::start(whole).await;
    let h = spawn(&mock, |_| {}).await;
    let turn = ask(&mut client(&h.app, Transport::Http), "открой Safari").await;
    assert!(turn.directives().is_empty(), "even a whole object, when the model was cut off");
    assert_eq!(turn.speech(), "Открываю Safari.");
    let text = metrics_text(&h.metrics);
    assert!(text.contains(r#"megamind_assistant_commands_total{command="any",outcome="truncated"} 1"#), "{text}");
}

#[tokio::test]
async fn a_json_answer_cut_after_its_args_is_never_read_aloud() {
    let cut = r#"{"session_id": "{session_id}", "command": "open_app", "args": {"app_name": "Safari"}, "text": "Откры"#;
    let mock = MockLlm::start(Reply::content(cut)).await;
    let h = spawn(&mock, |_| {}).await;
    let turn = ask(&mut client(&h.app, Transport::Http), "открой Safari").await;
    assert!(!turn.speech().contains("app_name") && !turn.speech().contains('{'), "{}", turn.speech());
    assert!(turn.directives().is_empty());
}

#[tokio::test]
async fn a_command_with_another_sessions_id_is_dropped_and_its_text_said() {
    let copied = OPEN_SAFARI.replace("{session_id}", "session_1764210832.530743");
    let mock = MockLlm::start(Reply::content(&copied)).await;
    let h = spawn(&mock, |_| {}).await;
    let turn = ask(&mut client(&h.app, Transport::Http), "открой Safari").await;
    assert!(turn.directives().is_empty());
    assert_eq!(turn.speech(), "Открываю Safari.");
    let text = metrics_text(&h.metrics);
    assert!(text.contains(r#"megamind_assistant_commands_total{command="any",outcome="wrong_session"} 1"#), "{text}");
}

#[tokio::test]
async fn markdown_and_the_session_line_are_not_read_aloud() {
    let raw = "## Ответ\n**Привет!**\nThe session id is: {session_id}\n- Чем помочь?";
    let mock = MockLlm::start(Reply::content(raw)).await;
    let h = spawn(&mock, |_| {}).await;
    let turn = ask(&mut client(&h.app, Transport::Http), "привет").await;
    assert_eq!(turn.speech(), "Ответ\nПривет!\nЧем помочь?");
    assert!(!card(turn.body()).contains("session"), "nor shown: {}", card(turn.body()));
}

#[tokio::test]
async fn the_history_keeps_what_was_said_capped() {
    let rambling = format!("Короткий ответ. {}", "Бла-бла-бла и ещё раз бла. ".repeat(80));
    let mock = MockLlm::start(Reply::content("Ок.")).await;
    mock.push(Reply::content(&rambling));
    let h = spawn(&mock, |_| {}).await;
    let mut client = client(&h.app, Transport::Http);
    ask(&mut client, "раз").await;
    let second = ask(&mut client, "два").await;
    let turns = state_of(second.body()).turns;
    assert!(
        turns[0].assistant.len() <= 600 && turns[0].assistant.starts_with("Короткий ответ."),
        "{}",
        turns[0].assistant
    );
    assert!(turns[0].assistant.ends_with('.'), "cut at a sentence end: {}", turns[0].assistant);
    let sent = mock.received()[1].body["messages"][2]["content"].as_str().unwrap().to_owned();
    assert_eq!(sent, turns[0].assistant, "the model is shown what was kept");
}
