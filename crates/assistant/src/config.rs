//! `[assistant]`: the timing of the handlers, and a section of each wing:
//! `[assistant.backend]` (the model backend), `[assistant.dialog]`,
//! `[assistant.calls]`, `[assistant.llm]` and `[assistant.skills]`. Every
//! field has a default, so an empty table (or none) runs the embedded
//! offline backend. Keys written at the top of `[assistant]` before the
//! sections existed (`model`, `max_in_flight`, ...) are still read, as the
//! section's ([`ALIASES`]).

use std::time::Duration;

use megamind_core::config::MAX_TIMEOUT_MS;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::{
    backend::config::{BackendConfig, Secret, Warmup},
    calls::config::CallsConfig,
    dialog::config::DialogConfig,
    llm::config::{Format, LlmConfig},
    skills::config::SkillsConfig,
};

/// The registered name, and the name of the table.
pub const NAME: &str = "assistant";

/// The `[assistant]` table of the server configuration. Serialized (for
/// the defaults `serve` shows and merges over), the API key is only said to
/// be there.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AssistantConfig {
    /// How long `/run` waits for the model before handing over to `/continue`, in ms.
    pub run_wait_ms: u64,
    /// Kept before each handler's deadline for building the answer, in ms.
    pub answer_margin_ms: u64,
    /// `[assistant.backend]`: the model backend.
    pub backend: BackendConfig,
    /// `[assistant.dialog]`: the prompt, the history, the phrases.
    pub dialog: DialogConfig,
    /// `[assistant.calls]`: model calls in flight and finished.
    pub calls: CallsConfig,
    /// `[assistant.llm]`: the `/llm` API for screens.
    pub llm: LlmConfig,
    /// `[assistant.skills]`: multi-step skills.
    pub skills: SkillsConfig,
}

/// Keys that moved into a section: (as once written, where it is now).
pub const ALIASES: &[(&str, &str)] = &[
    ("base_url", "backend.base_url"),
    ("api_key", "backend.api_key"),
    ("model", "backend.model"),
    ("temperature", "backend.temperature"),
    ("max_tokens", "backend.max_tokens"),
    ("extra_body", "backend.extra_body"),
    ("stream", "backend.stream"),
    ("connect_timeout_ms", "backend.connect_timeout_ms"),
    ("first_token_timeout_ms", "backend.first_token_timeout_ms"),
    ("max_retries", "backend.max_retries"),
    ("retry_backoff_ms", "backend.retry_backoff_ms"),
    ("breaker_failures", "backend.breaker_failures"),
    ("breaker_cooldown_ms", "backend.breaker_cooldown_ms"),
    ("warmup", "backend.warmup"),
    ("warmup_idle_secs", "backend.warmup_idle_secs"),
    ("system_prompt_file", "dialog.system_prompt_file"),
    ("history_turns", "dialog.history_turns"),
    ("history_max_bytes", "dialog.history_max_bytes"),
    ("filler_texts", "dialog.filler_texts"),
    ("max_speech_chars", "dialog.max_speech_chars"),
    ("apology_text", "dialog.apology_text"),
    ("call_timeout_ms", "calls.call_timeout_ms"),
    ("max_in_flight", "calls.max_in_flight"),
    ("result_ttl_secs", "calls.result_ttl_secs"),
    ("max_retained", "calls.max_retained"),
    ("max_retained_bytes", "calls.max_retained_bytes"),
    ("stream_format", "llm.stream_format"),
    ("heartbeat_secs", "llm.heartbeat_secs"),
    ("max_streams", "llm.max_streams"),
    ("public_url", "llm.public_url"),
    ("chunk_bytes", "llm.chunk_bytes"),
];

impl AssistantConfig {
    /// The defaults, with the backend at `base_url` (`kind = "openai"`):
    /// what tests and benchmarks use with a mock model server.
    pub fn with_base_url(base_url: impl Into<String>) -> AssistantConfig {
        let backend = BackendConfig { base_url: base_url.into(), ..BackendConfig::default() };
        AssistantConfig { backend, ..AssistantConfig::default() }
    }

    /// Checks every value: a message per problem, keys prefixed `assistant.`.
    pub fn validate(&self) -> Result<(), Vec<String>> {
        let mut errors = Vec::new();
        let mut check = |ok: bool, message: String| {
            if !ok {
                errors.push(format!("assistant.{message}"));
            }
        };
        for (key, ms) in [("run_wait_ms", self.run_wait_ms), ("answer_margin_ms", self.answer_margin_ms)] {
            check(ms <= MAX_TIMEOUT_MS, format!("{key} = {ms}: must be at most {MAX_TIMEOUT_MS}"));
        }
        self.backend.validate(&mut check);
        self.dialog.validate(&mut check);
        self.calls.validate(&mut check);
        self.llm.validate(&mut check);
        self.skills.validate(&mut check);
        if errors.is_empty() { Ok(()) } else { Err(errors) }
    }

    /// True when the embedded offline backend answers.
    pub fn is_offline(&self) -> bool {
        self.backend.kind() == "offline"
    }

    pub(crate) fn run_wait(&self) -> Duration {
        Duration::from_millis(self.run_wait_ms)
    }

    pub(crate) fn answer_margin(&self) -> Duration {
        Duration::from_millis(self.answer_margin_ms)
    }
}

impl Default for AssistantConfig {
    fn default() -> AssistantConfig {
        AssistantConfig {
            run_wait_ms: 150,
            answer_margin_ms: 30,
            backend: BackendConfig::default(),
            dialog: DialogConfig::default(),
            calls: CallsConfig::default(),
            llm: LlmConfig::default(),
            skills: SkillsConfig::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_offline() {
        let config = AssistantConfig::default();
        let errors = config.validate().err().unwrap_or_default();
        assert!(errors.is_empty(), "{errors:?}");
        assert!(config.is_offline());
        assert_eq!(
            (config.backend.temperature, config.backend.max_tokens, config.calls.call_timeout_ms),
            (0.3, 512, 30_000)
        );
    }

    #[test]
    fn problems_name_their_key() {
        let mut config = AssistantConfig::with_base_url("localhost:8000");
        config.backend.model = " ".into();
        config.backend.extra_body.insert("messages".into(), serde_json::Value::Null);
        config.calls.max_in_flight = 0;
        let errors = config.validate().unwrap_err();
        let all = errors.join("\n");
        assert_eq!(errors.len(), 4, "{all}");
        for key in [
            "assistant.backend.base_url",
            "assistant.backend.model",
            "assistant.backend.extra_body.messages",
            "assistant.calls.max_in_flight",
        ] {
            assert!(all.contains(key), "{key} missing from {all}");
        }
    }

    #[test]
    fn a_model_url_is_read_in_any_case_and_refused_without_its_password() {
        let config = AssistantConfig::with_base_url("HTTPS://k:pw@model.internal/v1");
        assert!(config.validate().is_ok(), "{:?}", config.validate());
        let config = AssistantConfig::with_base_url("htps://k:s3cret@model.internal/v1");
        let all = config.validate().unwrap_err().join("\n");
        assert!(all.contains("htps://k:<hidden>@model.internal/v1"), "{all}");
        assert!(!all.contains("s3cret"), "{all}");
    }

    #[test]
    fn a_session_too_small_for_a_step_s_message_is_refused() {
        let mut config = AssistantConfig::default();
        (config.skills.max_session_bytes, config.skills.max_output_bytes) = (2048, 8192);
        let errors = config.validate().unwrap_err().join("\n");
        assert!(
            errors
                .contains("assistant.skills.max_session_bytes = 2048: must be at least max_output_bytes + 1024 (9216)"),
            "{errors}"
        );
        (config.skills.max_session_bytes, config.skills.max_output_bytes) = (9216, 8192);
        assert!(config.validate().is_ok());
    }

    #[test]
    fn times_a_clock_cannot_add_are_refused() {
        let mut config = AssistantConfig::default();
        config.calls.result_ttl_secs = u64::MAX / 2;
        config.calls.call_timeout_ms = u64::MAX;
        config.calls.max_thinking_ms = u64::MAX;
        config.run_wait_ms = u64::MAX;
        config.answer_margin_ms = MAX_TIMEOUT_MS + 1;
        config.backend.connect_timeout_ms = u64::MAX;
        config.backend.first_token_timeout_ms = u64::MAX;
        config.backend.breaker_cooldown_ms = u64::MAX;
        config.backend.retry_backoff_ms = u64::MAX;
        config.backend.warmup_idle_secs = u64::MAX / 1000;
        config.llm.heartbeat_secs = u64::MAX;
        config.llm.max_streams = usize::MAX;
        let errors = config.validate().unwrap_err();
        let all = errors.join("\n");
        let keys = [
            "calls.result_ttl_secs",
            "calls.call_timeout_ms",
            "calls.max_thinking_ms",
            "assistant.run_wait_ms",
            "assistant.answer_margin_ms",
            "backend.connect_timeout_ms",
            "backend.first_token_timeout_ms",
            "backend.breaker_cooldown_ms",
            "backend.retry_backoff_ms",
            "backend.warmup_idle_secs",
            "llm.heartbeat_secs",
            "llm.max_streams",
        ];
        assert_eq!(errors.len(), keys.len(), "{all}");
        for key in keys {
            assert!(all.contains(key), "{key} missing from {all}");
        }
        // The longest times allowed are allowed.
        let mut longest = AssistantConfig { run_wait_ms: MAX_TIMEOUT_MS, ..AssistantConfig::default() };
        longest.backend.breaker_cooldown_ms = MAX_TIMEOUT_MS;
        longest.backend.warmup_idle_secs = MAX_TIMEOUT_MS / 1000;
        longest.llm.heartbeat_secs = 3600;
        longest.llm.max_streams = 1_000_000;
        assert_eq!(longest.validate(), Ok(()));
    }

    #[test]
    fn the_stream_address_is_one_signed_path_segment_under_the_public_url() {
        let mut config = AssistantConfig::default();
        let key = megamind_core::rules::auth::AddressKey::from_secret("k");
        let (path, query) =
            config.llm.stream_url("4f1c-9a", &key).split_once('?').map(|(p, q)| (p.to_owned(), q.to_owned())).unwrap();
        assert_eq!(path, "/llm/stream/4f1c-9a");
        let now = megamind_core::rules::auth::signed::unix_now();
        assert_eq!(key.verify("4f1c-9a", Some(&query), now), Ok(()));
        assert_eq!(
            key.verify("4f1c-9a", Some(&query), now + config.llm.address_ttl_secs + 1),
            Err(megamind_core::rules::auth::SignatureError::Expired)
        );
        config.llm.public_url = "https://assistant.example.net/".into();
        let url = config.llm.stream_url("a b/ц?", &key);
        assert!(url.starts_with("https://assistant.example.net/llm/stream/a%20b%2F%D1%86%3F?exp="), "{url}");
        config.llm.public_url = "assistant.example.net".into();
        assert!(config.validate().unwrap_err()[0].contains("assistant.llm.public_url"));
        config.llm.public_url = String::new();
        config.llm.signing_key = "short".into();
        assert!(config.validate().unwrap_err()[0].contains("assistant.llm.signing_key: 5 bytes"));
    }

    #[test]
    fn the_api_key_is_never_printed() {
        let mut config = AssistantConfig::default();
        config.backend.api_key = "sk-very-secret".into();
        let printed = format!("{config:?}");
        assert!(!printed.contains("sk-very-secret") && printed.contains("<hidden>"), "{printed}");
    }

    #[test]
    fn serialized_the_api_key_is_only_said_to_be_there() {
        let table = |config: &AssistantConfig| toml::Table::try_from(config).unwrap();
        assert_eq!(table(&AssistantConfig::default())["backend"]["api_key"].as_str(), Some(""));
        let mut config = AssistantConfig::default();
        config.backend.api_key = "sk-very-secret".into();
        let printed = toml::to_string(&config).unwrap();
        assert!(!printed.contains("sk-very-secret"), "{printed}");
        assert_eq!(table(&config)["backend"]["api_key"].as_str(), Some("<hidden>"));
        assert_eq!(format!("{:?}", Secret::default()), "\"\"");
    }
}
