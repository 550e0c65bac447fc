//! The scenario of `examples/echo_scenario`, hosted next to the built-in
//! ones by the real server, and the README showing the same code.

#[path = "../../examples/echo_scenario/echo.rs"]
mod echo;

use megamind_scenario::{
    codec::Format,
    config::Config,
    proto::n_alice::n_scenarios::{TScenarioRunResponse, t_scenario_run_response},
    rules::metrics::ServerMetrics,
};

use crate::helpers::{TestApp, decode_answer, spawn_app};

/// `/run` of `scenario` with `utterance` in text format; the answer decoded.
async fn run(app: &TestApp, scenario: &str, request_id: &str, utterance: &str) -> TScenarioRunResponse {
    let body = format!(
        "BaseRequest {{ RequestId: {request_id:?} ServerTimeMs: 1764210832530 }}\n\
         Input {{ Text {{ Utterance: {utterance:?} }} }}\n"
    );
    let path = format!("/{scenario}/run");
    let response = app.post(&path, "text/protobuf", Some("application/protobuf"), body.into_bytes()).await;
    let status = response.status();
    let answer = response.bytes().await.expect("answer body");
    assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&answer));
    decode_answer(&answer, Format::Binary)
}

fn speech(answer: &TScenarioRunResponse) -> (bool, &str) {
    let irrelevant = answer.features.as_ref().is_some_and(|f| f.is_irrelevant);
    match &answer.response {
        Some(t_scenario_run_response::Response::ResponseBody(body)) => {
            (irrelevant, body.layout.as_ref().map_or("", |layout| layout.output_speech.as_str()))
        }
        other => panic!("a ResponseBody, got {other:?}"),
    }
}

#[tokio::test]
async fn the_example_scenario_answers_next_to_the_built_in_ones() {
    let config = Config::default();
    let registry = echo::registry(&config, &ServerMetrics::new()).expect("the example's registry");
    let app = spawn_app(config, registry).await;

    let echoed = run(&app, "echo", "echo-1", "привет, мир").await;
    assert_eq!(speech(&echoed), (false, "привет, мир"));
    assert_eq!(echoed.version, env!("CARGO_PKG_VERSION"), "the server fills Version");
    let silent = run(&app, "echo", "echo-2", "  ").await;
    assert_eq!(speech(&silent), (true, "Мне нечего повторить."), "declines with a reason");

    let assistant = run(&app, "assistant", "assistant-1", "открой Safari").await;
    assert_eq!(speech(&assistant), (false, "Открываю Safari."));
    let demo = run(&app, "demo", "demo-1", "кафе пушкин").await;
    assert!(!speech(&demo).0, "demo answers its POI example");
}

#[test]
fn the_readme_shows_the_example_as_it_is() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).expect("README.md");
    let example = std::fs::read_to_string(format!("{root}/examples/echo_scenario/echo.rs")).expect("the example");
    let blocks: Vec<&str> =
        readme.split("```rust\n").skip(1).map(|rest| rest.split("```").next().expect("a closed block")).collect();
    assert!(!blocks.is_empty(), "README shows the example's code");
    for block in blocks {
        assert!(example.contains(block), "README's block is not in examples/echo_scenario/echo.rs:\n{block}");
    }
}
