//! What the stores' contract suites share: a Redis store's settings for a
//! test's own `redis-server`, and the macro that runs each contract
//! against the memory store and Redis.

use std::time::Duration;

use megamind_core::store::{RedisOptions, StoreUrl};

use super::redis_server::RedisServer;

/// Settings of a Redis store over `server`, its keys under `prefix`.
pub fn redis_options(server: &RedisServer, prefix: &str, ttl: Duration, commit_ttl: Duration) -> RedisOptions {
    RedisOptions {
        url: StoreUrl::parse(&server.url()).unwrap(),
        prefix: prefix.into(),
        ttl,
        commit_ttl,
        timeout: Duration::from_secs(1),
        connections: 2,
    }
}

/// Runs each contract `$name(store)` against `memory()` and, when
/// `redis-server` is there, `redis(&server)`, both of the including file.
#[macro_export]
macro_rules! against_every_store {
    ($suite:literal: $($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn memory() {
                super::$name(super::memory()).await;
            }

            #[tokio::test]
            async fn redis() {
                let Some(server) = super::RedisServer::start(concat!($suite, " ", stringify!($name))) else {
                    return;
                };
                super::$name(super::redis(&server)).await;
            }
        }
    )*};
}
