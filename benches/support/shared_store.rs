//! The load benchmark's shared-store rows: a second server over a local
//! `redis-server` this bench starts, driven as the memory-store one is, with
//! the round trips to Redis per call counted from Redis's own
//! `INFO commandstats`.

use std::collections::BTreeMap;

use crate::{
    drive::{Outcome, Settings, drive, fresh_ids, replayed_ids},
    ours,
    process::Server,
    redis_server::RedisServer,
};

/// A server whose idempotency store is Redis, and that Redis.
pub struct SharedStoreLoad {
    redis: RedisServer,
    server: Server,
    /// Round trips and requests of each row, over its rounds.
    trips: BTreeMap<&'static str, (u64, u64)>,
}

impl SharedStoreLoad {
    /// Starts both, or says why not (no `redis-server`). Redis runs without
    /// persistence, or with an append-only file synced as `appendfsync`
    /// says.
    pub fn start(appendfsync: Option<&'static str>) -> Option<SharedStoreLoad> {
        let redis = RedisServer::start_with("the load bench's Redis rows", appendfsync)?;
        let server = ours(&["--store-url", &redis.url()]);
        Some(SharedStoreLoad { redis, server, trips: BTreeMap::new() })
    }

    pub async fn warm_up(&self, settings: &Settings) {
        let run = fresh_ids("poi_run_request", "TScenarioRunRequest");
        drive("warm-up", self.server.addr, "/demo/run", settings, run).await;
    }

    /// One round of both rows: fresh `/run`s, then `/commit` replays.
    pub async fn round(&mut self, settings: &Settings) -> [Outcome; 2] {
        let run = fresh_ids("poi_run_request", "TScenarioRunRequest");
        let fresh = self.row(FRESH, "/demo/run", settings, run).await;
        let replay = replayed_ids("video_commit_request", "TScenarioApplyRequest", 100);
        let replays = self.row(REPLAYS, "/demo/commit", settings, replay).await;
        [fresh, replays]
    }

    async fn row(
        &mut self,
        name: &'static str,
        path: &'static str,
        settings: &Settings,
        bodies: impl Fn(u32) -> Box<dyn FnMut(u64) -> bytes::Bytes + Send> + Send + Sync + 'static,
    ) -> Outcome {
        let before = self.round_trips();
        let outcome = self.server.measure(drive(name, self.server.addr, path, settings, bodies)).await;
        // Answers are stored after they go out: let the last ones land.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let trips = self.round_trips() - before;
        let entry = self.trips.entry(name).or_default();
        entry.0 += trips;
        entry.1 += outcome.requests;
        outcome
    }

    /// Commands the server sent so far. Redis counts the commands a script
    /// runs as well: the end script runs one `GET`, then a `SET` (or a `DEL`,
    /// the only one there is), and those are no round trips of their own.
    fn round_trips(&self) -> u64 {
        let stats: String = self.redis.query(redis::cmd("INFO").arg("commandstats"));
        let calls = |name: &str| -> u64 {
            stats
                .lines()
                .find_map(|line| line.strip_prefix(&format!("cmdstat_{name}:")))
                .and_then(|fields| fields.split(',').find_map(|f| f.strip_prefix("calls="))?.parse().ok())
                .unwrap_or(0)
        };
        let scripts = calls("evalsha") + calls("eval");
        let by_scripts = scripts + scripts.saturating_sub(calls("del"));
        scripts + (calls("get") + calls("set")).saturating_sub(by_scripts) + calls("ping")
    }

    /// The round trips per call of each row, and how the rows compare with
    /// the memory store's (`fresh` and `replays` of the same run).
    pub fn report(&self, rows: [&Outcome; 2], memory: [&Outcome; 2]) {
        let persistence =
            self.redis.appendfsync().map_or("persistence off".into(), |sync| format!("appendfsync {sync}"));
        println!("\nshared store (Redis on this machine, {persistence}), against the memory store in the same run:");
        for ((row, memory), name) in rows.iter().zip(memory).zip([FRESH, REPLAYS]) {
            let (trips, requests) = self.trips.get(name).copied().unwrap_or_default();
            println!(
                "  {name:<34} {:>5.2} round trips per call, {:>4.0} % of the memory store's req/s, p99 {:.2} ms (memory {:.2} ms)",
                trips as f64 / requests.max(1) as f64,
                100.0 * row.rps() / memory.rps(),
                row.latency.value_at_quantile(0.99) as f64 / 1000.0,
                memory.latency.value_at_quantile(0.99) as f64 / 1000.0,
            );
        }
    }
}

/// The rows' names.
pub const FRESH: &str = "http /demo/run, fresh, Redis";
pub const REPLAYS: &str = "http /demo/commit, replays, Redis";
