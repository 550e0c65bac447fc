//! Every fixture parses, re-encodes to binary, prints in our text format and
//! in JSON, and parses back to the same message.

use megamind_core::{
    codec::{self, Format, text},
    proto::n_alice::n_scenarios::{
        TScenarioApplyRequest, TScenarioApplyResponse, TScenarioCommitResponse, TScenarioContinueResponse,
        TScenarioRunRequest, TScenarioRunResponse,
    },
};
use prost::Message;
use prost_reflect::{DynamicMessage, MessageDescriptor, ReflectMessage};

use crate::helpers::{fixture_path, fixture_text};

/// Each fixture file with its message type.
pub const FIXTURES: &[(&str, &str)] = &[
    ("poi_run_request", "TScenarioRunRequest"),
    ("poi_run_response", "TScenarioRunResponse"),
    ("poi_callback_run_request", "TScenarioRunRequest"),
    ("poi_callback_run_response", "TScenarioRunResponse"),
    ("music_run_request", "TScenarioRunRequest"),
    ("music_run_response", "TScenarioRunResponse"),
    ("music_continue_request", "TScenarioApplyRequest"),
    ("music_continue_response", "TScenarioContinueResponse"),
    ("video_commit_run_request", "TScenarioRunRequest"),
    ("video_commit_run_response", "TScenarioRunResponse"),
    ("video_commit_request", "TScenarioApplyRequest"),
    ("video_commit_response", "TScenarioCommitResponse"),
    ("video_apply_run_request", "TScenarioRunRequest"),
    ("video_apply_run_response", "TScenarioRunResponse"),
    ("video_apply_request", "TScenarioApplyRequest"),
    ("video_apply_response", "TScenarioApplyResponse"),
];

/// Equal as protobuf messages: default scalars and map order do not count.
fn same(a: &DynamicMessage, b: &DynamicMessage) -> bool {
    let normal =
        |m: &DynamicMessage| DynamicMessage::decode(m.descriptor(), &m.encode_to_vec()[..]).expect("re-decodes");
    normal(a) == normal(b)
}

fn descriptor(name: &str) -> MessageDescriptor {
    codec::message_descriptor(name).expect("known type")
}

#[test]
fn the_fixture_list_covers_every_file() {
    let dir = fixture_path("x");
    let count = std::fs::read_dir(dir.parent().unwrap()).unwrap().count();
    assert_eq!(count, FIXTURES.len());
}

#[test]
fn every_fixture_round_trips_through_binary_text_and_json() {
    for (name, type_name) in FIXTURES {
        let desc = descriptor(type_name);
        let parsed = DynamicMessage::parse_text_format(desc.clone(), &fixture_text(name))
            .unwrap_or_else(|e| panic!("{name} parses: {e}"));
        let binary = codec::encode_dynamic(&parsed, Format::Binary).unwrap();
        let from_binary = codec::decode_dynamic(desc.clone(), &binary, Format::Binary).unwrap();
        assert!(same(&from_binary, &parsed), "{name}: binary round trip");

        let printed = text::print(&from_binary).expect("printable");
        let from_text = DynamicMessage::parse_text_format(desc.clone(), &printed)
            .unwrap_or_else(|e| panic!("{name}: our text parses back: {e}\n{printed}"));
        assert!(same(&from_text, &parsed), "{name}: text round trip\n{printed}");
        assert!(text::print(&from_text).expect("printable") == printed, "{name}: printing is stable");

        let json = codec::encode_dynamic(&parsed, Format::Json).unwrap_or_else(|e| panic!("{name}: JSON: {e}"));
        let from_json = codec::decode_dynamic(desc, &json, Format::Json).unwrap();
        assert!(same(&from_json, &parsed), "{name}: JSON round trip\n{}", String::from_utf8_lossy(&json));
    }
}

#[test]
fn fixtures_decode_into_the_generated_types() {
    fn typed<T: prost::Message + ReflectMessage + Default + PartialEq + std::fmt::Debug>(name: &str) {
        let value: T = codec::decode(fixture_text(name).as_bytes(), Format::Text).unwrap();
        let binary = prost::Message::encode_to_vec(&value);
        assert_eq!(T::decode(&binary[..]).unwrap(), value, "{name}");
    }
    typed::<TScenarioRunRequest>("poi_run_request");
    typed::<TScenarioRunResponse>("poi_run_response");
    typed::<TScenarioApplyRequest>("music_continue_request");
    typed::<TScenarioContinueResponse>("music_continue_response");
    typed::<TScenarioCommitResponse>("video_commit_response");
    typed::<TScenarioApplyResponse>("video_apply_response");
}

#[test]
fn the_printer_keeps_cyrillic_and_field_order() {
    let message = codec::decode_dynamic(
        descriptor("TScenarioRunRequest"),
        fixture_text("poi_run_request").as_bytes(),
        Format::Text,
    )
    .unwrap();
    let printed = text::print(&message).expect("printable");
    assert!(printed.contains("RawUtterance: \"Кафе пушкин\""), "{printed}");
    assert!(printed.starts_with("BaseRequest {\n  RequestId: \"95EB38D6-FA1C-4835-8B21-0023522AF013\"\n"), "{printed}");
    assert!(printed.contains("RandomSeed: 15838288000971308028\n"), "uint64 beyond int64: {printed}");
    assert!(printed.contains("\n  UserLanguage: L_RUS\n"), "enums print by name: {printed}");
    let base = printed.find("BaseRequest {").unwrap();
    let input = printed.find("\nInput {").unwrap();
    assert!(base < input);
}

#[test]
fn known_any_types_print_expanded() {
    let message = codec::decode_dynamic(
        descriptor("TScenarioRunResponse"),
        fixture_text("music_run_response").as_bytes(),
        Format::Text,
    )
    .unwrap();
    let printed = text::print(&message).expect("printable");
    assert!(
        printed.contains("ContinueArguments {\n  [type.googleapis.com/NAlice.NHollywood.TMusicArguments] {\n  }\n}"),
        "{printed}"
    );
}

#[test]
fn unknown_any_types_print_raw_and_refuse_json_clearly() {
    let text_in =
        "ContinueArguments {\n  type_url: \"type.googleapis.com/NAlice.NUnknown.TArgs\"\n  value: \"\\001\\002\"\n}\n";
    let message = codec::decode_dynamic(descriptor("TScenarioRunResponse"), text_in.as_bytes(), Format::Text).unwrap();
    assert_eq!(text::print(&message).expect("printable"), text_in);
    let error = codec::encode_dynamic(&message, Format::Json).unwrap_err().to_string();
    assert!(error.contains("NAlice.NUnknown.TArgs"), "{error}");
}
