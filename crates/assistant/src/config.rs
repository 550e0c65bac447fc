//! `[assistant]`: the model backend, the timing of the handlers and the
//! phrases spoken when the model cannot answer. Every field has a default, so
//! an empty table (or none) runs the embedded offline backend.

/// The registered name, and the name of the table.
pub const NAME: &str = "assistant";

use std::{fmt, path::PathBuf, str::FromStr, time::Duration};

use serde::{Deserialize, Serialize, Serializer};

pub use crate::jsonseq::mapper::Format;

/// The `[assistant]` table of the server configuration. Serialized (for
/// the defaults `serve` shows and merges over), the API key is only said to
/// be there.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AssistantConfig {
    /// OpenAI-compatible base URL (`http://localhost:8000/v1`); empty runs
    /// the embedded offline backend.
    pub base_url: String,
    /// Sent as `Authorization: Bearer ...` when non-empty.
    pub api_key: Secret,
    /// The `model` of the request body.
    pub model: String,
    /// `temperature` of the request body.
    pub temperature: f64,
    /// `max_tokens` of the request body.
    pub max_tokens: u32,
    /// More request body fields (`top_p`, `stop`, `response_format`, ...),
    /// merged in as given, in the order written (a JSON schema's properties
    /// are generated in that order).
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// Ask for an SSE stream (time to first token, first-token timeout).
    pub stream: bool,
    /// A file holding the system prompt; empty uses the built-in one.
    // TOML has no null: an absent key is the built-in prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt_file: Option<PathBuf>,
    /// How long `/run` waits for the model before handing over to `/continue`, in ms.
    pub run_wait_ms: u64,
    /// Kept before each handler's deadline for building the answer, in ms.
    pub answer_margin_ms: u64,
    /// A whole model call, retries included, in ms (30 s by default).
    pub call_timeout_ms: u64,
    /// Connecting to the backend, in ms.
    pub connect_timeout_ms: u64,
    /// From sending the request to the first token (or the whole answer when
    /// not streaming), in ms.
    pub first_token_timeout_ms: u64,
    /// Retries after the first attempt (connection errors, 429, 5xx).
    pub max_retries: u32,
    /// The first retry's backoff, in ms; doubles per retry, with jitter.
    pub retry_backoff_ms: u64,
    /// Consecutive failures that open the circuit breaker.
    pub breaker_failures: u32,
    /// How long the open breaker fails calls fast before one probe, in ms.
    pub breaker_cooldown_ms: u64,
    /// Model calls in flight at most; past it `/run` declines (`IsIrrelevant`).
    pub max_in_flight: usize,
    /// How long a finished call's answer is kept for `/continue` and the
    /// user's repeated question, in seconds.
    pub result_ttl_secs: u64,
    /// Finished answers kept at most.
    pub max_retained: usize,
    /// Bytes of finished answers kept at most.
    pub max_retained_bytes: usize,
    /// Dialog turns kept in the state.
    pub history_turns: usize,
    /// Bytes of dialog turns kept in the state.
    pub history_max_bytes: usize,
    /// Spoken by `/continue` when the model is still thinking, with the
    /// callback that fetches the answer: one after the other, never the same
    /// twice in a row.
    pub filler_texts: Vec<String>,
    /// Longest spoken answer, in characters, cut at a sentence boundary; the
    /// whole text goes to the card.
    pub max_speech_chars: usize,
    /// Send the system prompt once at start-up and after `warmup_idle_secs`
    /// without calls, so that the model server's prefix cache holds it:
    /// `auto` (for servers on loopback or a private network), `on`, `off`.
    pub warmup: Warmup,
    /// Idle time after which the warm-up is sent again, in seconds.
    pub warmup_idle_secs: u64,
    /// Spoken when the model failed.
    pub apology_text: String,
    /// How the model's answer is read into JSONSeq events for screen
    /// clients (`GET /llm/stream/{request_id}`): `auto`, `thinkingml`,
    /// `text` or `jsonl`.
    pub stream_format: Format,
    /// Seconds between `heartbeat` events of a waiting stream.
    pub heartbeat_secs: u64,
    /// JSONSeq streams open at once; past it a new one is refused (503).
    pub max_streams: usize,
    /// Where clients reach this server (`https://assistant.example.net`),
    /// for the stream's address in `ShowStreamDirective`; empty gives a
    /// path (`/llm/stream/...`) the client resolves against the server.
    pub public_url: String,
    /// `/llm/...` JSON answers longer than this, in bytes, are served in parts.
    pub chunk_bytes: usize,
    /// `[assistant.skills]`: multi-step skills.
    pub skills: SkillsConfig,
}

/// `[assistant.skills]`: where the skills are and how a session is bounded.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SkillsConfig {
    /// The folder of skills, one subfolder with a `SKILL.md` each. Absent:
    /// `skills/` in the working directory when there is one, else none. A
    /// folder given here must exist.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// A file whose text goes into every skill's system message after
    /// `--- System Context ---` (what the model should know of the machine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_context_file: Option<PathBuf>,
    /// Bytes of exchanges a session keeps in the state; past it the oldest
    /// after the first go.
    pub max_session_bytes: usize,
    /// Bytes of a command's cleaned output sent to the model.
    pub max_output_bytes: usize,
    /// Reload the catalog when the folder changes (it is also reloaded on SIGHUP).
    pub watch: bool,
    /// `temperature` of a skill step's model call (0.3, as the skills format
    /// sets it: docs/skills.md#prompts).
    pub temperature: f64,
    /// `max_tokens` of a skill step's model call (512, as the skills format
    /// sets it).
    pub max_tokens: u32,
    /// More request body fields of a skill step's call, over
    /// `[assistant] extra_body` (whose `response_format`, `json_schema` and
    /// `grammar` a step leaves out): e.g. a `grammar` that keeps a small
    /// local model to the step markers.
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// The command policy: regexes with an optional ` # reason`, deny
    /// before ask; a list left out keeps its default.
    pub policy: crate::skills::rules::CommandRulesConfig,
}

impl Default for SkillsConfig {
    fn default() -> SkillsConfig {
        SkillsConfig {
            dir: None,
            system_context_file: None,
            max_session_bytes: 32 * 1024,
            max_output_bytes: crate::skills::output::DEFAULT_MAX_BYTES,
            watch: true,
            temperature: 0.3,
            max_tokens: 512,
            extra_body: serde_json::Map::new(),
            policy: crate::skills::rules::CommandRulesConfig::default(),
        }
    }
}

impl SkillsConfig {
    /// The folder to load: the configured one, else `skills/` when present.
    pub fn folder(&self) -> Option<PathBuf> {
        match &self.dir {
            Some(dir) => Some(dir.clone()),
            None => Some(PathBuf::from("skills")).filter(|dir| dir.is_dir()),
        }
    }
}

impl Default for AssistantConfig {
    fn default() -> AssistantConfig {
        AssistantConfig {
            base_url: String::new(),
            api_key: Secret::default(),
            model: "default".into(),
            temperature: 0.3,
            max_tokens: 512,
            extra_body: serde_json::Map::new(),
            stream: true,
            system_prompt_file: None,
            run_wait_ms: 150,
            answer_margin_ms: 30,
            call_timeout_ms: 30_000,
            connect_timeout_ms: 2_000,
            first_token_timeout_ms: 15_000,
            max_retries: 2,
            retry_backoff_ms: 100,
            breaker_failures: 5,
            breaker_cooldown_ms: 10_000,
            max_in_flight: 256,
            result_ttl_secs: 120,
            max_retained: 10_000,
            max_retained_bytes: 64 << 20,
            history_turns: 6,
            history_max_bytes: 8 * 1024,
            filler_texts: ["Секунду.", "Ещё мгновение.", "Сейчас скажу.", "Почти готово."].map(String::from).to_vec(),
            max_speech_chars: 400,
            warmup: Warmup::Auto,
            warmup_idle_secs: 600,
            apology_text: "Извините, сейчас не получается ответить. Попробуйте ещё раз чуть позже.".into(),
            stream_format: Format::Auto,
            heartbeat_secs: 15,
            max_streams: 10_000,
            public_url: String::new(),
            chunk_bytes: 64 * 1024,
            skills: SkillsConfig::default(),
        }
    }
}

/// Body fields the scenario sets itself; `extra_body` must not replace them.
const OWN_FIELDS: &[&str] = &["model", "messages", "stream", "temperature", "max_tokens"];

impl AssistantConfig {
    /// The offline configuration pointed at `base_url` instead: what tests and
    /// benchmarks use with a mock backend.
    pub fn with_base_url(base_url: impl Into<String>) -> AssistantConfig {
        AssistantConfig { base_url: base_url.into(), ..AssistantConfig::default() }
    }

    /// Checks every value: a message per problem, keys prefixed `assistant.`.
    pub fn validate(&self) -> Result<(), Vec<String>> {
        let mut errors = Vec::new();
        let mut check = |ok: bool, message: String| {
            if !ok {
                errors.push(format!("assistant.{message}"));
            }
        };
        let url = self.base_url.trim();
        check(
            url.is_empty() || url.starts_with("http://") || url.starts_with("https://"),
            format!("base_url = {url:?}: must start with http:// or https:// (or be empty for the offline backend)"),
        );
        check(url.is_empty() || !self.model.trim().is_empty(), "model must be set when base_url is".into());
        check(
            (0.0..=2.0).contains(&self.temperature),
            format!("temperature = {}: must be 0.0..=2.0", self.temperature),
        );
        check(self.max_tokens > 0, "max_tokens must be above 0".into());
        for key in self.extra_body.keys() {
            check(!OWN_FIELDS.contains(&key.as_str()), format!("extra_body.{key}: set by the scenario itself"));
        }
        check(self.call_timeout_ms > 0, "call_timeout_ms must be above 0".into());
        check(self.connect_timeout_ms > 0, "connect_timeout_ms must be above 0".into());
        check(self.first_token_timeout_ms > 0, "first_token_timeout_ms must be above 0".into());
        check(self.breaker_failures > 0, "breaker_failures must be above 0".into());
        check(self.max_in_flight > 0, "max_in_flight must be above 0".into());
        check(self.result_ttl_secs > 0, "result_ttl_secs must be above 0".into());
        check(self.max_retained > 0, "max_retained must be above 0".into());
        check(self.max_retained_bytes > 0, "max_retained_bytes must be above 0".into());
        check(self.history_turns > 0, "history_turns must be above 0".into());
        check(self.history_max_bytes >= 256, "history_max_bytes must be at least 256".into());
        check(
            !self.filler_texts.is_empty() && self.filler_texts.iter().all(|t| !t.trim().is_empty()),
            "filler_texts must hold at least one phrase, none of them empty".into(),
        );
        check(
            self.max_speech_chars >= 40,
            format!("max_speech_chars = {}: must be at least 40", self.max_speech_chars),
        );
        check(self.warmup_idle_secs > 0, "warmup_idle_secs must be above 0".into());
        check(!self.apology_text.trim().is_empty(), "apology_text must not be empty".into());
        check(self.heartbeat_secs > 0, "heartbeat_secs must be above 0".into());
        check(self.max_streams > 0, "max_streams must be above 0".into());
        let public = self.public_url.trim();
        check(
            public.is_empty() || public.starts_with("http://") || public.starts_with("https://"),
            format!("public_url = {public:?}: must start with http:// or https:// (or be empty)"),
        );
        check(self.chunk_bytes >= 64, format!("chunk_bytes = {}: must be at least 64", self.chunk_bytes));
        let skills = &self.skills;
        if let Some(dir) = &skills.dir {
            check(dir.is_dir(), format!("skills.dir = {}: not a folder", dir.display()));
        }
        if let Some(file) = &skills.system_context_file {
            check(file.is_file(), format!("skills.system_context_file = {}: not a file", file.display()));
        }
        check(
            skills.max_session_bytes >= 1024,
            format!("skills.max_session_bytes = {}: must be at least 1024", skills.max_session_bytes),
        );
        check(
            skills.max_output_bytes >= 256,
            format!("skills.max_output_bytes = {}: must be at least 256", skills.max_output_bytes),
        );
        check(
            (0.0..=2.0).contains(&skills.temperature),
            format!("skills.temperature = {}: must be 0.0..=2.0", skills.temperature),
        );
        check(skills.max_tokens > 0, "skills.max_tokens must be above 0".into());
        for key in skills.extra_body.keys() {
            check(!OWN_FIELDS.contains(&key.as_str()), format!("skills.extra_body.{key}: set by the scenario itself"));
        }
        if let Err(error) = crate::skills::rules::CommandRules::new(&skills.policy) {
            check(false, format!("skills.policy: {error}"));
        }
        if errors.is_empty() { Ok(()) } else { Err(errors) }
    }

    /// True when no backend URL is configured.
    pub fn is_offline(&self) -> bool {
        self.base_url.trim().is_empty()
    }

    pub(crate) fn run_wait(&self) -> Duration {
        Duration::from_millis(self.run_wait_ms)
    }

    pub(crate) fn answer_margin(&self) -> Duration {
        Duration::from_millis(self.answer_margin_ms)
    }

    pub(crate) fn call_timeout(&self) -> Duration {
        Duration::from_millis(self.call_timeout_ms)
    }

    pub(crate) fn result_ttl(&self) -> Duration {
        Duration::from_secs(self.result_ttl_secs)
    }

    /// The address of call `id`'s JSONSeq stream, as a client is given it.
    pub(crate) fn stream_url(&self, id: &str) -> String {
        let base = self.public_url.trim().trim_end_matches('/');
        let mut url = format!("{base}/llm/stream/");
        // A RequestId is any text: everything but the unreserved characters
        // is percent-encoded, so it stays one path segment.
        for byte in id.bytes() {
            if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
                url.push(char::from(byte));
            } else {
                url.push_str(&format!("%{byte:02X}"));
            }
        }
        url
    }
}

/// When the system prompt is sent ahead of the first call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Warmup {
    /// For a model server on loopback or a private network (a local server
    /// keeps a prefix cache; a paid API bills the call).
    Auto,
    /// Always.
    On,
    /// Never.
    Off,
}

/// A credential: deserialized and parsed like a string, never printed.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// True when no secret is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Secret {
        Secret(value.to_owned())
    }
}

impl FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(value: &str) -> Result<Secret, Self::Err> {
        Ok(Secret(value.to_owned()))
    }
}

/// Says whether a secret is set, never what it is: `""` or `"<redacted>"`,
/// as [`fmt::Debug`] does.
impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(if self.0.is_empty() { "" } else { REDACTED })
    }
}

/// What a set secret shows instead of itself.
const REDACTED: &str = "<redacted>";

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", if self.0.is_empty() { "" } else { REDACTED })
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
        assert_eq!((config.temperature, config.max_tokens, config.call_timeout_ms), (0.3, 512, 30_000));
    }

    #[test]
    fn problems_name_their_key() {
        let mut config = AssistantConfig::with_base_url("localhost:8000");
        config.model = " ".into();
        config.extra_body.insert("messages".into(), serde_json::Value::Null);
        config.max_in_flight = 0;
        let errors = config.validate().unwrap_err();
        let all = errors.join("\n");
        assert_eq!(errors.len(), 4, "{all}");
        for key in ["assistant.base_url", "assistant.model", "assistant.extra_body.messages", "assistant.max_in_flight"]
        {
            assert!(all.contains(key), "{key} missing from {all}");
        }
    }

    #[test]
    fn the_stream_address_is_one_path_segment_under_the_public_url() {
        let mut config = AssistantConfig::default();
        assert_eq!(config.stream_url("4f1c-9a"), "/llm/stream/4f1c-9a");
        config.public_url = "https://assistant.example.net/".into();
        assert_eq!(config.stream_url("a b/ц?"), "https://assistant.example.net/llm/stream/a%20b%2F%D1%86%3F");
        config.public_url = "assistant.example.net".into();
        assert!(config.validate().unwrap_err()[0].contains("assistant.public_url"));
    }

    #[test]
    fn the_api_key_is_never_printed() {
        let config = AssistantConfig { api_key: "sk-very-secret".into(), ..AssistantConfig::default() };
        let printed = format!("{config:?}");
        assert!(!printed.contains("sk-very-secret") && printed.contains("<redacted>"), "{printed}");
    }

    #[test]
    fn serialized_the_api_key_is_only_said_to_be_there() {
        let table = |config: &AssistantConfig| toml::Table::try_from(config).unwrap();
        assert_eq!(table(&AssistantConfig::default())["api_key"].as_str(), Some(""));
        let config = AssistantConfig { api_key: "sk-very-secret".into(), ..AssistantConfig::default() };
        let printed = toml::to_string(&config).unwrap();
        assert!(!printed.contains("sk-very-secret"), "{printed}");
        assert_eq!(table(&config)["api_key"].as_str(), Some("<redacted>"));
        assert_eq!(format!("{:?}", Secret::default()), "\"\"");
    }
}
