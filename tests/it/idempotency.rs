//! Idempotency by RequestId: side effects run once, repeats replay the first
//! answer byte for byte, concurrent repeats wait for the first call.

use std::sync::{Arc, atomic::Ordering};

use megamind_scenario::{
    codec::Format,
    config::Config,
    proto::n_alice::n_scenarios::{
        TScenarioApplyRequest, TScenarioCommitResponse, TScenarioRunRequest, t_scenario_commit_response,
    },
};
use tokio::sync::Semaphore;

use crate::{
    helpers::{decode_answer, fixture_body, registry_of, spawn_app, spawn_demo},
    scenarios::Counting,
};

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

    let entered = counting.entered.notified();
    let first = tokio::spawn({
        let (app, body) = (app.clone(), body.clone());
        async move { app.post_binary("/counting/commit", body).await }
    });
    entered.await;
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
