use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{Router, extract::State, response::Response, routing::get};
use http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use serde_json::{Value, json};

use super::*;

fn parts(chunk_bytes: usize) -> Parts {
    Parts::new(PartsConfig { chunk_bytes, ..PartsConfig::default() })
}

/// What a client sees of one request: the status, the headers, the JSON body.
struct Seen {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
}

impl Seen {
    fn code(&self) -> &str {
        self.body.pointer("/error/code").and_then(Value::as_str).unwrap_or("")
    }
}

async fn ask(parts: &Parts, current: &str, part: Option<&str>, snapshot: Option<&str>, if_match: Option<&str>) -> Seen {
    let query = PartQuery { part: part.map(str::to_owned), snapshot: snapshot.map(str::to_owned) };
    let if_match = if_match.map(|v| HeaderValue::from_str(v).unwrap());
    let current = || Arc::<str>::from(current).into();
    let response = parts.respond("/llm/answers/r1", current, &no_older, &query, if_match.as_ref()).await;
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    let text = std::str::from_utf8(&bytes).expect("the body is UTF-8");
    Seen { status, headers, body: serde_json::from_str(text).expect("the body is JSON") }
}

/// Every part of `current`, asked in order with the snapshot of part 1
/// (`None`: no snapshot named), each checked; their contents.
async fn all_parts(parts: &Parts, current: &str, named: bool) -> Vec<String> {
    let first = ask(parts, current, None, None, None).await;
    assert_eq!(first.status, StatusCode::OK);
    let total = first.body["total_parts"].as_u64().unwrap();
    let snapshot = first.body["snapshot"].as_str().unwrap().to_owned();
    let mut contents = Vec::new();
    for n in 1..=total {
        let number = n.to_string();
        let seen = ask(parts, current, Some(&number), named.then_some(snapshot.as_str()), None).await;
        assert_eq!(seen.status, StatusCode::OK, "part {n}: {}", seen.body);
        assert_eq!(seen.body["is_consequential"], true);
        assert_eq!(seen.body["part"], n);
        assert_eq!(seen.body["total_parts"], total);
        assert_eq!(seen.body["snapshot"], snapshot.as_str());
        assert_eq!(seen.headers[header::ETAG], snapshot.as_str());
        contents.push(seen.body["content"].as_str().unwrap().to_owned());
    }
    contents
}

#[tokio::test]
async fn a_small_answer_comes_whole_with_its_etag() {
    let current = r#"{"text":"Привет","items":[1,2]}"#;
    let seen = ask(&parts(1024), current, None, None, None).await;
    assert_eq!(seen.status, StatusCode::OK);
    assert_eq!(seen.body["is_consequential"], false);
    assert_eq!(seen.body["content"], serde_json::from_str::<Value>(current).unwrap());
    assert_eq!((seen.body["part"].as_u64(), seen.body["total_parts"].as_u64()), (Some(1), Some(1)));
    assert_eq!(seen.headers[header::ETAG], seen.body["snapshot"].as_str().unwrap());
    assert_eq!(seen.headers[header::ETAG], etag_of(current).as_str());
    assert_eq!(seen.headers[header::CONTENT_TYPE], "application/json");
    assert_eq!(seen.headers[header::CACHE_CONTROL], "no-store");
    let keys: Vec<_> = seen.body.as_object().unwrap().keys().cloned().collect();
    assert_eq!(keys, ["is_consequential", "content", "part", "total_parts", "snapshot"]);
    // Exactly chunk_bytes is still whole; part 2 of a whole answer does not exist.
    assert_eq!(ask(&parts(current.len()), current, None, None, None).await.body["is_consequential"], false);
    let seen = ask(&parts(1024), current, Some("2"), None, None).await;
    assert_eq!((seen.status, seen.code()), (StatusCode::RANGE_NOT_SATISFIABLE, "part_out_of_range"));
}

#[tokio::test]
async fn large_answers_reassemble_exactly_wherever_the_boundaries_fall() {
    // Two-, three- and four-byte characters in turn, after 0..4 ASCII bytes,
    // so that every chunk size puts boundaries inside every kind of character.
    for prefix in 0..4 {
        let text = format!("{}{}", "a".repeat(prefix), "ж€😀".repeat(12));
        let current = json!({ "text": text, "emoji": "👋🏽", "n": 1 }).to_string();
        for chunk_bytes in 1..=13 {
            let parts = parts(chunk_bytes);
            let contents = all_parts(&parts, &current, true).await;
            assert_eq!(contents.concat(), current, "prefix {prefix}, chunk {chunk_bytes}");
            for content in &contents {
                let widest = content.chars().map(char::len_utf8).max().unwrap_or(0);
                assert!(content.len() <= chunk_bytes.max(widest), "{content:?} in chunks of {chunk_bytes}");
                assert!(content.len() <= chunk_bytes || content.chars().count() == 1);
            }
            assert_eq!(serde_json::from_str::<Value>(&contents.concat()).unwrap()["text"], text);
        }
    }
}

#[test]
fn split_cuts_on_character_boundaries_and_always_makes_progress() {
    assert!(split("", 4).is_empty());
    assert_eq!(split("abcdef", 4), ["abcd", "ef"]);
    assert_eq!(split("😀😀", 3), ["😀", "😀"]);
    assert_eq!(split("a😀b", 0), ["a", "😀", "b"]);
    assert_eq!(split("жжж", 5), ["жж", "ж"]);
    let text = "{\"t\":\"Съешь же ещё 🥐 этих мягких булок\"}";
    for chunk_bytes in 1..=text.len() + 1 {
        let chunks = split(text, chunk_bytes);
        assert_eq!(chunks.concat(), text);
        assert!(chunks.iter().all(|c| !c.is_empty() && (c.len() <= chunk_bytes || c.chars().count() == 1)));
    }
}

#[tokio::test]
async fn a_later_part_from_its_snapshot_does_not_render_the_answer_again() {
    let parts = parts(10);
    let answer: Arc<str> = json!({ "text": "x".repeat(100) }).to_string().into();
    let renders = std::cell::Cell::new(0);
    let render = || {
        renders.set(renders.get() + 1);
        Version::from(answer.clone())
    };
    let query = |part: u32, snapshot: Option<&str>| PartQuery {
        part: Some(part.to_string()),
        snapshot: snapshot.map(str::to_owned),
    };
    let (etag, _) = parts.part("/r", render, &no_older, &query(1, None), None).await.unwrap();
    assert_eq!(renders.get(), 1);
    assert_eq!(Arc::strong_count(&answer), 2, "the snapshot shares the rendered bytes");
    for part in 2..=5 {
        parts.part("/r", render, &no_older, &query(part, Some(&etag)), None).await.unwrap();
    }
    assert_eq!(renders.get(), 1, "later parts come from the snapshot");
    // Naming no snapshot, a later part is checked against the answer as it is now.
    parts.part("/r", render, &no_older, &query(2, None), None).await.unwrap();
    assert_eq!(renders.get(), 2);
}

#[tokio::test]
async fn later_parts_come_from_the_snapshot_named_in_the_query_or_if_match() {
    let parts = parts(8);
    let v1 = json!({ "text": "первая версия" }).to_string();
    let v2 = json!({ "text": "вторая версия, длиннее" }).to_string();
    let first = ask(&parts, &v1, None, None, None).await;
    let snapshot = first.body["snapshot"].as_str().unwrap().to_owned();
    // v2 is asked for (and kept) in between: v1 stays what its name says.
    ask(&parts, &v2, Some("1"), None, None).await;
    let expected = split(&v1, 8)[1];
    let by_query = ask(&parts, &v2, Some("2"), Some(&snapshot), None).await;
    assert_eq!((by_query.status, by_query.body["content"].as_str()), (StatusCode::OK, Some(expected)));
    let bare = snapshot.trim_matches('"');
    assert_eq!(ask(&parts, &v2, Some("2"), Some(bare), None).await.body["content"], expected);
    let by_header = ask(&parts, &v2, Some("2"), None, Some(&format!("W/\"x\", {snapshot}"))).await;
    assert_eq!((by_header.status, by_header.body["content"].as_str()), (StatusCode::OK, Some(expected)));
    assert_eq!(by_header.headers[header::ETAG], snapshot.as_str());
    // The query wins over If-Match.
    let both = ask(&parts, &v2, Some("2"), Some(&snapshot), Some(&etag_of(&v2))).await;
    assert_eq!(both.body["content"], expected);
}

#[tokio::test]
async fn an_unnamed_later_part_comes_from_the_latest_snapshot_unless_the_answer_changed() {
    let parts = parts(8);
    let v1 = json!({ "text": "первая версия" }).to_string();
    let contents = all_parts(&parts, &v1, false).await;
    assert_eq!(contents.concat(), v1);
    let v2 = json!({ "text": "вторая версия" }).to_string();
    let seen = ask(&parts, &v2, Some("2"), None, None).await;
    assert_eq!((seen.status, seen.code()), (StatusCode::PRECONDITION_FAILED, "snapshot_changed"));
    assert!(seen.body["error"]["message"].as_str().unwrap().contains("part 1"));
    assert!(seen.headers.get(header::ETAG).is_none());
    assert_eq!(seen.headers[header::CONTENT_TYPE], "application/json");
    // If-Match: * names no snapshot.
    let seen = ask(&parts, &v2, Some("2"), None, Some("*")).await;
    assert_eq!(seen.status, StatusCode::PRECONDITION_FAILED);
    // Weak tags alone name no version a part can come from: the precondition fails.
    let seen = ask(&parts, &v2, Some("2"), None, Some("W/\"x\", W/\"y\"")).await;
    assert_eq!((seen.status, seen.code()), (StatusCode::PRECONDITION_FAILED, "snapshot_changed"));
    // Nothing kept for a resource at all: the answer as it is.
    let fresh = self::parts(8);
    let seen = ask(&fresh, &v2, Some("2"), None, None).await;
    assert_eq!((seen.status, seen.body["content"].as_str()), (StatusCode::OK, Some(split(&v2, 8)[1])));
}

#[tokio::test(start_paused = true)]
async fn an_expired_snapshot_is_gone_unless_the_answer_is_still_that_version() {
    let parts = Parts::new(PartsConfig { chunk_bytes: 8, snapshot_ttl: Duration::from_secs(60), ..Default::default() });
    let v1 = json!({ "text": "первая версия" }).to_string();
    let v2 = json!({ "text": "вторая версия" }).to_string();
    let snapshot = ask(&parts, &v1, None, None, None).await.body["snapshot"].as_str().unwrap().to_owned();
    tokio::time::advance(Duration::from_secs(59)).await;
    assert_eq!(ask(&parts, &v2, Some("2"), Some(&snapshot), None).await.status, StatusCode::OK);
    tokio::time::advance(Duration::from_secs(1)).await;
    let seen = ask(&parts, &v2, Some("2"), Some(&snapshot), None).await;
    assert_eq!((seen.status, seen.code()), (StatusCode::GONE, "snapshot_expired"));
    assert!(seen.body["error"]["message"].as_str().unwrap().contains("part 1"));
    let seen = ask(&parts, &v2, Some("2"), None, Some(&snapshot)).await;
    assert_eq!(seen.status, StatusCode::GONE);
    // Not kept, but its bytes are the answer's: served.
    let seen = ask(&parts, &v1, Some("2"), Some(&snapshot), None).await;
    assert_eq!((seen.status, seen.body["content"].as_str()), (StatusCode::OK, Some(split(&v1, 8)[1])));
}

#[tokio::test]
async fn an_evicted_snapshot_is_gone() {
    let parts = Parts::new(PartsConfig { chunk_bytes: 8, max_snapshots: 1, ..Default::default() });
    let v1 = json!({ "text": "первая версия" }).to_string();
    let v2 = json!({ "text": "вторая версия" }).to_string();
    let snapshot = ask(&parts, &v1, None, None, None).await.body["snapshot"].as_str().unwrap().to_owned();
    ask(&parts, &v2, None, None, None).await;
    let seen = ask(&parts, &v2, Some("2"), Some(&snapshot), None).await;
    assert_eq!((seen.status, seen.code()), (StatusCode::GONE, "snapshot_expired"));
    assert_eq!(parts.lock().usage().0, 1);
    // By bytes: a second snapshot does not fit beside the first.
    let parts = Parts::new(PartsConfig { chunk_bytes: 8, max_snapshot_bytes: v1.len() + 80, ..Default::default() });
    let snapshot = ask(&parts, &v1, None, None, None).await.body["snapshot"].as_str().unwrap().to_owned();
    ask(&parts, &v2, None, None, None).await;
    assert_eq!(ask(&parts, &v2, Some("2"), Some(&snapshot), None).await.status, StatusCode::GONE);
}

#[tokio::test]
async fn an_answer_too_large_to_keep_is_served_and_checked_against_the_current_one() {
    let parts = Parts::new(PartsConfig { chunk_bytes: 8, max_snapshot_bytes: 16, ..Default::default() });
    let v1 = json!({ "text": "первая версия" }).to_string();
    assert_eq!(all_parts(&parts, &v1, true).await.concat(), v1);
    assert_eq!(all_parts(&parts, &v1, false).await.concat(), v1);
    assert_eq!(parts.lock().usage().1, 0, "not even its record fits in 16 bytes");
    let parts = Parts::new(PartsConfig { chunk_bytes: 8, max_snapshot_bytes: 64, ..Default::default() });
    let snapshot = ask(&parts, &v1, None, None, None).await.body["snapshot"].as_str().unwrap().to_owned();
    let v2 = json!({ "text": "вторая версия" }).to_string();
    let seen = ask(&parts, &v2, Some("2"), Some(&snapshot), None).await;
    assert_eq!((seen.status, seen.code()), (StatusCode::PRECONDITION_FAILED, "snapshot_changed"));
    let seen = ask(&parts, &v2, Some("2"), None, None).await;
    assert_eq!(seen.code(), "snapshot_changed");
}

#[tokio::test]
async fn a_part_that_is_not_a_positive_integer_is_400_and_one_past_the_end_416() {
    let parts = parts(8);
    let current = json!({ "text": "0123456789" }).to_string();
    let total = split(&current, 8).len();
    for bad in ["0", "000", "-1", "abc", "1.5", "", "+1", " 1", "1e3", "２"] {
        let seen = ask(&parts, &current, Some(bad), None, None).await;
        assert_eq!((seen.status, seen.code()), (StatusCode::BAD_REQUEST, "bad_part"), "part={bad:?}");
        assert!(seen.body["error"]["message"].is_string());
    }
    assert_eq!(ask(&parts, &current, Some("01"), None, None).await.body["part"], 1);
    let last = total.to_string();
    assert_eq!(ask(&parts, &current, Some(&last), None, None).await.status, StatusCode::OK);
    // A whole number past the last, however large, is past it: 416.
    let past: Vec<String> = [total + 1, u32::MAX as usize].iter().map(ToString::to_string).collect();
    for past in past.iter().map(String::as_str).chain(["4294967296", "99999999999999999999"]) {
        let seen = ask(&parts, &current, Some(past), None, None).await;
        assert_eq!((seen.status, seen.code()), (StatusCode::RANGE_NOT_SATISFIABLE, "part_out_of_range"), "{past}");
    }
}

#[tokio::test]
async fn text_that_is_not_json_is_served_as_a_string_never_as_broken_json() {
    let seen = ask(&parts(64), "{\"open\":", None, None, None).await;
    assert_eq!(seen.status, StatusCode::OK);
    assert_eq!(
        (seen.body["is_consequential"].as_bool(), seen.body["content"].as_str()),
        (Some(true), Some("{\"open\":"))
    );
    assert_eq!(ask(&parts(64), "", None, None, None).await.body["content"], "");
}

#[test]
fn the_query_is_read_without_failing() {
    let q = PartQuery::from_query(Some("fields=id&part=2&snapshot=%22ab-cd%22"));
    assert_eq!(q, PartQuery { part: Some("2".into()), snapshot: Some("\"ab-cd\"".into()) });
    assert_eq!(PartQuery::from_query(None), PartQuery::default());
    assert_eq!(PartQuery::from_query(Some("part=1&part=2")).part.as_deref(), Some("1,2"));
    assert!(parse_part(Some("1,2")).is_err());
}

#[test]
fn the_documented_example_reassembles() {
    let doc = chunking_doc(&PartsConfig::default());
    let example = &doc["example"];
    let parts = example["parts"].as_array().unwrap();
    assert!(parts.len() > 1);
    let joined: String = parts.iter().map(|p| p["content"].as_str().unwrap()).collect();
    assert_eq!(joined, example["concatenated"].as_str().unwrap());
    assert_eq!(serde_json::from_str::<Value>(&joined).unwrap(), example["answer"]);
    assert_eq!(doc["chunk_bytes"], 65536);
    let schema = part_schema();
    let required: Vec<_> = schema["required"].as_array().unwrap().iter().map(|k| k.as_str().unwrap()).collect();
    assert!(parts.iter().all(|p| required.iter().all(|k| p.get(k).is_some())));
}

/// A server answering `/answer` with [`Parts::respond`]; after each part 1
/// it serves `next` (if any) from then on. Its URL, with a query of its own.
async fn serve(parts: Parts, first: String, next: Option<String>) -> String {
    type Versions = Arc<Mutex<(String, Option<String>)>>;
    async fn answer(State((parts, versions)): State<(Parts, Versions)>, uri: Uri, headers: HeaderMap) -> Response {
        let query = PartQuery::from_query(uri.query());
        let current: Arc<str> = versions.lock().unwrap().0.as_str().into();
        let if_match = headers.get(header::IF_MATCH);
        let response = parts.respond(uri.path(), || current.into(), &no_older, &query, if_match).await;
        let mut versions = versions.lock().unwrap();
        if query.part.as_deref().unwrap_or("1") == "1"
            && let Some(next) = versions.1.take()
        {
            versions.0 = next;
        }
        response
    }
    let versions: Versions = Arc::new(Mutex::new((first, next)));
    let app = Router::new().route("/answer", get(answer)).with_state((parts, versions));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}/answer?fields=id")
}

fn client() -> reqwest::Client {
    megamind_core::http_client::client_builder().no_proxy().build().unwrap()
}

#[tokio::test]
async fn fetch_all_reassembles_small_and_large_answers_from_a_real_server() {
    let large = json!({ "text": "Привет, мир 👋 ".repeat(40), "n": [1, 2, 3] });
    let url = serve(parts(100), large.to_string(), None).await;
    assert_eq!(fetch_all(&client(), &url).await.unwrap(), large);
    let small = json!({ "ok": true, "text": "да" });
    let url = serve(parts(100), small.to_string(), None).await;
    assert_eq!(fetch_all(&client(), &url).await.unwrap(), small);
    let limits = FetchLimits { max_parts: 3, ..FetchLimits::default() };
    let url = serve(parts(100), large.to_string(), None).await;
    assert!(matches!(fetch_all_with(&client(), &url, &limits).await, Err(FetchError::TooLarge(_))));
}

#[tokio::test]
async fn fetch_all_keeps_to_its_snapshot_and_starts_again_when_it_is_gone() {
    let v1 = json!({ "text": "первая ".repeat(30) });
    let v2 = json!({ "text": "вторая ".repeat(30) });
    // Kept: every part comes from v1, though the answer changed after part 1.
    let url = serve(parts(64), v1.to_string(), Some(v2.to_string())).await;
    assert_eq!(fetch_all(&client(), &url).await.unwrap(), v1);
    // Nothing kept: part 2 of v1 is gone (410); the second pass reads v2.
    let keep_none = Parts::new(PartsConfig { chunk_bytes: 64, max_snapshots: 0, ..Default::default() });
    let url = serve(keep_none, v1.to_string(), Some(v2.to_string())).await;
    assert_eq!(fetch_all(&client(), &url).await.unwrap(), v2);
    let no_restart = FetchLimits { max_restarts: 0, ..FetchLimits::default() };
    let keep_none = Parts::new(PartsConfig { chunk_bytes: 64, max_snapshots: 0, ..Default::default() });
    let url = serve(keep_none, v1.to_string(), Some(v2.to_string())).await;
    let error = fetch_all_with(&client(), &url, &no_restart).await.unwrap_err();
    assert!(
        matches!(error, FetchError::Status { part: 2, status: 410, ref code } if code.as_deref() == Some("snapshot_expired"))
    );
}

#[test]
fn an_etag_is_the_same_on_every_replica_and_every_build() {
    // Pinned: its length in hex and the first half of its SHA-256, which a
    // replica of another build computes alike.
    let json = r#"{"content":"Сейчас полдень."}"#;
    assert_eq!(etag_of(json), "\"2a-a8c0b95ccde69c25b9c7294de7a393a2\"");
    assert_ne!(etag_of(json), etag_of(&json.replace('.', "!")), "another version, another ETag");
}

#[test]
fn a_versions_mark_is_the_third_field_of_its_etag() {
    let version = Version { json: r#"{"content":"Сейчас полдень."}"#.into(), mark: Some(7) };
    assert_eq!(version.etag(), "\"2a-a8c0b95ccde69c25b9c7294de7a393a2-7\"");
    assert_eq!(mark_of(&version.etag()), Some(7));
    assert_eq!(mark_of(&etag_of(&version.json)), None, "a version without one");
    assert_eq!(mark_of("\"1a-ab-0\""), Some(0));
    for bad in
        ["\"1a-ab-\"", "\"1a-ab-+7\"", "\"1a-ab-07\"", "\"1a-ab-7-8\"", "1a-ab-7", "\"1a-ab-99999999999999999999999\""]
    {
        assert_eq!(mark_of(bad), None, "{bad}");
    }
}

/// Another replica's later part of a running answer: it keeps no snapshot,
/// so the version is made again from its mark and checked against its name.
#[tokio::test]
async fn a_later_part_naming_a_version_kept_nowhere_is_made_again_from_its_mark() {
    let (here, there) = (parts(10), parts(10));
    let at = |n: u64| -> Arc<str> {
        json!({ "status": "running", "text": "слово ".repeat(n as usize) }).to_string().into()
    };
    let query = |part: u32, snapshot: &str| PartQuery { part: Some(part.to_string()), snapshot: Some(snapshot.into()) };
    let first = PartQuery::default();
    let (etag, body) =
        here.part("/r", || Version { json: at(3), mark: Some(3) }, &no_older, &first, None).await.unwrap();
    assert!(etag.ends_with("-3\""), "{etag}");
    let first: Value = serde_json::from_str(&body).unwrap();
    let total = u32::try_from(first["total_parts"].as_u64().unwrap()).unwrap();
    let mut joined = first["content"].as_str().unwrap().to_owned();

    // The answer went on meanwhile: its current version is another one.
    let now = || Version { json: at(5), mark: Some(5) };
    let asked = Mutex::new(None);
    for part in 2..=total {
        let older = |mark| {
            *asked.lock().unwrap() = Some(mark);
            Some(at(mark))
        };
        let (served, body) = there.part("/r", now, &older, &query(part, &etag), None).await.unwrap();
        // Made once, then kept: the next parts asked there are not made again.
        assert_eq!((served.as_str(), asked.lock().unwrap().take()), (etag.as_str(), (part == 2).then_some(3)));
        joined.push_str(serde_json::from_str::<Value>(&body).unwrap()["content"].as_str().unwrap());
    }
    assert_eq!(joined, *at(3), "the version part 1 came from, whole");
    // Kept there, but not as the version an unnamed part is checked against.
    let unnamed = PartQuery { part: Some("2".into()), snapshot: None };
    let (served, _) = there.part("/r", now, &no_older, &unnamed, None).await.unwrap();
    assert_eq!(served, now().etag(), "an unnamed part there comes from the answer as it is");

    // Bytes made again that hash otherwise are not that version; nor is nothing.
    let elsewhere = parts(10);
    let other = |_| Some(at(4));
    assert_eq!(elsewhere.part("/r", now, &other, &query(2, &etag), None).await, Err(PartError::SnapshotExpired));
    assert_eq!(elsewhere.part("/r", now, &no_older, &query(2, &etag), None).await, Err(PartError::SnapshotExpired));
}

/// `If-Match` may list several tags: the part comes from any it names,
/// each made again from its mark, but a long list costs no more than two
/// renders of older versions.
#[tokio::test]
async fn an_if_match_list_is_made_again_from_any_of_its_marks_a_few_at_most() {
    let at = |n: u64| -> Arc<str> {
        json!({ "status": "running", "text": "слово ".repeat(n as usize) }).to_string().into()
    };
    let version = |n: u64| Version { json: at(n), mark: Some(n) };
    let now = || version(9);
    let made = Mutex::new(Vec::new());
    let older = |mark| {
        made.lock().unwrap().push(mark);
        Some(at(mark))
    };
    let part2 = PartQuery { part: Some("2".into()), snapshot: None };
    let bogus = |n: u64| format!("\"1-{}-{n}\"", "0".repeat(32));
    let list = format!("{}, {}, {}", bogus(1), version(3).etag(), version(4).etag());
    let header = HeaderValue::from_str(&list).unwrap();
    let (served, _) = parts(10).part("/r", now, &older, &part2, Some(&header)).await.unwrap();
    assert_eq!(
        (served, std::mem::take(&mut *made.lock().unwrap())),
        (version(3).etag(), vec![1, 3]),
        "the first that hashes to its name"
    );

    let list: Vec<String> = (1..=8).map(bogus).collect();
    let header = HeaderValue::from_str(&list.join(", ")).unwrap();
    let refused = parts(10).part("/r", now, &older, &part2, Some(&header)).await;
    assert_eq!((refused, std::mem::take(&mut *made.lock().unwrap())), (Err(PartError::SnapshotExpired), vec![1, 2]));
}

/// A replica that lags a running call: the versions it makes again wait for
/// the steps to come, and count how often they are made.
struct Lagging {
    steps: tokio::sync::watch::Sender<u64>,
    waiting: tokio::sync::watch::Sender<usize>,
    made: std::sync::atomic::AtomicUsize,
}

impl Older for Lagging {
    async fn reached(&self, mark: u64) -> bool {
        let mut steps = self.steps.subscribe();
        self.waiting.send_modify(|waiting| *waiting += 1);
        steps.wait_for(|steps| *steps >= mark).await.is_ok()
    }

    fn make(&self, mark: u64) -> Option<Arc<str>> {
        self.made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some(json!({ "status": "running", "text": "слово ".repeat(mark as usize) }).to_string().into())
    }
}

/// Clients asking a lagging replica for the same version at once, on
/// every worker thread: it is made once, when the steps come, and every
/// one of them gets it, whether the version is then kept or is too large
/// to keep.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn requests_waiting_for_one_version_make_it_once() {
    for max_snapshot_bytes in [PartsConfig::default().max_snapshot_bytes, 16] {
        let lagging = Arc::new(Lagging {
            steps: tokio::sync::watch::channel(0).0,
            waiting: tokio::sync::watch::channel(0).0,
            made: Default::default(),
        });
        let etag = Version { json: lagging.make(3).unwrap(), mark: Some(3) }.etag();
        lagging.made.store(0, std::sync::atomic::Ordering::Relaxed);
        let parts = Arc::new(Parts::new(PartsConfig { chunk_bytes: 10, max_snapshot_bytes, ..PartsConfig::default() }));
        let asks: Vec<_> = (0..8)
            .map(|_| {
                let (parts, lagging, etag) = (parts.clone(), lagging.clone(), etag.clone());
                tokio::spawn(async move {
                    let query = PartQuery { part: Some("2".into()), snapshot: Some(etag) };
                    let now = || Version { json: "{}".into(), mark: Some(5) };
                    parts.part("/r", now, &*lagging, &query, None).await
                })
            })
            .collect();
        // Every request waits for the steps before they come.
        lagging.waiting.subscribe().wait_for(|waiting| *waiting == 8).await.unwrap();
        assert_eq!(lagging.made.load(std::sync::atomic::Ordering::Relaxed), 0, "nothing made before the steps");
        lagging.steps.send_replace(3);
        for ask in asks {
            let (served, _) = ask.await.unwrap().unwrap();
            assert_eq!(served, etag);
        }
        let made = lagging.made.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(made, 1, "made once for all who waited (max_snapshot_bytes {max_snapshot_bytes})");
        assert!(parts.making().is_empty(), "and no longer being made");
    }
}
