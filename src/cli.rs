//! The command line: `serve` runs the server, `convert` turns protocol
//! messages between binary, JSON and text format.

use std::{
    io::{Read, Write},
    path::PathBuf,
    sync::Arc,
};

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use crate::{
    codec::{self, Format},
    config::{Config, ListenAddr},
    rules::{logging, metrics::ServerMetrics},
    scenarios::{self, assistant::config::Secret},
    server::{self, App},
};

/// A Megamind scenario server: hosts scenarios behind the dialog orchestrator.
#[derive(Debug, Parser)]
#[command(name = "megamind-scenario", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server (defaults embedded; a TOML file, flags and environment override them).
    Serve(Box<ServeArgs>),
    /// Convert one protocol message between binary, JSON and text format (stdin to stdout).
    Convert(ConvertArgs),
}

/// `serve`: every flag also reads the environment variable shown and
/// overrides the same key of the TOML file.
#[derive(Debug, Args, Default)]
pub struct ServeArgs {
    /// TOML configuration file; keys as the flags below (`--llm-*` in `[assistant]` without the prefix), with
    /// `[budget]`, `[cache]` and `[assistant]` tables; `[assistant] extra_body` is set only here.
    #[arg(long, env = "MEGAMIND_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address to listen on, HTTP/1.1 and h2c: host:port, the host an IP or a name [default: 127.0.0.1:8080].
    #[arg(long, env = "MEGAMIND_ADDR")]
    pub addr: Option<ListenAddr>,
    /// A second address serving gRPC only (gRPC is served on `--addr` as well) [default: none].
    #[arg(long, env = "MEGAMIND_GRPC_ADDR")]
    pub grpc_addr: Option<ListenAddr>,
    /// Scenario behind `POST /run` and the other un-prefixed paths [default: demo].
    #[arg(long, env = "MEGAMIND_DEFAULT_SCENARIO")]
    pub default_scenario: Option<String>,
    /// Largest request body in bytes; larger ones get 413 [default: 4194304].
    #[arg(long, env = "MEGAMIND_BODY_LIMIT")]
    pub body_limit: Option<usize>,
    /// Log filter: info, debug (adds redacted request and answer bodies), or tracing directives [default: info].
    #[arg(long, env = "MEGAMIND_LOG_LEVEL")]
    pub log_level: Option<String>,
    /// Budget of every handler in ms; `--*-budget-ms` set one handler [default: 300].
    #[arg(long, env = "MEGAMIND_BUDGET_MS")]
    pub budget_ms: Option<u64>,
    /// Budget of `/run` in ms.
    #[arg(long, env = "MEGAMIND_RUN_BUDGET_MS")]
    pub run_budget_ms: Option<u64>,
    /// Budget of `/continue` in ms.
    #[arg(long, env = "MEGAMIND_CONTINUE_BUDGET_MS")]
    pub continue_budget_ms: Option<u64>,
    /// Budget of `/commit` in ms.
    #[arg(long, env = "MEGAMIND_COMMIT_BUDGET_MS")]
    pub commit_budget_ms: Option<u64>,
    /// Budget of `/apply` in ms.
    #[arg(long, env = "MEGAMIND_APPLY_BUDGET_MS")]
    pub apply_budget_ms: Option<u64>,
    /// Part of each budget kept for encoding and writing the answer, in ms [default: 10].
    #[arg(long, env = "MEGAMIND_BUDGET_RESERVE_MS")]
    pub budget_reserve_ms: Option<u64>,
    /// Idempotency cache: `/run` and `/continue` answers kept at most, the oldest evicted past it [default: 100000].
    #[arg(long, env = "MEGAMIND_CACHE_MAX_ENTRIES")]
    pub cache_max_entries: Option<usize>,
    /// Idempotency cache: bytes of `/run` and `/continue` answers kept at most [default: 16777216].
    #[arg(long, env = "MEGAMIND_CACHE_MAX_BYTES")]
    pub cache_max_bytes: Option<usize>,
    /// Idempotency cache: `/commit` and `/apply` answers kept at most, each for the whole TTL; past it new calls are
    /// answered `overloaded` [default: 100000].
    #[arg(long, env = "MEGAMIND_CACHE_COMMIT_MAX_ENTRIES")]
    pub cache_commit_max_entries: Option<usize>,
    /// Idempotency cache: bytes of `/commit` and `/apply` answers kept at most [default: 33554432].
    #[arg(long, env = "MEGAMIND_CACHE_COMMIT_MAX_BYTES")]
    pub cache_commit_max_bytes: Option<usize>,
    /// Idempotency cache: seconds an answer is replayed [default: 300].
    #[arg(long, env = "MEGAMIND_CACHE_TTL_SECS")]
    pub cache_ttl_secs: Option<u64>,
    /// Concurrent calls before `/run` gets 429 [default: 1024].
    #[arg(long, env = "MEGAMIND_MAX_IN_FLIGHT")]
    pub max_in_flight: Option<usize>,
    /// Extra concurrent calls kept for `/continue`, `/commit`, `/apply` [default: 256].
    #[arg(long, env = "MEGAMIND_PRIORITY_RESERVE")]
    pub priority_reserve: Option<usize>,
    /// After SIGTERM, how long `/readyz` answers 503 while the server still serves (answers say
    /// `Connection: close`), in ms [default: 5000].
    #[arg(long, env = "MEGAMIND_SHUTDOWN_DELAY_MS")]
    pub shutdown_delay_ms: Option<u64>,
    /// How long in-flight requests may finish once accepting stopped, in ms [default: 10000].
    #[arg(long, env = "MEGAMIND_DRAIN_TIMEOUT_MS")]
    pub drain_timeout_ms: Option<u64>,
    /// Connections open at once; past it new ones wait (lowered to fit `ulimit -n`) [default: 10000].
    #[arg(long, env = "MEGAMIND_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Time for a request head to arrive, from its first byte or the connection's opening, in ms [default: 10000].
    #[arg(long, env = "MEGAMIND_HEADER_TIMEOUT_MS")]
    pub header_timeout_ms: Option<u64>,
    /// A connection with no request in flight is closed after this, in ms [default: 75000].
    #[arg(long, env = "MEGAMIND_IDLE_TIMEOUT_MS")]
    pub idle_timeout_ms: Option<u64>,
    /// A connection whose answers the client does not read, no byte written for this long, is closed, in ms
    /// [default: 10000].
    #[arg(long, env = "MEGAMIND_SEND_TIMEOUT_MS")]
    pub send_timeout_ms: Option<u64>,
    /// HTTP/2 streams open at once on one connection [default: 32].
    #[arg(long, env = "MEGAMIND_H2_MAX_CONCURRENT_STREAMS")]
    pub h2_max_concurrent_streams: Option<u32>,
    /// Requests open at once server-wide, from their head until their answer is all handed over; past it a new
    /// HTTP/2 stream on a connection with a request open is refused (REFUSED_STREAM) [default: 4096].
    #[arg(long, env = "MEGAMIND_MAX_OPEN_REQUESTS")]
    pub max_open_requests: Option<usize>,
    /// HTTP/1.1 read buffer per connection, in bytes (at least 8192); a request head must fit in it, else 431
    /// [default: 8192].
    #[arg(long, env = "MEGAMIND_HTTP1_READ_BUFFER_BYTES")]
    pub http1_read_buffer_bytes: Option<usize>,
    /// How long work past its budget may go on in the background, in ms [default: 30000].
    #[arg(long, env = "MEGAMIND_DETACH_LIMIT_MS")]
    pub detach_limit_ms: Option<u64>,
    /// Assistant: OpenAI-compatible base URL, e.g. http://localhost:11434/v1; none runs the offline backend.
    #[arg(long, env = "MEGAMIND_LLM_BASE_URL", help_heading = "Assistant")]
    pub llm_base_url: Option<String>,
    /// Assistant: API key, sent as `Authorization: Bearer`; never logged.
    #[arg(long, env = "MEGAMIND_LLM_API_KEY", hide_env_values = true, help_heading = "Assistant")]
    pub llm_api_key: Option<Secret>,
    /// Assistant: the `model` of the request [default: default].
    #[arg(long, env = "MEGAMIND_LLM_MODEL", help_heading = "Assistant")]
    pub llm_model: Option<String>,
    /// Assistant: a file with the system prompt [default: built in].
    #[arg(long, env = "MEGAMIND_LLM_SYSTEM_PROMPT_FILE", help_heading = "Assistant")]
    pub llm_system_prompt_file: Option<PathBuf>,
    /// Assistant: stream the answer over SSE (true/false) [default: true].
    #[arg(long, env = "MEGAMIND_LLM_STREAM", help_heading = "Assistant")]
    pub llm_stream: Option<bool>,
    /// Assistant: how long `/run` waits for the model before handing over to `/continue`, in ms [default: 150].
    #[arg(long, env = "MEGAMIND_LLM_RUN_WAIT_MS", help_heading = "Assistant")]
    pub llm_run_wait_ms: Option<u64>,
    /// Assistant: a whole model call, retries included, in ms [default: 30000].
    #[arg(long, env = "MEGAMIND_LLM_CALL_TIMEOUT_MS", help_heading = "Assistant")]
    pub llm_call_timeout_ms: Option<u64>,
    /// Assistant: connecting to the model server, in ms [default: 2000].
    #[arg(long, env = "MEGAMIND_LLM_CONNECT_TIMEOUT_MS", help_heading = "Assistant")]
    pub llm_connect_timeout_ms: Option<u64>,
    /// Assistant: from the request to the first token, in ms [default: 15000].
    #[arg(long, env = "MEGAMIND_LLM_FIRST_TOKEN_TIMEOUT_MS", help_heading = "Assistant")]
    pub llm_first_token_timeout_ms: Option<u64>,
    /// Assistant: model calls in flight before `/run` declines [default: 256].
    #[arg(long, env = "MEGAMIND_LLM_MAX_IN_FLIGHT", help_heading = "Assistant")]
    pub llm_max_in_flight: Option<usize>,
    /// Assistant: seconds a finished answer is kept for `/continue` and the user's repeat [default: 120].
    #[arg(long, env = "MEGAMIND_LLM_RESULT_TTL_SECS", help_heading = "Assistant")]
    pub llm_result_ttl_secs: Option<u64>,
    /// Assistant: `temperature` of the model request [default: 0.3].
    #[arg(long, env = "MEGAMIND_LLM_TEMPERATURE", help_heading = "Assistant")]
    pub llm_temperature: Option<f64>,
    /// Assistant: `max_tokens` of the model request [default: 512].
    #[arg(long, env = "MEGAMIND_LLM_MAX_TOKENS", help_heading = "Assistant")]
    pub llm_max_tokens: Option<u32>,
    /// Assistant: kept before each handler's deadline for building the answer, in ms [default: 15].
    #[arg(long, env = "MEGAMIND_LLM_ANSWER_MARGIN_MS", help_heading = "Assistant")]
    pub llm_answer_margin_ms: Option<u64>,
    /// Assistant: retries after the first attempt (connection errors, 429, 5xx) [default: 2].
    #[arg(long, env = "MEGAMIND_LLM_MAX_RETRIES", help_heading = "Assistant")]
    pub llm_max_retries: Option<u32>,
    /// Assistant: the first retry's back-off, doubling per retry, in ms [default: 100].
    #[arg(long, env = "MEGAMIND_LLM_RETRY_BACKOFF_MS", help_heading = "Assistant")]
    pub llm_retry_backoff_ms: Option<u64>,
    /// Assistant: consecutive failures that open the circuit breaker [default: 5].
    #[arg(long, env = "MEGAMIND_LLM_BREAKER_FAILURES", help_heading = "Assistant")]
    pub llm_breaker_failures: Option<u32>,
    /// Assistant: how long the open breaker fails calls fast before one probe, in ms [default: 10000].
    #[arg(long, env = "MEGAMIND_LLM_BREAKER_COOLDOWN_MS", help_heading = "Assistant")]
    pub llm_breaker_cooldown_ms: Option<u64>,
    /// Assistant: finished answers kept at most [default: 10000].
    #[arg(long, env = "MEGAMIND_LLM_MAX_RETAINED", help_heading = "Assistant")]
    pub llm_max_retained: Option<usize>,
    /// Assistant: bytes of finished answers kept at most [default: 67108864].
    #[arg(long, env = "MEGAMIND_LLM_MAX_RETAINED_BYTES", help_heading = "Assistant")]
    pub llm_max_retained_bytes: Option<usize>,
    /// Assistant: dialog turns kept in the state [default: 6].
    #[arg(long, env = "MEGAMIND_LLM_HISTORY_TURNS", help_heading = "Assistant")]
    pub llm_history_turns: Option<usize>,
    /// Assistant: bytes of dialog turns kept in the state [default: 8192].
    #[arg(long, env = "MEGAMIND_LLM_HISTORY_MAX_BYTES", help_heading = "Assistant")]
    pub llm_history_max_bytes: Option<usize>,
    /// Assistant: spoken by `/continue` while the model is still thinking [default: built in].
    #[arg(long, env = "MEGAMIND_LLM_FALLBACK_TEXT", help_heading = "Assistant")]
    pub llm_fallback_text: Option<String>,
    /// Assistant: spoken when the model failed [default: built in].
    #[arg(long, env = "MEGAMIND_LLM_APOLOGY_TEXT", help_heading = "Assistant")]
    pub llm_apology_text: Option<String>,
}

impl ServeArgs {
    /// The configuration: defaults, then the file, then these flags; validated.
    pub fn load(&self) -> Result<Config, crate::config::ConfigError> {
        let mut config = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        self.apply(&mut config);
        config.validate()?;
        Ok(config)
    }

    fn apply(&self, c: &mut Config) {
        fn set<T: Clone>(target: &mut T, value: &Option<T>) {
            if let Some(value) = value {
                *target = value.clone();
            }
        }
        set(&mut c.addr, &self.addr);
        if self.grpc_addr.is_some() {
            c.grpc_addr.clone_from(&self.grpc_addr);
        }
        set(&mut c.default_scenario, &self.default_scenario);
        set(&mut c.body_limit, &self.body_limit);
        set(&mut c.log_level, &self.log_level);
        for budget in [&mut c.budget.run_ms, &mut c.budget.continue_ms, &mut c.budget.commit_ms, &mut c.budget.apply_ms]
        {
            set(budget, &self.budget_ms);
        }
        set(&mut c.budget.run_ms, &self.run_budget_ms);
        set(&mut c.budget.continue_ms, &self.continue_budget_ms);
        set(&mut c.budget.commit_ms, &self.commit_budget_ms);
        set(&mut c.budget.apply_ms, &self.apply_budget_ms);
        set(&mut c.budget.reserve_ms, &self.budget_reserve_ms);
        set(&mut c.cache.max_entries, &self.cache_max_entries);
        set(&mut c.cache.max_bytes, &self.cache_max_bytes);
        set(&mut c.cache.commit_max_entries, &self.cache_commit_max_entries);
        set(&mut c.cache.commit_max_bytes, &self.cache_commit_max_bytes);
        set(&mut c.cache.ttl_secs, &self.cache_ttl_secs);
        set(&mut c.max_in_flight, &self.max_in_flight);
        set(&mut c.priority_reserve, &self.priority_reserve);
        set(&mut c.shutdown_delay_ms, &self.shutdown_delay_ms);
        set(&mut c.drain_timeout_ms, &self.drain_timeout_ms);
        set(&mut c.detach_limit_ms, &self.detach_limit_ms);
        set(&mut c.max_connections, &self.max_connections);
        set(&mut c.header_timeout_ms, &self.header_timeout_ms);
        set(&mut c.idle_timeout_ms, &self.idle_timeout_ms);
        set(&mut c.send_timeout_ms, &self.send_timeout_ms);
        set(&mut c.h2_max_concurrent_streams, &self.h2_max_concurrent_streams);
        set(&mut c.max_open_requests, &self.max_open_requests);
        set(&mut c.http1_read_buffer_bytes, &self.http1_read_buffer_bytes);
        let a = &mut c.assistant;
        set(&mut a.base_url, &self.llm_base_url);
        set(&mut a.api_key, &self.llm_api_key);
        set(&mut a.model, &self.llm_model);
        if self.llm_system_prompt_file.is_some() {
            a.system_prompt_file.clone_from(&self.llm_system_prompt_file);
        }
        set(&mut a.stream, &self.llm_stream);
        set(&mut a.run_wait_ms, &self.llm_run_wait_ms);
        set(&mut a.call_timeout_ms, &self.llm_call_timeout_ms);
        set(&mut a.connect_timeout_ms, &self.llm_connect_timeout_ms);
        set(&mut a.first_token_timeout_ms, &self.llm_first_token_timeout_ms);
        set(&mut a.max_in_flight, &self.llm_max_in_flight);
        set(&mut a.result_ttl_secs, &self.llm_result_ttl_secs);
        set(&mut a.temperature, &self.llm_temperature);
        set(&mut a.max_tokens, &self.llm_max_tokens);
        set(&mut a.answer_margin_ms, &self.llm_answer_margin_ms);
        set(&mut a.max_retries, &self.llm_max_retries);
        set(&mut a.retry_backoff_ms, &self.llm_retry_backoff_ms);
        set(&mut a.breaker_failures, &self.llm_breaker_failures);
        set(&mut a.breaker_cooldown_ms, &self.llm_breaker_cooldown_ms);
        set(&mut a.max_retained, &self.llm_max_retained);
        set(&mut a.max_retained_bytes, &self.llm_max_retained_bytes);
        set(&mut a.history_turns, &self.llm_history_turns);
        set(&mut a.history_max_bytes, &self.llm_history_max_bytes);
        set(&mut a.fallback_text, &self.llm_fallback_text);
        set(&mut a.apology_text, &self.llm_apology_text);
    }
}

/// `convert`.
#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// Message type, short (`TScenarioRunRequest`) or full (`NAlice.NScenarios.TScenarioRunRequest`).
    #[arg(long = "type", short = 't')]
    pub message_type: String,
    /// Input format: binary, json or text.
    #[arg(long, value_parser = parse_format)]
    pub from: Format,
    /// Output format: binary, json or text.
    #[arg(long, value_parser = parse_format)]
    pub to: Format,
}

fn parse_format(name: &str) -> Result<Format, String> {
    Format::from_name(name).ok_or_else(|| format!("unknown format {name:?}: use binary, json or text"))
}

/// Runs the command line.
pub fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Serve(args) => serve(&args),
        Command::Convert(args) => convert(&args, std::io::stdin().lock(), std::io::stdout().lock()),
    }
}

fn serve(args: &ServeArgs) -> anyhow::Result<()> {
    let config = args.load()?;
    let _log_guard = logging::init(&config.log_level, std::io::stdout()).map_err(anyhow::Error::msg)?;
    // Scenarios register their own collectors in the registry /metrics renders.
    let metrics = ServerMetrics::new();
    let app = App::with_metrics(&config, scenarios::builtin(&config, metrics.registry())?, metrics)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    // Each connection is a file descriptor: allow as many as the system lets us.
    server::raise_open_files_limit();
    runtime.block_on(async {
        let listener = bind(&config.addr, "").await?;
        let grpc_only = match &config.grpc_addr {
            Some(addr) => Some(bind(addr, " (gRPC)").await?),
            None => None,
        };
        let scenarios = app.dispatcher.registry().listed();
        let grpc_addr = grpc_only.as_ref().map(tokio::net::TcpListener::local_addr).transpose()?;
        let grpc_addr = grpc_addr.map_or_else(|| "same".to_owned(), |addr| addr.to_string());
        let addr = listener.local_addr()?;
        tracing::info!(%addr, %grpc_addr, %scenarios, default = %config.default_scenario, "serving");
        let listeners = server::Listeners { main: listener, grpc_only };
        server::serve_all(listeners, Arc::new(app), server::shutdown_signal()).await?;
        tracing::info!("stopped");
        anyhow::Ok(())
    })
}

/// Binds `addr`, resolving a host name (the first of its addresses that binds).
async fn bind(addr: &ListenAddr, what: &str) -> anyhow::Result<tokio::net::TcpListener> {
    let resolved: Vec<_> = tokio::net::lookup_host((addr.host(), addr.port()))
        .await
        .with_context(|| format!("cannot listen on {addr}{what}: cannot resolve {:?}", addr.host()))?
        .collect();
    let listener = tokio::net::TcpListener::bind(&resolved[..]).await;
    listener.with_context(|| format!("cannot listen on {addr}{what}"))
}

/// An error and its causes on one line, each cause once: many errors
/// already quote their cause in their own message.
pub fn report(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain().map(ToString::to_string) {
        if line.contains(&cause) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&cause);
    }
    line
}

/// Reads one message from `input` and writes it to `output` in another format.
pub fn convert(args: &ConvertArgs, mut input: impl Read, mut output: impl Write) -> anyhow::Result<()> {
    let desc = codec::message_descriptor(&args.message_type)?;
    let mut body = Vec::new();
    input.read_to_end(&mut body).context("cannot read stdin")?;
    let message = codec::decode_dynamic(desc, &body, args.from)?;
    output.write_all(&codec::encode_dynamic(&message, args.to)?)?;
    output.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_the_file_and_all_budgets_at_once() {
        let args = ServeArgs { budget_ms: Some(500), commit_budget_ms: Some(900), ..Default::default() };
        let config = args.load().unwrap();
        assert_eq!(config.budget.run_ms, 500);
        assert_eq!(config.budget.commit_ms, 900);
    }

    #[test]
    fn cache_flags_set_the_commit_reserve() {
        let args =
            ServeArgs { cache_commit_max_entries: Some(10), cache_commit_max_bytes: Some(4096), ..Default::default() };
        let limits = args.load().unwrap().cache_limits();
        assert_eq!((limits.commit_max_entries, limits.commit_max_bytes), (10, 4096));
    }

    #[test]
    fn llm_flags_configure_the_assistant() {
        let args = ServeArgs {
            llm_base_url: Some("http://localhost:11434/v1".into()),
            llm_api_key: Some("sk-1".into()),
            llm_model: Some("qwen2.5".into()),
            llm_run_wait_ms: Some(120),
            ..Default::default()
        };
        let config = args.load().unwrap();
        assert_eq!(config.assistant.base_url, "http://localhost:11434/v1");
        assert_eq!(config.assistant.api_key.expose(), "sk-1");
        assert_eq!((config.assistant.model.as_str(), config.assistant.run_wait_ms), ("qwen2.5", 120));
        assert!(!format!("{args:?}").contains("sk-1"), "the key stays out of Debug output");
    }

    #[test]
    fn convert_round_trips_text_through_binary() {
        let text = "BaseRequest {\n  RequestId: \"r-1\"\n}\nInput {\n  Text {\n    Utterance: \"привет\"\n  }\n}\n";
        let to_binary =
            ConvertArgs { message_type: "TScenarioRunRequest".into(), from: Format::Text, to: Format::Binary };
        let mut binary = Vec::new();
        convert(&to_binary, text.as_bytes(), &mut binary).unwrap();
        let to_text =
            ConvertArgs { message_type: "TScenarioRunRequest".into(), from: Format::Binary, to: Format::Text };
        let mut back = Vec::new();
        convert(&to_text, &binary[..], &mut back).unwrap();
        assert_eq!(String::from_utf8(back).unwrap(), text);
    }

    #[test]
    fn host_names_are_accepted_and_resolved_at_bind_time() {
        let args = ServeArgs { addr: Some("localhost:0".parse().unwrap()), ..Default::default() };
        let config = args.load().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let listener = runtime.block_on(bind(&config.addr, "")).expect("localhost binds");
        assert!(listener.local_addr().unwrap().ip().is_loopback());
        let nowhere = "no-such-host.invalid:0".parse().unwrap();
        let error = report(&runtime.block_on(bind(&nowhere, "")).unwrap_err());
        assert!(error.contains("cannot listen on no-such-host.invalid:0: cannot resolve"), "{error}");
    }

    #[test]
    fn a_bare_word_log_level_is_refused_with_the_levels_named() {
        let args = ServeArgs { log_level: Some("verbose".into()), ..Default::default() };
        let error = args.load().unwrap_err().to_string();
        assert!(error.contains("\"verbose\" is not a level (trace, debug, info, warn, error, off)"), "{error}");
    }

    #[test]
    fn connection_flags_reach_the_configuration() {
        let args = ServeArgs { idle_timeout_ms: Some(500), max_connections: Some(7), ..Default::default() };
        let limits = args.load().unwrap().connection_limits();
        assert_eq!((limits.idle_timeout.as_millis(), limits.max_connections), (500, 7));
    }

    #[test]
    fn convert_errors_name_their_cause_once() {
        let args = ConvertArgs { message_type: "TScenarioRunRequest".into(), from: Format::Text, to: Format::Binary };
        let error = convert(&args, &b"BaseRequest {"[..], Vec::new()).unwrap_err();
        let line = report(&error);
        let cause = error.chain().last().unwrap().to_string();
        assert_eq!(line.matches(&cause).count(), 1, "{line}");
        assert!(line.starts_with("invalid text format"), "{line}");
    }

    #[test]
    fn convert_names_the_problem() {
        let args = ConvertArgs { message_type: "TNope".into(), from: Format::Text, to: Format::Binary };
        let error = convert(&args, &b""[..], Vec::new()).unwrap_err().to_string();
        assert!(error.contains("TNope"), "{error}");
    }
}
