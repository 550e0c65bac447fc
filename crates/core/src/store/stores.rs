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

use std::sync::Arc;

use super::{
    CommitFallback, FlightStore, Journal, MemoryStore, RedisLink, RedisStore, SharedStore, StoreError, StoreHealth,
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

/// The idempotency cache's store, as [`Stores::for_cache`] makes it.
#[derive(Debug)]
pub enum CacheStore {
    /// This process's memory.
    Memory(Arc<MemoryStore>),
    /// The server's Redis, with this process's memory behind it.
    Shared(Arc<SharedStore>),
}

/// What scenario stores are built over: this process's memory, or the
/// server's Redis, one link and one health for all of them.
#[derive(Debug, Clone, Default)]
pub struct Stores {
    redis: Option<Redis>,
}

#[derive(Debug, Clone)]
struct Redis {
    health: Arc<StoreHealth>,
    prefix: String,
}

impl Stores {
    /// Stores in this process's memory only.
    pub fn memory() -> Stores {
        Stores::default()
    }

    /// The stores `config` names; with a shared store, its metrics are
    /// registered in `registry` (once per server: the idempotency cache
    /// built by [`App::from_built`](crate::server::App::from_built) counts in
    /// them too, over the same connections).
    pub fn of(config: &StoreConfig, registry: &prometheus::Registry) -> Result<Stores, String> {
        let Some(url) = config.url()? else { return Ok(Stores::memory()) };
        let link = RedisLink::new(&url, &config.prefix, config.timeout(), config.connections)
            .map_err(|e| format!("store.url: {e}"))?;
        let health = StoreHealth::new(Arc::new(link), StoreMetrics::register(registry), config.commit_fallback);
        Ok(Stores { redis: Some(Redis { health, prefix: config.prefix.clone() }) })
    }

    /// Whether replicas share these stores (`[store] url` is set).
    pub fn is_shared(&self) -> bool {
        self.redis.is_some()
    }

    /// The idempotency cache's store: `local` alone, or the server's Redis
    /// (its keys right under the prefix, `limits`' TTLs) with `local` behind
    /// it, `/commit` and `/apply` doing `commit_fallback` while Redis is down.
    pub fn for_cache(&self, local: MemoryStore, limits: &Limits, commit_fallback: CommitFallback) -> CacheStore {
        match &self.redis {
            None => CacheStore::Memory(Arc::new(local)),
            Some(redis) => {
                CacheStore::Shared(Arc::new(redis.shared(redis.prefix.clone(), local, limits, commit_fallback)))
            }
        }
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
        let prefix = format!("{}:{namespace}", redis.prefix);
        // A scenario's own work has no side effect a fallback could repeat.
        let store = Arc::new(redis.shared(prefix, local, &limits, CommitFallback::Local));
        Ok(ScenarioStore { flights: store.clone(), journal: store, shared: true })
    }
}

impl Redis {
    fn shared(&self, prefix: String, local: MemoryStore, limits: &Limits, fallback: CommitFallback) -> SharedStore {
        let redis = RedisStore::over(self.health.link().clone(), prefix, limits.ttl, limits.commit_ttl);
        SharedStore::new(redis, local, fallback, self.health.clone())
    }
}
