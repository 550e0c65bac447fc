//! Our text printer against prost-reflect's parser: any binary message,
//! printed and parsed back, is the same message (see `difference` for what
//! text format cannot carry).

#![no_main]

use libfuzzer_sys::fuzz_target;
use megamind_core::codec::{self, Format};
use prost_reflect::DynamicMessage;

/// The messages of the protocol's four calls, picked by the input's first
/// byte (the files under `fuzz/seeds/text_round_trip/` start with this index).
const TYPES: &[&str] = &[
    "NAlice.NScenarios.TScenarioRunRequest",
    "NAlice.NScenarios.TScenarioApplyRequest",
    "NAlice.NScenarios.TScenarioRunResponse",
    "NAlice.NScenarios.TScenarioContinueResponse",
    "NAlice.NScenarios.TScenarioCommitResponse",
    "NAlice.NScenarios.TScenarioApplyResponse",
    "megamind_scenario.v1.TAssistantState",
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, binary)) = data.split_first() else { return };
    let desc = codec::message_descriptor(TYPES[usize::from(pick) % TYPES.len()]).expect("a type of the schema");
    let Ok(original) = codec::decode_dynamic(desc.clone(), binary, Format::Binary) else { return };
    let text = match codec::text::print(&original) {
        Ok(text) => text,
        Err(error) => panic!("decoded within the nesting limit, yet not printed: {error}"),
    };
    let parsed = match DynamicMessage::parse_text_format(desc, &text) {
        Ok(parsed) => parsed,
        Err(error) => panic!("our text does not parse back: {error}\n{text}"),
    };
    if let Some(difference) = megamind_scenario_fuzz::difference(&original, &parsed) {
        panic!("parsed back differently: {difference}\n{text}");
    }
});
