//! Health, readiness, graceful drain, and the real binary's SIGTERM and
//! second Ctrl-C.

use std::{
    io::{BufRead, BufReader, Lines, Read, Write},
    process::{Child, ChildStdout, Command, Stdio},
    sync::Arc,
    time::Duration,
};

use megamind_core::{
    codec::Format,
    config::Config,
    proto::n_alice::n_scenarios::{
        TScenarioApplyRequest, TScenarioCommitResponse, TScenarioRunRequest, t_scenario_commit_response,
    },
};
use tokio::{sync::Semaphore, task::JoinHandle};

use crate::{
    helpers::{TestApp, binary, decode_answer, fixture_body, registry_of, serving_addr_in, spawn_app, spawn_demo},
    scenarios::Counting,
};

#[tokio::test]
async fn healthz_and_readyz_answer() {
    let (app, _) = spawn_demo().await;
    assert_eq!(app.get("/healthz").await, (reqwest::StatusCode::OK, "ok\n".to_owned()));
    assert_eq!(app.get("/readyz").await, (reqwest::StatusCode::OK, "ready\n".to_owned()));
}

/// A server with `drain_timeout_ms` whose `/commit` waits at a gate (5 s
/// budget), and one `/commit` already inside the scenario.
async fn commit_held_at_the_gate(
    drain_timeout_ms: u64,
) -> (TestApp, Arc<Semaphore>, JoinHandle<reqwest::Result<reqwest::Response>>) {
    let gate = Arc::new(Semaphore::new(0));
    let counting = Arc::new(Counting::gated(gate.clone()));
    let registry = registry_of("counting", counting.clone());
    let mut config = Config { drain_timeout_ms, shutdown_delay_ms: 0, ..Config::default() };
    config.budget.commit_ms = 5_000;
    let app = spawn_app(config, registry).await;
    let (addr, http) = (app.addr, app.http.clone());
    let entered = counting.entered.notified();
    let in_flight = tokio::spawn(async move {
        let body = fixture_body::<TScenarioApplyRequest>("video_commit_request", Format::Binary);
        http.post(format!("http://{addr}/counting/commit"))
            .header("content-type", "application/protobuf")
            .body(body)
            .send()
            .await
    });
    entered.await;
    (app, gate, in_flight)
}

#[tokio::test]
async fn an_in_flight_request_finishes_after_shutdown_and_new_connections_are_refused() {
    let (mut app, gate, in_flight) = commit_held_at_the_gate(5_000).await;
    let addr = app.addr;
    app.begin_shutdown();

    // The accept loop stops soon after the signal; until then a connect may still succeed.
    let mut refused = false;
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(refused, "new connections are refused while draining");

    gate.add_permits(1);
    let response = in_flight.await.unwrap().expect("the in-flight request is answered");
    assert_eq!(response.status(), 200);
    let answer: TScenarioCommitResponse = decode_answer(&response.bytes().await.expect("body"), Format::Binary);
    assert!(matches!(answer.response, Some(t_scenario_commit_response::Response::Success(_))));
    app.join().await.expect("serve returns Ok after draining");
}

#[tokio::test]
async fn past_the_drain_timeout_the_remaining_calls_are_cut_off() {
    // The gate never opens: the call would otherwise wait out its 5 s budget.
    let (mut app, _gate, in_flight) = commit_held_at_the_gate(100).await;
    app.begin_shutdown();
    app.join().await.expect("serve returns once the drain timed out");
    // A guard, not a wait: without the cut-off the call would hang for its whole budget.
    let outcome = tokio::time::timeout(Duration::from_secs(3), in_flight).await;
    let outcome = outcome.expect("the connection is closed when serve returns").unwrap();
    assert!(outcome.is_err(), "the cut-off call gets no answer: {outcome:?}");
}

#[tokio::test]
async fn readyz_turns_503_during_the_shutdown_delay() {
    let registry = registry_of("demo", Arc::new(megamind_scenario::scenarios::demo::Demo::new()));
    let config = Config { shutdown_delay_ms: 1_000, ..Config::default() };
    let mut app = spawn_app(config, registry).await;
    assert_eq!(app.get("/readyz").await.0, 200);
    app.begin_shutdown();
    let mut draining = false;
    for _ in 0..100 {
        if app.get("/readyz").await.0 == 503 {
            draining = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(draining, "/readyz says 503 while the server still serves");
    assert_eq!(app.get("/healthz").await.0, 200, "still alive and serving during the delay");
    app.join().await.unwrap();
}

/// The real binary serving on port 0 with `shutdown_delay_ms`: the
/// process, the lines of its log after the `serving` one, and its address.
fn serve_binary(shutdown_delay_ms: &str) -> (Child, Lines<BufReader<ChildStdout>>, String) {
    let mut child = binary()
        .args(["serve", "--addr", "127.0.0.1:0", "--shutdown-delay-ms", shutdown_delay_ms])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the binary starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let addr = serving_addr_in(lines.by_ref().map_while(Result::ok));
    (child, lines, addr)
}

/// Sends `signal` (`-TERM`, `-INT`) to `child`.
fn signal(child: &Child, signal: &str) {
    let status = Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap();
    assert!(status.success());
}

#[test]
fn the_binary_exits_0_on_sigterm() {
    let (mut child, lines, addr) = serve_binary("0");

    // One call, so that the output also holds its summary line.
    let body = fixture_body::<TScenarioRunRequest>("poi_run_request", Format::Binary);
    let request_id = decode_answer::<TScenarioRunRequest>(&body, Format::Binary).base_request.unwrap().request_id;
    let mut stream = std::net::TcpStream::connect(&addr).expect("listening");
    let head = format!(
        "POST /demo/run HTTP/1.1\r\nhost: test\r\ncontent-type: application/protobuf\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(&body)).expect("request sent");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).expect("answer read");
    assert!(response.starts_with(b"HTTP/1.1 200 OK"), "{}", String::from_utf8_lossy(&response));
    // And one refused before the scenario: it has a summary line too.
    let mut stream = std::net::TcpStream::connect(&addr).expect("listening");
    let refused = "POST /demo/run HTTP/1.1\r\nhost: test\r\ncontent-type: image/png\r\n\
                   content-length: 0\r\nconnection: close\r\n\r\n";
    stream.write_all(refused.as_bytes()).expect("request sent");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).expect("answer read");
    assert!(response.starts_with(b"HTTP/1.1 415"), "{}", String::from_utf8_lossy(&response));

    signal(&child, "-TERM");
    let exit = child.wait().unwrap();
    assert_eq!(exit.code(), Some(0), "exit code after SIGTERM");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let summary = format!(
        " INFO megamind_scenario::access: transport=http scenario=demo handler=run request_id={request_id} \
         outcome=ok latency_us="
    );
    assert!(rest.iter().any(|l| l.contains(&summary)), "the call's summary line in {rest:#?}");
    let refused = " INFO megamind_scenario::access: transport=http scenario=demo handler=run request_id=\"\" \
                   outcome=unsupported_media_type latency_us=";
    assert!(rest.iter().any(|l| l.contains(refused)), "the refused call's summary line in {rest:#?}");
    assert!(rest.iter().any(|l| l.contains("stopped")), "logs that it stopped");
}

#[test]
fn bad_configuration_fails_at_start_with_every_problem_named() {
    let dir = std::env::temp_dir().join(format!("megamind-bad-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(&path, "[budget]\nrun_ms = 0\n[cache]\nttl_secs = 0\n").unwrap();
    let output =
        binary().args(["serve", "--addr", "127.0.0.1:0", "--config"]).arg(&path).output().expect("the binary runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("budget.run_ms = 0") && stderr.contains("cache.ttl_secs"), "{stderr}");

    std::fs::write(&path, "adrr = \"0.0.0.0:1\"\n").unwrap();
    let output = binary().args(["serve", "--config"]).arg(&path).output().unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("adrr"));

    let output = binary().args(["serve", "--addr", "127.0.0.1:0", "--default-scenario", "nope"]).output().unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("\"nope\" is not registered"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn convert_turns_a_fixture_into_a_request_body_and_back() {
    use crate::helpers::convert;
    let text = crate::helpers::fixture_text("poi_run_request");
    let binary = convert(&["--type", "TScenarioRunRequest", "--from", "text", "--to", "binary"], text.as_bytes());
    assert!(binary.status.success(), "{}", String::from_utf8_lossy(&binary.stderr));
    let json = convert(&["--type", "TScenarioRunRequest", "--from", "binary", "--to", "json"], &binary.stdout);
    let json = String::from_utf8(json.stdout).unwrap();
    assert!(json.contains("\"RequestId\": \"95EB38D6-FA1C-4835-8B21-0023522AF013\""), "{json}");
    let bad = convert(&["--type", "TScenarioRunRequest", "--from", "text", "--to", "binary"], b"BaseRequest {");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("invalid text format"));
}

#[test]
fn a_second_ctrl_c_stops_the_binary_at_once() {
    let (mut child, lines, _) = serve_binary("30000");
    let mut lines = lines.map_while(Result::ok);
    signal(&child, "-INT");
    // The first Ctrl-C is taken: the server drains, and would serve on for 30 s.
    assert!(lines.by_ref().any(|l| l.contains("draining")), "the first signal starts the drain");
    signal(&child, "-INT");
    let pid = child.id().to_string();
    let (done, exited) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(child.wait()));
    let Ok(exit) = exited.recv_timeout(Duration::from_secs(10)) else {
        let _ = Command::new("kill").args(["-KILL", &pid]).status();
        panic!("still running 10 s after the second Ctrl-C (the delay is 30 s)");
    };
    assert_eq!(exit.unwrap().code(), Some(130), "the status of a process that SIGINT ended");
    let rest: Vec<String> = lines.collect();
    assert!(rest.iter().any(|l| l.contains("a second signal") && l.contains("SIGINT")), "{rest:#?}");
    assert!(!rest.iter().any(|l| l.contains("stopped")), "not the graceful end: {rest:#?}");
}
