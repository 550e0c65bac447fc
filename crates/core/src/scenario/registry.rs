//! Scenarios by name, built once at start-up and shared read-only.

use std::{collections::BTreeMap, sync::Arc};

use super::Scenario;

/// A registered scenario with its name.
#[derive(Clone)]
pub struct Registered {
    /// The name in paths, metadata and metric labels.
    pub name: Arc<str>,
    /// The scenario itself.
    pub scenario: Arc<dyn Scenario>,
}

impl std::fmt::Debug for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registered").field("name", &self.name).finish_non_exhaustive()
    }
}

/// Why a registry could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// Two scenarios under one name.
    #[error("scenario {0:?} is registered twice")]
    Duplicate(String),
    /// A name that cannot be a path segment.
    #[error("scenario name {0:?} must be non-empty ASCII letters, digits, '-' or '_'")]
    BadName(String),
    /// A name that would shadow a handler path such as `/run`.
    #[error("scenario name {0:?} is reserved")]
    Reserved(String),
}

/// Scenario names that are server paths of their own.
const RESERVED: &[&str] = &["run", "continue", "commit", "apply", "metrics", "healthz", "readyz"];

/// Maps scenario names to scenarios.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    scenarios: BTreeMap<Arc<str>, Registered>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Registers `scenario` under `name`.
    pub fn register(&mut self, name: &str, scenario: Arc<dyn Scenario>) -> Result<&mut Registry, RegistryError> {
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
            return Err(RegistryError::BadName(name.to_owned()));
        }
        if RESERVED.contains(&name) {
            return Err(RegistryError::Reserved(name.to_owned()));
        }
        if self.scenarios.contains_key(name) {
            return Err(RegistryError::Duplicate(name.to_owned()));
        }
        let name: Arc<str> = name.into();
        self.scenarios.insert(name.clone(), Registered { name, scenario });
        Ok(self)
    }

    /// The scenario registered under `name`.
    pub fn get(&self, name: &str) -> Option<&Registered> {
        self.scenarios.get(name)
    }

    /// Registered names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.scenarios.keys().map(|name| &**name)
    }

    /// Registered names, sorted, for messages and logs: `demo, echo`.
    pub fn listed(&self) -> String {
        self.names().collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A scenario that answers every `/run` with an empty response.
    pub(crate) struct Nop;

    #[async_trait::async_trait]
    impl Scenario for Nop {
        async fn run(
            &self,
            _: crate::proto::n_alice::n_scenarios::TScenarioRunRequest,
            _: crate::scenario::CallContext,
        ) -> crate::scenario::ScenarioResult<crate::proto::n_alice::n_scenarios::TScenarioRunResponse> {
            Ok(crate::proto::n_alice::n_scenarios::TScenarioRunResponse::default().into())
        }
    }

    #[test]
    fn names_are_checked() {
        let mut registry = Registry::new();
        registry.register("demo", Arc::new(Nop)).unwrap();
        assert!(matches!(registry.register("demo", Arc::new(Nop)), Err(RegistryError::Duplicate(_))));
        assert!(matches!(registry.register("a/b", Arc::new(Nop)), Err(RegistryError::BadName(_))));
        assert!(matches!(registry.register("", Arc::new(Nop)), Err(RegistryError::BadName(_))));
        assert!(matches!(registry.register("run", Arc::new(Nop)), Err(RegistryError::Reserved(_))));
        assert_eq!(registry.names().collect::<Vec<_>>(), ["demo"]);
        registry.register("assistant", Arc::new(Nop)).unwrap();
        assert_eq!(registry.listed(), "assistant, demo");
        assert!(registry.get("demo").is_some() && registry.get("nope").is_none());
    }
}
