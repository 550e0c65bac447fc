//! The scenarios built into the server: the one list `serve` hosts. A new
//! scenario is a module of its own and one line in [`modules`].

pub mod demo;

/// The example scenario as README's "a new scenario, file by file" has a
/// team copy it here: built with the server's own dependencies (not the
/// examples' and tests' extra ones), so that the copy builds as it is.
#[allow(dead_code)]
#[path = "../examples/echo_scenario/echo.rs"]
mod template;

use megamind_core::scenario::ScenarioModule;

/// The scenario behind the un-prefixed paths (`POST /run`, ...) unless
/// configured otherwise (`default_scenario`).
pub const DEFAULT: &str = "demo";

/// Every built-in scenario, as `serve` hosts them.
pub fn modules() -> Vec<Box<dyn ScenarioModule>> {
    vec![Box::new(demo::DemoModule), Box::new(megamind_assistant::AssistantModule::default())]
}
