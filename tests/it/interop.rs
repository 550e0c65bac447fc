//! Third-party clients against our output: grpcurl over reflection and health
//! and one call per method fed the fixture texts and the ghz configs' bodies,
//! and Python's official protobuf library judging our text-format and JSON
//! printers. The tools come from [`python_tools`]: without them these tests
//! say why and pass, unless `MEGAMIND_REQUIRE_INTEROP=1`.

use std::{
    fs,
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};

use megamind_core::codec::{self, Format, text};
use prost::Message;
use prost_reflect::DynamicMessage;

use crate::{
    fixtures::FIXTURES,
    helpers::{TestApp, fixture_text, spawn_demo},
    python_tools::{self, Tools, run},
};

/// `grpcurl -plaintext FLAGS ADDR ARGS` with `stdin`, off the runtime thread.
async fn grpcurl(tools: &Tools, app: &TestApp, flags: &[&str], args: &[&str], stdin: Option<String>) -> Output {
    let mut command = Command::new(&tools.grpcurl);
    command.args(["-plaintext", "-max-time", "30"]).args(flags).arg(app.addr.to_string()).args(args);
    command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    tokio::task::spawn_blocking(move || {
        let mut child = command.spawn().expect("grpcurl starts");
        let mut input = child.stdin.take().expect("piped stdin");
        input.write_all(stdin.unwrap_or_default().as_bytes()).expect("grpcurl reads its input");
        drop(input);
        child.wait_with_output().expect("grpcurl finishes")
    })
    .await
    .expect("grpcurl task")
}

/// Like [`grpcurl`], but the call must succeed; returns its stdout.
async fn grpcurl_ok(tools: &Tools, app: &TestApp, flags: &[&str], args: &[&str], stdin: Option<String>) -> String {
    let output = grpcurl(tools, app, flags, args, stdin).await;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "grpcurl {args:?}: {}\n{stdout}", String::from_utf8_lossy(&output.stderr));
    stdout
}

/// A fixture's text without its `#` comment lines.
fn fixture_request(name: &str) -> String {
    fixture_text(name).lines().filter(|line| !line.trim_start().starts_with('#')).collect::<Vec<_>>().join("\n")
}

/// Parses text format into the canonical form of a message (defaults dropped).
fn parse_text(type_name: &str, text: &str) -> DynamicMessage {
    let desc = codec::message_descriptor(type_name).expect("known type");
    let message = codec::decode_dynamic(desc.clone(), text.as_bytes(), Format::Text)
        .unwrap_or_else(|e| panic!("{type_name} parses: {e}\n{text}"));
    DynamicMessage::decode(desc, &message.encode_to_vec()[..]).expect("re-decodes")
}

#[tokio::test]
async fn grpcurl_lists_and_describes_the_services_by_reflection() {
    let Some(tools) = python_tools::tools("grpcurl_lists_and_describes_the_services_by_reflection").await else {
        return;
    };
    let (app, _) = spawn_demo().await;
    let list = grpcurl_ok(tools, &app, &[], &["list"], None).await;
    for service in [
        "megamind_scenario.v1.Scenario",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    ] {
        assert!(list.lines().any(|line| line == service), "{service} listed:\n{list}");
    }
    let service = grpcurl_ok(tools, &app, &[], &["describe", "megamind_scenario.v1.Scenario"], None).await;
    for (method, request, response) in [
        ("Run", "TScenarioRunRequest", "TScenarioRunResponse"),
        ("Continue", "TScenarioApplyRequest", "TScenarioContinueResponse"),
        ("Commit", "TScenarioApplyRequest", "TScenarioCommitResponse"),
        ("Apply", "TScenarioApplyRequest", "TScenarioApplyResponse"),
    ] {
        let rpc = format!("rpc {method} ( .NAlice.NScenarios.{request} ) returns ( .NAlice.NScenarios.{response} );");
        assert!(service.contains(&rpc), "{rpc}\n{service}");
    }
    let message = grpcurl_ok(tools, &app, &[], &["describe", "NAlice.NScenarios.TScenarioRunRequest"], None).await;
    assert!(message.contains(".NAlice.NScenarios.TScenarioBaseRequest BaseRequest = 1;"), "{message}");
}

#[tokio::test]
async fn grpcurl_health_check_is_serving() {
    let Some(tools) = python_tools::tools("grpcurl_health_check_is_serving").await else { return };
    let (app, _) = spawn_demo().await;
    for service in ["", "megamind_scenario.v1.Scenario"] {
        let data = format!("{{\"service\": \"{service}\"}}");
        let answer = grpcurl_ok(tools, &app, &["-d", &data], &["grpc.health.v1.Health/Check"], None).await;
        assert!(answer.contains("\"status\": \"SERVING\""), "{service:?}: {answer}");
    }
}

#[tokio::test]
async fn grpcurl_calls_every_method_with_the_fixture_texts() {
    let Some(tools) = python_tools::tools("grpcurl_calls_every_method_with_the_fixture_texts").await else { return };
    let (app, demo) = spawn_demo().await;
    for (method, request, response, response_type) in [
        ("Run", "poi_run_request", "poi_run_response", "TScenarioRunResponse"),
        ("Continue", "music_continue_request", "music_continue_response", "TScenarioContinueResponse"),
        ("Commit", "video_commit_request", "video_commit_response", "TScenarioCommitResponse"),
        ("Apply", "video_apply_request", "video_apply_response", "TScenarioApplyResponse"),
    ] {
        let rpc = format!("megamind_scenario.v1.Scenario/{method}");
        let flags = ["-format", "text", "-H", "x-scenario: demo", "-d", "@"];
        let answer = grpcurl_ok(tools, &app, &flags, &[&rpc], Some(fixture_request(request))).await;
        // grpcurl ends each message of a text stream with a record separator.
        let got = parse_text(response_type, answer.trim_end_matches(['\n', '\x1e']));
        let want = parse_text(response_type, &fixture_text(response));
        assert!(got == want, "{method}: grpcurl got\n{answer}\nwant\n{}", text::print(&want).unwrap_or_default());
    }
    assert_eq!(demo.payment_pushes(), 2, "Commit and Apply each sent their push");

    let unknown =
        grpcurl(tools, &app, &["-H", "x-scenario: nope", "-d", "{}"], &["megamind_scenario.v1.Scenario/Run"], None)
            .await;
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(!unknown.status.success() && stderr.contains("NotFound"), "{stderr}");
}

/// Each pair of ghz configs in `deploy/ghz/`, with the fixtures its data and answer come from.
const GHZ_CONFIGS: [(&str, &str, &str, &str); 4] = [
    ("run", "music_run_request", "music_run_response", "TScenarioRunResponse"),
    ("continue", "music_continue_request", "music_continue_response", "TScenarioContinueResponse"),
    ("commit", "video_commit_request", "video_commit_response", "TScenarioCommitResponse"),
    ("apply", "video_apply_request", "video_apply_response", "TScenarioApplyResponse"),
];

/// ghz cannot be installed here; grpcurl reads descriptors and JSON with the
/// same libraries, so it replays what each ghz config would send.
#[tokio::test]
async fn the_ghz_configs_send_the_fixture_bodies_with_fresh_request_ids() {
    let Some(tools) = python_tools::tools("the_ghz_configs_send_the_fixture_bodies_with_fresh_request_ids").await
    else {
        return;
    };
    let (app, demo) = spawn_demo().await;
    let ghz = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/ghz");
    for (base, request, response, response_type) in GHZ_CONFIGS {
        for mode in ["reflection", "proto"] {
            let name = format!("{base}.{mode}.json");
            let config: serde_json::Value =
                serde_json::from_str(&fs::read_to_string(ghz.join(&name)).expect("config")).expect("config is JSON");
            check_ghz_settings(&name, &config);
            let call = config["call"].as_str().expect("call");
            let mut flags = Vec::new();
            for (key, value) in config["metadata"].as_object().expect("metadata") {
                flags.extend(["-H".to_owned(), format!("{key}: {}", value.as_str().expect("string metadata"))]);
            }
            if mode == "proto" {
                // ghz resolves both paths from its working directory, deploy/ghz.
                let path = |value: &serde_json::Value| {
                    ghz.join(value.as_str().expect("path")).canonicalize().expect("path exists")
                };
                let (proto, import) = (path(&config["proto"]), path(&config["import-paths"][0]));
                let relative = proto.strip_prefix(&import).expect("proto under its import path");
                flags.extend(["-import-path".into(), import.display().to_string()]);
                flags.extend(["-proto".into(), relative.display().to_string()]);
            }
            flags.extend(["-d".into(), "@".into()]);
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();

            let template = config["data"].to_string();
            assert!(template.contains(r#""RequestId":"{{newUUID}}""#), "{name}: a fresh RequestId per call");
            for round in 0..2 {
                let request_id = format!("ghz-{base}-{mode}-{round}");
                let data = template.replace("{{newUUID}}", &request_id);
                assert!(
                    sent_body(request, &data) == fixture_body_with(request, &request_id),
                    "{name}: the data is the fixture {request}"
                );
                let answer = grpcurl_ok(tools, &app, &flags, &[call], Some(data)).await;
                let got = parse_json(response_type, &answer);
                let want = parse_text(response_type, &fixture_text(response));
                assert!(got == want, "{name}: grpcurl got\n{answer}\nwant\n{}", text::print(&want).unwrap_or_default());
            }
        }
    }
    assert_eq!(demo.payment_pushes(), 8, "every Commit and Apply call ran: no RequestId repeated");
}

/// The keys ghz's config file reads that these configs use.
const GHZ_KEYS: &[&str] = &[
    "name",
    "call",
    "proto",
    "import-paths",
    "host",
    "insecure",
    "total",
    "concurrency",
    "connections",
    "timeout",
    "metadata",
    "data",
];

/// What grpcurl cannot replay: the load settings only ghz reads.
fn check_ghz_settings(name: &str, config: &serde_json::Value) {
    let keys = config.as_object().unwrap_or_else(|| panic!("{name}: an object"));
    for key in keys.keys() {
        assert!(GHZ_KEYS.contains(&key.as_str()), "{name}: ghz reads no key {key:?}");
    }
    assert_eq!(config["insecure"], true, "{name}: the server speaks h2c");
    assert_eq!(config["host"], "127.0.0.1:8080", "{name}: the server's default address");
    let count = |key: &str| config[key].as_u64().filter(|n| *n > 0).unwrap_or_else(|| panic!("{name}: {key} > 0"));
    let (total, concurrency, connections) = (count("total"), count("concurrency"), count("connections"));
    assert!(total >= concurrency && concurrency >= connections, "{name}: total >= concurrency >= connections");
    let timeout = config["timeout"].as_str().unwrap_or_else(|| panic!("{name}: timeout is a duration"));
    let seconds = timeout.strip_suffix('s').and_then(|n| n.parse::<u64>().ok());
    assert!(seconds.is_some_and(|s| s >= 1), "{name}: timeout {timeout:?} is whole seconds, over the 300 ms budget");
}

/// The request a ghz data JSON encodes.
fn sent_body(request: &str, json: &str) -> DynamicMessage {
    let desc = request_descriptor(request);
    let message = codec::decode_dynamic(desc.clone(), json.as_bytes(), Format::Json)
        .unwrap_or_else(|e| panic!("{request}: ghz data decodes: {e}"));
    DynamicMessage::decode(desc, &message.encode_to_vec()[..]).expect("re-decodes")
}

/// Fixture `request` with `request_id` and without its empty `State`, which
/// grpcurl's and ghz's JSON readers refuse in its proto3 JSON form `{}`.
fn fixture_body_with(request: &str, request_id: &str) -> DynamicMessage {
    let desc = request_descriptor(request);
    let mut message = parse_text(desc.full_name(), &fixture_text(request));
    let base = message.get_field_by_name_mut("BaseRequest").and_then(|v| v.as_message_mut()).expect("BaseRequest");
    base.set_field_by_name("RequestId", prost_reflect::Value::String(request_id.into()));
    base.clear_field_by_name("State");
    DynamicMessage::decode(desc, &message.encode_to_vec()[..]).expect("re-decodes")
}

fn request_descriptor(request: &str) -> prost_reflect::MessageDescriptor {
    let type_name = FIXTURES.iter().find(|(name, _)| *name == request).expect("listed fixture").1;
    codec::message_descriptor(type_name).expect("known type")
}

/// Parses proto3 JSON into the canonical form of a message.
fn parse_json(type_name: &str, json: &str) -> DynamicMessage {
    let desc = codec::message_descriptor(type_name).expect("known type");
    let message = codec::decode_dynamic(desc.clone(), json.as_bytes(), Format::Json)
        .unwrap_or_else(|e| panic!("{type_name} parses: {e}\n{json}"));
    DynamicMessage::decode(desc, &message.encode_to_vec()[..]).expect("re-decodes")
}

#[test]
fn the_official_protobuf_library_reads_our_text_and_json() {
    let Some(tools) = python_tools::tools_blocking("the_official_protobuf_library_reads_our_text_and_json") else {
        return;
    };
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("protobuf-judge-{}", std::process::id()));
    let (generated, data) = (work.join("generated"), work.join("data"));
    let _ = fs::remove_dir_all(&work);
    for dir in [&generated, &data] {
        fs::create_dir_all(dir).expect("work dir");
    }

    let mut protos = Vec::new();
    proto_files(&manifest_dir.join("proto"), Path::new(""), &mut protos);
    assert!(protos.len() >= 5, "proto files found: {protos:?}");
    run(Command::new(&tools.python)
        .current_dir(manifest_dir.join("proto"))
        .args(["-m", "grpc_tools.protoc", "-I", "."])
        .arg(format!("--python_out={}", generated.display()))
        .args(&protos))
    .unwrap_or_else(|e| panic!("protoc compiles proto/: {e}"));

    let mut manifest = String::new();
    for (name, type_name) in FIXTURES {
        let desc = codec::message_descriptor(type_name).expect("known type");
        let message = codec::decode_dynamic(desc.clone(), fixture_text(name).as_bytes(), Format::Text)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let json = codec::encode_dynamic(&message, Format::Json).unwrap_or_else(|e| panic!("{name}: {e}"));
        fs::write(data.join(format!("{name}.bin")), message.encode_to_vec()).expect("write");
        fs::write(data.join(format!("{name}.txt")), text::print(&message).expect("printable")).expect("write");
        fs::write(data.join(format!("{name}.json")), json).expect("write");
        manifest.push_str(&format!("{name}\t{}\n", desc.full_name()));
    }
    fs::write(data.join("manifest.tsv"), manifest).expect("write");

    let judged =
        run(Command::new(&tools.python).arg(manifest_dir.join("tests/it/protobuf_judge.py")).args([&generated, &data]))
            .unwrap_or_else(|e| panic!("google.protobuf disagrees with our printers:\n{e}"));
    let verdict = String::from_utf8_lossy(&judged.stdout);
    assert!(verdict.contains(&format!("checked {} fixtures, 0 failures", FIXTURES.len())), "{verdict}");
    let _ = fs::remove_dir_all(&work);
}

/// Every `.proto` under `root`, relative to it.
fn proto_files(root: &Path, relative: &Path, out: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(root.join(relative)).unwrap_or_else(|e| panic!("{}: {e}", relative.display()));
    for entry in entries {
        let path = relative.join(entry.expect("dir entry").file_name());
        if root.join(&path).is_dir() {
            proto_files(root, &path, out);
        } else if path.extension().is_some_and(|ext| ext == "proto") {
            out.push(path);
        }
    }
}
