//! gRPC on the HTTP port: the four dialogs through the generated tonic
//! client, the same rules as HTTP (idempotency across transports, budget,
//! overload, protocol errors), and the statuses only gRPC has.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::Bytes;
use megamind_core::{
    codec::Format,
    config::Config,
    proto::{
        megamind_scenario::v1::scenario_client::ScenarioClient,
        n_alice::n_scenarios::{
            TScenarioApplyRequest, TScenarioApplyResponse, TScenarioCommitResponse, TScenarioContinueResponse,
            TScenarioRunRequest, TScenarioRunResponse, t_scenario_commit_response, t_scenario_run_response,
        },
    },
    scenario::Registry,
    transport::grpc::BytesCodec,
};
use megamind_scenario::scenarios::demo::Demo;
use prost::Message;
use tokio::sync::Semaphore;
use tonic::{Code, Status};
use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient};

use crate::{
    helpers::{
        TestApp, bare_grpc_call, decode_answer, fixture, fixture_body, grpc_channel as channel, grpc_channel_to,
        grpc_client as client, grpc_request as request, registry_of, spawn_app, spawn_demo,
    },
    scenarios::{Counting, Panicking, Sleepy, TicketEcho},
};

/// Allowed lateness past the budget: scheduling on a shared 2-core machine.
const MARGIN: Duration = Duration::from_millis(60);

/// Calls `method` with raw message bytes, as a client with its own encoder would.
async fn raw_call(app: &TestApp, method: &str, scenario: Option<&str>, body: Vec<u8>) -> Result<Bytes, Status> {
    let mut grpc = tonic::client::Grpc::new(channel(app).await);
    grpc.ready().await.expect("channel ready");
    let path = format!("/megamind_scenario.v1.Scenario/{method}").try_into().expect("valid path");
    grpc.unary(request(Bytes::from(body), scenario), path, BytesCodec).await.map(tonic::Response::into_inner)
}

fn run_error(answer: &TScenarioRunResponse) -> &str {
    match &answer.response {
        Some(t_scenario_run_response::Response::Error(error)) => &error.r#type,
        other => panic!("expected an Error, got {other:?}"),
    }
}

#[tokio::test]
async fn the_four_dialogs_answer_the_fixture_responses() {
    let (app, demo) = spawn_demo().await;
    let mut client = client(&app).await;
    let run = |name: &str, scenario| request(fixture::<TScenarioRunRequest>(name), scenario);
    let apply = |name: &str, scenario| request(fixture::<TScenarioApplyRequest>(name), scenario);

    let got = client.run(run("poi_run_request", Some("demo"))).await.unwrap().into_inner();
    assert!(got == fixture::<TScenarioRunResponse>("poi_run_response"), "{got:?}");
    let got = client.run(run("poi_callback_run_request", Some("demo"))).await.unwrap().into_inner();
    assert!(got == fixture::<TScenarioRunResponse>("poi_callback_run_response"), "{got:?}");

    // Without x-scenario the default scenario answers.
    let got = client.run(run("music_run_request", None)).await.unwrap().into_inner();
    assert!(got == fixture::<TScenarioRunResponse>("music_run_response"), "{got:?}");
    let got = client.r#continue(apply("music_continue_request", None)).await.unwrap().into_inner();
    assert!(got == fixture::<TScenarioContinueResponse>("music_continue_response"), "{got:?}");

    let got = client.run(run("video_commit_run_request", Some("demo"))).await.unwrap().into_inner();
    assert!(got == fixture::<TScenarioRunResponse>("video_commit_run_response"), "{got:?}");
    let got = client.commit(apply("video_commit_request", Some("demo"))).await.unwrap().into_inner();
    assert!(got == fixture::<TScenarioCommitResponse>("video_commit_response"), "{got:?}");
    assert_eq!(demo.payment_pushes(), 1);

    let got = client.run(run("video_apply_run_request", Some("demo"))).await.unwrap().into_inner();
    assert!(got == fixture::<TScenarioRunResponse>("video_apply_run_response"), "{got:?}");
    let got = client.apply(apply("video_apply_request", Some("demo"))).await.unwrap().into_inner();
    assert!(got == fixture::<TScenarioApplyResponse>("video_apply_response"), "{got:?}");
    assert_eq!(demo.payment_pushes(), 2);
}

#[tokio::test]
async fn a_commit_repeated_over_grpc_after_http_replays_the_same_bytes() {
    let (app, demo) = spawn_demo().await;
    let body = fixture_body::<TScenarioApplyRequest>("video_commit_request", Format::Binary);
    let (status, over_http) = app.post_binary("/demo/commit", body.clone()).await;
    assert_eq!(status, 200);

    let over_grpc = raw_call(&app, "Commit", Some("demo"), body).await.unwrap();
    assert_eq!(over_grpc, over_http, "byte-identical replay");
    let typed = client(&app)
        .await
        .commit(request(fixture::<TScenarioApplyRequest>("video_commit_request"), Some("demo")))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(typed.encode_to_vec(), over_http);
    assert!(matches!(typed.response, Some(t_scenario_commit_response::Response::Success(_))));
    assert_eq!(demo.payment_pushes(), 1, "the side effect ran once across transports");

    // Plain HTTP keeps working on the port after gRPC used it.
    let health = app.http.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let (status, answer) =
        app.post_binary("/demo/run", fixture_body::<TScenarioRunRequest>("poi_run_request", Format::Binary)).await;
    assert_eq!(status, 200);
    let answer: TScenarioRunResponse = decode_answer(&answer, Format::Binary);
    assert!(answer == fixture::<TScenarioRunResponse>("poi_run_response"));
}

#[tokio::test]
async fn an_overrun_is_answered_timeout_within_the_budget() {
    let registry = registry_of("sleepy", Arc::new(Sleepy::new(Duration::from_secs(5))));
    let app = spawn_app(Config::default(), registry).await;
    let mut client = client(&app).await;
    let started = Instant::now();
    let answer = client.run(request(fixture::<TScenarioRunRequest>("poi_run_request"), Some("sleepy"))).await;
    let elapsed = started.elapsed();
    let answer = answer.expect("a timeout is an OK response").into_inner();
    assert_eq!(run_error(&answer), "timeout");
    assert!(elapsed < Duration::from_millis(300) + MARGIN, "answered after {elapsed:?}");
    assert!(elapsed >= Duration::from_millis(280), "waited for the budget: {elapsed:?}");
}

#[tokio::test]
async fn a_shorter_grpc_timeout_of_the_client_is_the_deadline() {
    let registry = registry_of("sleepy", Arc::new(Sleepy::new(Duration::from_secs(5))));
    let app = spawn_app(Config::default(), registry).await;
    let mut client = client(&app).await;
    let mut call = request(fixture::<TScenarioRunRequest>("poi_run_request"), Some("sleepy"));
    // As a client states it; set by hand, not with `set_timeout`, which would
    // also give up on the client's side at the same moment and race the answer.
    call.metadata_mut().insert("grpc-timeout", "100m".parse().expect("ASCII"));
    let started = Instant::now();
    let answer = client.run(call).await;
    let elapsed = started.elapsed();
    let answer = answer.expect("a timeout is an OK response").into_inner();
    assert_eq!(run_error(&answer), "timeout");
    let Some(t_scenario_run_response::Response::Error(error)) = &answer.response else { unreachable!() };
    assert!(error.message.contains("the client's deadline of 100 ms (grpc-timeout)"), "{}", error.message);
    assert!(elapsed < Duration::from_millis(100) + MARGIN, "answered after {elapsed:?}");

    // A client deadline past the budget changes nothing.
    let mut second = fixture::<TScenarioRunRequest>("poi_run_request");
    second.base_request.as_mut().expect("a BaseRequest").request_id = "a-second-call".into();
    let mut call = request(second, Some("sleepy"));
    call.set_timeout(Duration::from_secs(10));
    let answer = client.run(call).await.expect("a timeout is an OK response").into_inner();
    let Some(t_scenario_run_response::Response::Error(error)) = &answer.response else { panic!("{answer:?}") };
    assert!(error.message.contains("the 300 ms budget of /run"), "{}", error.message);
}

/// One gRPC call over a bare HTTP/2 connection, `grpc-timeout` sent as
/// is: tonic's client would enforce it too, and give up first.
async fn call_with_grpc_timeout(app: &TestApp, method: &str, message: Vec<u8>, timeout: &str) -> Bytes {
    let (response, mut body) = bare_grpc_call(app, method, &[("grpc-timeout", timeout)]).await;
    let mut framed = vec![0];
    framed.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    framed.extend_from_slice(&message);
    body.send_data(Bytes::from(framed), true).unwrap();
    let mut answer = response.await.unwrap().into_body();
    let mut bytes = Vec::new();
    while let Some(chunk) = answer.data().await {
        let chunk = chunk.unwrap();
        answer.flow_control().release_capacity(chunk.len()).unwrap();
        bytes.extend_from_slice(&chunk);
    }
    assert!(bytes.len() >= 5, "a message came back: {bytes:?}");
    Bytes::from(bytes).slice(5..)
}

/// A client deadline no longer than the server's reserve is gone before
/// anything could run for it: `timeout`, and no side effect ran.
#[tokio::test]
async fn a_client_deadline_gone_on_arrival_runs_nothing() {
    let (app, demo) = spawn_demo().await;
    for (n, timeout) in ["0m", "5m", "10000u"].into_iter().enumerate() {
        let mut commit = fixture::<TScenarioApplyRequest>("video_commit_request");
        commit.base_request.as_mut().expect("a BaseRequest").request_id = format!("gone-{n}");
        let answer = call_with_grpc_timeout(&app, "Commit", commit.encode_to_vec(), timeout).await;
        let answer = TScenarioCommitResponse::decode(answer).unwrap();
        let Some(t_scenario_commit_response::Response::Error(error)) = &answer.response else {
            panic!("grpc-timeout {timeout}: {answer:?}")
        };
        assert_eq!(error.r#type, "timeout", "{}", error.message);
        assert!(error.message.contains("left no time to run the call"), "{}", error.message);
    }
    assert_eq!(demo.payment_pushes(), 0, "no side effect ran");
}

#[tokio::test]
async fn a_separate_grpc_address_serves_grpc_only_and_drains_with_the_main_one() {
    let demo = Arc::new(Demo::new());
    let config = Config { grpc_addr: Some("127.0.0.1:0".parse().unwrap()), ..Config::default() };
    let app = spawn_app(config, registry_of("demo", demo)).await;
    let grpc_addr = app.grpc_addr.expect("a gRPC-only listener");
    let mut separate = ScenarioClient::new(grpc_channel_to(grpc_addr).await);
    let got = separate.run(request(fixture::<TScenarioRunRequest>("poi_run_request"), None)).await.unwrap();
    assert!(got.into_inner() == fixture::<TScenarioRunResponse>("poi_run_response"));
    let mut health = HealthClient::new(grpc_channel_to(grpc_addr).await);
    let status = health.check(HealthCheckRequest { service: String::new() }).await.unwrap().into_inner().status;
    assert_eq!(status, ServingStatus::Serving as i32);

    let body = fixture_body::<TScenarioRunRequest>("poi_run_request", Format::Binary);
    let refused = app.http.post(format!("http://{grpc_addr}/demo/run")).body(body.clone()).send().await.unwrap();
    assert_eq!(refused.status(), 415);
    assert!(refused.text().await.unwrap().contains("gRPC only"));

    // The main address still serves both.
    assert_eq!(app.post_binary("/demo/run", body).await.0, 200);
    let mut main = client(&app).await;
    let got = main.run(request(fixture::<TScenarioRunRequest>("poi_run_request"), Some("demo"))).await.unwrap();
    assert!(got.into_inner() == fixture::<TScenarioRunResponse>("poi_run_response"));

    let addr = app.addr;
    app.stop().await.expect("drains");
    for stopped in [addr, grpc_addr] {
        assert!(tokio::net::TcpStream::connect(stopped).await.is_err(), "{stopped} stopped accepting");
    }
}

/// Health watches need no ticket: past `MAX_PUBLIC_STREAMS` open at once a
/// new one is refused, and each ends with `UNAVAILABLE` after the idle
/// timeout, its slot free again.
#[tokio::test]
async fn public_streams_are_capped_and_end_by_their_lifetime() {
    use megamind_core::transport::grpc::MAX_PUBLIC_STREAMS;
    let config = Config { idle_timeout_ms: 1_500, ..Config::default() };
    let app = spawn_app(config, registry_of("demo", Arc::new(Demo::new()))).await;
    let watch = || HealthCheckRequest { service: String::new() };
    // Three connections: each carries 32 streams at most.
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(HealthClient::new(channel(&app).await));
    }
    let opened = Instant::now();
    let mut open = Vec::new();
    for n in 0..MAX_PUBLIC_STREAMS {
        let mut stream = clients[n % 3].watch(watch()).await.expect("a watch opens").into_inner();
        let first = stream.message().await.unwrap().expect("the status at once");
        assert_eq!(first.status, ServingStatus::Serving as i32);
        open.push(stream);
    }
    let refused = clients[0].watch(watch()).await.expect_err("one watch too many");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    for mut stream in open {
        let ended = stream.message().await.expect_err("ends with a status");
        assert_eq!(ended.code(), Code::Unavailable, "{ended:?}");
    }
    assert!(opened.elapsed() >= Duration::from_millis(1_400), "ended early: {:?}", opened.elapsed());
    let mut again = clients[1].watch(watch()).await.expect("slots are free again").into_inner();
    assert!(again.message().await.unwrap().is_some());
}

/// An open watch sees the drain (`NOT_SERVING`), then ends as the server
/// closes: it never holds the drain to its timeout.
#[tokio::test]
async fn an_open_watch_ends_as_the_server_closes() {
    let config = Config { shutdown_delay_ms: 0, drain_timeout_ms: 10_000, ..Config::default() };
    let app = spawn_app(config, registry_of("demo", Arc::new(Demo::new()))).await;
    let mut health = HealthClient::new(channel(&app).await);
    let mut stream = health.watch(HealthCheckRequest { service: String::new() }).await.unwrap().into_inner();
    assert_eq!(stream.message().await.unwrap().unwrap().status, ServingStatus::Serving as i32);
    let reading = tokio::spawn(async move {
        let mut seen = Vec::new();
        loop {
            match stream.message().await {
                Ok(Some(update)) => seen.push(update.status),
                Ok(None) => return (seen, Code::Ok),
                Err(status) => return (seen, status.code()),
            }
        }
    });
    let stopping = Instant::now();
    app.stop().await.expect("drains");
    assert!(stopping.elapsed() < Duration::from_secs(5), "the drain took {:?}", stopping.elapsed());
    let (seen, ended) = reading.await.unwrap();
    assert_eq!(seen, [ServingStatus::NotServing as i32], "told of the drain first");
    assert_eq!(ended, Code::Unavailable);
}

#[tokio::test]
async fn under_overload_run_gets_resource_exhausted_while_commit_keeps_priority() {
    let gate = Arc::new(Semaphore::new(0));
    let counting = Arc::new(Counting::gated(gate.clone()));
    let registry = registry_of("counting", counting.clone());
    let config = Config { max_in_flight: 1, priority_reserve: 1, ..Config::default() };
    let app = spawn_app(config, registry).await;
    let client = client(&app).await;

    let entered = counting.entered.notified();
    let held = tokio::spawn({
        let mut client = client.clone();
        async move { client.run(request(fixture::<TScenarioRunRequest>("poi_run_request"), None)).await }
    });
    entered.await;
    let refused = client.clone().run(request(fixture::<TScenarioRunRequest>("music_run_request"), None)).await;
    let status = refused.expect_err("Run is refused at the limit");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");

    let entered = counting.entered.notified();
    let commit = tokio::spawn({
        let mut client = client.clone();
        async move { client.commit(request(fixture::<TScenarioApplyRequest>("video_commit_request"), None)).await }
    });
    entered.await;
    gate.add_permits(2);
    let commit = commit.await.unwrap().expect("Commit is admitted from the reserve").into_inner();
    assert!(matches!(commit.response, Some(t_scenario_commit_response::Response::Success(_))));
    assert!(held.await.unwrap().is_ok());
}

#[tokio::test]
async fn unknown_scenarios_and_methods_get_their_statuses() {
    let (app, _) = spawn_demo().await;
    let mut client = client(&app).await;
    let status = client
        .run(request(fixture::<TScenarioRunRequest>("poi_run_request"), Some("nope")))
        .await
        .expect_err("no such scenario");
    assert_eq!(status.code(), Code::NotFound);
    assert!(status.message().contains("\"nope\"") && status.message().contains("demo"), "{}", status.message());
    let long = "n".repeat(8000);
    let status = client
        .run(request(fixture::<TScenarioRunRequest>("poi_run_request"), Some(&long)))
        .await
        .expect_err("no such scenario");
    assert_eq!(status.code(), Code::NotFound);
    assert!(status.message().len() < 512, "the name quoted whole: {} bytes", status.message().len());

    let body = fixture_body::<TScenarioRunRequest>("poi_run_request", Format::Binary);
    let status = raw_call(&app, "Launch", None, body).await.expect_err("no such method");
    assert_eq!(status.code(), Code::Unimplemented);
}

#[tokio::test]
async fn protocol_errors_are_ok_responses_carrying_the_error() {
    let mut registry = Registry::new();
    registry.register("demo", Arc::new(Demo::new())).unwrap();
    registry.register("panicking", Arc::new(Panicking)).unwrap();
    let app = spawn_app(Config { default_scenario: "demo".into(), ..Config::default() }, registry).await;

    let garbage = raw_call(&app, "Run", None, b"\xff\xff\xff\xff garbage".to_vec()).await.unwrap();
    let garbage: TScenarioRunResponse = decode_answer(&garbage, Format::Binary);
    assert_eq!(run_error(&garbage), "bad_request");

    let mut client = client(&app).await;
    let no_id = client.run(request(TScenarioRunRequest::default(), None)).await.unwrap().into_inner();
    assert_eq!(run_error(&no_id), "bad_request");

    let panicked = client
        .run(request(fixture::<TScenarioRunRequest>("poi_run_request"), Some("panicking")))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(run_error(&panicked), "internal");
    let failed = client
        .commit(request(fixture::<TScenarioApplyRequest>("video_commit_request"), Some("panicking")))
        .await
        .unwrap()
        .into_inner();
    assert!(
        matches!(failed.response, Some(t_scenario_commit_response::Response::Error(ref e)) if e.r#type == "upstream")
    );
}

#[tokio::test]
async fn messages_over_the_body_limit_are_refused() {
    let registry = registry_of("demo", Arc::new(Demo::new()));
    let app = spawn_app(Config { body_limit: 1024, ..Config::default() }, registry).await;
    let status = raw_call(&app, "Run", None, vec![0u8; 4096]).await.expect_err("over the limit");
    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
    // Refused by tonic before the dispatcher, and still a call of Run in the metrics.
    app.metrics_line(&crate::helpers::refused_series("grpc", "body_too_large", 1)).await;
    let valid = fixture_body::<TScenarioRunRequest>("poi_run_request", Format::Binary);
    assert!(valid.len() < 1024);
    let answer: TScenarioRunResponse =
        decode_answer(&raw_call(&app, "Run", None, valid).await.unwrap(), Format::Binary);
    assert!(answer == fixture::<TScenarioRunResponse>("poi_run_response"));
}

#[tokio::test]
async fn the_user_ticket_metadata_reaches_the_scenario() {
    let registry = registry_of("echo", Arc::new(TicketEcho));
    let app = spawn_app(Config::default(), registry).await;
    let mut client = client(&app).await;
    let mut with_ticket = request(fixture::<TScenarioRunRequest>("poi_run_request"), None);
    with_ticket.metadata_mut().insert("x-ya-user-ticket", "3:user:ticket".parse().unwrap());
    assert_eq!(client.run(with_ticket).await.unwrap().into_inner().version, "3:user:ticket");
    let without = request(fixture::<TScenarioRunRequest>("music_run_request"), None);
    assert_eq!(client.run(without).await.unwrap().into_inner().version, "no ticket");
}

#[tokio::test]
async fn the_standard_health_service_reports_serving() {
    let (app, _) = spawn_demo().await;
    let mut health = HealthClient::new(channel(&app).await);
    for service in ["", "megamind_scenario.v1.Scenario"] {
        let answer = health.check(HealthCheckRequest { service: service.into() }).await.unwrap().into_inner();
        assert_eq!(answer.status(), ServingStatus::Serving, "{service:?}");
    }
    let status = health.check(HealthCheckRequest { service: "no.such.Service".into() }).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
}

#[tokio::test]
async fn health_watchers_see_not_serving_when_shutdown_starts() {
    let (app, _) = spawn_demo().await;
    let mut health = HealthClient::new(channel(&app).await);
    let mut updates = health.watch(HealthCheckRequest { service: String::new() }).await.unwrap().into_inner();
    let first = updates.message().await.unwrap().expect("the current status");
    assert_eq!(first.status(), ServingStatus::Serving);
    // Dropping the app starts its shutdown; the open watch is drained, not cut.
    drop(app);
    // A bound, not a wait: without the update the stream would stay open.
    let next = tokio::time::timeout(Duration::from_secs(5), updates.message())
        .await
        .expect("an update soon after shutdown starts")
        .unwrap()
        .expect("an update before the stream ends");
    assert_eq!(next.status(), ServingStatus::NotServing);
}

/// A message in more than 65,536 DATA frames is refused `INVALID_ARGUMENT`,
/// saying why: each frame costs the server about a microsecond to take in.
/// The frames are of 256 bytes, which HTTP/2's own guard against floods of
/// small frames lets through.
/// The status of a bare `Run` with `headers`, whose body is `body`.
async fn status_of_bare_run(app: &TestApp, headers: &[(&str, &str)], body: &'static [u8]) -> Status {
    let (response, mut sending) = bare_grpc_call(app, "Run", headers).await;
    sending.send_data(Bytes::from_static(body), true).unwrap();
    status_of(response.await.unwrap()).await
}

/// The status of a bare gRPC answer: in its head (trailers only), else in
/// the trailers after its message.
async fn status_of(answer: http::Response<h2::RecvStream>) -> Status {
    let (head, mut answer) = answer.into_parts();
    if let Some(status) = Status::from_header_map(&head.headers) {
        return status;
    }
    // The message read first: trailers come after it.
    while let Some(chunk) = answer.data().await {
        let _ = answer.flow_control().release_capacity(chunk.unwrap().len());
    }
    Status::from_header_map(&answer.trailers().await.unwrap().expect("trailers")).expect("a status")
}

#[tokio::test]
async fn messages_that_cannot_be_read_as_protobuf_are_invalid_arguments() {
    let (app, _) = spawn_demo().await;
    // A message prefix saying 100 bytes, then 3; no message at all.
    for (body, why) in [(&b"\0\0\0\0\x64abc"[..], "cut short"), (&b""[..], "missing")] {
        let status = status_of_bare_run(&app, &[], body).await;
        assert_eq!(status.code(), Code::InvalidArgument, "{why}: {status:?}");
        assert!(status.message().starts_with("cannot read the request message: "), "{why}: {status:?}");
    }
    for content_type in ["application/grpc+json", "application/grpc-web-text", "application/grpcx"] {
        let status = status_of_bare_run(&app, &[("content-type", content_type)], b"\0\0\0\0\0").await;
        assert_eq!(status.code(), Code::InvalidArgument, "{content_type}: {status:?}");
        assert_eq!(status.message(), format!("unsupported content-type {content_type:?} for gRPC"));
    }
    let status = status_of_bare_run(&app, &[("content-type", "application/grpc+proto")], b"\0\0\0\0\0").await;
    assert_eq!(status.code(), Code::Ok, "{status:?}");
    let metrics = app.get("/metrics").await.1;
    assert!(metrics.contains("body_unreadable"), "counted as refusals: {metrics}");
}

#[tokio::test]
async fn a_message_in_too_many_frames_is_refused() {
    // Room and time enough for a test build to take them all in.
    let mut config = Config { body_limit: 32 << 20, ..Config::default() };
    config.budget.run_ms = 20_000;
    let app = spawn_app(config, registry_of("demo", Arc::new(Demo::new()))).await;
    let (response, mut body) = bare_grpc_call(&app, "Run", &[]).await;
    let (frames, frame) = (70_000u32, Bytes::from_static(&[0; 256]));
    let mut prefix = vec![0];
    prefix.extend_from_slice(&(frames * 256).to_be_bytes());
    body.send_data(Bytes::from(prefix), false).unwrap();
    let sending = tokio::spawn(async move {
        for _ in 0..frames {
            body.reserve_capacity(frame.len());
            let Some(Ok(_)) = std::future::poll_fn(|cx| body.poll_capacity(cx)).await else { return };
            if body.send_data(frame.clone(), false).is_err() {
                return;
            }
        }
    });
    let answer = tokio::time::timeout(Duration::from_secs(30), response).await.expect("answered in time");
    let status = status_of(answer.unwrap()).await;
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("the body came in more than 65536 pieces"), "{status:?}");
    sending.abort();
}
