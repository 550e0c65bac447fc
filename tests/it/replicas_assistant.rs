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
pub(crate) const PIECES: [&str; 10] =
    ["Сейчас ", "ровно ", "полдень ", "по ", "Москве. ", "Хорошего ", "вам ", "дня ", "и ", "до встречи!"];
pub(crate) const GAP: Duration = Duration::from_millis(150);

/// Three replicas of the assistant over `redis`, its model `mock`.
pub(crate) fn replicas(redis: &RedisServer, mock: &MockLlm) -> Vec<Replica> {
    replicas_with(redis, mock, &[])
}

/// As [`replicas`], with `extra` arguments.
pub(crate) fn replicas_with(redis: &RedisServer, mock: &MockLlm, extra: &[&str]) -> Vec<Replica> {
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

pub(crate) fn base(request_id: &str, state: Option<prost_types::Any>) -> TScenarioBaseRequest {
    TScenarioBaseRequest {
        request_id: request_id.into(),
        server_time_ms: 1_764_210_832_530,
        state,
        ..Default::default()
    }
}

pub(crate) fn callback_of(body: &TScenarioResponseBody) -> Option<TInput> {
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
pub(crate) async fn turn(
    clients: &[Client],
    call_id: &str,
    words: &str,
    route: impl FnMut(usize) -> usize,
) -> Vec<Hop> {
    Dialog::default().send(clients, call_id, text(words), route).await
}

/// The `/run` that asks "который час?" as call `call_id`.
pub(crate) fn asked(call_id: &str) -> TScenarioRunRequest {
    TScenarioRunRequest { base_request: Some(base(call_id, None)), input: Some(text("который час?")) }
}

pub(crate) fn text(words: &str) -> TInput {
    let text = TTextInput { utterance: words.into(), raw_utterance: words.into() };
    TInput { event: Some(t_input::Event::Text(text)), ..Default::default() }
}

/// A dialog played over replicas as Megamind plays it: the state it keeps
/// between turns, and the requests sent so far.
#[derive(Default)]
pub(crate) struct Dialog {
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
pub(crate) fn assert_said_once_and_whole(hops: &[Hop]) {
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
pub(crate) async fn get(
    http: &reqwest::Client,
    base: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, String) {
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

/// The `final_delta` texts of a stream, joined.
pub(crate) fn streamed_text(events: &[megamind_assistant::jsonseq::transcript::Event]) -> String {
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
    let (_, metrics) = get(&http, &replicas[0].base, "/metrics", &[]).await;
    let timed_out = r#"megamind_store_operations_total{op="append",outcome="timeout"}"#;
    assert!(crate::metrics::sample(&metrics, timed_out) >= Some(1.0), "an append timed out in the stall");

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

/// The replica running a call is killed (SIGKILL) mid-answer: its lease
/// runs out within 3 s of its last renewal, the next hop that needs the
/// call begins it again on another replica, and the user hears the whole
/// answer once, through the hops.
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

/// The `/continue` on `client` that follows `run`, whose answer `hop` handed over.
pub(crate) async fn continued(client: &Client, run: TScenarioRunRequest, hop: &Hop) -> Hop {
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
