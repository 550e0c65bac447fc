//! The scenario of `examples/echo_scenario`, hosted next to the built-in
//! ones by the real server, and the README showing the same code.

#[path = "../../examples/echo_scenario/echo.rs"]
mod echo;

use megamind_core::{
    codec::Format,
    config::Config,
    proto::n_alice::n_scenarios::{TScenarioRunResponse, t_scenario_run_response},
    scenario::{ScenarioModule, module},
};
use megamind_scenario::cli;

use crate::helpers::{TestApp, decode_answer, spawn_modules};

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

/// `serve ARGS` of the example's binary: the built-in scenarios and `echo`.
fn serve(args: &[&str]) -> (Config, Vec<Box<dyn ScenarioModule>>) {
    let mut modules = megamind_scenario::scenarios::modules();
    modules.push(Box::new(echo::EchoModule));
    let argv = ["echo_scenario", "serve"].iter().chain(args).copied();
    match cli::parse(argv, modules, &|_| None).unwrap_or_else(|e| panic!("{args:?}: {e}")) {
        cli::Parsed::Serve(serve) => (serve.loaded.config, serve.loaded.modules),
        _ => unreachable!("serve parses as serve"),
    }
}

#[tokio::test]
async fn the_example_scenario_answers_next_to_the_built_in_ones() {
    let (config, modules) = serve(&["--echo-prefix", "Вы сказали: "]);
    let app = spawn_modules(config, &modules).await;

    let echoed = run(&app, "echo", "echo-1", "привет, мир").await;
    assert_eq!(speech(&echoed), (false, "Вы сказали: привет, мир"), "its flag reached its table");
    assert_eq!(echoed.version, env!("CARGO_PKG_VERSION"), "the server fills Version");
    let silent = run(&app, "echo", "echo-2", "   ").await;
    assert_eq!(speech(&silent), (true, "Мне нечего повторить."), "declines with a reason");
    let (_, metrics) = app.get("/metrics").await;
    assert!(metrics.contains("megamind_echo_repeats_total 1"), "its own metric: {metrics}");
    let (status, last) = app.get("/echo/last").await;
    assert_eq!((status.as_u16(), last.as_str()), (200, "привет, мир"), "its own route");

    let assistant = run(&app, "assistant", "assistant-1", "открой Safari").await;
    assert_eq!(speech(&assistant), (false, "Открываю Safari."));
    let demo = run(&app, "demo", "demo-1", "кафе пушкин").await;
    assert!(!speech(&demo).0, "demo answers its POI example");
}

#[test]
fn the_example_reads_its_own_table_and_refuses_unknown_keys() {
    let (config, modules) = serve(&["--set", "echo.prefix=Эхо: "]);
    assert_eq!(config.scenarios["echo"]["prefix"].as_str(), Some("Эхо: "));
    let mut table = config.scenarios["echo"].clone();
    table.insert("prefx".into(), "x".into());
    let error = module::build_all(&modules, &[("echo".to_owned(), table)].into(), &prometheus::Registry::new());
    assert!(error.unwrap_err().to_string().contains("echo: [echo] unknown field `prefx`"), "build refuses it too");
    let mut modules = megamind_scenario::scenarios::modules();
    modules.push(Box::new(echo::EchoModule));
    let error = cli::parse(["echo_scenario", "serve", "--set", "echo.prefx=x"], modules, &|_| None).unwrap_err();
    let error = error.to_string();
    assert!(error.contains("--set echo.prefx: echo.prefx: unknown key; did you mean `prefix`?"), "{error}");
}

// README's "Writing a scenario" shows this test as it is: copy it.
#[tokio::test]
async fn echo_says_back_what_it_heard() {
    use megamind_core::{
        codec::Format,
        config::Config,
        proto::n_alice::n_scenarios::{TScenarioRunResponse, t_scenario_run_response::Response},
    };

    use crate::helpers::{decode_answer, spawn_modules};

    // The built-in scenarios and ours; one built into the server is in `modules()` already.
    let mut modules = megamind_scenario::scenarios::modules();
    modules.push(Box::new(echo::EchoModule));
    let mut config = Config::default();
    config.scenarios.insert("echo".into(), toml::toml! { prefix = "Вы сказали: " });
    let app = spawn_modules(config, &modules).await;

    let request =
        r#"BaseRequest { RequestId: "r1" ServerTimeMs: 1764210832530 } Input { Text { Utterance: "привет" } }"#;
    let response = app.post("/echo/run", "text/protobuf", Some("application/protobuf"), request.into()).await;
    assert_eq!(response.status(), 200);
    // `decode_answer` reads any message: say which one.
    let answer: TScenarioRunResponse = decode_answer(&response.bytes().await.unwrap(), Format::Binary);
    let Some(Response::ResponseBody(body)) = answer.response else { panic!("an answer, got {answer:?}") };
    assert_eq!(body.layout.unwrap().output_speech, "Вы сказали: привет");
}

/// The example's own route holds a user's words: with TVM on, it admits
/// the callers the scenario's handlers admit, and no one else.
#[tokio::test]
async fn the_example_route_asks_for_a_ticket_as_its_handlers_do() {
    use crate::{
        tvm::{MEGAMIND, STRANGER, config, tickets},
        tvmtool::Tvmtool,
    };
    let tvmtool = Tvmtool::start(tickets()).await;
    let mut modules = megamind_scenario::scenarios::modules();
    modules.push(Box::new(echo::EchoModule));
    let app = spawn_modules(config(&tvmtool), &modules).await;
    let get = |ticket: Option<&'static str>| {
        let mut request = app.http.get(app.url("/echo/last"));
        if let Some(ticket) = ticket {
            request = request.header("x-ya-service-ticket", ticket);
        }
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(get(None).await, 403);
    assert_eq!(get(Some(STRANGER)).await, 403);
    assert_eq!(get(Some(MEGAMIND)).await, 200);
}
