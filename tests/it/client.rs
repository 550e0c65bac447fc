//! The protocol client against a scripted scenario on the real server, over
//! HTTP and gRPC: the hand-overs Megamind follows, `State` and the session,
//! callbacks and their bound, and how each failure reads.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use megamind_core::{
    config::Config,
    proto::n_alice::n_scenarios::{
        TCallbackDirective, TClientInfo, TCommitCandidate, TCommitSuccess, TDirective, TLayout, TScenarioApplyRequest,
        TScenarioApplyResponse, TScenarioBaseRequest, TScenarioCommitResponse, TScenarioContinueResponse,
        TScenarioFeatures, TScenarioResponseBody, TScenarioRunRequest, TScenarioRunResponse, t_directive, t_input,
        t_scenario_apply_response, t_scenario_commit_response, t_scenario_continue_response,
        t_scenario_run_response::Response as Run,
    },
    scenario::{CallContext, Handler, Scenario, ScenarioError, ScenarioResult},
};
use megamind_tools::client::{Client, ClientError, Request};
use prost_types::{Any, Struct, Value, value::Kind};
use tokio::sync::Semaphore;

use crate::{
    helpers::{TRANSPORTS, TestApp, Transport, registry_of, scenario_client, spawn_app},
    scenarios::Counting,
};

/// One request the scenario received (a `/run` one without `Arguments`).
#[derive(Debug, Clone)]
struct Seen {
    handler: Handler,
    request: TScenarioApplyRequest,
    user_ticket: Option<String>,
}

impl Seen {
    fn base(&self) -> &TScenarioBaseRequest {
        self.request.base_request.as_ref().expect("a BaseRequest")
    }

    fn state(&self) -> Option<u64> {
        self.base().state.as_ref().map(|_| answers_before(self.base()))
    }
}

/// Answers by the words it hears, counting its answers in its `State`:
/// `привет` is answered in `/run`; `дальше` hands over to `/continue`,
/// `купи` to `/commit`, `примени` to `/apply`; `перезвони N` asks for N
/// callbacks (`ещё N-1`, ..., `ещё 0`), the last handing over to
/// `/continue`; `мимо` declines; `ошибка` fails; `пусто` answers nothing;
/// `жди` never answers.
#[derive(Default)]
struct Scripted {
    seen: Mutex<Vec<Seen>>,
    commits: AtomicUsize,
}

impl Scripted {
    /// Records `request`; its `BaseRequest`.
    fn record(&self, handler: Handler, request: TScenarioApplyRequest, ctx: &CallContext) -> TScenarioBaseRequest {
        let base = request.base_request.clone().unwrap_or_default();
        self.seen.lock().unwrap().push(Seen { handler, request, user_ticket: ctx.meta.user_ticket.clone() });
        base
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// The number of answers the scenario gave before, read from `State`.
fn answers_before(base: &TScenarioBaseRequest) -> u64 {
    base.state.as_ref().map_or(0, |state| String::from_utf8_lossy(&state.value).parse().expect("our state"))
}

fn counted(n: u64) -> Any {
    Any { type_url: "type.googleapis.com/test.Answers".into(), value: n.to_string().into_bytes() }
}

fn step(words: &str) -> Any {
    Any { type_url: "type.googleapis.com/test.Step".into(), value: words.as_bytes().to_vec() }
}

fn body(speech: &str, base: &TScenarioBaseRequest, directives: Vec<TDirective>) -> TScenarioResponseBody {
    TScenarioResponseBody {
        layout: Some(TLayout { output_speech: speech.into(), directives, ..Default::default() }),
        state: Some(counted(answers_before(base) + 1)),
        ..Default::default()
    }
}

/// A `CallbackDirective` asking for `left` more after this one.
fn callback(left: f64) -> Vec<TDirective> {
    let payload = Struct { fields: [("left".to_owned(), Value { kind: Some(Kind::NumberValue(left)) })].into() };
    let callback = TCallbackDirective { name: "again".into(), payload: Some(payload), ..Default::default() };
    vec![TDirective { directive: Some(t_directive::Directive::CallbackDirective(callback)) }]
}

/// `Payload.left` of a callback the scenario asked for.
fn left(callback: &TCallbackDirective) -> Option<f64> {
    match callback.payload.as_ref()?.fields.get("left")?.kind {
        Some(Kind::NumberValue(left)) => Some(left),
        _ => None,
    }
}

#[async_trait]
impl Scenario for Scripted {
    async fn run(&self, request: TScenarioRunRequest, ctx: CallContext) -> ScenarioResult<TScenarioRunResponse> {
        let seen = TScenarioApplyRequest { arguments: None, base_request: request.base_request, input: request.input };
        let base = self.record(Handler::Run, seen.clone(), &ctx);
        let words = match seen.input.and_then(|input| input.event) {
            Some(t_input::Event::Text(text)) => text.utterance,
            Some(t_input::Event::Voice(voice)) => voice.utterance,
            Some(t_input::Event::Callback(callback)) => match left(&callback) {
                Some(left) => format!("ещё {left}"),
                None => return Err(ScenarioError::BadRequest(format!("callback without `left`: {callback:?}"))),
            },
            None => String::new(),
        };
        let features = Some(TScenarioFeatures { is_irrelevant: words == "мимо", ..Default::default() });
        let response = match words.split_whitespace().collect::<Vec<_>>()[..] {
            ["привет"] => Run::ResponseBody(body("Привет!", &base, vec![])),
            ["дальше"] => Run::ContinueArguments(step("дальше")),
            ["ещё", "0"] => Run::ContinueArguments(step("готово")),
            ["купи"] => Run::CommitCandidate(TCommitCandidate {
                response_body: Some(body("Покупаю.", &base, vec![])),
                arguments: Some(step("купи")),
            }),
            ["примени"] => Run::ApplyArguments(step("примени")),
            ["перезвони", n] => {
                Run::ResponseBody(body("Минутку.", &base, callback(n.parse::<f64>().unwrap() - 1.0)))
            }
            ["ещё", left] => {
                Run::ResponseBody(body("Ещё минутку.", &base, callback(left.parse::<f64>().unwrap() - 1.0)))
            }
            ["мимо"] => Run::ResponseBody(body("Это не ко мне.", &base, vec![])),
            ["пусто"] => return Ok(TScenarioRunResponse::default().into()),
            ["жди"] => std::future::pending().await,
            _ => return Err(ScenarioError::BadRequest(format!("no script for {words:?}"))),
        };
        Ok(TScenarioRunResponse { response: Some(response), features, ..Default::default() }.into())
    }

    async fn r#continue(
        &self,
        request: TScenarioApplyRequest,
        ctx: CallContext,
    ) -> ScenarioResult<TScenarioContinueResponse> {
        let words = String::from_utf8_lossy(&request.arguments.clone().unwrap_or_default().value).into_owned();
        let base = self.record(Handler::Continue, request, &ctx);
        let body = body(&format!("Продолжаю: {words}."), &base, vec![]);
        let response = Some(t_scenario_continue_response::Response::ResponseBody(body));
        Ok(TScenarioContinueResponse { response, ..Default::default() }.into())
    }

    async fn commit(
        &self,
        request: TScenarioApplyRequest,
        ctx: CallContext,
    ) -> ScenarioResult<TScenarioCommitResponse> {
        self.record(Handler::Commit, request, &ctx);
        self.commits.fetch_add(1, Ordering::SeqCst);
        let response = Some(t_scenario_commit_response::Response::Success(TCommitSuccess {}));
        Ok(TScenarioCommitResponse { response, ..Default::default() }.into())
    }

    async fn apply(&self, request: TScenarioApplyRequest, ctx: CallContext) -> ScenarioResult<TScenarioApplyResponse> {
        let base = self.record(Handler::Apply, request, &ctx);
        let response = Some(t_scenario_apply_response::Response::ResponseBody(body("Применяю.", &base, vec![])));
        Ok(TScenarioApplyResponse { response, ..Default::default() }.into())
    }
}

/// The server hosting only [`Scripted`] and a client of it over `transport`,
/// RequestIds `t-1`, `t-2`, ...
async fn scripted(transport: Transport) -> (TestApp, Arc<Scripted>, Client) {
    let scenario = Arc::new(Scripted::default());
    let app = spawn_app(Config::default(), registry_of("scripted", scenario.clone())).await;
    let client = scenario_client(&app, transport, "scripted").with_request_id_prefix("t-");
    (app, scenario, client)
}

fn handlers_and_ids(hops: &[megamind_tools::client::Hop]) -> Vec<(Handler, &str)> {
    hops.iter().map(|hop| (hop.handler(), hop.request_id())).collect()
}

#[tokio::test]
async fn each_hand_over_is_followed_under_the_turns_request_id() {
    for transport in TRANSPORTS {
        let (_app, scenario, mut client) = scripted(transport).await;
        let turn = client.say("дальше").await.unwrap();
        assert_eq!(handlers_and_ids(&turn.hops), [(Handler::Run, "t-1"), (Handler::Continue, "t-1")], "{transport:?}");
        assert_eq!(turn.speech(), "Продолжаю: дальше.");
        let seen = scenario.seen();
        assert_eq!(seen[1].request.arguments, Some(step("дальше")), "/continue gets the ContinueArguments");
        let (run, handed_over) = (&seen[0].request, &seen[1].request);
        assert_eq!(handed_over.base_request, run.base_request, "with /run's BaseRequest");
        assert_eq!(handed_over.input, run.input, "and Input");

        let turn = client.say("купи").await.unwrap();
        assert_eq!(handlers_and_ids(&turn.hops), [(Handler::Run, "t-2"), (Handler::Commit, "t-2")]);
        assert_eq!(turn.speech(), "Покупаю.", "the candidate's answer is what the user hears");
        assert_eq!(scenario.seen()[3].request.arguments, Some(step("купи")));
        assert_eq!(scenario.commits.load(Ordering::SeqCst), 1);

        let turn = client.say("примени").await.unwrap();
        assert_eq!(handlers_and_ids(&turn.hops), [(Handler::Run, "t-3"), (Handler::Apply, "t-3")]);
        assert_eq!(turn.speech(), "Применяю.");
        assert_eq!(scenario.seen()[5].request.arguments, Some(step("примени")));
        assert!(turn.hops.iter().all(|hop| hop.took > Duration::ZERO && hop.took < Duration::from_secs(1)));
    }
}

#[tokio::test]
async fn state_goes_back_each_turn_and_only_the_first_opens_the_session() {
    for transport in TRANSPORTS {
        let (_app, scenario, mut client) = scripted(transport).await;
        for words in ["привет", "дальше", "купи"] {
            client.say(words).await.unwrap();
        }
        assert_eq!(client.state(), Some(&counted(3)), "{transport:?}");
        let runs: Vec<(Option<u64>, bool)> = scenario
            .seen()
            .iter()
            .filter(|seen| seen.handler == Handler::Run)
            .map(|seen| (seen.state(), seen.base().is_new_session))
            .collect();
        assert_eq!(runs, [(None, true), (Some(1), false), (Some(2), false)]);

        client.new_session();
        let turn = client.say("привет").await.unwrap();
        assert_eq!(turn.state(), Some(&counted(1)));
        let last = scenario.seen().pop().unwrap();
        assert_eq!((last.state(), last.base().is_new_session), (None, true));
        let now = last.base().server_time_ms;
        assert!(now > 1_700_000_000_000, "ServerTimeMs is the time of the request: {now}");
    }
}

#[tokio::test]
async fn callbacks_are_sent_back_with_fresh_request_ids_and_the_state_they_came_with() {
    for transport in TRANSPORTS {
        let (_app, scenario, mut client) = scripted(transport).await;
        let turn = client.say("перезвони 2").await.unwrap();
        let hops = handlers_and_ids(&turn.hops);
        assert_eq!(
            hops,
            [(Handler::Run, "t-1"), (Handler::Run, "t-2"), (Handler::Run, "t-3"), (Handler::Continue, "t-3")]
        );
        assert_eq!(turn.speeches(), ["Минутку.", "Ещё минутку.", "Продолжаю: готово."], "{transport:?}");
        assert_eq!(turn.speech(), "Продолжаю: готово.");
        assert!(turn.directives().is_empty());

        let seen = scenario.seen();
        let callbacks: Vec<(String, Option<f64>)> = seen[1..3]
            .iter()
            .map(|seen| match seen.request.input.clone().and_then(|input| input.event) {
                Some(t_input::Event::Callback(callback)) => (callback.name.clone(), left(&callback)),
                other => panic!("Input.Callback, got {other:?}"),
            })
            .collect();
        let asked = [("again".to_owned(), Some(1.0)), ("again".to_owned(), Some(0.0))];
        assert_eq!(callbacks, asked, "Name and Payload as the directives gave them");
        let states: Vec<Option<u64>> = seen.iter().map(Seen::state).collect();
        assert_eq!(states, [None, Some(1), Some(2), Some(2)]);
        assert_eq!(client.state(), Some(&counted(3)));
    }
}

#[tokio::test]
async fn callbacks_past_the_bound_are_an_error_that_says_so() {
    for transport in TRANSPORTS {
        let (_app, scenario, client) = scripted(transport).await;
        let mut client = client.with_max_callbacks(5);
        let error = client.say("перезвони 6").await.unwrap_err();
        assert!(matches!(error, ClientError::TooManyCallbacks { max: 5 }), "{transport:?}: {error}");
        assert!(error.to_string().contains("after 5 callbacks"), "{error}");
        assert_eq!(scenario.seen().len(), 6, "the first /run and five callbacks");

        let mut client = client.with_max_callbacks(1);
        assert!(client.say("перезвони 1").await.is_ok());
        let error = client.say("перезвони 2").await.unwrap_err();
        assert!(matches!(error, ClientError::TooManyCallbacks { max: 1 }), "{error}");
    }
}

#[tokio::test]
async fn protocol_errors_odd_answers_and_declines_read_clearly() {
    for transport in TRANSPORTS {
        let (_app, _, mut client) = scripted(transport).await;
        let error = client.say("ошибка").await.unwrap_err();
        let ClientError::Protocol { handler: Handler::Run, kind, message } = &error else { panic!("{error:?}") };
        assert_eq!(kind, "bad_request", "{transport:?}");
        assert!(message.contains("ошибка"), "{message}");
        assert!(error.to_string().starts_with("/run answered the protocol Error \"bad_request\""), "{error}");

        let error = client.say("пусто").await.unwrap_err();
        assert!(matches!(error, ClientError::Unexpected { handler: Handler::Run, .. }), "{error:?}");
        assert!(error.to_string().contains("no Response"), "{error}");

        let turn = client.say("мимо").await.unwrap();
        assert!(turn.is_irrelevant());
        assert_eq!(turn.speech(), "Это не ко мне.", "a decline still says why");
        assert!(!client.say("привет").await.unwrap().is_irrelevant());
    }
}

#[tokio::test]
async fn voice_the_user_ticket_and_the_base_request_template_reach_the_scenario() {
    for transport in TRANSPORTS {
        let (_app, scenario, client) = scripted(transport).await;
        let template = TScenarioBaseRequest {
            server_time_ms: 1_764_210_832_530,
            client_info: Some(TClientInfo { app_id: "ru.yandex.quasar".into(), ..Default::default() }),
            request_id: "ignored".into(),
            ..Default::default()
        };
        let mut client = client.with_user_ticket("3:user:ticket").with_base_request(template);
        assert_eq!(client.say_voice("привет").await.unwrap().speech(), "Привет!");
        let seen = scenario.seen().remove(0);
        let Some(t_input::Event::Voice(voice)) = seen.request.input.clone().and_then(|input| input.event) else {
            panic!("voice")
        };
        assert_eq!((voice.utterance.as_str(), voice.asr_data[0].words.len()), ("привет", 1), "{transport:?}");
        assert_eq!(seen.user_ticket.as_deref(), Some("3:user:ticket"));
        assert_eq!((seen.base().request_id.as_str(), seen.base().server_time_ms), ("t-1", 1_764_210_832_530));
        assert_eq!(seen.base().client_info.as_ref().unwrap().app_id, "ru.yandex.quasar");
    }
}

#[tokio::test]
async fn statuses_timeouts_and_a_missing_server_are_errors_with_their_reason() {
    for transport in TRANSPORTS {
        let (app, _, client) = scripted(transport).await;
        let error = scenario_client(&app, transport, "nope").say("привет").await.unwrap_err();
        match (&error, transport) {
            (ClientError::Status { handler: Handler::Run, status, body }, Transport::Http) => {
                assert_eq!(*status, 404);
                assert!(body.contains("nope"), "{body}");
            }
            (ClientError::Grpc { handler: Handler::Run, code, message }, Transport::Grpc) => {
                assert_eq!(*code, tonic::Code::NotFound);
                assert!(message.contains("nope"), "{message}");
            }
            _ => panic!("{transport:?}: {error:?}"),
        }

        // The server answers `timeout` at its budget; the client's own timeout comes first.
        let mut impatient = client.with_timeout(Duration::from_millis(50));
        let error = impatient.say("жди").await.unwrap_err();
        assert!(matches!(error, ClientError::Timeout { handler: Handler::Run, .. }), "{transport:?}: {error:?}");
        let mut patient = scenario_client(&app, transport, "scripted");
        let error = patient.say("жди").await.unwrap_err();
        assert!(matches!(&error, ClientError::Protocol { kind, .. } if kind == "timeout"), "{error:?}");

        let gone = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
        let error = match transport {
            Transport::Http => Client::http(&gone.to_string()),
            Transport::Grpc => Client::grpc(&gone.to_string()),
        };
        let error = error.unwrap().say("привет").await.unwrap_err();
        assert!(
            matches!(error, ClientError::Unreachable { .. } | ClientError::Grpc { code: tonic::Code::Unavailable, .. }),
            "{transport:?}: {error:?}"
        );
    }
    assert!(matches!(Client::http("ftp://example.org"), Err(ClientError::Setting { .. })));
    assert!(matches!(Client::grpc("http://bad host"), Err(ClientError::Setting { .. })));
}

#[tokio::test]
async fn overload_is_a_429_over_http_and_resource_exhausted_over_grpc() {
    for transport in TRANSPORTS {
        let gate = Arc::new(Semaphore::new(0));
        let counting = Arc::new(Counting::gated(gate.clone()));
        let config = Config { max_in_flight: 1, ..Config::default() };
        let app = spawn_app(config, registry_of("counting", counting.clone())).await;
        let entered = counting.entered.notified();
        let holder = scenario_client(&app, transport, "counting");
        let held = tokio::spawn(async move {
            let mut holder = holder;
            holder.say("держу").await
        });
        entered.await;
        let error = scenario_client(&app, transport, "counting").say("ещё").await.unwrap_err();
        match (&error, transport) {
            (ClientError::Status { status, body, .. }, Transport::Http) => {
                assert_eq!(*status, 429);
                assert!(body.contains("overloaded"), "{body}");
            }
            (ClientError::Grpc { code: tonic::Code::ResourceExhausted, .. }, Transport::Grpc) => {}
            _ => panic!("{transport:?}: {error:?}"),
        }
        gate.add_permits(1);
        // Counting answers no Response (or, on a slow machine, the budget ran out first).
        assert!(held.await.unwrap().is_err());
    }
}

#[tokio::test]
async fn call_sends_one_request_as_it_is_and_returns_the_protocol_error() {
    for transport in TRANSPORTS {
        let (_app, scenario, client) = scripted(transport).await;
        let request = TScenarioApplyRequest {
            arguments: Some(step("чужое")),
            base_request: Some(TScenarioBaseRequest { request_id: "raw-1".into(), ..Default::default() }),
            input: None,
        };
        let hop = client.call(Request::Commit(request.clone())).await.unwrap();
        assert_eq!((hop.handler(), hop.request_id()), (Handler::Commit, "raw-1"));
        assert_eq!(hop.request, Request::Commit(request));
        assert!(hop.response.error().is_none(), "{transport:?}: {:?}", hop.response);
        assert_eq!(scenario.commits.load(Ordering::SeqCst), 1);

        let no_id = TScenarioRunRequest::default();
        let hop = client.call(Request::Run(no_id)).await.unwrap();
        assert_eq!(hop.response.error().expect("a protocol Error").r#type, "bad_request", "{:?}", hop.response);
        assert!(scenario.seen().iter().all(|seen| seen.handler == Handler::Commit), "refused before the scenario");
    }
}

#[tokio::test]
async fn a_round_robin_client_sends_each_call_of_a_turn_to_the_next_replica() {
    let (first, second) = (Arc::new(Scripted::default()), Arc::new(Scripted::default()));
    let app0 = spawn_app(Config::default(), registry_of("scripted", first.clone())).await;
    let app1 = spawn_app(Config::default(), registry_of("scripted", second.clone())).await;
    let (addr0, addr1) = (app0.addr.to_string(), app1.addr.to_string());
    let client = Client::http_round_robin(&[&addr0, &addr1], 1).unwrap().with_scenario("scripted");
    let mut client = client.with_request_id_prefix("rr-");

    let turn = client.say("перезвони 2").await.unwrap();
    assert_eq!(turn.speech(), "Продолжаю: готово.");
    let ids = |scenario: &Scripted| -> Vec<(Handler, String)> {
        scenario.seen().iter().map(|seen| (seen.handler, seen.base().request_id.clone())).collect()
    };
    // Calls 0 and 2 went to the second replica, 1 and 3 to the first.
    assert_eq!(ids(&second), [(Handler::Run, "rr-1".to_owned()), (Handler::Run, "rr-3".to_owned())]);
    assert_eq!(ids(&first), [(Handler::Run, "rr-2".to_owned()), (Handler::Continue, "rr-3".to_owned())]);
    assert_eq!(first.seen()[0].state(), Some(1), "the state of the other replica's answer went along");

    let error = Client::http_round_robin(&[], 0).unwrap_err();
    assert!(error.to_string().contains("no server given"), "{error}");
}

/// A server at the returned address that answers its first request with
/// `head` and then `body` over and over, until the client goes away; it
/// returns how many bytes of `body` it got to write.
async fn answering_without_end(head: &'static str, body: Vec<u8>) -> (String, tokio::task::JoinHandle<u64>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let server = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut request = vec![0u8; 64 * 1024];
        let _ = stream.read(&mut request).await;
        let mut written = 0;
        if stream.write_all(head.as_bytes()).await.is_err() {
            return written;
        }
        while stream.write_all(&body).await.is_ok() {
            written += body.len() as u64;
        }
        written
    });
    (address, server)
}

#[tokio::test]
async fn an_answer_past_the_bound_is_refused_without_reading_it_whole() {
    use megamind_tools::client::MAX_ANSWER_BYTES;
    // One MiB chunks of a chunked body that never ends.
    let mut chunk = format!("{:x}\r\n", 1 << 20).into_bytes();
    chunk.extend(std::iter::repeat_n(0u8, 1 << 20));
    chunk.extend(b"\r\n");
    let chunked = "HTTP/1.1 200 OK\r\ncontent-type: application/protobuf\r\ntransfer-encoding: chunked\r\n\r\n";
    let announced = "HTTP/1.1 200 OK\r\ncontent-type: application/protobuf\r\ncontent-length: 1099511627776\r\n\r\n";
    for (head, body, announces) in [(chunked, chunk, false), (announced, vec![0u8; 1 << 20], true)] {
        let (address, server) = answering_without_end(head, body).await;
        let mut client = Client::http(&address).unwrap().with_scenario("huge");
        // Bounded by the test, not by the code under test, which the old one was not.
        let error = tokio::time::timeout(Duration::from_secs(120), client.say("привет")).await.expect("an end");
        let error = error.unwrap_err();
        assert!(matches!(error, ClientError::TooLarge { handler: Handler::Run, .. }), "{error:?}");
        assert!(error.to_string().contains(&format!("longer than {MAX_ANSWER_BYTES} bytes")), "{error}");
        drop(client);
        let written = tokio::time::timeout(Duration::from_secs(60), server).await.expect("the client hung up").unwrap();
        // The cap read, and what the sockets' buffers hold besides (far
        // below a second cap); an announced length too long, nothing read.
        let cap = MAX_ANSWER_BYTES as u64;
        let read = if announces { 0..cap } else { cap..2 * cap };
        assert!(read.contains(&written), "{head}: {written} bytes sent");
    }
}

#[tokio::test]
async fn an_error_answers_body_is_kept_to_its_first_kib() {
    use megamind_tools::client::MAX_ERROR_BODY_BYTES;
    let head = "HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n";
    // «я» is two bytes: a cut through one must not split it.
    let mut chunk = format!("{:x}\r\n", 3 * 1024 * 2 + 1).into_bytes();
    chunk.extend("x".bytes().chain("я".repeat(3 * 1024).bytes()));
    chunk.extend(b"\r\n");
    let (address, server) = answering_without_end(head, chunk).await;
    let mut client = Client::http(&address).unwrap().with_scenario("x");
    // The body never ends: only a client reading it in part gets an error.
    let error = tokio::time::timeout(Duration::from_secs(120), client.say("привет")).await.expect("an end");
    let error = error.unwrap_err();
    drop(client);
    let ClientError::Status { status, body, .. } = &error else { panic!("{error:?}") };
    assert_eq!(*status, 502);
    assert!(body.len() <= MAX_ERROR_BODY_BYTES && body.len() > MAX_ERROR_BODY_BYTES - 2, "{}", body.len());
    assert!(body.starts_with("xя") && body.ends_with('я'), "{body}");
    tokio::time::timeout(Duration::from_secs(60), server).await.expect("the client hung up").unwrap();
}

#[tokio::test]
async fn a_ticket_that_cannot_be_sent_is_refused_without_its_text() {
    for transport in TRANSPORTS {
        let (_app, scenario, client) = scripted(transport).await;
        for (client, name) in [
            (client.with_service_ticket("3:serv:S3CRET-TICKET\r\nX-Evil: 1"), "service ticket"),
            (scenario_client(&_app, transport, "scripted").with_user_ticket("3:user:S3CRET-TICKET\r"), "user ticket"),
        ] {
            let mut client = client;
            assert!(!format!("{client:?}").contains("S3CRET"), "a debug print hides the ticket");
            let error = client.say("привет").await.unwrap_err().to_string();
            assert!(error.starts_with(&format!("invalid {name}: the ")), "{transport:?}: {error}");
            assert!(!error.contains("S3CRET"), "{transport:?}: {error}");
        }
        assert!(scenario.seen().is_empty(), "nothing was sent");
    }
}

#[tokio::test]
async fn a_server_address_s_password_is_in_no_error() {
    let gone = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let unreachable = format!("http://user:pw-S3CRET@{gone}");
    let error = Client::http(&unreachable).unwrap().say("привет").await.unwrap_err();
    assert!(matches!(error, ClientError::Unreachable { .. }), "{error:?}");
    for error in [
        error,
        Client::http("ftp://user:pw-S3CRET@example.org").unwrap_err(),
        Client::http("http://user:pw-S3CRET@bad host:1/").unwrap_err(),
        Client::http("user:pw-S3CRET@bad host").unwrap_err(),
        Client::grpc("http://user:pw-S3CRET@bad host").unwrap_err(),
    ] {
        let text = format!("{error} {error:?}");
        assert!(!text.contains("S3CRET"), "{text}");
    }
    let error = Client::http("ftp://user:pw-S3CRET@example.org").unwrap_err().to_string();
    assert!(error.contains("ftp://user:<hidden>@example.org"), "the address is still told: {error}");
}
