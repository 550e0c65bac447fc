//! Server configuration: embedded defaults, then a TOML file, then flags and
//! environment variables (see `serve --help`). Loaded once and validated as a
//! whole: every problem is reported together before the server starts.

use std::{path::Path, time::Duration};

use serde::Deserialize;

use crate::{
    dispatch::DispatchLimits,
    rules::{budget::Budgets, connections::ConnectionLimits, idempotency::Limits},
    scenarios::assistant::config::AssistantConfig,
};

mod listen;
mod log_filter;

pub use listen::ListenAddr;

/// The smallest HTTP/1.1 read buffer hyper accepts.
pub const MIN_HTTP1_READ_BUFFER: usize = 8192;

/// Everything `serve` can be told.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Where to listen (HTTP/1.1 and h2c on one port; gRPC too): `host:port`,
    /// the host an IP address or a name resolved when the server binds.
    pub addr: ListenAddr,
    /// A second address that serves gRPC only, when set.
    pub grpc_addr: Option<ListenAddr>,
    /// The scenario behind the un-prefixed paths (`POST /run`, ...).
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
    /// head accepted.
    pub http1_read_buffer_bytes: usize,
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
    /// The assistant scenario: model backend, timing, phrases.
    pub assistant: AssistantConfig,
}

/// `[budget]`: milliseconds per handler.
#[derive(Debug, Clone, PartialEq, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Deserialize)]
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
    /// Seconds an answer is replayed.
    pub ttl_secs: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            addr: ListenAddr::new("127.0.0.1", 8080),
            grpc_addr: None,
            default_scenario: "demo".into(),
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
            max_in_flight: 1024,
            priority_reserve: 256,
            detach_limit_ms: 30_000,
            budget: BudgetConfig::default(),
            cache: CacheConfig::default(),
            assistant: AssistantConfig::default(),
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
        }
    }
}

/// Why the configuration was refused: every problem found, one per line.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration:\n  - {}", .0.join("\n  - "))]
pub struct ConfigError(pub Vec<String>);

impl Config {
    /// Parses a TOML document over the defaults.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError(vec![e.to_string().trim_end().to_owned()]))
    }

    /// Reads and parses a TOML file.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(vec![format!("cannot read {}: {e}", path.display())]))?;
        Config::from_toml(&text).map_err(|ConfigError(errors)| {
            ConfigError(errors.into_iter().map(|e| format!("{}: {e}", path.display())).collect())
        })
    }

    /// Checks every value, reporting all problems at once.
    pub fn validate(&self) -> Result<(), ConfigError> {
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
            check(
                b.reserve_ms < ms,
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
        check(self.cache.ttl_secs > 0, "cache.ttl_secs must be above 0".into());
        check(!self.default_scenario.is_empty(), "default_scenario must name a scenario".into());
        for (name, ms) in [
            ("header_timeout_ms", self.header_timeout_ms),
            ("idle_timeout_ms", self.idle_timeout_ms),
            ("send_timeout_ms", self.send_timeout_ms),
        ] {
            check(ms > 0, format!("{name} must be above 0 ms"));
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
        if let Err(e) = log_filter::check(&self.log_level) {
            errors.push(format!("log_level {:?}: {e}", self.log_level));
        }
        self.assistant.validate(&mut errors);
        if errors.is_empty() { Ok(()) } else { Err(ConfigError(errors)) }
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_megamind_shaped() {
        let config = Config::default();
        config.validate().unwrap();
        assert_eq!(config.budgets().run, Duration::from_millis(300));
        assert_eq!(config.body_limit, 4 * 1024 * 1024);
    }

    #[test]
    fn toml_overrides_defaults() {
        let config =
            Config::from_toml("addr = \"0.0.0.0:9000\"\n[budget]\ncommit_ms = 800\n[cache]\nttl_secs = 5\n").unwrap();
        assert_eq!(config.addr.port(), 9000);
        assert_eq!(config.budgets().commit, Duration::from_millis(800));
        assert_eq!(config.budgets().run, Duration::from_millis(300));
        assert_eq!(config.cache_limits().ttl, Duration::from_secs(5));
        assert_eq!(config.cache_limits().commit_max_entries, Limits::default().commit_max_entries);
        let config = Config::from_toml("[cache]\ncommit_max_entries = 7\ncommit_max_bytes = 4096\n").unwrap();
        let limits = config.cache_limits();
        assert_eq!((limits.commit_max_entries, limits.commit_max_bytes), (7, 4096));
        assert_eq!(limits.max_entries, Limits::default().max_entries);
        assert_eq!(config.grpc_addr, None);
    }

    #[test]
    fn a_grpc_address_is_read_and_must_differ_from_the_main_one() {
        let config = Config::from_toml("grpc_addr = \"0.0.0.0:9090\"").unwrap();
        assert_eq!(config.grpc_addr.as_ref().map(|a| a.port()), Some(9090));
        config.validate().unwrap();
        let clash = Config { grpc_addr: Some(Config::default().addr), ..Config::default() };
        assert!(clash.validate().unwrap_err().to_string().contains("grpc_addr"), "same address refused");
        let clash = Config { grpc_addr: Some("127.0.0.1:8080".parse().unwrap()), ..Config::default() };
        assert!(clash.validate().unwrap_err().to_string().contains("grpc_addr"), "same address refused");
    }

    #[test]
    fn unknown_keys_and_bad_types_fail_with_the_key_named() {
        let error = Config::from_toml("adr = \"x\"").unwrap_err().to_string();
        assert!(error.contains("adr"), "{error}");
        let error = Config::from_toml("[budget]\nrun_ms = \"fast\"").unwrap_err().to_string();
        assert!(error.contains("run_ms"), "{error}");
    }

    #[test]
    fn every_problem_is_reported_together() {
        let mut config = Config::default();
        config.budget.run_ms = 0;
        config.max_in_flight = 0;
        config.log_level = "info,[".into();
        config.cache.commit_max_bytes = 0;
        let error = config.validate().unwrap_err();
        assert_eq!(error.0.len(), 5, "{error}");
        assert!(error.to_string().contains("cache.commit_max_bytes must be above 0"), "{error}");
        assert!(error.to_string().contains("budget.run_ms = 0"));
    }

    #[test]
    fn connection_limits_have_safe_defaults_and_are_read() {
        let limits = Config::default().connection_limits();
        assert!(limits.header_timeout <= Duration::from_secs(10));
        assert!(limits.idle_timeout > Duration::from_secs(60), "outlives a balancer's idle timeout");
        assert!(Config::default().shutdown_delay_ms > 0, "a rolling restart gives balancers time");
        let config =
            Config::from_toml("max_connections = 5\nheader_timeout_ms = 200\nh2_max_concurrent_streams = 4").unwrap();
        assert_eq!(config.connection_limits().max_connections, 5);
        assert_eq!(config.connection_limits().header_timeout, Duration::from_millis(200));
        assert_eq!(config.connection_limits().h2_max_concurrent_streams, 4);
        let zero = Config { send_timeout_ms: 0, max_connections: 0, ..Config::default() };
        let error = zero.validate().unwrap_err().to_string();
        assert!(error.contains("send_timeout_ms") && error.contains("max_connections"), "{error}");
        let config = Config::from_toml("max_open_requests = 7\nhttp1_read_buffer_bytes = 16384").unwrap();
        assert_eq!(config.connection_limits().max_open_requests, 7);
        assert_eq!(config.connection_limits().http1_read_buffer, 16384);
        let small = Config { max_open_requests: 0, http1_read_buffer_bytes: 4096, ..Config::default() };
        let error = small.validate().unwrap_err().to_string();
        assert!(error.contains("max_open_requests") && error.contains("http1_read_buffer_bytes = 4096"), "{error}");
    }

    #[test]
    fn a_host_name_is_a_valid_address() {
        let config = Config::from_toml("addr = \"localhost:9000\"").unwrap();
        assert_eq!((config.addr.to_string().as_str(), config.addr.port()), ("localhost:9000", 9000));
        config.validate().unwrap();
        let error = Config::from_toml("addr = \"localhost\"").unwrap_err().to_string();
        assert!(error.contains("host:port"), "{error}");
    }

    #[test]
    fn a_log_level_that_is_not_one_is_refused() {
        let config = Config { log_level: "verbose".into(), ..Config::default() };
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains("log_level \"verbose\"") && error.contains("debug"), "{error}");
        for good in ["info", "DEBUG", "warn,megamind_scenario::access=debug", "hyper=trace,info"] {
            Config { log_level: good.into(), ..Config::default() }.validate().unwrap();
        }
    }

    #[test]
    fn the_assistant_table_is_read_and_validated() {
        let config =
            Config::from_toml("[assistant]\nbase_url = \"http://llm:8000/v1\"\nmodel = \"qwen\"\nrun_wait_ms = 100\n")
                .unwrap();
        assert_eq!((config.assistant.base_url.as_str(), config.assistant.run_wait_ms), ("http://llm:8000/v1", 100));
        config.validate().unwrap();
        let error = Config::from_toml("[assistant]\nbase_ur = \"x\"").unwrap_err().to_string();
        assert!(error.contains("base_ur"), "{error}");
        let mut config = Config::default();
        config.assistant.base_url = "ftp://x".into();
        assert!(config.validate().unwrap_err().to_string().contains("assistant.base_url"));
    }
}
