//! Bad input gets the documented answer and never hurts the server.

use std::sync::Arc;

use megamind_core::{
    codec::Format,
    config::Config,
    proto::n_alice::n_scenarios::{
        TScenarioApplyRequest, TScenarioCommitResponse, TScenarioRunRequest, TScenarioRunResponse,
        t_scenario_commit_response, t_scenario_run_response,
    },
    scenario::Registry,
};
use megamind_scenario::scenarios::demo::Demo;
use tokio::sync::Semaphore;

use crate::{
    helpers::{TestApp, decode_answer, fixture_body, refused_series, registry_of, spawn_app, spawn_demo},
    scenarios::{Counting, Panicking},
};

/// Posts `body` as `media` to `/demo/run`; expects 200 with `Error{Type}` and returns its message.
async fn run_error(app: &TestApp, media: &str, body: Vec<u8>, want_type: &str) -> String {
    let answer = app.post("/demo/run", media, Some("application/protobuf"), body).await;
    assert_eq!(answer.status(), 200, "{media}");
    let answer: TScenarioRunResponse = decode_answer(&answer.bytes().await.unwrap(), Format::Binary);
    match answer.response {
        Some(t_scenario_run_response::Response::Error(error)) => {
            assert_eq!(error.r#type, want_type, "{}", error.message);
            assert!(!answer.version.is_empty(), "errors carry Version");
            error.message
        }
        other => panic!("expected an Error, got {other:?}"),
    }
}

#[tokio::test]
async fn undecodable_bodies_are_200_with_a_bad_request_error() {
    let (app, _) = spawn_demo().await;
    let valid = fixture_body::<TScenarioRunRequest>("poi_run_request", Format::Binary);

    let message = run_error(&app, "application/protobuf", b"\xff\xff\xff\xff garbage".to_vec(), "bad_request").await;
    assert!(message.contains("invalid binary protobuf"), "{message}");
    let truncated = valid[..valid.len() / 2].to_vec();
    run_error(&app, "application/protobuf", truncated, "bad_request").await;
    // A string field holding bytes that are not UTF-8.
    run_error(&app, "application/protobuf", vec![0x0a, 0x03, 0x0a, 0x01, 0xff], "bad_request").await;

    let message = run_error(&app, "application/json", b"{\"BaseRequest\": ".to_vec(), "bad_request").await;
    assert!(message.contains("invalid JSON"), "{message}");
    let message =
        run_error(&app, "application/json", br#"{"BaseRequest": {"RequestId": 5}}"#.to_vec(), "bad_request").await;
    assert!(message.contains("RequestId") || message.contains("string"), "wrong type is named: {message}");
    run_error(&app, "application/json", br#"{"NoSuchField": 1}"#.to_vec(), "bad_request").await;
    run_error(&app, "application/json", b"{\"BaseRequest\": {\"RequestId\": \"\xff\"}}".to_vec(), "bad_request").await;

    let message = run_error(&app, "text/protobuf", b"BaseRequest { RequestId: ".to_vec(), "bad_request").await;
    assert!(message.contains("invalid text format"), "{message}");
    run_error(&app, "text/protobuf", b"BaseRequest { ServerTimeMs: \"soon\" }".to_vec(), "bad_request").await;
    let message =
        run_error(&app, "text/protobuf", b"BaseRequest { RequestId: \"\xff\" }".to_vec(), "bad_request").await;
    assert!(message.contains("UTF-8"), "{message}");
}

#[tokio::test]
async fn a_missing_request_id_is_a_bad_request() {
    let (app, _) = spawn_demo().await;
    let message = run_error(&app, "application/protobuf", Vec::new(), "bad_request").await;
    assert!(message.contains("RequestId"), "{message}");
    run_error(&app, "text/protobuf", b"Input { Text { Utterance: \"hi\" } }".to_vec(), "bad_request").await;
}

#[tokio::test]
async fn routing_problems_get_their_status_codes() {
    let (app, _) = spawn_demo().await;
    let body = fixture_body::<TScenarioRunRequest>("poi_run_request", Format::Binary);
    for path in ["/nope/run", "/demo/launch", "/demo/run/extra", "/", "/launch"] {
        let answer = app.post(path, "application/protobuf", None, body.clone()).await;
        assert_eq!(answer.status(), 404, "{path}");
        assert!(answer.text().await.unwrap().contains("demo"), "404 lists the scenarios");
    }
    let answer = app.http.get(app.url("/demo/run")).send().await.unwrap();
    assert_eq!(answer.status(), 405);
    assert_eq!(answer.headers()["allow"], "POST");
    let answer = app.post("/demo/run", "image/png", None, body.clone()).await;
    assert_eq!(answer.status(), 415);
    assert!(answer.text().await.unwrap().contains("application/protobuf"));
    // Refused before the scenario, and still a call of it in the metrics.
    app.metrics_line(&refused_series("http", "unsupported_media_type", 1)).await;
    // A client's own words are quoted back shortened, not whole.
    let answer = app.post("/demo/run", &format!("image/{}", "x".repeat(8000)), None, body.clone()).await;
    assert_eq!(answer.status(), 415);
    let text = answer.text().await.unwrap();
    assert!(text.contains("\"image/xxx") && text.len() < 512, "{} bytes: {text}", text.len());
    let answer = app.post(&format!("/{}/run", "y".repeat(4000)), "application/protobuf", None, body.clone()).await;
    assert_eq!(answer.status(), 404);
    let text = answer.text().await.unwrap();
    assert!(text.starts_with("no such scenario handler: /yyy") && text.len() < 512, "{} bytes: {text}", text.len());
}

#[tokio::test]
async fn oversized_bodies_get_413_declared_or_streamed() {
    let registry = registry_of("demo", Arc::new(Demo::new()));
    let config = Config { body_limit: 1024, ..Config::default() };
    let app = spawn_app(config, registry).await;
    let answer = app.post("/demo/run", "application/protobuf", None, vec![0u8; 4096]).await;
    assert_eq!(answer.status(), 413);
    // Chunked, no Content-Length: the limit applies while reading.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = (0..8).map(|_| Ok(vec![0u8; 512])).collect();
    let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
    let answer = app
        .http
        .post(app.url("/demo/run"))
        .header("content-type", "application/protobuf")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 413);
    app.metrics_line(&refused_series("http", "body_too_large", 2)).await;
    // Just under the limit is served.
    let valid = fixture_body::<TScenarioRunRequest>("poi_run_request", Format::Binary);
    assert!(valid.len() < 1024);
    assert_eq!(app.post_binary("/demo/run", valid).await.0, 200);
}

#[tokio::test]
async fn a_panicking_scenario_is_an_internal_error_and_the_server_lives_on() {
    let mut registry = Registry::new();
    registry.register("panicking", Arc::new(Panicking)).unwrap();
    registry.register("demo", Arc::new(Demo::new())).unwrap();
    let app = spawn_app(Config::default(), registry).await;
    let body = fixture_body::<TScenarioRunRequest>("poi_run_request", Format::Binary);
    for _ in 0..3 {
        let (status, answer) = app.post_binary("/panicking/run", body.clone()).await;
        assert_eq!(status, 200);
        let answer: TScenarioRunResponse = decode_answer(&answer, Format::Binary);
        let Some(t_scenario_run_response::Response::Error(error)) = answer.response else { panic!("{answer:?}") };
        assert_eq!(error.r#type, "internal");
        assert!(error.message.contains("scenario bug on purpose"));
    }
    let (status, _) = app.post_binary("/demo/run", body).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn scenario_errors_and_missing_handlers_are_protocol_errors() {
    let mut registry = Registry::new();
    registry.register("panicking", Arc::new(Panicking)).unwrap();
    registry.register("demo", Arc::new(Demo::new())).unwrap();
    let app = spawn_app(Config::default(), registry).await;
    let body = fixture_body::<TScenarioApplyRequest>("video_commit_request", Format::Binary);
    let (_, answer) = app.post_binary("/panicking/commit", body.clone()).await;
    let answer: TScenarioCommitResponse = decode_answer(&answer, Format::Binary);
    assert!(
        matches!(answer.response, Some(t_scenario_commit_response::Response::Error(ref e)) if e.r#type == "upstream")
    );
    // Panicking implements no /apply.
    let (status, answer) = app.post_binary("/panicking/apply", body.clone()).await;
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&answer).contains("unsupported"));
    // Demo's /continue wants its own arguments.
    let (_, answer) = app.post_binary("/demo/continue", body).await;
    assert!(String::from_utf8_lossy(&answer).contains("bad_request"));
}

#[tokio::test]
async fn under_overload_run_gets_429_while_commit_keeps_priority() {
    let gate = Arc::new(Semaphore::new(0));
    let counting = Arc::new(Counting::gated(gate.clone()));
    let registry = registry_of("counting", counting.clone());
    let config = Config { max_in_flight: 1, priority_reserve: 1, ..Config::default() };
    let app = Arc::new(spawn_app(config, registry).await);

    let entered = counting.entered.notified();
    let held = tokio::spawn({
        let app = app.clone();
        async move {
            app.post_binary("/counting/run", fixture_body::<TScenarioRunRequest>("poi_run_request", Format::Binary))
                .await
        }
    });
    entered.await;
    let (status, _) = app
        .post_binary("/counting/run", fixture_body::<TScenarioRunRequest>("music_run_request", Format::Binary))
        .await;
    assert_eq!(status, 429, "/run is refused at the limit");

    let entered = counting.entered.notified();
    let commit = tokio::spawn({
        let app = app.clone();
        async move {
            app.post_binary(
                "/counting/commit",
                fixture_body::<TScenarioApplyRequest>("video_commit_request", Format::Binary),
            )
            .await
        }
    });
    entered.await;
    gate.add_permits(2);
    let (status, answer) = commit.await.unwrap();
    assert_eq!(status, 200, "/commit is admitted from the reserve");
    let answer: TScenarioCommitResponse = decode_answer(&answer, Format::Binary);
    assert!(matches!(answer.response, Some(t_scenario_commit_response::Response::Success(_))));
    assert_eq!(held.await.unwrap().0, 200);
}
