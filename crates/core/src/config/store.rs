//! `[store]`: where the idempotency cache keeps its answers. Unset, this
//! process's memory; with a Redis URL, a store every replica shares.

use std::{fmt, time::Duration};

use serde::{Deserialize, Serialize};

use crate::{
    store::{CommitFallback, StoreUrl},
    text::redact_url,
};

/// `[store]`.
#[derive(Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// `redis://[user:password@]host:port[/db]` or `rediss://` (TLS). Empty:
    /// the memory of this process, shared with no other replica.
    pub url: String,
    /// Put before every key, so that several deployments can share one Redis.
    pub prefix: String,
    /// The longest one Redis command may take, in ms (a call's own deadline
    /// may cut it shorter).
    pub timeout_ms: u64,
    /// Connections to Redis, each multiplexing many calls.
    pub connections: usize,
    /// While Redis is unavailable, `/commit` and `/apply` are `refuse`d
    /// (answered `unavailable`), or run on this replica's memory (`local`:
    /// a retry on another replica may then run the side effect again).
    pub commit_fallback: CommitFallback,
}

impl Default for StoreConfig {
    fn default() -> StoreConfig {
        StoreConfig {
            url: String::new(),
            prefix: "megamind".into(),
            // Tens of round trips to a Redis next door, a fifteenth of the 300 ms budget.
            timeout_ms: 20,
            // One multiplexed connection pipelines every call's commands: on
            // two cores it served 3-8 % more calls than 2 or 4, at a lower p99.
            connections: 1,
            commit_fallback: CommitFallback::Refuse,
        }
    }
}

/// The URL's password never shows, not even in a debug print of the config.
impl fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreConfig")
            .field("url", &redact_url(&self.url))
            .field("prefix", &self.prefix)
            .field("timeout_ms", &self.timeout_ms)
            .field("connections", &self.connections)
            .field("commit_fallback", &self.commit_fallback)
            .finish()
    }
}

impl StoreConfig {
    /// The checked URL, when one is set.
    pub fn url(&self) -> Result<Option<StoreUrl>, String> {
        if self.url.is_empty() {
            return Ok(None);
        }
        StoreUrl::parse(&self.url).map(Some).map_err(|reason| format!("store.url: {reason}"))
    }

    /// The problems of this table, one line each.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Err(problem) = self.url() {
            problems.push(problem);
        }
        // A colon would let one deployment's prefix end where another's
        // namespace begins (`megamind:calls` against `megamind`'s `calls`).
        if self.prefix.is_empty() || self.prefix.contains(['{', '}', ':']) || self.prefix.contains(char::is_whitespace)
        {
            problems.push(format!(
                "store.prefix = {:?}: must be non-empty, without braces, colons or white space \
                 (a colon would let two deployments' keys meet)",
                self.prefix
            ));
        }
        if !(1..=1_000).contains(&self.timeout_ms) {
            problems.push(format!("store.timeout_ms = {}: must be 1..=1000", self.timeout_ms));
        }
        if !(1..=64).contains(&self.connections) {
            problems.push(format!("store.connections = {}: must be 1..=64", self.connections));
        }
        problems
    }

    /// The longest one command may take.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
}
