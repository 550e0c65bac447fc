//! The command line: `serve` runs the server, `convert` turns protocol
//! messages between binary, JSON and text format.

use std::{
    io::{Read, Write},
    path::PathBuf,
    sync::Arc,
};

use anyhow::Context;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::{
    codec::{self, Format},
    config::{Config, ConfigError, ListenAddr, Override, Sources},
    rules::{logging, metrics::ServerMetrics},
    scenario::{ScenarioModule, module},
    scenarios,
    server::{self, App},
};

pub mod flags;

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
    Serve(ServeArgs),
    /// Convert one protocol message between binary, JSON and text format (stdin to stdout).
    Convert(ConvertArgs),
}

/// `serve`: the flags below, plus the core's and each scenario's settings
/// (added when the command line is built: see [`flags`]).
#[derive(Debug, Args, Default)]
pub struct ServeArgs {
    /// TOML configuration file: the core's keys at the top level and in `[budget]` and `[cache]`, each scenario's
    /// in a table of its name (`[assistant]`); `--print-config` shows them all [env: MEGAMIND_CONFIG].
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Sets any key of the configuration, e.g. `--set cache.ttl_secs=60` or `--set assistant.model=qwen`; applied
    /// after the file, the environment and the flags. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Prints the configuration the server would run with (defaults, file, environment, flags; secrets hidden) as
    /// TOML, and exits.
    #[arg(long)]
    pub print_config: bool,
}

/// What `serve` runs with.
#[derive(Debug)]
pub struct Loaded {
    /// The core configuration, with the scenarios' tables as configured.
    pub config: Config,
    /// The scenarios to host.
    pub modules: Vec<Box<dyn ScenarioModule>>,
    /// Keys whose values are never shown.
    secret_keys: Vec<String>,
}

impl Loaded {
    /// The whole configuration as TOML, defaults included, secrets hidden.
    pub fn to_toml(&self) -> String {
        let mut table = toml::Table::try_from(&self.config).unwrap_or_default();
        for module in &self.modules {
            let own = module::table_of(&**module, self.config.scenarios.get(module.name()));
            table.insert(module.name().to_owned(), toml::Value::Table(own));
        }
        for key in &self.secret_keys {
            hide(&mut table, key);
        }
        toml::to_string(&table).unwrap_or_default()
    }
}

/// Replaces a set value at a dotted key with a placeholder.
fn hide(table: &mut toml::Table, key: &str) {
    let (path, last) = key.rsplit_once('.').map_or((None, key), |(path, last)| (Some(path), last));
    let mut table = table;
    for part in path.into_iter().flat_map(|path| path.split('.')) {
        match table.get_mut(part).and_then(toml::Value::as_table_mut) {
            Some(inner) => table = inner,
            None => return,
        }
    }
    if let Some(toml::Value::String(value)) = table.get_mut(last) {
        if !value.is_empty() {
            *value = "<hidden>".into();
        }
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

/// Runs the command line with the built-in scenarios.
pub fn main() -> anyhow::Result<()> {
    main_with(scenarios::modules())
}

/// Runs the command line hosting `modules` (a binary of its own adds its
/// scenarios to [`scenarios::builtin`] and calls this).
pub fn main_with(modules: Vec<Box<dyn ScenarioModule>>) -> anyhow::Result<()> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    match parse(args, modules, &|name| std::env::var(name).ok()).map_err(|e| e.exit())? {
        Parsed::Serve(loaded) if loaded.print_config => {
            print!("{}", loaded.loaded.to_toml());
            Ok(())
        }
        Parsed::Serve(loaded) => serve(loaded.loaded),
        Parsed::Convert(args) => convert(&args, std::io::stdin().lock(), std::io::stdout().lock()),
    }
}

/// A command line read.
#[derive(Debug)]
pub enum Parsed {
    /// `serve`.
    Serve(Box<ServeCommand>),
    /// `convert`.
    Convert(ConvertArgs),
}

/// `serve`, its configuration read.
#[derive(Debug)]
pub struct ServeCommand {
    /// The configuration and the scenarios.
    pub loaded: Loaded,
    /// `--print-config`.
    pub print_config: bool,
}

/// Why a command line could not be read: a usage error (clap prints it and
/// exits 2) or a configuration error (exits 1 with every problem).
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// The command line itself.
    #[error(transparent)]
    Usage(#[from] clap::Error),
    /// The configuration it names.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

impl ParseError {
    /// Usage errors (and `--help`) print and exit as clap does; others return.
    fn exit(self) -> anyhow::Error {
        match self {
            ParseError::Usage(error) => error.exit(),
            ParseError::Config(error) => error.into(),
        }
    }
}

/// Reads a command line, with `env` for environment variables (tests pass
/// their own), building the configuration of `serve` over `modules`.
pub fn parse(
    args: impl IntoIterator<Item = impl Into<std::ffi::OsString> + Clone>,
    modules: Vec<Box<dyn ScenarioModule>>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Parsed, ParseError> {
    let flags = flags::all(&modules);
    let mut defaults = Config::defaults_table();
    defaults.extend(module::defaults_of(&modules));
    let command = Cli::command().mut_subcommand("serve", |serve| flags::add_to(serve, &flags, &defaults));
    let matches = command.try_get_matches_from(args)?;
    let cli = Cli::from_arg_matches(&matches)?;
    let args = match cli.command {
        Command::Convert(args) => return Ok(Parsed::Convert(args)),
        Command::Serve(args) => args,
    };
    let mut overrides = flags::overrides(&flags, matches.subcommand_matches("serve"), env);
    for pair in &args.set {
        let (key, value) = pair.split_once('=').ok_or_else(|| {
            ConfigError(vec![format!("--set {pair:?}: write KEY=VALUE, e.g. --set cache.ttl_secs=60")])
        })?;
        overrides.push(Override { key: key.trim().to_owned(), value: value.to_owned(), origin: "--set".into() });
    }
    let file = args.config.clone().or_else(|| env("MEGAMIND_CONFIG").map(PathBuf::from));
    let config = Sources { file, overrides }.load(&defaults)?;
    let loaded = Loaded { config, modules, secret_keys: flags::secret_keys(&flags) };
    Ok(Parsed::Serve(Box::new(ServeCommand { loaded, print_config: args.print_config })))
}

fn serve(loaded: Loaded) -> anyhow::Result<()> {
    let Loaded { config, modules, .. } = loaded;
    let _log_guard = logging::init(&config.log_level, std::io::stdout()).map_err(anyhow::Error::msg)?;
    // Scenarios register their own collectors in the registry /metrics renders.
    let metrics = ServerMetrics::new();
    let built = module::build_all(&modules, &config.scenarios, metrics.registry())?;
    let app = App::with_metrics(&config, built.registry, metrics)?;
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

    /// `serve ARGS` read with `env` as the environment.
    fn serve_with(args: &[&str], env: &[(&str, &str)]) -> Result<Loaded, ParseError> {
        let argv = ["megamind-scenario", "serve"].iter().chain(args).copied();
        let env = |name: &str| env.iter().find(|(key, _)| *key == name).map(|(_, value)| (*value).to_owned());
        match parse(argv, scenarios::modules(), &env)? {
            Parsed::Serve(command) => Ok(command.loaded),
            Parsed::Convert(_) => unreachable!("serve parses as serve"),
        }
    }

    fn serve(args: &[&str]) -> Config {
        serve_with(args, &[]).unwrap_or_else(|e| panic!("{args:?}: {e}")).config
    }

    #[test]
    fn flags_override_the_file_and_all_budgets_at_once() {
        let config = serve(&["--budget-ms", "500", "--commit-budget-ms", "900"]);
        assert_eq!(config.budget.run_ms, 500);
        assert_eq!(config.budget.commit_ms, 900);
    }

    #[test]
    fn flags_win_over_their_environment_and_set_wins_over_both() {
        let env = [("MEGAMIND_MAX_IN_FLIGHT", "7"), ("MEGAMIND_BODY_LIMIT", "1000")];
        let config = serve_with(&["--body-limit", "2000"], &env).unwrap().config;
        assert_eq!((config.max_in_flight, config.body_limit), (7, 2000));
        let config = serve_with(&["--body-limit", "2000", "--set", "body_limit=3000"], &env).unwrap().config;
        assert_eq!(config.body_limit, 3000);
        let error = serve_with(&["--set", "body_limit"], &[]).unwrap_err().to_string();
        assert!(error.contains("KEY=VALUE"), "{error}");
        let error = serve_with(&[], &[("MEGAMIND_MAX_IN_FLIGHT", "many")]).unwrap_err().to_string();
        assert!(
            error.contains("MEGAMIND_MAX_IN_FLIGHT max_in_flight=\"many\": \"many\" is not a whole number"),
            "{error}"
        );
    }

    #[test]
    fn cache_flags_set_the_commit_reserve() {
        let limits = serve(&["--cache-commit-max-entries", "10", "--cache-commit-max-bytes", "4096"]).cache_limits();
        assert_eq!((limits.commit_max_entries, limits.commit_max_bytes), (10, 4096));
    }

    #[test]
    fn set_reaches_a_scenario_table_and_unknown_tables_are_refused() {
        let config = serve(&["--set", "assistant.model=qwen", "--set", "assistant.run_wait_ms=120"]);
        assert_eq!(config.scenarios["assistant"]["model"].as_str(), Some("qwen"));
        assert_eq!(config.scenarios["assistant"]["run_wait_ms"].as_integer(), Some(120));
        let loaded = serve_with(&["--set", "nosuch.key=1"], &[]).unwrap();
        let error = module::build_all(&loaded.modules, &loaded.config.scenarios, &prometheus::Registry::new())
            .unwrap_err()
            .to_string();
        assert!(error.contains("[nosuch]: no scenario of that name (scenarios: demo, assistant)"), "{error}");
    }

    #[test]
    fn help_shows_every_default_from_the_defaults_themselves() {
        let help = match parse(["megamind-scenario", "serve", "--help"], scenarios::modules(), &|_| None) {
            Err(ParseError::Usage(help)) => help.to_string(),
            other => panic!("--help prints help, got {other:?}"),
        };
        assert!(help.contains("[default: 127.0.0.1:8080] [env: MEGAMIND_ADDR]"), "{help}");
        assert!(help.contains("--cache-ttl-secs"), "{help}");
        let ttl = Config::default().cache.ttl_secs;
        assert!(help.contains(&format!("seconds an answer is replayed [default: {ttl}]")), "{help}");
    }

    #[test]
    fn print_config_shows_every_table_and_reads_back() {
        let loaded = serve_with(&["--max-in-flight", "9"], &[]).unwrap();
        let text = loaded.to_toml();
        assert!(text.contains("max_in_flight = 9"), "{text}");
        assert!(text.contains("[budget]") && text.contains("[cache]") && text.contains("[demo]"), "{text}");
        let again = Config::from_toml(&text).unwrap();
        assert_eq!(again.max_in_flight, 9);
        assert_eq!(again.budget, loaded.config.budget);
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
        let config = serve(&["--addr", "localhost:0"]);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let listener = runtime.block_on(bind(&config.addr, "")).expect("localhost binds");
        assert!(listener.local_addr().unwrap().ip().is_loopback());
        let nowhere = "no-such-host.invalid:0".parse().unwrap();
        let error = report(&runtime.block_on(bind(&nowhere, "")).unwrap_err());
        assert!(error.contains("cannot listen on no-such-host.invalid:0: cannot resolve"), "{error}");
    }

    #[test]
    fn a_bare_word_log_level_is_refused_with_the_levels_named() {
        let error = serve_with(&["--log-level", "verbose"], &[]).unwrap_err().to_string();
        assert!(error.contains("\"verbose\" is not a level (trace, debug, info, warn, error, off)"), "{error}");
    }

    #[test]
    fn connection_flags_reach_the_configuration() {
        let limits = serve(&["--idle-timeout-ms", "500", "--max-connections", "7"]).connection_limits();
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
