//! A running call's answer fetched in parts over three replicas sharing one
//! `redis-server`, each part from another replica as a round-robin balancer
//! sends them: every part comes from the version part 1 came from, though
//! only the replica that served part 1 kept it.

use std::time::Duration;

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
    let first = loop {
        let (status, body) = get(&http, &replicas[0].base, &answers, &[]).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let first: Value = serde_json::from_str(&body).expect("JSON");
        if first["total_parts"].as_u64() > Some(1) && first["content"].as_str().is_some_and(|c| c.contains("Жили"))
        {
            break first;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let snapshot = first["snapshot"].as_str().expect("a snapshot").trim_matches('"').to_owned();
    let total = first["total_parts"].as_u64().expect("total_parts");
    let mut joined = first["content"].as_str().expect("a piece").to_owned();

    // The model says more: the other replicas' answer is another version
    // now, and the snapshot can only be made again from its events.
    loop {
        let (_, body) = get(&http, &replicas[1].base, &answers, &[]).await;
        let now: Value = serde_json::from_str(&body).expect("JSON");
        if now["snapshot"].as_str().map(|s| s.trim_matches('"')) != Some(snapshot.as_str()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The rest from the other two in turn, naming the snapshot.
    for part in 2..=total {
        let replica = &replicas[1 + part as usize % 2];
        let path = format!("{answers}?part={part}&snapshot={snapshot}");
        let (status, body) = get(&http, &replica.base, &path, &[]).await;
        assert_eq!(status, StatusCode::OK, "part {part} of {total}: {body}");
        let piece: Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(piece["snapshot"].as_str().map(|s| s.trim_matches('"')), Some(snapshot.as_str()));
        joined.push_str(piece["content"].as_str().expect("a piece"));
    }
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
