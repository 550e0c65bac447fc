//! `/metrics` after known traffic.

use megamind_core::{
    codec::Format,
    config::Config,
    proto::n_alice::n_scenarios::{TScenarioApplyRequest, TScenarioRunRequest},
};

use crate::helpers::{fixture_body, registry_of, spawn_app, spawn_builtin, spawn_demo};

/// The value of the sample line starting with `series` (labels in sorted order).
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(series).and_then(|rest| rest.trim().parse().ok()))
}

#[tokio::test]
async fn metrics_count_known_traffic() {
    let (app, _) = spawn_demo().await;
    let poi = fixture_body::<TScenarioRunRequest>("poi_run_request", Format::Binary);
    app.post_binary("/demo/run", poi.clone()).await;
    app.post_binary("/demo/run", poi).await;
    app.post_binary("/demo/run", b"garbage".to_vec()).await;
    app.post_binary("/demo/commit", fixture_body::<TScenarioApplyRequest>("video_commit_request", Format::Binary))
        .await;
    let (status, text) = app.get("/metrics").await;
    assert_eq!(status, 200);

    let run = r#"scenario="demo",transport="http"}"#;
    assert_eq!(
        sample(&text, &format!(r#"megamind_requests_total{{handler="run",outcome="ok",{run}"#)),
        Some(1.0),
        "{text}"
    );
    assert_eq!(sample(&text, &format!(r#"megamind_requests_total{{handler="run",outcome="replay",{run}"#)), Some(1.0));
    assert_eq!(
        sample(&text, &format!(r#"megamind_requests_total{{handler="run",outcome="bad_request",{run}"#)),
        Some(1.0)
    );
    assert_eq!(sample(&text, &format!(r#"megamind_requests_total{{handler="commit",outcome="ok",{run}"#)), Some(1.0));
    assert_eq!(
        sample(&text, r#"megamind_request_duration_seconds_count{handler="run",scenario="demo",transport="http"}"#),
        Some(3.0)
    );
    assert_eq!(sample(&text, "megamind_idempotency_hits_total"), Some(1.0));
    assert_eq!(sample(&text, "megamind_idempotency_misses_total"), Some(2.0));
    assert_eq!(sample(&text, "megamind_idempotency_entries"), Some(2.0));
    assert!(sample(&text, "megamind_idempotency_bytes").is_some_and(|b| b > 1000.0), "{text}");
    assert_eq!(sample(&text, "megamind_requests_in_flight"), Some(0.0));
    assert!(!text.contains("95EB38D6"), "no RequestId in labels");
}

#[tokio::test]
async fn scenario_metrics_render_beside_the_server_metrics() {
    let app = spawn_builtin(Config::default()).await;
    let text = "BaseRequest { RequestId: \"m-1\" ServerTimeMs: 1 }\nInput { Text { Utterance: \"открой Safari\" } }";
    let answer = app.post("/assistant/run", "text/protobuf", None, text.as_bytes().to_vec()).await;
    assert_eq!(answer.status(), 200);
    let (_, text) = app.get("/metrics").await;
    assert_eq!(sample(&text, "megamind_assistant_breaker_state"), Some(0.0), "{text}");
    assert!(
        text.contains(r#"megamind_requests_total{handler="run",outcome="ok",scenario="assistant",transport="http"} 1"#)
    );
}

#[tokio::test]
async fn evictions_are_counted_per_handler_and_commit_answers_apart() {
    let mut config = Config::default();
    config.cache.max_entries = 1;
    let demo = std::sync::Arc::new(megamind_scenario::scenarios::demo::Demo::new());
    let app = spawn_app(config, registry_of("demo", demo)).await;
    for name in ["poi_run_request", "music_run_request"] {
        app.post_binary("/demo/run", fixture_body::<TScenarioRunRequest>(name, Format::Binary)).await;
    }
    app.post_binary("/demo/commit", fixture_body::<TScenarioApplyRequest>("video_commit_request", Format::Binary))
        .await;
    let (_, text) = app.get("/metrics").await;
    assert_eq!(sample(&text, r#"megamind_idempotency_evictions_total{handler="run"}"#), Some(1.0), "{text}");
    assert_eq!(sample(&text, r#"megamind_idempotency_evictions_total{handler="commit"}"#), Some(0.0), "{text}");
    assert_eq!(sample(&text, r#"megamind_idempotency_refusals_total{handler="commit"}"#), Some(0.0), "{text}");
    assert_eq!(sample(&text, "megamind_idempotency_entries"), Some(2.0), "{text}");
    assert_eq!(sample(&text, "megamind_idempotency_commit_entries"), Some(1.0), "{text}");
}
