//! The assistant as `serve` builds it: its `[assistant]` table with every
//! default, its `--llm-*` flags (each setting one key of the table) and
//! `build`, which reads and checks the table, registers the metrics and
//! makes the scenario.

use crate::config::NAME;
use std::sync::Arc;

use crate::assistant::Assistant;
use crate::config::AssistantConfig;
use crate::error::AssistantError;
use megamind_core::scenario::{
    Scenario,
    module::{Flag, ScenarioModule, Setup, SetupError, parse_table},
};

/// The assistant scenario's module.
#[derive(Debug, Clone, Copy, Default)]
pub struct AssistantModule;

/// The flags of `serve`: long name, key, environment variable, help.
const FLAGS: [Flag; 33] = [
    Flag::new(
        "llm-base-url",
        "base_url",
        "OpenAI-compatible base URL, e.g. http://localhost:11434/v1; none runs the offline backend",
    )
    .env("MEGAMIND_LLM_BASE_URL"),
    Flag::new("llm-api-key", "api_key", "API key, sent as `Authorization: Bearer`; never logged")
        .env("MEGAMIND_LLM_API_KEY")
        .secret(),
    Flag::new("llm-model", "model", "The `model` of the request").env("MEGAMIND_LLM_MODEL"),
    Flag::new("llm-system-prompt-file", "system_prompt_file", "A file with the system prompt (else the built-in one)")
        .env("MEGAMIND_LLM_SYSTEM_PROMPT_FILE"),
    Flag::new("llm-stream", "stream", "Stream the answer over SSE (true/false)").env("MEGAMIND_LLM_STREAM"),
    Flag::new(
        "llm-run-wait-ms",
        "run_wait_ms",
        "How long `/run` waits for the model before handing over to `/continue`, in ms",
    )
    .env("MEGAMIND_LLM_RUN_WAIT_MS"),
    Flag::new("llm-call-timeout-ms", "call_timeout_ms", "A whole model call, retries included, in ms")
        .env("MEGAMIND_LLM_CALL_TIMEOUT_MS"),
    Flag::new("llm-connect-timeout-ms", "connect_timeout_ms", "Connecting to the model server, in ms")
        .env("MEGAMIND_LLM_CONNECT_TIMEOUT_MS"),
    Flag::new("llm-first-token-timeout-ms", "first_token_timeout_ms", "From the request to the first token, in ms")
        .env("MEGAMIND_LLM_FIRST_TOKEN_TIMEOUT_MS"),
    Flag::new("llm-max-in-flight", "max_in_flight", "Model calls in flight before `/run` declines")
        .env("MEGAMIND_LLM_MAX_IN_FLIGHT"),
    Flag::new(
        "llm-result-ttl-secs",
        "result_ttl_secs",
        "Seconds a finished answer is kept for `/continue` and the user's repeat",
    )
    .env("MEGAMIND_LLM_RESULT_TTL_SECS"),
    Flag::new("llm-temperature", "temperature", "The `temperature` of the model request")
        .env("MEGAMIND_LLM_TEMPERATURE"),
    Flag::new("llm-max-tokens", "max_tokens", "The `max_tokens` of the model request").env("MEGAMIND_LLM_MAX_TOKENS"),
    Flag::new(
        "llm-answer-margin-ms",
        "answer_margin_ms",
        "Kept before each handler's deadline for building the answer, in ms",
    )
    .env("MEGAMIND_LLM_ANSWER_MARGIN_MS"),
    Flag::new("llm-max-retries", "max_retries", "Retries after the first attempt (connection errors, 429, 5xx)")
        .env("MEGAMIND_LLM_MAX_RETRIES"),
    Flag::new("llm-retry-backoff-ms", "retry_backoff_ms", "The first retry's back-off, doubling per retry, in ms")
        .env("MEGAMIND_LLM_RETRY_BACKOFF_MS"),
    Flag::new("llm-breaker-failures", "breaker_failures", "Consecutive failures that open the circuit breaker")
        .env("MEGAMIND_LLM_BREAKER_FAILURES"),
    Flag::new(
        "llm-breaker-cooldown-ms",
        "breaker_cooldown_ms",
        "How long the open breaker fails calls fast before one probe, in ms",
    )
    .env("MEGAMIND_LLM_BREAKER_COOLDOWN_MS"),
    Flag::new("llm-max-retained", "max_retained", "Finished answers kept at most").env("MEGAMIND_LLM_MAX_RETAINED"),
    Flag::new("llm-max-retained-bytes", "max_retained_bytes", "Bytes of finished answers kept at most")
        .env("MEGAMIND_LLM_MAX_RETAINED_BYTES"),
    Flag::new("llm-history-turns", "history_turns", "Dialog turns kept in the state").env("MEGAMIND_LLM_HISTORY_TURNS"),
    Flag::new("llm-history-max-bytes", "history_max_bytes", "Bytes of dialog turns kept in the state")
        .env("MEGAMIND_LLM_HISTORY_MAX_BYTES"),
    Flag::new(
        "llm-filler-texts",
        "filler_texts",
        "Phrases spoken while the model is still thinking, as a TOML array: '[\"Секунду.\", \"Ещё мгновение.\"]'",
    )
    .env("MEGAMIND_LLM_FILLER_TEXTS"),
    Flag::new("llm-max-speech-chars", "max_speech_chars", "Longest spoken answer in characters (the card has it all)")
        .env("MEGAMIND_LLM_MAX_SPEECH_CHARS"),
    Flag::new("llm-warmup", "warmup", "Send the system prompt ahead of the first call: auto, on or off")
        .env("MEGAMIND_LLM_WARMUP"),
    Flag::new("llm-warmup-idle-secs", "warmup_idle_secs", "Idle seconds after which the warm-up is sent again")
        .env("MEGAMIND_LLM_WARMUP_IDLE_SECS"),
    Flag::new("llm-apology-text", "apology_text", "Spoken when the model failed").env("MEGAMIND_LLM_APOLOGY_TEXT"),
    Flag::new(
        "llm-stream-format",
        "stream_format",
        "How the answer is read into JSONSeq events: auto, thinkingml, text or jsonl",
    )
    .env("MEGAMIND_LLM_STREAM_FORMAT"),
    Flag::new("llm-heartbeat-secs", "heartbeat_secs", "Seconds between heartbeats of a waiting JSONSeq stream")
        .env("MEGAMIND_LLM_HEARTBEAT_SECS"),
    Flag::new("llm-max-streams", "max_streams", "JSONSeq streams open at once before new ones are refused")
        .env("MEGAMIND_LLM_MAX_STREAMS"),
    Flag::new(
        "llm-public-url",
        "public_url",
        "Where clients reach this server, for the stream address in ShowStreamDirective",
    )
    .env("MEGAMIND_LLM_PUBLIC_URL"),
    Flag::new("llm-chunk-bytes", "chunk_bytes", "/llm JSON answers longer than this are served in parts, in bytes")
        .env("MEGAMIND_LLM_CHUNK_BYTES"),
    Flag::new(
        "skills-dir",
        "skills.dir",
        "The skills folder (one subfolder with a SKILL.md per skill); none: ./skills when present",
    )
    .env("MEGAMIND_SKILLS_DIR"),
];

impl ScenarioModule for AssistantModule {
    fn name(&self) -> &'static str {
        NAME
    }

    fn defaults(&self) -> toml::Table {
        // Every field is a string, number, bool or table, and `Secret`
        // writes a string: serializing the defaults cannot fail.
        toml::Table::try_from(AssistantConfig::default()).unwrap_or_default()
    }

    fn flags(&self) -> Vec<Flag> {
        FLAGS.to_vec()
    }

    fn build(&self, table: toml::Table, setup: &mut Setup<'_>) -> Result<Arc<dyn Scenario>, SetupError> {
        let config: AssistantConfig = parse_table(NAME, table)?;
        config.validate().map_err(|problems| SetupError { scenario: NAME, problems })?;
        let assistant = Assistant::from_config(&config, setup.metrics).map_err(|error| match error {
            AssistantError::Setup(problem) => SetupError::new(NAME, problem),
            AssistantError::Metrics(error) => SetupError::new(NAME, format!("cannot register the metrics: {error}")),
        })?;
        let assistant = Arc::new(assistant);
        crate::llm::routes::routes(assistant.llm_sources(), setup);
        Ok(assistant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use megamind_core::scenario::module::Setup;

    fn build(table: toml::Table) -> Result<Arc<dyn Scenario>, SetupError> {
        AssistantModule.build(table, &mut Setup::new(&prometheus::Registry::new()))
    }

    fn refused(table: toml::Table) -> SetupError {
        build(table).err().expect("refused")
    }

    #[test]
    fn the_defaults_are_the_default_config_and_build() {
        let defaults = AssistantModule.defaults();
        let config: AssistantConfig = parse_table(NAME, defaults.clone()).unwrap();
        assert_eq!(config, AssistantConfig::default());
        assert_eq!(defaults["run_wait_ms"].as_integer(), Some(150));
        assert_eq!(defaults["api_key"].as_str(), Some(""), "an empty key says it is empty");
        let registry = prometheus::Registry::new();
        let mut setup = Setup::new(&registry);
        AssistantModule.build(defaults, &mut setup).unwrap();
        assert!(registry.gather().iter().any(|family| family.name() == super::super::metrics::IN_FLIGHT));
        let routes: Vec<String> = setup.into_routes().into_iter().map(|(path, _)| path).collect();
        assert_eq!(routes, ["/llm/stream/{request_id}", "/llm/answers/{request_id}", "/llm/skills", "/llm/schema"]);
        assert!(build(toml::Table::new()).is_ok(), "an empty table is the defaults");
    }

    #[test]
    fn every_flag_sets_a_key_of_the_table_from_its_own_variable() {
        let flags = AssistantModule.flags();
        assert_eq!(flags.len(), 33);
        let defaults = AssistantModule.defaults();
        for flag in &flags {
            // The model's keys are `--llm-*`; the skills table's `--skills-*`.
            let long = match flag.key.strip_prefix("skills.") {
                Some(key) => format!("skills-{key}"),
                None => format!("llm-{}", flag.key),
            };
            assert_eq!(flag.long, long.replace('_', "-"), "{flag:?}");
            let env = format!("MEGAMIND_{}", flag.long.replace('-', "_").to_uppercase());
            assert_eq!(flag.env, Some(env.as_str()), "{flag:?}");
            assert_eq!(flag.secret, flag.key == "api_key", "{flag:?}");
            assert!(!flag.help.contains("[default"), "the core appends defaults: {flag:?}");
            // The keys without a default: no file, the built-in prompt; no
            // folder, ./skills when present.
            let optional = ["system_prompt_file", "skills.dir"];
            assert!(defaults.contains_key(flag.key) || optional.contains(&flag.key), "{flag:?}");
        }
        let mut keys: Vec<&str> = flags.iter().map(|f| f.key).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), flags.len(), "one flag per key");
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
        assert!(error.to_string().contains("assistant.max_in_flight"), "{error}");
        assert!(error.to_string().contains("assistant.base_url"), "{error}");
        let error = refused(table("system_prompt_file = \"/nonexistent/prompt.txt\""));
        assert!(error.to_string().contains("system_prompt_file"), "{error}");
        let error = refused(table("[skills]\ndir = \"/nonexistent/skills\"\npolicy.deny = [\"(unclosed\"]"));
        assert!(error.to_string().contains("assistant.skills.dir"), "{error}");
        assert!(error.to_string().contains("assistant.skills.policy"), "{error}");
        let error = refused(table("[skills]\nmax_sesion_bytes = 1"));
        assert!(error.to_string().contains("max_sesion_bytes"), "a misspelt key is named: {error}");
    }

    #[test]
    fn the_api_key_never_shows() {
        let table: toml::Table = "api_key = \"sk-very-secret\"".parse().unwrap();
        let config: AssistantConfig = parse_table(NAME, table.clone()).unwrap();
        assert_eq!(config.api_key.expose(), "sk-very-secret");
        assert!(!format!("{config:?}").contains("sk-very-secret"));
        assert!(!AssistantModule.defaults().to_string().contains("sk-"));
        assert!(!toml::to_string(&config).unwrap().contains("sk-very-secret"));
        let error = refused(toml::Table::from_iter([
            ("api_key".to_owned(), toml::Value::from("sk-very-secret")),
            ("max_tokens".to_owned(), toml::Value::from(0)),
        ]));
        assert!(!format!("{error} {error:?}").contains("sk-very-secret"), "{error:?}");
    }
}
