//! The scenarios built into the server: the one list `serve` hosts. A new
//! scenario is a module of its own and one line in [`modules`].

pub mod assistant;
pub mod demo;

use crate::scenario::ScenarioModule;

/// Every built-in scenario, as `serve` hosts them.
pub fn modules() -> Vec<Box<dyn ScenarioModule>> {
    vec![Box::new(demo::DemoModule), Box::new(assistant::AssistantModule)]
}
