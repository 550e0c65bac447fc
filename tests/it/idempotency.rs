//! Idempotency by RequestId: side effects run once, repeats replay the first
//! answer byte for byte, concurrent repeats wait for the first call.

use std::sync::{Arc, atomic::Ordering};

use megamind_core::{
    codec::Format,
    config::Config,
    proto::n_alice::n_scenarios::{
        TScenarioApplyRequest, TScenarioCommitResponse, TScenarioRunRequest, TScenarioRunResponse,
        t_scenario_commit_response, t_scenario_run_response,
    },
};
use megamind_scenario::scenarios::demo::Demo;
use prost::Message;
use tokio::{sync::Semaphore, task::JoinHandle};

use crate::{
    helpers::{TestApp, decode_answer, fixture, fixture_body, registry_of, spawn_app, spawn_demo},
    metrics::sample,
    scenarios::Counting,
};

/// The `poi_run_request` fixture with another `RequestId`, in binary.
fn run_request(request_id: &str) -> Vec<u8> {
    let mut request = fixture::<TScenarioRunRequest>("poi_run_request");
    request.base_request.as_mut().expect("a BaseRequest").request_id = request_id.into();
    request.encode_to_vec()
}

/// Posts `body` to `path` in the background and returns once the gated
/// scenario has entered the call, where its gate holds it.
async fn post_until_entered(
    app: &Arc<TestApp>,
    counting: &Counting,
    path: &'static str,
    body: Vec<u8>,
) -> JoinHandle<(reqwest::StatusCode, bytes::Bytes)> {
    let entered = counting.entered.notified();
    let call = tokio::spawn({
        let app = app.clone();
        async move { app.post_binary(path, body).await }
    });
    entered.await;
    call
}

/// Waits until the server's `metric` reads `value`, for 5 s at most.
async fn until_metric(app: &TestApp, metric: &str, value: f64, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while sample(&app.get("/metrics").await.1, metric) != Some(value) {
        assert!(std::time::Instant::now() < deadline, "{what}");
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn a_hundred_concurrent_commits_send_one_push_and_get_identical_bytes() {
    let (app, demo) = spawn_demo().await;
    let app = Arc::new(app);
    let body = fixture_body::<TScenarioApplyRequest>("video_commit_request", Format::Binary);
    let calls: Vec<_> = (0..100)
        .map(|_| {
            let (app, body) = (app.clone(), body.clone());
            tokio::spawn(async move { app.post_binary("/demo/commit", body).await })
        })
        .collect();
    let mut answers = Vec::new();
    for call in calls {
        let (status, bytes) = call.await.unwrap();
        assert_eq!(status, 200);
        answers.push(bytes);
    }
    assert_eq!(demo.payment_pushes(), 1, "the side effect ran once");
    assert!(answers.iter().all(|a| a == &answers[0]), "byte-identical answers");
    let answer: TScenarioCommitResponse = decode_answer(&answers[0], Format::Binary);
    assert!(matches!(answer.response, Some(t_scenario_commit_response::Response::Success(_))));
}

#[tokio::test]
async fn concurrent_repeats_wait_for_the_first_call_in_flight() {
    let gate = Arc::new(Semaphore::new(0));
    let counting = Arc::new(Counting::gated(gate.clone()));
    let registry = registry_of("counting", counting.clone());
    let app = Arc::new(spawn_app(Config::default(), registry).await);
    let body = fixture_body::<TScenarioApplyRequest>("video_commit_request", Format::Binary);

    let first = post_until_entered(&app, &counting, "/counting/commit", body.clone()).await;
    let repeats: Vec<_> = (0..10)
        .map(|_| {
            let (app, body) = (app.clone(), body.clone());
            tokio::spawn(async move { app.post_binary("/counting/commit", body).await })
        })
        .collect();
    gate.add_permits(1);
    let (_, first) = first.await.unwrap();
    for repeat in repeats {
        assert_eq!(repeat.await.unwrap().1, first);
    }
    assert_eq!(counting.commits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_repeated_run_does_not_run_the_scenario_again() {
    let counting = Arc::new(Counting::default());
    let registry = registry_of("counting", counting.clone());
    let app = spawn_app(Config::default(), registry).await;
    let body = fixture_body::<TScenarioRunRequest>("poi_run_request", Format::Binary);
    let (_, first) = app.post_binary("/counting/run", body.clone()).await;
    for _ in 0..4 {
        assert_eq!(app.post_binary("/counting/run", body.clone()).await.1, first);
    }
    assert_eq!(counting.runs.load(Ordering::SeqCst), 1);
    let other = fixture_body::<TScenarioRunRequest>("music_run_request", Format::Binary);
    app.post_binary("/counting/run", other).await;
    assert_eq!(counting.runs.load(Ordering::SeqCst), 2, "another RequestId runs");
}

#[tokio::test]
async fn a_repeat_in_another_format_gets_the_same_answer() {
    let (app, demo) = spawn_demo().await;
    let (_, binary) = app
        .post_binary("/demo/commit", fixture_body::<TScenarioApplyRequest>("video_commit_request", Format::Binary))
        .await;
    let json = app
        .post(
            "/demo/commit",
            "text/protobuf",
            Some("application/json"),
            fixture_body::<TScenarioApplyRequest>("video_commit_request", Format::Text),
        )
        .await
        .bytes()
        .await
        .unwrap();
    let from_binary: TScenarioCommitResponse = decode_answer(&binary, Format::Binary);
    let from_json: TScenarioCommitResponse = decode_answer(&json, Format::Json);
    assert_eq!(from_binary, from_json);
    assert_eq!(demo.payment_pushes(), 1);
}

#[tokio::test]
async fn a_commit_answer_outlives_a_flood_of_run_answers() {
    let demo = Arc::new(Demo::new());
    let mut config = Config::default();
    config.cache.max_entries = 20;
    config.cache.max_bytes = 64 * 1024;
    let app = spawn_app(config, registry_of("demo", demo.clone())).await;
    let commit = fixture_body::<TScenarioApplyRequest>("video_commit_request", Format::Binary);
    let (status, first) = app.post_binary("/demo/commit", commit.clone()).await;
    assert_eq!(status, 200);
    for n in 0..200 {
        let (status, _) = app.post_binary("/demo/run", run_request(&format!("flood-{n}"))).await;
        assert_eq!(status, 200);
    }
    let (status, retry) = app.post_binary("/demo/commit", commit).await;
    assert_eq!(status, 200);
    assert_eq!(retry, first, "the retry replays the first answer byte for byte");
    assert_eq!(demo.payment_pushes(), 1, "the side effect ran once");
    let (_, text) = app.get("/metrics").await;
    let series = r#"megamind_requests_total{handler="commit",outcome="ok",scenario="demo",transport="http"}"#;
    assert_eq!(sample(&text, series), Some(1.0), "{text}");
}

#[tokio::test]
async fn under_overload_a_cached_run_is_replayed_not_refused() {
    let gate = Arc::new(Semaphore::new(1));
    let counting = Arc::new(Counting::gated(gate.clone()));
    let config = Config { max_in_flight: 1, priority_reserve: 0, ..Config::default() };
    let app = Arc::new(spawn_app(config, registry_of("counting", counting.clone())).await);
    let (status, first) = app.post_binary("/counting/run", run_request("cached")).await;
    assert_eq!(status, 200);

    // Another call holds the only slot.
    let held = post_until_entered(&app, &counting, "/counting/run", run_request("holding")).await;
    let (status, _) = app.post_binary("/counting/run", run_request("new")).await;
    assert_eq!(status, 429, "a new /run is refused at the limit");
    let (status, replay) = app.post_binary("/counting/run", run_request("cached")).await;
    assert_eq!(status, 200, "a repeat is replayed at the limit");
    assert_eq!(replay, first);
    assert_eq!(counting.runs.load(Ordering::SeqCst), 2, "the refused call ran nothing");

    // A repeat of the call in flight waits for it rather than being refused.
    let waiting = tokio::spawn({
        let app = app.clone();
        async move { app.post_binary("/counting/run", run_request("holding")).await }
    });
    until_metric(&app, "megamind_idempotency_waits_total", 1.0, "the repeat never started waiting").await;
    gate.add_permits(1);
    let (held, waited) = (held.await.unwrap(), waiting.await.unwrap());
    assert_eq!((held.0.as_u16(), waited.0.as_u16()), (200, 200));
    assert_eq!(waited.1, held.1, "the waiting repeat gets the first answer");
    let (_, text) = app.get("/metrics").await;
    let series = |outcome: &str| {
        format!(r#"megamind_requests_total{{handler="run",outcome="{outcome}",scenario="counting",transport="http"}}"#)
    };
    assert_eq!(sample(&text, &series("replay")), Some(2.0), "{text}");
    assert_eq!(sample(&text, &series("overloaded")), Some(1.0), "{text}");
}

#[tokio::test]
async fn a_repeat_that_times_out_waiting_is_counted_replay_timeout() {
    let gate = Arc::new(Semaphore::new(0));
    let counting = Arc::new(Counting::gated(gate.clone()));
    let mut config = Config::default();
    config.budget.run_ms = 150;
    let app = Arc::new(spawn_app(config, registry_of("counting", counting.clone())).await);

    let first = post_until_entered(&app, &counting, "/counting/run", run_request("slow")).await;
    let (status, repeat) = app.post_binary("/counting/run", run_request("slow")).await;
    assert_eq!(status, 200);
    let repeat: TScenarioRunResponse = decode_answer(&repeat, Format::Binary);
    let Some(t_scenario_run_response::Response::Error(error)) = repeat.response else { panic!("{repeat:?}") };
    assert_eq!(error.r#type, "timeout", "the protocol still says timeout");
    assert!(error.message.contains("first call"), "{}", error.message);
    assert_eq!(first.await.unwrap().0, 200);
    gate.add_permits(1);

    let (_, text) = app.get("/metrics").await;
    let series = |outcome: &str| {
        format!(r#"megamind_requests_total{{handler="run",outcome="{outcome}",scenario="counting",transport="http"}}"#)
    };
    assert_eq!(sample(&text, &series("replay_timeout")), Some(1.0), "{text}");
    assert_eq!(sample(&text, &series("timeout")), Some(1.0), "only the first call overran: {text}");
    assert_eq!(
        sample(&text, r#"megamind_budget_overruns_total{handler="run",scenario="counting"}"#),
        Some(1.0),
        "{text}"
    );
    assert_eq!(counting.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_first_call_its_client_gave_up_on_lets_a_retry_run_at_once() {
    let gate = Arc::new(Semaphore::new(0));
    let counting = Arc::new(Counting::gated(gate.clone()));
    let app = Arc::new(spawn_app(Config::default(), registry_of("counting", counting.clone())).await);
    let first = post_until_entered(&app, &counting, "/counting/run", run_request("given-up")).await;
    first.abort();

    // The server drops the call once its connection closes; the call's lease
    // goes with it, rather than holding repeats until it runs out.
    until_metric(&app, "megamind_idempotency_in_flight", 0.0, "the lease of the dropped call was kept").await;
    gate.add_permits(1);
    let (status, _) = app.post_binary("/counting/run", run_request("given-up")).await;
    assert_eq!(status, 200);
    assert_eq!(counting.runs.load(Ordering::SeqCst), 2, "the retry ran the scenario");
}

#[tokio::test]
async fn a_repeat_waiting_for_a_call_its_client_gave_up_on_runs_in_its_place() {
    let gate = Arc::new(Semaphore::new(0));
    let counting = Arc::new(Counting::gated(gate.clone()));
    let app = Arc::new(spawn_app(Config::default(), registry_of("counting", counting.clone())).await);
    let first = post_until_entered(&app, &counting, "/counting/run", run_request("taken-over")).await;
    let repeat = tokio::spawn({
        let app = app.clone();
        async move { app.post_binary("/counting/run", run_request("taken-over")).await }
    });
    until_metric(&app, "megamind_idempotency_waits_total", 1.0, "the repeat never waited").await;
    first.abort();
    // Once the server drops the first call, the waiting repeat runs the
    // scenario itself, well inside its own budget.
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(250);
    while counting.runs.load(Ordering::SeqCst) < 2 {
        assert!(std::time::Instant::now() < deadline, "the repeat did not take over");
        tokio::task::yield_now().await;
    }
    gate.add_permits(1);

    let (status, body) = repeat.await.unwrap();
    assert_eq!(status, 200);
    let answer: TScenarioRunResponse = decode_answer(&body, Format::Binary);
    assert!(
        !matches!(answer.response, Some(t_scenario_run_response::Response::Error(_))),
        "the waiting repeat ran the scenario instead of failing with the first call: {answer:?}"
    );
    assert_eq!(counting.runs.load(Ordering::SeqCst), 2);
}
