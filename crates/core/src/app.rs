//! The server's shared state: the dispatcher, the limits every connection
//! applies, the routes scenarios registered and the drain signal, built once
//! from the configuration and shared by the transports and the accept loop
//! behind one `Arc`.
//!
//! Transports and the server both import this module; it imports neither.

use std::{
    collections::BTreeSet,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use crate::{
    config::{Config, ConfigError},
    dispatch::{Authenticator, Dispatcher, Gate},
    rules::{
        auth,
        budget::Budgets,
        connections::ConnectionLimits,
        idempotency::{CacheCounters, IdempotencyCache},
        metrics::{ConnectionMetrics, ServerMetrics},
        overload::Admission,
    },
    scenario::{Registry, Shutdown, module::Built},
    store::{CacheStore, MemoryStore, Stores},
};

/// Everything a connection needs, shared by all of them.
#[derive(Debug)]
pub struct App {
    /// Runs calls under the server's rules.
    pub dispatcher: Dispatcher,
    /// Largest request body accepted, in bytes.
    pub body_limit: usize,
    /// How long `/readyz` says "draining" while the server still serves,
    /// before it stops accepting: time for load balancers to notice.
    pub shutdown_delay: Duration,
    /// How long in-flight requests may take to finish once accepting stopped.
    pub drain_timeout: Duration,
    /// Per-handler budgets: a request's body must arrive within its handler's.
    pub budgets: Budgets,
    /// Connection count, timeouts and HTTP/2 streams.
    pub connection_limits: ConnectionLimits,
    /// Open connections, waits for a free slot, closes by reason.
    pub connection_metrics: ConnectionMetrics,
    /// The paths of the long-lived routes scenarios registered for the
    /// stream lane ([`crate::scenario::Setup::route_in_lane`]).
    pub lane_paths: Vec<String>,
    draining: AtomicBool,
    shutdown: Shutdown,
    routes: axum::Router,
    /// The scenarios' routes' way to the authenticator: rebound with it.
    gate: Gate,
}

/// Paths the server's router serves itself, which no scenario may take.
const SERVER_PATHS: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

impl App {
    /// Builds the server state for `config` over the scenarios of `registry`.
    pub fn new(config: &Config, registry: Registry) -> Result<App, ConfigError> {
        App::with_metrics(config, registry, ServerMetrics::new())
    }

    /// As [`App::new`], recording into `metrics` (whose registry the
    /// scenarios may already have registered their own collectors in).
    pub fn with_metrics(config: &Config, registry: Registry, metrics: ServerMetrics) -> Result<App, ConfigError> {
        App::with_routes(config, registry, metrics, Vec::new())
    }

    /// As [`App::with_metrics`], also serving `routes` (path in axum syntax,
    /// and its methods), as scenarios register them
    /// ([`crate::scenario::Setup::into_routes`]). A `POST` naming a scenario
    /// handler (`/{scenario}/{handler}`, `/{handler}`) never reaches them.
    /// Routes that ask the setup's gate refuse every caller until it is
    /// bound: `setup.gate().bind(app.dispatcher.authenticator().clone())`
    /// ([`App::from_built`] does it).
    pub fn with_routes(
        config: &Config,
        registry: Registry,
        metrics: ServerMetrics,
        routes: Vec<(String, axum::routing::MethodRouter)>,
    ) -> Result<App, ConfigError> {
        App::build(config, registry, metrics, routes, None)
    }

    /// As [`App::with_routes`], the idempotency cache over `stores` (the
    /// scenarios' own, sharing their connections to Redis) when given.
    fn build(
        config: &Config,
        registry: Registry,
        metrics: ServerMetrics,
        routes: Vec<(String, axum::routing::MethodRouter)>,
        stores: Option<&Stores>,
    ) -> Result<App, ConfigError> {
        let mut problems = Vec::new();
        if !config.default_scenario.is_empty() && registry.get(&config.default_scenario).is_none() {
            problems.push(format!(
                "default_scenario {:?} is not registered (scenarios: {})",
                config.default_scenario,
                registry.listed()
            ));
        }
        let routes = router_of(routes, &mut problems);
        if !problems.is_empty() {
            return Err(ConfigError(problems));
        }
        // Unset, the only scenario serves the un-prefixed paths.
        let only = registry.names().next().filter(|_| registry.names().count() == 1).map(str::to_owned);
        let default_scenario = match config.default_scenario.as_str() {
            "" => only.as_deref(),
            name => Some(name),
        };
        metrics.start_at_zero(registry.names());
        let cache = cache_of(config, &metrics, stores)?;
        let admission = Admission::new(config.max_in_flight, config.priority_reserve);
        let limits = config.dispatch_limits();
        let connection_metrics = ConnectionMetrics::register(metrics.registry());
        let authenticator = auth::authenticator(&config.auth, metrics.registry())
            .map_err(|problem| ConfigError(vec![format!("auth: {problem}")]))?;
        let dispatcher = Dispatcher::new(registry, default_scenario, limits, cache, admission, metrics)
            .with_authenticator(authenticator);
        Ok(App {
            dispatcher,
            body_limit: config.body_limit,
            shutdown_delay: Duration::from_millis(config.shutdown_delay_ms),
            drain_timeout: Duration::from_millis(config.drain_timeout_ms),
            budgets: config.budgets(),
            connection_limits: config.connection_limits(),
            connection_metrics,
            lane_paths: Vec::new(),
            draining: AtomicBool::new(false),
            shutdown: Shutdown::new(),
            routes,
            gate: Gate::default(),
        })
    }

    /// The same state, asking `authenticator` about every call before
    /// anything else is done for it (by default, the one `[auth]` chooses).
    pub fn with_authenticator(mut self, authenticator: Arc<dyn Authenticator>) -> App {
        self.gate.bind(authenticator.clone());
        self.dispatcher = self.dispatcher.with_authenticator(authenticator);
        self
    }

    /// The state `serve` runs with: the scenarios `built` by
    /// [`crate::scenario::module::build_all`], their routes, and the paths
    /// of those registered for the stream lane
    /// ([`crate::scenario::Setup::route_in_lane`]).
    pub fn from_built(config: &Config, built: Built, metrics: ServerMetrics) -> Result<App, ConfigError> {
        let unsortable: Vec<String> = built.lane.iter().filter_map(|path| lane_problem(path)).collect();
        if !unsortable.is_empty() {
            return Err(ConfigError(unsortable));
        }
        let mut app = App::build(config, built.registry, metrics, built.routes, Some(&built.stores))?;
        app.lane_paths = built.lane;
        built.gate.bind(app.dispatcher.authenticator().clone());
        app.gate = built.gate;
        if !config.store.url.is_empty() {
            for key in &built.local_keys {
                tracing::warn!(
                    key,
                    "replicas share a store, but this key was made at start: what it signs opens nothing on \
                     another replica; set the same key on every replica"
                );
            }
        }
        Ok(app)
    }

    /// Whether shutdown has started (`/readyz` answers 503 then).
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Fires when shutdown starts: what long-lived responses end on.
    pub fn shutdown(&self) -> &Shutdown {
        &self.shutdown
    }

    /// The routes scenarios registered, for the server's router.
    pub fn routes(&self) -> &axum::Router {
        &self.routes
    }

    /// Marks the start of shutdown and ends long-lived responses.
    pub(crate) fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
        self.shutdown.fire();
    }
}

/// Why the stream lane cannot take `path`, if it cannot: a connection is
/// sorted into the lane by the literal start of a lane route's path (up to
/// its first `{`), which must hold a whole first segment, or every `GET`
/// it starts (`/healthz`, `/metrics`, …) would be served there, at the
/// lane's lower priority.
fn lane_problem(path: &str) -> Option<String> {
    let literal = path.split('{').next().unwrap_or_default();
    let rest = literal.strip_prefix('/').unwrap_or(literal);
    let whole = match rest.split_once('/') {
        Some((first, _)) => !first.is_empty(),
        None => !rest.is_empty() && !path.contains('{'),
    };
    (!whole).then(|| {
        format!(
            "stream lane route {path:?} must begin with a whole literal segment (as /events/{{id}} does): its \
             connections are told apart by the start of the path, and {literal:?} would take others"
        )
    })
}

/// One router of `routes`. What axum would panic on at start-up (a path
/// without its leading '/', one taken twice, one of the server's own, one
/// in another syntax than axum's, two that match the same requests) is a
/// configuration error instead.
fn router_of(routes: Vec<(String, axum::routing::MethodRouter)>, problems: &mut Vec<String>) -> axum::Router {
    let mut seen = BTreeSet::new();
    let mut router = axum::Router::new();
    for (path, route) in routes {
        if !path.starts_with('/') {
            problems.push(format!("route {path:?} does not start with '/'"));
        } else if SERVER_PATHS.contains(&path.as_str()) {
            problems.push(format!("route {path:?} is the server's own"));
        } else if !seen.insert(path.clone()) {
            problems.push(format!("route {path:?} is registered twice"));
        } else {
            // axum checks the rest (`/:id` of its older syntax, an unclosed
            // `{`, `/{id}` beside `/{name}`) only by panicking: taken as
            // its word. The router is left as it was before the route.
            let added = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| router.clone().route(&path, route)));
            match added {
                Ok(added) => router = added,
                Err(panic) => {
                    let why = crate::rules::logging::panics::message(&*panic);
                    problems.push(format!("route {path:?}: {}", crate::text::clip(why, 300)));
                }
            }
        }
    }
    router
}

/// The idempotency cache over the store `[store]` names: this process's
/// memory, or Redis with that memory behind it, over the connections of
/// `stores` when they are the server's Redis already.
fn cache_of(
    config: &Config,
    metrics: &ServerMetrics,
    stores: Option<&Stores>,
) -> Result<IdempotencyCache, ConfigError> {
    let counters = CacheCounters::default();
    let limits = config.cache_limits();
    let local = MemoryStore::new(limits, counters.evictions_by_handler());
    let own;
    let stores = match stores {
        Some(stores) if stores.is_shared() => stores,
        _ => {
            own = Stores::of(&config.store, metrics.registry()).map_err(|problem| ConfigError(vec![problem]))?;
            &own
        }
    };
    Ok(match stores.for_cache(local, &limits, config.store.commit_fallback) {
        CacheStore::Memory(local) => IdempotencyCache::in_memory(local, counters),
        CacheStore::Shared(shared) => {
            let background = shared.background().clone();
            IdempotencyCache::with_store(shared, counters).with_background(background)
        }
    })
}

#[cfg(test)]
mod tests {
    use axum::routing::get;

    use super::*;
    use crate::scenario::registry::tests::Nop;

    #[test]
    fn a_lane_route_must_begin_with_a_whole_segment() {
        for good in ["/llm/stream/{id}", "/events/{id}", "/events", "/a/b{id}"] {
            assert_eq!(lane_problem(good), None, "{good}");
        }
        // `/{id}/events` would send every GET to the lane; `/e{id}`, `GET /echo…`.
        for bad in ["/{id}/events", "/", "/e{id}", "//{id}", "{id}"] {
            let problem = lane_problem(bad).unwrap_or_else(|| panic!("{bad} refused"));
            assert!(problem.contains("whole literal segment"), "{problem}");
        }
    }

    #[test]
    fn routes_axum_would_panic_on_are_configuration_errors() {
        let mut registry = Registry::new();
        registry.register("demo", Arc::new(Nop)).unwrap();
        let route = || get(|| async { "" });
        let paths = ["/a", "b", "/metrics", "/a", "/c/{id}", "/c/{name}", "/d/:id", "/e/{id"];
        let routes = paths.map(|path| (path.to_owned(), route()));
        let error = App::with_routes(&Config::default(), registry, ServerMetrics::new(), routes.into()).unwrap_err();
        assert_eq!(
            error.0[..3],
            [
                r#"route "b" does not start with '/'"#,
                r#"route "/metrics" is the server's own"#,
                r#"route "/a" is registered twice"#
            ]
        );
        let axum_s: Vec<&str> = error.0[3..].iter().map(|problem| problem.split(": ").next().unwrap()).collect();
        assert_eq!(axum_s, [r#"route "/c/{name}""#, r#"route "/d/:id""#, r#"route "/e/{id""#], "{:?}", error.0);
    }
}
