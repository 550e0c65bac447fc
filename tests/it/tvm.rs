//! TVM through tvmtool, against a stand-in speaking its API: every scenario
//! call over HTTP and gRPC needs a service ticket tvmtool accepts from an
//! allowed source, before the idempotency cache; verdicts are kept, checks
//! in flight made once; tvmtool down or hanging refuses inside the budget;
//! user tickets give the scenario its uid; no ticket reaches the log.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use megamind_core::{
    codec::Format,
    config::{Config, UserTicketPolicy},
    proto::n_alice::n_scenarios::{TScenarioRunRequest, TScenarioRunResponse},
    scenario::{CallContext, Scenario, ScenarioResult},
};
use tonic::Code;

use crate::{
    assistant_harness::spawn_module_in,
    helpers::{
        LoggedServer, TestApp, decode_answer, fixture, fixture_body, grpc_client, grpc_request, registry_of, spawn_app,
        spawn_builtin,
    },
    mock_llm::{MockLlm, Reply},
    tvmtool::{DST, TOKEN, Tickets, Tvmtool},
};

pub(crate) const MEGAMIND: &str = "3:serv:megamind-testing";
pub(crate) const STRANGER: &str = "3:serv:some-other-service";
/// Known to tvmtool, checked by no call before the test needs it.
pub(crate) const MEGAMIND_AGAIN: &str = "3:serv:megamind-production";
pub(crate) const USER: &str = "3:user:a-logged-in-user";
/// The budget of `/run`, and the lateness allowed on a shared 2-core machine.
const BUDGET: Duration = Duration::from_millis(300);
const MARGIN: Duration = Duration::from_millis(60);

pub(crate) fn tickets() -> Tickets {
    let mut tickets = Tickets::default();
    tickets.services.insert(MEGAMIND.into(), 2_000_860);
    tickets.services.insert(MEGAMIND_AGAIN.into(), 2_000_464);
    tickets.services.insert(STRANGER.into(), 1_234);
    tickets.users.insert(USER.into(), 4_242);
    tickets
}

pub(crate) fn config(tvmtool: &Tvmtool) -> Config {
    let mut config = Config::default();
    config.auth.tvmtool_url = tvmtool.url();
    config.auth.tvmtool_token = TOKEN.into();
    config.auth.tvm_dst = DST.into();
    config
}

pub(crate) async fn post_run(app: &TestApp, service: Option<&str>, user: Option<&str>) -> (u16, String) {
    let body = fixture_body::<TScenarioRunRequest>("poi_run_request", Format::Binary);
    let mut request = app.http.post(app.url("/demo/run")).header("content-type", "application/protobuf").body(body);
    if let Some(ticket) = service {
        request = request.header("x-ya-service-ticket", ticket);
    }
    if let Some(ticket) = user {
        request = request.header("x-ya-user-ticket", ticket);
    }
    let response = request.send().await.expect("an answer");
    let status = response.status().as_u16();
    let body = response.bytes().await.expect("a body");
    (status, String::from_utf8_lossy(&body).into_owned())
}

pub(crate) fn grpc_run(service: Option<&str>) -> tonic::Request<TScenarioRunRequest> {
    let mut request = grpc_request(fixture::<TScenarioRunRequest>("poi_run_request"), Some("demo"));
    if let Some(ticket) = service {
        request.metadata_mut().insert("x-ya-service-ticket", ticket.parse().expect("ASCII"));
    }
    request
}

#[tokio::test]
async fn a_call_without_a_good_ticket_from_an_allowed_source_is_refused_on_both_transports_even_when_cached() {
    let tvmtool = Tvmtool::start(tickets()).await;
    let app = spawn_builtin(config(&tvmtool)).await;
    let (status, _) = post_run(&app, Some(MEGAMIND), None).await;
    assert_eq!(status, 200, "Megamind's ticket lets the call in");
    // The same RequestId is answered and cached now: still refused to the others.
    for (ticket, why) in [
        (None, "forbidden: no service ticket (X-Ya-Service-Ticket)\n"),
        (Some("3:serv:forged"), "forbidden: the service ticket was refused: Malformed ticket\n"),
        (Some(STRANGER), "forbidden: TVM source 1234 may not call this service\n"),
    ] {
        assert_eq!(post_run(&app, ticket, None).await, (403, why.to_owned()), "{ticket:?}");
    }
    let mut client = grpc_client(&app).await;
    for ticket in [None, Some("3:serv:forged"), Some(STRANGER)] {
        let status = client.run(grpc_run(ticket)).await.expect_err("refused");
        assert_eq!(status.code(), Code::PermissionDenied, "{ticket:?}: {status:?}");
        assert!(status.message().starts_with("forbidden: "), "{status:?}");
    }
    client.run(grpc_run(Some(MEGAMIND))).await.expect("a ticketed gRPC call is answered");
    for (result, at_least) in [("ok", 2), ("missing", 2), ("invalid", 2), ("forbidden_source", 2)] {
        let line = format!("megamind_auth_total{{result=\"{result}\"}}");
        let metrics = app.get("/metrics").await.1;
        let count: u32 = metrics
            .lines()
            .find_map(|l| l.strip_prefix(&line).map(|n| n.trim().parse().expect("a count")))
            .unwrap_or_else(|| panic!("{line} in {metrics}"));
        assert!(count >= at_least, "{line} {count}");
    }
    assert_eq!(app.get("/healthz").await.0, 200, "the server's own routes ask no ticket");
    assert_eq!(app.get("/readyz").await.0, 200);
}

#[tokio::test]
async fn two_hundred_calls_with_one_ticket_cost_tvmtool_one_check() {
    let tvmtool = Tvmtool::start(tickets()).await;
    let app = Arc::new(spawn_builtin(config(&tvmtool)).await);
    // The first 50 at once: one check in flight serves them all.
    let first: Vec<_> = (0..50)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move { post_run(&app, Some(MEGAMIND), None).await.0 })
        })
        .collect();
    for call in first {
        assert_eq!(call.await.unwrap(), 200);
    }
    for _ in 0..150 {
        assert_eq!(post_run(&app, Some(MEGAMIND), None).await.0, 200);
    }
    assert_eq!(tvmtool.service_checks_of(MEGAMIND), 1, "one check for 200 calls with one ticket");
    assert!(tvmtool.service_checks() <= 2, "and the readiness check at start, no more");
}

#[tokio::test]
async fn good_tickets_of_a_source_not_let_in_never_push_megamind_s_verdict_out() {
    let mut tickets = tickets();
    let others: Vec<String> = (0..8).map(|n| format!("3:serv:another-service-{n}")).collect();
    for ticket in &others {
        tickets.services.insert(ticket.clone(), 1_234);
    }
    let tvmtool = Tvmtool::start(tickets).await;
    let mut config = config(&tvmtool);
    config.auth.verdict_max_entries = 4;
    let app = spawn_builtin(config).await;
    assert_eq!(post_run(&app, Some(MEGAMIND), None).await.0, 200);
    // Twice the good shelf's room of real tickets, each refused for its source.
    for ticket in &others {
        assert_eq!(post_run(&app, Some(ticket), None).await.0, 403, "{ticket}");
    }
    assert_eq!(post_run(&app, Some(MEGAMIND), None).await.0, 200);
    assert_eq!(tvmtool.service_checks_of(MEGAMIND), 1, "Megamind's verdict is still kept");
}

#[tokio::test]
async fn tvmtool_down_or_hanging_refuses_unchecked_tickets_inside_the_budget_and_kept_verdicts_still_serve() {
    let mut tvmtool = Tvmtool::start(tickets()).await;
    let app = spawn_builtin(config(&tvmtool)).await;
    assert_eq!(post_run(&app, Some(MEGAMIND), None).await.0, 200);

    tvmtool.kill();
    assert_eq!(post_run(&app, Some(MEGAMIND), None).await.0, 200, "a kept verdict serves");
    let (status, why) = post_run(&app, Some(MEGAMIND_AGAIN), None).await;
    assert_eq!(
        (status, why.as_str()),
        (403, "forbidden: the service ticket cannot be checked now (tvmtool unavailable)\n")
    );
    let (status, ready) = app.get("/readyz").await;
    assert_eq!(status, 503, "a server that cannot check tickets is not ready: {ready}");
    assert!(ready.starts_with("not ready: tickets cannot be checked: tvmtool cannot be reached"), "{ready}");

    tvmtool.restart().await;
    tvmtool.hang(true);
    let started = Instant::now();
    let (status, _) = post_run(&app, Some(MEGAMIND_AGAIN), None).await;
    let took = started.elapsed();
    assert_eq!(status, 403, "a check that does not end is refused");
    assert!(took < BUDGET + MARGIN, "refused in {took:?}, inside the budget");
    assert_eq!(app.get("/healthz").await.0, 200, "the server is alive");

    tvmtool.hang(false);
    assert_eq!(post_run(&app, Some(MEGAMIND_AGAIN), None).await.0, 200, "checked again once tvmtool answers");
    assert_eq!(app.get("/readyz").await.0, 200);
    let metrics = app.get("/metrics").await.1;
    assert!(metrics.contains("megamind_auth_tvmtool_up 1"), "{metrics}");
    assert!(!metrics.contains("megamind_auth_total{result=\"unavailable\"} 0"), "the refusals are counted");
}

/// Answers `/run` with the uid of its checked user ticket as `Version`.
struct Uid;

#[async_trait::async_trait]
impl Scenario for Uid {
    async fn run(&self, _: TScenarioRunRequest, ctx: CallContext) -> ScenarioResult<TScenarioRunResponse> {
        let version = ctx.meta.default_uid.map_or("none".to_owned(), |uid| format!("uid={uid}"));
        Ok(TScenarioRunResponse { version, ..Default::default() }.into())
    }
}

/// A server of [`Uid`] checking user tickets as `policy` says, and its tvmtool.
async fn spawn_uid(policy: UserTicketPolicy) -> (Tvmtool, TestApp) {
    let tvmtool = Tvmtool::start(tickets()).await;
    let mut config = config(&tvmtool);
    config.auth.user_ticket = policy;
    let app = spawn_app(config, registry_of("demo", Arc::new(Uid))).await;
    (tvmtool, app)
}

#[tokio::test]
async fn a_required_user_ticket_is_checked_and_its_uid_reaches_the_scenario() {
    let (tvmtool, app) = spawn_uid(UserTicketPolicy::Required).await;
    let (status, why) = post_run(&app, Some(MEGAMIND), None).await;
    assert_eq!(
        (status, why.as_str()),
        (403, "forbidden: no user ticket (X-Ya-User-Ticket), which this service requires\n")
    );
    let (status, why) = post_run(&app, Some(MEGAMIND), Some("3:user:stale")).await;
    assert_eq!((status, why.as_str()), (403, "forbidden: the user ticket was refused: Expired ticket\n"));
    let body = fixture_body::<TScenarioRunRequest>("poi_run_request", Format::Binary);
    let answer = app
        .http
        .post(app.url("/demo/run"))
        .header("content-type", "application/protobuf")
        .header("x-ya-service-ticket", MEGAMIND)
        .header("x-ya-user-ticket", USER)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let answer: TScenarioRunResponse = decode_answer(&answer.bytes().await.unwrap(), Format::Binary);
    assert_eq!(answer.version, "uid=4242");
    assert_eq!(tvmtool.user_checks(), 2, "each user ticket checked once");
}

#[tokio::test]
async fn a_user_tickets_uid_reaches_the_scenario_over_grpc_too() {
    let (tvmtool, app) = spawn_uid(UserTicketPolicy::Required).await;
    let mut client = grpc_client(&app).await;
    let with_user = |user: &str| {
        let mut request = grpc_run(Some(MEGAMIND));
        request.metadata_mut().insert("x-ya-user-ticket", user.parse().expect("ASCII"));
        request
    };
    let answer = client.run(with_user(USER)).await.expect("a call with both tickets is answered");
    assert_eq!(answer.into_inner().version, "uid=4242");
    let status = client.run(with_user("3:user:stale")).await.expect_err("refused");
    assert_eq!(status.code(), Code::PermissionDenied);
    assert_eq!(status.message(), "forbidden: the user ticket was refused: Expired ticket");
    let status = client.run(grpc_run(Some(MEGAMIND))).await.expect_err("refused");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert_eq!(tvmtool.user_checks(), 2, "each user ticket checked once");
}

#[tokio::test]
async fn an_optional_user_ticket_lets_a_call_without_one_in_and_refuses_a_bad_one() {
    let (tvmtool, app) = spawn_uid(UserTicketPolicy::Optional).await;
    let (status, body) = post_run(&app, Some(MEGAMIND), None).await;
    assert_eq!(status, 200, "no user ticket: let in, {body}");
    let (status, why) = post_run(&app, Some(MEGAMIND), Some("3:user:stale")).await;
    assert_eq!((status, why.as_str()), (403, "forbidden: the user ticket was refused: Expired ticket\n"));
    let (status, _) = post_run(&app, Some(MEGAMIND), Some(USER)).await;
    assert_eq!(status, 200);
    assert_eq!(tvmtool.user_checks(), 2, "a sent user ticket is checked");
    // A user ticket sent that no ticket can be (not ASCII) is refused, not
    // taken for none: tvmtool is not asked.
    let body = fixture_body::<TScenarioRunRequest>("poi_run_request", Format::Binary);
    let unreadable = reqwest::header::HeaderValue::from_bytes(b"3:user:\xff").unwrap();
    let request = app.http.post(app.url("/demo/run")).header("content-type", "application/protobuf");
    let request = request.header("x-ya-service-ticket", MEGAMIND).header("x-ya-user-ticket", unreadable);
    let response = request.body(body).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 403);
    let why = response.text().await.unwrap();
    assert_eq!(why, "forbidden: the user ticket (X-Ya-User-Ticket) is not visible ASCII\n");
    assert_eq!(tvmtool.user_checks(), 2, "not asked about it");
    let (_, metrics) = app.get("/metrics").await;
    assert!(metrics.contains(r#"megamind_auth_total{result="user_invalid"} 2"#), "{metrics}");
}

#[tokio::test]
async fn the_skills_catalog_asks_for_a_ticket_as_a_scenario_call_does_and_the_schema_does_not() {
    let tvmtool = Tvmtool::start(tickets()).await;
    let mock = MockLlm::start(Reply::content("Привет!")).await;
    let app = spawn_module_in(config(&tvmtool), &mock, |_| {}).await;
    let get = |ticket: Option<&'static str>, path: &'static str| {
        let mut request = app.http.get(app.url(path));
        if let Some(ticket) = ticket {
            request = request.header("x-ya-service-ticket", ticket);
        }
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(get(None, "/llm/skills").await, 403);
    assert_eq!(get(Some(STRANGER), "/llm/skills").await, 403);
    assert_eq!(get(Some(MEGAMIND), "/llm/skills").await, 200);
    assert_eq!(get(None, "/llm/schema").await, 200);
}

#[tokio::test]
async fn no_ticket_and_no_token_reach_the_debug_log() {
    let tvmtool = Tvmtool::start(tickets()).await;
    let args = ["--log-level", "debug", "--tvmtool-url", &tvmtool.url(), "--tvm-dst", DST];
    let server = LoggedServer::start(&args, &[("TVMTOOL_LOCAL_AUTHTOKEN", TOKEN)]);
    for ticket in [MEGAMIND, STRANGER, "3:serv:forged-secret-looking-ticket"] {
        post_run(&server.app, Some(ticket), Some(USER)).await;
    }
    let log = server.stop();
    assert!(log.contains("auth: service ticket refused"), "the refusals are logged: {log}");
    for secret in [MEGAMIND, STRANGER, "forged-secret-looking-ticket", USER, TOKEN] {
        assert!(!log.contains(secret), "{secret} in the log:\n{log}");
    }
}

#[tokio::test]
async fn dialog_plays_against_a_server_that_checks_tickets_when_given_one() {
    let tvmtool = Tvmtool::start(tickets()).await;
    let app = spawn_builtin(config(&tvmtool)).await;
    let url = app.url("");
    // The ticket as a flag, or in the variable that keeps it out of the process list.
    let play = move |flag: Option<&'static str>, variable: Option<&'static str>| {
        let url = url.clone();
        tokio::task::spawn_blocking(move || {
            let mut args = vec!["dialog", "--server", &url, "--scenario", "assistant"];
            args.extend(flag.map(|ticket| ["--service-ticket", ticket]).into_iter().flatten());
            let mut command = crate::helpers::binary();
            command.args(&args).env_remove("MEGAMIND_SERVICE_TICKET");
            if let Some(ticket) = variable {
                command.env("MEGAMIND_SERVICE_TICKET", ticket);
            }
            crate::helpers::run_command(&mut command, "закрой калькулятор\n".as_bytes())
        })
    };
    for (flag, variable) in [(Some(MEGAMIND), None), (None, Some(MEGAMIND))] {
        let played = play(flag, variable).await.unwrap();
        let said = String::from_utf8_lossy(&played.stdout);
        assert_eq!(played.status.code(), Some(0), "{said}{}", String::from_utf8_lossy(&played.stderr));
        assert!(said.contains("Закрываю калькулятор."), "{said}");
    }
    let refused = play(None, None).await.unwrap();
    let told = format!("{}{}", String::from_utf8_lossy(&refused.stdout), String::from_utf8_lossy(&refused.stderr));
    assert_ne!(refused.status.code(), Some(0), "{told}");
    assert!(told.contains("403") && told.contains("forbidden"), "{told}");
}

/// A caller is asked for its ticket before its body is read: a request
/// with no ticket whose body never comes is refused 403 at once (the
/// connection closed, its body unread), not held for the body, over HTTP
/// and gRPC alike.
/// A caller without a ticket learns nothing of what else is wrong with its
/// call: a media type the server does not read is refused as the caller
/// is, on both transports, and counted as forbidden (not as an error that
/// the errors alert counts).
#[tokio::test]
async fn a_caller_without_a_ticket_is_refused_before_its_media_type_is_judged() {
    let tvmtool = Tvmtool::start(tickets()).await;
    let app = spawn_builtin(config(&tvmtool)).await;
    let response = app.http.post(app.url("/demo/commit")).header("content-type", "x/y").body("").send().await.unwrap();
    assert_eq!(response.status().as_u16(), 403);
    let (response, mut body) =
        crate::helpers::bare_grpc_call(&app, "Run", &[("content-type", "application/grpc+json")]).await;
    body.send_data(bytes::Bytes::new(), true).unwrap();
    let response = tokio::time::timeout(BUDGET, response).await.expect("an answer before the budget").unwrap();
    assert_eq!(response.headers().get("grpc-status").map(|v| v.to_str().unwrap()), Some("7"), "PERMISSION_DENIED");
    let (_, metrics) = app.get("/metrics").await;
    let counted = |line: &&str| line.contains("outcome=\"unsupported_media_type\"") && !line.ends_with(" 0");
    assert_eq!(metrics.lines().find(counted), None, "counted as a media type refused");
    let forbidden =
        r#"megamind_requests_total{handler="commit",outcome="forbidden",scenario="demo",transport="http"} 1"#;
    assert!(metrics.contains(forbidden), "{metrics}");
    // With a good ticket, the media type is judged.
    let response = app
        .http
        .post(app.url("/demo/commit"))
        .header("content-type", "x/y")
        .header("x-ya-service-ticket", MEGAMIND)
        .body("")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 415);
}

#[tokio::test]
async fn a_caller_without_a_ticket_is_refused_before_its_body_is_read() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let tvmtool = Tvmtool::start(tickets()).await;
    let app = spawn_builtin(config(&tvmtool)).await;
    let mut stream = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    let head =
        "POST /demo/run HTTP/1.1\r\nhost: x\r\ncontent-type: application/protobuf\r\ncontent-length: 1000000\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(BUDGET, stream.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer).to_lowercase();
    assert!(read.is_ok(), "no answer before the budget: {answer}");
    assert!(answer.starts_with("http/1.1 403") && answer.contains("connection: close"), "{answer}");

    let (response, mut body) = crate::helpers::bare_grpc_call(&app, "Run", &[]).await;
    // A message header announcing 1000 bytes, and none of them.
    body.send_data(bytes::Bytes::from_static(&[0, 0, 0, 3, 232]), false).unwrap();
    let response = tokio::time::timeout(BUDGET, response).await.expect("an answer before the budget").unwrap();
    assert_eq!(response.headers().get("grpc-status").map(|v| v.to_str().unwrap()), Some("7"), "PERMISSION_DENIED");
}

#[tokio::test]
async fn tickets_and_the_local_token_go_to_tvmtool_itself_never_through_a_proxy_the_environment_names() {
    let tvmtool = Tvmtool::start(tickets()).await;
    // A proxy that takes connections and answers none: what reaches it is counted.
    let proxy = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let proxy_url = format!("http://{}", proxy.local_addr().expect("an address"));
    let reached = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = reached.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = proxy.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(stream);
        }
    });
    let args = ["--tvmtool-url", &tvmtool.url(), "--tvm-dst", DST];
    let proxies = ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"].map(|name| (name, proxy_url.as_str()));
    let env = [proxies.as_slice(), &[("NO_PROXY", ""), ("no_proxy", ""), ("TVMTOOL_LOCAL_AUTHTOKEN", TOKEN)]].concat();
    let server = LoggedServer::start(&args, &env);
    let (status, body) = post_run(&server.app, Some(MEGAMIND), None).await;
    server.stop();
    assert_eq!(status, 200, "checked by tvmtool: {body}");
    assert_eq!(reached.load(std::sync::atomic::Ordering::SeqCst), 0, "a connection to the proxy");
}
