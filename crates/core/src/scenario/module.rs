//! What a scenario brings to the server besides its handlers: its name, its
//! configuration table, its `serve` flags, its metrics and its routes.
//!
//! The server core knows no scenario: `serve` builds each [`ScenarioModule`]
//! from its own table of the configuration (`[name]`; defaults, then the
//! file, then its flags, then `--set name.key=value`) and hands it a
//! [`Setup`] to register its metrics and routes in. Adding a scenario is one
//! module of its own and one line in the list `serve` hosts.

use std::{borrow::Cow, fmt, sync::Arc};

use super::Scenario;
use crate::config::{
    CORE_TABLES, Problem,
    sources::{merge, with_aliases},
};
use crate::{dispatch::Gate, store::Stores};

/// A scenario as `serve` builds it.
pub trait ScenarioModule: fmt::Debug + Send + Sync + 'static {
    /// The registered name: also the name of its table (`[name]`), the
    /// prefix of its `--set name.key=value` keys and its flags' heading.
    fn name(&self) -> &'static str;

    /// Its table with every default, as the configuration file would write
    /// it: the base its table is merged over, and what `--help` and
    /// `serve --print-config` show.
    fn defaults(&self) -> toml::Table {
        toml::Table::new()
    }

    /// Its flags of `serve`, each setting one key of its table.
    fn flags(&self) -> Vec<Flag> {
        Vec::new()
    }

    /// Keys of its table that moved, each as (where it was, where it is),
    /// dotted under the table (`model` → `backend.model`): a configuration
    /// that writes one where it was is read as if it wrote it where it is.
    fn aliases(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    /// Every problem with its table (defaults, file, flags and `--set`
    /// merged, as [`build`](Self::build) gets it), found without building
    /// anything: `serve` reports them with the core's, each with the line or
    /// flag that set it, before the server logs a line. Keys are whole
    /// (`name.key`); [`crate::config::problem::read`] reads a typed table so.
    /// None by default: `build` still refuses a bad table, only later.
    fn check(&self, table: &toml::Table) -> Vec<Problem> {
        let _ = table;
        Vec::new()
    }

    /// Builds the scenario from its table (defaults, file, flags and `--set`
    /// merged), registering its metrics and routes in `setup`. Every problem
    /// with the table is reported at once.
    fn build(&self, table: toml::Table, setup: &mut Setup<'_>) -> Result<Arc<dyn Scenario>, SetupError>;
}

/// One flag of `serve` that sets one key of a scenario's table:
/// `--echo-prefix hi` is `--set echo.prefix=hi`. Built at
/// compile time with [`Flag::new`], or at start-up from a configuration
/// struct's keys and doc comments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flag {
    /// The long flag, without `--`.
    pub long: Cow<'static, str>,
    /// The key it sets in the scenario's table.
    pub key: Cow<'static, str>,
    /// The environment variable read when the flag is absent.
    pub env: Option<Cow<'static, str>>,
    /// One line of help; the default is appended from [`ScenarioModule::defaults`].
    pub help: Cow<'static, str>,
    /// A value that must never be shown (`--help` hides the environment's value).
    pub secret: bool,
}

impl Flag {
    /// `--long` setting `key`.
    pub const fn new(long: &'static str, key: &'static str, help: &'static str) -> Flag {
        Flag { long: Cow::Borrowed(long), key: Cow::Borrowed(key), env: None, help: Cow::Borrowed(help), secret: false }
    }

    /// `--long` setting `key`, its names made at start-up (from a
    /// configuration struct's keys and doc comments).
    pub fn named(
        long: impl Into<Cow<'static, str>>,
        key: impl Into<Cow<'static, str>>,
        help: impl Into<Cow<'static, str>>,
    ) -> Flag {
        Flag { long: long.into(), key: key.into(), env: None, help: help.into(), secret: false }
    }

    /// Also read from the environment variable `env`.
    pub fn env(mut self, env: impl Into<Cow<'static, str>>) -> Flag {
        self.env = Some(env.into());
        self
    }

    /// A secret: its value is never shown.
    pub const fn secret(mut self) -> Flag {
        self.secret = true;
        self
    }
}

/// What a scenario registers while it is built.
pub struct Setup<'a> {
    /// The registry `/metrics` renders: register the scenario's collectors here.
    pub metrics: &'a prometheus::Registry,
    routes: Vec<(String, axum::routing::MethodRouter)>,
    lane: Vec<String>,
    gate: Gate,
    local_keys: Vec<String>,
    stores: Stores,
}

impl fmt::Debug for Setup<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let paths: Vec<_> = self.routes.iter().map(|(path, _)| path).collect();
        f.debug_struct("Setup").field("routes", &paths).finish_non_exhaustive()
    }
}

impl<'a> Setup<'a> {
    /// A setup registering metrics into `metrics`.
    pub fn new(metrics: &'a prometheus::Registry) -> Setup<'a> {
        Setup {
            metrics,
            routes: Vec::new(),
            lane: Vec::new(),
            gate: Gate::default(),
            local_keys: Vec::new(),
            stores: Stores::memory(),
        }
    }

    /// The same setup, building scenario stores over `stores`.
    pub fn with_stores(mut self, stores: Stores) -> Setup<'a> {
        self.stores = stores;
        self
    }

    /// What a scenario's own stores (single flights of its work, their
    /// journals) are built over: the server's `[store]`, so that replicas
    /// share them exactly when they share the idempotency cache.
    pub fn stores(&self) -> &Stores {
        &self.stores
    }

    /// The server's authenticator, for a route that only callers of the
    /// scenario handlers may use: `gate.admit(&headers).await` refuses as a
    /// scenario call would be refused (bound when the server is built).
    pub fn gate(&self) -> Gate {
        self.gate.clone()
    }

    /// Serves `path` (axum syntax: `/events/{id}`) with `route`. Routes
    /// other than `POST /{scenario}/{handler}` go through the server's router.
    /// An answer that streams for long takes the server's `Shutdown`
    /// ([`crate::scenario::Shutdown`], an extractor) and ends when it fires.
    pub fn route(&mut self, path: &str, route: axum::routing::MethodRouter) {
        self.routes.push((path.to_owned(), route));
    }

    /// Serves `path` as [`Setup::route`] does, as a long-lived route: a
    /// connection that opens with a `GET` of it (its path up to the first
    /// `{`) is served on the stream lane, threads of its own at a lower OS
    /// priority, so that thousands of open streams never slow down `/run`.
    /// Its path must begin with a whole literal segment (`/events/{id}`,
    /// not `/{id}/events`, which would take every `GET`): the server
    /// refuses to start otherwise.
    pub fn route_in_lane(&mut self, path: &str, route: axum::routing::MethodRouter) {
        self.route(path, route);
        self.lane.push(path.to_owned());
    }

    /// Notes that the key configured at `key` was left empty and made at
    /// random by this process: what it signs opens nothing on another
    /// replica, which the server warns about when replicas share a store.
    pub fn key_of_this_process(&mut self, key: &str) {
        self.local_keys.push(key.to_owned());
    }

    /// The routes registered so far.
    pub fn into_routes(self) -> Vec<(String, axum::routing::MethodRouter)> {
        self.routes
    }

    /// The routes registered so far, and the paths of those in the lane.
    pub fn into_parts(self) -> (Vec<(String, axum::routing::MethodRouter)>, Vec<String>) {
        (self.routes, self.lane)
    }
}

/// Why a scenario could not be built: every problem found, one per entry.
#[derive(Debug, thiserror::Error)]
#[error("{scenario}: {}", .problems.join("; "))]
pub struct SetupError {
    /// The scenario's name.
    pub scenario: &'static str,
    /// What is wrong.
    pub problems: Vec<String>,
}

impl SetupError {
    /// One problem of `scenario`.
    pub fn new(scenario: &'static str, problem: impl Into<String>) -> SetupError {
        SetupError { scenario, problems: vec![problem.into()] }
    }
}

/// Reads a scenario's table into its typed configuration, naming the
/// scenario and the key in the error.
pub fn parse_table<T: serde::de::DeserializeOwned>(
    scenario: &'static str,
    table: toml::Table,
) -> Result<T, SetupError> {
    T::deserialize(toml::Value::Table(table))
        .map_err(|e| SetupError::new(scenario, format!("[{scenario}] {}", e.to_string().trim_end())))
}

/// What [`build_all`] makes: the registry `serve` hosts and the scenarios' routes.
#[derive(Debug, Default)]
pub struct Built {
    /// Every scenario by name.
    pub registry: super::Registry,
    /// The routes the scenarios registered, by path.
    pub routes: Vec<(String, axum::routing::MethodRouter)>,
    /// The paths of the routes served on the stream lane.
    pub lane: Vec<String>,
    /// The gate the scenarios' routes ask, bound to the server's
    /// authenticator when the server is built from this.
    pub gate: Gate,
    /// Keys made at random by this process ([`Setup::key_of_this_process`]).
    pub local_keys: Vec<String>,
    /// What the scenarios' stores were built over.
    pub stores: Stores,
}

/// Every scenario module's table: its defaults, as the configuration file
/// would write them under `[name]`.
pub fn defaults_of(modules: &[Box<dyn ScenarioModule>]) -> toml::Table {
    modules.iter().map(|module| (module.name().to_owned(), toml::Value::Table(module.defaults()))).collect()
}

/// A scenario's whole table: its defaults with what was configured merged
/// over them, moved keys read where they are now.
pub fn table_of(module: &dyn ScenarioModule, configured: Option<&toml::Table>) -> toml::Table {
    let mut table = module.defaults();
    if let Some(configured) = configured {
        merge(&mut table, with_aliases(configured.clone(), module.aliases()));
    }
    table
}

/// Builds every module from its table in `tables` (see
/// [`crate::config::Config::scenarios`]), registering metrics in `metrics`.
/// Every problem is reported together: a table no scenario owns, a
/// duration past its bound ([`crate::config::durations`]), a table a
/// scenario refuses, two routes on one path.
pub fn build_all(
    modules: &[Box<dyn ScenarioModule>],
    tables: &std::collections::BTreeMap<String, toml::Table>,
    metrics: &prometheus::Registry,
) -> Result<Built, BuildError> {
    build_all_with(modules, tables, metrics, Stores::memory())
}

/// As [`build_all`], the scenarios' own stores built over `stores` (the
/// server's `[store]`: [`Stores::of`]).
pub fn build_all_with(
    modules: &[Box<dyn ScenarioModule>],
    tables: &std::collections::BTreeMap<String, toml::Table>,
    metrics: &prometheus::Registry,
    stores: Stores,
) -> Result<Built, BuildError> {
    let mut errors: Vec<String> = unknown_tables(modules, tables).into_iter().map(|problem| problem.message).collect();
    let mut built = Built { stores: stores.clone(), ..Built::default() };
    for module in modules {
        let table = table_of(&**module, tables.get(module.name()));
        // The bound a loaded configuration has checked already, for a server
        // built in code. A scenario is not built with such a time (it might
        // add it to a clock); its own check says what else is wrong.
        if !crate::config::durations::too_long(module.name(), &table).is_empty() {
            errors.extend(checked(&**module, &table).into_iter().map(|problem| problem.message));
            continue;
        }
        let mut setup = Setup::new(metrics).with_stores(stores.clone());
        setup.gate = built.gate.clone();
        match module.build(table, &mut setup) {
            Ok(scenario) => {
                if let Err(error) = built.registry.register(module.name(), scenario) {
                    errors.push(error.to_string());
                }
            }
            Err(error) => {
                errors.extend(error.problems.into_iter().map(|problem| format!("{}: {problem}", module.name())));
                // A scenario that did not build serves no routes either.
                continue;
            }
        }
        built.local_keys.append(&mut setup.local_keys);
        let (routes, lane) = setup.into_parts();
        built.lane.extend(lane);
        for (path, route) in routes {
            if built.routes.iter().any(|(taken, _)| *taken == path) {
                errors.push(format!("{}: the route {path} is registered twice", module.name()));
            } else {
                built.routes.push((path, route));
            }
        }
    }
    if errors.is_empty() { Ok(built) } else { Err(BuildError(errors)) }
}

/// Every problem with the scenarios `config` names found without building
/// them: a table no scenario owns, each scenario's
/// [`ScenarioModule::check`] and the bound of its durations
/// ([`crate::config::durations`]) where its check found nothing at the key,
/// a `default_scenario` none of them is.
pub fn problems(modules: &[Box<dyn ScenarioModule>], config: &crate::config::Config) -> Vec<Problem> {
    let tables = &config.scenarios;
    let mut problems = unknown_tables(modules, tables);
    for module in modules {
        problems.extend(checked(&**module, &table_of(&**module, tables.get(module.name()))));
    }
    let names: Vec<&str> = modules.iter().map(|module| module.name()).collect();
    let default = config.default_scenario.as_str();
    if !default.is_empty() && !names.contains(&default) {
        let near = crate::text::did_you_mean(default, names.iter().copied());
        let message = format!("default_scenario {default:?} is not registered{near} (scenarios: {})", names.join(", "));
        problems.push(Problem::new("default_scenario", message));
    }
    problems
}

/// The problems with `module`'s `table`: its own check's, and each
/// duration past the bound ([`crate::config::durations`]) at a key the
/// check did not name.
fn checked(module: &dyn ScenarioModule, table: &toml::Table) -> Vec<Problem> {
    let mut problems = module.check(table);
    let too_long = crate::config::durations::too_long(module.name(), table);
    let unsaid: Vec<Problem> = too_long.into_iter().filter(|long| problems.iter().all(|p| p.key != long.key)).collect();
    problems.extend(unsaid);
    problems
}

/// A table no scenario owns, with the table it was likely meant to be.
fn unknown_tables(
    modules: &[Box<dyn ScenarioModule>],
    tables: &std::collections::BTreeMap<String, toml::Table>,
) -> Vec<Problem> {
    let names: Vec<&str> = modules.iter().map(|module| module.name()).collect();
    let known = names.iter().chain(CORE_TABLES).copied();
    let unknown = tables.keys().filter(|name| !names.contains(&name.as_str()));
    unknown
        .map(|name| {
            let near = crate::text::did_you_mean(name, known.clone());
            let message = format!("[{name}]: no scenario of that name{near} (scenarios: {})", names.join(", "));
            Problem::new(name.clone(), message)
        })
        .collect()
}

/// Why the scenarios could not be built: every problem found, one per line.
#[derive(Debug, thiserror::Error)]
#[error("invalid scenario configuration:\n  - {}", .0.join("\n  - "))]
pub struct BuildError(pub Vec<String>);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        proto::n_alice::n_scenarios::{TScenarioRunRequest, TScenarioRunResponse},
        scenario::{CallContext, ScenarioResult},
    };

    /// A scenario of someone else's, whose one duration it never checks.
    #[derive(Debug)]
    struct Waiting;

    #[async_trait::async_trait]
    impl Scenario for Waiting {
        async fn run(&self, _: TScenarioRunRequest, _: CallContext) -> ScenarioResult<TScenarioRunResponse> {
            Ok(TScenarioRunResponse::default().into())
        }
    }

    impl ScenarioModule for Waiting {
        fn name(&self) -> &'static str {
            "waiting"
        }

        fn defaults(&self) -> toml::Table {
            toml::toml! { wait_secs = 100 }
        }

        fn build(&self, table: toml::Table, _: &mut Setup<'_>) -> Result<Arc<dyn Scenario>, SetupError> {
            // As a scenario might: a time far past the bound overflows the clock.
            let wait = table["wait_secs"].as_integer().and_then(|secs| u64::try_from(secs).ok()).unwrap_or_default();
            let _due = std::time::Instant::now() + std::time::Duration::from_secs(wait);
            Ok(Arc::new(Waiting))
        }
    }

    #[test]
    fn a_duration_past_its_bound_is_refused_whatever_the_scenario_checks() {
        let modules: Vec<Box<dyn ScenarioModule>> = vec![Box::new(Waiting)];
        let build = |wait: i64| {
            let tables = [("waiting".to_owned(), toml::toml! { wait_secs = wait })].into();
            build_all(&modules, &tables, &prometheus::Registry::new())
        };
        // Refused before it is built: built, it would overflow its clock and panic.
        let refused = build(i64::MAX).err().map(|error| error.to_string()).unwrap_or_default();
        assert!(refused.contains("waiting.wait_secs = 9223372036854775807: must be at most 30 days"), "{refused}");
        assert!(build(2_592_000).is_ok(), "30 days is allowed");
        let config = crate::config::Config {
            scenarios: crate::config::ScenarioTables(
                [("waiting".to_owned(), toml::toml! { wait_secs = 2592001 })].into(),
            ),
            ..crate::config::Config::default()
        };
        let found = problems(&modules, &config);
        assert_eq!(found.iter().map(|problem| problem.key.as_str()).collect::<Vec<_>>(), ["waiting.wait_secs"]);
    }
}
