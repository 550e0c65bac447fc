//! The scenarios built into the server: the one list `serve` hosts. A new
//! scenario is a module of its own and one line in [`modules`].

pub mod assistant;
pub mod demo;

use crate::{
    config::Config,
    scenario::{BuildError, Registry, ScenarioModule, module},
};

/// Every built-in scenario, as `serve` hosts them.
pub fn modules() -> Vec<Box<dyn ScenarioModule>> {
    vec![Box::new(demo::DemoModule), Box::new(assistant::AssistantModule)]
}

/// The built-in scenarios configured by `config`, their metrics in
/// `metrics`: what tests and embedders host. Routes the scenarios register
/// need [`module::build_all`], which `serve` uses.
pub fn builtin(config: &Config, metrics: &prometheus::Registry) -> Result<Registry, BuildError> {
    Ok(module::build_all(&modules(), &config.scenarios, metrics)?.registry)
}
