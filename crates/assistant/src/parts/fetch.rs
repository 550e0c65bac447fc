//! Our client for answers served in parts (docs/parts.md#reassembling-an-answer):
//! the plain loop (ask part 1, 2, ... up to `total_parts`, concatenate the
//! `content` strings exactly, parse), plus what that loop leaves out: a
//! whole answer whose `content` is the JSON itself, the snapshot passed on
//! later parts, a fresh start when the server says the snapshot is gone,
//! and bounds.

use serde::Deserialize;
use serde_json::Value;

/// What [`fetch_all_with`] accepts before giving up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchLimits {
    /// The most parts one answer may have (the plain loop of the Python
    /// client, `tests/it/contract_fetch_all.py`, stops at 10 000 too).
    pub max_parts: u32,
    /// The most bytes of JSON reassembled, and of one part's response.
    pub max_bytes: usize,
    /// How many times to start again from part 1 after a 410 or 412.
    pub max_restarts: u32,
}

impl Default for FetchLimits {
    fn default() -> FetchLimits {
        FetchLimits { max_parts: 10_000, max_bytes: 64 * 1024 * 1024, max_restarts: 2 }
    }
}

/// Why an answer could not be fetched whole.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The URL is not one.
    #[error("bad URL {0:?}")]
    Url(String),
    /// The request failed (connection, timeout, body).
    #[error("request failed: {0}")]
    Http(#[from] reqwest::Error),
    /// The server refused a part; `code` is its JSON error's code, if any.
    #[error("part {part}: HTTP {status}{}", .code.as_deref().map(|c| format!(" ({c})")).unwrap_or_default())]
    Status {
        /// The part asked for.
        part: u32,
        /// The HTTP status.
        status: u16,
        /// `error.code` of the JSON error.
        code: Option<String>,
    },
    /// A part is not the wrapper, or disagrees with the parts before it.
    #[error("part {part}: {problem}")]
    BadPart {
        /// The part asked for.
        part: u32,
        /// What is wrong with it.
        problem: String,
    },
    /// The answer has more parts or bytes than the limits allow.
    #[error("the answer exceeds the limits ({0})")]
    TooLarge(String),
    /// The reassembled text is not JSON.
    #[error("the reassembled answer is not JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// The answer at `url`, reassembled from its parts, with [`FetchLimits::default`].
pub async fn fetch_all(client: &reqwest::Client, url: &str) -> Result<Value, FetchError> {
    fetch_all_with(client, url, &FetchLimits::default()).await
}

/// The answer at `url` (any query of its own kept; `part` and `snapshot`
/// set here), reassembled from its parts within `limits`.
pub async fn fetch_all_with(client: &reqwest::Client, url: &str, limits: &FetchLimits) -> Result<Value, FetchError> {
    let base = url::Url::parse(url).map_err(|_| FetchError::Url(url.to_owned()))?;
    let mut restarts = 0;
    loop {
        match fetch_once(client, &base, limits).await {
            Err(FetchError::Status { part, status: 410 | 412, .. }) if part > 1 && restarts < limits.max_restarts => {
                // The answer changed or its snapshot is gone: as the error
                // says, start again from part 1.
                restarts += 1;
            }
            result => return result,
        }
    }
}

/// One pass over the parts, from part 1.
async fn fetch_once(client: &reqwest::Client, base: &url::Url, limits: &FetchLimits) -> Result<Value, FetchError> {
    let mut full = String::new();
    let mut first: Option<(u32, String)> = None; // total_parts and snapshot of part 1
    for part in 1..=limits.max_parts {
        let snapshot = first.as_ref().map(|(_, snapshot)| snapshot.as_str());
        let budget = limits.max_bytes.saturating_sub(full.len());
        let wrapper = get_part(client, &part_url(base, part, snapshot), part, budget).await?;
        let bad = |problem: &str| FetchError::BadPart { part, problem: problem.to_owned() };
        if wrapper.part != part {
            return Err(bad(&format!("it says it is part {}", wrapper.part)));
        }
        if !wrapper.is_consequential {
            // A whole answer: `content` is the JSON itself (a plain loop's
            // string join would fail here). Only part 1 may be one.
            return if part == 1 { Ok(wrapper.content) } else { Err(bad("a whole answer after part 1")) };
        }
        let Value::String(content) = wrapper.content else { return Err(bad("content is not a string")) };
        match &first {
            None if wrapper.total_parts > limits.max_parts => {
                return Err(FetchError::TooLarge(format!("{} parts", wrapper.total_parts)));
            }
            None => first = Some((wrapper.total_parts, wrapper.snapshot.unwrap_or_default())),
            Some((total, _)) if *total != wrapper.total_parts => return Err(bad("total_parts changed")),
            Some((_, snapshot)) if !snapshot.is_empty() && wrapper.snapshot.as_deref() != Some(snapshot) => {
                return Err(bad("it comes from another snapshot"));
            }
            Some(_) => {}
        }
        if full.len() + content.len() > limits.max_bytes {
            return Err(FetchError::TooLarge(format!("more than {} bytes", limits.max_bytes)));
        }
        full.push_str(&content);
        if part >= wrapper.total_parts {
            return Ok(serde_json::from_str(&full)?);
        }
    }
    Err(FetchError::TooLarge(format!("more than {} parts", limits.max_parts)))
}

/// The wrapper every part comes in.
#[derive(Deserialize)]
struct Wrapper {
    is_consequential: bool,
    content: Value,
    part: u32,
    total_parts: u32,
    snapshot: Option<String>,
}

/// `base` asking for `part` of `snapshot`.
fn part_url(base: &url::Url, part: u32, snapshot: Option<&str>) -> url::Url {
    let mut url = base.clone();
    let kept: Vec<(String, String)> =
        base.query_pairs().filter(|(k, _)| k != "part" && k != "snapshot").map(|(k, v)| (k.into(), v.into())).collect();
    {
        let mut query = url.query_pairs_mut();
        query.clear().extend_pairs(kept).append_pair("part", &part.to_string());
        if let Some(snapshot) = snapshot.filter(|s| !s.is_empty()) {
            query.append_pair("snapshot", snapshot);
        }
    }
    url
}

/// One part's wrapper, its content no more than `max_bytes`.
async fn get_part(
    client: &reqwest::Client,
    url: &url::Url,
    part: u32,
    max_bytes: usize,
) -> Result<Wrapper, FetchError> {
    let mut response = client.get(url.clone()).send().await?;
    let status = response.status();
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        // The JSON string escapes of a part can be a few times its content.
        if body.len() + chunk.len() > max_bytes.saturating_mul(6).saturating_add(4096) {
            return Err(FetchError::TooLarge(format!("part {part} is too large")));
        }
        body.extend_from_slice(&chunk);
    }
    if !status.is_success() {
        let code = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|error| error.pointer("/error/code")?.as_str().map(str::to_owned));
        return Err(FetchError::Status { part, status: status.as_u16(), code });
    }
    serde_json::from_slice(&body).map_err(|e| FetchError::BadPart { part, problem: format!("not the wrapper: {e}") })
}
