//! The server's shared state: the dispatcher and the limits every
//! connection applies, built once from the configuration and shared by the
//! transports and the accept loop behind one `Arc`.
//!
//! Transports and the server both import this module; it imports neither.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use crate::{
    config::{Config, ConfigError},
    dispatch::{Authenticator, Dispatcher},
    rules::{
        budget::Budgets,
        connections::ConnectionLimits,
        idempotency::IdempotencyCache,
        metrics::{ConnectionMetrics, ServerMetrics},
        overload::Admission,
    },
    scenario::Registry,
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
    draining: AtomicBool,
}

impl App {
    /// Builds the server state for `config` over the scenarios of `registry`.
    pub fn new(config: &Config, registry: Registry) -> Result<App, ConfigError> {
        App::with_metrics(config, registry, ServerMetrics::new())
    }

    /// As [`App::new`], recording into `metrics` (whose registry the
    /// scenarios may already have registered their own collectors in).
    pub fn with_metrics(config: &Config, registry: Registry, metrics: ServerMetrics) -> Result<App, ConfigError> {
        if registry.get(&config.default_scenario).is_none() {
            return Err(ConfigError(vec![format!(
                "default_scenario {:?} is not registered (scenarios: {})",
                config.default_scenario,
                registry.listed()
            )]));
        }
        let cache = IdempotencyCache::new(config.cache_limits());
        let admission = Admission::new(config.max_in_flight, config.priority_reserve);
        let limits = config.dispatch_limits();
        let connection_metrics = ConnectionMetrics::register(metrics.registry());
        let dispatcher = Dispatcher::new(registry, Some(&config.default_scenario), limits, cache, admission, metrics);
        Ok(App {
            dispatcher,
            body_limit: config.body_limit,
            shutdown_delay: Duration::from_millis(config.shutdown_delay_ms),
            drain_timeout: Duration::from_millis(config.drain_timeout_ms),
            budgets: config.budgets(),
            connection_limits: config.connection_limits(),
            connection_metrics,
            draining: AtomicBool::new(false),
        })
    }

    /// The same state, asking `authenticator` about every call before
    /// anything else is done for it (by default every caller is let in).
    pub fn with_authenticator(mut self, authenticator: Arc<dyn Authenticator>) -> App {
        self.dispatcher = self.dispatcher.with_authenticator(authenticator);
        self
    }

    /// Whether shutdown has started (`/readyz` answers 503 then).
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Marks the start of shutdown.
    pub(crate) fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }
}
