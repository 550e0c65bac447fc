//! The flags of `serve`: the core's, each setting one key of the
//! configuration, and the scenarios' (see [`ScenarioModule::flags`]), each
//! setting one key of its scenario's table. Every flag reads an environment
//! variable when absent; help shows each default, taken from the defaults
//! themselves so that it is written once.

use clap::{Arg, ArgMatches, Command};
use megamind_core::{
    config::{Override, sources::lookup},
    scenario::{Flag, ScenarioModule},
};

/// The key of `--budget-ms`, which sets every handler's budget.
pub(super) const ALL_BUDGETS: &str = "budget.*";
const BUDGET_KEYS: [&str; 4] = ["budget.run_ms", "budget.continue_ms", "budget.commit_ms", "budget.apply_ms"];

/// The core's flags, in the order they apply (`--budget-ms` before one handler's).
pub(super) fn core() -> Vec<Flag> {
    vec![
    Flag::new("addr", "addr", "Address to listen on, HTTP/1.1 and h2c: host:port, the host an IP or a name")
        .env("MEGAMIND_ADDR"),
    Flag::new("grpc-addr", "grpc_addr", "A second address serving gRPC only (gRPC is served on --addr as well)")
        .env("MEGAMIND_GRPC_ADDR"),
    Flag::new("default-scenario", "default_scenario", "Scenario behind `POST /run` and the other un-prefixed paths")
        .env("MEGAMIND_DEFAULT_SCENARIO"),
    Flag::new("body-limit", "body_limit", "Largest request body in bytes; larger ones get 413")
        .env("MEGAMIND_BODY_LIMIT"),
    Flag::new(
        "log-level",
        "log_level",
        "Log filter: info, debug (adds redacted request and answer bodies), or tracing directives",
    )
    .env("MEGAMIND_LOG_LEVEL"),
    Flag::new("budget-ms", ALL_BUDGETS, "Budget of every handler in ms; `--*-budget-ms` set one handler")
        .env("MEGAMIND_BUDGET_MS"),
    Flag::new("run-budget-ms", "budget.run_ms", "Budget of `/run` in ms").env("MEGAMIND_RUN_BUDGET_MS"),
    Flag::new("continue-budget-ms", "budget.continue_ms", "Budget of `/continue` in ms")
        .env("MEGAMIND_CONTINUE_BUDGET_MS"),
    Flag::new("commit-budget-ms", "budget.commit_ms", "Budget of `/commit` in ms").env("MEGAMIND_COMMIT_BUDGET_MS"),
    Flag::new("apply-budget-ms", "budget.apply_ms", "Budget of `/apply` in ms").env("MEGAMIND_APPLY_BUDGET_MS"),
    Flag::new(
        "budget-reserve-ms",
        "budget.reserve_ms",
        "Part of each budget kept for encoding and writing the answer, in ms",
    )
    .env("MEGAMIND_BUDGET_RESERVE_MS"),
    Flag::new(
        "cache-max-entries",
        "cache.max_entries",
        "Idempotency cache: `/run` and `/continue` answers kept at most, the oldest evicted past it",
    )
    .env("MEGAMIND_CACHE_MAX_ENTRIES"),
    Flag::new(
        "cache-max-bytes",
        "cache.max_bytes",
        "Idempotency cache: bytes of `/run` and `/continue` answers kept at most",
    )
    .env("MEGAMIND_CACHE_MAX_BYTES"),
    Flag::new(
        "cache-commit-max-entries",
        "cache.commit_max_entries",
        "Idempotency cache: `/commit` and `/apply` answers kept at most, each for the whole TTL; past it new calls are \
         answered `overloaded`",
    )
    .env("MEGAMIND_CACHE_COMMIT_MAX_ENTRIES"),
    Flag::new(
        "cache-commit-max-bytes",
        "cache.commit_max_bytes",
        "Idempotency cache: bytes of `/commit` and `/apply` answers kept at most",
    )
    .env("MEGAMIND_CACHE_COMMIT_MAX_BYTES"),
    Flag::new("cache-ttl-secs", "cache.ttl_secs", "Idempotency cache: seconds a `/run` or `/continue` answer is replayed")
        .env("MEGAMIND_CACHE_TTL_SECS"),
    Flag::new(
        "cache-commit-ttl-secs",
        "cache.commit_ttl_secs",
        "Idempotency cache: seconds a `/commit` or `/apply` answer is replayed",
    )
    .env("MEGAMIND_CACHE_COMMIT_TTL_SECS"),
    Flag::new(
        "store-url",
        "store.url",
        "Redis every replica shares the idempotency cache in: redis://[user:password@]host:port[/db], rediss:// for \
         TLS; none: this process's memory",
    )
    .env("MEGAMIND_STORE_URL")
    .secret(),
    Flag::new("store-prefix", "store.prefix", "Put before every Redis key").env("MEGAMIND_STORE_PREFIX"),
    Flag::new("store-timeout-ms", "store.timeout_ms", "The longest one Redis command may take, in ms")
        .env("MEGAMIND_STORE_TIMEOUT_MS"),
    Flag::new("store-connections", "store.connections", "Connections to Redis, each multiplexing many calls")
        .env("MEGAMIND_STORE_CONNECTIONS"),
    Flag::new(
        "store-commit-fallback",
        "store.commit_fallback",
        "While Redis is unavailable, `/commit` and `/apply` are `refuse`d (answered `unavailable`) or run on this \
         replica's memory (`local`: a retry on another replica may run the side effect again)",
    )
    .env("MEGAMIND_STORE_COMMIT_FALLBACK"),
    Flag::new(
        "tvmtool-url",
        "auth.tvmtool_url",
        "tvmtool that checks callers' TVM tickets (http://localhost:18080); none: every caller is accepted \
         [also read: DEPLOY_TVM_TOOL_URL]",
    )
    .env("MEGAMIND_TVMTOOL_URL"),
    Flag::new(
        "tvmtool-token",
        "auth.tvmtool_token",
        "tvmtool's local token, sent as Authorization [also read: QLOUD_TVM_TOKEN]",
    )
    .env("TVMTOOL_LOCAL_AUTHTOKEN")
    .secret(),
    Flag::new("tvm-dst", "auth.tvm_dst", "This service as tvmtool knows it (alias or TVM id), sent as dst=")
        .env("MEGAMIND_TVM_DST"),
    Flag::new(
        "tvm-allowed-src",
        "auth.tvm_allowed_src",
        "TVM ids allowed to call, comma-separated (Megamind's testing and production ids by default)",
    )
    .env("MEGAMIND_TVM_ALLOWED_SRC"),
    Flag::new(
        "user-ticket",
        "auth.user_ticket",
        "X-Ya-User-Ticket: `off` (not read), `optional` (checked when sent) or `required`",
    )
    .env("MEGAMIND_USER_TICKET"),
    Flag::new("max-in-flight", "max_in_flight", "Concurrent calls before `/run` gets 429")
        .env("MEGAMIND_MAX_IN_FLIGHT"),
    Flag::new(
        "priority-reserve",
        "priority_reserve",
        "Extra concurrent calls kept for `/continue`, `/commit`, `/apply`",
    )
    .env("MEGAMIND_PRIORITY_RESERVE"),
    Flag::new(
        "shutdown-delay-ms",
        "shutdown_delay_ms",
        "After SIGTERM, how long `/readyz` answers 503 while the server still serves (answers say `Connection: \
         close`), in ms",
    )
    .env("MEGAMIND_SHUTDOWN_DELAY_MS"),
    Flag::new(
        "drain-timeout-ms",
        "drain_timeout_ms",
        "How long in-flight requests may finish once accepting stopped, in ms",
    )
    .env("MEGAMIND_DRAIN_TIMEOUT_MS"),
    Flag::new(
        "max-connections",
        "max_connections",
        "Connections open at once; past it new ones wait (lowered to fit `ulimit -n`)",
    )
    .env("MEGAMIND_MAX_CONNECTIONS"),
    Flag::new(
        "header-timeout-ms",
        "header_timeout_ms",
        "Time for a request head to arrive, from its first byte or the connection's opening, in ms",
    )
    .env("MEGAMIND_HEADER_TIMEOUT_MS"),
    Flag::new(
        "idle-timeout-ms",
        "idle_timeout_ms",
        "A connection with no request in flight is closed after this, in ms",
    )
    .env("MEGAMIND_IDLE_TIMEOUT_MS"),
    Flag::new(
        "send-timeout-ms",
        "send_timeout_ms",
        "A connection whose answers the client does not read, no byte written for this long, is closed, in ms",
    )
    .env("MEGAMIND_SEND_TIMEOUT_MS"),
    Flag::new(
        "h2-max-concurrent-streams",
        "h2_max_concurrent_streams",
        "HTTP/2 streams open at once on one connection",
    )
    .env("MEGAMIND_H2_MAX_CONCURRENT_STREAMS"),
    Flag::new(
        "max-open-requests",
        "max_open_requests",
        "Requests open at once server-wide, from their head until their answer is all handed over; past it a new \
         HTTP/2 stream on a connection with a request open is refused (REFUSED_STREAM)",
    )
    .env("MEGAMIND_MAX_OPEN_REQUESTS"),
    Flag::new(
        "http1-read-buffer-bytes",
        "http1_read_buffer_bytes",
        "HTTP/1.1 read buffer per connection, in bytes (at least 8192); a request head must fit in it, else 431 (an HTTP/2 \
         header list too, 16 KiB at the least)",
    )
    .env("MEGAMIND_HTTP1_READ_BUFFER_BYTES"),
    Flag::new(
        "worker-threads",
        "worker_threads",
        "Threads that serve calls, and as many for the stream lane; 0: one per CPU the process may use (its CPU \
         limit, else the machine's cores)",
    )
    .env("MEGAMIND_WORKER_THREADS"),
    Flag::new(
        "stream-lane",
        "stream_lane",
        "Serve connections opening with a `GET` of a long-lived route a scenario registered (a stream) on threads of \
         their own, below Megamind's calls in priority (true/false)",
    )
    .env("MEGAMIND_STREAM_LANE"),
    Flag::new("stream-lane-nice", "stream_lane_nice", "How much lower the stream lane's threads run: nice 0-19")
        .env("MEGAMIND_STREAM_LANE_NICE"),
    Flag::new("detach-limit-ms", "detach_limit_ms", "How long work past its budget may go on in the background, in ms")
        .env("MEGAMIND_DETACH_LIMIT_MS"),
    ]
}

/// A flag with the key it sets in the whole configuration and its help heading.
#[derive(Debug, Clone)]
pub(super) struct Bound {
    pub(super) flag: Flag,
    /// The key in the whole table: a scenario's keys under its name.
    pub(super) key: String,
    pub(super) heading: Option<String>,
}

/// The core's flags, then each scenario's.
pub(super) fn all(modules: &[Box<dyn ScenarioModule>]) -> Vec<Bound> {
    let core = core().into_iter().map(|flag| Bound { key: flag.key.to_string(), flag, heading: None });
    let scenarios = modules.iter().flat_map(|module| {
        let name = module.name();
        module.flags().into_iter().map(move |flag| Bound {
            key: format!("{name}.{}", flag.key),
            heading: Some(format!("Scenario {name}")),
            flag,
        })
    });
    core.chain(scenarios).collect()
}

/// The variable `--config` falls back to.
pub(super) const CONFIG_ENV: &str = "MEGAMIND_CONFIG";

/// Each flag or environment variable of `flags` named twice, among them or
/// with `serve`'s own arguments in `cli`, as a problem naming both owners.
pub(super) fn clashes(flags: &[Bound], cli: &Command) -> Vec<String> {
    let owner = |bound: &Bound| bound.heading.clone().unwrap_or_else(|| "the server".to_owned());
    let own = cli.find_subcommand("serve").into_iter().flat_map(Command::get_arguments);
    let mut longs: std::collections::HashMap<String, String> =
        own.filter_map(|arg| Some((arg.get_long()?.to_owned(), "serve itself".to_owned()))).collect();
    longs.insert("help".to_owned(), "serve itself".to_owned());
    // Read by `serve` itself, not through a flag of the list.
    let mut envs: std::collections::HashMap<String, String> =
        [(CONFIG_ENV.to_owned(), "serve itself".to_owned())].into();
    let mut problems = Vec::new();
    for bound in flags {
        let who = owner(bound);
        if let Some(first) = longs.insert(bound.flag.long.to_string(), who.clone()) {
            problems.push(format!("--{}: a flag of {first} and of {who}; rename one", bound.flag.long));
        }
        if let Some(env) = &bound.flag.env
            && let Some(first) = envs.insert(env.to_string(), who.clone())
        {
            problems.push(format!("{env}: the variable of a flag of {first} and of {who}; rename one"));
        }
    }
    problems
}

/// `serve` with every flag added, its default (from `defaults`) in its help.
pub(super) fn add_to(serve: Command, flags: &[Bound], defaults: &toml::Table) -> Command {
    let args = flags.iter().map(|bound| {
        let Flag { long, env, help, .. } = &bound.flag;
        let key = if bound.key == ALL_BUDGETS { BUDGET_KEYS[0] } else { &bound.key };
        let default = match lookup(defaults, key) {
            Some(toml::Value::String(text)) if text.is_empty() => "none".to_owned(),
            Some(toml::Value::String(text)) => text.clone(),
            Some(value) => value.to_string(),
            None => "none".to_owned(),
        };
        let env = env.as_ref().map(|env| format!(" [env: {env}]")).unwrap_or_default();
        let long = long.to_string();
        // `--budget-ms -5` is a value, for the configuration to refuse with its reason.
        let arg = Arg::new(long.clone()).long(long).value_name("VALUE").allow_negative_numbers(true);
        let mut arg = arg.help(format!("{help} [default: {default}]{env}"));
        if let Some(heading) = &bound.heading {
            arg = arg.help_heading(heading.clone());
        }
        arg
    });
    serve.args(args)
}

/// What the flags and their environment variables set, environment first
/// so that a flag wins over its variable.
pub(super) fn overrides(
    flags: &[Bound],
    matches: Option<&ArgMatches>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<Override> {
    let from_env = flags.iter().filter_map(|bound| {
        let name = bound.flag.env.as_deref()?;
        env(name).map(|value| (bound, value, name.to_owned()))
    });
    let from_flags = flags.iter().filter_map(|bound| {
        let value = matches?.get_one::<String>(&bound.flag.long)?;
        Some((bound, value.clone(), format!("--{}", bound.flag.long)))
    });
    let mut overrides = Vec::new();
    for (bound, value, origin) in from_env.collect::<Vec<_>>().into_iter().chain(from_flags) {
        let keys: Vec<&str> = if bound.key == ALL_BUDGETS { BUDGET_KEYS.to_vec() } else { vec![&bound.key] };
        for key in keys {
            overrides.push(Override { key: key.to_owned(), value: value.clone(), origin: origin.clone() });
        }
    }
    overrides
}

/// Keys whose values are never shown.
pub(super) fn secret_keys(flags: &[Bound]) -> Vec<String> {
    flags.iter().filter(|bound| bound.flag.secret).map(|bound| bound.key.clone()).collect()
}
