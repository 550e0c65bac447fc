//! `[assistant.llm]`: the `/llm` API for screens: how a model's answer is
//! read into JSONSeq events, how many streams are open at once, where
//! clients reach this server and when an answer is served in parts.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use megamind_core::rules::auth::AddressKey;

use crate::backend::config::Secret;
pub use crate::jsonseq::mapper::Format;

/// The most streams open at once that `max_streams` may allow: far above
/// what a replica serves, and within what a semaphore counts.
const MAX_STREAMS: usize = 1_000_000;

/// The `[assistant.llm]` table.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LlmConfig {
    /// How the model's answer is read into JSONSeq events for screen
    /// clients (`GET /llm/stream/{request_id}`), and its words for the voice:
    /// `auto`, `thinkingml`, `think_opened`, `text` or `jsonl`.
    pub stream_format: Format,
    /// Seconds between heartbeats of a waiting JSONSeq stream.
    pub heartbeat_secs: u64,
    /// JSONSeq streams open at once before new ones are refused (503).
    pub max_streams: usize,
    /// Where clients reach this server (`https://assistant.example.net`),
    /// for the stream address in `ShowStreamDirective`; empty gives a path
    /// (`/llm/stream/...`) the client resolves against the server.
    pub public_url: String,
    /// `/llm` JSON answers longer than this, in bytes, are served in parts.
    pub chunk_bytes: usize,
    /// The key the stream and answer addresses are signed with (HMAC-SHA256),
    /// the same on every replica. Empty: a key made at start, so that an
    /// address opens only on the replica that gave it, until it restarts.
    pub signing_key: Secret,
    /// How long a signed address opens its call's stream and answer, in seconds.
    pub address_ttl_secs: u64,
}

impl Default for LlmConfig {
    fn default() -> LlmConfig {
        LlmConfig {
            stream_format: Format::Auto,
            heartbeat_secs: 15,
            max_streams: 10_000,
            public_url: String::new(),
            chunk_bytes: 64 * 1024,
            signing_key: Secret::default(),
            // Longer than any answer streams, shorter than a day of logs.
            address_ttl_secs: 600,
        }
    }
}

impl LlmConfig {
    /// Checks every value, reporting each problem with its key under `llm.`.
    pub(crate) fn validate(&self, check: &mut dyn FnMut(bool, String)) {
        let (heartbeat, streams) = (self.heartbeat_secs, self.max_streams);
        check((1..=3600).contains(&heartbeat), format!("llm.heartbeat_secs = {heartbeat}: must be 1..=3600"));
        check((1..=MAX_STREAMS).contains(&streams), format!("llm.max_streams = {streams}: must be 1..={MAX_STREAMS}"));
        let public = self.public_url.trim();
        check(
            public.is_empty() || public.starts_with("http://") || public.starts_with("https://"),
            format!(
                "llm.public_url = {:?}: must start with http:// or https:// (or be empty)",
                megamind_core::text::redact_url(public)
            ),
        );
        check(self.chunk_bytes >= 64, format!("llm.chunk_bytes = {}: must be at least 64", self.chunk_bytes));
        let key = self.signing_key.expose();
        check(
            key.is_empty() || key.len() >= 32,
            format!("llm.signing_key: {} bytes; a key shorter than 32 bytes is guessable", key.len()),
        );
        check(
            (1..=86_400).contains(&self.address_ttl_secs),
            format!("llm.address_ttl_secs = {}: must be 1..=86400", self.address_ttl_secs),
        );
    }

    /// The key addresses are signed with: the configured one, or one made now.
    pub(crate) fn address_key(&self) -> Result<AddressKey, String> {
        let key = self.signing_key.expose();
        if key.is_empty() { AddressKey::random() } else { Ok(AddressKey::from_secret(key)) }
    }

    /// The address of call `id`'s JSONSeq stream, as a client is given it:
    /// signed with `key`, opening the call's stream and answer until
    /// `address_ttl_secs` from now.
    pub(crate) fn stream_url(&self, id: &str, key: &AddressKey) -> String {
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
        url.push('?');
        url.push_str(&key.sign_for(id, self.address_ttl_secs));
        url
    }
}
