//! The assistant on three server processes sharing one `redis-server`,
//! every request of an exchange on another replica, as a round-robin
//! balancer sends them: one model call per answer, and its stream and
//! whole answer the same from every replica.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use megamind_assistant::jsonseq::{parse_transcript, validate};
use megamind_core::proto::n_alice::n_scenarios::{
    TInput, TRunCommandDirective, TScenarioApplyRequest, TScenarioBaseRequest, TScenarioResponseBody,
    TScenarioRunRequest, TTextInput, t_directive, t_input, t_scenario_run_response,
};
use megamind_tools::client::{Client, Hop, Request};
use prost_types::value::Kind;
use reqwest::StatusCode;

use crate::{
    assistant_harness::{BUDGET, MARGIN, SIGNING_KEY, handed_over, signed, speech, state_of},
    llm_api::valid,
    mock_llm::{MockLlm, Reply},
    redis_server::RedisServer,
    replicas::Replica,
};

/// The model's answer, word by word over about 1.5 s.
const PIECES: [&str; 10] =
    ["Сейчас ", "ровно ", "полдень ", "по ", "Москве. ", "Хорошего ", "вам ", "дня ", "и ", "до встречи!"];
const GAP: Duration = Duration::from_millis(150);

/// Three replicas of the assistant over `redis`, its model `mock`.
fn replicas(redis: &RedisServer, mock: &MockLlm) -> Vec<Replica> {
    replicas_with(redis, mock, &[])
}

/// As [`replicas`], with `extra` arguments.
fn replicas_with(redis: &RedisServer, mock: &MockLlm, extra: &[&str]) -> Vec<Replica> {
    let base_url = mock.base_url();
    let mut args = vec![
        "--llm-base-url",
        base_url.as_str(),
        "--llm-api-key",
        "sk-test",
        "--llm-warmup",
        "off",
        "--llm-signing-key",
        SIGNING_KEY,
    ];
    args.extend_from_slice(extra);
    (0..3).map(|_| Replica::start_with(&redis.url(), &args)).collect()
}

fn base(request_id: &str, state: Option<prost_types::Any>) -> TScenarioBaseRequest {
    TScenarioBaseRequest {
        request_id: request_id.into(),
        server_time_ms: 1_764_210_832_530,
        state,
        ..Default::default()
    }
}

fn callback_of(body: &TScenarioResponseBody) -> Option<TInput> {
    let directives = &body.layout.as_ref()?.directives;
    directives.iter().find_map(|directive| match &directive.directive {
        Some(t_directive::Directive::CallbackDirective(callback)) => {
            Some(TInput { event: Some(t_input::Event::Callback(callback.clone())), ..Default::default() })
        }
        _ => None,
    })
}

/// One turn of `words` in a new dialog, request `n` of it sent to
/// replica `route(n)`.
async fn turn(clients: &[Client], call_id: &str, words: &str, route: impl FnMut(usize) -> usize) -> Vec<Hop> {
    Dialog::default().send(clients, call_id, text(words), route).await
}

/// The `/run` that asks "который час?" as call `call_id`.
fn asked(call_id: &str) -> TScenarioRunRequest {
    TScenarioRunRequest { base_request: Some(base(call_id, None)), input: Some(text("который час?")) }
}

fn text(words: &str) -> TInput {
    let text = TTextInput { utterance: words.into(), raw_utterance: words.into() };
    TInput { event: Some(t_input::Event::Text(text)), ..Default::default() }
}

/// A dialog played over replicas as Megamind plays it: the state it keeps
/// between turns, and the requests sent so far.
#[derive(Default)]
struct Dialog {
    state: Option<prost_types::Any>,
    sent: usize,
}

impl Dialog {
    /// One turn of `input`: `/run`, the `/continue` it hands over to, each
    /// callback's `/run` and its `/continue`, request `n` of the dialog sent
    /// to replica `route(n)`.
    async fn send(
        &mut self,
        clients: &[Client],
        call_id: &str,
        mut input: TInput,
        mut route: impl FnMut(usize) -> usize,
    ) -> Vec<Hop> {
        let mut hops = Vec::new();
        for n in 0..40 {
            let request_id = if n == 0 { call_id.to_owned() } else { format!("{call_id}-cb{n}") };
            let base_request = Some(base(&request_id, self.state.clone()));
            let run = TScenarioRunRequest { base_request: base_request.clone(), input: Some(input.clone()) };
            let hop = clients[route(self.sent)].call(Request::Run(run)).await.expect("/run answers");
            self.sent += 1;
            let irrelevant =
                hop.response.as_run().and_then(|run| run.features.as_ref()).is_some_and(|f| f.is_irrelevant);
            let body = match hop.response.as_run().and_then(|run| run.response.clone()) {
                Some(t_scenario_run_response::Response::ContinueArguments(arguments)) => {
                    hops.push(hop);
                    let apply =
                        TScenarioApplyRequest { arguments: Some(arguments), base_request, input: Some(input.clone()) };
                    let hop =
                        clients[route(self.sent)].call(Request::Continue(apply)).await.expect("/continue answers");
                    self.sent += 1;
                    let body = hop.response.body().cloned().expect("an answer");
                    hops.push(hop);
                    body
                }
                Some(t_scenario_run_response::Response::ResponseBody(body)) => {
                    hops.push(hop);
                    body
                }
                other => panic!("/run answered {other:?}"),
            };
            // Megamind keeps the state of a scenario that answered.
            if !irrelevant {
                self.state = body.state.clone();
            }
            match callback_of(&body) {
                Some(callback) => input = callback,
                None => return hops,
            }
        }
        panic!("the turn did not end in 40 callbacks");
    }
}

/// Every hop answered within the budget, and the answer reached the user
/// through callback hops, its start said once, its end said.
fn assert_said_once_and_whole(hops: &[Hop]) {
    for hop in hops {
        assert!(hop.took < BUDGET + MARGIN, "/{} answered after {:?}", hop.handler(), hop.took);
    }
    assert!(hops.len() >= 4, "the answer came through callback hops: {} hops", hops.len());
    let spoken: Vec<&str> =
        hops.iter().filter_map(|hop| hop.response.body()).map(speech).filter(|s| !s.is_empty()).collect();
    let said = spoken.join(" ");
    assert_eq!(said.matches("Сейчас ровно полдень").count(), 1, "said once: {spoken:?}");
    assert!(said.contains("до встречи!"), "the whole answer reached the user: {spoken:?}");
    let last = hops.last().and_then(|hop| hop.response.body()).expect("the last answer");
    assert!(state_of(last).pending.is_none(), "nothing left pending");
}

/// The whole body at `path` of the replica at `base`, with `headers`.
async fn get(http: &reqwest::Client, base: &str, path: &str, headers: &[(&str, &str)]) -> (StatusCode, String) {
    let mut request = http.get(format!("{base}{}", signed(path)));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("the replica answers");
    let status = response.status();
    (status, response.text().await.expect("a body"))
}

#[tokio::test]
async fn a_slow_answer_over_three_replicas_is_one_model_call_read_alike_everywhere() {
    let Some(redis) = RedisServer::start("the assistant over replicas") else { return };
    let mock = MockLlm::start(Reply::stream(&PIECES, GAP)).await;
    let replicas = replicas(&redis, &mock);
    let clients: Vec<Client> = replicas
        .iter()
        .map(|replica| Client::http(&replica.base).expect("a client").with_scenario("assistant"))
        .collect();
    let http = megamind_core::http_client::client_builder().build().expect("a client");
    let whole: String = PIECES.concat();

    // A screen opens the stream on replica 1 while the turn plays from
    // replica 0 on, reads a few events and drops the connection.
    let call_id = "rr-1";
    let turn = {
        let clients = &clients;
        async move { turn(clients, call_id, "который час?", |n| n % 3).await }
    };
    let early = async {
        // The stream opens once /run has claimed the call: it is unknown before.
        let path = format!("/llm/stream/{call_id}");
        let response = loop {
            let response = http.get(format!("{}{}", replicas[1].base, signed(&path))).send().await.unwrap();
            if response.status() == StatusCode::OK {
                break response;
            }
            assert_eq!(response.status(), StatusCode::NOT_FOUND, "not yet started");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let mut body = response.bytes_stream();
        let mut seen = String::new();
        while parse_transcript(&seen).0.iter().filter(|e| e.name == "final_delta").count() < 2 {
            seen.push_str(std::str::from_utf8(&body.next().await.expect("more events").unwrap()).unwrap());
        }
        // Dropped mid-answer; only whole events count.
        let (events, _) = parse_transcript(&seen);
        assert!(!events.iter().any(|e| e.name == "completed"), "read while the model speaks:\n{seen}");
        events
    };
    let (hops, early) = tokio::join!(turn, early);

    assert_said_once_and_whole(&hops);
    assert_eq!(mock.calls(), 1, "every hop, on every replica, joined the one model call");

    // The whole stream from replica 0, resumed on replica 2 after what
    // replica 1 sent: the same events under the same ids.
    let path = format!("/llm/stream/{call_id}");
    let (status, full) = get(&http, &replicas[0].base, &path, &[]).await;
    assert_eq!(status, StatusCode::OK, "{full}");
    let events = valid(&full);
    assert_eq!(streamed_text(&events), whole);
    assert_eq!(early, events[..early.len()], "replica 1 streamed the same events as replica 0");
    let last_id = early.last().and_then(|e| e.id.clone()).expect("an id");
    let (status, rest) = get(&http, &replicas[2].base, &path, &[("last-event-id", &last_id)]).await;
    assert_eq!(status, StatusCode::OK, "{rest}");
    let mut resumed = early.clone();
    resumed.extend(parse_transcript(&rest).0);
    assert_eq!(resumed, events, "resumed on replica 2 where replica 1 left off");
    assert!(validate(&resumed).is_empty(), "and valid JSONSeq as a whole");

    // The whole answer, and its ETag, alike on every replica.
    let answers = format!("/llm/answers/{call_id}");
    let mut bodies = Vec::new();
    for replica in &replicas {
        let response = http.get(format!("{}{}", replica.base, signed(&answers))).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let etag = response.headers().get("etag").map(|v| v.to_str().unwrap().to_owned());
        bodies.push((etag, response.text().await.unwrap()));
    }
    assert!(bodies.windows(2).all(|pair| pair[0] == pair[1]), "{bodies:#?}");
    let whole_part: serde_json::Value = serde_json::from_str(&bodies[0].1).unwrap();
    assert!(bodies[0].0.is_some(), "an ETag");
    let answer = &whole_part["content"];
    assert_eq!((answer["status"].as_str(), answer["raw_text"].as_str()), (Some("completed"), Some(whole.as_str())));
    assert_eq!(mock.calls(), 1, "reading never calls the model");
}

/// The replica running a call is killed (SIGKILL) mid-answer: its lease
/// runs out within 3 s of its last renewal, the next hop that needs the
/// call begins it again on another replica, and the user hears the whole
/// answer once, through the hops.
/// The `final_delta` texts of a stream, joined.
fn streamed_text(events: &[megamind_assistant::jsonseq::transcript::Event]) -> String {
    events
        .iter()
        .filter(|e| e.name == "final_delta")
        .map(|e| serde_json::from_str::<serde_json::Value>(&e.data).unwrap()["text"].as_str().unwrap().to_owned())
        .collect()
}

/// Appends that time out on a stalled Redis are carried out once it
/// wakes, and their entries come again with the next append: each must
/// land in the call's journal once.
#[tokio::test]
async fn a_redis_stall_mid_answer_leaves_each_event_in_the_journal_once() {
    let Some(redis) = RedisServer::start("a Redis stall mid-answer") else { return };
    let mock = MockLlm::start(Reply::stream(&PIECES, GAP)).await;
    let replicas = replicas(&redis, &mock);
    let client = Client::http(&replicas[0].base).expect("a client").with_scenario("assistant");
    let http = megamind_core::http_client::client_builder().build().expect("a client");
    let call_id = "stall-1";
    let run = asked(call_id);
    client.call(Request::Run(run)).await.expect("/run answers");

    // Once the journal carries the answer's first words, Redis stalls for
    // longer than an append's timeout, while the model goes on speaking.
    let path = format!("/llm/stream/{call_id}");
    let response = http.get(format!("{}{}", replicas[1].base, signed(&path))).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.bytes_stream();
    let mut seen = String::new();
    while parse_transcript(&seen).0.iter().filter(|e| e.name == "final_delta").count() < 2 {
        seen.push_str(std::str::from_utf8(&body.next().await.expect("more events").unwrap()).unwrap());
    }
    drop(body);
    redis.freeze();
    tokio::time::sleep(Duration::from_millis(500)).await;
    redis.thaw();

    // The whole stream, read where the call ran once it is over, and on the others.
    let (status, full) = get(&http, &replicas[0].base, &path, &[]).await;
    assert_eq!(status, StatusCode::OK, "{full}");
    let events = valid(&full);
    assert_eq!(streamed_text(&events), PIECES.concat(), "the runner's own stream");
    for replica in &replicas[1..] {
        let (status, mirrored) = get(&http, &replica.base, &path, &[]).await;
        assert_eq!(status, StatusCode::OK, "{mirrored}");
        assert_eq!(parse_transcript(&mirrored).0, events, "the same events under the same ids on {}", replica.base);
    }
    let answers = format!("/llm/answers/{call_id}");
    for replica in &replicas {
        let (status, body) = get(&http, &replica.base, &answers, &[]).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(answer["content"]["raw_text"].as_str(), Some(PIECES.concat().as_str()), "on {}", replica.base);
    }
    assert_eq!(mock.calls(), 1, "one model call");
}

#[tokio::test]
async fn a_replica_killed_mid_answer_hands_its_call_to_the_next_one_that_needs_it() {
    let Some(redis) = RedisServer::start("a replica killed mid-answer") else { return };
    let mock = MockLlm::start(Reply::stream(&PIECES, GAP)).await;
    let mut replicas = replicas(&redis, &mock);
    let clients: Vec<Client> = replicas
        .iter()
        .map(|replica| Client::http(&replica.base).expect("a client").with_scenario("assistant"))
        .collect();
    let http = megamind_core::http_client::client_builder().build().expect("a client");
    let call_id = "killed-1";
    let replicas_base: Vec<String> = replicas.iter().map(|replica| replica.base.clone()).collect();
    let mut killed_at = None;
    // /run on replica 0 claims and runs the call; replica 0 dies right
    // after it answered; the rest of the exchange alternates between 1 and 2.
    let turn = turn(&clients, call_id, "который час?", |n| {
        if n == 1 {
            replicas[0].kill();
            killed_at = Some(Instant::now());
        }
        if n == 0 { 0 } else { 1 + n % 2 }
    });
    let taken_over = async {
        mock.wait_for_calls(2).await;
        Instant::now()
    };
    // A screen following the call on replica 1 from its start: its stream
    // ends when the run it follows does, as valid JSONSeq.
    let path = format!("/llm/stream/{call_id}");
    let following = async {
        loop {
            let (status, body) = get(&http, &replicas_base[1], &path, &[]).await;
            if status == StatusCode::OK {
                break body;
            }
            assert_eq!(status, StatusCode::NOT_FOUND, "not yet started: {body}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let (hops, taken_over, followed) = tokio::join!(turn, taken_over, following);
    let killed_at = killed_at.expect("killed after /run");
    let followed = valid(&followed);
    let ended: Vec<&str> = followed.iter().rev().take(2).map(|e| e.name.as_str()).collect();
    assert_eq!(ended, ["completed", "error"], "the dead run's stream ends with error, completed: {followed:?}");

    assert_said_once_and_whole(&hops);
    assert_eq!(mock.calls(), 2, "the dead replica's call, and one more: the takeover");
    let takeover = taken_over.duration_since(killed_at);
    assert!(takeover < Duration::from_millis(4_500), "taken over {takeover:?} after the kill (lease 3 s and a hop)");

    // A reader on a live replica reads the new run whole, as valid JSONSeq.
    let (status, stream) = get(&http, &replicas_base[2], &format!("/llm/stream/{call_id}"), &[]).await;
    assert_eq!(status, StatusCode::OK, "{stream}");
    let events = valid(&stream);
    assert_eq!(events.last().map(|e| e.name.as_str()), Some("completed"));
    assert!(stream.contains("встречи!") && !stream.contains("model_failed"), "{stream}");
    let (status, answer) = get(&http, &replicas_base[1], &format!("/llm/answers/{call_id}"), &[]).await;
    assert_eq!(status, StatusCode::OK);
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["content"]["status"], "completed", "{answer}");
}

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
        answers.push(answer["content"]["raw_text"].as_str().unwrap_or_default().to_owned());
    }
    assert!(answers.windows(2).all(|pair| pair[0] == pair[1]), "one answer everywhere: {answers:?}");
    let other_run =
        if answers[0].starts_with("Сейчас ровно") { "Другой" } else { "Сейчас ровно" };
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

/// The `/continue` on `client` that follows `run`, whose answer `hop` handed over.
async fn continued(client: &Client, run: TScenarioRunRequest, hop: &Hop) -> Hop {
    let arguments = Some(handed_over(hop));
    let apply = TScenarioApplyRequest { arguments, base_request: run.base_request, input: run.input };
    client.call(Request::Continue(apply)).await.expect("/continue answers")
}

/// The command a skill's step asked the client to run.
fn run_command_of(hops: &[Hop]) -> TRunCommandDirective {
    let body = hops.last().and_then(|hop| hop.response.body()).expect("an answer");
    let directives = &body.layout.as_ref().expect("a layout").directives;
    directives
        .iter()
        .find_map(|directive| match &directive.directive {
            Some(t_directive::Directive::RunCommandDirective(run)) => Some(run.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("a RunCommandDirective in {body:?}"))
}

/// The result of `run` as the client sends it: its callback, completed.
fn command_result(run: &TRunCommandDirective, output: &str) -> TInput {
    let mut callback = run.callback.clone().expect("a callback");
    let fields = &mut callback.payload.get_or_insert_with(Default::default).fields;
    let value = |kind| prost_types::Value { kind: Some(kind) };
    fields.insert("output".into(), value(Kind::StringValue(output.into())));
    fields.insert("exit_code".into(), value(Kind::NumberValue(0.0)));
    fields.insert("skipped".into(), value(Kind::BoolValue(false)));
    TInput { event: Some(t_input::Event::Callback(callback)), ..Default::default() }
}

fn last_speech(hops: &[Hop]) -> &str {
    hops.last().and_then(|hop| hop.response.body()).map(speech).expect("an answer")
}

/// The shipped `git-quick-commit` skill, every request of every turn on
/// the next replica: one model call per step (a `[MESSAGE]`'s next step
/// too, started by one replica and fetched by another), and the step's
/// result sent again (to yet another replica) declined as stale.
#[tokio::test]
async fn the_git_quick_commit_skill_plays_with_every_request_on_another_replica() {
    let Some(redis) = RedisServer::start("a skill over replicas") else { return };
    let mock = MockLlm::start(Reply::status(500)).await;
    for answer in [
        "[CMD] git status --porcelain",
        "[MESSAGE] Вижу одно изменение.",
        "[ASK] Введи сообщение коммита:",
        "[CMD] git add . && git commit -m \"fix: update skills API\"",
        "[DONE] Коммит успешно создан: abc1234. Изменён 1 файл.",
    ] {
        mock.push(Reply::content(answer));
    }
    let skills = format!("{}/skills", env!("CARGO_MANIFEST_DIR"));
    let replicas = replicas_with(&redis, &mock, &["--skills-dir", &skills]);
    let clients: Vec<Client> = replicas
        .iter()
        .map(|replica| Client::http(&replica.base).expect("a client").with_scenario("assistant"))
        .collect();
    let (mut dialog, mut route) = (Dialog::default(), |n: usize| n % 3);

    let started = dialog.send(&clients, "skill-1", text("Запусти навык git-quick-commit"), &mut route).await;
    let run = run_command_of(&started);
    assert_eq!(run.command, "git status --porcelain");
    // The [MESSAGE] is said by one replica, which starts the next step at
    // once; its callback lands on another, which joins that call.
    let asked = dialog.send(&clients, "skill-2", command_result(&run, " M server/skills.js\n"), &mut route).await;
    let said: Vec<&str> = asked.iter().filter_map(|hop| hop.response.body()).map(speech).collect();
    assert_eq!(said.first().copied(), Some("Вижу одно изменение."), "{said:?}");
    assert_eq!(last_speech(&asked), "Введи сообщение коммита:");
    let committing = dialog.send(&clients, "skill-3", text("fix: update skills API"), &mut route).await;
    let run = run_command_of(&committing);
    assert_eq!(run.command, "git add . && git commit -m \"fix: update skills API\"");
    let output = "[main abc1234] fix: update skills API\n 1 file changed";
    let done = dialog.send(&clients, "skill-4", command_result(&run, output), &mut route).await;
    assert_eq!(last_speech(&done), "Коммит успешно создан: abc1234. Изменён 1 файл.");
    assert_eq!(mock.calls(), 5, "one model call per step, whichever replica took it");
    for hop in started.iter().chain(&asked).chain(&committing).chain(&done) {
        assert!(hop.took < BUDGET + MARGIN, "/{} answered after {:?}", hop.handler(), hop.took);
    }

    let again = dialog.send(&clients, "skill-5", command_result(&run, "again"), &mut route).await;
    let declined = again.last().and_then(|hop| hop.response.as_run()).and_then(|run| run.features.as_ref());
    assert!(declined.is_some_and(|features| features.is_irrelevant), "a stale result is declined: {again:?}");
    assert_eq!(mock.calls(), 5, "and calls nothing");
}
