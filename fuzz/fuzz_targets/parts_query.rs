//! Requests for parts of an answer (`?part=&snapshot=` and `If-Match`, as
//! any client may send them) served by `parts::Parts::part` over one answer
//! that grows as a running call's does, a version for each mark: never a
//! panic; every part served is JSON whose `part` is from 1 to its
//! `total_parts`, whose `snapshot` is its ETag and names a version that
//! existed when it was asked (one the request named, if it named any);
//! a whole answer's `content` is that version itself, a piece's the very
//! piece `split` cuts of it, so that parts of one snapshot always join into
//! one version; a version is made again from its mark at most
//! `MAX_MARKS_TRIED` (2) times a request; and a part never waits when every
//! version is at hand.
//!
//! The input: a byte of settings (bits 0-1: `chunk_bytes` 7, 1, 64 or 4096;
//! bit 2: the answer grows a mark a request from mark 1, else it stays at
//! its last mark; bit 3: the answer is one version with no mark, its older
//! ones made by `no_older`), then requests, one a line: the query, then,
//! after a tab, the `If-Match` header's value.

#![no_main]

use std::{
    collections::HashMap,
    pin::pin,
    sync::{
        Arc, LazyLock,
        atomic::{AtomicUsize, Ordering},
    },
    task::{Context, Poll, Waker},
    time::Duration,
};

use http::HeaderValue;
use libfuzzer_sys::fuzz_target;
use megamind_assistant::parts::{
    MAX_MARKS_TRIED, Older, PartQuery, Parts, PartsConfig, Version, etag_of, no_older, split,
};
use serde_json::Value;

/// The pieces of the answer's text, one more a mark: multi-byte UTF-8 of
/// two, three and four bytes, and what JSON escapes.
const PIECES: [&str; 4] = [
    "Привет, это ответ модели: ",
    "мир — 你好, 🌍🎉 naïve café, ",
    "\"в кавычках\" и \\ обратная черта,\n",
    "конец ответа — 終わり 🏁.",
];

/// The last mark: the answer is whole.
const LAST: u64 = PIECES.len() as u64;

/// Requests read from one input at most.
const MAX_REQUESTS: usize = 16;

const RESOURCE: &str = "/llm/answers/fuzz-1";

/// The answer at `mark` (0 to `LAST`): its text and one event per piece.
fn answer_at(mark: u64) -> String {
    let pieces = &PIECES[..usize::try_from(mark).unwrap_or(PIECES.len()).min(PIECES.len())];
    let events: Vec<String> = pieces
        .iter()
        .enumerate()
        .map(|(i, piece)| format!("{{\"id\":{},\"text\":{}}}", i + 1, Value::from(*piece)))
        .collect();
    let status = if mark == LAST { "done" } else { "running" };
    format!(
        "{{\"request_id\":\"fuzz-1\",\"status\":\"{status}\",\"text\":{},\"events\":[{}]}}",
        Value::from(pieces.concat()),
        events.join(",")
    )
}

/// Every version's JSON by mark.
static VERSIONS: LazyLock<Vec<Arc<str>>> = LazyLock::new(|| (0..=LAST).map(|mark| answer_at(mark).into()).collect());

/// A version of the answer: its mark, if it has one, and its JSON.
type Marked = (Option<u64>, Arc<str>);

/// Every version by its ETag: each mark's, and the last unmarked (the
/// answer that does not change), with its mark.
static BY_ETAG: LazyLock<HashMap<String, Marked>> = LazyLock::new(|| {
    let mut known = HashMap::new();
    for (mark, json) in (0..=LAST).zip(VERSIONS.iter()) {
        let version = Version { json: json.clone(), mark: Some(mark) };
        known.insert(version.etag(), (Some(mark), json.clone()));
    }
    let last = VERSIONS[VERSIONS.len() - 1].clone();
    known.insert(etag_of(&last), (None, last));
    known
});

/// The versions up to the current one, made again by their marks, counting
/// how often it is asked.
struct Marks {
    upto: u64,
    reached: AtomicUsize,
    made: AtomicUsize,
}

impl Older for Marks {
    async fn reached(&self, mark: u64) -> bool {
        self.reached.fetch_add(1, Ordering::Relaxed);
        mark <= self.upto
    }

    fn make(&self, mark: u64) -> Option<Arc<str>> {
        self.made.fetch_add(1, Ordering::Relaxed);
        assert!(mark <= self.upto, "mark {mark} made though it was not reached (at {})", self.upto);
        VERSIONS.get(usize::try_from(mark).ok()?).cloned()
    }
}

/// `future`'s output, polled once: nothing a part awaits is pending here.
fn ready<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("a part waited though every version was at hand"),
    }
}

/// A snapshot as a part naming it reads it: trimmed, without its quotes.
fn bare(name: &str) -> &str {
    let name = name.trim();
    name.strip_prefix('"').and_then(|n| n.strip_suffix('"')).unwrap_or(name)
}

fuzz_target!(|data: &[u8]| {
    let Some((&settings, requests)) = data.split_first() else { return };
    let chunk_bytes = [7, 1, 64, 4096][usize::from(settings & 3)];
    let grows = settings & 4 != 0;
    let unmarked = settings & 8 != 0;
    let parts = Parts::new(PartsConfig {
        chunk_bytes,
        snapshot_ttl: Duration::from_secs(60),
        // Small, so that versions are dropped and some too large to keep.
        max_snapshots: 3,
        max_snapshot_bytes: 1024,
    });
    for (index, request) in requests.split(|&b| b == b'\n').take(MAX_REQUESTS).enumerate() {
        let (query, if_match) = match request.iter().position(|&b| b == b'\t') {
            Some(tab) => (&request[..tab], Some(&request[tab + 1..])),
            None => (request, None),
        };
        let query_text = String::from_utf8_lossy(query);
        let query = PartQuery::from_query(Some(&query_text));
        let if_match = if_match.and_then(|value| HeaderValue::from_bytes(value).ok());
        let upto = if grows { (index as u64 + 1).min(LAST) } else { LAST };
        let older = Marks { upto, reached: AtomicUsize::new(0), made: AtomicUsize::new(0) };
        let result = if unmarked {
            let current = || Version::from(VERSIONS[VERSIONS.len() - 1].clone());
            ready(parts.part(RESOURCE, current, &no_older, &query, if_match.as_ref()))
        } else {
            let current = || Version { json: VERSIONS[usize::try_from(upto).unwrap_or(0)].clone(), mark: Some(upto) };
            ready(parts.part(RESOURCE, current, &older, &query, if_match.as_ref()))
        };
        let made = older.made.load(Ordering::Relaxed);
        assert!(made <= MAX_MARKS_TRIED, "{made} versions made again for {query:?} / {if_match:?}");
        let reached = older.reached.load(Ordering::Relaxed);
        assert!(reached <= MAX_MARKS_TRIED, "{reached} marks waited for, for {query:?} / {if_match:?}");
        let Ok((etag, body)) = result else { continue };

        let body: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{body:?} is not JSON: {e}"));
        let part = body["part"].as_u64().unwrap_or_else(|| panic!("no part in {body}"));
        let total_parts = body["total_parts"].as_u64().unwrap_or_else(|| panic!("no total_parts in {body}"));
        assert!((1..=total_parts).contains(&part), "part {part} of {total_parts}: {body}");
        assert_eq!(body["snapshot"].as_str(), Some(etag.as_str()), "the snapshot is not the ETag: {body}");
        let Some((mark, json)) = BY_ETAG.get(&etag) else { panic!("{etag} names no version of the answer") };
        if unmarked {
            assert_eq!(*mark, None, "{etag}: a mark, though the answer has none");
        } else {
            assert!(mark.is_some_and(|mark| mark <= upto), "{etag}: not a version of one at mark {upto}");
        }
        if let Some(snapshot) = &query.snapshot {
            assert_eq!(bare(snapshot), bare(&etag), "{snapshot:?} asked, {etag} served");
        } else if let Some(text) = if_match.as_ref().and_then(|value| value.to_str().ok()).filter(|t| t.trim() != "*") {
            assert!(text.split(',').any(|tag| tag.trim() == etag), "If-Match {text:?}, {etag} served");
        }
        match body["is_consequential"].as_bool() {
            Some(false) => {
                assert_eq!(total_parts, 1, "{body}");
                assert!(json.len() <= chunk_bytes, "a whole answer of {} bytes, chunk_bytes {chunk_bytes}", json.len());
                let answer: Value = serde_json::from_str(json).unwrap_or_default();
                assert_eq!(body["content"], answer, "a whole answer that is not the version {etag}");
            }
            Some(true) => {
                let Some(content) = body["content"].as_str() else { panic!("a piece that is not a string: {body}") };
                assert!(json.contains(content), "{content:?} is not a piece of the version {etag}");
                let pieces = split(json, chunk_bytes);
                assert_eq!(total_parts, pieces.len() as u64, "{etag} in {chunk_bytes}-byte pieces");
                let index = usize::try_from(part - 1).unwrap_or(usize::MAX);
                assert_eq!(Some(&content), pieces.get(index), "part {part} of {etag} is not its piece");
                assert!(
                    content.len() <= chunk_bytes || content.chars().count() == 1,
                    "a piece of {} bytes, chunk_bytes {chunk_bytes}",
                    content.len()
                );
            }
            None => panic!("no is_consequential in {body}"),
        }
    }
});
