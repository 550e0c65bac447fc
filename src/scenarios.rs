//! The scenarios built into the server, and the registry `serve` hosts.

pub mod assistant;
pub mod demo;

use std::sync::Arc;

use crate::{
    config::Config,
    scenario::{Registry, registry::RegistryError},
};

/// Why the built-in scenarios could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BuiltinError {
    /// A name clash in the registry.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The assistant's configuration cannot be used.
    #[error(transparent)]
    Assistant(#[from] assistant::AssistantError),
}

/// The registry of every built-in scenario, configured by `config`; their
/// metrics go into `metrics`.
pub fn builtin(config: &Config, metrics: &prometheus::Registry) -> Result<Registry, BuiltinError> {
    let mut registry = Registry::new();
    registry.register("demo", Arc::new(demo::Demo::new()))?;
    registry.register("assistant", Arc::new(assistant::Assistant::from_config(&config.assistant, metrics)?))?;
    Ok(registry)
}
