//! The binary as a user first runs it, with no file and no flag but its
//! address: every default it embeds applies as `serve --help` shows it, the
//! un-prefixed paths reach the demo, and a file, a variable or a flag still
//! wins over a default.

use std::process::Output;

use megamind_core::{
    codec::Format,
    proto::n_alice::n_scenarios::{TScenarioRunRequest, TScenarioRunResponse},
};

use crate::{
    dialog_cmd::{serve, temp},
    helpers::{binary, decode_answer, fixture, fixture_body},
};

/// `serve --print-config` with `args`, the variables `env` set and no other
/// of ours; its output.
fn printed(args: &[&str], env: &[(&str, &str)]) -> String {
    let mut command = binary();
    command.args(["serve", "--print-config"]).args(args);
    command.envs(env.iter().copied());
    let Output { status, stdout, stderr } = command.output().expect("the binary runs");
    assert!(status.success(), "{}", String::from_utf8_lossy(&stderr));
    String::from_utf8(stdout).expect("UTF-8")
}

#[tokio::test]
async fn a_fresh_server_answers_the_unprefixed_run_as_the_demo() {
    let server = serve("info", &temp("first-run.log"));
    let body = fixture_body::<TScenarioRunRequest>("poi_run_request", Format::Binary);
    let client = megamind_core::http_client::client_builder().no_proxy().build().expect("http client");
    let answer = client
        .post(format!("{}/run", server.url))
        .header("content-type", "application/protobuf")
        .body(body)
        .send()
        .await
        .expect("an answer");
    assert_eq!(answer.status(), 200, "POST /run reaches the default scenario");
    let got: TScenarioRunResponse = decode_answer(&answer.bytes().await.expect("a body"), Format::Binary);
    assert!(got == fixture::<TScenarioRunResponse>("poi_run_response"), "the demo's answer: {got:?}");
}

#[test]
fn the_printed_configuration_holds_the_default_scenario_and_what_overrides_it() {
    let line = |scenario: &str| format!("\ndefault_scenario = \"{scenario}\"\n");
    assert!(printed(&[], &[]).contains(&line("demo")), "{}", printed(&[], &[]));
    let file = temp("first-run.toml");
    std::fs::write(&file, "default_scenario = \"assistant\"\n").expect("written");
    let file = file.to_str().expect("a UTF-8 path");
    assert!(printed(&["--config", file], &[]).contains(&line("assistant")), "the file wins");
    assert!(printed(&[], &[("MEGAMIND_DEFAULT_SCENARIO", "assistant")]).contains(&line("assistant")), "the variable");
    let flag = printed(&["--default-scenario", "assistant"], &[("MEGAMIND_DEFAULT_SCENARIO", "demo")]);
    assert!(flag.contains(&line("assistant")), "the flag wins over the variable: {flag}");
}
