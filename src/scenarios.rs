//! The scenarios built into the server, and the registry `serve` hosts.

pub mod demo;

use std::sync::Arc;

use crate::scenario::{Registry, registry::RegistryError};

/// The registry of every built-in scenario.
pub fn builtin() -> Result<Registry, RegistryError> {
    let mut registry = Registry::new();
    registry.register("demo", Arc::new(demo::Demo::new()))?;
    Ok(registry)
}
