//! The shared store when Redis is slow, down, or back: answers stay in
//! time, `/run` falls back to this replica's memory, `/commit` is refused
//! unless told otherwise, and sharing resumes by itself.

#[path = "../../../tests/support/redis_server.rs"]
#[allow(dead_code)]
mod redis_server;

use std::time::Duration;

use bytes::Bytes;
use megamind_core::{
    scenario::Handler,
    store::{
        Begin, CommitFallback, FlightStore, Key, MemoryStore, RedisOptions, RedisStore, SharedStore, StoreError,
        StoreUrl,
        memory::{Limits, unregistered_evictions},
        metrics::StoreMetrics,
    },
};
use prometheus::{Encoder, Registry, TextEncoder};
use redis_server::RedisServer;
use tokio::time::Instant;

const TIMEOUT: Duration = Duration::from_millis(20);
const LEASE: Duration = Duration::from_secs(30);
/// What a timer may be late by on a machine busy with other tests.
const SLACK: Duration = Duration::from_millis(40);

fn shared(url: &str, commit_fallback: CommitFallback) -> (SharedStore, Registry) {
    let registry = Registry::new();
    let options = RedisOptions {
        url: StoreUrl::parse(url).unwrap(),
        prefix: "shared".into(),
        ttl: Duration::from_secs(60),
        commit_ttl: Duration::from_secs(60),
        timeout: TIMEOUT,
        connections: 2,
    };
    let local = MemoryStore::new(Limits::default(), unregistered_evictions());
    let store = SharedStore::new(
        RedisStore::new(options).unwrap(),
        local,
        commit_fallback,
        StoreMetrics::register(&registry),
        url.into(),
    );
    (store, registry)
}

fn metrics(registry: &Registry) -> String {
    let mut text = Vec::new();
    TextEncoder::new().encode(&registry.gather(), &mut text).unwrap();
    String::from_utf8(text).unwrap()
}

async fn begin(store: &SharedStore, handler: Handler, id: &str) -> (Result<Begin, StoreError>, Duration) {
    let started = Instant::now();
    let deadline = started + Duration::from_millis(290);
    let begun = store.begin(Key::new("demo", handler, id), LEASE, deadline, &mut || true).await;
    (begun, started.elapsed())
}

/// Waits for `condition`, checking every 20 ms, for at most `limit`.
async fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    condition()
}

#[tokio::test]
async fn with_redis_down_run_falls_back_and_commit_is_refused_in_time() {
    let Some(mut server) = RedisServer::start("a Redis down") else { return };
    let (store, registry) = shared(&server.url(), CommitFallback::Refuse);
    store.start();
    assert!(matches!(begin(&store, Handler::Run, "warm").await.0, Ok(Begin::Lead(_))), "Redis serves at first");
    server.kill();
    for round in 0..5 {
        let (run, took) = begin(&store, Handler::Run, &format!("run-{round}")).await;
        assert!(matches!(run, Ok(Begin::Lead(_))), "/run leads on this replica: {run:?}");
        assert!(took < TIMEOUT + SLACK, "/run answered the store's failure in {took:?}");
        let (commit, took) = begin(&store, Handler::Commit, &format!("commit-{round}")).await;
        assert!(matches!(commit, Err(StoreError::Unavailable(_))), "/commit is refused: {commit:?}");
        assert!(took < TIMEOUT + SLACK, "/commit was refused in {took:?}");
    }
    assert!(store.is_down(), "failures in a row take the store for down");
    let text = metrics(&registry);
    assert!(text.contains("megamind_store_up 0"), "{text}");
    assert!(text.contains(r#"megamind_store_fallbacks_total{handler="run"} 5"#), "{text}");
    assert!(text.contains(r#"megamind_store_fallbacks_total{handler="commit"} 0"#), "a refusal is no fallback");

    // A repeat on this replica still replays from its memory.
    let Ok(Begin::Lead(lease)) = begin(&store, Handler::Run, "local").await.0 else { panic!("leads locally") };
    store.complete(lease, Bytes::from_static(b"local answer")).await.unwrap();
    assert!(matches!(begin(&store, Handler::Run, "local").await.0, Ok(Begin::Hit(v)) if &v[..] == b"local answer"));

    server.restart();
    let back = eventually(Duration::from_secs(10), || !store.is_down()).await;
    assert!(back, "the store is found back by itself");
    assert!(matches!(begin(&store, Handler::Commit, "after").await.0, Ok(Begin::Lead(_))), "commits run again");
    assert!(metrics(&registry).contains("megamind_store_up 1"));
}

#[tokio::test]
async fn a_redis_that_answers_nothing_costs_a_call_at_most_the_store_timeout() {
    let Some(server) = RedisServer::start("a Redis frozen") else { return };
    let (store, registry) = shared(&server.url(), CommitFallback::Refuse);
    assert!(matches!(begin(&store, Handler::Run, "warm").await.0, Ok(Begin::Lead(_))));
    server.freeze();
    for round in 0..4 {
        let (run, took) = begin(&store, Handler::Run, &format!("r{round}")).await;
        assert!(matches!(run, Ok(Begin::Lead(_))), "{run:?}");
        assert!(took < TIMEOUT + SLACK, "round {round}: {took:?}");
        let (commit, took) = begin(&store, Handler::Apply, &format!("a{round}")).await;
        assert!(matches!(commit, Err(StoreError::Unavailable(_) | StoreError::Timeout(_))), "{commit:?}");
        assert!(took < TIMEOUT + SLACK, "round {round}: {took:?}");
    }
    server.thaw();
    assert!(metrics(&registry).contains(r#"megamind_store_operations_total{op="begin",outcome="timeout"}"#));
}

#[tokio::test]
async fn commits_may_opt_into_this_replicas_memory() {
    // Nothing listens on port 1.
    let (store, _registry) = shared("redis://127.0.0.1:1", CommitFallback::Local);
    let (commit, _) = begin(&store, Handler::Commit, "c").await;
    assert!(matches!(commit, Ok(Begin::Lead(_))), "{commit:?}");
    let (repeat, _) = begin(&store, Handler::Commit, "c").await;
    assert!(matches!(repeat, Ok(Begin::Wait(_))), "the repeat on this replica waits for it: {repeat:?}");
}

#[tokio::test]
async fn errors_never_name_the_password() {
    let (store, _registry) = shared("redis://user:s3cret-pw@127.0.0.1:1", CommitFallback::Refuse);
    for _ in 0..4 {
        let (commit, _) = begin(&store, Handler::Commit, "c").await;
        let error = commit.expect_err("nothing listens");
        assert!(!error.to_string().contains("s3cret"), "{error}");
    }
}

/// A journal read waits no longer than its reader's deadline however stuck
/// Redis is, and with Redis down a journal begun on this replica's memory
/// is appended and read there.
#[tokio::test]
async fn journals_keep_to_the_deadline_and_fall_back_with_their_entry() {
    use megamind_core::store::{Appending, Journal};
    let Some(mut server) = RedisServer::start("a journal on a stuck Redis") else { return };
    let (store, _registry) = shared(&server.url(), CommitFallback::Refuse);
    store.start();
    let (Ok(Begin::Lead(lease)), _) = begin(&store, Handler::Run, "j1").await else { panic!("leads in Redis") };
    let entries = [Bytes::from_static(b"one")];
    let appending = Appending { entries: &entries, end: false, max_len: 100, ttl: LEASE, lease: None };
    assert!(store.append(&lease, appending).await.unwrap());
    let key = Key::new("demo", Handler::Run, "j1");
    server.freeze();
    let started = Instant::now();
    let deadline = started + Duration::from_millis(100);
    let read = store.read(&key, 1, deadline).await;
    let late = Instant::now().saturating_duration_since(deadline);
    assert!(late <= TIMEOUT + SLACK, "a read {late:?} past its deadline: {read:?}");
    server.thaw();

    server.kill();
    // Calls find Redis gone: a few failures in a row take it for down.
    for n in 0..10 {
        let _ = begin(&store, Handler::Run, &format!("probe-{n}")).await;
    }
    assert!(store.is_down(), "taken for down");
    let (Ok(Begin::Lead(local)), took) = begin(&store, Handler::Run, "j2").await else { panic!("leads locally") };
    assert!(took < SLACK, "at once: {took:?}");
    assert!(store.append(&local, appending).await.unwrap(), "appended in this replica's memory");
    let read = store.read(&Key::new("demo", Handler::Run, "j2"), 0, Instant::now()).await.unwrap();
    assert_eq!(read.map(|read| read.entries), Some(entries.to_vec()));
}
