//! Connection limits and timeouts, seen from hostile and careless clients:
//! slow heads (on a server with the stream lane too), bodies that never end,
//! idle keep-alives, too many connections (and too few open files for
//! them), HTTP/2 clients that never read, whatever their windows, and
//! keep-alive requests during a drain.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::Bytes;
use megamind_core::{
    app::App, codec::Format, config::Config, proto::n_alice::n_scenarios::TScenarioRunRequest,
    rules::metrics::ServerMetrics,
};
use megamind_scenario::scenarios::demo::Demo;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use crate::helpers::{
    LoggedServer, TestApp, binary_with_open_files, fixture_body, registry_of, serve_app, served_config, spawn_app,
    spawn_builtin,
};

/// Bound on every wait for the server: far above the timeouts under test.
const BOUND: Duration = Duration::from_secs(5);

async fn spawn(config: Config) -> TestApp {
    spawn_app(config, registry_of("demo", Arc::new(Demo::new()))).await
}

fn run_body() -> Vec<u8> {
    fixture_body::<TScenarioRunRequest>("poi_run_request", Format::Binary)
}

/// A keep-alive `POST /demo/run` of the fixture.
fn run_request() -> Vec<u8> {
    let body = run_body();
    let head = format!(
        "POST /demo/run HTTP/1.1\r\nhost: test\r\ncontent-type: application/protobuf\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    [head.into_bytes(), body].concat()
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nhost: test\r\n\r\n").into_bytes()
}

/// One HTTP/1.1 answer: its head (lower-cased) and body, or `None` when the
/// connection closed before a whole one arrived.
async fn read_answer(stream: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buffer = Vec::new();
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let mut chunk = [0; 4096];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length: "))
        .map_or(0, |value| value.trim().parse().expect("a numeric content-length"));
    let mut body = buffer[head_end..].to_vec();
    while body.len() < length {
        let mut chunk = [0; 4096];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    Some((head, body))
}

/// Whether the server closes `stream` within [`BOUND`] (reading and dropping what it sends).
async fn closed_by_server(stream: &mut TcpStream) -> bool {
    let drain = async {
        let mut chunk = [0; 4096];
        while let Ok(n) = stream.read(&mut chunk).await {
            if n == 0 {
                break;
            }
        }
    };
    tokio::time::timeout(BOUND, drain).await.is_ok()
}

/// Sends a byte of head every 40 ms until the server closes `stream`:
/// the bytes sent, or `None` when it is still open `BOUND` after `started`.
async fn trickle_until_closed(stream: &mut TcpStream, started: Instant) -> Option<u32> {
    let mut trickled = 0;
    loop {
        let mut chunk = [0; 64];
        match tokio::time::timeout(Duration::from_millis(40), stream.read(&mut chunk)).await {
            Ok(Ok(0) | Err(_)) => return Some(trickled),
            Ok(Ok(_)) => continue,
            Err(_) if started.elapsed() > BOUND => return None,
            Err(_) => {
                trickled += 1;
                let _ = stream.write_all(b"x").await;
            }
        }
    }
}

/// `/metrics` read on a connection of its own.
async fn metrics(app: &TestApp) -> String {
    app.get("/metrics").await.1
}

#[tokio::test]
async fn a_slow_request_head_is_cut_off_at_the_header_timeout() {
    let app = spawn(Config { header_timeout_ms: 200, ..Config::default() }).await;

    // Half a head, then a byte now and then: the clock runs from the first byte.
    let mut slow = TcpStream::connect(app.addr).await.unwrap();
    let started = Instant::now();
    slow.write_all(b"POST /demo/run HTTP/1.1\r\nhost: test\r\n").await.unwrap();
    let trickled = trickle_until_closed(&mut slow, started).await;
    assert!(trickled.is_some(), "the slow head is still open after {BOUND:?}");
    assert!(started.elapsed() >= Duration::from_millis(180), "closed early: {:?}", started.elapsed());
    assert!(trickled > Some(0), "bytes kept arriving while the head was timed");

    // A connection that sends nothing at all owes its first head just the same.
    let mut silent = TcpStream::connect(app.addr).await.unwrap();
    assert!(closed_by_server(&mut silent).await, "a silent connection is closed");
    let text = metrics(&app).await;
    assert!(text.contains(r#"megamind_connections_closed_total{reason="header_timeout"} 2"#), "{text}");
}

#[tokio::test]
async fn on_a_server_with_the_stream_lane_every_kind_of_slow_head_is_cut_off_at_the_header_timeout() {
    // The assistant's streams give the server its lane: a connection's first
    // bytes are read before hyper's, by code of the server's own.
    let app = spawn_builtin(Config { header_timeout_ms: 300, ..served_config() }).await;
    for (case, first) in [
        ("silent", None),
        ("a stream's head, trickled on the lane", Some(&b"GET /llm/stream/x HTTP/1.1\r\nhost: test\r\n"[..])),
        ("a call's head, trickled on the main threads", Some(b"POST /assistant/run HTTP/1.1\r\nhost: test\r\n")),
    ] {
        let mut slow = TcpStream::connect(app.addr).await.unwrap();
        let started = Instant::now();
        let closed = match first {
            None => closed_by_server(&mut slow).await,
            Some(first) => {
                slow.write_all(first).await.unwrap();
                trickle_until_closed(&mut slow, started).await.is_some()
            }
        };
        assert!(closed, "{case}: still open after {BOUND:?}");
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(280), "{case}: closed early, at {took:?}");
        assert!(took < Duration::from_millis(2_000), "{case}: closed late, at {took:?}");
    }
    let text = metrics(&app).await;
    assert!(text.contains(r#"megamind_connections_closed_total{reason="header_timeout"} 3"#), "{text}");
}

#[tokio::test]
async fn a_new_connections_first_head_is_due_a_header_timeout_after_its_opening() {
    let app = spawn(Config { header_timeout_ms: 400, ..Config::default() }).await;
    let mut late = TcpStream::connect(app.addr).await.unwrap();
    let opened = Instant::now();
    // The first byte comes late (the client's pace, not a wait for the
    // server), then the head trickles on: it is still due at 400 ms.
    tokio::time::sleep(Duration::from_millis(350)).await;
    late.write_all(b"POST /demo/run HTTP/1.1\r\n").await.unwrap();
    let closed = trickle_until_closed(&mut late, opened).await.is_some();
    assert!(closed, "the late head is still open after {BOUND:?}");
    // From its first byte, it would have had until 750 ms.
    assert!(opened.elapsed() < Duration::from_millis(700), "closed at {:?}", opened.elapsed());
}

#[tokio::test]
async fn a_body_that_never_ends_is_answered_408_within_the_budget_and_the_connection_closed() {
    let app = spawn(Config::default()).await;
    let head = "POST /demo/run HTTP/1.1\r\nhost: test\r\ncontent-type: application/protobuf\r\n";
    for (case, request) in [
        ("unfinished chunked body", format!("{head}transfer-encoding: chunked\r\n\r\n5\r\nab")),
        ("huge declared chunk", format!("{head}transfer-encoding: chunked\r\n\r\nfffffff\r\nabc")),
        ("declared length never sent", format!("{head}content-length: 1000\r\n\r\n0123456789")),
    ] {
        let mut stream = TcpStream::connect(app.addr).await.unwrap();
        let started = Instant::now();
        stream.write_all(request.as_bytes()).await.unwrap();
        let answer = tokio::time::timeout(BOUND, read_answer(&mut stream)).await;
        let (head, body) = answer.unwrap_or_else(|_| panic!("{case}: no answer")).expect("an answer");
        assert!(head.starts_with("http/1.1 408"), "{case}: {head}");
        assert!(head.contains("connection: close"), "{case}: {head}");
        assert!(String::from_utf8_lossy(&body).contains("300 ms budget of /run"), "{case}");
        assert!(started.elapsed() < Duration::from_secs(2), "{case}: answered in {:?}", started.elapsed());
        assert!(closed_by_server(&mut stream).await, "{case}: the connection is closed");
    }
    // Counted as calls of /demo/run, though no scenario ran: no budget overrun.
    let metrics = app.metrics_line(&crate::helpers::refused_series("http", "body_too_slow", 3)).await;
    let overruns = r#"megamind_budget_overruns_total{handler="run",scenario="demo"} 0"#;
    assert!(metrics.lines().any(|line| line == overruns), "{metrics}");
}

#[tokio::test]
async fn an_over_limit_body_is_refused_with_connection_close() {
    let app = spawn(Config { body_limit: 16, ..Config::default() }).await;
    let mut stream = TcpStream::connect(app.addr).await.unwrap();
    stream.write_all(&run_request()).await.unwrap();
    let (head, _) = tokio::time::timeout(BOUND, read_answer(&mut stream)).await.unwrap().expect("an answer");
    assert!(head.starts_with("http/1.1 413") && head.contains("connection: close"), "{head}");
}

#[tokio::test]
async fn a_grpc_message_that_never_ends_gets_deadline_exceeded() {
    let app = spawn(Config::default()).await;
    let tcp = TcpStream::connect(app.addr).await.unwrap();
    let (mut client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let request = http::Request::post("/megamind_scenario.v1.Scenario/Run")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (response, mut body) = client.send_request(request, false).unwrap();
    // A message header announcing 100 bytes, then 3 of them, and no end.
    body.send_data(Bytes::from_static(&[0, 0, 0, 0, 100, 1, 2, 3]), false).unwrap();
    let started = Instant::now();
    assert_eq!(grpc_status(response).await, "4", "DEADLINE_EXCEEDED");
    assert!(started.elapsed() < Duration::from_secs(2), "answered in {:?}", started.elapsed());
}

/// The `grpc-status` of an answer, from its head or its trailers.
async fn grpc_status(response: h2::client::ResponseFuture) -> http::HeaderValue {
    let response = tokio::time::timeout(BOUND, response).await.expect("an answer in time").unwrap();
    if let Some(status) = response.headers().get("grpc-status") {
        return status.clone();
    }
    let mut body = response.into_body();
    let trailers = tokio::time::timeout(BOUND, body.trailers()).await.unwrap().unwrap().expect("trailers");
    trailers.get("grpc-status").expect("grpc-status").clone()
}

/// Health's calls read their message before they answer, a watch before
/// its lifetime starts: one never finished held its connection and a
/// watch's slot for ever. It is cut off at the header timeout, or a second
/// after its head, whichever comes first: meanwhile it counts among the
/// requests open server-wide.
#[tokio::test]
async fn a_health_message_that_never_ends_is_cut_off_at_the_header_timeout() {
    health_messages_never_ending(Config { header_timeout_ms: 300, ..Config::default() }, Duration::from_secs(2)).await;
    let long = Config { header_timeout_ms: 60_000, ..Config::default() };
    health_messages_never_ending(long, Duration::from_secs(3)).await;
}

/// Three health calls whose message never ends, on a server of `config`:
/// each answered `DEADLINE_EXCEEDED` within `within`.
async fn health_messages_never_ending(config: Config, within: Duration) {
    let app = spawn(config).await;
    let tcp = TcpStream::connect(app.addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut pending = Vec::new();
    for path in ["/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch", "/grpc.health.v1.Health/Watch"] {
        let request =
            http::Request::post(path).header("content-type", "application/grpc").header("te", "trailers").body(());
        let mut client = client.clone().ready().await.unwrap();
        let (response, mut body) = client.send_request(request.unwrap(), false).unwrap();
        // A message header announcing 100 bytes, then one of them, and no end.
        body.send_data(Bytes::from_static(&[0, 0, 0, 0, 100, 1]), false).unwrap();
        pending.push((path, response, body));
    }
    let started = Instant::now();
    for (path, response, _body) in pending {
        assert_eq!(grpc_status(response).await, "4", "{path}: DEADLINE_EXCEEDED");
    }
    assert!(started.elapsed() < within, "answered in {:?}", started.elapsed());
}

/// An HTTP/2 connection that opens no stream sends pings and settings, not
/// request heads: the idle timeout closes it (with a GOAWAY), and pings do
/// not keep it open.
#[tokio::test]
async fn an_h2_connection_that_opens_no_stream_is_closed_at_the_idle_timeout() {
    let app = spawn(Config { idle_timeout_ms: 300, header_timeout_ms: 60_000, ..Config::default() }).await;
    let tcp = TcpStream::connect(app.addr).await.unwrap();
    let (_client, mut connection) = h2::client::handshake(tcp).await.unwrap();
    let mut ping_pong = connection.ping_pong().expect("pings");
    let opened = Instant::now();
    let pings = tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(100));
        loop {
            every.tick().await;
            if ping_pong.ping(h2::Ping::opaque()).await.is_err() {
                return;
            }
        }
    });
    tokio::time::timeout(BOUND, connection).await.expect("the connection is closed").expect("closed by a GOAWAY");
    assert!(opened.elapsed() >= Duration::from_millis(250), "closed early: {:?}", opened.elapsed());
    pings.abort();
    let text = metrics(&app).await;
    assert!(text.contains(r#"megamind_connections_closed_total{reason="idle_timeout"} 1"#), "{text}");
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let app = spawn(Config { idle_timeout_ms: 300, ..Config::default() }).await;
    let mut stream = TcpStream::connect(app.addr).await.unwrap();
    stream.write_all(&run_request()).await.unwrap();
    let (head, _) = read_answer(&mut stream).await.expect("an answer");
    assert!(head.starts_with("http/1.1 200") && !head.contains("connection: close"), "{head}");
    let idle_from = Instant::now();
    assert!(closed_by_server(&mut stream).await, "the idle connection is closed");
    assert!(idle_from.elapsed() >= Duration::from_millis(250), "closed early: {:?}", idle_from.elapsed());
    let text = metrics(&app).await;
    assert!(text.contains(r#"megamind_connections_closed_total{reason="idle_timeout"} 1"#), "{text}");
}

#[tokio::test]
async fn past_max_connections_a_new_connection_waits_for_a_free_slot() {
    let app = spawn(Config { max_connections: 2, ..Config::default() }).await;
    let mut open = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(app.addr).await.unwrap();
        stream.write_all(&get("/healthz")).await.unwrap();
        assert!(read_answer(&mut stream).await.expect("served").0.starts_with("http/1.1 200"));
        // Busy: a head on its way, which no idle connection's closing takes.
        stream.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
        open.push(stream);
    }
    // The kernel completes the handshake; the server does not take the connection yet.
    let mut third = TcpStream::connect(app.addr).await.unwrap();
    third.write_all(&get("/healthz")).await.unwrap();
    let early = tokio::time::timeout(Duration::from_millis(300), read_answer(&mut third)).await;
    assert!(early.is_err(), "the third connection was served while two were open");

    drop(open.remove(0));
    let answer = tokio::time::timeout(BOUND, read_answer(&mut third)).await.expect("served once a slot is free");
    assert!(answer.expect("an answer").0.starts_with("http/1.1 200"));
    third.write_all(&get("/metrics")).await.unwrap();
    let (_, text) = read_answer(&mut third).await.expect("metrics");
    let text = String::from_utf8(text).unwrap();
    let waited = text
        .lines()
        .find_map(|line| line.strip_prefix("megamind_connections_waited_total "))
        .and_then(|value| value.parse::<u64>().ok())
        .expect("the wait counter");
    assert!(waited >= 1, "{text}");
    assert!(text.contains("megamind_connections_open 2"), "{text}");
}

/// At `max_connections`, connections idle between requests (a client's
/// pool, or someone holding slots) give way to a newcomer long before the
/// idle timeout, which would otherwise keep it waiting.
#[tokio::test]
async fn past_max_connections_idle_connections_give_way_to_a_new_one() {
    let app = spawn(Config { max_connections: 2, idle_timeout_ms: 60_000, ..Config::default() }).await;
    let mut idle = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(app.addr).await.unwrap();
        stream.write_all(&get("/healthz")).await.unwrap();
        assert!(read_answer(&mut stream).await.expect("served").0.starts_with("http/1.1 200"));
        idle.push(stream);
    }
    let mut third = TcpStream::connect(app.addr).await.unwrap();
    third.write_all(&get("/healthz")).await.unwrap();
    let (head, _) = tokio::time::timeout(BOUND, read_answer(&mut third)).await.expect("served").expect("an answer");
    assert!(head.starts_with("http/1.1 200"), "{head}");
    let mut closed = 0;
    for stream in &mut idle {
        closed += u64::from(closed_by_server(stream).await);
    }
    assert!(closed >= 1, "an idle connection gave way");
    let reclaimed = r#"megamind_connections_closed_total{reason="reclaimed"}"#;
    // The scrape's own connection may take the third's place as well.
    let counted = crate::metrics::sample(&metrics(&app).await, reclaimed).expect("the reclaimed counter");
    assert!(counted >= closed as f64, "{counted} counted for {closed} closed");
}

/// So do HTTP/2 connections with no stream open: a client's pool, whose
/// pings and window updates are no request on its way, or connections
/// that sent nothing but their preface.
#[tokio::test]
async fn past_max_connections_idle_h2_connections_give_way_to_a_new_one() {
    let app = spawn(Config { max_connections: 2, idle_timeout_ms: 60_000, ..Config::default() }).await;
    let mut idle = Vec::new();
    for _ in 0..2 {
        let tcp = TcpStream::connect(app.addr).await.unwrap();
        let (client, connection) = h2::client::handshake(tcp).await.unwrap();
        let connection = tokio::spawn(connection);
        let mut client = client.ready().await.expect("the connection is up");
        let (response, _) = client.send_request(http::Request::get("/healthz").body(()).unwrap(), true).unwrap();
        assert_eq!(response.await.expect("served").status(), 200);
        idle.push((client, connection));
    }
    let mut third = TcpStream::connect(app.addr).await.unwrap();
    third.write_all(&get("/healthz")).await.unwrap();
    let (head, _) = tokio::time::timeout(BOUND, read_answer(&mut third)).await.expect("served").expect("an answer");
    assert!(head.starts_with("http/1.1 200"), "{head}");
    // A connection told to close (GOAWAY) ends once its client sees it.
    let ended = futures_util::future::select_all(idle.into_iter().map(|(_, connection)| connection));
    let (joined, _, _) = tokio::time::timeout(BOUND, ended).await.expect("an idle connection gave way");
    assert!(joined.is_ok(), "its task ended without a panic");
}

#[tokio::test]
async fn an_h2_client_that_reads_nothing_is_held_to_its_streams_and_cut_off() {
    let config = Config { h2_max_concurrent_streams: 4, send_timeout_ms: 300, ..Config::default() };
    let app = spawn(config).await;
    let tcp = TcpStream::connect(app.addr).await.unwrap();
    // A zero window: the server may send no answer byte on any stream.
    let (client, connection) = h2::client::Builder::new().initial_window_size(0).handshake(tcp).await.unwrap();
    let (ended_tx, ended_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let _ = connection.await;
        let _ = ended_tx.send(Instant::now());
    });
    let mut answers = Vec::new();
    for _ in 0..5 {
        let mut client = client.clone().ready().await.expect("the connection is up");
        let request = http::Request::post("/demo/run").header("content-type", "application/protobuf").body(()).unwrap();
        let (response, mut body) = client.send_request(request, false).unwrap();
        body.send_data(Bytes::from(run_body()), true).unwrap();
        answers.push(tokio::spawn(response));
    }
    let fifth = answers.pop().unwrap();
    let mut heads_at = Instant::now();
    // Kept, not dropped: dropping one would reset its stream and free it.
    let mut held = Vec::new();
    for answer in answers {
        let response = tokio::time::timeout(BOUND, answer).await.expect("a head in time").unwrap().unwrap();
        assert_eq!(response.status(), 200);
        held.push(response);
        heads_at = Instant::now();
    }
    let ended_at = tokio::time::timeout(BOUND, ended_rx).await.expect("the connection is closed").unwrap();
    assert!(ended_at - heads_at >= Duration::from_millis(200), "closed early: {:?}", ended_at - heads_at);
    let fifth = tokio::time::timeout(BOUND, fifth).await.unwrap().unwrap();
    assert!(fifth.is_err(), "the fifth stream waited past the limit of 4 and was never served: {fifth:?}");
    let text = metrics(&app).await;
    assert!(text.contains(r#"megamind_connections_closed_total{reason="send_timeout"} 1"#), "{text}");
}

/// An HTTP/2 connection writes pings' answers while a stream's client
/// keeps its window shut: once counted as the answer's progress, a ping
/// every 100 ms held a stalled answer open for ever.
#[tokio::test]
async fn pings_do_not_keep_an_unread_h2_answer_past_the_send_timeout() {
    let config = Config { send_timeout_ms: 300, idle_timeout_ms: 60_000, ..Config::default() };
    let app = spawn(config).await;
    let tcp = TcpStream::connect(app.addr).await.unwrap();
    let (client, mut connection) = h2::client::Builder::new().initial_window_size(0).handshake(tcp).await.unwrap();
    let mut ping_pong = connection.ping_pong().expect("pings");
    let (ended_tx, ended_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let _ = connection.await;
        let _ = ended_tx.send(Instant::now());
    });
    let pings = tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(100));
        let mut answered = 0_u32;
        loop {
            every.tick().await;
            if ping_pong.ping(h2::Ping::opaque()).await.is_err() {
                return answered;
            }
            answered += 1;
        }
    });
    let mut client = client.ready().await.expect("the connection is up");
    let request = http::Request::post("/demo/run").header("content-type", "application/protobuf").body(()).unwrap();
    let (response, mut body) = client.send_request(request, false).unwrap();
    body.send_data(Bytes::from(run_body()), true).unwrap();
    // Kept, not dropped: dropping it would reset its stream and free it.
    let _head = tokio::time::timeout(BOUND, response).await.expect("a head in time").unwrap();
    tokio::time::timeout(BOUND, ended_rx).await.expect("the connection is closed").unwrap();
    let answered = pings.await.unwrap();
    assert!(answered >= 2, "pings were answered while the answer waited: {answered}");
    let text = metrics(&app).await;
    assert!(text.contains(r#"megamind_connections_closed_total{reason="send_timeout"} 1"#), "{text}");
}

#[tokio::test]
async fn keep_alive_requests_sent_just_after_shutdown_are_all_answered() {
    let mut app = spawn(Config::default()).await;
    let mut streams = Vec::new();
    for _ in 0..32 {
        let mut stream = TcpStream::connect(app.addr).await.unwrap();
        stream.write_all(&run_request()).await.unwrap();
        assert!(read_answer(&mut stream).await.expect("served").0.starts_with("http/1.1 200"));
        streams.push(stream);
    }
    app.begin_shutdown();
    for stream in &mut streams {
        stream.write_all(&run_request()).await.unwrap();
    }
    for (at, stream) in streams.iter_mut().enumerate() {
        let answer = tokio::time::timeout(BOUND, read_answer(stream)).await.expect("an answer in time");
        let (head, _) = answer.unwrap_or_else(|| panic!("connection {at} was closed unanswered"));
        assert!(head.starts_with("http/1.1 200"), "{head}");
        assert!(head.contains("connection: close"), "the client is told to reconnect elsewhere: {head}");
        assert!(closed_by_server(stream).await, "and the connection closes after the answer");
    }
}

#[tokio::test]
async fn a_request_head_longer_than_the_read_buffer_is_refused_with_431() {
    let app = spawn(Config { http1_read_buffer_bytes: 8192, ..Config::default() }).await;
    let padding = "a".repeat(9_000);
    // The second opens like a stream: the stream lane reads its head first.
    for path in ["/healthz", "/llm/stream/x"] {
        let mut stream = TcpStream::connect(app.addr).await.unwrap();
        let head = format!("GET {path} HTTP/1.1\r\nhost: test\r\nx-pad: {padding}\r\n\r\n");
        stream.write_all(head.as_bytes()).await.unwrap();
        let (head, _) = tokio::time::timeout(BOUND, read_answer(&mut stream)).await.unwrap().expect("an answer");
        assert!(head.starts_with("http/1.1 431"), "{path}: {head}");
        assert!(closed_by_server(&mut stream).await, "{path}");
    }
    let mut stream = TcpStream::connect(app.addr).await.unwrap();
    stream.write_all(&get("/healthz")).await.unwrap();
    let (head, _) = tokio::time::timeout(BOUND, read_answer(&mut stream)).await.unwrap().expect("an answer");
    assert!(head.starts_with("http/1.1 200"), "a head that fits is served: {head}");
}

/// HTTP/2 heads are bounded by the read buffer as HTTP/1.1's are, 16 KiB
/// at the least: a longer header list is refused, one within a buffer
/// raised for it is served, and the server goes on serving.
#[tokio::test]
async fn an_h2_header_list_longer_than_the_read_buffer_is_refused() {
    let h2 = || megamind_core::http_client::client_builder().no_proxy().http2_prior_knowledge().build().unwrap();
    let padded = |app: &TestApp, bytes: usize| h2().get(app.url("/healthz")).header("x-pad", "a".repeat(bytes)).send();
    let app = spawn(Config::default()).await;
    match padded(&app, 20_000).await {
        Ok(response) => assert_eq!(response.status(), 431, "{response:?}"),
        Err(error) => assert!(error.is_request(), "refused, not lost: {error:?}"),
    }
    let response = padded(&app, 12_000).await.unwrap();
    assert_eq!(
        (response.version(), response.status().as_u16()),
        (reqwest::Version::HTTP_2, 200),
        "16 KiB at the least"
    );
    let raised = spawn(Config { http1_read_buffer_bytes: 32 * 1024, ..Config::default() }).await;
    match padded(&raised, 40_000).await {
        Ok(response) => assert_eq!(response.status(), 431, "{response:?}"),
        Err(error) => assert!(error.is_request(), "refused, not lost: {error:?}"),
    }
    let response = padded(&raised, 20_000).await.unwrap();
    assert_eq!(response.status(), 200, "a buffer raised holds a longer list");
}

#[tokio::test]
async fn past_max_open_requests_a_busy_h2_connection_has_its_new_streams_refused() {
    let config = Config { max_open_requests: 2, send_timeout_ms: 5_000, ..Config::default() };
    let app = spawn(config).await;
    let tcp = TcpStream::connect(app.addr).await.unwrap();
    // A zero window: no answer is ever read, so every admitted request stays open.
    let (client, connection) = h2::client::Builder::new().initial_window_size(0).handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut outcomes = Vec::new();
    for _ in 0..4 {
        let mut client = client.clone().ready().await.expect("the connection is up");
        let request = http::Request::post("/demo/run").header("content-type", "application/protobuf").body(()).unwrap();
        let (response, mut body) = client.send_request(request, false).unwrap();
        body.send_data(Bytes::from(run_body()), true).unwrap();
        // Answered (or reset) before the next is sent: the server has seen it.
        outcomes.push(tokio::time::timeout(BOUND, response).await.expect("an answer or a reset in time"));
    }
    let mut held = Vec::new();
    for outcome in outcomes.drain(..2) {
        held.push(outcome.expect("the first two are served"));
    }
    assert!(held.iter().all(|response| response.status() == 200));
    for outcome in outcomes {
        let error = outcome.expect_err("past the bound the stream is refused");
        assert_eq!(error.reason(), Some(h2::Reason::REFUSED_STREAM), "{error}");
    }
    let text = metrics(&app).await;
    assert!(text.contains("megamind_h2_streams_refused_total 2"), "{text}");
    // Another connection with nothing open is still served.
    let (status, _) = app.get("/healthz").await;
    assert_eq!(status, 200);
}

/// A run request whose `State`, of a type the server does not know, is 3 MB:
/// the assistant hands a declined request's `State` back whole.
fn large_answer_request() -> Vec<u8> {
    use megamind_core::proto::n_alice::n_scenarios::TScenarioBaseRequest;
    use prost::Message;
    let state = prost_types::Any { type_url: "type.googleapis.com/No.Such".into(), value: vec![7; 3 << 20] };
    let base = TScenarioBaseRequest { request_id: "large".into(), state: Some(state), ..Default::default() };
    let body = TScenarioRunRequest { base_request: Some(base), input: None }.encode_to_vec();
    let head = format!(
        "POST /assistant/run HTTP/1.1\r\nhost: test\r\ncontent-type: application/protobuf\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    [head.into_bytes(), body].concat()
}

/// A whole answer of megabytes, given at once, is handed to the connection a
/// frame at a time: a client that reads none of it is cut off at the send
/// timeout, over HTTP/1.1 and HTTP/2, not held (with the answer) to the idle
/// timeout as when the connection took it all in one frame.
#[tokio::test]
async fn a_large_answer_left_unread_is_cut_off_at_the_send_timeout() {
    let config = Config { send_timeout_ms: 300, idle_timeout_ms: 60_000, ..crate::helpers::served_config() };
    let app = crate::helpers::spawn_builtin(config).await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut http1 = socket.connect(app.addr).await.unwrap();
    http1.write_all(&large_answer_request()).await.unwrap();
    app.metrics_line(r#"megamind_connections_closed_total{reason="send_timeout"} 1"#).await;

    let tcp = TcpStream::connect(app.addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let request =
        http::Request::post("/assistant/run").header("content-type", "application/protobuf").body(()).unwrap();
    let (response, mut body) = client.send_request(request, false).unwrap();
    let request = large_answer_request();
    let at = request.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    body.send_data(Bytes::copy_from_slice(&request[at..]), true).unwrap();
    // The head, kept: its body is never read, so the window never opens again.
    let _response = tokio::time::timeout(BOUND, response).await.expect("a head in time").unwrap();
    app.metrics_line(r#"megamind_connections_closed_total{reason="send_timeout"} 2"#).await;
    drop(http1);
}

/// A body in one-byte chunks costs the server a microsecond or so a chunk:
/// 500,000 of them took half a second of CPU before the budget ran out.
/// Past 65,536 pieces the body is refused, at once.
#[tokio::test]
async fn a_body_in_too_many_chunks_is_refused() {
    // Time enough for a test build to take them all in.
    let mut config = Config::default();
    config.budget.run_ms = 10_000;
    let app = spawn(config).await;
    let mut tcp = TcpStream::connect(app.addr).await.unwrap();
    let head = "POST /demo/run HTTP/1.1\r\nhost: test\r\ncontent-type: application/protobuf\r\ntransfer-encoding: chunked\r\n\r\n";
    let chunks = "1\r\nx\r\n".repeat(70_000);
    tcp.write_all(format!("{head}{chunks}0\r\n\r\n").as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(BOUND, tcp.read_to_end(&mut answer)).await.expect("answered and closed").unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("the body came in more than 65536 pieces"), "{answer}");
}

/// An HTTP/2 client's first bytes: the preface, then its SETTINGS frame of `settings`.
fn h2_opening(settings: &[u8]) -> Vec<u8> {
    [&b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..], &h2_frame(4, 0, 0, settings)].concat()
}

/// One HTTP/2 frame: its 9-byte head and `payload`.
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).unwrap().to_be_bytes();
    [&length[1..], &[kind, flags], &stream.to_be_bytes(), payload].concat()
}

/// DATA frames that carry nothing use up no flow-control window, yet each
/// costs the server a frame: a flood of them on one request is cut off (by
/// HTTP/2's own check, `GOAWAY` with `ENHANCE_YOUR_CALM`, or the body's
/// bound on pieces, 400) long before the budget, and the server goes on.
#[tokio::test]
async fn an_h2_flood_of_empty_data_frames_is_cut_off() {
    let mut config = Config::default();
    config.budget.run_ms = 10_000;
    let app = spawn(config).await;
    let mut tcp = TcpStream::connect(app.addr).await.unwrap();
    let mut opening = h2_opening(&[]);
    // POST, http, `/demo/run` and `content-type: application/protobuf` as
    // literals not indexed: END_HEADERS, the body to follow.
    let block = [&[0x83, 0x86, 0x04, 9][..], b"/demo/run", &[0x0f, 0x10, 20], b"application/protobuf"].concat();
    opening.extend(h2_frame(1, 0x4, 1, &block));
    let flood = h2_frame(0, 0, 1, &[]).repeat(200_000);
    let started = Instant::now();
    let (mut reader, mut writer) = tcp.split();
    let mut answer = Vec::new();
    let (_, read) = tokio::join!(
        async {
            // The server may close before it has read it all.
            let _ = writer.write_all(&opening).await;
            let _ = writer.write_all(&flood).await;
        },
        tokio::time::timeout(BOUND, reader.read_to_end(&mut answer))
    );
    read.expect("cut off in time").ok();
    assert!(started.elapsed() < Duration::from_secs(5), "cut off before the budget: {:?}", started.elapsed());
    // The frames the server sent: a GOAWAY (7) saying ENHANCE_YOUR_CALM (11),
    // or stream 1's HEADERS (1) opening with `:status 400` (static index 12).
    let (mut at, mut calmed, mut refused) = (0, false, false);
    while at + 9 <= answer.len() {
        let length = usize::from(answer[at]) << 16 | usize::from(answer[at + 1]) << 8 | usize::from(answer[at + 2]);
        let (kind, stream) = (answer[at + 3], u32::from_be_bytes(answer[at + 5..at + 9].try_into().unwrap()));
        let payload = &answer[at + 9..(at + 9 + length).min(answer.len())];
        calmed |= kind == 7 && payload.get(4..8) == Some(&11u32.to_be_bytes()[..]);
        refused |= kind == 1 && stream == 1 && payload.first() == Some(&0x8c);
        at += 9 + length;
    }
    assert!(calmed || refused, "neither GOAWAY ENHANCE_YOUR_CALM nor 400 in {} bytes", answer.len());
    assert_eq!(app.post_binary("/demo/run", run_body()).await.0, 200, "the server goes on");
}

#[tokio::test]
async fn an_h2_client_with_open_windows_that_reads_nothing_holds_a_bounded_buffer_per_stream() {
    // A route whose answer never ends, counting what the server took of it.
    let taken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = taken.clone();
    let endless = axum::routing::get(move || {
        let counted = counted.clone();
        let chunk = Bytes::from(vec![b'x'; 1024]);
        let pieces = futures_util::stream::repeat_with(move || {
            counted.fetch_add(chunk.len(), std::sync::atomic::Ordering::Relaxed);
            Ok::<_, std::convert::Infallible>(chunk.clone())
        });
        std::future::ready(axum::body::Body::from_stream(pieces))
    });
    const STREAMS: u32 = 200;
    let config = Config { h2_max_concurrent_streams: STREAMS, send_timeout_ms: 60_000, ..Config::default() };
    let registry = registry_of("demo", Arc::new(Demo::new()));
    let routes = vec![("/endless".to_owned(), endless)];
    let app = App::with_routes(&config, registry, ServerMetrics::new(), routes).unwrap();
    let app = serve_app(app).await;

    // Windows as wide as HTTP/2 allows, a small receive buffer, and not a
    // byte read: the server may buffer what it likes, up to its own bound.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut tcp = socket.connect(app.addr).await.unwrap();
    let widest = 0x7fff_ffffu32;
    let settings = [&[0, 4][..], &widest.to_be_bytes(), &[0, 2], &0u32.to_be_bytes()].concat();
    let mut opening = h2_opening(&settings);
    opening.extend(h2_frame(8, 0, 0, &(widest - 65_535).to_be_bytes()));
    // GET, http, and `/endless` as a literal not indexed: END_STREAM | END_HEADERS.
    let block = [&[0x82, 0x86, 0x04, 8][..], b"/endless"].concat();
    for stream in (1..STREAMS * 2).step_by(2) {
        opening.extend(h2_frame(1, 0x5, stream, &block));
    }
    tcp.write_all(&opening).await.unwrap();

    // Taken until it stops: at most the kernel's buffers (a few MiB) and
    // the bound per stream; hyper's default (400 KiB a stream) would take 80 MiB.
    let mut last = usize::MAX;
    let settled = tokio::time::timeout(BOUND, async {
        loop {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let now = taken.load(std::sync::atomic::Ordering::Relaxed);
            if now == last {
                return now;
            }
            last = now;
        }
    })
    .await
    .expect("the server stops taking the answers");
    let streams = usize::try_from(STREAMS).unwrap();
    assert!(settled >= streams * 1024, "every stream answered: {settled} bytes taken");
    assert!(settled <= 16 << 20, "{settled} bytes taken for {STREAMS} streams");
    drop(tcp);
}

/// An idle HTTP/2 client that never answers the shutdown's ping (hyper
/// closes an idle connection only once it has) is gone the send timeout
/// after it was told to close: one such client once held every stop to
/// the whole drain timeout.
#[tokio::test]
async fn an_h2_client_deaf_to_the_shutdown_does_not_hold_the_drain() {
    let config = Config { shutdown_delay_ms: 0, drain_timeout_ms: 10_000, send_timeout_ms: 300, ..Config::default() };
    let mut app = spawn(config).await;
    let mut tcp = TcpStream::connect(app.addr).await.unwrap();
    let opening = h2_opening(&[]);
    tcp.write_all(&opening).await.unwrap();
    // The server's SETTINGS: the connection is served as HTTP/2.
    let mut head = [0; 9];
    tokio::time::timeout(BOUND, tcp.read_exact(&mut head)).await.expect("the server's settings").unwrap();
    assert_eq!(head[3], 4, "a SETTINGS frame first: {head:?}");

    let stopping = Instant::now();
    app.begin_shutdown();
    // Read and never answer: its GOAWAY and its ping go unanswered.
    assert!(closed_by_server(&mut tcp).await, "still open {BOUND:?} after the stop began");
    tokio::time::timeout(BOUND, app.join()).await.expect("the server stops").expect("serve returns Ok");
    let took = stopping.elapsed();
    assert!(took < Duration::from_secs(3), "stopped after {took:?}, the drain timeout is 10 s");
}

#[tokio::test]
async fn under_a_low_open_files_limit_connections_wait_for_a_slot_instead_of_failing_accepts() {
    // 128 files: 64 of them for connections, the rest for what else the
    // server opens, whatever max_connections (10,000 by default) says.
    let server = LoggedServer::start_as(binary_with_open_files(128), &[]);
    let addr = server.app.addr;
    let mut held = Vec::new();
    for _ in 0..64 {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(&get("/healthz")).await.unwrap();
        let answer = tokio::time::timeout(BOUND, read_answer(&mut stream)).await.expect("answered in time");
        assert!(answer.is_some_and(|(head, _)| head.starts_with("http/1.1 200")), "connection {}", held.len());
        // Busy (a head on its way), or it would give way as an idle one.
        stream.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
        held.push(stream);
    }
    // The 65th waits in the listen backlog, its request unanswered while
    // every slot is held (no answer can show that but a while without one).
    let mut waiting = TcpStream::connect(addr).await.unwrap();
    waiting.write_all(&get("/healthz")).await.unwrap();
    let early = tokio::time::timeout(Duration::from_millis(500), read_answer(&mut waiting)).await;
    assert!(early.is_err(), "served past the cap: {early:?}");
    // A slot given back: it is served.
    drop(held.pop());
    let answer = tokio::time::timeout(BOUND, read_answer(&mut waiting)).await.expect("served once a slot is free");
    assert!(answer.is_some_and(|(head, _)| head.starts_with("http/1.1 200")));
    drop(held);
    let log = server.stop();
    let lowered: Vec<&str> = log.lines().filter(|line| line.contains("max_connections lowered")).collect();
    assert!(lowered.len() == 1 && lowered[0].contains("using=64"), "{log}");
    assert!(!log.contains("accept failed"), "{log}");
}
