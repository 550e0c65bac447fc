//! The budget: a scenario that overruns is answered `timeout` in time, its
//! work finishes in the background and completes the idempotency entry.

use std::{
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant},
};

use megamind_core::{
    codec::Format,
    config::Config,
    proto::n_alice::n_scenarios::{
        TScenarioApplyRequest, TScenarioCommitResponse, TScenarioRunRequest, TScenarioRunResponse,
        t_scenario_commit_response, t_scenario_run_response,
    },
    scenario::Registry,
};

use crate::{
    helpers::{TestApp, decode_answer, fixture_body, registry_of, spawn_app},
    metrics::sample,
    scenarios::Sleepy,
};

/// Allowed lateness past the budget: scheduling on a shared 2-core machine.
const MARGIN: Duration = Duration::from_millis(60);

fn sleepy_app(delay: Duration) -> (Arc<Sleepy>, Registry) {
    let sleepy = Arc::new(Sleepy::new(delay));
    let registry = registry_of("sleepy", sleepy.clone());
    (sleepy, registry)
}

#[tokio::test]
async fn an_overrun_is_answered_timeout_within_the_budget() {
    let (_, registry) = sleepy_app(Duration::from_secs(5));
    let app = spawn_app(Config::default(), registry).await;
    let body = fixture_body::<TScenarioRunRequest>("poi_run_request", Format::Binary);
    let started = Instant::now();
    let (status, answer) = app.post_binary("/sleepy/run", body).await;
    let elapsed = started.elapsed();
    assert_eq!(status, 200);
    assert!(elapsed < Duration::from_millis(300) + MARGIN, "answered after {elapsed:?}");
    assert!(elapsed >= Duration::from_millis(280), "waited for the budget: {elapsed:?}");
    let answer: TScenarioRunResponse = decode_answer(&answer, Format::Binary);
    let Some(t_scenario_run_response::Response::Error(error)) = answer.response else { panic!("{answer:?}") };
    assert_eq!(error.r#type, "timeout");
    assert!(error.message.contains("300 ms"), "{}", error.message);

    // The server stays healthy: another call with another RequestId is served.
    let (status, _) =
        app.post_binary("/sleepy/run", fixture_body::<TScenarioRunRequest>("music_run_request", Format::Binary)).await;
    assert_eq!(status, 200);
}

/// A server whose `/sleepy/commit` sleeps `delay` past its 50 ms budget,
/// and the body of one such commit, already answered `timeout`.
async fn a_commit_past_its_budget(delay: Duration, mut config: Config) -> (Arc<Sleepy>, TestApp, Vec<u8>) {
    let (sleepy, registry) = sleepy_app(delay);
    config.budget.commit_ms = 50;
    let app = spawn_app(config, registry).await;
    let body = fixture_body::<TScenarioApplyRequest>("video_commit_request", Format::Binary);
    let (_, first) = app.post_binary("/sleepy/commit", body.clone()).await;
    let first: TScenarioCommitResponse = decode_answer(&first, Format::Binary);
    assert!(
        matches!(first.response, Some(t_scenario_commit_response::Response::Error(ref e)) if e.r#type == "timeout")
    );
    (sleepy, app, body)
}

#[tokio::test]
async fn work_past_the_budget_still_completes_its_commit_once() {
    let (sleepy, app, body) = a_commit_past_its_budget(Duration::from_millis(150), Config::default()).await;
    // A notification given before this waits is kept for it.
    sleepy.done.notified().await;
    // The retry replays the background work's answer (or waits the last
    // microseconds for it): no second side effect.
    let (_, retry) = app.post_binary("/sleepy/commit", body).await;
    let retry: TScenarioCommitResponse = decode_answer(&retry, Format::Binary);
    assert!(matches!(retry.response, Some(t_scenario_commit_response::Response::Success(_))), "{retry:?}");
    assert_eq!(sleepy.commits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn per_handler_budgets_apply() {
    let (_, registry) = sleepy_app(Duration::from_millis(120));
    let mut config = Config::default();
    config.budget.run_ms = 60;
    config.budget.commit_ms = 1000;
    let app = spawn_app(config, registry).await;
    let (_, run) =
        app.post_binary("/sleepy/run", fixture_body::<TScenarioRunRequest>("poi_run_request", Format::Binary)).await;
    let run: TScenarioRunResponse = decode_answer(&run, Format::Binary);
    assert!(matches!(run.response, Some(t_scenario_run_response::Response::Error(ref e)) if e.r#type == "timeout"));
    let (_, commit) = app
        .post_binary("/sleepy/commit", fixture_body::<TScenarioApplyRequest>("video_commit_request", Format::Binary))
        .await;
    let commit: TScenarioCommitResponse = decode_answer(&commit, Format::Binary);
    assert!(matches!(commit.response, Some(t_scenario_commit_response::Response::Success(_))));
}

#[tokio::test]
async fn work_dropped_at_the_detach_limit_lets_a_retry_run_again() {
    let (_, registry) = sleepy_app(Duration::from_secs(5));
    let mut config = Config::default();
    config.budget.run_ms = 50;
    config.detach_limit_ms = 100;
    let app = spawn_app(config, registry).await;
    let body = fixture_body::<TScenarioRunRequest>("poi_run_request", Format::Binary);
    let (status, _) = app.post_binary("/sleepy/run", body.clone()).await;
    assert_eq!(status, 200);

    // Dropped 100 ms past its deadline, the work abandons its lease: no entry is left in flight.
    let in_flight = || async { sample(&app.get("/metrics").await.1, "megamind_idempotency_in_flight") };
    let deadline = Instant::now() + Duration::from_secs(5);
    while in_flight().await != Some(0.0) {
        assert!(Instant::now() < deadline, "the lease of the dropped work was kept");
        tokio::task::yield_now().await;
    }
    let (status, _) = app.post_binary("/sleepy/run", body).await;
    assert_eq!(status, 200);
    let (_, text) = app.get("/metrics").await;
    let series = |outcome: &str| {
        format!(r#"megamind_requests_total{{handler="run",outcome="{outcome}",scenario="sleepy",transport="http"}}"#)
    };
    assert_eq!(sample(&text, &series("timeout")), Some(2.0), "the retry ran the scenario again: {text}");
    assert_eq!(sample(&text, &series("replay_timeout")), Some(0.0), "{text}");
}

#[tokio::test]
async fn a_stopping_server_waits_for_work_past_the_budget_to_complete_its_entry() {
    let config = Config { shutdown_delay_ms: 0, ..Config::default() };
    let (sleepy, mut app, _) = a_commit_past_its_budget(Duration::from_millis(400), config).await;
    assert_eq!(sleepy.commits.load(Ordering::SeqCst), 0, "the work goes on past the answer");
    app.begin_shutdown();
    app.join().await.expect("the server stops");
    // Stopped only once the work had ended and completed its entry: a
    // runtime dropped before would have dropped the work with it.
    assert_eq!(sleepy.commits.load(Ordering::SeqCst), 1);
}
