//! `/metrics` after known traffic.

use megamind_core::{
    codec::Format,
    config::Config,
    proto::n_alice::n_scenarios::{TScenarioApplyRequest, TScenarioRunRequest},
};

use crate::helpers::{fixture_body, registry_of, served_config, spawn_app, spawn_builtin, spawn_demo};

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
    let app = spawn_builtin(served_config()).await;
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

/// Every metric name the server's code defines: each `"megamind_…"` string
/// of the crates' sources (a new metric is found wherever it is added).
fn metric_names_in_the_code() -> std::collections::BTreeSet<String> {
    fn walk(dir: &std::path::Path, names: &mut std::collections::BTreeSet<String>, pattern: &regex::Regex) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, names, pattern);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                names.extend(pattern.captures_iter(&text).map(|c| c[1].to_owned()));
            }
        }
    }
    let pattern = regex::Regex::new(r#""(megamind_[a-z0-9_]+)""#).unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut names = std::collections::BTreeSet::new();
    for dir in ["src", "crates/core/src", "crates/assistant/src", "crates/tools/src"] {
        walk(&root.join(dir), &mut names, &pattern);
    }
    names
}

#[tokio::test]
async fn a_fresh_server_lists_every_metric_it_defines_with_its_known_series_at_zero() {
    let names = metric_names_in_the_code();
    assert!(names.len() > 30 && names.contains("megamind_budget_overruns_total"), "{names:?}");
    // A shared store and tvmtool register metrics of their own too; nothing
    // connects to either before a call.
    let mut config = served_config();
    config.store.url = "redis://127.0.0.1:1".into();
    config.auth.tvmtool_url = "http://127.0.0.1:1".into();
    let app = spawn_builtin(config).await;
    let (_, text) = app.get("/metrics").await;

    let missing: Vec<&String> = names.iter().filter(|name| !text.contains(&format!("# TYPE {name} "))).collect();
    assert!(missing.is_empty(), "no series from the start: {missing:?}\n{text}");
    for scenario in ["demo", "assistant"] {
        for handler in ["run", "continue", "commit", "apply"] {
            let overruns = format!(r#"megamind_budget_overruns_total{{handler="{handler}",scenario="{scenario}"}}"#);
            assert_eq!(sample(&text, &overruns), Some(0.0), "{overruns}");
            for outcome in megamind_core::rules::metrics::OUTCOMES {
                let requests = format!(
                    r#"megamind_requests_total{{handler="{handler}",outcome="{outcome}",scenario="{scenario}",transport="grpc"}}"#
                );
                assert_eq!(sample(&text, &requests), Some(0.0), "{requests}");
            }
        }
    }
    // Nothing has happened yet but this scrape's own connection, the
    // skills' first load and the store's probe at start (which finds
    // nothing on port 1); the process's own figures are not ours to count.
    let counted: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("megamind_") && line.contains("_total"))
        .filter(|line| !line.ends_with(" 0"))
        .filter(|line| !line.starts_with(r#"megamind_connections_served_total{lane="main"}"#))
        .filter(|line| !line.starts_with(r#"megamind_assistant_skill_reloads_total{trigger="start"}"#))
        .filter(|line| !line.starts_with(r#"megamind_store_operations_total{op="ping""#))
        .collect();
    assert!(counted.is_empty(), "counted before any event: {counted:#?}");
    for series in [
        r#"megamind_assistant_answers_total{handler="continue",kind="filler"}"#,
        r#"megamind_assistant_model_calls_total{backend="offline",outcome="timeout"}"#,
        r#"megamind_assistant_commands_total{command="any",outcome="wrong_session"}"#,
        r#"megamind_assistant_llm_api_requests_total{outcome="gone",route="answers"}"#,
        r#"megamind_assistant_llm_api_requests_total{outcome="unavailable",route="stream"}"#,
        r#"megamind_connections_closed_total{reason="drain_timeout"}"#,
        r#"megamind_store_fallbacks_total{handler="commit"}"#,
        r#"megamind_idempotency_refusals_total{handler="apply"}"#,
    ] {
        assert_eq!(sample(&text, series), Some(0.0), "{series}\n{text}");
    }
}
