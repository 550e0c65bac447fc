//! A running call's answer fetched in parts over three replicas sharing one
//! `redis-server`, each part from another replica as a round-robin balancer
//! sends them: every part comes from the version part 1 came from, though
//! only the replica that served part 1 kept it.

use std::time::{Duration, Instant};

use megamind_core::proto::n_alice::n_scenarios::t_scenario_run_response;
use megamind_tools::client::{Client, Request};
use reqwest::StatusCode;
use serde_json::Value;

use crate::{
    mock_llm::{MockLlm, Reply},
    redis_server::RedisServer,
    replicas_assistant::{asked, get, replicas_with},
};

/// The model's answer: a word every 200 ms, 4 s in all, so that the call
/// still runs while its parts are fetched.
const WORDS: [&str; 20] = [
    "Жили ",
    "были ",
    "дед ",
    "да ",
    "баба, ",
    "и ",
    "была ",
    "у ",
    "них ",
    "курочка ",
    "Ряба. ",
    "Снесла ",
    "курочка ",
    "яичко, ",
    "не ",
    "простое, ",
    "а ",
    "золотое. ",
    "Вот ",
    "и всё.",
];

#[tokio::test]
async fn a_running_answers_parts_come_from_one_version_whichever_replica_serves_them() {
    let Some(redis) = RedisServer::start("a running answer in parts over replicas") else { return };
    let mock = MockLlm::start(Reply::stream(&WORDS, Duration::from_millis(200))).await;
    // Parts of 300 bytes: the answer of a few words is already several.
    let replicas = replicas_with(&redis, &mock, &["--llm-chunk-bytes", "300"]);
    let http = megamind_core::http_client::client_builder().build().expect("a client");
    let client = Client::http(&replicas[0].base).expect("a client").with_scenario("assistant");
    let call_id = "parts-1";
    let hop = client.call(Request::Run(asked(call_id))).await.expect("/run answers");
    let handed_over = hop.response.as_run().and_then(|run| run.response.as_ref());
    assert!(
        matches!(handed_over, Some(t_scenario_run_response::Response::ContinueArguments(_))),
        "the model speaks for seconds: {hop:?}"
    );

    // Part 1 from the replica running the call, once the model has begun.
    let answers = format!("/llm/answers/{call_id}");
    let first = asked_until(&http, &replicas[0], &answers, |first| {
        first["total_parts"].as_u64() > Some(1) && first["content"].as_str().is_some_and(|c| c.contains("Жили"))
    })
    .await;
    let (snapshot, total, mut joined) = part_one(&first);

    // The model says more: the answer is another version now, and the
    // snapshot can only be made again from its events. (Asked of the
    // replica that kept it: a part 1 asked of another would keep there
    // the version it saw, maybe the snapshot itself.)
    asked_until(&http, &replicas[0], &answers, |now| {
        now["snapshot"].as_str().map(|s| s.trim_matches('"')) != Some(snapshot.as_str())
    })
    .await;

    joined.push_str(&rest_of(&http, &replicas, &answers, &snapshot, total).await);
    let answer: Value = serde_json::from_str(&joined).expect("the parts join into the answer");
    assert_eq!(answer["status"], "running", "fetched while the model spoke: {answer}");
    let said = answer["raw_text"].as_str().expect("raw_text");
    assert!(WORDS.concat().starts_with(said) && said.starts_with("Жили"), "a prefix of the answer: {said:?}");

    // A snapshot of events the call never held is waited for a while, not
    // until the call ends.
    let (hash, _) = snapshot.rsplit_once('-').expect("a mark");
    let (status, body) = get(&http, &replicas[2].base, &format!("{answers}?part=2&snapshot={hash}-999999"), &[]).await;
    assert_eq!(status, StatusCode::GONE, "{body}");
    let (_, body) = get(&http, &replicas[2].base, &answers, &[]).await;
    let again: Value = serde_json::from_str(&body).expect("JSON");
    let content = again["content"].as_str().expect("still in parts");
    assert!(content.contains(r#""status":"running""#), "refused while the model still spoke: {content}");
    assert_eq!(mock.calls(), 1, "reading never calls the model");
}

#[tokio::test]
async fn a_running_answer_cut_at_its_bound_is_made_again_cut_on_any_replica() {
    let Some(redis) = RedisServer::start("a cut running answer in parts over replicas") else { return };
    // A model that says 6 000 one-letter tokens at once passes what a call
    // keeps (each token counts its letter, 32 bytes and the request id, of
    // 200 bytes here), then goes on for 4 s with tokens that are dropped.
    let tokens = vec!["x"; 6_000];
    let mock = MockLlm::start(Reply::burst_then(&tokens, &["y"; 20], Duration::from_millis(200))).await;
    // Parts of 500 kB: the answer of about 1.4 MB is three.
    let replicas = replicas_with(&redis, &mock, &["--llm-chunk-bytes", "500000"]);
    let http = megamind_core::http_client::client_builder().build().expect("a client");
    let client = Client::http(&replicas[0].base).expect("a client").with_scenario("assistant");
    let call_id = &format!("parts-cut-{}", "x".repeat(190));
    client.call(Request::Run(asked(call_id))).await.expect("/run answers");

    // Part 1 of the running answer once it was cut.
    let answers = format!("/llm/answers/{call_id}");
    // (Its status and `truncated` are in part 1: they come before its events.)
    let first = asked_until(&http, &replicas[0], &answers, |first| {
        let content = first["content"].as_str().expect("an answer in parts");
        let cut = content.contains(r#""truncated":true"#);
        assert!(!cut || content.contains(r#""status":"running""#), "cut while the model still spoke");
        cut
    })
    .await;
    let (snapshot, total, mut joined) = part_one(&first);

    // The call ends (how it ended comes past the cut) before the other
    // replicas, which keep nothing of it, are asked for the rest.
    asked_until(&http, &replicas[0], &answers, |now| {
        now["content"].as_str().is_some_and(|c| c.contains(r#""status":"completed""#))
    })
    .await;
    joined.push_str(&rest_of(&http, &replicas, &answers, &snapshot, total).await);
    let answer: Value = serde_json::from_str(&joined).expect("the parts join into the answer");
    assert_eq!((&answer["status"], &answer["truncated"]), (&Value::from("running"), &Value::from(true)));
    let said = answer["raw_text"].as_str().expect("raw_text");
    assert!(said.len() > 4_000 && said.len() < 6_000 && said.bytes().all(|b| b == b'x'), "{} bytes", said.len());
}

/// Part 1 of `answers` from `replica`, asked until `ready` says it is the
/// one, for 30 s at most.
async fn asked_until(
    http: &reqwest::Client,
    replica: &crate::replicas::Replica,
    answers: &str,
    ready: impl Fn(&Value) -> bool,
) -> Value {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = get(http, &replica.base, answers, &[]).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let first: Value = serde_json::from_str(&body).expect("JSON");
        if ready(&first) {
            return first;
        }
        let seen: String = body.chars().take(300).collect();
        assert!(Instant::now() < until, "not the answer awaited after 30 s: {seen}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The snapshot of part 1 of an answer in parts, how many there are, and
/// its content.
fn part_one(first: &Value) -> (String, u64, String) {
    let snapshot = first["snapshot"].as_str().expect("a snapshot").trim_matches('"').to_owned();
    let total = first["total_parts"].as_u64().expect("total_parts");
    assert!(total > 1, "an answer in parts: {total}");
    (snapshot, total, first["content"].as_str().expect("a piece").to_owned())
}

/// Parts 2 to `total` of `snapshot`, each from one of the replicas that did
/// not serve part 1, in turn: their contents joined.
async fn rest_of(
    http: &reqwest::Client,
    replicas: &[crate::replicas::Replica],
    answers: &str,
    snapshot: &str,
    total: u64,
) -> String {
    let mut joined = String::new();
    for part in 2..=total {
        let replica = &replicas[1 + part as usize % 2];
        let path = format!("{answers}?part={part}&snapshot={snapshot}");
        let (status, body) = get(http, &replica.base, &path, &[]).await;
        assert_eq!(status, StatusCode::OK, "part {part} of {total}: {body}");
        let piece: Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(piece["snapshot"].as_str().map(|s| s.trim_matches('"')), Some(snapshot));
        joined.push_str(piece["content"].as_str().expect("a piece"));
    }
    joined
}
