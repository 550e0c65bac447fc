//! `[assistant.llm]`: the `/llm` API for screens: how a model's answer is
//! read into JSONSeq events, how many streams are open at once, where
//! clients reach this server and when an answer is served in parts.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::jsonseq::mapper::Format;

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
}

impl Default for LlmConfig {
    fn default() -> LlmConfig {
        LlmConfig {
            stream_format: Format::Auto,
            heartbeat_secs: 15,
            max_streams: 10_000,
            public_url: String::new(),
            chunk_bytes: 64 * 1024,
        }
    }
}

impl LlmConfig {
    /// Checks every value, reporting each problem with its key under `llm.`.
    pub(crate) fn validate(&self, check: &mut dyn FnMut(bool, String)) {
        check(self.heartbeat_secs > 0, "llm.heartbeat_secs must be above 0".into());
        check(self.max_streams > 0, "llm.max_streams must be above 0".into());
        let public = self.public_url.trim();
        check(
            public.is_empty() || public.starts_with("http://") || public.starts_with("https://"),
            format!("llm.public_url = {public:?}: must start with http:// or https:// (or be empty)"),
        );
        check(self.chunk_bytes >= 64, format!("llm.chunk_bytes = {}: must be at least 64", self.chunk_bytes));
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
