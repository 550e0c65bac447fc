//! Server configuration: embedded defaults, then a TOML file, then
//! environment variables, flags and `--set key=value` (see `serve --help`).
//! Loaded once and validated as a whole: every problem is reported together
//! before the server starts, each with where it was set ([`Origins`]) and, for
//! a misspelt key, the key it was meant to be ([`problem::read`]).
//!
//! The core reads its own keys; each top-level table that is not the core's
//! (`[demo]`, ...) belongs to the scenario of that name, which reads and
//! checks it itself ([`crate::scenario::ScenarioModule`]).

use std::{
    collections::BTreeMap,
    fmt,
    num::NonZeroUsize,
    ops::{Deref, DerefMut},
    time::Duration,
};

use serde::{Deserialize, Serialize};

use crate::{
    dispatch::DispatchLimits,
    rules::{budget::Budgets, connections::ConnectionLimits, idempotency::Limits},
};

mod auth;
pub mod durations;
pub mod leaves;
mod listen;
mod log_filter;
pub mod origin;
pub mod problem;
pub mod sources;
mod store;

pub use auth::{AuthConfig, MEGAMIND_TVM_IDS, UserTicketPolicy};
pub use listen::ListenAddr;
pub use origin::Origins;
pub use problem::Problem;
pub use sources::{Override, Sources};
pub use store::StoreConfig;

pub use crate::text::HIDDEN;

/// Longest time an answer is kept for repeats: 30 days.
pub const MAX_TTL_SECS: u64 = 30 * 24 * 3600;

/// Longest connection timeout, and longest time work past its budget may
/// go on: a day.
pub const MAX_TIMEOUT_MS: u64 = 24 * 3600 * 1000;

/// Top-level tables that are the core's own, not a scenario's.
pub const CORE_TABLES: &[&str] = &["auth", "budget", "cache", "store"];

/// The smallest HTTP/1.1 read buffer hyper accepts.
pub const MIN_HTTP1_READ_BUFFER: usize = 8192;

/// The most worker threads a runtime may be given.
pub const MAX_WORKER_THREADS: usize = 1024;

/// Everything `serve` can be told.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Where to listen (HTTP/1.1 and h2c on one port; gRPC too): `host:port`,
    /// the host an IP address or a name resolved when the server binds.
    pub addr: ListenAddr,
    /// A second address that serves gRPC only, when set.
    pub grpc_addr: Option<ListenAddr>,
    /// The scenario behind the un-prefixed paths (`POST /run`, ...). Empty:
    /// the only scenario when one is registered, else none (those paths
    /// answer 404). The server binary sets its own default.
    pub default_scenario: String,
    /// Largest request body, in bytes.
    pub body_limit: usize,
    /// Log filter: `info`, `debug` (request and answer bodies), or directives.
    pub log_level: String,
    /// After SIGTERM, how long `/readyz` says 503 while still serving, in ms.
    pub shutdown_delay_ms: u64,
    /// How long in-flight requests may finish once accepting stopped, in ms.
    pub drain_timeout_ms: u64,
    /// Connections open at once; past it new ones wait in the listen backlog.
    pub max_connections: usize,
    /// From a connection's first byte of a request (or its opening) to the
    /// end of the request head, in ms.
    pub header_timeout_ms: u64,
    /// How long a connection with no request in flight stays open, in ms.
    pub idle_timeout_ms: u64,
    /// How long an answer may wait for the client to read it, with no byte
    /// written, before the connection is closed, in ms.
    pub send_timeout_ms: u64,
    /// HTTP/2 streams open at once on one connection.
    pub h2_max_concurrent_streams: u32,
    /// Requests open at once server-wide, from their head until their answer
    /// is all handed over; past it a new HTTP/2 stream on a connection with a
    /// request open is refused.
    pub max_open_requests: usize,
    /// The HTTP/1.1 read buffer of a connection, in bytes: the longest request
    /// head accepted (and the longest HTTP/2 header list, 16 KiB at the least).
    pub http1_read_buffer_bytes: usize,
    /// Threads that serve calls, and as many for the stream lane; 0: one per
    /// CPU the process may use (its cgroup's CPU limit, else the machine's
    /// cores). A pod with no CPU limit on a large node needs it set.
    pub worker_threads: usize,
    /// Serve connections that open with a `GET` of a long-lived route a
    /// scenario registered for the lane on threads of their own, at a lower
    /// OS priority than Megamind's calls.
    pub stream_lane: bool,
    /// How much lower (`nice`, 0-19) the stream lane's threads run.
    pub stream_lane_nice: u8,
    /// Concurrent calls before `/run` is refused with 429.
    pub max_in_flight: usize,
    /// Extra concurrent calls kept for `/continue`, `/commit` and `/apply`.
    pub priority_reserve: usize,
    /// How long work that overran its budget may go on in the background, in ms.
    pub detach_limit_ms: u64,
    /// Per-handler budgets.
    pub budget: BudgetConfig,
    /// The idempotency cache.
    pub cache: CacheConfig,
    /// Where the idempotency cache keeps its answers.
    pub store: StoreConfig,
    /// Who may call the scenarios.
    pub auth: AuthConfig,
    /// The scenarios' own tables by scenario name, as the defaults given to
    /// [`Sources`], the file, environment and flags set them: each scenario
    /// reads its own, over its defaults.
    #[serde(skip)]
    pub scenarios: ScenarioTables,
}

/// The scenarios' own tables by scenario name. A debug print names them
/// and no more: they hold the scenarios' secrets as set (a model's API
/// key, a signing key), which only the scenarios' own configurations know
/// to hide.
#[derive(Clone, Default, PartialEq)]
pub struct ScenarioTables(pub BTreeMap<String, toml::Table>);

impl Deref for ScenarioTables {
    type Target = BTreeMap<String, toml::Table>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for ScenarioTables {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl fmt::Debug for ScenarioTables {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

/// `[budget]`: milliseconds per handler.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetConfig {
    /// `/run`.
    pub run_ms: u64,
    /// `/continue`.
    pub continue_ms: u64,
    /// `/commit`.
    pub commit_ms: u64,
    /// `/apply`.
    pub apply_ms: u64,
    /// Kept back from each budget for encoding and writing the answer.
    pub reserve_ms: u64,
}

/// `[cache]`: the idempotency cache's bounds. `/run` and `/continue` answers
/// share `max_entries` and `max_bytes`, past which the oldest are evicted;
/// `/commit` and `/apply` answers have `commit_max_entries` and
/// `commit_max_bytes` of their own, and each stays for the whole TTL: past
/// those, new calls are answered `overloaded`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// `/run` and `/continue` answers kept at most.
    pub max_entries: usize,
    /// Bytes of `/run` and `/continue` answers kept at most.
    pub max_bytes: usize,
    /// `/commit` and `/apply` answers kept at most.
    pub commit_max_entries: usize,
    /// Bytes of `/commit` and `/apply` answers kept at most.
    pub commit_max_bytes: usize,
    /// Seconds a `/run` or `/continue` answer is replayed.
    pub ttl_secs: u64,
    /// Seconds a `/commit` or `/apply` answer is replayed: at least as long
    /// as Megamind may retry one.
    pub commit_ttl_secs: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            addr: ListenAddr::new("127.0.0.1", 8080),
            grpc_addr: None,
            // The binary that composes the scenarios names its own.
            default_scenario: String::new(),
            body_limit: 4 << 20,
            log_level: "info".into(),
            // Long enough for a load balancer to see `/readyz` fail and move
            // traffic away before connections are closed.
            shutdown_delay_ms: 5_000,
            drain_timeout_ms: 10_000,
            max_connections: 10_000,
            header_timeout_ms: 10_000,
            // Above the 60 s idle timeout of common load balancers, so that
            // they close an idle connection first and never send on one we close.
            idle_timeout_ms: 75_000,
            send_timeout_ms: 10_000,
            // What an HTTP/2 connection keeps per stream (its slot, the frames
            // received) grows to this and stays: with 100, 400 connections of a
            // client that reads nothing held 200 MiB, with 32 under 64 MiB.
            // Our answers take well under the 300 ms budget, so 32 at once per
            // connection is ample; clients wanting more open more connections.
            h2_max_concurrent_streams: 32,
            // An HTTP/2 client that reads no answer holds each of its streams
            // with the answer's bytes, about 2 KiB for a `/run`: 4096 stay
            // under 10 MiB. Clients that read their answers keep no more
            // open than run at once (`max_in_flight` + `priority_reserve`).
            max_open_requests: 4096,
            // hyper's smallest. A larger bound lets the buffer of every
            // connection that sent part of a head double to 16 KiB; 8 KiB is
            // also the usual head limit of proxies (nginx, Apache).
            http1_read_buffer_bytes: MIN_HTTP1_READ_BUFFER,
            // As many as the CPUs the process may use, as tokio sizes itself.
            worker_threads: 0,
            // Streams are best effort; `/run` has 300 ms. At 10 a lane
            // thread weighs about a tenth of a main one when both want a core.
            stream_lane: true,
            stream_lane_nice: 10,
            max_in_flight: 1024,
            priority_reserve: 256,
            detach_limit_ms: 30_000,
            budget: BudgetConfig::default(),
            cache: CacheConfig::default(),
            store: StoreConfig::default(),
            auth: AuthConfig::default(),
            scenarios: ScenarioTables::default(),
        }
    }
}

impl Default for BudgetConfig {
    fn default() -> BudgetConfig {
        BudgetConfig { run_ms: 300, continue_ms: 300, commit_ms: 300, apply_ms: 300, reserve_ms: 10 }
    }
}

impl Default for CacheConfig {
    fn default() -> CacheConfig {
        let limits = Limits::default();
        CacheConfig {
            max_entries: limits.max_entries,
            max_bytes: limits.max_bytes,
            commit_max_entries: limits.commit_max_entries,
            commit_max_bytes: limits.commit_max_bytes,
            ttl_secs: limits.ttl.as_secs(),
            commit_ttl_secs: limits.commit_ttl.as_secs(),
        }
    }
}

/// Why the configuration was refused: every problem found, one per line.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration:\n  - {}", .0.join("\n  - "))]
pub struct ConfigError(pub Vec<String>);

impl Config {
    /// Parses a TOML document over the core's defaults; its scenario tables
    /// are kept in [`Config::scenarios`] for their scenarios. A binary's own
    /// defaults (its `default_scenario`, its scenarios' tables) are not the
    /// core's to know: a binary loads through [`Sources::load`] over its
    /// defaults, as `serve` does.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let table: toml::Table =
            toml::from_str(text).map_err(|e| ConfigError(vec![sources::syntax_error("configuration", text, &e)]))?;
        Config::from_table(table)
    }

    /// Reads a whole configuration table: the core's keys, and any other
    /// top-level table as a scenario's.
    pub fn from_table(table: toml::Table) -> Result<Config, ConfigError> {
        match Config::read(table) {
            (config, problems) if problems.is_empty() => Ok(config),
            (_, problems) => Err(ConfigError(problems.into_iter().map(|problem| problem.message).collect())),
        }
    }

    /// Reads a whole configuration table as [`Config::from_table`] does, and
    /// every problem with the core's keys: the defaults stand in for the keys
    /// at fault, so that the others can still be checked.
    pub fn read(mut table: toml::Table) -> (Config, Vec<Problem>) {
        let scenario_names: Vec<String> = table
            .iter()
            .filter(|(key, value)| value.is_table() && !CORE_TABLES.contains(&key.as_str()))
            .map(|(key, _)| key.clone())
            .collect();
        let mut scenarios = BTreeMap::new();
        for name in scenario_names {
            if let Some(toml::Value::Table(own)) = table.remove(&name) {
                scenarios.insert(name, own);
            }
        }
        let defaults = Config::defaults_table();
        let (mut config, problems) = match problem::read::<Config>(&table, &defaults, "") {
            Ok(config) => (config, Vec::new()),
            Err(problems) => {
                for problem in &problems {
                    sources::remove(&mut table, &problem.key);
                }
                (problem::read::<Config>(&table, &defaults, "").unwrap_or_default(), problems)
            }
        };
        config.scenarios = ScenarioTables(scenarios);
        (config, problems)
    }

    /// The core's keys with their defaults, as a TOML table: the base that
    /// typed flag values and `--help` read.
    pub fn defaults_table() -> toml::Table {
        toml::Table::try_from(Config::default()).unwrap_or_default()
    }

    /// Checks every value, reporting all problems at once.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let problems = self.problems();
        if problems.is_empty() { Ok(()) } else { Err(ConfigError(problems)) }
    }

    /// Every value out of bounds, each message opening with its key.
    pub fn problems(&self) -> Vec<String> {
        let mut errors = Vec::new();
        let mut check = |ok: bool, message: String| {
            if !ok {
                errors.push(message);
            }
        };
        let b = &self.budget;
        for (name, ms) in
            [("run_ms", b.run_ms), ("continue_ms", b.continue_ms), ("commit_ms", b.commit_ms), ("apply_ms", b.apply_ms)]
        {
            check((1..=60_000).contains(&ms), format!("budget.{name} = {ms}: must be 1..=60000 ms"));
            // A budget out of bounds is one problem, not one more per reserve.
            check(
                b.reserve_ms < ms || !(1..=60_000).contains(&ms),
                format!("budget.reserve_ms = {}: must be below budget.{name} ({ms})", b.reserve_ms),
            );
        }
        if let Some(grpc) = &self.grpc_addr {
            // Port 0 binds two different ephemeral ports: not a clash.
            check(
                *grpc != self.addr || grpc.port() == 0,
                format!("grpc_addr = {grpc}: must differ from addr, which serves gRPC as well"),
            );
        }
        check(self.body_limit > 0, "body_limit must be above 0 bytes".into());
        check(self.max_in_flight > 0, "max_in_flight must be above 0".into());
        let c = &self.cache;
        for (name, value) in [
            ("max_entries", c.max_entries),
            ("max_bytes", c.max_bytes),
            ("commit_max_entries", c.commit_max_entries),
            ("commit_max_bytes", c.commit_max_bytes),
        ] {
            check(value > 0, format!("cache.{name} must be above 0"));
        }
        // Upper bounds too: a time past them is a slip (or a "forever"), and
        // the clock's arithmetic and Redis's `PX` have limits of their own.
        for (name, secs) in [("ttl_secs", self.cache.ttl_secs), ("commit_ttl_secs", self.cache.commit_ttl_secs)] {
            check((1..=MAX_TTL_SECS).contains(&secs), format!("cache.{name} = {secs}: must be 1..={MAX_TTL_SECS} s"));
        }
        for (name, ms) in [
            ("detach_limit_ms", self.detach_limit_ms),
            ("shutdown_delay_ms", self.shutdown_delay_ms),
            ("drain_timeout_ms", self.drain_timeout_ms),
        ] {
            check(ms <= MAX_TIMEOUT_MS, format!("{name} = {ms}: must be at most {MAX_TIMEOUT_MS} ms"));
        }
        let shortest = [b.run_ms, b.continue_ms, b.commit_ms, b.apply_ms].into_iter().min().unwrap_or_default();
        let auth =
            self.auth.problems().into_iter().chain(self.auth.budget_problems(shortest.saturating_sub(b.reserve_ms)));
        for problem in self.store.problems().into_iter().chain(auth) {
            check(false, problem);
        }
        for (name, ms) in [
            ("header_timeout_ms", self.header_timeout_ms),
            ("idle_timeout_ms", self.idle_timeout_ms),
            ("send_timeout_ms", self.send_timeout_ms),
        ] {
            check((1..=MAX_TIMEOUT_MS).contains(&ms), format!("{name} = {ms}: must be 1..={MAX_TIMEOUT_MS} ms"));
        }
        check(self.max_connections > 0, "max_connections must be above 0".into());
        check(self.h2_max_concurrent_streams > 0, "h2_max_concurrent_streams must be above 0".into());
        check(self.max_open_requests > 0, "max_open_requests must be above 0".into());
        check(
            self.http1_read_buffer_bytes >= MIN_HTTP1_READ_BUFFER,
            format!(
                "http1_read_buffer_bytes = {}: must be at least {MIN_HTTP1_READ_BUFFER}",
                self.http1_read_buffer_bytes
            ),
        );
        check(self.stream_lane_nice <= 19, format!("stream_lane_nice = {}: must be 0..=19", self.stream_lane_nice));
        check(
            self.worker_threads <= MAX_WORKER_THREADS,
            format!("worker_threads = {}: must be 0 (one per CPU) to {MAX_WORKER_THREADS}", self.worker_threads),
        );
        if let Err(e) = log_filter::check(&self.log_level) {
            errors.push(format!("log_level {:?}: {e}", self.log_level));
        }
        errors
    }

    /// The per-handler budgets.
    pub fn budgets(&self) -> Budgets {
        let ms = Duration::from_millis;
        let b = &self.budget;
        Budgets {
            run: ms(b.run_ms),
            r#continue: ms(b.continue_ms),
            commit: ms(b.commit_ms),
            apply: ms(b.apply_ms),
            reserve: ms(b.reserve_ms),
        }
    }

    /// The dispatcher's limits.
    pub fn dispatch_limits(&self) -> DispatchLimits {
        DispatchLimits { budgets: self.budgets(), detach_limit: Duration::from_millis(self.detach_limit_ms) }
    }

    /// The worker threads asked for; `None`: one per CPU the process may use.
    pub fn worker_threads(&self) -> Option<NonZeroUsize> {
        NonZeroUsize::new(self.worker_threads)
    }

    /// The limits on connections: count, timeouts, HTTP/2 streams.
    pub fn connection_limits(&self) -> ConnectionLimits {
        let ms = Duration::from_millis;
        ConnectionLimits {
            max_connections: self.max_connections,
            header_timeout: ms(self.header_timeout_ms),
            idle_timeout: ms(self.idle_timeout_ms),
            send_timeout: ms(self.send_timeout_ms),
            h2_max_concurrent_streams: self.h2_max_concurrent_streams,
            max_open_requests: self.max_open_requests,
            http1_read_buffer: self.http1_read_buffer_bytes,
            stream_lane_nice: self.stream_lane.then_some(self.stream_lane_nice),
        }
    }

    /// The idempotency cache's bounds.
    pub fn cache_limits(&self) -> Limits {
        Limits {
            max_entries: self.cache.max_entries,
            max_bytes: self.cache.max_bytes,
            commit_max_entries: self.cache.commit_max_entries,
            commit_max_bytes: self.cache.commit_max_bytes,
            ttl: Duration::from_secs(self.cache.ttl_secs),
            commit_ttl: Duration::from_secs(self.cache.commit_ttl_secs),
        }
    }
}

#[cfg(test)]
mod tests;
