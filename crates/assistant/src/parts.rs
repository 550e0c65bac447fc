//! JSON answers served whole or in parts (the contract: docs/parts.md), for
//! the `/llm/...` JSON API routes. [`Parts::respond`] takes an answer's current serialized JSON
//! (rendered when a part needs it) and answers the part a request asks for (`?part=N`, from 1).
//!
//! An answer of at most `chunk_bytes` bytes comes whole:
//! `{"is_consequential": false, "content": <the JSON itself>, "part": 1,
//! "total_parts": 1, "snapshot": "<etag>"}`. A larger one comes in parts whose
//! `content` strings are exact substrings of the serialized JSON, never split
//! inside a UTF-8 character, at most `chunk_bytes` each: concatenating them in
//! order gives the JSON byte for byte ([`split`]).
//!
//! **The snapshot rule.** All parts a client reassembles come from one
//! version of the answer, named by a strong ETag (a hash of its bytes, with
//! a running call's mark), sent as the `ETag` header and as `"snapshot"` in
//! every part. Part 1 of a large answer keeps that version for
//! `snapshot_ttl`, also as the resource's latest. A later part names its
//! snapshot (`?snapshot=ETAG` or `If-Match: ETAG`) and is served from it
//! while it is kept, from it made again from its mark (a running call's
//! answer, kept then too), or from the current answer while that is the
//! same version; otherwise 410 (or 412 when we know the answer changed):
//! start again from part 1. A later part naming
//! nothing is served from the resource's latest snapshot if the current
//! answer still equals it, else 412; with no snapshot of the resource at all
//! (part 1 asked elsewhere, or long ago) it comes from the current answer.
//! A version of an answer that changes as it is asked (a running call's)
//! carries a mark in its ETag that makes it again ([`Version`]): a later
//! part naming it is served by any replica that can, though none keeps it.
//!
//! **The bounds.** Snapshots are bounded by count and by total bytes (the
//! oldest go first) and expire after the TTL; an answer too large to keep is
//! still served, and its later parts come from the current answer while it is
//! unchanged. Our own client for such answers is [`fetch_all`]; what
//! `/llm/schema` says about them is [`part_schema`] and [`chunking_doc`].

mod error;
mod fetch;
mod schema;
mod snapshots;
#[cfg(test)]
mod tests;

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode};
use serde::Deserialize;
use tokio::{sync::OnceCell, time::Instant};

use crate::parts::{
    error::json_response,
    snapshots::{Found, Snapshots},
};
pub use crate::parts::{
    error::{PartError, json_error},
    fetch::{FetchError, FetchLimits, fetch_all, fetch_all_with},
    schema::{chunking_doc, part_schema},
};

/// How answers are cut and how many snapshots are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartsConfig {
    /// The most bytes of serialized JSON one part carries (at least 1 is used).
    pub chunk_bytes: usize,
    /// How long a snapshot is kept after its part 1 was served.
    pub snapshot_ttl: Duration,
    /// The most snapshots kept at once.
    pub max_snapshots: usize,
    /// The most bytes kept at once, over all snapshots (content, resource and ETag).
    pub max_snapshot_bytes: usize,
}

impl Default for PartsConfig {
    fn default() -> PartsConfig {
        PartsConfig {
            chunk_bytes: 64 * 1024,
            snapshot_ttl: Duration::from_secs(60),
            max_snapshots: 1024,
            max_snapshot_bytes: 64 * 1024 * 1024,
        }
    }
}

/// The query of a part: `?part=N&snapshot=ETAG`, both optional, kept as raw
/// strings so that [`Parts::respond`] (not the extractor) judges them and a
/// bad value gets our JSON error.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct PartQuery {
    /// The part asked for, from 1; none means 1.
    pub part: Option<String>,
    /// The snapshot the part must come from (an ETag, quoted or bare).
    pub snapshot: Option<String>,
}

impl PartQuery {
    /// Reads `part` and `snapshot` from a raw query string, ignoring other
    /// keys. Unlike axum's `Query`, it never fails: a repeated key keeps
    /// every value, comma-joined, which then names no valid part or snapshot.
    pub fn from_query(query: Option<&str>) -> PartQuery {
        let mut parsed = PartQuery::default();
        for (key, value) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            let slot = match &*key {
                "part" => &mut parsed.part,
                "snapshot" => &mut parsed.snapshot,
                _ => continue,
            };
            match slot {
                Some(seen) => {
                    seen.push(',');
                    seen.push_str(&value);
                }
                None => *slot = Some(value.into_owned()),
            }
        }
        parsed
    }
}

/// Tags of an `If-Match` list whose versions are made again at most, in
/// the list's order: each costs a render of the answer, and the current
/// answer may be rendered besides.
pub const MAX_MARKS_TRIED: usize = 2;

/// What makes older versions of an answer again, by the marks in their
/// ETags (see [`Version::mark`]): for a snapshot this server does not keep
/// (part 1 was served by another replica, or long ago). A plain
/// `Fn(u64) -> Option<Arc<str>>` is one that holds every mark at once.
pub trait Older {
    /// Waits, within a bound of its own, until the version `mark` names
    /// can be made here (a replica following a running call's journal may
    /// lag by a few steps); whether it can.
    fn reached(&self, mark: u64) -> impl Future<Output = bool> + Send;

    /// That version's JSON, once [`Older::reached`]; `None` if there is none.
    fn make(&self, mark: u64) -> Option<Arc<str>>;
}

impl<T: Fn(u64) -> Option<Arc<str>> + Sync> Older for T {
    async fn reached(&self, _: u64) -> bool {
        true
    }

    fn make(&self, mark: u64) -> Option<Arc<str>> {
        self(mark)
    }
}

/// No older version: an answer that does not change as it is asked.
pub fn no_older(_: u64) -> Option<Arc<str>> {
    None
}

/// One version of an answer: its JSON, and for an answer that changes
/// as it is asked (a running model call's), the mark that makes this
/// version again, on any replica, for as long as its source lasts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// The serialized JSON (compact, from serde_json).
    pub json: Arc<str>,
    /// What makes this version again (a running call's count of steps:
    /// its events, and its text's cut at the bound once that came),
    /// if anything does. It is part of the version's ETag.
    pub mark: Option<u64>,
}

impl From<Arc<str>> for Version {
    fn from(json: Arc<str>) -> Version {
        Version { json, mark: None }
    }
}

impl Version {
    /// Its strong ETag: [`etag_of`] its JSON, the mark added.
    pub fn etag(&self) -> String {
        let etag = etag_of(&self.json);
        match self.mark {
            None => etag,
            Some(mark) => format!("{}-{mark}\"", &etag[..etag.len() - 1]),
        }
    }
}

/// The snapshots of answers served in parts: cheap to clone (the clones
/// share them), bounded by count and bytes, each expiring after the TTL.
#[derive(Clone)]
pub struct Parts {
    config: Arc<PartsConfig>,
    // A std mutex: it guards map operations only (a lookup, an insert, an
    // eviction), never an await nor the cutting and serializing of a part,
    // which work on an `Arc<str>` taken out, so it is cheaper than an async one.
    snapshots: Arc<Mutex<Snapshots>>,
    /// Versions being made again, by resource and name, while requests
    /// want them: those that wait for one together share one making.
    making: Arc<Mutex<HashMap<(String, String), MadeAgain>>>,
}

impl fmt::Debug for Parts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Parts").field("config", &self.config).finish_non_exhaustive()
    }
}

impl Parts {
    /// Parts cut and kept as `config` says.
    pub fn new(config: PartsConfig) -> Parts {
        let config = PartsConfig { chunk_bytes: config.chunk_bytes.max(1), ..config };
        let snapshots = Snapshots::new(config.snapshot_ttl, config.max_snapshots, config.max_snapshot_bytes);
        Parts { config: Arc::new(config), snapshots: Arc::new(Mutex::new(snapshots)), making: Arc::default() }
    }

    /// The configuration in force.
    pub fn config(&self) -> &PartsConfig {
        &self.config
    }

    /// The answer for `resource` (the request path, say), whose current
    /// version `current` renders, as the part `query` and `if_match` ask
    /// for: the part's JSON with `Content-Type: application/json`, `ETag`
    /// and `Cache-Control: no-store`, or a [`PartError`]'s JSON error.
    /// `current` is called only when the part needs it: a later part served
    /// from its kept snapshot does not, so an answer that is dear to render
    /// (a running model call's) is not rendered again for each of its parts.
    /// `older` makes the version a mark names, for a snapshot this server
    /// does not keep: once for each mark tried (of [`MAX_MARKS_TRIED`] tags
    /// at most), unless a request asking for the same version made it while
    /// this one waited; the version made is kept for the next parts.
    pub async fn respond(
        &self,
        resource: &str,
        current: impl FnOnce() -> Version,
        older: &impl Older,
        query: &PartQuery,
        if_match: Option<&HeaderValue>,
    ) -> Response {
        match self.part(resource, current, older, query, if_match).await {
            Ok((etag, body)) => json_response(StatusCode::OK, body, Some(&etag)),
            Err(error) => error.into_response(),
        }
    }

    /// The part's ETag and JSON body, or why there is none; the current
    /// answer is rendered by `current`, and an older version by `older`,
    /// when needed.
    pub async fn part(
        &self,
        resource: &str,
        current: impl FnOnce() -> Version,
        older: &impl Older,
        query: &PartQuery,
        if_match: Option<&HeaderValue>,
    ) -> Result<(String, String), PartError> {
        let part = parse_part(query.part.as_deref())?;
        let names = match &query.snapshot {
            // The query is explicit and wins over a header a proxy may add.
            Some(name) => Some(vec![normalize_tag(name)]),
            None => if_match.and_then(if_match_tags),
        };
        let now = Instant::now();
        let (source, etag) = match names {
            // An `If-Match` of weak or unreadable tags alone names no version
            // this answer can be: its precondition fails (412), as HTTP has it.
            Some(names) if names.is_empty() => return Err(PartError::SnapshotChanged),
            Some(names) => self.named(resource, current, older, &names, now).await?,
            None if part == 1 => {
                let current = current();
                let etag = current.etag();
                if current.json.len() > self.config.chunk_bytes {
                    self.lock().keep(resource, &etag, &current.json, now);
                }
                (current.json, etag)
            }
            None => self.latest(resource, current(), now)?,
        };
        let body = self.body(&source, part, &etag)?;
        Ok((etag, body))
    }

    /// The source of a part naming its snapshot (any of `names`).
    async fn named(
        &self,
        resource: &str,
        current: impl FnOnce() -> Version,
        older: &impl Older,
        names: &[String],
        now: Instant,
    ) -> Result<(Arc<str>, String), PartError> {
        let mut recorded = false;
        for name in names {
            match self.lock().get(resource, name, now) {
                Found::Content(content) => return Ok((content, name.clone())),
                Found::Record => recorded = true,
                Found::Nothing => {}
            }
        }
        // Not kept here, but its mark makes it again: the bytes must hash
        // to the name, or it is not that version. Kept once made (not as
        // the latest, which is an unnamed part 1's), so that the next parts
        // asked here are not made again; and made once for the requests
        // that want it at once, which join before they wait (a version too
        // large to keep, too).
        for (name, mark) in names.iter().filter_map(|name| Some((name, mark_of(name)?))).take(MAX_MARKS_TRIED) {
            let making = Making::join(self, resource, name);
            if !older.reached(mark).await {
                continue;
            }
            let made = making.cell.get_or_init(|| async { self.make(resource, name, mark, older) }).await;
            if let Some(json) = made {
                return Ok((json.clone(), name.clone()));
            }
        }
        let current = current();
        let etag = current.etag();
        if names.contains(&etag) {
            // Not kept (too large, expired or evicted) but the answer is
            // still that version: its bytes are the snapshot's.
            Ok((current.json, etag))
        } else if recorded {
            Err(PartError::SnapshotChanged)
        } else {
            Err(PartError::SnapshotExpired)
        }
    }

    /// The version `name` of `resource`, made again from its `mark` unless
    /// it was kept meanwhile; `None` when that mark makes other bytes.
    fn make(&self, resource: &str, name: &str, mark: u64, older: &impl Older) -> Option<Arc<str>> {
        let now = Instant::now();
        if let Found::Content(content) = self.lock().get(resource, name, now) {
            return Some(content);
        }
        let version = Version { json: older.make(mark)?, mark: Some(mark) };
        if version.etag() != name {
            return None;
        }
        if version.json.len() > self.config.chunk_bytes {
            self.lock().keep_named(resource, name, &version.json, now);
        }
        Some(version.json)
    }

    /// The source of a later part naming no snapshot: the resource's latest.
    fn latest(&self, resource: &str, current: Version, now: Instant) -> Result<(Arc<str>, String), PartError> {
        let latest = self.lock().latest(resource, now);
        match latest {
            Some((etag, Some(content))) if *content == *current.json => Ok((content, etag)),
            Some((etag, None)) if current.etag() == etag => Ok((current.json, etag)),
            Some(_) => Err(PartError::SnapshotChanged),
            // Nothing to compare with (part 1 was never asked here, or long
            // ago): the answer as it is. A client wanting a guarantee names
            // its snapshot, which is then checked against the current answer.
            None => {
                let etag = current.etag();
                Ok((current.json, etag))
            }
        }
    }

    /// Part `part` of `json` as the JSON the client gets.
    fn body(&self, json: &str, part: u32, etag: &str) -> Result<String, PartError> {
        let whole = json.len() <= self.config.chunk_bytes;
        // A small answer is embedded as JSON, so it must be JSON; a caller's
        // bad text is still served, as one string part, never as broken JSON.
        if whole && serde_json::from_str::<serde::de::IgnoredAny>(json).is_ok() {
            if part != 1 {
                return Err(PartError::PartOutOfRange { part, total_parts: 1 });
            }
            let snapshot = serde_json::Value::from(etag);
            return Ok(format!(
                "{{\"is_consequential\":false,\"content\":{json},\"part\":1,\"total_parts\":1,\"snapshot\":{snapshot}}}"
            ));
        }
        let chunks = if whole { vec![json] } else { split(json, self.config.chunk_bytes) };
        let total_parts = u32::try_from(chunks.len()).unwrap_or(u32::MAX);
        let index = usize::try_from(part - 1).unwrap_or(usize::MAX);
        let Some(content) = chunks.get(index) else {
            return Err(PartError::PartOutOfRange { part, total_parts });
        };
        let body = serde_json::json!({
            "is_consequential": true,
            "content": content,
            "part": part,
            "total_parts": total_parts,
            "snapshot": etag,
        });
        Ok(body.to_string())
    }

    fn making(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), MadeAgain>> {
        self.making.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Snapshots> {
        // A panic while holding it leaves maps that are still consistent
        // enough to serve from: every operation completes before it returns.
        self.snapshots.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A version made again once for all who want it: its JSON, or `None`
/// when its mark makes other bytes.
type MadeAgain = Arc<OnceCell<Option<Arc<str>>>>;

/// A request's share in the making of one version: joined before the
/// wait, so that the requests waiting together find it made by the first;
/// the last to leave, done or gone, takes it out of the map.
struct Making<'a> {
    parts: &'a Parts,
    key: (String, String),
    cell: MadeAgain,
}

impl<'a> Making<'a> {
    fn join(parts: &'a Parts, resource: &str, name: &str) -> Making<'a> {
        let key = (resource.to_owned(), name.to_owned());
        let cell = parts.making().entry(key.clone()).or_default().clone();
        Making { parts, key, cell }
    }
}

impl Drop for Making<'_> {
    fn drop(&mut self) {
        let mut making = self.parts.making();
        // The map's and this one: no other request holds it.
        if Arc::strong_count(&self.cell) <= 2 {
            making.remove(&self.key);
        }
    }
}

/// `json` cut into pieces of at most `chunk_bytes` bytes, each ending on a
/// character boundary, which concatenate to `json`. A `chunk_bytes` smaller
/// than a character still makes progress: that piece is the one character.
/// An empty `json` gives no pieces.
pub fn split(json: &str, chunk_bytes: usize) -> Vec<&str> {
    let chunk_bytes = chunk_bytes.max(1);
    let mut chunks = Vec::with_capacity(json.len().div_ceil(chunk_bytes));
    let mut rest = json;
    while !rest.is_empty() {
        let mut end = chunk_bytes.min(rest.len());
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        if end == 0 {
            // One character wider than a chunk: it goes whole.
            end = rest.chars().next().map_or(rest.len(), char::len_utf8);
        }
        let (chunk, tail) = rest.split_at(end);
        chunks.push(chunk);
        rest = tail;
    }
    chunks
}

/// The strong ETag of `json`, quoted: its length and the first 128 bits of
/// its SHA-256, so that two versions of an answer never share one in
/// practice, and one version has the same on every replica and every build
/// (a part asked of another replica, or of one upgraded meanwhile, names
/// the same snapshot).
pub fn etag_of(json: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, json.as_bytes());
    let hex: String = digest.as_ref()[..16].iter().map(|byte| format!("{byte:02x}")).collect();
    format!("\"{:x}-{hex}\"", json.len())
}

/// The mark of the snapshot a query names (quoted or bare), as a part
/// naming it would read it: for the fuzz target of request values.
#[cfg(any(test, feature = "fuzzing"))]
pub fn snapshot_mark(name: &str) -> Option<u64> {
    mark_of(&normalize_tag(name))
}

/// The mark a snapshot's ETag carries (see [`Version::etag`]): its third
/// field, a number as the ETag writes it (digits only, no leading zero).
fn mark_of(etag: &str) -> Option<u64> {
    let bare = etag.strip_prefix('"')?.strip_suffix('"')?;
    let mut fields = bare.split('-');
    let mark = fields.nth(2).filter(|_| fields.next().is_none())?;
    // As written: no leading zero, so that one mark has one name.
    if mark.len() > 1 && mark.starts_with('0') {
        return None;
    }
    plain_number(mark)
}

/// `text` as a number written in digits alone: `from_str` would also take a
/// leading `+`.
fn plain_number<T: std::str::FromStr>(text: &str) -> Option<T> {
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    digits.then(|| text.parse().ok()).flatten()
}

/// `part` as a number from 1; none is 1. A number past any part there can
/// be is a whole number still: past the last (416), not a bad one (400).
fn parse_part(part: Option<&str>) -> Result<u32, PartError> {
    let Some(text) = part else { return Ok(1) };
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    match text.parse::<u32>() {
        Ok(part) if digits && part > 0 => Ok(part),
        // Digits alone that overflow: past any part.
        Err(_) if digits => Ok(u32::MAX),
        _ => Err(PartError::BadPart(text.chars().take(32).collect())),
    }
}

/// A snapshot named in the query, quoted or bare, as its ETag.
fn normalize_tag(name: &str) -> String {
    let name = name.trim();
    let bare = name.strip_prefix('"').and_then(|n| n.strip_suffix('"')).unwrap_or(name);
    format!("\"{bare}\"")
}

/// The strong tags of an `If-Match` header; `None` for `*` (any version,
/// which names none). Weak tags never match a strong one, so they are left out.
fn if_match_tags(value: &HeaderValue) -> Option<Vec<String>> {
    let text = value.to_str().unwrap_or("");
    if text.trim() == "*" {
        return None;
    }
    let tags =
        text.split(',').map(str::trim).filter(|tag| tag.starts_with('"') && tag.ends_with('"') && tag.len() >= 2);
    Some(tags.map(str::to_owned).collect())
}
