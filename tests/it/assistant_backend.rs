//! The OpenAI-compatible backend on the wire, against the mock model: the
//! first-token timeout only for streams, a connection dropped mid-answer
//! retried while nothing was delivered, the breaker counting calls,
//! `extra_body` sent in the order it was written, an answer or error body
//! past its bound, and a model server that never accepts the connection.

use std::time::Duration;

use megamind_tools::client::Turn;

use crate::{
    assistant_harness::{Harness, apology, ask, client, metrics_text, spawn},
    helpers::{LoggedServer, Transport, binary},
    metrics::sample,
    mock_llm::{MockLlm, Reply},
};

#[tokio::test]
async fn without_a_stream_the_first_token_timeout_does_not_cut_a_slow_answer() {
    let mock = MockLlm::start(Reply::content_after(Duration::from_millis(900), "Готово.")).await;
    let h = spawn(&mock, |c| {
        c.backend.stream = false;
        c.backend.first_token_timeout_ms = 200;
    })
    .await;
    let turn = ask(&mut client(&h.app, Transport::Http), "сделай").await;
    assert_eq!(turn.speech(), "Готово.", "{:?}", turn.speeches());
    assert_eq!(mock.calls(), 1);

    // With a stream, the same wait for the first token is a timeout.
    let mock = MockLlm::start(Reply::content_after(Duration::from_millis(900), "Готово.")).await;
    let h = spawn(&mock, |c| {
        c.backend.stream = true;
        c.backend.first_token_timeout_ms = 200;
    })
    .await;
    assert_eq!(ask(&mut client(&h.app, Transport::Http), "сделай").await.speech(), apology());
    let text = metrics_text(&h.metrics);
    assert!(text.contains(r#"megamind_assistant_model_calls_total{backend="openai",outcome="timeout"} 1"#), "{text}");
}

#[tokio::test]
async fn a_connection_dropped_mid_answer_is_a_connection_failure_and_is_retried() {
    let mock = MockLlm::start(Reply::content("Со второй попытки.")).await;
    mock.push(Reply::dropped_mid_answer());
    let h = spawn(&mock, |c| c.backend.retry_backoff_ms = 10).await;
    let turn = ask(&mut client(&h.app, Transport::Http), "вопрос").await;
    assert_eq!(turn.speech(), "Со второй попытки.");
    assert_eq!(mock.calls(), 2, "retried once");
    let text = metrics_text(&h.metrics);
    assert!(text.contains("megamind_assistant_model_retries_total 1"), "{text}");
    let bad = sample(&text, r#"megamind_assistant_model_calls_total{backend="openai",outcome="bad_response"}"#);
    assert_eq!(bad, Some(0.0), "{text}");
}

/// One question to an assistant whose model streams, retried 10 ms apart:
/// its first call answered `first`, every other `then`.
async fn asked_streaming(then: Reply, first: Reply) -> (MockLlm, Harness, Turn) {
    let mock = MockLlm::start(then).await;
    mock.push(first);
    let h = spawn(&mock, |c| {
        c.backend.stream = true;
        c.backend.retry_backoff_ms = 10;
    })
    .await;
    let turn = ask(&mut client(&h.app, Transport::Http), "вопрос").await;
    (mock, h, turn)
}

#[tokio::test]
async fn a_stream_dropped_after_a_token_is_not_retried() {
    let (mock, h, turn) =
        asked_streaming(Reply::content("не должно понадобиться"), Reply::dropped_mid_stream("Начало ответа")).await;
    assert_eq!(turn.speech(), apology(), "a retry would repeat what was delivered");
    assert_eq!(mock.calls(), 1);
    let text = metrics_text(&h.metrics);
    assert!(text.contains(r#"megamind_assistant_model_calls_total{backend="openai",outcome="connect"} 1"#), "{text}");
}

/// A stream broken off after its `finish_reason` gave its whole answer:
/// spoken, not the apology, and not asked for again.
#[tokio::test]
async fn a_stream_broken_off_after_its_finish_gives_its_answer() {
    let first = Reply::dropped_after_finish("Готово, всё сделано.");
    let (mock, h, turn) = asked_streaming(Reply::content("не должно понадобиться"), first).await;
    assert_eq!(turn.speech(), "Готово, всё сделано.");
    assert_eq!(mock.calls(), 1);
    let text = metrics_text(&h.metrics);
    assert!(text.contains(r#"megamind_assistant_model_calls_total{backend="openai",outcome="ok"} 1"#), "{text}");
}

/// A stream whose connection closes mid-answer, without a length to say
/// so, ends cleanly to its reader: without a `finish_reason` or `[DONE]`
/// it is a broken connection, not an answer whose last word was cut.
#[tokio::test]
async fn a_stream_closed_before_the_model_finished_is_a_broken_one() {
    let first = Reply::closed_mid_stream("Первое предложение. Второе пред");
    let (mock, h, turn) = asked_streaming(Reply::content("не должно понадобиться"), first).await;
    assert!(!turn.speech().contains("Второе пред"), "a cut word is never spoken: {}", turn.speech());
    assert_eq!(mock.calls(), 1, "what was delivered is not asked for again");
    let text = metrics_text(&h.metrics);
    assert!(text.contains(r#"megamind_assistant_model_calls_total{backend="openai",outcome="connect"} 1"#), "{text}");
}

/// A server that sends its `finish_reason` and then keeps the stream open
/// without `[DONE]` has given its whole answer: it is read a second past
/// the finish, not to the call's timeout (which once threw the answer away).
#[tokio::test]
async fn a_stream_kept_open_after_its_finish_gives_its_answer() {
    let Reply::Sse { mut chunks } = Reply::stream(&["Готово."], Duration::ZERO) else { unreachable!("a stream") };
    let finish = serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
    *chunks.last_mut().unwrap() = (Duration::ZERO, crate::mock_llm::sse_event(&finish));
    // Then nothing for a minute, the stream still open.
    chunks.push((Duration::from_secs(60), b": still here\n\n".to_vec()));
    let mock = MockLlm::start(Reply::Sse { chunks }).await;
    let h = spawn(&mock, |c| {
        c.backend.stream = true;
        c.calls.call_timeout_ms = 10_000;
    })
    .await;
    let turn = ask(&mut client(&h.app, Transport::Http), "вопрос").await;
    assert_eq!(turn.speech(), "Готово.");
    let text = metrics_text(&h.metrics);
    assert!(text.contains(r#"megamind_assistant_model_calls_total{backend="openai",outcome="ok"} 1"#), "{text}");
}

/// An overload the model server reports inside a stream, before any token
/// (`data: {"error": {"code": 503}}`), is retried as the same status would
/// be: nothing was delivered yet.
#[tokio::test]
async fn an_overload_reported_inside_a_stream_is_retried() {
    let overloaded = serde_json::json!({"error": {"message": "the engine is overloaded", "code": 503}});
    let first = Reply::Sse { chunks: vec![(Duration::ZERO, crate::mock_llm::sse_event(&overloaded))] };
    let (mock, h, turn) = asked_streaming(Reply::stream(&["Готово."], Duration::ZERO), first).await;
    assert_eq!(turn.speech(), "Готово.");
    assert_eq!(mock.calls(), 2, "asked again once");
    assert!(metrics_text(&h.metrics).contains("megamind_assistant_model_retries_total 1"));
}

/// An assistant whose model is a port nothing listens on (every attempt
/// refused at once), tried three times a call, its breaker opening after
/// `failures` failed calls for `cooldown_ms`. The mock is kept alive.
async fn spawn_refused(failures: u32, cooldown_ms: u64) -> (MockLlm, Harness) {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mock = MockLlm::start(Reply::content("unused")).await;
    let h = spawn(&mock, |c| {
        c.backend.base_url = format!("http://{closed}/v1");
        c.backend.breaker_failures = failures;
        c.backend.breaker_cooldown_ms = cooldown_ms;
        c.backend.max_retries = 2;
        c.backend.retry_backoff_ms = 1;
        c.backend.warmup = megamind_assistant::config::Warmup::Off;
    })
    .await;
    (mock, h)
}

#[tokio::test]
async fn the_breaker_counts_failed_calls_not_attempts() {
    let (_mock, h) =
        spawn_refused(2, megamind_assistant::config::AssistantConfig::default().backend.breaker_cooldown_ms).await;
    let mut client = client(&h.app, Transport::Http);
    assert_eq!(ask(&mut client, "раз").await.speech(), apology());
    let text = metrics_text(&h.metrics);
    assert!(text.contains("megamind_assistant_model_retries_total 2"), "three attempts: {text}");
    assert!(text.contains("megamind_assistant_breaker_state 0"), "one failed call, still closed: {text}");

    assert_eq!(ask(&mut client, "два").await.speech(), apology());
    assert!(metrics_text(&h.metrics).contains("megamind_assistant_breaker_state 2"), "open after two calls");
    assert_eq!(ask(&mut client, "три").await.speech(), apology());
    let text = metrics_text(&h.metrics);
    assert!(text.contains(r#"megamind_assistant_model_calls_total{backend="openai",outcome="connect"} 2"#), "{text}");
    assert!(text.contains(r#"outcome="circuit_open"} 1"#), "the third fails fast: {text}");
    assert!(text.contains("megamind_assistant_model_retries_total 4"), "and makes no attempt: {text}");
}

/// The one call a half-open breaker lets through, failing, is held back
/// from its retry: it ends with its own failure, counted as such, and
/// opens the breaker again (it once ended as `circuit_open` and left the
/// breaker half-open).
#[tokio::test]
async fn a_failed_probe_counts_as_its_failure_and_opens_the_breaker_again() {
    let (_mock, h) = spawn_refused(1, 300).await;
    let mut client = client(&h.app, Transport::Http);
    assert_eq!(ask(&mut client, "раз").await.speech(), apology());
    assert!(metrics_text(&h.metrics).contains("megamind_assistant_breaker_state 2"), "open after one call");
    // Time itself is under test: the cooldown runs out, and the next call is the probe.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let text = metrics_text(&h.metrics);
    assert!(text.contains("megamind_assistant_breaker_state 1"), "half-open, with no call since: {text}");

    assert_eq!(ask(&mut client, "два").await.speech(), apology());
    let text = metrics_text(&h.metrics);
    assert!(text.contains(r#"megamind_assistant_model_calls_total{backend="openai",outcome="connect"} 2"#), "{text}");
    assert!(text.contains(r#"outcome="circuit_open"} 0"#), "the probe failed on its own: {text}");
    assert!(text.contains("megamind_assistant_breaker_state 2"), "open again: {text}");
}

#[tokio::test]
async fn extra_body_keeps_the_order_it_was_written_in() {
    let mock = MockLlm::start(Reply::content("Ок.")).await;
    let table: toml::Table = r#"
        [response_format]
        type = "json_object"
        [response_format.schema]
        type = "object"
        required = ["text"]
        [response_format.schema.properties.text]
        type = "string"
        [response_format.schema.properties.command]
        type = "string"
        [response_format.schema.properties.session_id]
        type = "string"
        [response_format.schema.properties.args]
        type = "object"
    "#
    .parse()
    .unwrap();
    let extra: serde_json::Map<String, serde_json::Value> = table.try_into().unwrap();
    let h = spawn(&mock, |c| c.backend.extra_body = extra).await;
    ask(&mut client(&h.app, Transport::Http), "привет").await;
    let sent = serde_json::to_string(&mock.received()[0].body["response_format"]["schema"]["properties"]).unwrap();
    let at = |key: &str| sent.find(&format!("\"{key}\"")).unwrap_or_else(|| panic!("{key} in {sent}"));
    assert!(at("text") < at("command") && at("command") < at("session_id") && at("session_id") < at("args"), "{sent}");
}

#[tokio::test]
async fn a_local_model_server_is_warmed_up_with_the_system_prompt_before_any_turn() {
    use megamind_assistant::config::Warmup;
    let mock = MockLlm::start(Reply::content("Ок.")).await;
    let h = spawn(&mock, |c| c.backend.warmup = Warmup::Auto).await;
    mock.wait_for_calls(1).await;
    let warmup = &mock.received()[0].body;
    assert_eq!((warmup["max_tokens"].as_u64(), warmup["stream"].as_bool()), (Some(1), Some(false)), "{warmup}");
    assert_eq!(warmup["messages"][0]["role"], "system");
    let warm_prompt = warmup["messages"][0]["content"].as_str().unwrap().to_owned();
    // The mock counts its answer written; the server counts it read.
    let warmed = r#"megamind_assistant_warmups_total{outcome="ok"} 1"#;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !metrics_text(&h.metrics).contains(warmed) {
        assert!(std::time::Instant::now() < deadline, "{}", metrics_text(&h.metrics));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    ask(&mut client(&h.app, Transport::Http), "привет").await;
    assert_eq!(mock.calls(), 2, "the warm-up, then the turn");
    let turn_prompt = mock.received()[1].body["messages"][0]["content"].as_str().unwrap().to_owned();
    let common = warm_prompt.bytes().zip(turn_prompt.bytes()).take_while(|(a, b)| a == b).count();
    assert!(common > turn_prompt.len() / 2, "the cached prefix covers the prompt's static text: {common} bytes");
    assert_eq!(mock.received()[1].body["max_tokens"], 512);

    let quiet = MockLlm::start(Reply::content("Ок.")).await;
    let h = spawn(&quiet, |c| c.backend.warmup = Warmup::Off).await;
    ask(&mut client(&h.app, Transport::Http), "привет").await;
    assert_eq!(quiet.calls(), 1, "no warm-up when it is off");
}

#[tokio::test]
async fn the_warm_up_leaves_out_the_stream_options_a_streamed_call_is_sent_with() {
    use megamind_assistant::config::Warmup;
    let mock = MockLlm::start(Reply::content("Ок.")).await;
    let h = spawn(&mock, |c| {
        c.backend.warmup = Warmup::Auto;
        c.backend.extra_body.insert("stream_options".into(), serde_json::json!({"include_usage": true}));
    })
    .await;
    mock.wait_for_calls(1).await;
    let warmup = &mock.received()[0].body;
    assert!(warmup.get("stream_options").is_none() && warmup["stream"] == false, "{warmup}");
    ask(&mut client(&h.app, Transport::Http), "привет").await;
    assert_eq!(mock.received()[1].body["stream_options"]["include_usage"], true, "the turn's call keeps it");
}

#[tokio::test]
async fn the_served_binary_warms_a_local_model_server_up_before_its_runtime_serves() {
    // `serve` builds the scenarios before its runtime starts: the warm-up
    // must not depend on one being there.
    let mock = MockLlm::start(Reply::content("Ок.")).await;
    let mut child = binary()
        .args(["serve", "--addr", "127.0.0.1:0", "--llm-base-url", &mock.base_url()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the binary starts");
    // Found among whatever reaches the port: a server of another test may
    // still be calling a mock that had it before.
    let warm_up = async {
        let mut calls = 0;
        loop {
            calls += 1;
            mock.wait_for_calls(calls).await;
            let received = mock.received();
            if let Some(warm_up) = received.into_iter().map(|r| r.body).find(|body| body["max_tokens"] == 1) {
                return warm_up;
            }
        }
    };
    let warmed = tokio::time::timeout(Duration::from_secs(30), warm_up).await;
    let _ = child.kill();
    let _ = child.wait();
    let body = warmed.expect("a warm-up request (max_tokens 1) reached the model server");
    assert_eq!(body["messages"][0]["role"], "system", "{body}");
}

#[tokio::test]
async fn a_model_answer_over_the_bound_is_a_bad_response_whole_or_streamed() {
    // 2 MiB of answer, twice the bound: the call fails, and no part of it is spoken.
    let long = "ы".repeat(1 << 20);
    let mock = MockLlm::start(Reply::content(&long)).await;
    let h = spawn(&mock, |c| c.backend.stream = false).await;
    assert_eq!(ask(&mut client(&h.app, Transport::Http), "расскажи").await.speech(), apology());
    let text = metrics_text(&h.metrics);
    let bad = r#"megamind_assistant_model_calls_total{backend="openai",outcome="bad_response"} 1"#;
    assert!(text.contains(bad), "whole: {text}");

    // The same, a kilobyte an event: cut off once the text collected passes the bound.
    let piece = "ы".repeat(512);
    let mock = MockLlm::start(Reply::stream(&vec![piece.as_str(); 2_048], Duration::ZERO)).await;
    let h = spawn(&mock, |c| c.backend.stream = true).await;
    let turn = ask(&mut client(&h.app, Transport::Http), "расскажи").await;
    assert!(turn.speech().len() < 1 << 20, "spoken: {} bytes", turn.speech().len());
    let text = metrics_text(&h.metrics);
    assert!(text.contains(bad), "streamed: {text}");

    // A model that thinks past the bound before it says a word: held to
    // it alike, not left to think until the call's timeout.
    let reasoning = vec![piece.as_str(); 2_048];
    let mock = MockLlm::start(Reply::stream_reasoned(&reasoning, &["Ответ."], "stop", Duration::ZERO)).await;
    let h = spawn(&mock, |c| c.backend.stream = true).await;
    assert_eq!(ask(&mut client(&h.app, Transport::Http), "расскажи").await.speech(), apology());
    let text = metrics_text(&h.metrics);
    assert!(text.contains(bad), "reasoning: {text}");
}

#[tokio::test]
async fn a_model_servers_error_body_reaches_the_log_cut_to_its_bound() {
    // A megabyte of error body, a mark at its start: the log quotes the
    // start, and not the megabyte.
    let body = format!("mark-of-the-body {}", "z".repeat(1 << 20));
    let mock = MockLlm::start(Reply::Json { delay: Duration::ZERO, status: 400, body }).await;
    let url = mock.base_url();
    let server = LoggedServer::start(&["--llm-base-url", &url, "--llm-warmup", "off"], &[]);
    assert_eq!(ask(&mut client(&server.app, Transport::Http), "вопрос").await.speech(), apology());
    let log = server.stop();
    let quoted: Vec<&str> = log.lines().filter(|line| line.contains("mark-of-the-body")).collect();
    assert!(!quoted.is_empty(), "the error body is quoted:\n{log:.2000}");
    for line in quoted {
        let run = line.split(|c| c != 'z').map(str::len).max().unwrap_or(0);
        assert!(run <= 300 && line.len() < 4_096, "a line of {} bytes, {run} of the body:\n{line:.500}", line.len());
    }
}

#[tokio::test]
async fn a_model_server_that_never_accepts_is_given_up_at_the_connect_timeout() {
    // A listener whose queue is full: the kernel drops further SYNs, and a
    // connect neither succeeds nor fails until the client gives up.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut queued = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_millis(300), tokio::net::TcpStream::connect(addr)).await {
            Ok(stream) => queued.push(stream.expect("queued")),
            Err(_) => break,
        }
        assert!(queued.len() < 64, "the listener's queue never fills");
    }
    // The harness's model: its address is replaced by the full listener's.
    let mock = MockLlm::start(Reply::content("не дойдёт")).await;
    let started = std::time::Instant::now();
    let h = spawn(&mock, |c| {
        c.backend.base_url = format!("http://{addr}/v1");
        c.backend.connect_timeout_ms = 200;
        c.backend.first_token_timeout_ms = 30_000;
        c.backend.max_retries = 0;
        c.calls.call_timeout_ms = 30_000;
    })
    .await;
    assert_eq!(ask(&mut client(&h.app, Transport::Http), "вопрос").await.speech(), apology());
    // Given up at its connect timeout (a timeout, in the metrics), not at the call's 30 s.
    let given_up = r#"megamind_assistant_model_calls_total{backend="openai",outcome="timeout"} 1"#;
    while !metrics_text(&h.metrics).contains(given_up) {
        assert!(started.elapsed() < Duration::from_secs(10), "{}", metrics_text(&h.metrics));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let text = metrics_text(&h.metrics);
    assert!(text.contains(r#"megamind_assistant_model_call_seconds_bucket{backend="openai",le="0.5"} 1"#), "{text}");
    drop((listener, queued));
}
