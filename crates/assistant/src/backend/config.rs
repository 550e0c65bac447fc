//! `[assistant.backend]`: which model backend answers (`kind`) and how it is
//! reached: the model server, the request body, timeouts, retries, the
//! circuit breaker and the warm-up.

use std::{fmt, str::FromStr};

use megamind_core::config::{HIDDEN, MAX_TIMEOUT_MS};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize, Serializer};

/// The `[assistant.backend]` table.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct BackendConfig {
    /// Which backend answers: `openai` (any OpenAI-compatible server) or
    /// `offline` (embedded, no model); unset: `openai` when `base_url` is
    /// set, else `offline`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// OpenAI-compatible base URL, e.g. `http://localhost:11434/v1`.
    pub base_url: String,
    /// API key, sent as `Authorization: Bearer`; never logged.
    pub api_key: Secret,
    /// The `model` of the request.
    pub model: String,
    /// The `temperature` of the model request.
    pub temperature: f64,
    /// The `max_tokens` of the model request.
    pub max_tokens: u32,
    /// More request body fields (`top_p`, `stop`, `response_format`, ...),
    /// merged in as given, in the order written (a JSON schema's properties
    /// are generated in that order).
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// Stream the answer over SSE (time to first token, first-token timeout).
    pub stream: bool,
    /// Connecting to the model server, in ms.
    pub connect_timeout_ms: u64,
    /// From the request to the first token of a streamed answer, in ms; an
    /// answer not streamed is bounded by the call's timeout alone.
    pub first_token_timeout_ms: u64,
    /// Retries after the first attempt (connection errors, 429, 5xx).
    pub max_retries: u32,
    /// The first retry's back-off, doubling per retry with jitter, in ms.
    pub retry_backoff_ms: u64,
    /// Consecutive failures that open the circuit breaker.
    pub breaker_failures: u32,
    /// How long the open breaker fails calls fast before one probe, in ms.
    pub breaker_cooldown_ms: u64,
    /// Send the system prompt ahead of the first call, so that the model
    /// server's prefix cache holds it: `auto` (servers on loopback or a
    /// private network), `on` or `off`.
    pub warmup: Warmup,
    /// Idle seconds after which the warm-up is sent again.
    pub warmup_idle_secs: u64,
}

impl Default for BackendConfig {
    fn default() -> BackendConfig {
        BackendConfig {
            kind: None,
            base_url: String::new(),
            api_key: Secret::default(),
            model: "default".into(),
            temperature: 0.3,
            max_tokens: 512,
            extra_body: serde_json::Map::new(),
            stream: true,
            connect_timeout_ms: 2_000,
            first_token_timeout_ms: 15_000,
            max_retries: 2,
            retry_backoff_ms: 100,
            breaker_failures: 5,
            breaker_cooldown_ms: 10_000,
            warmup: Warmup::Auto,
            warmup_idle_secs: 600,
        }
    }
}

/// Body fields the scenario sets itself; `extra_body` must not replace them.
const OWN_FIELDS: &[&str] = &["model", "messages", "stream", "temperature", "max_tokens"];

impl BackendConfig {
    /// The backend's kind: as configured, else by whether `base_url` is set.
    pub fn kind(&self) -> &str {
        match &self.kind {
            Some(kind) => kind.trim(),
            None if self.base_url.trim().is_empty() => "offline",
            None => "openai",
        }
    }

    /// Checks every value, reporting each problem with its key under `backend.`.
    pub(crate) fn validate(&self, check: &mut dyn FnMut(bool, String)) {
        let url = self.base_url.trim();
        // Schemes are read in any case (`HTTPS://`), as the client reads them.
        let scheme = |scheme: &str| url.get(..scheme.len()).is_some_and(|start| start.eq_ignore_ascii_case(scheme));
        check(
            url.is_empty() || scheme("http://") || scheme("https://"),
            format!(
                "backend.base_url = {:?}: must start with http:// or https:// (or be empty for the offline backend)",
                megamind_core::text::redact_url(url)
            ),
        );
        check(self.kind() != "openai" || !url.is_empty(), "backend.base_url must be set for kind = \"openai\"".into());
        check(url.is_empty() || !self.model.trim().is_empty(), "backend.model must be set when base_url is".into());
        check_sampling("backend", self.temperature, self.max_tokens, &self.extra_body, check);
        // Upper bounds as the server's own times have: a clock cannot add
        // a time of millions of years, and would panic at the first call.
        for (key, ms) in [
            ("connect_timeout_ms", self.connect_timeout_ms),
            ("first_token_timeout_ms", self.first_token_timeout_ms),
            ("breaker_cooldown_ms", self.breaker_cooldown_ms.max(1)),
            ("retry_backoff_ms", self.retry_backoff_ms.max(1)),
        ] {
            check((1..=MAX_TIMEOUT_MS).contains(&ms), format!("backend.{key} = {ms}: must be 1..={MAX_TIMEOUT_MS}"));
        }
        check(self.breaker_failures > 0, "backend.breaker_failures must be above 0".into());
        let idle = self.warmup_idle_secs;
        check(
            (1..=MAX_TIMEOUT_MS / 1000).contains(&idle),
            format!("backend.warmup_idle_secs = {idle}: must be 1..={}", MAX_TIMEOUT_MS / 1000),
        );
    }
}

/// Checks a model call's sampling settings (`temperature`, `max_tokens`,
/// `extra_body`), as `[assistant.backend]` and `[assistant.skills]` write
/// them, each problem under `section.`.
pub(crate) fn check_sampling(
    section: &str,
    temperature: f64,
    max_tokens: u32,
    extra_body: &serde_json::Map<String, serde_json::Value>,
    check: &mut dyn FnMut(bool, String),
) {
    check((0.0..=2.0).contains(&temperature), format!("{section}.temperature = {temperature}: must be 0.0..=2.0"));
    check(max_tokens > 0, format!("{section}.max_tokens must be above 0"));
    for key in extra_body.keys() {
        check(!OWN_FIELDS.contains(&key.as_str()), format!("{section}.extra_body.{key}: set by the scenario itself"));
    }
}

/// When the system prompt is sent ahead of the first call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
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

/// Says whether a secret is set, never what it is: `""` or `"<hidden>"`,
/// as [`fmt::Debug`] does.
impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(if self.0.is_empty() { "" } else { HIDDEN })
    }
}

/// A string that is written, never read back (JSON Schema's `writeOnly`):
/// what makes its flag a secret.
impl JsonSchema for Secret {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Secret".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string", "writeOnly": true })
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", if self.0.is_empty() { "" } else { HIDDEN })
    }
}
