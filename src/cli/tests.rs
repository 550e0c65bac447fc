//! Tests of the command line: flags, environment, `--set`, help, `convert`.

use megamind_core::codec::Format;
use megamind_tools::convert::{ConvertArgs, convert};

use super::*;

/// `serve ARGS` read with `env` as the environment.
/// `text` written as a configuration file of its own, named for the test.
fn config_file(name: &str, text: &str) -> std::path::PathBuf {
    let file = std::env::temp_dir().join(format!("megamind-cli-{name}-{}.toml", std::process::id()));
    std::fs::write(&file, text).unwrap();
    file
}

fn serve_with(args: &[&str], env: &[(&str, &str)]) -> Result<Loaded, ParseError> {
    serve_hosting(args, env, scenarios::modules())
}

/// `serve ARGS` of a server hosting `modules`.
fn serve_hosting(
    args: &[&str],
    env: &[(&str, &str)],
    modules: Vec<Box<dyn ScenarioModule>>,
) -> Result<Loaded, ParseError> {
    let argv = ["megamind-scenario", "serve"].iter().chain(args).copied();
    let env = |name: &str| env.iter().find(|(key, _)| *key == name).map(|(_, value)| (*value).to_owned());
    match parse(argv, modules, &env)? {
        Parsed::Serve(command) => Ok(command.loaded),
        _ => unreachable!("serve parses as serve"),
    }
}

/// The built-in scenarios' names as a problem lists them.
fn listed() -> String {
    scenarios::modules().iter().map(|module| module.name()).collect::<Vec<_>>().join(", ")
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
    assert!(error.contains("MEGAMIND_MAX_IN_FLIGHT max_in_flight=\"many\": \"many\" is not a whole number"), "{error}");
}

#[test]
fn a_scenario_s_flags_and_their_variables_reach_its_table() {
    let args = ["--llm-model", "qwen", "--llm-run-wait-ms", "120", "--llm-stream", "false"];
    let loaded = serve_with(&args, &[("MEGAMIND_LLM_API_KEY", "sk-from-env")]).unwrap();
    let assistant = &loaded.config.scenarios["assistant"];
    // The model's keys are in `[assistant.backend]`; the shell's at the top.
    assert_eq!(assistant["backend"]["model"].as_str(), Some("qwen"));
    assert_eq!(assistant["run_wait_ms"].as_integer(), Some(120));
    assert_eq!(assistant["backend"]["stream"].as_bool(), Some(false));
    assert_eq!(assistant["backend"]["api_key"].as_str(), Some("sk-from-env"));
    let printed = loaded.to_toml();
    assert!(printed.contains("run_wait_ms = 120") && !printed.contains("sk-from-env"), "{printed}");
    module::build_all(&loaded.modules, &loaded.config.scenarios, &prometheus::Registry::new()).expect("it builds");
}

#[test]
fn the_store_flags_reach_their_table_and_the_url_s_password_never_shows() {
    let env = [("MEGAMIND_STORE_URL", "redis://app:s3cret@redis.internal:6379/2")];
    let loaded = serve_with(&["--store-prefix", "team-a", "--store-commit-fallback", "local"], &env).unwrap();
    let store = &loaded.config.store;
    assert_eq!(store.url, "redis://app:s3cret@redis.internal:6379/2");
    assert_eq!((store.prefix.as_str(), store.commit_fallback), ("team-a", megamind_core::store::CommitFallback::Local));
    let printed = loaded.to_toml();
    assert!(printed.contains(r#"url = "redis://app:<hidden>@redis.internal:6379/2""#), "{printed}");
    assert!(!format!("{printed}{:?}", loaded.config).contains("s3cret"));

    let error = serve_with(&["--store-url", "http://app:s3cret@host:1", "--store-timeout-ms", "0"], &[])
        .unwrap_err()
        .to_string();
    assert!(error.contains("store.url: the scheme is \"http\"") && error.contains("store.timeout_ms = 0"), "{error}");
    assert!(!error.contains("s3cret"), "{error}");
    let error = serve_with(&["--store-commit-fallback", "maybe"], &[]).unwrap_err().to_string();
    assert!(error.contains("refuse") && error.contains("local"), "{error}");
    // `megamind:calls` would meet the keys `megamind`'s assistant keeps under `megamind:calls:`.
    for prefix in ["megamind:calls", "team\ta", "{megamind}"] {
        let error = serve_with(&["--store-prefix", prefix], &[]).unwrap_err().to_string();
        assert!(error.contains("store.prefix") && error.contains("colons"), "{prefix}: {error}");
    }
}

/// A password written into any URL (tvmtool's, the model's) is a secret:
/// hidden when printed, and the printed placeholder refused when loaded.
#[test]
fn passwords_in_any_url_are_hidden_when_printed_and_their_placeholder_refused() {
    let urls = ["--tvmtool-url", "http://u:tvm-pw@tvm:1", "--llm-base-url", "http://k:llm-pw@llm:8000/v1"];
    let printed = serve_with(&urls, &[]).unwrap().to_toml();
    assert!(!printed.contains("tvm-pw") && !printed.contains("llm-pw"), "{printed}");
    assert!(printed.contains(r#"tvmtool_url = "http://u:<hidden>@tvm:1/""#), "{printed}");
    let path = std::env::temp_dir().join(format!("megamind-printed-urls-{}.toml", std::process::id()));
    std::fs::write(&path, &printed).unwrap();
    let error = serve_with(&["--config", path.to_str().unwrap()], &[]).unwrap_err().to_string();
    let _ = std::fs::remove_file(&path);
    assert!(error.contains("auth.tvmtool_url: the password \"<hidden>\" is the placeholder"), "{error}");
    assert!(error.contains("assistant.backend.base_url: the password"), "{error}");
    assert!(error.contains("--tvmtool-url or MEGAMIND_TVMTOOL_URL"), "{error}");
}

/// Durations are added to clocks: one near the integer's limit overflowed
/// there (a cache TTL of `i64::MAX` seconds made every answer a panic).
/// Any key's, the core's or a scenario's, is refused past its bound, once.
#[test]
fn durations_past_their_bounds_are_refused_wherever_they_are_and_named_once() {
    let huge = i64::MAX.to_string();
    let sets = [
        format!("cache.ttl_secs={huge}"),
        format!("idle_timeout_ms={huge}"),
        "detach_limit_ms=86400001".to_owned(),
        format!("assistant.llm.heartbeat_secs={huge}"),
    ];
    let mut args = vec!["--idle-timeout-ms", "86400000"];
    for set in &sets {
        args.extend(["--set", set]);
    }
    let error = serve_with(&args, &[]).unwrap_err().to_string();
    for key in ["cache.ttl_secs", "idle_timeout_ms", "detach_limit_ms", "assistant.llm.heartbeat_secs"] {
        assert_eq!(error.matches(&format!("{key} = ")).count(), 1, "{key}, once: {error}");
    }
    // The longest allowed is allowed: a cache TTL of 30 days, a timeout of a day.
    let longest =
        ["--idle-timeout-ms", "86400000", "--set", "cache.ttl_secs=2592000", "--set", "cache.commit_ttl_secs=2592000"];
    assert!(serve_with(&longest, &[]).is_ok());
    assert!(serve_with(&["--set", "assistant.calls.result_ttl_secs=2592000"], &[]).is_ok());
}

#[test]
fn tvm_is_read_from_the_deployments_variables_where_nothing_else_set_it_and_the_token_never_shows() {
    let deployment = [("DEPLOY_TVM_TOOL_URL", "http://localhost:18080"), ("QLOUD_TVM_TOKEN", "qloud-s3cret")];
    let loaded =
        serve_with(&["--tvm-dst", "megamind-scenario", "--tvm-allowed-src", "2000860,42"], &deployment).unwrap();
    let auth = &loaded.config.auth;
    assert_eq!((auth.tvmtool_url.as_str(), auth.tvmtool_token.as_str()), ("http://localhost:18080", "qloud-s3cret"));
    assert_eq!((auth.tvm_dst.as_str(), auth.tvm_allowed_src.as_slice()), ("megamind-scenario", &[2_000_860, 42][..]));
    let printed = loaded.to_toml();
    assert!(printed.contains(r#"tvmtool_token = "<hidden>""#), "{printed}");
    assert!(!format!("{printed}{:?}", loaded.config).contains("s3cret"));

    // Ours win over the deployment's: the flag's URL, tvmtool's own token variable.
    let ours = [("TVMTOOL_LOCAL_AUTHTOKEN", "local-token"), deployment[0], deployment[1]];
    let loaded = serve_with(&["--tvmtool-url", "http://tvm:1"], &ours).unwrap();
    let auth = &loaded.config.auth;
    assert_eq!((auth.tvmtool_url.as_str(), auth.tvmtool_token.as_str()), ("http://tvm:1", "local-token"));

    let error = serve_with(&["--tvmtool-url", "tvm:1", "--user-ticket", "sometimes"], &[]).unwrap_err().to_string();
    assert!(error.contains("auth.tvmtool_url") && error.contains("user_ticket"), "{error}");
}

#[test]
fn cache_flags_set_the_commit_reserve() {
    let limits = serve(&["--cache-commit-max-entries", "10", "--cache-commit-max-bytes", "4096"]).cache_limits();
    assert_eq!((limits.commit_max_entries, limits.commit_max_bytes), (10, 4096));
}

#[test]
fn set_reaches_a_scenario_table_and_unknown_tables_are_refused() {
    let config = serve(&["--set", "assistant.model=qwen", "--set", "assistant.run_wait_ms=120"]);
    // `model` moved into `[assistant.backend]`: set where it was, it is read there.
    assert_eq!(config.scenarios["assistant"]["backend"]["model"].as_str(), Some("qwen"));
    assert_eq!(config.scenarios["assistant"]["run_wait_ms"].as_integer(), Some(120));
    let error = serve_with(&["--set", "nosuch.key=1"], &[]).unwrap_err().to_string();
    let expected = format!("--set nosuch.key: [nosuch]: no scenario of that name (scenarios: {})", listed());
    assert!(error.contains(&expected), "{error}");
}

/// A file that is not TOML is reported at its place, without the line:
/// the line may be a secret's whose closing quote is missing.
#[test]
fn a_file_that_is_not_toml_is_reported_at_its_place_without_quoting_a_secret() {
    let file = config_file("syntax", "[assistant.backend]\napi_key = \"sk-SECRETVALUE\nmodel = \"m\"\n");
    let path = file.to_str().unwrap();
    let error = serve_with(&["--config", path], &[]).unwrap_err().to_string();
    std::fs::remove_file(&file).unwrap();
    assert!(!error.contains("SECRETVALUE"), "{error}");
    assert!(error.contains(&format!("{path}:2:")), "the file, its line and column: {error}");
}

#[test]
fn every_problem_of_a_file_is_reported_in_one_pass_with_its_line_and_the_key_it_meant() {
    let text = "defualt_scenario = \"demo\"\n\n[budget]\ncomit_ms = 500\n\n[cache]\nmax_bytes = \"64MB\"\n\n\
                [assitant]\nmodel = \"qwen\"\n\n[demo]\ncolour = 1\n[assistant.calls]\nmax_in_flite = 4\n";
    let file = config_file("typos", text);
    let path = file.to_str().unwrap();
    let error = serve_with(&["--config", path, "--max-in-flight", "0"], &[]).unwrap_err().to_string();
    std::fs::remove_file(&file).unwrap();
    for line in [
        format!("{path}:1: defualt_scenario: unknown key; did you mean `default_scenario`?"),
        format!("{path}:4: budget.comit_ms: unknown key; did you mean `commit_ms`?"),
        format!("{path}:7: cache.max_bytes: invalid type: string \"64MB\", expected a whole number, 0 or more"),
        format!("{path}:9: [assitant]: no scenario of that name; did you mean `assistant`?"),
        format!("{path}:13: demo.colour: unknown key ([demo] has no settings)"),
        format!("{path}:15: assistant.calls.max_in_flite: unknown key; did you mean `max_in_flight`?"),
        "--max-in-flight: max_in_flight must be above 0".to_owned(),
    ] {
        assert!(error.contains(&line), "missing {line:?} in:\n{error}");
    }
    assert_eq!(error.lines().count(), 8, "a heading and one line per problem:\n{error}");
}

/// A file a scenario reads at start is checked with every other value:
/// a missing one is listed beside the flags' problems, and
/// `--print-config` refuses it too.
#[test]
fn a_missing_system_prompt_file_is_one_problem_among_the_others() {
    let args = ["--llm-system-prompt-file", "/nonexistent/prompt.txt", "--budget-ms", "70000"];
    let error = serve_with(&args, &[]).unwrap_err().to_string();
    assert!(error.contains("assistant.dialog.system_prompt_file = /nonexistent/prompt.txt: not a file"), "{error}");
    assert!(error.contains("budget.run_ms"), "{error}");
    let printing = ["--llm-system-prompt-file", "/nonexistent/prompt.txt", "--print-config"];
    assert!(serve_with(&printing, &[]).is_err());
}

#[test]
fn a_negative_number_is_a_value_refused_once_with_its_reason() {
    let error = serve_with(&["--budget-ms", "-5"], &[]).unwrap_err().to_string();
    assert_eq!(
        error,
        "invalid configuration:\n  - --budget-ms: budget.run_ms: invalid value: integer `-5`, expected a whole number, 0 \
         or more"
    );
    let error = serve_with(&["--budget-ms", "abc"], &[]).unwrap_err().to_string();
    assert_eq!(error.matches("is not a whole number").count(), 1, "one flag, one problem: {error}");
    let error = serve_with(&[], &[("MEGAMIND_BUDGET_MS", "0")]).unwrap_err().to_string();
    assert_eq!(error, "invalid configuration:\n  - MEGAMIND_BUDGET_MS: budget.run_ms = 0: must be 1..=60000 ms");
}

#[test]
fn a_default_scenario_that_is_none_is_refused_before_the_server_starts() {
    let error = serve_with(&["--default-scenario", "dmeo"], &[]).unwrap_err().to_string();
    let expected =
        format!("default_scenario \"dmeo\" is not registered; did you mean `demo`? (scenarios: {})", listed());
    assert!(error.contains(&expected), "{error}");
}

/// What the test modules build: a scenario, the demo.
type Built = Result<std::sync::Arc<dyn megamind_core::scenario::Scenario>, module::SetupError>;

fn demo() -> Built {
    Ok(std::sync::Arc::new(scenarios::demo::Demo::new()))
}

/// A scenario added to the built-in ones, with a table and a flag of its own.
#[derive(Debug)]
struct Added;

impl ScenarioModule for Added {
    fn name(&self) -> &'static str {
        "added"
    }

    fn defaults(&self) -> toml::Table {
        toml::toml! { sides = 2 }
    }

    fn flags(&self) -> Vec<module::Flag> {
        vec![module::Flag::new("added-sides", "sides", "Sides of the added die").env("MEGAMIND_ADDED_SIDES")]
    }

    fn check(&self, table: &toml::Table) -> Vec<megamind_core::config::Problem> {
        let sides = table.get("sides").and_then(toml::Value::as_integer);
        let wrong = (sides < Some(2)).then(|| megamind_core::config::Problem::from_message("added.sides: at least 2"));
        wrong.into_iter().collect()
    }

    fn build(&self, _: toml::Table, _: &mut module::Setup<'_>) -> Built {
        demo()
    }
}

/// The problems `serve` refuses to start with, hosting the built-in
/// scenarios and `more`.
fn refused_hosting(more: Vec<Box<dyn ScenarioModule>>) -> Vec<String> {
    let mut modules = scenarios::modules();
    modules.extend(more);
    match parse(["megamind-scenario", "serve"], modules, &|_| None) {
        Err(ParseError::Config(ConfigError(problems))) => problems,
        other => panic!("refused with configuration problems, got {other:?}"),
    }
}

/// A scenario whose flags take names already taken.
#[derive(Debug)]
struct Clashing;

impl ScenarioModule for Clashing {
    fn name(&self) -> &'static str {
        "clashing"
    }

    fn flags(&self) -> Vec<module::Flag> {
        vec![
            module::Flag::new("config", "file", "Taken by serve itself"),
            module::Flag::new("added-sides", "sides", "Taken by another scenario").env("MEGAMIND_ADDED_SIDES"),
            module::Flag::new("settings", "settings", "Its variable taken by serve itself").env("MEGAMIND_CONFIG"),
        ]
    }

    fn build(&self, _: toml::Table, _: &mut module::Setup<'_>) -> Built {
        demo()
    }
}

#[test]
fn flags_named_twice_are_a_configuration_problem_not_a_panic() {
    assert_eq!(
        refused_hosting(vec![Box::new(Added), Box::new(Clashing)]),
        [
            "--config: a flag of serve itself and of Scenario clashing; rename one",
            "--added-sides: a flag of Scenario added and of Scenario clashing; rename one",
            "MEGAMIND_ADDED_SIDES: the variable of a flag of Scenario added and of Scenario clashing; rename one",
            "MEGAMIND_CONFIG: the variable of a flag of serve itself and of Scenario clashing; rename one",
        ]
    );
}

/// A scenario named as a table of the server's own configuration.
#[derive(Debug)]
struct NamedCache;

impl ScenarioModule for NamedCache {
    fn name(&self) -> &'static str {
        "cache"
    }

    fn build(&self, _: toml::Table, _: &mut module::Setup<'_>) -> Built {
        demo()
    }
}

#[test]
fn a_scenario_named_as_the_server_s_own_table_is_refused_by_name() {
    assert_eq!(
        refused_hosting(vec![Box::new(NamedCache)]),
        ["scenario \"cache\": its table would be the server's own `cache`; name the scenario otherwise"]
    );
}

#[test]
fn a_scenario_added_to_the_list_is_served_configured_and_helped_like_the_others() {
    let hosting = || {
        let mut modules = scenarios::modules();
        modules.push(Box::new(Added));
        modules
    };
    let names: Vec<&str> = hosting().iter().map(|module| module.name()).collect();
    let help = match parse(["megamind-scenario", "serve", "--help"], hosting(), &|_| None) {
        Err(ParseError::Usage(help)) => help.to_string(),
        other => panic!("--help prints help, got {other:?}"),
    };
    assert!(help.contains("Scenario added") && help.contains("Sides of the added die [default: 2]"), "{help}");
    let loaded = serve_hosting(&["--added-sides", "6", "--default-scenario", "added"], &[], hosting()).unwrap();
    assert_eq!(loaded.config.scenarios["added"]["sides"].as_integer(), Some(6));
    assert!(loaded.to_toml().contains("[added]\nsides = 6"), "{}", loaded.to_toml());
    let built = module::build_all(&loaded.modules, &loaded.config.scenarios, &prometheus::Registry::new()).unwrap();
    assert_eq!(built.registry.names().count(), names.len(), "every scenario built");
    let error = serve_hosting(&["--set", "aded.sides=3"], &[("MEGAMIND_ADDED_SIDES", "1")], hosting()).unwrap_err();
    let error = error.to_string();
    let expected = format!("[aded]: no scenario of that name; did you mean `added`? (scenarios: {})", names.join(", "));
    assert!(error.contains(&expected), "{error}");
    assert!(error.contains("MEGAMIND_ADDED_SIDES: added.sides: at least 2"), "{error}");
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
    assert!(help.contains(&format!("`/continue` answer is replayed [default: {ttl}]")), "{help}");
}

/// A debug print of what `serve` runs with shows no secret, the
/// scenarios' included (their tables hold them as set).
#[test]
fn a_debug_print_of_the_configuration_shows_no_secret() {
    let env = [
        ("MEGAMIND_STORE_URL", "redis://app:s3cret@redis.internal:6379/2"),
        ("TVMTOOL_LOCAL_AUTHTOKEN", "tvm-s3cret"),
        ("MEGAMIND_LLM_API_KEY", "sk-s3cret"),
        ("MEGAMIND_LLM_SIGNING_KEY", "signing-s3cret-signing-s3cret-32b"),
    ];
    let loaded = serve_with(&[], &env).unwrap();
    assert_eq!(loaded.config.scenarios["assistant"]["backend"]["api_key"].as_str(), Some("sk-s3cret"));
    let printed = format!("{loaded:?} {:#?}", loaded.config);
    assert!(!printed.contains("s3cret"), "{printed}");
    assert!(printed.contains("\"assistant\""), "the scenarios are named: {printed}");
}

/// A file that leaves a secret no table to go in (a value where its section
/// belongs), or writes one where its section belongs: the refusal names
/// the key, never the secret.
#[test]
fn a_secret_with_no_table_to_go_in_is_refused_without_being_quoted() {
    let env = [
        ("MEGAMIND_STORE_URL", "redis://app:s3cret@redis.internal:6379/2"),
        ("TVMTOOL_LOCAL_AUTHTOKEN", "tvm-s3cret"),
        ("MEGAMIND_LLM_API_KEY", "sk-s3cret"),
        ("MEGAMIND_LLM_SIGNING_KEY", "signing-s3cret-signing-s3cret-32b"),
    ];
    let path = std::env::temp_dir().join(format!("megamind-no-table-{}.toml", std::process::id()));
    std::fs::write(&path, "store = 1\nauth = 2\n[assistant]\nbackend = \"openai\"\nllm = 3\n").unwrap();
    let error = serve_with(&["--config", path.to_str().unwrap()], &env).unwrap_err().to_string();
    for said in [
        "MEGAMIND_STORE_URL store.url=<hidden>: store is not a table",
        "MEGAMIND_LLM_API_KEY assistant.backend.api_key=<hidden>: assistant.backend is not a table",
    ] {
        assert!(error.contains(said), "{said}: {error}");
    }
    assert!(!error.contains("s3cret"), "{error}");
    // A secret written where its section belongs is quoted by no problem either.
    std::fs::write(&path, "store = \"redis://app:s3cret@redis.internal:6379/2\"\n").unwrap();
    let error = serve_with(&["--config", path.to_str().unwrap()], &[]).unwrap_err().to_string();
    assert!(error.contains("store: invalid type: string, expected"), "{error}");
    assert!(!error.contains("s3cret"), "{error}");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_printed_configuration_loaded_again_is_refused_while_its_secrets_are_placeholders() {
    let env = [
        ("MEGAMIND_STORE_URL", "redis://app:s3cret@redis.internal:6379/2"),
        ("TVMTOOL_LOCAL_AUTHTOKEN", "tvm-s3cret"),
        ("MEGAMIND_LLM_API_KEY", "sk-s3cret"),
        ("MEGAMIND_LLM_SIGNING_KEY", "signing-s3cret-signing-s3cret-32b"),
    ];
    let printed = serve_with(&[], &env).unwrap().to_toml();
    let path = std::env::temp_dir().join(format!("megamind-printed-{}.toml", std::process::id()));
    std::fs::write(&path, &printed).unwrap();
    let error = serve_with(&["--config", path.to_str().unwrap()], &[]).unwrap_err().to_string();
    for (key, flag) in [
        ("store.url", "--store-url or MEGAMIND_STORE_URL"),
        ("auth.tvmtool_token", "--tvmtool-token or TVMTOOL_LOCAL_AUTHTOKEN"),
        ("assistant.backend.api_key", "MEGAMIND_LLM_API_KEY"),
        ("assistant.llm.signing_key", "MEGAMIND_LLM_SIGNING_KEY"),
    ] {
        let said = [format!("{key} = \"<hidden>\" is the placeholder"), format!("{key}: the password \"<hidden>\" is")];
        assert!(said.iter().any(|said| error.contains(said)), "{key}: {error}");
        assert!(error.contains(flag), "{key}: {error}");
    }
    assert!(!error.contains("s3cret"), "{error}");
    // The real values, given where the file has placeholders, start the server.
    let real = [("MEGAMIND_STORE_URL", "redis://app:s3cret@redis.internal:6379/2")];
    let unset: String =
        printed.lines().filter(|line| !line.contains("<hidden>")).map(|line| format!("{line}\n")).collect();
    std::fs::write(&path, unset).unwrap();
    let loaded = serve_with(&["--config", path.to_str().unwrap()], &real).unwrap();
    assert_eq!(loaded.config.store.url, "redis://app:s3cret@redis.internal:6379/2");
    std::fs::remove_file(&path).unwrap();
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
    let to_binary = ConvertArgs { message_type: "TScenarioRunRequest".into(), from: Format::Text, to: Format::Binary };
    let mut binary = Vec::new();
    convert(&to_binary, text.as_bytes(), &mut binary).unwrap();
    let to_text = ConvertArgs { message_type: "TScenarioRunRequest".into(), from: Format::Binary, to: Format::Text };
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

#[test]
fn a_key_written_where_it_was_is_read_where_it_is_and_a_flag_still_wins() {
    let path = config_file("aliases", "[assistant]\nmodel = \"from-file\"\nmax_in_flight = 9\n");
    let file = path.to_str().unwrap();
    let loaded = serve_with(&["--config", file, "--llm-model", "from-flag"], &[]).unwrap();
    let assistant = &loaded.config.scenarios["assistant"];
    assert_eq!(assistant["backend"]["model"].as_str(), Some("from-flag"), "the flag wins over the file");
    assert_eq!(assistant["calls"]["max_in_flight"].as_integer(), Some(9), "the file's key, read in its section");
    assert!(assistant.get("model").is_none() && assistant.get("max_in_flight").is_none(), "{assistant:?}");
    let loaded = serve_with(&["--config", file, "--set", "assistant.model=7"], &[]).unwrap();
    let model = &loaded.config.scenarios["assistant"]["backend"]["model"];
    assert_eq!(model.as_str(), Some("7"), "typed by the default where the key is now: a string stays a string");
    module::build_all(&loaded.modules, &loaded.config.scenarios, &prometheus::Registry::new()).expect("it builds");
    std::fs::remove_file(&path).unwrap();
}
