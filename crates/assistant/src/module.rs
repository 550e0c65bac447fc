//! The assistant as `serve` builds it: its `[assistant]` table with every
//! default, its flags (each setting one key of the table, derived from the
//! configuration structs: [`flags`]) and `build`, which reads and checks
//! the table, builds the backend its `kind` names, registers the metrics and
//! routes and makes the scenario.

use std::sync::Arc;

use megamind_core::{
    config::{Problem, problem, sources::with_aliases},
    scenario::{
        Scenario,
        module::{Flag, ScenarioModule, Setup, SetupError, parse_table},
    },
};
use serde_json::Value;

use crate::{
    assistant::Assistant,
    backend::{BUILT_IN, Factory, factory_of},
    config::{ALIASES, AssistantConfig, NAME},
    error::AssistantError,
    llm::routes,
};

/// The assistant scenario's module: the built-in backends, and any added
/// with [`AssistantModule::with_backend`].
#[derive(Debug, Clone)]
pub struct AssistantModule {
    backends: Vec<(&'static str, Factory)>,
}

impl Default for AssistantModule {
    fn default() -> AssistantModule {
        AssistantModule { backends: BUILT_IN.to_vec() }
    }
}

impl AssistantModule {
    /// The module with one more backend, chosen by `[assistant.backend]
    /// kind = "<kind>"` (a kind already known is replaced).
    pub fn with_backend(mut self, kind: &'static str, factory: Factory) -> AssistantModule {
        self.backends.retain(|(known, _)| *known != kind);
        self.backends.push((kind, factory));
        self
    }
}

/// Reads `[assistant]`: keys written where they once were (`model`, ...)
/// read as their section's ([`ALIASES`]).
pub fn config_of(table: toml::Table) -> Result<AssistantConfig, SetupError> {
    parse_table(NAME, with_aliases(table, ALIASES))
}

impl ScenarioModule for AssistantModule {
    fn name(&self) -> &'static str {
        NAME
    }

    fn defaults(&self) -> toml::Table {
        // Every field is a string, number, bool or table, and `Secret`
        // writes a string: serializing the defaults cannot fail.
        toml::Table::try_from(AssistantConfig::default()).unwrap_or_default()
    }

    fn aliases(&self) -> &'static [(&'static str, &'static str)] {
        ALIASES
    }

    fn flags(&self) -> Vec<Flag> {
        flags()
    }

    fn check(&self, table: &toml::Table) -> Vec<Problem> {
        let table = with_aliases(table.clone(), ALIASES);
        let config = match problem::read::<AssistantConfig>(&table, &self.defaults(), NAME) {
            Ok(config) => config,
            Err(problems) => return problems,
        };
        let mut problems: Vec<Problem> =
            config.validate().err().unwrap_or_default().into_iter().map(Problem::from_message).collect();
        if let Err(AssistantError::Setup(problem)) = factory_of(config.backend.kind(), &self.backends) {
            problems.push(Problem::from_message(format!("{NAME}.{problem}")));
        }
        problems
    }

    fn build(&self, table: toml::Table, setup: &mut Setup<'_>) -> Result<Arc<dyn Scenario>, SetupError> {
        let config = config_of(table)?;
        config.validate().map_err(|problems| SetupError { scenario: NAME, problems })?;
        let assistant =
            Assistant::from_config_with(&config, setup.metrics, &self.backends).map_err(|error| match error {
                AssistantError::Setup(problem) => SetupError::new(NAME, problem),
                AssistantError::Metrics(error) => {
                    SetupError::new(NAME, format!("cannot register the metrics: {error}"))
                }
            })?;
        let assistant =
            assistant.with_stores(setup.stores()).map_err(|error| SetupError::new(NAME, error.to_string()))?;
        let assistant = Arc::new(assistant);
        if config.llm.signing_key.is_empty() {
            setup.key_of_this_process("assistant.llm.signing_key");
        }
        routes::routes(assistant.llm_sources(), setup);
        Ok(assistant)
    }
}

/// The flags of `serve`, one per key of `[assistant]` a command line can
/// set (text, numbers, booleans, choices, lists of text; not tables),
/// derived from [`AssistantConfig`]'s JSON schema: `--llm-<key>` for the
/// shell's keys and every section's but the skills', `--skills-<key>` for
/// `[assistant.skills]`; the help is the key's doc comment; each is also read
/// from `MEGAMIND_<FLAG>`; a write-only key (the API key) is a secret.
pub fn flags() -> Vec<Flag> {
    let schema = schemars::schema_for!(AssistantConfig);
    let root = schema.as_value();
    let mut flags = Vec::new();
    for (name, property) in properties(root) {
        match section(root, property) {
            Some(section) => {
                let prefix = if name == "skills" { "skills" } else { "llm" };
                for (key, property) in properties(section) {
                    if let Some(flag) = flag(root, prefix, &format!("{name}.{key}"), key, property) {
                        flags.push(flag);
                    }
                }
            }
            None => flags.extend(flag(root, "llm", name, name, property)),
        }
    }
    flags
}

/// The properties of an object schema, in the order its struct declares them.
fn properties(schema: &Value) -> impl Iterator<Item = (&str, &Value)> {
    let properties = schema.get("properties").and_then(Value::as_object);
    properties.into_iter().flatten().map(|(name, property)| (name.as_str(), property))
}

/// What `property` refers to (`{"$ref": "#/$defs/Name"}`), else itself.
fn resolved<'a>(root: &'a Value, property: &'a Value) -> &'a Value {
    let reference = property.get("$ref").and_then(Value::as_str);
    let name = reference.and_then(|reference| reference.strip_prefix("#/$defs/"));
    name.and_then(|name| root.get("$defs")?.get(name)).unwrap_or(property)
}

/// The section `property` is (a struct of its own), if it is one.
fn section<'a>(root: &'a Value, property: &'a Value) -> Option<&'a Value> {
    Some(resolved(root, property)).filter(|schema| schema.get("properties").is_some())
}

/// The flag of `key` (its last segment `name`), unless a command line
/// cannot write it (a table).
fn flag(root: &Value, prefix: &str, key: &str, name: &str, property: &Value) -> Option<Flag> {
    let schema = resolved(root, property);
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(one)) => vec![one.as_str()],
        Some(Value::Array(many)) => many.iter().filter_map(Value::as_str).collect(),
        // A choice among words (`oneOf` / `enum`).
        _ => vec!["string"],
    };
    if types.contains(&"object") {
        return None;
    }
    let long = format!("{prefix}-{}", name.replace('_', "-"));
    let env = format!("MEGAMIND_{}", long.replace('-', "_").to_uppercase());
    let help = property.get("description").or_else(|| schema.get("description")).and_then(Value::as_str);
    // One line: the doc comment's lines joined.
    let help = help.unwrap_or_default().split_whitespace().collect::<Vec<_>>().join(" ");
    let flag = Flag::named(long, key.to_owned(), help).env(env);
    let secret = schema.get("writeOnly").and_then(Value::as_bool).unwrap_or(false);
    Some(if secret { flag.secret() } else { flag })
}

#[cfg(test)]
mod tests {
    use megamind_core::scenario::module::Setup;

    use super::*;

    fn build(table: toml::Table) -> Result<Arc<dyn Scenario>, SetupError> {
        AssistantModule::default().build(table, &mut Setup::new(&prometheus::Registry::new()))
    }

    fn refused(table: toml::Table) -> SetupError {
        build(table).err().expect("refused")
    }

    #[test]
    fn the_defaults_are_the_default_config_and_build() {
        let defaults = AssistantModule::default().defaults();
        let config: AssistantConfig = parse_table(NAME, defaults.clone()).unwrap();
        assert_eq!(config, AssistantConfig::default());
        assert_eq!(defaults["run_wait_ms"].as_integer(), Some(150));
        assert_eq!(defaults["backend"]["api_key"].as_str(), Some(""), "an empty key says it is empty");
        let registry = prometheus::Registry::new();
        let mut setup = Setup::new(&registry);
        AssistantModule::default().build(defaults, &mut setup).unwrap();
        assert!(registry.gather().iter().any(|family| family.name() == crate::metrics::IN_FLIGHT));
        let routes: Vec<String> = setup.into_routes().into_iter().map(|(path, _)| path).collect();
        assert_eq!(routes, ["/llm/stream/{request_id}", "/llm/answers/{request_id}", "/llm/skills", "/llm/schema"]);
        assert!(build(toml::Table::new()).is_ok(), "an empty table is the defaults");
    }

    /// The flags `serve` had before the table had sections: each still
    /// sets the key it set, read where that key is now.
    const FLAGS_BEFORE_SECTIONS: [(&str, &str); 33] = [
        ("llm-base-url", "base_url"),
        ("llm-api-key", "api_key"),
        ("llm-model", "model"),
        ("llm-system-prompt-file", "system_prompt_file"),
        ("llm-stream", "stream"),
        ("llm-run-wait-ms", "run_wait_ms"),
        ("llm-call-timeout-ms", "call_timeout_ms"),
        ("llm-connect-timeout-ms", "connect_timeout_ms"),
        ("llm-first-token-timeout-ms", "first_token_timeout_ms"),
        ("llm-max-in-flight", "max_in_flight"),
        ("llm-result-ttl-secs", "result_ttl_secs"),
        ("llm-temperature", "temperature"),
        ("llm-max-tokens", "max_tokens"),
        ("llm-answer-margin-ms", "answer_margin_ms"),
        ("llm-max-retries", "max_retries"),
        ("llm-retry-backoff-ms", "retry_backoff_ms"),
        ("llm-breaker-failures", "breaker_failures"),
        ("llm-breaker-cooldown-ms", "breaker_cooldown_ms"),
        ("llm-max-retained", "max_retained"),
        ("llm-max-retained-bytes", "max_retained_bytes"),
        ("llm-history-turns", "history_turns"),
        ("llm-history-max-bytes", "history_max_bytes"),
        ("llm-filler-texts", "filler_texts"),
        ("llm-max-speech-chars", "max_speech_chars"),
        ("llm-warmup", "warmup"),
        ("llm-warmup-idle-secs", "warmup_idle_secs"),
        ("llm-apology-text", "apology_text"),
        ("llm-stream-format", "stream_format"),
        ("llm-heartbeat-secs", "heartbeat_secs"),
        ("llm-max-streams", "max_streams"),
        ("llm-public-url", "public_url"),
        ("llm-chunk-bytes", "chunk_bytes"),
        ("skills-dir", "skills.dir"),
    ];

    #[test]
    fn every_flag_sets_a_key_of_the_table_from_its_own_variable() {
        let flags = AssistantModule::default().flags();
        let defaults = AssistantModule::default().defaults();
        for flag in &flags {
            // The skills table's keys are `--skills-*`, every other key's `--llm-*`.
            let (section, name) = flag.key.rsplit_once('.').unwrap_or(("", &flag.key));
            let long = if section == "skills" { format!("skills-{name}") } else { format!("llm-{name}") };
            assert_eq!(flag.long, long.replace('_', "-"), "{flag:?}");
            let env = format!("MEGAMIND_{}", flag.long.replace('-', "_").to_uppercase());
            assert_eq!(flag.env.as_deref(), Some(env.as_str()), "{flag:?}");
            assert_eq!(flag.secret, ["backend.api_key", "llm.signing_key"].contains(&&*flag.key), "{flag:?}");
            assert!(!flag.help.contains("[default"), "the core appends defaults: {flag:?}");
            assert!(!flag.help.is_empty() && !flag.help.contains('\n'), "one line from its doc comment: {flag:?}");
            // The keys without a default: no file, the built-in prompt; no
            // folder, ./skills when present; no kind, by `base_url`.
            let optional = ["dialog.system_prompt_file", "skills.dir", "skills.system_context_file", "backend.kind"];
            let found = megamind_core::config::sources::lookup(&defaults, &flag.key).is_some();
            assert!(found || optional.contains(&&*flag.key), "{flag:?}");
        }
        let mut longs: Vec<&str> = flags.iter().map(|f| &*f.long).collect();
        longs.sort_unstable();
        longs.dedup();
        assert_eq!(longs.len(), flags.len(), "one flag per key, no two keys on one name");
        for (long, key) in FLAGS_BEFORE_SECTIONS {
            let flag = flags.iter().find(|flag| flag.long == long).unwrap_or_else(|| panic!("--{long} is gone"));
            let moved = ALIASES.iter().find(|(old, _)| *old == key).map_or(key, |(_, new)| *new);
            assert_eq!(flag.key, moved, "--{long}");
        }
        assert!(flags.len() > FLAGS_BEFORE_SECTIONS.len(), "every settable key has one: {}", flags.len());
    }

    #[test]
    fn a_configured_backend_kind_picks_its_factory() {
        let error = refused(toml::toml! { [backend] kind = "tea" });
        assert!(error.to_string().contains("backend.kind = \"tea\": no such backend (openai, offline)"), "{error}");
        let refused_openai = refused(toml::toml! { [backend] kind = "openai" });
        assert!(refused_openai.to_string().contains("backend.base_url must be set"), "{refused_openai}");
        let config = config_of(toml::toml! { base_url = "http://llm/v1" }).unwrap();
        assert_eq!(config.backend.kind(), "openai", "a base_url alone is the OpenAI-compatible backend");
        assert_eq!(AssistantConfig::default().backend.kind(), "offline");
    }

    #[test]
    fn a_bad_table_is_refused_naming_the_key() {
        let table = |text: &str| text.parse::<toml::Table>().unwrap();
        let error = refused(table("run_wait_ms = \"soon\""));
        assert_eq!(error.scenario, "assistant");
        assert!(error.to_string().contains("run_wait_ms"), "{error}");
        let error = refused(table("base_ur = \"http://llm\""));
        assert!(error.to_string().contains("base_ur"), "{error}");
        let error = refused(table("max_in_flight = 0\nbase_url = \"ftp://llm\""));
        assert_eq!(error.problems.len(), 2, "every problem at once: {error}");
        assert!(error.to_string().contains("assistant.calls.max_in_flight"), "{error}");
        assert!(error.to_string().contains("assistant.backend.base_url"), "{error}");
        let error = refused(table("system_prompt_file = \"/nonexistent/prompt.txt\""));
        assert!(error.to_string().contains("assistant.dialog.system_prompt_file"), "{error}");
        let error = refused(table("[skills]\ndir = \"/nonexistent/skills\"\npolicy.deny = [\"(unclosed\"]"));
        assert!(error.to_string().contains("assistant.skills.dir"), "{error}");
        assert!(error.to_string().contains("assistant.skills.policy"), "{error}");
        let error = refused(table("[skills]\nmax_sesion_bytes = 1"));
        assert!(error.to_string().contains("max_sesion_bytes"), "a misspelt key is named: {error}");
    }

    #[test]
    fn the_api_key_never_shows() {
        let table: toml::Table = "api_key = \"sk-very-secret\"".parse().unwrap();
        let config = config_of(table.clone()).unwrap();
        assert_eq!(config.backend.api_key.expose(), "sk-very-secret");
        assert!(!format!("{config:?}").contains("sk-very-secret"));
        assert!(!AssistantModule::default().defaults().to_string().contains("sk-"));
        assert!(!toml::to_string(&config).unwrap().contains("sk-very-secret"));
        let error = refused(toml::Table::from_iter([
            ("api_key".to_owned(), toml::Value::from("sk-very-secret")),
            ("max_tokens".to_owned(), toml::Value::from(0)),
        ]));
        assert!(!format!("{error} {error:?}").contains("sk-very-secret"), "{error:?}");
    }
}
