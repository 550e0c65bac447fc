//! The assistant on three server processes sharing one `redis-server`
//! that goes away, forgets, is flushed or stalls: calls run locally while
//! it is gone and are shared again once it is back, a call whose claim it
//! forgot is claimed again, and no call is begun twice or shown completed
//! by a replica that gave way.

use std::time::{Duration, Instant};

use megamind_assistant::jsonseq::parse_transcript;
use megamind_core::proto::n_alice::n_scenarios::TScenarioRunRequest;
use megamind_tools::client::{Client, Hop, Request};
use reqwest::StatusCode;

use crate::{
    assistant_harness::{BUDGET, MARGIN, signed, speech, state_of},
    llm_api::valid,
    mock_llm::{MockLlm, Reply},
    redis_server::RedisServer,
    replicas::Replica,
    replicas_assistant::{
        GAP, PIECES, asked, assert_said_once_and_whole, continued, get, replicas, streamed_text, turn,
    },
};

/// With Redis gone, a replica answers from its own memory, in time, and
/// counts the call another replica may run too.
#[tokio::test]
async fn with_redis_gone_calls_run_locally_and_are_counted_as_possibly_twice() {
    let Some(mut redis) = RedisServer::start("the assistant without Redis") else { return };
    let mock = MockLlm::start(Reply::content("Сейчас полдень.")).await;
    let replicas = replicas(&redis, &mock);
    redis.kill();
    let client = Client::http(&replicas[0].base).expect("a client").with_scenario("assistant");
    let hops = turn(std::slice::from_ref(&client), "alone-1", "который час?", |_| 0).await;
    let said: Vec<&str> = hops.iter().filter_map(|hop| hop.response.body()).map(speech).collect();
    assert_eq!(said.last().copied(), Some("Сейчас полдень."), "{said:?}");
    for hop in &hops {
        assert!(hop.took < BUDGET + MARGIN, "/{} answered after {:?}", hop.handler(), hop.took);
    }
    let http = megamind_core::http_client::client_builder().build().expect("a client");
    let metrics = http.get(format!("{}/metrics", replicas[0].base)).send().await.unwrap().text().await.unwrap();
    let counted = r#"megamind_assistant_calls_duplicated_total{reason="store_down"} 1"#;
    assert!(
        metrics.contains(counted),
        "{}",
        metrics.lines().filter(|l| l.contains("duplicated")).collect::<Vec<_>>().join("\n")
    );
}

/// The whole answer of `call_id` on the replica at `base` once it has
/// ended there, polled every 50 ms for at most 10 s; the last status and
/// body otherwise.
async fn ended_answer(http: &reqwest::Client, base: &str, call_id: &str) -> (StatusCode, serde_json::Value) {
    let path = format!("/llm/answers/{call_id}");
    let mut last = (StatusCode::NOT_FOUND, serde_json::Value::Null);
    for _ in 0..200 {
        let (status, body) = get(http, base, &path, &[]).await;
        last = (status, serde_json::from_str(&body).unwrap_or(serde_json::Value::String(body)));
        if status == StatusCode::OK && last.1["content"]["status"] != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    last
}

/// A call begun while Redis was gone runs in its replica's memory; once
/// Redis is back, that replica claims it there and copies its journal, so
/// that every replica reads it and none calls the model again.
#[tokio::test]
async fn a_call_begun_while_redis_was_gone_is_shared_once_it_is_back() {
    let Some(mut redis) = RedisServer::start("a call shared once Redis is back") else { return };
    // Slow enough to be running still when the replicas find Redis back.
    let mock = MockLlm::start(Reply::stream(&PIECES, Duration::from_millis(400))).await;
    let replicas = replicas(&redis, &mock);
    let http = megamind_core::http_client::client_builder().build().expect("a client");
    let call_id = "shared-later-1";
    let run = || asked(call_id);
    redis.kill();
    let client = Client::http(&replicas[0].base).expect("a client").with_scenario("assistant");
    client.call(Request::Run(run())).await.expect("/run answers");
    mock.wait_for_calls(1).await;
    redis.restart();

    assert_one_call_read_alike(&http, &replicas, &mock, run()).await;
}

/// The call `run` started on replica 0, once it has ended: read alike on
/// every replica, and joined by the same request on replica 2 rather than
/// called again.
async fn assert_one_call_read_alike(
    http: &reqwest::Client,
    replicas: &[Replica],
    mock: &MockLlm,
    run: TScenarioRunRequest,
) {
    let call_id = run.base_request.as_ref().map(|base| base.request_id.clone()).unwrap_or_default();
    let (status, answer) = ended_answer(http, &replicas[1].base, &call_id).await;
    assert_eq!(status, StatusCode::OK, "replica 1 reads the call: {answer}");
    assert_eq!(answer["content"]["raw_text"].as_str(), Some(PIECES.concat().as_str()), "{answer}");
    let path = format!("/llm/stream/{call_id}");
    let (status, own) = get(http, &replicas[0].base, &path, &[]).await;
    assert_eq!(status, StatusCode::OK, "{own}");
    let events = valid(&own);
    assert_eq!(streamed_text(&events), PIECES.concat(), "the runner's own stream");
    let (status, mirrored) = get(http, &replicas[2].base, &path, &[]).await;
    assert_eq!(status, StatusCode::OK, "{mirrored}");
    assert_eq!(parse_transcript(&mirrored).0, events, "the same events under the same ids on replica 2");
    let other = Client::http(&replicas[2].base).expect("a client").with_scenario("assistant");
    other.call(Request::Run(run)).await.expect("/run answers");
    assert_eq!(mock.calls(), 1, "one model call");
}

/// How a test makes Redis forget everything it holds.
#[derive(Debug, Clone, Copy)]
enum Forget {
    /// Restarted empty: every connection to it is dropped.
    Restart,
    /// `FLUSHALL`: every connection stays open, and only the data says it.
    Flush,
}

impl Forget {
    fn on(self, redis: &mut RedisServer) {
        match self {
            Forget::Restart => redis.restart(),
            Forget::Flush => redis.query(&mut redis::cmd("FLUSHALL")),
        }
    }
}

/// Redis restarted empty forgets a running call's claim and journal: the
/// replica running it claims it again and writes its journal anew, so
/// that the others read it and nobody calls the model again.
#[tokio::test]
async fn a_call_whose_claim_redis_forgot_is_claimed_again() {
    claimed_again_after(Forget::Restart).await;
}

/// The same when an operator flushed Redis.
#[tokio::test]
async fn a_call_whose_claim_a_flush_forgot_is_claimed_again() {
    claimed_again_after(Forget::Flush).await;
}

async fn claimed_again_after(forget: Forget) {
    let Some(mut redis) = RedisServer::start("a call Redis forgot") else { return };
    let mock = MockLlm::start(Reply::stream(&PIECES, Duration::from_millis(400))).await;
    let replicas = replicas(&redis, &mock);
    let http = megamind_core::http_client::client_builder().build().expect("a client");
    let call_id = "forgotten-1";
    let run = || asked(call_id);
    let client = Client::http(&replicas[0].base).expect("a client").with_scenario("assistant");
    client.call(Request::Run(run())).await.expect("/run answers");
    mock.wait_for_calls(1).await;
    forget.on(&mut redis);
    assert_one_call_read_alike(&http, &replicas, &mock, run()).await;
}

/// A stream opened just after Redis restarted empty, on a replica that
/// never saw the call, before the call's runner wrote its journal anew:
/// it waits for the journal rather than answer that no such call was
/// started, and streams the call whole.
#[tokio::test]
async fn a_stream_opened_just_after_redis_forgot_its_call_streams_it_whole() {
    stream_opened_after(Forget::Restart).await;
}

/// The same just after an operator flushed Redis: no connection dropped,
/// the replica finds its own mark gone with the call's journal.
#[tokio::test]
async fn a_stream_opened_just_after_a_flush_streams_its_call_whole() {
    stream_opened_after(Forget::Flush).await;
}

async fn stream_opened_after(forget: Forget) {
    let Some(mut redis) = RedisServer::start("a stream opened as Redis forgot its call") else { return };
    let mock = MockLlm::start(Reply::stream(&PIECES, Duration::from_millis(400))).await;
    let replicas = replicas(&redis, &mock);
    let http = megamind_core::http_client::client_builder().build().expect("a client");
    let call_id = "forgotten-stream-1";
    let client = Client::http(&replicas[0].base).expect("a client").with_scenario("assistant");
    client.call(Request::Run(asked(call_id))).await.expect("/run answers");
    mock.wait_for_calls(1).await;
    forget.on(&mut redis);
    let (status, streamed) = get(&http, &replicas[2].base, &format!("/llm/stream/{call_id}"), &[]).await;
    assert_eq!(status, StatusCode::OK, "{streamed}");
    assert_eq!(streamed_text(&valid(&streamed)), PIECES.concat());
    assert_eq!(mock.calls(), 1, "one model call");
}

/// Redis flushed while the user hears a call's answer: the hop that then
/// finds the call unclaimed, on a replica that does not run it, does not
/// run it anew (the user would hear the answer begin again, and its
/// runner give way); the runner claims it again at its next append, and
/// the turn hears the answer once and whole, from one model call.
#[tokio::test]
async fn a_call_heard_as_redis_is_flushed_is_not_begun_again_elsewhere() {
    let Some(redis) = RedisServer::start("a call heard at a flush") else { return };
    let mock = MockLlm::start(Reply::stream(&PIECES, Duration::from_millis(300))).await;
    let replicas = replicas(&redis, &mock);
    let clients: Vec<Client> = replicas
        .iter()
        .map(|replica| Client::http(&replica.base).expect("a client").with_scenario("assistant"))
        .collect();
    let started = Instant::now();
    let mut flushed = None;
    // The turn's /run, on replica 0, runs the call. Its first sentence
    // comes 1.8 s into it and the answer ends at 3.3 s: the flush comes
    // between, before a request to another replica.
    let hops = turn(&clients, "heard-flush-1", "который час?", |n| {
        if flushed.is_none() && n % 3 != 0 && started.elapsed() > Duration::from_millis(2_400) {
            redis.query::<()>(&mut redis::cmd("FLUSHALL"));
            flushed = Some(n);
        }
        n % 3
    })
    .await;
    let flushed = flushed.expect("flushed mid-turn");
    let heard =
        hops[..flushed].iter().filter_map(|hop| hop.response.body()).any(|body| speech(body).contains("Сейчас"));
    assert!(heard, "the flush came once the answer was being heard");
    assert_said_once_and_whole(&hops);
    assert_eq!(mock.calls(), 1, "one model call");
}

/// A call that ends while Redis is gone, its claim with it: once Redis is
/// back, its replica finds the claim lost and claims the call again, so
/// that its answer is everyone's.
#[tokio::test]
async fn a_call_that_ended_while_redis_was_gone_is_claimed_again_once_it_is_back() {
    let Some(mut redis) = RedisServer::start("a call ended while Redis was gone") else { return };
    let mock = MockLlm::start(Reply::stream(&PIECES, GAP)).await;
    let replicas = replicas(&redis, &mock);
    let http = megamind_core::http_client::client_builder().build().expect("a client");
    let run = asked("ended-away-1");
    let client = Client::http(&replicas[0].base).expect("a client").with_scenario("assistant");
    client.call(Request::Run(run.clone())).await.expect("/run answers");
    mock.wait_for_calls(1).await;
    redis.kill();
    mock.wait_for_served(1).await;
    redis.restart();
    assert_one_call_read_alike(&http, &replicas, &mock, run).await;
}

/// A stall longer than the lease: the call ends on replica 0 unseen, its
/// claim runs out, and replica 1 runs it again meanwhile. Whichever run
/// Redis holds in the end, no hop is answered from the other: on replica
/// 0, a hop during the stall says a filler, not its own run's answer.
#[tokio::test]
async fn a_call_whose_claim_ran_out_in_a_stall_is_not_answered_until_it_is_held_again() {
    const OTHER: [&str; 4] = ["Другой ", "ответ, ", "которого ", "быть не должно."];
    let Some(redis) = RedisServer::start("a claim run out in a stall") else { return };
    let mock = MockLlm::start(Reply::stream(&OTHER, Duration::from_millis(50))).await;
    mock.push(Reply::stream(&PIECES, Duration::from_millis(50)));
    let replicas = replicas(&redis, &mock);
    let http = megamind_core::http_client::client_builder().build().expect("a client");
    let run = asked("ran-out-1");
    let first = Client::http(&replicas[0].base).expect("a client").with_scenario("assistant");
    let hop = first.call(Request::Run(run.clone())).await.expect("/run answers");
    mock.wait_for_calls(1).await;
    let frozen = Instant::now();
    redis.freeze();
    let second = Client::http(&replicas[1].base).expect("a client").with_scenario("assistant");
    second.call(Request::Run(run.clone())).await.expect("/run answers");
    mock.wait_for_served(2).await;
    let hop = continued(&first, run, &hop).await;
    let body = hop.response.body().expect("an answer");
    let said = speech(body).to_owned();
    assert!(state_of(body).pending.is_some(), "held, not answered from a run Redis may not hold: {said:?}");
    // Past the 3 s lease.
    tokio::time::sleep(Duration::from_millis(3_500).saturating_sub(frozen.elapsed())).await;
    redis.thaw();

    // Read once every replica finds Redis back: until then, one that took
    // it for down serves what its own memory holds.
    for replica in &replicas {
        let up = async {
            loop {
                let metrics = http.get(format!("{}/metrics", replica.base)).send().await.unwrap();
                if metrics.text().await.unwrap().lines().any(|line| line == "megamind_store_up 1") {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), up).await.expect("Redis found back");
    }
    let mut answers = Vec::new();
    for replica in &replicas {
        let (status, answer) = ended_answer(&http, &replica.base, "ran-out-1").await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        answers.push(answer["content"]["raw_text"].as_str().expect("the answer's raw_text").to_owned());
    }
    assert!(answers.windows(2).all(|pair| pair[0] == pair[1]), "one answer everywhere: {answers:?}");
    let (ours, others) = (PIECES.concat(), OTHER.concat());
    assert!(answers[0] == ours || answers[0] == others, "a whole answer of one run: {answers:?}");
    let other_run = if answers[0] == ours { "Другой" } else { "Сейчас ровно" };
    assert!(!said.contains(other_run), "said {said:?} while every replica serves {:?}", answers[0]);
    assert_eq!(mock.calls(), 2);
}

/// A request on the replica running its call, while Redis answers
/// nothing, joins that run rather than call the model again.
#[tokio::test]
async fn a_replica_running_a_call_joins_it_during_a_redis_stall() {
    let Some(redis) = RedisServer::start("a repeat on the running replica during a stall") else { return };
    let mock = MockLlm::start(Reply::stream(&PIECES, GAP)).await;
    let replicas = replicas(&redis, &mock);
    let http = megamind_core::http_client::client_builder().build().expect("a client");
    let call_id = "joined-1";
    let run = asked(call_id);
    let client = Client::http(&replicas[0].base).expect("a client").with_scenario("assistant");
    client.call(Request::Run(run.clone())).await.expect("/run answers");
    mock.wait_for_calls(1).await;
    redis.freeze();
    let hop = client.call(Request::Run(run)).await.expect("/run answers");
    redis.thaw();
    assert!(hop.took < BUDGET + MARGIN, "answered in {:?}", hop.took);
    let (status, answer) = ended_answer(&http, &replicas[0].base, call_id).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["content"]["raw_text"].as_str(), Some(PIECES.concat().as_str()), "{answer}");
    assert_eq!(mock.calls(), 1, "the repeat joined the running call");
}

/// A replica that found Redis out of reach begins in its own memory a call
/// another replica runs in Redis. Once Redis answers again it gives way:
/// its own run stops, and it serves the other replica's call from then on.
#[tokio::test]
async fn a_call_begun_twice_during_a_redis_stall_gives_way_to_the_one_in_redis() {
    // Its first sentence, and what follows it, at once; the rest slower than the first call: it
    // would end after it, were it not stopped.
    const OTHER: [&str; 4] = ["Другой ответ. ", "Которого ", "быть ", "не должно."];
    let Some(redis) = RedisServer::start("a call begun twice during a Redis stall") else { return };
    let call_id = "gave-way-1";
    let (mock, replicas, second, hop) =
        begun_twice_in_a_stall(&redis, (&OTHER, 3, Duration::from_secs(1)), call_id).await;
    let http = megamind_core::http_client::client_builder().build().expect("a client");
    // Its /continue speaks none of it: another replica may hold the call.
    let hop = continued(&second, asked(call_id), &hop).await;
    let said = hop.response.body().map(speech).unwrap_or_default();
    assert!(!said.contains("Другой"), "a filler, not the second run's words: {said:?}");
    // A screen follows that second run on replica 1.
    let followed = told_to_reopen_after_the_thaw(&http, &replicas[1], &redis, call_id).await;
    assert!(!followed.contains("не должно"), "the second run stopped before its end:\n{followed}");
    let path = format!("/llm/stream/{call_id}");

    let whole = PIECES.concat();
    for replica in &replicas[..2] {
        let (status, answer) = ended_answer(&http, &replica.base, call_id).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        let content = &answer["content"];
        assert_eq!(
            content["raw_text"].as_str(),
            Some(whole.as_str()),
            "the call in Redis on {}: {answer}",
            replica.base
        );
    }
    let (_, own) = get(&http, &replicas[0].base, &path, &[]).await;
    let (status, given_way) = get(&http, &replicas[1].base, &path, &[]).await;
    assert_eq!(status, StatusCode::OK, "{given_way}");
    assert_eq!(parse_transcript(&given_way).0, valid(&own), "replica 1 streams replica 0's call");
    assert_eq!((mock.calls(), mock.served()), (2, 1), "the second model call was begun, and stopped");
}

#[tokio::test]
async fn a_call_that_ended_during_a_redis_stall_then_gave_way_is_not_shown_completed() {
    const OTHER: [&str; 2] = ["Другой ответ. ", "Которого быть не должно."];
    let Some(redis) = RedisServer::start("a call that ended during a stall, then gave way") else { return };
    let call_id = "ended-then-gave-way-1";
    // Replica 1's model answers whole at once: its run ends in the stall.
    let (mock, replicas, _, _) = begun_twice_in_a_stall(&redis, (&OTHER, OTHER.len(), GAP), call_id).await;
    let http = megamind_core::http_client::client_builder().build().expect("a client");
    mock.wait_for_served(1).await;
    // Redis holds replica 0's call: replica 1's run gives way although it
    // ended, and its stream says so rather than that it completed.
    let followed = told_to_reopen_after_the_thaw(&http, &replicas[1], &redis, call_id).await;
    let ended = valid(&followed);
    let completed = ended.iter().find(|event| event.name == "completed").map(|event| event.data.as_str());
    assert!(completed.is_some_and(|data| data.contains(r#""status":"failed""#)), "not completed:\n{followed}");
    let whole = PIECES.concat();
    let (status, answer) = ended_answer(&http, &replicas[1].base, call_id).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["content"]["raw_text"].as_str(), Some(whole.as_str()), "replica 0's call: {answer}");
    assert_eq!(mock.calls(), 2);
}

/// Follows call `call_id` on `replica` from before Redis is thawed to its
/// end, which must ask to open the stream anew; returns the transcript.
async fn told_to_reopen_after_the_thaw(
    http: &reqwest::Client,
    replica: &Replica,
    redis: &RedisServer,
    call_id: &str,
) -> String {
    let path = format!("/llm/stream/{call_id}");
    let following = http.get(format!("{}{}", replica.base, signed(&path))).send().await.unwrap();
    assert_eq!(following.status(), StatusCode::OK);
    redis.thaw();
    let followed = following.text().await.unwrap();
    let error = valid(&followed).into_iter().find(|event| event.name == "error").map(|event| event.data);
    assert!(error.is_some_and(|data| data.contains("open the stream anew")), "told to open it anew:\n{followed}");
    followed
}

/// Replica 0 begins call `call_id`, its model speaking [`PIECES`]; then,
/// with Redis frozen (and left so), replica 1 is asked the same `/run` and
/// begins the call again in its own memory, its model speaking `other`'s
/// pieces `gap` apart but the first `instant` of them at once. Returns the
/// model, the replicas, replica 1's client and its answer to that `/run`.
async fn begun_twice_in_a_stall(
    redis: &RedisServer,
    (other, instant, gap): (&[&str], usize, Duration),
    call_id: &str,
) -> (MockLlm, Vec<Replica>, Client, Hop) {
    let Reply::Sse { mut chunks } = Reply::stream(other, gap) else { unreachable!("a stream") };
    for chunk in &mut chunks[..instant] {
        chunk.0 = Duration::ZERO;
    }
    let mock = MockLlm::start(Reply::Sse { chunks }).await;
    mock.push(Reply::stream(&PIECES, GAP));
    let replicas = replicas(redis, &mock);
    let first = Client::http(&replicas[0].base).expect("a client").with_scenario("assistant");
    first.call(Request::Run(asked(call_id))).await.expect("/run answers");
    redis.freeze();
    let second = Client::http(&replicas[1].base).expect("a client").with_scenario("assistant");
    let hop = second.call(Request::Run(asked(call_id))).await.expect("/run answers");
    assert!(hop.took < BUDGET + MARGIN, "answered in {:?}", hop.took);
    mock.wait_for_calls(2).await;
    (mock, replicas, second, hop)
}
