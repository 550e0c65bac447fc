//! Only words are spoken: a model that thinks before it answers, in any of
//! the forms models write it (`<think>` closed or opened by the chat
//! template, ThinkingML, `reasoning_content`), streamed or not, is heard,
//! shown and served by `/llm/answers` as its final words, its thought kept
//! in `reasoning`; a thought cut by `length` is heard as nothing of it.

use std::time::Duration;

use megamind_assistant::{
    jsonseq::{parse_transcript, validate},
    llm::config::Format,
};
use megamind_core::proto::n_alice::n_scenarios::t_card;
use serde_json::Value;

use crate::{
    assistant_harness::{apology, ask, client, signed, spawn_module},
    helpers::{TestApp, Transport},
    mock_llm::{MockLlm, Reply},
};

const THOUGHT: &str = "The user greets me. I should answer briefly.";
const WORDS: &str = "Привет! Чем могу помочь?";

/// A form of thinking: its name, the reasoning apart, the answer's text.
struct Form {
    name: &'static str,
    reasoning: &'static str,
    text: String,
}

fn forms() -> Vec<Form> {
    vec![
        Form { name: "<think> closed", reasoning: "", text: format!("<think>\n{THOUGHT}\n</think>\n\n{WORDS}") },
        Form { name: "<think> opened by the template", reasoning: "", text: format!("{THOUGHT}\n</think>\n\n{WORDS}") },
        Form {
            name: "ThinkingML",
            reasoning: "",
            text: format!(
                r#"<thinking><phase id="1"><title>Приветствие</title>{THOUGHT}</phase></thinking><final>{WORDS}</final>"#
            ),
        },
        Form { name: "reasoning_content", reasoning: THOUGHT, text: WORDS.to_owned() },
    ]
}

/// `text` in pieces of about `size` characters, cut anywhere (inside tags too).
fn pieces(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(size).map(|piece| piece.iter().collect()).collect()
}

fn reply(reasoning: &str, text: &str, finish_reason: &str, streamed: bool) -> Reply {
    if !streamed {
        return Reply::content_reasoned(reasoning, text, finish_reason);
    }
    let (reasoning, text) = (pieces(reasoning, 7), pieces(text, 5));
    let reasoning: Vec<&str> = reasoning.iter().map(String::as_str).collect();
    let text: Vec<&str> = text.iter().map(String::as_str).collect();
    Reply::stream_reasoned(&reasoning, &text, finish_reason, Duration::ZERO)
}

async fn app(reply: Reply, streamed: bool) -> (MockLlm, TestApp) {
    let mock = MockLlm::start(reply).await;
    let app = spawn_module(&mock, |config| config.backend.stream = streamed).await;
    (mock, app)
}

async fn answers(app: &TestApp, request_id: &str) -> Value {
    let url = app.url(&signed(&format!("/llm/answers/{request_id}")));
    megamind_assistant::parts::fetch_all(&app.http, &url).await.expect("the answer")
}

/// The final and the phases' texts of the JSONSeq stream of `request_id`.
async fn stream_texts(app: &TestApp, request_id: &str) -> (String, String) {
    let url = app.url(&signed(&format!("/llm/stream/{request_id}")));
    let transcript = app.http.get(url).send().await.unwrap().text().await.unwrap();
    let (events, _) = parse_transcript(&transcript);
    assert!(validate(&events).is_empty(), "{transcript}");
    let text = |name: &str| -> String {
        let data = events.iter().filter(|e| e.name == name).map(|e| serde_json::from_str::<Value>(&e.data).unwrap());
        data.map(|data| data["text"].as_str().unwrap().to_owned()).collect()
    };
    (text("final_delta"), text("phase_delta"))
}

#[tokio::test]
async fn a_thinking_model_is_heard_shown_and_served_as_its_final_words() {
    for form in forms() {
        for streamed in [false, true] {
            let what = format!("{} (streamed: {streamed})", form.name);
            let (_mock, app) = app(reply(form.reasoning, &form.text, "stop", streamed), streamed).await;
            let turn = ask(&mut client(&app, Transport::Http), "привет").await;
            assert_eq!(turn.speech(), WORDS, "{what}");
            let cards = &turn.body().layout.as_ref().unwrap().cards;
            assert_eq!(cards.len(), 1, "{what}");
            assert_eq!(cards[0].card, Some(t_card::Card::Text(WORDS.into())), "{what}");

            let whole = answers(&app, "req-1").await;
            assert_eq!(whole["status"], "completed", "{what}");
            assert_eq!(whole["text"], WORDS, "{what}");
            let reasoning = whole["reasoning"].as_str().unwrap();
            assert!(reasoning.contains(THOUGHT) && !reasoning.contains(WORDS), "{what}: {reasoning:?}");

            // The screen's stream reads it the same way, once the thought is known as one.
            if form.text.starts_with('<') || !form.reasoning.is_empty() {
                let (finals, phases) = stream_texts(&app, "req-1").await;
                assert_eq!(finals, WORDS, "{what}");
                assert_eq!(phases, THOUGHT, "{what}");
            }
        }
    }
}

#[tokio::test]
async fn a_thought_cut_by_length_is_heard_as_nothing_of_it() {
    let cut = ["<think>\nThe user greets me. I sho", r#"<thinking><phase id="1">The user greets me. I sho"#];
    for text in cut {
        for streamed in [false, true] {
            let what = format!("{text:?} (streamed: {streamed})");
            let (_mock, app) = app(reply("", text, "length", streamed), streamed).await;
            let turn = ask(&mut client(&app, Transport::Http), "привет").await;
            for speech in turn.speeches() {
                assert!(!speech.contains('<') && !speech.contains("user"), "{what}: {speech:?}");
            }
            assert_eq!(turn.speech(), apology(), "{what}: as any answer with nothing to say");
            let whole = answers(&app, "req-1").await;
            assert_eq!(whole["text"], "", "{what}");
            assert!(whole["reasoning"].as_str().unwrap().contains("The user greets me"), "{what}");
        }
    }
}

#[tokio::test]
async fn while_the_model_thinks_the_holds_say_fillers_never_the_thought() {
    let text = format!("<think>\n{THOUGHT} Then I greet back. Briefly.\n</think>\n\n{WORDS}");
    let pieces: Vec<String> = text.split_inclusive(' ').map(str::to_owned).collect();
    let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let slow = Reply::stream_reasoned(&[], &pieces, "stop", Duration::from_millis(60));
    let (_mock, app) = app(slow, true).await;
    let turn = ask(&mut client(&app, Transport::Http), "привет").await;
    let speeches = turn.speeches();
    assert!(speeches.len() > 1, "the model took longer than one call: {speeches:?}");
    for speech in &speeches {
        assert!(!speech.contains('<') && !speech.contains("user") && !speech.contains("greet"), "{speeches:?}");
    }
    let said = speeches.join(" ");
    assert!(said.contains("Привет!") && said.contains("Чем могу помочь?"), "{speeches:?}");
}

#[tokio::test]
async fn a_thought_the_chat_template_opened_is_never_said_when_the_format_says_so() {
    let text = format!("{THOUGHT} Then I greet back. Briefly.\n</think>\n\n{WORDS}");
    let pieces: Vec<String> = text.split_inclusive(' ').map(str::to_owned).collect();
    let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let mock = MockLlm::start(Reply::stream_reasoned(&[], &pieces, "stop", Duration::from_millis(60))).await;
    let app = spawn_module(&mock, |config| config.llm.stream_format = Format::ThinkOpened).await;
    let turn = ask(&mut client(&app, Transport::Http), "привет").await;
    let speeches = turn.speeches();
    assert!(speeches.len() > 1, "the model took longer than one call: {speeches:?}");
    for speech in &speeches {
        assert!(!speech.contains('<') && !speech.contains("user") && !speech.contains("greet"), "{speeches:?}");
    }
    assert!(speeches.join(" ").contains(WORDS), "{speeches:?}");
    let (finals, phases) = stream_texts(&app, "req-1").await;
    assert_eq!(finals, WORDS);
    assert!(phases.starts_with(THOUGHT), "{phases}");
    assert_eq!(answers(&app, "req-1").await["text"], WORDS);
}

#[tokio::test]
async fn a_thought_past_the_thinking_budget_ends_with_the_apology() {
    let long: Vec<String> = (1..=40).map(|i| format!("Thought {i}. ")).collect();
    let mut pieces = vec!["<think>\n"];
    pieces.extend(long.iter().map(String::as_str));
    pieces.extend(["</think>\n", WORDS]);
    let mock = MockLlm::start(Reply::stream_reasoned(&[], &pieces, "stop", Duration::from_millis(50))).await;
    let app = spawn_module(&mock, |config| config.calls.max_thinking_ms = 300).await;
    let turn = ask(&mut client(&app, Transport::Http), "привет").await;
    for speech in turn.speeches() {
        assert!(!speech.contains("Thought") && !speech.contains('<'), "{:?}", turn.speeches());
    }
    assert_eq!(turn.speech(), apology());
    let whole = answers(&app, "req-1").await;
    assert_eq!(whole["status"], "failed");
    assert!(whole["error"].as_str().unwrap().contains("thinking"), "{whole}");

    // Words before the budget: the answer, however long it then takes.
    let quick =
        Reply::stream_reasoned(&["Хм."], &["Привет! ", "Чем могу ", "помочь?"], "stop", Duration::from_millis(20));
    let mock = MockLlm::start(quick).await;
    let app = spawn_module(&mock, |config| config.calls.max_thinking_ms = 2000).await;
    let turn = ask(&mut client(&app, Transport::Http), "привет").await;
    let cards = &turn.body().layout.as_ref().unwrap().cards;
    assert_eq!(cards[0].card, Some(t_card::Card::Text(WORDS.into())), "{:?}", turn.speeches());
}
