//! The stream lane over real sockets: a connection opening with
//! `GET /llm/stream/` is served on the lane's own threads, everything else on
//! the main ones; a request line split before it can be told, a silent
//! connection and a server without the lane behave as before. The lane
//! answers a plain stream request itself and closes the connection; any
//! other request on it is hyper's, kept alive. A subscriber that hangs up
//! gives its stream back at once; one that stops reading is cut off at the
//! send timeout or the drain's end; a stream waiting on its model is not.
//! A third-party SSE client reads the same events as our parser. Each lane
//! runs the worker threads `worker_threads` asks for, one per CPU by default.

use std::{
    io::{Read, Write},
    process::{Command, Stdio},
    time::Duration,
};

use megamind_assistant::jsonseq::{parse_transcript, validate};
use megamind_core::config::Config;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use crate::{
    assistant_harness::{client, run, signed, spawn_module, spawn_module_in},
    helpers::{LoggedServer, TestApp, Transport, binary, served_config, serving_addr_in, spawn_builtin},
    mock_llm::{MockLlm, Reply},
};

/// Bound on every wait for the server.
const BOUND: Duration = Duration::from_secs(10);

/// `megamind_connections_served_total` of `lane`, from `/metrics`.
async fn served(app: &TestApp, lane: &str) -> u64 {
    let (_, text) = app.get("/metrics").await;
    let prefix = format!("megamind_connections_served_total{{lane=\"{lane}\"}} ");
    text.lines().find_map(|line| line.strip_prefix(&prefix)).map_or(0, |n| n.trim().parse().expect("a count"))
}

/// Sends `parts` in turn on one connection (`Connection: close`) and reads the whole answer.
async fn exchange(app: &TestApp, parts: &[&[u8]]) -> String {
    let mut stream = TcpStream::connect(app.addr).await.unwrap();
    for part in parts {
        stream.write_all(part).await.unwrap();
        stream.flush().await.unwrap();
    }
    let mut answer = Vec::new();
    tokio::time::timeout(BOUND, stream.read_to_end(&mut answer)).await.expect("answered in time").unwrap();
    String::from_utf8(answer).expect("UTF-8")
}

/// Asks for call `id`'s stream on `socket` and reads its answer's status
/// line, which must be a 200: the stream has begun.
async fn begin_stream(socket: &mut TcpStream, id: &str) {
    socket.write_all(&stream_request(id)).await.unwrap();
    let mut head = [0u8; 12];
    tokio::time::timeout(BOUND, socket.read_exact(&mut head)).await.expect("answered in time").unwrap();
    assert_eq!(&head, b"HTTP/1.1 200", "the stream began");
}

fn stream_request(id: &str) -> Vec<u8> {
    let path = signed(&format!("/llm/stream/{id}"));
    format!("GET {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n").into_bytes()
}

#[tokio::test]
async fn a_stream_is_served_on_the_stream_lane_and_a_call_on_the_main_one() {
    let mock = MockLlm::start(Reply::stream(&["Сейчас ", "ровно ", "полдень."], Duration::from_millis(30))).await;
    let app = spawn_module(&mock, |_| {}).await;
    let main_before = served(&app, "main").await;
    run(&client(&app, Transport::Http), "lane-1", "который час?").await;

    // Kept alive, as a browser asks: the lane's answer closes it all the same.
    let head =
        format!("GET {} HTTP/1.1\r\nhost: test\r\naccept: text/event-stream\r\n\r\n", signed("/llm/stream/lane-1"));
    let answer = exchange(&app, &[head.as_bytes()]).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head");
    for field in ["content-type: text/event-stream", "transfer-encoding: chunked", "connection: close", "date: "] {
        assert!(head.contains(field), "{field}: {head}");
    }
    let transcript = dechunk(body);
    let (events, _) = parse_transcript(&transcript);
    assert!(validate(&events).is_empty(), "{transcript}");
    let finals: String = events
        .iter()
        .filter(|e| e.name == "final_delta")
        .map(|e| serde_json::from_str::<serde_json::Value>(&e.data).unwrap()["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(finals, "Сейчас ровно полдень.");
    assert_eq!(events.last().map(|e| e.name.as_str()), Some("completed"));

    assert_eq!(served(&app, "stream").await, 1, "the stream's connection");
    assert!(served(&app, "main").await > main_before, "the /run and /metrics connections");
}

/// The body of a chunked answer, its chunk sizes taken out.
fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).expect("a chunk size");
        if size == 0 {
            break;
        }
        out.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
    out
}

#[tokio::test]
async fn a_request_line_split_before_it_can_be_told_is_still_answered() {
    let app = spawn_builtin(served_config()).await;
    let before = served(&app, "main").await + served(&app, "stream").await;
    let answer = exchange(&app, &[b"GET /llm/str", b"eam/x HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n"]).await;
    // An address without its signature opens nothing, whichever lane served it.
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    let answer = exchange(&app, &[b"G", b"ET /healthz HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n"]).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // The two; `/metrics` is read again on its kept-alive connection.
    assert_eq!(served(&app, "main").await + served(&app, "stream").await, before + 2);
}

#[tokio::test]
async fn without_the_lane_a_stream_is_served_on_the_main_threads() {
    let app = spawn_builtin(Config { stream_lane: false, ..served_config() }).await;
    // Signed with a key this server does not have: refused, on the main threads.
    let answer = exchange(&app, &[&stream_request("x")]).await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert_eq!(served(&app, "stream").await, 0);
}

#[cfg(target_os = "linux")]
#[test]
fn the_binarys_stream_lane_threads_run_below_its_main_ones() {
    let mut child = binary()
        .args(["serve", "--addr", "127.0.0.1:0", "--shutdown-delay-ms", "0", "--stream-lane-nice", "5"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the binary starts");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    let addr = serving_addr_in(lines.by_ref().map_while(Result::ok));
    // Answered: the server is past building its lanes.
    let mut health = std::net::TcpStream::connect(addr).expect("listening");
    health.write_all(b"GET /healthz HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    health.read_to_end(&mut answer).unwrap();
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&answer));

    let settled = |nice: &Threads| {
        let main = nice.get("tokio-rt-worker").cloned().unwrap_or_default();
        let lane = nice.get("stream-lane").cloned().unwrap_or_default();
        !main.is_empty()
            && main.iter().all(|&n| n == main[0])
            && !lane.is_empty()
            && lane.iter().all(|&n| n == (main[0] + 5).min(19))
    };
    let nice = threads_once(child.id(), settled);
    let _ = child.kill();
    let _ = child.wait();
    assert!(settled(&nice), "the lane's threads 5 below the main ones: {nice:?}");
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn the_binary_runs_as_many_worker_threads_as_asked_on_each_lane() {
    let per_cpu = std::thread::available_parallelism().unwrap().get();
    // tokio's own variable sizes the main runtime when nothing else does;
    // the lane follows it.
    let tokio_threads = [("TOKIO_WORKER_THREADS", "3")];
    let cases = [
        (&["--worker-threads", "3"][..], &[][..], 3),
        (&[][..], &[][..], per_cpu),
        (&[][..], &tokio_threads[..], 3),
        (&["--worker-threads", "2"][..], &tokio_threads[..], 2),
    ];
    for (args, env, threads) in cases {
        let server = LoggedServer::start(args, env);
        let main = format!("megamind_worker_threads{{lane=\"main\"}} {threads}");
        let metrics = server.app.metrics_line(&main).await;
        let lane = format!("megamind_worker_threads{{lane=\"stream\"}} {threads}");
        assert!(metrics.lines().any(|line| line == lane), "{args:?} {env:?}: no {lane:?} in {metrics}");
        // Nothing served yet: the lane has no blocking threads, its threads
        // are its workers.
        let counted = |names: &Threads, name: &str| names.get(name).map_or(0, Vec::len);
        let names = threads_once(server.pid(), |names| {
            ["stream-lane", "tokio-rt-worker"].iter().all(|name| counted(names, name) >= threads)
        });
        assert_eq!(counted(&names, "stream-lane"), threads, "{args:?} {env:?}: {names:?}");
        assert!(counted(&names, "tokio-rt-worker") >= threads, "{args:?} {env:?}: {names:?}");
        // jemalloc starts four background threads of its own whatever the
        // CPUs; the server keeps them to its worker count.
        let purging = counted(&names, "jemalloc_bg_thd");
        assert!((1..=threads).contains(&purging), "{args:?} {env:?}: {purging} jemalloc threads: {names:?}");
        server.stop();
    }
}

/// Each thread's nice level, by thread name.
#[cfg(target_os = "linux")]
type Threads = std::collections::BTreeMap<String, Vec<i64>>;

/// The threads of process `pid` once `settled` says so, or after 10 s. A
/// thread names itself and lowers its priority once it first runs, which on
/// a busy machine may come after the server's first answer.
#[cfg(target_os = "linux")]
fn threads_once(pid: u32, settled: impl Fn(&Threads) -> bool) -> Threads {
    let started = std::time::Instant::now();
    loop {
        let threads = thread_nice_levels(pid);
        if settled(&threads) || started.elapsed() > BOUND {
            return threads;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Each thread's nice level of process `pid`, by thread name.
#[cfg(target_os = "linux")]
fn thread_nice_levels(pid: u32) -> Threads {
    let mut nice = Threads::new();
    for thread in std::fs::read_dir(format!("/proc/{pid}/task")).expect("/proc") {
        let thread = thread.unwrap().path();
        // A thread that ended since the listing has no files left.
        let (Ok(name), Ok(stat)) =
            (std::fs::read_to_string(thread.join("comm")), std::fs::read_to_string(thread.join("stat")))
        else {
            continue;
        };
        // Nice is the 19th field of stat, the 17th after the name in parentheses.
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        nice.entry(name.trim().to_owned()).or_default().push(after.split(' ').nth(16).unwrap().parse().unwrap());
    }
    nice
}

#[tokio::test]
async fn a_stream_request_the_lane_does_not_answer_itself_is_hyper_s_and_kept_alive() {
    let app = spawn_builtin(served_config()).await;
    // A body: hyper reads it, answers, and reads the next request on the connection.
    let with_body = b"GET /llm/stream/x HTTP/1.1\r\nhost: test\r\ncontent-length: 5\r\n\r\nhello";
    let next = b"GET /healthz HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n";
    let answer = exchange(&app, &[with_body, next]).await;
    // Unsigned: refused, by the route.
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(answer.contains("HTTP/1.1 200 OK") && answer.ends_with("ok\n"), "the second, kept alive: {answer}");
    let answer = exchange(&app, &[b"GET /llm/stream/x HTTP/1.0\r\nhost: test\r\n\r\n"]).await;
    assert!(answer.starts_with("HTTP/1.0 403") || answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert_eq!(served(&app, "stream").await, 2);
}

#[tokio::test]
async fn a_subscriber_that_hangs_up_gives_its_stream_back_before_the_next_heartbeat() {
    // The model never answers: nothing but a heartbeat (every 60 s) would
    // be written that could find the subscriber gone, and no timeout falls
    // within the wait.
    let mock = MockLlm::start(Reply::Hang).await;
    let config = Config { send_timeout_ms: 60_000, idle_timeout_ms: 60_000, ..Config::default() };
    let app = spawn_module_in(config, &mock, |config| config.llm.heartbeat_secs = 60).await;
    run(&client(&app, Transport::Http), "lane-gone", "привет").await;
    // Closed, or done sending after more bytes (pipelined requests, which
    // the stream's `Connection: close` leaves unanswered): the bytes are
    // read first, then the end (a FIN, not a reset, which would come before them).
    let pipelined = "GET /healthz HTTP/1.1\r\nhost: test\r\n\r\n".repeat(100);
    for more in [None, Some(pipelined.as_str())] {
        let mut socket = TcpStream::connect(app.addr).await.unwrap();
        begin_stream(&mut socket, "lane-gone").await;
        app.metrics_line("megamind_assistant_streams_open 1").await;
        match more {
            None => drop(socket),
            Some(more) => {
                socket.write_all(more.as_bytes()).await.unwrap();
                socket.shutdown().await.unwrap();
                app.metrics_line("megamind_assistant_streams_open 0").await;
                drop(socket);
            }
        }
        app.metrics_line("megamind_assistant_streams_open 0").await;
    }
}

/// Streams on the lane are not the open requests whose bound keeps an
/// HTTP/2 client that reads nothing to a stream a connection: as many
/// screens following calls as that bound leave every HTTP/2 client its
/// streams.
#[tokio::test]
async fn streams_on_the_lane_leave_h2_clients_their_streams() {
    let mock = MockLlm::start(Reply::Hang).await;
    let config = Config { max_open_requests: 2, send_timeout_ms: 60_000, ..Config::default() };
    let app = spawn_module_in(config, &mock, |config| config.llm.heartbeat_secs = 60).await;
    run(&client(&app, Transport::Http), "lane-crowd", "привет").await;
    let mut screens = Vec::new();
    for _ in 0..2 {
        let mut socket = TcpStream::connect(app.addr).await.unwrap();
        begin_stream(&mut socket, "lane-crowd").await;
        screens.push(socket);
    }
    app.metrics_line("megamind_assistant_streams_open 2").await;
    let tcp = TcpStream::connect(app.addr).await.unwrap();
    // A zero window: no answer's body is sent, so each request stays open.
    let handshake = h2::client::Builder::new().initial_window_size(0).handshake::<_, bytes::Bytes>(tcp);
    let (client, connection) = handshake.await.unwrap();
    tokio::spawn(connection);
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut client = client.clone().ready().await.expect("the connection is up");
        let (response, _) = client.send_request(http::Request::get("/healthz").body(()).unwrap(), true).unwrap();
        let response = tokio::time::timeout(BOUND, response).await.expect("an answer in time");
        held.push(response.expect("served, not refused"));
    }
    assert!(held.iter().all(|response| response.status() == 200));
    app.metrics_line("megamind_h2_streams_refused_total 0").await;
}

#[tokio::test]
async fn a_subscriber_that_stops_reading_is_cut_off_at_the_send_timeout() {
    // The call keeps about 1 MiB of text, each control character of which an
    // event's JSON writes as six bytes (`\u0001`): some 6 MB of events, made
    // in about a second, more than the sockets' buffers hold (4 MiB at most
    // for the server's, 4 KiB for the client's).
    let piece = "\u{1}".repeat(1_000);
    let pieces = vec![piece.as_str(); 2_000];
    let mock = MockLlm::start(Reply::stream_batched(&pieces, 10)).await;
    let app = spawn_module_in(Config { send_timeout_ms: 300, ..Config::default() }, &mock, |_| {}).await;
    run(&client(&app, Transport::Http), "lane-stuck", "расскажи длинно").await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stuck = socket.connect(app.addr).await.unwrap();
    begin_stream(&mut stuck, "lane-stuck").await;
    app.metrics_line(r#"megamind_connections_closed_total{reason="send_timeout"} 1"#).await;
    app.metrics_line("megamind_assistant_streams_open 0").await;
    // Whatever of it the client still reads (a reset may end the read
    // early) ends before the stream's end.
    let mut sent = Vec::new();
    let _ = tokio::time::timeout(BOUND, stuck.read_to_end(&mut sent)).await.expect("closed");
    assert!(!String::from_utf8_lossy(&sent).contains("event: completed"), "cut off before its end");
}

#[tokio::test]
async fn a_model_sending_a_character_a_piece_makes_a_stream_near_the_calls_bound_whatever_the_id() {
    // A model that ignores `max_tokens`, a character a piece, under the longest id a
    // client may give: every event repeats the id, which the call's 1 MiB bound counts.
    let pieces = vec!["a"; 100_000];
    let mock = MockLlm::start(Reply::stream_batched(&pieces, 1_000)).await;
    let app = spawn_module(&mock, |_| {}).await;
    let id = "r".repeat(256);
    run(&client(&app, Transport::Http), &id, "расскажи длинно").await;
    let answer = exchange(&app, &[&stream_request(&id)]).await;
    let transcript = dechunk(&answer[answer.find("\r\n\r\n").expect("a head") + 4..]);
    let (events, _) = parse_transcript(&transcript);
    assert_eq!(events.last().map(|e| e.name.as_str()), Some("completed"));
    // Counted without the id, the record kept some 31,000 pieces: 10 MB of events.
    assert!(transcript.len() < 2 << 20, "{} bytes of events", transcript.len());
    assert!(events.len() > 1_000, "the answer is kept up to the bound: {} events", events.len());
}

#[tokio::test]
async fn a_stream_silent_for_longer_than_the_send_timeout_is_not_cut_off() {
    // Each word 600 ms after the one before, the send timeout 250 ms: the
    // stream waits on its model, not on its client.
    let reply = || Reply::stream(&["Думаю ", "долго."], Duration::from_millis(600));
    for lane in [true, false] {
        let mock = MockLlm::start(reply()).await;
        let config = Config { send_timeout_ms: 250, stream_lane: lane, ..Config::default() };
        let app = spawn_module_in(config, &mock, |config| config.llm.heartbeat_secs = 60).await;
        run(&client(&app, Transport::Http), "lane-slow", "подумай").await;
        let answer = exchange(&app, &[&stream_request("lane-slow")]).await;
        let transcript = dechunk(&answer[answer.find("\r\n\r\n").expect("a head") + 4..]);
        let (events, _) = parse_transcript(&transcript);
        assert!(validate(&events).is_empty(), "lane {lane}: {transcript}");
        assert_eq!(events.last().map(|e| e.name.as_str()), Some("completed"), "lane {lane}: {transcript}");
        assert!(transcript.contains("долго."), "lane {lane}: {transcript}");
    }
}

/// A third-party SSE client (sseclient-py over requests and urllib3, which
/// decode the chunks themselves) reads the same events as our parser, with
/// the lane and without it.
#[cfg(unix)]
#[tokio::test]
async fn a_third_party_sse_client_reads_the_same_events_as_ours() {
    use crate::python_tools::{self, run as run_command};
    let Some(tools) = python_tools::tools("a_third_party_sse_client_reads_the_same_events_as_ours").await else {
        return;
    };
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/sse_client.py");
    for lane in [true, false] {
        let mock =
            MockLlm::start(Reply::stream(&["<final>Сейчас ", "ровно 🕛 ", "полдень.</final>"], Duration::ZERO)).await;
        let app = spawn_module_in(Config { stream_lane: lane, ..Config::default() }, &mock, |_| {}).await;
        run(&client(&app, Transport::Http), "lane-py", "который час?").await;
        let answer = exchange(&app, &[&stream_request("lane-py")]).await;
        let (ours, _) = parse_transcript(&dechunk(&answer[answer.find("\r\n\r\n").expect("a head") + 4..]));
        let (python, script, url) = (tools.python.clone(), script.clone(), app.url(&signed("/llm/stream/lane-py")));
        let output = tokio::task::spawn_blocking(move || {
            run_command(Command::new(python).arg(script).arg(url).env("NO_PROXY", "*"))
        })
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("lane {lane}: {e}"));
        let theirs: Vec<serde_json::Value> = String::from_utf8(output.stdout)
            .expect("UTF-8")
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON line"))
            .collect();
        let ours: Vec<serde_json::Value> =
            ours.iter().map(|e| serde_json::json!({"id": e.id.clone(), "event": e.name, "data": e.data})).collect();
        assert_eq!(theirs, ours, "lane {lane}");
        assert_eq!(ours.last().map(|e| e["event"].clone()), Some("completed".into()), "lane {lane}");
    }
}

#[tokio::test]
async fn a_stream_whose_client_stops_reading_is_cut_at_the_drain_timeout() {
    let words: Vec<String> = (0..100_000).map(|i| format!("w{i} ")).collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let mock = MockLlm::start(Reply::stream_batched(&words, 100)).await;
    // No send timeout within the test: only the drain's end can close it.
    let config = Config { send_timeout_ms: 60_000, drain_timeout_ms: 300, shutdown_delay_ms: 0, ..Config::default() };
    let mut app = spawn_module_in(config, &mock, |_| {}).await;
    run(&client(&app, Transport::Http), "lane-drain", "расскажи длинно").await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stuck = socket.connect(app.addr).await.unwrap();
    stuck.write_all(&stream_request("lane-drain")).await.unwrap();
    app.metrics_line("megamind_assistant_streams_open 1").await;
    // The whole answer made: its events wait on the stuck socket, and the
    // stream will not reach a point where it hears of the drain.
    app.metrics_line("megamind_assistant_model_calls_in_flight 0").await;
    app.begin_shutdown();
    tokio::time::timeout(BOUND, app.join()).await.expect("serve returns at the drain timeout").unwrap();
    drop(stuck);
}
