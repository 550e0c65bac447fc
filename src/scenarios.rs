//! The scenarios built into the server: the one list `serve` hosts. A new
//! scenario is a module of its own and one line in [`modules`].

pub mod demo;

use megamind_core::scenario::ScenarioModule;

/// The scenario behind the un-prefixed paths (`POST /run`, ...) unless
/// configured otherwise (`default_scenario`).
pub const DEFAULT: &str = "demo";

/// Every built-in scenario, as `serve` hosts them.
pub fn modules() -> Vec<Box<dyn ScenarioModule>> {
    vec![Box::new(demo::DemoModule), Box::new(megamind_assistant::AssistantModule::default())]
}
