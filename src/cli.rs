//! The command line: `serve` runs the server, `convert` turns protocol
//! messages between binary, JSON and text format.

use std::{path::PathBuf, sync::Arc};

use anyhow::Context;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use megamind_core::{
    config::{AuthConfig, Config, ConfigError, ListenAddr, Override, Problem, Sources},
    rules::{logging, metrics::ServerMetrics},
    scenario::{ScenarioModule, module},
    server::{self, App},
    store::Stores,
};

use crate::scenarios;

mod checks;
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
    Convert(megamind_tools::convert::ConvertArgs),
    /// Play Megamind against a running server: from the terminal, from YAML scripts with expectations, or from a
    /// server's debug log (exit 1 when an expectation fails or an answer differs, 2 when it cannot run).
    Dialog(megamind_tools::dialog::DialogArgs),
    /// Check a JSONSeq v1 SSE transcript (a file, `-` for standard input, or a URL) against the contract: every
    /// violation with the event's index and the rule (exit 1 when any, 2 when it cannot be read).
    ValidateJsonseq(megamind_tools::validate_jsonseq::ValidateArgs),
}

/// `serve`: the flags below, plus the core's and each scenario's settings
/// (added when the command line is built: see [`flags`]).
#[derive(Debug, Args, Default)]
pub struct ServeArgs {
    /// TOML configuration file: the core's keys at the top level and in `[budget]`, `[cache]`, `[store]` and `[auth]`,
    /// each scenario's in a table of its name (`[assistant]`); `--print-config` shows them all [env: MEGAMIND_CONFIG].
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
        let mut table = whole_table(&self.config, &self.modules);
        for key in &self.secret_keys {
            hide(&mut table, key);
        }
        // A key marked secret or not (tvmtool's URL, the model's), a
        // password written into a URL is one.
        checks::for_each_string(&mut table, &mut |_, text| {
            if text.contains("://") {
                *text = megamind_core::text::redact_url(text);
            }
        });
        toml::to_string(&table).unwrap_or_default()
    }
}

/// The core's keys and each scenario's table under its name, as one table.
fn whole_table(config: &Config, modules: &[Box<dyn ScenarioModule>]) -> toml::Table {
    let mut table = toml::Table::try_from(config).unwrap_or_default();
    for module in modules {
        let own = module::table_of(&**module, config.scenarios.get(module.name()));
        table.insert(module.name().to_owned(), toml::Value::Table(own));
    }
    table
}

/// The value at a dotted key of `table`.
fn value_at<'a>(table: &'a mut toml::Table, key: &str) -> Option<&'a mut toml::Value> {
    let (path, last) = key.rsplit_once('.').map_or((None, key), |(path, last)| (Some(path), last));
    let mut table = table;
    for part in path.into_iter().flat_map(|path| path.split('.')) {
        table = table.get_mut(part)?.as_table_mut()?;
    }
    table.get_mut(last)
}

/// Replaces a set value at a dotted key with a placeholder: all of it, or
/// only the password of a URL (`redis://user:<hidden>@host:port`).
fn hide(table: &mut toml::Table, key: &str) {
    if let Some(toml::Value::String(value)) = value_at(table, key) {
        if value.contains("://") {
            *value = megamind_core::text::redact_url(value);
        } else if !value.is_empty() {
            *value = megamind_core::config::HIDDEN.into();
        }
    }
}

/// Runs the command line with the built-in scenarios.
pub fn main() -> anyhow::Result<()> {
    main_with(scenarios::modules())
}

/// Runs the command line hosting `modules` (a binary of its own adds its
/// scenarios to [`scenarios::modules`] and calls this).
pub fn main_with(modules: Vec<Box<dyn ScenarioModule>>) -> anyhow::Result<()> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // A variable set to bytes that are not UTF-8 is refused by name, never
    // taken for unset: a store URL unread would leave a replica on its own
    // memory without a word.
    let unreadable = std::cell::RefCell::new(Vec::new());
    let env = |name: &str| match std::env::var(name) {
        Ok(value) => Some(value),
        Err(std::env::VarError::NotPresent) => None,
        Err(std::env::VarError::NotUnicode(_)) => {
            unreadable.borrow_mut().push(format!("{name}: its value is not UTF-8"));
            None
        }
    };
    let parsed = parse(args, modules, &env);
    let unreadable = unreadable.into_inner();
    let parsed = match parsed {
        Ok(parsed) if unreadable.is_empty() => parsed,
        Ok(_) => return Err(ConfigError(unreadable).into()),
        Err(ParseError::Config(ConfigError(more))) => {
            return Err(ConfigError(unreadable.into_iter().chain(more).collect()).into());
        }
        Err(usage) => return Err(usage.exit()),
    };
    match parsed {
        Parsed::Serve(loaded) if loaded.print_config => {
            use std::io::Write;
            let mut out = megamind_tools::stdout::Stdout;
            out.write_all(loaded.loaded.to_toml().as_bytes()).and_then(|()| out.flush())?;
            Ok(())
        }
        Parsed::Serve(loaded) => serve(loaded.loaded),
        Parsed::Convert(args) => {
            megamind_tools::convert::convert(&args, std::io::stdin().lock(), megamind_tools::stdout::Stdout)
        }
        Parsed::Dialog(args) => exit_with(megamind_tools::dialog::main(&args)),
        Parsed::ValidateJsonseq(args) => exit_with(megamind_tools::validate_jsonseq::main(&args)),
    }
}

/// Ends the process with a subcommand's own exit code (1 and 2 say
/// different things there), its output flushed.
fn exit_with(code: u8) -> ! {
    let _ = std::io::Write::flush(&mut std::io::stdout());
    std::process::exit(i32::from(code))
}

/// A command line read; more subcommands may come.
#[derive(Debug)]
#[non_exhaustive]
pub enum Parsed {
    /// `serve`.
    Serve(Box<ServeCommand>),
    /// `convert`.
    Convert(megamind_tools::convert::ConvertArgs),
    /// `dialog`.
    Dialog(megamind_tools::dialog::DialogArgs),
    /// `validate-jsonseq`.
    ValidateJsonseq(megamind_tools::validate_jsonseq::ValidateArgs),
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

/// Every default `serve` embeds over `modules`: the core's, the binary's
/// own (`default_scenario`) and each scenario's table; what `--help` shows,
/// and what a file, a variable or a flag overrides.
pub fn defaults(modules: &[Box<dyn ScenarioModule>]) -> toml::Table {
    defaults_over(Config::defaults_table(), modules)
}

/// [`defaults`] over `core`, the core's own table, made once at start.
fn defaults_over(mut core: toml::Table, modules: &[Box<dyn ScenarioModule>]) -> toml::Table {
    core.insert("default_scenario".into(), scenarios::DEFAULT.into());
    core.extend(module::defaults_of(modules));
    core
}

/// The configuration `serve` runs with over the built-in scenarios when
/// nothing is set.
pub fn default_config() -> Result<Config, ConfigError> {
    Sources::default().load(&defaults(&scenarios::modules()))
}

/// Reads a command line, with `env` for environment variables (tests pass
/// their own), building the configuration of `serve` over `modules`.
pub fn parse(
    args: impl IntoIterator<Item = impl Into<std::ffi::OsString> + Clone>,
    modules: Vec<Box<dyn ScenarioModule>>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Parsed, ParseError> {
    let flags = flags::all(&modules);
    // Two flags of one name (a scenario's and the core's, or two
    // scenarios') would panic in clap: said as the configuration problem it is.
    let mut clashes = flags::clashes(&flags, &Cli::command());
    // A scenario's table is its name at the top of the file: a name the
    // server's own keys have would read (and overwrite) the server's.
    let core = Config::defaults_table();
    for name in modules.iter().map(|module| module.name()) {
        if core.contains_key(name) || name == "default_scenario" {
            clashes.push(format!(
                "scenario {name:?}: its table would be the server's own `{name}`; name the scenario otherwise"
            ));
        }
    }
    if !clashes.is_empty() {
        return Err(ConfigError(clashes).into());
    }
    let defaults = defaults_over(core, &modules);
    let command = Cli::command().mut_subcommand("serve", |serve| flags::add_to(serve, &flags, &defaults));
    let matches = command.try_get_matches_from(args)?;
    let cli = Cli::from_arg_matches(&matches)?;
    let args = match cli.command {
        Command::Convert(args) => return Ok(Parsed::Convert(args)),
        Command::Dialog(args) => return Ok(Parsed::Dialog(args)),
        Command::ValidateJsonseq(args) => return Ok(Parsed::ValidateJsonseq(args)),
        Command::Serve(args) => args,
    };
    let mut overrides = flags::overrides(&flags, matches.subcommand_matches("serve"), env);
    let mut problems = Vec::new();
    for pair in &args.set {
        match pair.split_once('=') {
            Some((key, value)) => {
                overrides.push(Override { key: key.trim().to_owned(), value: value.to_owned(), origin: "--set".into() })
            }
            None => problems.push(format!("--set {pair:?}: write KEY=VALUE, e.g. --set cache.ttl_secs=60")),
        }
    }
    let file = args.config.clone().or_else(|| env(flags::CONFIG_ENV).map(PathBuf::from));
    let aliases = modules
        .iter()
        .flat_map(|module| {
            let name = module.name();
            module.aliases().iter().map(move |(old, new)| (format!("{name}.{old}"), format!("{name}.{new}")))
        })
        .collect();
    // Every problem in one report, before the server logs a line: the
    // core's keys, the auth table as the deployment's variables complete
    // it, and the scenarios' tables.
    let secret_keys = flags::secret_keys(&flags);
    let config = Sources { file, overrides, aliases, secret: secret_keys.clone() }.load_with(&defaults, &|config| {
        let mut auth = config.auth.clone();
        deployment_fallbacks(&mut auth, env);
        // The table's own problems are the core's already; these are the variables'.
        let own = config.auth.problems();
        let completed = auth.problems().into_iter().filter(|problem| !own.contains(problem));
        let mut found: Vec<Problem> = completed.map(Problem::from_message).collect();
        found.extend(module::problems(&modules, config));
        let mut table = whole_table(config, &modules);
        found.extend(checks::placeholder_secrets(&mut table, &flags));
        found
    });
    let mut config = match config {
        Ok(config) if problems.is_empty() => config,
        Ok(_) => return Err(ConfigError(problems).into()),
        Err(ConfigError(more)) => return Err(ConfigError(problems.into_iter().chain(more).collect()).into()),
    };
    deployment_fallbacks(&mut config.auth, env);
    let loaded = Loaded { config, modules, secret_keys };
    Ok(Parsed::Serve(Box::new(ServeCommand { loaded, print_config: args.print_config })))
}

/// The variables a TVM deployment sets, read where nothing of ours (file,
/// flag, variable, `--set`) set the key.
fn deployment_fallbacks(auth: &mut AuthConfig, env: &dyn Fn(&str) -> Option<String>) {
    let set = |value: &mut String, variable| {
        if value.trim().is_empty()
            && let Some(fallback) = env(variable).filter(|fallback| !fallback.trim().is_empty())
        {
            *value = fallback;
        }
    };
    set(&mut auth.tvmtool_url, "DEPLOY_TVM_TOOL_URL");
    set(&mut auth.tvmtool_token, "QLOUD_TVM_TOKEN");
}

fn serve(loaded: Loaded) -> anyhow::Result<()> {
    let Loaded { config, modules, .. } = loaded;
    // A server's panics may quote a client's text: reported on one line.
    logging::panics::install();
    let log_guard = logging::init(&config.log_level, std::io::stdout()).map_err(anyhow::Error::msg)?;
    // Scenarios register their own collectors in the registry /metrics renders.
    let metrics = ServerMetrics::new();
    let stores = Stores::of(&config.store, metrics.registry()).map_err(anyhow::Error::msg)?;
    let built = module::build_all_with(&modules, &config.scenarios, metrics.registry(), stores)?;
    let app = App::from_built(&config, built, metrics)?;
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = config.worker_threads() {
        runtime.worker_threads(threads.get());
    }
    let runtime = runtime.enable_all().build()?;
    #[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
    crate::allocator::fit_background_threads(runtime.metrics().num_workers());
    // Each connection is a file descriptor: allow as many as the system lets us.
    server::raise_open_files_limit();
    let cut_short = runtime.block_on(async {
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
        let mut signals = server::StopSignals::new().context("cannot watch SIGINT and SIGTERM")?;
        let (first, first_seen) = tokio::sync::oneshot::channel();
        // The first signal drains gracefully; a second one, while that takes
        // its time (`shutdown_delay_ms`, the drain), stops at once.
        let second = async move {
            let _ = first.send(signals.recv().await);
            signals.recv().await
        };
        tokio::select! {
            served = server::serve_all(listeners, Arc::new(app), async { let _ = first_seen.await; }) => {
                served?;
                tracing::info!("stopped");
                anyhow::Ok(None)
            }
            signal = second => {
                tracing::warn!(signal = signal.name(), "a second signal: stopping now, without draining");
                anyhow::Ok(Some(signal))
            }
        }
    })?;
    if let Some(signal) = cut_short {
        // Calls still running are dropped with the runtime, unwaited; the log is written out first.
        runtime.shutdown_background();
        drop(log_guard);
        std::process::exit(i32::from(signal.exit_code()));
    }
    Ok(())
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

#[cfg(test)]
mod tests;
