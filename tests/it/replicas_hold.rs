//! A replica holding for a model call another replica runs, before that
//! replica has written anything to the call's journal in Redis (it has just
//! claimed the call, or it cannot reach Redis to write): the hold is still
//! answered within the budget, and its reads that found nothing new leave
//! the store up (Redis ends a short `XREAD BLOCK` up to 100 ms late).

use std::time::Duration;

use megamind_tools::client::Client;

use crate::{
    assistant_harness::{BUDGET, MARGIN, SIGNING_KEY, speech},
    metrics::sample,
    mock_llm::{MockLlm, Reply},
    redis_server::RedisServer,
    replicas::Replica,
};

#[tokio::test]
async fn a_hold_for_a_call_with_an_empty_journal_answers_in_time() {
    let Some(redis) = RedisServer::start("a hold over an empty journal") else { return };
    let mock = MockLlm::start(Reply::content_after(Duration::from_secs(5), "Полдень.")).await;
    let base_url = mock.base_url();
    let args = ["--llm-base-url", &base_url, "--llm-warmup", "off", "--llm-signing-key", SIGNING_KEY];
    let replica = Replica::start_with(&redis.url(), &args);
    // Another replica's claim on the call, which has written no event yet.
    let key = "megamind:calls:{assistant/run/held-1}";
    let () = redis.query(redis::cmd("SET").arg(key).arg("cother-replica:1").arg("PX").arg(20_000));

    let client = Client::http(&replica.base).unwrap().with_scenario("assistant");
    let mut client = client.with_request_id_prefix("held-").ignoring_callbacks();
    // Three failed store commands in a row would mark the store down.
    for turn in 0..4 {
        let turn = client.say("который час?").await.unwrap_or_else(|e| panic!("turn {turn}: {e}"));
        for hop in &turn.hops {
            assert!(hop.took < BUDGET + MARGIN, "/{} answered after {:?}", hop.handler(), hop.took);
        }
        let intent = turn.body().analytics_info.as_ref().map(|info| info.intent.clone());
        assert_eq!(intent.as_deref(), Some("assistant.hold"), "held with a filler: {:?}", speech(turn.body()));
    }
    assert_eq!(mock.calls(), 0, "the call is the other replica's");
    let metrics = reqwest::get(format!("{}/metrics", replica.base)).await.unwrap().text().await.unwrap();
    assert_eq!(sample(&metrics, "megamind_store_up "), Some(1.0), "the store stayed up");
    let timeouts = r#"megamind_store_operations_total{op="read",outcome="timeout"} "#;
    assert_eq!(sample(&metrics, timeouts).unwrap_or(0.0), 0.0, "no read counted as a timeout");
}
