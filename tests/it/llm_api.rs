//! The `/llm` API over real sockets: the JSONSeq stream of a real
//! `/assistant/run` (live, late, resumed, failed, drained, capped), the
//! stream's address for screen clients, whole answers in parts, the schema,
//! and the warning about a key made at start where replicas share a store.

use std::time::Duration;

use futures_util::StreamExt;
use megamind_assistant::jsonseq::{Event, parse_transcript, validate};
use megamind_core::proto::n_alice::n_scenarios::{TInterfaces, t_directive};
use reqwest::StatusCode;
use serde_json::Value;

use crate::{
    assistant_harness::{SIGNING_KEY, answer, client, run, run_request, signed, spawn_module},
    helpers::{LoggedServer, TestApp, Transport},
    mock_llm::{MockLlm, Reply},
};

fn slow_answer() -> Reply {
    Reply::stream(&["Сейчас ", "ровно ", "полдень. ", "Хорошего ", "дня!"], Duration::from_millis(80))
}

/// The whole stream at `path`, with `headers`.
async fn read_stream(app: &TestApp, path: &str, headers: &[(&str, &str)]) -> (StatusCode, String) {
    let mut request = app.http.get(app.url(&signed(path)));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("the stream answers");
    let status = response.status();
    if status == StatusCode::OK {
        let kind = response.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(kind.starts_with("text/event-stream"), "{kind}");
    }
    if matches!(status, StatusCode::OK | StatusCode::NO_CONTENT) {
        // What a signed address opens is kept by no cache.
        assert_eq!(response.headers()["cache-control"], "no-store", "{status}");
    }
    (status, response.text().await.expect("the whole stream"))
}

/// The events of `transcript`, which must be valid JSONSeq.
pub(crate) fn valid(transcript: &str) -> Vec<Event> {
    let (events, _) = parse_transcript(transcript);
    let violations = validate(&events);
    assert!(violations.is_empty(), "{violations:#?}\n{transcript}");
    events
}

fn data(event: &Event) -> Value {
    serde_json::from_str(&event.data).expect("JSON data")
}

fn final_text(events: &[Event]) -> String {
    events.iter().filter(|e| e.name == "final_delta").map(|e| data(e)["text"].as_str().unwrap().to_owned()).collect()
}

fn names(events: &[Event]) -> Vec<&str> {
    events.iter().map(|e| e.name.as_str()).collect()
}

#[tokio::test]
async fn a_run_is_streamed_live_to_every_subscriber_and_resumes_after_any_event() {
    let mock = MockLlm::start(slow_answer()).await;
    let app = spawn_module(&mock, |_| {}).await;
    let client = client(&app, Transport::Http);
    run(&client, "llm-live", "который час?").await;
    let (status, live) = read_stream(&app, "/llm/stream/llm-live", &[]).await;
    assert_eq!(status, StatusCode::OK, "{live}");
    let events = valid(&live);
    assert_eq!(final_text(&events), "Сейчас ровно полдень. Хорошего дня!");
    assert_eq!(names(&events).last(), Some(&"completed"));
    for event in &events {
        assert_eq!(data(event)["request_id"], "llm-live");
    }
    assert_eq!(mock.calls(), 1, "the stream follows the call, never makes one");

    let (_, late) = read_stream(&app, "/llm/stream/llm-live", &[]).await;
    assert_eq!(parse_transcript(&late).0, events, "a late subscriber reads the same events from the first");
    let (_, resumed) = read_stream(&app, "/llm/stream/llm-live", &[("last-event-id", "3")]).await;
    assert_eq!(parse_transcript(&resumed).0, events[3..], "Last-Event-ID resumes after that event");
    let (_, resumed) = read_stream(&app, "/llm/stream/llm-live?after=5", &[]).await;
    assert_eq!(parse_transcript(&resumed).0, events[5..], "so does ?after=");
    let last = events.len().to_string();
    let (status, body) = read_stream(&app, "/llm/stream/llm-live", &[("last-event-id", &last)]).await;
    assert_eq!((status, body.as_str()), (StatusCode::NO_CONTENT, ""), "nothing after the last event: stop");
    let past = (events.len() + 7).to_string();
    let (status, body) = read_stream(&app, "/llm/stream/llm-live", &[("last-event-id", &past)]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "an event the call never had is another run's: {body}");
    assert!(body.contains(&format!("last event is {last}")) && body.contains("without Last-Event-ID"), "{body}");
    let (status, body) = read_stream(&app, "/llm/stream/llm-live", &[("last-event-id", "soon")]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(mock.calls(), 1);
}

#[tokio::test]
async fn a_subscriber_sees_events_before_the_call_ends() {
    let pieces = ["Раз. "; 30];
    let mock = MockLlm::start(Reply::stream(&pieces, Duration::from_millis(50))).await;
    let app = spawn_module(&mock, |_| {}).await;
    run(&client(&app, Transport::Http), "llm-early", "считай").await;
    let response = app.http.get(app.url(&signed("/llm/stream/llm-early"))).send().await.unwrap();
    let mut body = response.bytes_stream();
    let mut seen = String::new();
    while !seen.contains("event: final_delta") {
        seen.push_str(std::str::from_utf8(&body.next().await.expect("more events").unwrap()).unwrap());
    }
    assert!(!seen.contains("event: final_end"), "the first words arrive while the model still speaks:\n{seen}");
}

#[tokio::test]
async fn unknown_and_expired_calls_are_told_apart_in_json() {
    let mock = MockLlm::start(Reply::content("Привет!")).await;
    let app = spawn_module(&mock, |config| config.calls.max_retained = 1).await;
    let (status, body) = read_stream(&app, "/llm/stream/never-asked", &[]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["error"]["code"], "not_found");

    let client = client(&app, Transport::Http);
    run(&client, "llm-old", "привет").await;
    run(&client, "llm-new", "привет ещё раз").await;
    // max_retained = 1: the newer call's record evicts the older one's as
    // its task ends, just after its answer.
    let gone = async {
        loop {
            let (status, body) = read_stream(&app, "/llm/stream/llm-old", &[]).await;
            if status != StatusCode::OK {
                return (status, body);
            }
        }
    };
    let (status, body) = tokio::time::timeout(Duration::from_secs(5), gone).await.expect("evicted");
    assert_eq!(status, StatusCode::GONE, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["error"]["code"], "gone");
    let (status, _) = read_stream(&app, "/llm/stream/llm-new", &[]).await;
    assert_eq!(status, StatusCode::OK);
    let response = app.http.get(app.url(&signed("/llm/answers/llm-old"))).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::GONE);
}

#[tokio::test]
async fn a_failed_model_call_ends_its_stream_with_error_then_completed() {
    let mock = MockLlm::start(Reply::status(500)).await;
    let app = spawn_module(&mock, |config| config.backend.max_retries = 0).await;
    run(&client(&app, Transport::Http), "llm-fail", "привет").await;
    let (status, body) = read_stream(&app, "/llm/stream/llm-fail", &[]).await;
    assert_eq!(status, StatusCode::OK);
    let events = valid(&body);
    assert_eq!(names(&events)[names(&events).len() - 2..], ["error", "completed"]);
    assert_eq!(data(&events[events.len() - 2])["code"], "model_failed");
}

/// A model server's error body may quote the request's credentials: the
/// screens following the call are told the status alone.
#[tokio::test]
async fn a_failed_model_calls_own_words_never_reach_the_screens() {
    let mock = MockLlm::start(Reply::status(401)).await;
    let app = spawn_module(&mock, |config| {
        config.backend.max_retries = 0;
        config.backend.api_key = "sk-secret-222".into();
    })
    .await;
    run(&client(&app, Transport::Http), "llm-denied", "привет").await;
    let (_, stream) = read_stream(&app, "/llm/stream/llm-denied", &[]).await;
    let events = valid(&stream);
    assert_eq!(data(&events[events.len() - 2])["message"], "the model answered HTTP 401", "{stream}");
    let answer = app.http.get(app.url(&signed("/llm/answers/llm-denied"))).send().await.unwrap();
    let answer = answer.text().await.unwrap();
    assert!(answer.contains("the model answered HTTP 401"), "{answer}");
    for text in [&stream, &answer] {
        assert!(!text.contains("mock status") && !text.contains(&mock.base_url()), "{text}");
    }
}

#[tokio::test]
async fn a_draining_server_ends_open_streams_with_an_error_event() {
    let mock = MockLlm::start(Reply::Hang).await;
    let mut app = spawn_module(&mock, |_| {}).await;
    run(&client(&app, Transport::Http), "llm-drain", "привет").await;
    let response = app.http.get(app.url(&signed("/llm/stream/llm-drain"))).send().await.unwrap();
    let mut body = response.bytes_stream();
    let first = body.next().await.expect("the status event").unwrap();
    assert!(first.starts_with(b"id: 1\nevent: status\n"));
    app.begin_shutdown();
    let mut rest = Vec::new();
    while let Some(chunk) = body.next().await {
        rest.extend_from_slice(&chunk.expect("a clean end"));
    }
    let transcript = format!("{}{}", String::from_utf8_lossy(&first), String::from_utf8_lossy(&rest));
    let events = valid(&transcript);
    let last = events.last().unwrap();
    assert_eq!((last.name.as_str(), data(last)["code"].as_str()), ("error", Some("shutdown")), "{transcript}");
}

#[tokio::test]
async fn open_streams_are_capped() {
    let mock = MockLlm::start(Reply::Hang).await;
    let app = spawn_module(&mock, |config| {
        config.llm.max_streams = 1;
        // A heartbeat is what finds a subscriber gone.
        config.llm.heartbeat_secs = 1;
    })
    .await;
    run(&client(&app, Transport::Http), "llm-cap", "привет").await;
    let first = app.http.get(app.url(&signed("/llm/stream/llm-cap"))).send().await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let second = app.http.get(app.url(&signed("/llm/stream/llm-cap"))).send().await.unwrap();
    assert_eq!(second.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(second.headers()["retry-after"], "1");
    drop(first);
    // The first stream's slot comes back when its body goes.
    let text = app.metrics_line("megamind_assistant_streams_open 0").await;
    assert!(
        text.contains("megamind_assistant_llm_api_requests_total{outcome=\"refused\",route=\"stream\"} 1"),
        "{text}"
    );
    let third = app.http.get(app.url(&signed("/llm/stream/llm-cap"))).send().await.unwrap();
    assert_eq!(third.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_client_with_a_screen_is_given_the_stream_address_with_the_voice_answer() {
    let mock = MockLlm::start(Reply::content("Привет! Чем помочь?")).await;
    let app = spawn_module(&mock, |config| config.llm.public_url = "https://assistant.example.net".into()).await;
    let client = client(&app, Transport::Http);
    let mut request = run_request("llm-screen", "привет");
    let base = request.base_request.as_mut().unwrap();
    base.interfaces = Some(TInterfaces { has_screen: true, ..Default::default() });
    let hop = client.call(megamind_tools::client::Request::Run(request)).await.unwrap();
    let directives = &answer(&hop).layout.as_ref().unwrap().directives;
    let urls: Vec<_> = directives
        .iter()
        .filter_map(|d| match &d.directive {
            Some(t_directive::Directive::ShowStreamDirective(show)) => Some((show.name.as_str(), show.url.as_str())),
            _ => None,
        })
        .collect();
    let [(name, url)] = urls[..] else { panic!("one stream address: {urls:?}") };
    assert_eq!(name, "show_llm_stream");
    let (path, query) = url.split_once('?').expect("a signed address");
    assert_eq!(path, "https://assistant.example.net/llm/stream/llm-screen");
    let key = megamind_core::rules::auth::AddressKey::from_secret(SIGNING_KEY);
    assert_eq!(key.verify("llm-screen", Some(query), megamind_core::rules::auth::signed::unix_now()), Ok(()));

    let hop = run(&client, "llm-voice", "привет").await;
    let directives = &answer(&hop).layout.as_ref().unwrap().directives;
    assert!(directives.is_empty(), "a voice-only client gets no screen directive: {directives:?}");
}

#[tokio::test]
async fn a_calls_stream_and_answer_open_only_by_the_signed_address_it_was_given() {
    let mock = MockLlm::start(Reply::content("Привет! Чем помочь?")).await;
    let app = spawn_module(&mock, |_| {}).await;
    let client = client(&app, Transport::Http);
    let mut request = run_request("llm-signed", "привет");
    let base = request.base_request.as_mut().unwrap();
    base.interfaces = Some(TInterfaces { has_screen: true, ..Default::default() });
    let hop = client.call(megamind_tools::client::Request::Run(request)).await.unwrap();
    let given = answer(&hop)
        .layout
        .as_ref()
        .unwrap()
        .directives
        .iter()
        .find_map(|d| match &d.directive {
            Some(t_directive::Directive::ShowStreamDirective(show)) => Some(show.url.clone()),
            _ => None,
        })
        .expect("a stream address");
    let status = |path: String| {
        let app = &app;
        async move { app.http.get(app.url(&path)).send().await.unwrap().status() }
    };
    assert_eq!(status(given.clone()).await, StatusCode::OK, "{given}");
    assert_eq!(
        status(given.replace("/stream/", "/answers/")).await,
        StatusCode::OK,
        "the same signature opens the answer"
    );
    let (_, query) = given.split_once('?').unwrap();
    let other = run_request("llm-other", "привет");
    client.call(megamind_tools::client::Request::Run(other)).await.unwrap();
    let key = megamind_core::rules::auth::AddressKey::from_secret(SIGNING_KEY);
    let expired = key.sign("llm-signed", megamind_core::rules::auth::signed::unix_now() - 1);
    let flipped = format!("{}{}", &query[..query.len() - 1], if query.ends_with('0') { '1' } else { '0' });
    for (path, why) in [
        ("/llm/stream/llm-signed".to_owned(), "not signed"),
        ("/llm/answers/llm-signed".to_owned(), "not signed"),
        (format!("/llm/stream/llm-signed?{flipped}"), "not valid"),
        (format!("/llm/stream/llm-other?{query}"), "not valid"),
        (format!("/llm/answers/llm-other?{query}"), "not valid"),
        (format!("/llm/stream/llm-signed?{expired}"), "expired"),
        (format!("/llm/stream/never-asked?{query}"), "not valid"),
    ] {
        let response = app.http.get(app.url(&path)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "forbidden", "{path}");
        assert!(body["error"]["message"].as_str().unwrap().contains(why), "{path}: {body}");
    }
    assert_eq!(status("/llm/schema".into()).await, StatusCode::OK, "the schema is public");
    // A skill step's id (a RequestId of 256 bytes and the step's mark) is
    // looked up; a longer id than any call has is looked up nowhere, signed
    // or not: it is measured before its signature is checked.
    let step = format!("{}#skill-step-2", "s".repeat(256));
    let signed = key.sign(&step, megamind_core::rules::auth::signed::unix_now() + 60);
    let path = format!("/llm/answers/{}?{signed}", step.replace('#', "%23"));
    let response = app.http.get(app.url(&path)).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND, "looked up, and not there");
    let long = "l".repeat(513);
    let signed = key.sign(&long, megamind_core::rules::auth::signed::unix_now() + 60);
    for route in ["stream", "answers"] {
        for query in [signed.as_str(), query, ""] {
            let response = app.http.get(app.url(&format!("/llm/{route}/{long}?{query}"))).send().await.unwrap();
            assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{route}");
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["error"]["message"], "a call id is at most 512 bytes", "{route}");
        }
    }
}

#[tokio::test]
async fn a_whole_answer_is_served_in_parts_that_reassemble_exactly() {
    // Cyrillic and emoji, so that part boundaries fall inside characters.
    let long = "Жили-были 🐉 дед и баба. ".repeat(40);
    let mock = MockLlm::start(Reply::content(&long)).await;
    let app = spawn_module(&mock, |config| config.llm.chunk_bytes = 100).await;
    run(&client(&app, Transport::Http), "llm-parts", "расскажи сказку").await;

    let whole = megamind_assistant::parts::fetch_all(&app.http, &app.url(&signed("/llm/answers/llm-parts")))
        .await
        .expect("reassembled");
    assert_eq!(whole["request_id"], "llm-parts");
    assert_eq!(whole["status"], "completed");
    assert_eq!(whole["text"].as_str().unwrap(), long.trim());
    let events: Vec<Event> = whole["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| Event {
            name: e["event"].as_str().unwrap().into(),
            data: e["data"].to_string(),
            id: Some(e["id"].to_string()),
            cut: false,
        })
        .collect();
    let (_, streamed) = read_stream(&app, "/llm/stream/llm-parts", &[]).await;
    assert_eq!(events, parse_transcript(&streamed).0, "the answer's events are the stream's");

    let first: Value =
        app.http.get(app.url(&signed("/llm/answers/llm-parts"))).send().await.unwrap().json().await.unwrap();
    assert_eq!(first["is_consequential"], true);
    assert!(first["total_parts"].as_u64().unwrap() > 10);
    let past = signed(&format!("/llm/answers/llm-parts?part={}", first["total_parts"].as_u64().unwrap() + 1));
    let response = app.http.get(app.url(&past)).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::RANGE_NOT_SATISFIABLE);
    let response = app.http.get(app.url(&signed("/llm/answers/llm-parts?part=zero"))).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn the_schema_describes_every_endpoint_and_the_reassembly() {
    let mock = MockLlm::start(Reply::content("Привет!")).await;
    let app = spawn_module(&mock, |_| {}).await;
    let wrapper: Value = app.http.get(app.url("/llm/schema")).send().await.unwrap().json().await.unwrap();
    assert_eq!(wrapper["is_consequential"], false, "the schema fits one part by default");
    let schema = &wrapper["content"];
    let paths: Vec<_> = schema["endpoints"].as_array().unwrap().iter().map(|e| e["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["/llm/stream/{request_id}", "/llm/answers/{request_id}", "/llm/skills", "/llm/schema"]);
    for key in ["part", "answer", "skills", "error"] {
        assert!(schema["schemas"][key].is_object(), "{key}");
    }
    assert!(schema["chunking"].is_object());

    let small = spawn_module(&mock, |config| config.llm.chunk_bytes = 256).await;
    let mut whole = megamind_assistant::parts::fetch_all(&small.http, &small.url("/llm/schema")).await.unwrap();
    assert_eq!(whole["chunking"]["chunk_bytes"], 256, "the limit in force");
    whole["chunking"]["chunk_bytes"] = schema["chunking"]["chunk_bytes"].clone();
    assert_eq!(&whole, schema, "in parts, the same document");
}

/// A plain-loop client of answers in parts (docs/parts.md#reassembling-an-answer),
/// in Python with `requests`, reassembles our parts into what our own client
/// reads.
#[cfg(unix)]
#[tokio::test]
async fn the_reference_python_client_reassembles_our_parts() {
    use crate::python_tools::{self, run as run_command};
    let Some(tools) = python_tools::tools("the_reference_python_client_reassembles_our_parts").await else { return };
    let long = "«Колобок» 🍞 катился по дорожке. ".repeat(30);
    let mock = MockLlm::start(Reply::content(&long)).await;
    let app = spawn_module(&mock, |config| config.llm.chunk_bytes = 97).await;
    run(&client(&app, Transport::Http), "llm-python", "расскажи сказку").await;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/contract_fetch_all.py");
    for path in [signed("/llm/answers/llm-python"), "/llm/schema".to_owned()] {
        let url = app.url(&path);
        let ours = megamind_assistant::parts::fetch_all(&app.http, &url).await.expect("our client");
        let (python, script, target) = (tools.python.clone(), script.clone(), url.clone());
        let output = tokio::task::spawn_blocking(move || {
            run_command(std::process::Command::new(python).arg(script).arg(target).env("NO_PROXY", "*"))
        })
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{path}: {e}"));
        let theirs: Value = serde_json::from_slice(&output.stdout).expect("the script prints JSON");
        assert_eq!(theirs, ours, "{path}");
    }
    let first: Value =
        app.http.get(app.url(&signed("/llm/answers/llm-python"))).send().await.unwrap().json().await.unwrap();
    assert_eq!(first["is_consequential"], true, "the answer came in parts");
}

/// The keys of `value` and, for each key whose value is an object in both
/// `value` and `other` (or an array of objects), theirs, as dotted paths.
fn shape(value: &Value, other: &Value, path: &str, out: &mut Vec<String>) {
    let Some(object) = value.as_object() else { return };
    for (key, inner) in object {
        let at = format!("{path}{key}");
        out.push(at.clone());
        let theirs = &other[key];
        match (inner, theirs) {
            (Value::Object(_), Value::Object(_)) => shape(inner, theirs, &format!("{at}."), out),
            (Value::Array(mine), Value::Array(them)) if !mine.is_empty() && !them.is_empty() => {
                shape(&mine[0], &them[0], &format!("{at}[]."), out)
            }
            _ => {}
        }
    }
    out.sort();
}

#[tokio::test]
async fn a_whole_answer_has_the_shape_the_document_shows() {
    let doc = crate::docs::read("docs/llm-api.md");
    let section = doc.split("## Whole answers").nth(1).expect("the section");
    let example = crate::docs::blocks(section, "json")[0];
    let shown: Value = serde_json::from_str(example).unwrap_or_else(|e| panic!("the example parses: {e}\n{example}"));

    let mock = MockLlm::start(Reply::content("Жили-были дед и баба.")).await;
    let app = spawn_module(&mock, |_| {}).await;
    run(&client(&app, Transport::Http), "demo-1", "расскажи сказку").await;
    let answers = app.url(&signed("/llm/answers/demo-1"));
    let served: Value = app.http.get(answers).send().await.unwrap().json().await.unwrap();

    let (mut theirs, mut ours) = (Vec::new(), Vec::new());
    shape(&shown, &served, "", &mut theirs);
    shape(&served, &shown, "", &mut ours);
    assert_eq!(theirs, ours, "the document's example and the served answer have the same fields:\n{served:#}");
    assert!(ours.contains(&"content.text".to_owned()) && ours.contains(&"is_consequential".to_owned()), "{ours:?}");
    assert_eq!(served["content"]["text"], shown["content"]["text"]);
}

#[test]
fn a_key_made_at_start_is_warned_about_when_replicas_share_a_store() {
    // Nothing listens there: the server starts anyway, serving from memory.
    let store = ["--store-url", "redis://127.0.0.1:1"];
    let warning = "this key was made at start";
    let log = LoggedServer::start(&store, &[]).stop();
    let warned: Vec<&str> = log.lines().filter(|line| line.contains(warning)).collect();
    assert_eq!(warned.len(), 1, "{log}");
    assert!(warned[0].contains("WARN") && warned[0].contains("assistant.llm.signing_key"), "{}", warned[0]);
    let shared_key = LoggedServer::start(&store, &[("MEGAMIND_LLM_SIGNING_KEY", SIGNING_KEY)]).stop();
    assert!(!shared_key.contains(warning), "a key set is not warned about:\n{shared_key}");
    let alone = LoggedServer::start(&[], &[]).stop();
    assert!(!alone.contains(warning), "a lone replica's key is not warned about:\n{alone}");
}
