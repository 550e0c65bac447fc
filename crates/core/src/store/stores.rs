//! [`Stores`]: the server's `[store]`, handed to scenario modules
//! ([`Setup::stores`](crate::scenario::Setup::stores)), so that a scenario's
//! own single flights and journals are shared by replicas exactly when the
//! idempotency cache is.
//!
//! Without `[store] url`, a scenario's store is a [`MemoryStore`] with the
//! bounds the scenario gives. With it, it is a [`SharedStore`] over the
//! same Redis, its keys under `<prefix>:<namespace>:` (apart from the
//! cache's and from other scenarios' work), the same timeouts and
//! fallback, its commands counted in the same store metrics, and a memory
//! store with the scenario's bounds behind it.

use std::{sync::Arc, time::Duration};

use super::{
    CommitFallback, FlightStore, Journal, MemoryStore, RedisOptions, RedisStore, SharedStore, StoreError, StoreUrl,
    memory::{Evictions, Limits},
    metrics::StoreMetrics,
};
use crate::config::StoreConfig;

/// One store of a scenario's, through both of its traits.
#[derive(Debug, Clone)]
pub struct ScenarioStore {
    /// Its single flights.
    pub flights: Arc<dyn FlightStore>,
    /// The journals of its entries.
    pub journal: Arc<dyn Journal>,
    /// Whether replicas share it (`[store] url` is set).
    pub shared: bool,
}

/// What scenario stores are built over: this process's memory, or the
/// server's Redis.
#[derive(Debug, Clone, Default)]
pub struct Stores {
    redis: Option<Arc<Redis>>,
}

#[derive(Debug)]
struct Redis {
    url: StoreUrl,
    prefix: String,
    timeout: Duration,
    connections: usize,
    metrics: StoreMetrics,
}

impl Stores {
    /// Stores in this process's memory only.
    pub fn memory() -> Stores {
        Stores::default()
    }

    /// The stores `config` names; with a shared store, its metrics are
    /// registered in `registry` (once per server: the idempotency cache
    /// built by [`App::from_built`](crate::server::App::from_built) counts in
    /// them too).
    pub fn of(config: &StoreConfig, registry: &prometheus::Registry) -> Result<Stores, String> {
        let Some(url) = config.url()? else { return Ok(Stores::memory()) };
        let metrics = StoreMetrics::register(registry);
        let redis = Redis {
            url,
            prefix: config.prefix.clone(),
            timeout: config.timeout(),
            connections: config.connections,
            metrics,
        };
        Ok(Stores { redis: Some(Arc::new(redis)) })
    }

    /// The store metrics the shared stores count in, when there are shared stores.
    pub fn metrics(&self) -> Option<&StoreMetrics> {
        self.redis.as_ref().map(|redis| &redis.metrics)
    }

    /// A store of the scenario's own, its keys in `namespace`, bounded in
    /// memory by `limits` (whose TTLs are also the shared store's), its
    /// evictions counted in `evictions`. Its `flights.start()` is the
    /// caller's, once a runtime runs.
    pub fn build(&self, namespace: &str, limits: Limits, evictions: Evictions) -> Result<ScenarioStore, StoreError> {
        let local = MemoryStore::new(limits, evictions);
        let Some(redis) = &self.redis else {
            let store = Arc::new(local);
            return Ok(ScenarioStore { flights: store.clone(), journal: store, shared: false });
        };
        let options = RedisOptions {
            url: redis.url.clone(),
            prefix: format!("{}:{namespace}", redis.prefix),
            ttl: limits.ttl,
            commit_ttl: limits.commit_ttl,
            timeout: redis.timeout,
            connections: redis.connections,
        };
        let address = redis.url.to_string();
        let shared = RedisStore::new(options)?;
        // A scenario's own work has no side effect a fallback could repeat.
        let store = Arc::new(SharedStore::new(shared, local, CommitFallback::Local, redis.metrics.clone(), address));
        Ok(ScenarioStore { flights: store.clone(), journal: store, shared: true })
    }
}
