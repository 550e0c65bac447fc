//! Bodies built to hurt: nesting past the limit, a megabyte RequestId,
//! personal data hidden in `Any`, content quoted back in errors. The server
//! answers each with a protocol error, stays up, and logs nothing it must not.

use std::{
    io::{BufRead, BufReader, Read, Write},
    process::{Child, Stdio},
    sync::mpsc,
    time::Duration,
};

use megamind_core::{
    codec::Format,
    proto::n_alice::n_scenarios::{
        TClientInfo, TInput, TOptions, TScenarioApplyRequest, TScenarioBaseRequest, TScenarioRunRequest,
        TScenarioRunResponse, TSemanticFrame, t_scenario_run_response,
    },
};
use prost::Message;

use crate::helpers::{
    TestApp, binary, decode_answer, fixture_body, grpc_client, grpc_request, registry_of, serving_addr_in, spawn_app,
    spawn_builtin, spawn_demo,
};

/// `levels` of `list_value{values{` inside the request's experiments: the
/// body that overflowed the parser's stack at about 423 levels.
fn nested_struct_text(levels: usize) -> String {
    let mut text = String::from("BaseRequest{RequestId:\"x\" Experiments{fields{key:\"a\" value{");
    text.push_str(&"list_value{values{".repeat(levels));
    text.push_str(&"}}".repeat(levels));
    text.push_str("}}}}");
    text
}

/// `levels` of expanded `Any`, each a base request whose `State` holds the next.
fn nested_any_text(levels: usize) -> String {
    let open = "State{[type.googleapis.com/NAlice.NScenarios.TScenarioBaseRequest]{RequestId:\"y\" ";
    format!("BaseRequest{{RequestId:\"x\" {}{}}}", open.repeat(levels), "}}".repeat(levels))
}

/// A binary run request whose `State` holds `levels` nested `Any`s.
fn nested_any_binary(levels: usize, request_id: &str) -> Vec<u8> {
    let base = |state| TScenarioBaseRequest { request_id: request_id.into(), state, ..Default::default() };
    let mut any = prost_types::Any::default();
    for _ in 0..levels {
        any = prost_types::Any {
            type_url: "type.googleapis.com/NAlice.NScenarios.TScenarioBaseRequest".into(),
            value: base(Some(any)).encode_to_vec(),
        };
    }
    TScenarioRunRequest { base_request: Some(base(Some(any))), input: None }.encode_to_vec()
}

/// Posts `body` and expects 200 with a run `Error` of `kind`; returns its message.
async fn error_of(app: &TestApp, path: &str, media: &str, body: Vec<u8>, kind: &str) -> String {
    let answer = app.post(path, media, Some("application/protobuf"), body).await;
    assert_eq!(answer.status(), 200, "{path} {media}");
    let bytes = answer.bytes().await.unwrap();
    if path.ends_with("/run") {
        let answer: TScenarioRunResponse = decode_answer(&bytes, Format::Binary);
        match answer.response {
            Some(t_scenario_run_response::Response::Error(error)) => {
                assert_eq!(error.r#type, kind, "{}", error.message);
                return error.message;
            }
            other => panic!("expected an Error, got {other:?}"),
        }
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    assert!(text.contains(kind), "{path}: {text}");
    text
}

/// A binary run request of `frames` empty semantic frames.
fn frames_binary(request_id: &str, frames: usize) -> Vec<u8> {
    let base_request = Some(TScenarioBaseRequest { request_id: request_id.into(), ..Default::default() });
    let input = Some(TInput { semantic_frames: vec![TSemanticFrame::default(); frames], ..Default::default() });
    TScenarioRunRequest { base_request, input }.encode_to_vec()
}

/// A JSON run request of `values` numbers in its experiments: thousands
/// of them, inside the values limits, take long to parse.
fn slow_json(request_id: &str, values: usize) -> Vec<u8> {
    let zeros = vec!["0"; values].join(",");
    format!(r#"{{"BaseRequest":{{"RequestId":"{request_id}","Experiments":{{"k":[{zeros}]}}}}}}"#).into_bytes()
}

/// Bodies that take long to decode are answered `timeout` by their
/// deadline, one worker each or not, and a small call beside them is
/// answered at once: they are decoded aside, never on a worker thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_slow_to_decode_are_answered_by_the_deadline_and_hold_no_worker() {
    // A short budget: sixteen thousand JSON values take longer than that to parse in a test build.
    let mut config = megamind_core::config::Config::default();
    config.budget.run_ms = 60;
    let demo = std::sync::Arc::new(megamind_scenario::scenarios::demo::Demo::new());
    let app = std::sync::Arc::new(spawn_app(config, registry_of("demo", demo)).await);
    let slow: Vec<_> = (0..2)
        .map(|n| {
            let (app, body) = (app.clone(), slow_json(&format!("slow-{n}"), 16_000));
            tokio::spawn(async move {
                let sent = std::time::Instant::now();
                let message = error_of(&app, "/demo/run", "application/json", body, "timeout").await;
                (sent.elapsed(), message)
            })
        })
        .collect();
    let small = std::time::Instant::now();
    let (status, _) =
        app.post_binary("/demo/run", fixture_body::<TScenarioRunRequest>("poi_run_request", Format::Binary)).await;
    let small = small.elapsed();
    assert_eq!(status, 200);
    for slow in slow {
        let (took, message) = slow.await.unwrap();
        assert!(took < Duration::from_secs(1), "answered {took:?} after it was sent: {message}");
        assert!(message.contains("was not decoded within the 60 ms budget"), "{message}");
    }
    assert!(small < Duration::from_secs(1), "a small call beside them took {small:?}");
}

/// A body of more values than any request holds is refused before it is
/// parsed: parsed, a few megabytes of tiny values or empty messages take
/// seconds and a gigabyte or more.
#[tokio::test]
async fn bodies_of_too_many_values_are_refused_before_parsing() {
    let (app, _) = spawn_demo().await;
    let json = slow_json("many", 500_000);
    let text = format!("BaseRequest {{ RequestId: \"many\" }} Input {{ {} }}", "SemanticFrames {} ".repeat(100_000));
    let binary = frames_binary("many", 2_000_000);
    for (media, body, limit) in [
        ("application/json", json, 16_384),
        ("text/protobuf", text.into_bytes(), 16_384),
        ("application/protobuf", binary, 65_536),
    ] {
        let started = std::time::Instant::now();
        let message = error_of(&app, "/demo/run", media, body, "bad_request").await;
        assert!(message.contains(&format!("holds more than the limit of {limit} values")), "{media}: {message}");
        assert!(started.elapsed() < Duration::from_millis(300), "{media}: {:?}", started.elapsed());
    }
}

/// Values deep down cost their parse once per level above them: 65,000
/// numbers forty lists down took about a second to decode, past the
/// budget, and ten thousand some hundred milliseconds. Counted once per
/// level they sit at, fewer values than the count allows are refused
/// before they are parsed, in JSON and in text, within the budget.
#[tokio::test]
async fn many_values_deep_down_are_refused_before_parsing() {
    let (app, _) = spawn_demo().await;
    let zeros = vec!["0"; 10_000].join(",");
    let lists = format!("{}{zeros}{}", "[".repeat(40), "]".repeat(40));
    let json = format!(r#"{{"BaseRequest":{{"RequestId":"deep","Experiments":{{"k":{lists}}}}}}}"#);
    let mut value = format!("list_value {{ {} }}", "values { number_value: 0 } ".repeat(7_000));
    for _ in 0..20 {
        value = format!("list_value {{ values {{ {value} }} }}");
    }
    let text =
        format!(r#"BaseRequest {{ RequestId: "deep" Experiments {{ fields {{ key: "k" value {{ {value} }} }} }}"#);
    for (media, body) in [("application/json", json), ("text/protobuf", text)] {
        let started = std::time::Instant::now();
        let message = error_of(&app, "/demo/run", media, body.into_bytes(), "bad_request").await;
        assert!(message.contains("too many values too deep"), "{media}: {message}");
        assert!(message.contains("limit of 131072"), "{media}: {message}");
        assert!(started.elapsed() < Duration::from_millis(300), "{media}: {:?}", started.elapsed());
    }
}

/// A `State` of `values` empty values `lists` lists down in a `Struct`.
fn deep_struct_state(values: usize, lists: usize) -> prost_types::Any {
    use prost_types::{ListValue, Struct, Value, value::Kind};
    let mut value = Value { kind: Some(Kind::ListValue(ListValue { values: vec![Value::default(); values] })) };
    for _ in 1..lists {
        value = Value { kind: Some(Kind::ListValue(ListValue { values: vec![value] })) };
    }
    let state = Struct { fields: [("k".to_owned(), value)].into() };
    prost_types::Any { type_url: "type.googleapis.com/google.protobuf.Struct".into(), value: state.encode_to_vec() }
}

/// An answer longer than 256 KiB, or holding more than a JSON or text body
/// may, is not rendered in those formats; the assistant hands a declined
/// request's `State` back. 120 KB of binary `State`, numbers forty-five
/// lists down, rendered as 18 MB of text, or as JSON past the budget; and
/// those formats write a byte as up to six: a 4 MB answer replayed as JSON
/// to a 134-byte request was 24 MB. It answers 406 saying why, and the
/// answer, kept, is there in binary for a repeat.
#[tokio::test]
async fn answers_too_large_for_json_or_text_are_kept_for_a_binary_repeat() {
    let app = spawn_builtin(crate::helpers::served_config()).await;
    let long = prost_types::Any { type_url: "type.googleapis.com/No.Such".into(), value: vec![1; 300 * 1024] };
    let cases = [
        ("deep-answer", deep_struct_state(30_000, 45), "too many values too deep"),
        ("long-answer", long, "longer than the 262144 bytes rendered in JSON or text"),
    ];
    for (request_id, state, why) in cases {
        let base =
            TScenarioBaseRequest { request_id: request_id.into(), state: Some(state.clone()), ..Default::default() };
        let body = TScenarioRunRequest { base_request: Some(base), input: None }.encode_to_vec();
        for accept in ["application/json", "text/protobuf"] {
            let response = app.post("/assistant/run", "application/protobuf", Some(accept), body.clone()).await;
            assert_eq!(response.status(), 406, "{request_id} as {accept}");
            let reason = response.text().await.unwrap();
            assert!(reason.contains(why), "{request_id} as {accept}: {reason}");
            let again = "repeat the call with its RequestId, asking for application/protobuf";
            assert!(reason.contains(again), "{reason}");
        }
        let (status, answer) = app.post_binary("/assistant/run", body).await;
        assert_eq!(status, 200);
        let answer: TScenarioRunResponse = decode_answer(&answer, Format::Binary);
        let Some(t_scenario_run_response::Response::ResponseBody(body)) = answer.response else { panic!("{answer:?}") };
        assert_eq!(body.state, Some(state), "{request_id}: the declined request's State, handed back");
    }
}

/// A scenario's error message quoting a megabyte of its request is cut
/// short: the demo quotes an unexpected `Arguments` type, and a 4 MB type
/// made a 4 MB `Error`, kept and replayed to every repeat.
#[tokio::test]
async fn error_messages_quoting_megabytes_are_cut_short() {
    let (app, _) = spawn_demo().await;
    let arguments = prost_types::Any { type_url: "\u{1}".repeat(3 << 20), value: Vec::new() };
    let base = TScenarioBaseRequest { request_id: "long-type".into(), ..Default::default() };
    let request = TScenarioApplyRequest { base_request: Some(base), arguments: Some(arguments), input: None };
    let (status, answer) = app.post_binary("/demo/continue", request.encode_to_vec()).await;
    assert_eq!(status, 200);
    assert!(answer.len() < 2048, "an answer of {} bytes", answer.len());
    let text = String::from_utf8_lossy(&answer);
    assert!(text.contains("expected Arguments of") && text.contains('…'), "{text}");
}

/// `Any`s in `Any`s down to just past the nesting limit, with two
/// megabytes of empty messages there, where the values count no longer
/// looks: refused for its depth before the level past the limit is decoded,
/// no level copying the levels below it. Decoded, that level took seconds
/// and hundreds of megabytes.
#[tokio::test]
async fn payloads_nested_past_the_limit_are_refused_before_they_are_decoded() {
    let (app, _) = spawn_demo().await;
    let bottom = frames_binary("deep", 1_000_000);
    let mut state = prost_types::Any {
        type_url: "type.googleapis.com/NAlice.NScenarios.TScenarioRunRequest".into(),
        value: bottom,
    };
    // The request is level 1, its base request 2, `State` 3: its payload
    // is 4, and the frames' request 101.
    for _ in 0..97 {
        state = prost_types::Any {
            type_url: "type.googleapis.com/google.protobuf.Any".into(),
            value: state.encode_to_vec(),
        };
    }
    let base = TScenarioBaseRequest { request_id: "deep".into(), state: Some(state), ..Default::default() };
    let body = TScenarioRunRequest { base_request: Some(base), input: None }.encode_to_vec();
    let started = std::time::Instant::now();
    let message = error_of(&app, "/demo/run", "application/protobuf", body, "bad_request").await;
    assert!(message.contains("BaseRequest.State") && message.contains("limit of 100"), "{message}");
    assert!(started.elapsed() < Duration::from_millis(300), "{:?}", started.elapsed());
}

#[tokio::test]
async fn nesting_past_the_limit_is_a_bad_request_on_every_handler_and_format() {
    let app = spawn_builtin(crate::helpers::served_config()).await;
    for module in megamind_scenario::scenarios::modules() {
        let scenario = module.name();
        for handler in ["run", "continue", "commit", "apply"] {
            let path = format!("/{scenario}/{handler}");
            let deep = nested_struct_text(500).into_bytes();
            let message = error_of(&app, &path, "text/protobuf", deep, "bad_request").await;
            assert!(message.contains("limit of 100"), "{path}: {message}");
        }
    }
    let message =
        error_of(&app, "/demo/run", "text/protobuf", nested_any_text(5_000).into_bytes(), "bad_request").await;
    assert!(message.contains("limit of 100"), "{message}");
    let deep_json = format!(
        "{{\"BaseRequest\":{{\"RequestId\":\"x\",\"Experiments\":{{\"a\":{}1{}}}}}}}",
        "[".repeat(150),
        "]".repeat(150)
    );
    let message = error_of(&app, "/demo/run", "application/json", deep_json.into_bytes(), "bad_request").await;
    assert!(message.contains("limit of 100"), "{message}");
    let message =
        error_of(&app, "/demo/run", "application/protobuf", nested_any_binary(3_000, "x"), "bad_request").await;
    assert!(message.contains("BaseRequest.State") && message.contains("limit of 100"), "{message}");
    // Just inside the limit is served.
    let fine = app.post("/demo/run", "text/protobuf", None, nested_struct_text(20).into_bytes()).await;
    assert_eq!(fine.status(), 200);
    assert_eq!(app.get("/healthz").await.0, 200, "the server is still up");
}

#[tokio::test]
async fn a_request_id_over_256_bytes_is_refused() {
    let (app, _) = spawn_demo().await;
    let long = "r".repeat(1 << 20);
    let body = TScenarioRunRequest {
        base_request: Some(TScenarioBaseRequest { request_id: long, ..Default::default() }),
        input: None,
    };
    let message = error_of(&app, "/demo/run", "application/protobuf", body.encode_to_vec(), "bad_request").await;
    assert!(message.contains("over the limit of 256"), "{message}");
    assert!(message.len() < 200, "the error does not quote the id");
    let ok = TScenarioRunRequest {
        base_request: Some(TScenarioBaseRequest { request_id: "r".repeat(256), ..Default::default() }),
        input: None,
    };
    let answer = app.post("/demo/run", "application/protobuf", None, ok.encode_to_vec()).await;
    let answer: TScenarioRunResponse = decode_answer(&answer.bytes().await.unwrap(), Format::Binary);
    assert!(
        !matches!(answer.response, Some(t_scenario_run_response::Response::Error(ref e)) if e.r#type == "bad_request")
    );
}

#[tokio::test]
async fn decode_errors_quote_request_content_only_as_a_short_prefix() {
    let (app, _) = spawn_demo().await;
    let body = br#"{"BaseRequest": {"RequestId": "r", "+79161234567-ivanov@example.com": 1}}"#.to_vec();
    let message = error_of(&app, "/demo/run", "application/json", body, "bad_request").await;
    assert!(!message.contains("79161234567") && !message.contains("ivanov"), "{message}");
    let body = br#"{"BaseRequest": {"RequestId": 109252862351}}"#.to_vec();
    let message = error_of(&app, "/demo/run", "application/json", body, "bad_request").await;
    assert!(!message.contains("109252862351"), "{message}");
    let body = b"BaseRequest { RequestId: \"r\" ClientIP109252: 1 }".to_vec();
    let message = error_of(&app, "/demo/run", "text/protobuf", body, "bad_request").await;
    assert!(message.contains("ClientIP109252"), "names of the schema's shape are quoted: {message}");
}

#[tokio::test]
async fn grpc_refuses_nesting_past_the_limit() {
    let app = spawn_builtin(crate::helpers::served_config()).await;
    let request = TScenarioRunRequest::decode(nested_any_binary(3_000, "g").as_slice()).unwrap();
    let answer = grpc_client(&app).await.run(grpc_request(request, Some("demo"))).await.expect("a gRPC answer");
    match answer.into_inner().response {
        Some(t_scenario_run_response::Response::Error(error)) => {
            assert_eq!(error.r#type, "bad_request");
            assert!(error.message.contains("limit of 100"), "{}", error.message);
        }
        other => panic!("expected an Error, got {other:?}"),
    }
}

/// The real binary at `--log-level debug`, its output read line by line.
struct DebugServer {
    child: Child,
    addr: String,
    lines: mpsc::Receiver<String>,
}

impl DebugServer {
    fn start() -> DebugServer {
        let mut child = binary()
            .args(["serve", "--addr", "127.0.0.1:0", "--log-level", "debug"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the binary starts");
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let addr = serving_addr_in(lines.iter());
        DebugServer { child, addr, lines }
    }

    /// Posts `body` on a fresh connection and returns the raw answer.
    fn post(&self, path: &str, body: &[u8]) -> Vec<u8> {
        let mut stream = std::net::TcpStream::connect(&self.addr).expect("listening");
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: test\r\ncontent-type: application/protobuf\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(body)).expect("request sent");
        let mut response = Vec::new();
        stream.read_to_end(&mut response).expect("answer read");
        response
    }

    /// Reads the log until each of `wanted` is in a line read so far
    /// (`seen`: every line since the server started). Lines of different
    /// threads reach the log in batches, not in the order they were
    /// written: a call's lines may come before the previous call's summary.
    fn log_until(&self, seen: &mut Vec<String>, wanted: &[&str]) {
        let logged = |seen: &[String]| wanted.iter().all(|wanted| seen.iter().any(|line| line.contains(wanted)));
        self.log_until_seen(seen, &format!("{wanted:?}"), logged);
    }

    /// Reads the log into `seen` until `done` holds of it; `what` names it.
    fn log_until_seen(&self, seen: &mut Vec<String>, what: &str, done: impl Fn(&[String]) -> bool) {
        while !done(seen) {
            match self.lines.recv_timeout(Duration::from_secs(10)) {
                Ok(line) => seen.push(line),
                Err(_) => panic!("{what} never logged in {seen:#?}"),
            }
        }
    }
}

impl Drop for DebugServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn debug_logs_survive_deep_state_and_redact_inside_any() {
    let server = DebugServer::start();

    // A State nested 3,000 `Any`s deep: refused, and the server still answers.
    let response = server.post("/demo/run", &nested_any_binary(3_000, "deep-state"));
    assert!(response.starts_with(b"HTTP/1.1 200 OK"), "{}", String::from_utf8_lossy(&response));
    server.post("/demo/run", &nested_any_binary(3, "after-deep"));
    let mut seen = Vec::new();
    server.log_until(&mut seen, &["request_id=after-deep ", "nested deeper than the limit of 100"]);

    // Personal data inside a State that packs a whole base request.
    let secret = TScenarioBaseRequest {
        request_id: "inner".into(),
        client_info: Some(TClientInfo {
            uuid: "uuid-5ec2e7".into(),
            device_id: "device-4b1d".into(),
            ..Default::default()
        }),
        options: Some(TOptions {
            client_ip: "109.252.86.235".into(),
            raw_personal_data: "{\"phone\":\"+79161234567\"}".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let state = prost_types::Any {
        type_url: "type.googleapis.com/NAlice.NScenarios.TScenarioBaseRequest".into(),
        value: secret.encode_to_vec(),
    };
    let mut request: TScenarioApplyRequest =
        decode_answer(&fixture_body::<TScenarioApplyRequest>("video_commit_request", Format::Binary), Format::Binary);
    let base = request.base_request.get_or_insert_with(Default::default);
    base.request_id = "pii-in-any".into();
    base.state = Some(state);
    base.client_info.get_or_insert_with(Default::default).device_id = "outer-device-77".into();
    let response = server.post("/demo/commit", &request.encode_to_vec());
    assert!(response.starts_with(b"HTTP/1.1 200 OK"), "{}", String::from_utf8_lossy(&response));
    // The State is expanded in the log.
    server.log_until(&mut seen, &["request_id=pii-in-any ", "RequestId: \"inner\""]);
    let log = seen.join("\n");
    for secret in ["109.252.86.235", "79161234567", "uuid-5ec2e7", "device-4b1d", "outer-device-77"] {
        assert!(!log.contains(secret), "{secret} reached the log:\n{log}");
    }

    // A megabyte RequestId makes no megabyte line.
    let long = TScenarioRunRequest {
        base_request: Some(TScenarioBaseRequest { request_id: "L".repeat(1 << 20), ..Default::default() }),
        input: None,
    };
    server.post("/demo/run", &long.encode_to_vec());
    let marker = TScenarioRunRequest {
        base_request: Some(TScenarioBaseRequest { request_id: "after-long".into(), ..Default::default() }),
        input: None,
    };
    server.post("/demo/run", &marker.encode_to_vec());
    // The long call's own lines, however its summary shows the id, are read by then.
    // Its summary (refused, its id not shown: the second such) and the marker's.
    let refused = |seen: &[String]| seen.iter().filter(|line| line.contains("outcome=bad_request")).count() >= 2;
    server.log_until_seen(&mut seen, "the long call's summary", refused);
    server.log_until(&mut seen, &["request_id=after-long "]);
    let longest = seen.iter().map(String::len).max().unwrap_or(0);
    assert!(longest < 70 * 1024, "a log line of {longest} bytes");

    // A State that would print as megabytes of indented text is not printed.
    let base = TScenarioBaseRequest {
        request_id: "deep-struct".into(),
        state: Some(deep_struct_state(30_000, 45)),
        ..Default::default()
    };
    server.post("/demo/run", &TScenarioRunRequest { base_request: Some(base), input: None }.encode_to_vec());
    let printable = "request not printable: more than the limit of 131072 values counted once per level";
    server.log_until(&mut seen, &["request_id=deep-struct ", printable]);
}

#[test]
fn convert_refuses_deep_input_with_a_clean_error() {
    use crate::helpers::convert;
    let text = nested_struct_text(2_000);
    let out = convert(&["--type", "TScenarioRunRequest", "--from", "text", "--to", "binary"], text.as_bytes());
    assert_eq!(out.status.code(), Some(1), "a clean error exit");
    assert!(String::from_utf8_lossy(&out.stderr).contains("limit of 100"), "{}", String::from_utf8_lossy(&out.stderr));

    let binary = nested_any_binary(10_000, "x");
    for to in ["json", "text"] {
        let out = convert(&["--type", "TScenarioRunRequest", "--from", "binary", "--to", to], &binary);
        assert_eq!(out.status.code(), Some(1), "to {to}");
        assert!(out.stdout.is_empty());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("limit of 100"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
