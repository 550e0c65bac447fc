//! Any model answer: parsed without a panic into speech and at most one
//! valid command, and the answer built from it decodes with protobuf's
//! default limits and renders as JSON and text format.

#![no_main]

use libfuzzer_sys::fuzz_target;
use megamind_assistant::dialog::{
    answer::{self, Command},
    reply,
};
use megamind_assistant::proto::megamind_scenario::v1::TAssistantState;
use megamind_core::{
    codec::{self, Format},
    proto::n_alice::n_scenarios::{TScenarioRunResponse, t_scenario_run_response},
};
use prost::Message;
use prost_reflect::ReflectMessage;

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = std::str::from_utf8(data) else { return };
    let answer = answer::parse(raw);
    // JSON escapes only ever shorten a string.
    assert!(answer.text.len() <= raw.len(), "speech longer than the answer");
    match &answer.command {
        Some(Command::OpenApp { app_name, app_path, .. }) => assert!(!(app_name.is_empty() && app_path.is_empty())),
        Some(Command::CloseApp { app_name, .. }) => assert!(!app_name.is_empty()),
        None => {}
    }
    assert!(answer.command.is_none() || answer.dropped.is_none(), "a command both kept and dropped");
    assert!(answer.clone().truncated().command.is_none(), "a command from a cut answer");

    let body = reply::answer(&answer, &answer.text, &TAssistantState::default());
    let response = TScenarioRunResponse {
        response: Some(t_scenario_run_response::Response::ResponseBody(body)),
        ..Default::default()
    };
    let binary = response.encode_to_vec();
    // prost's limits are protobuf's (recursion 100): what Megamind can read.
    if let Err(error) = TScenarioRunResponse::decode(&binary[..]) {
        panic!("the answer does not decode: {error}");
    }
    for format in [Format::Json, Format::Text] {
        if let Err(error) = codec::transcode(response.descriptor(), &binary.clone().into(), format) {
            panic!("the answer does not render as {format:?}: {error}");
        }
    }
});
