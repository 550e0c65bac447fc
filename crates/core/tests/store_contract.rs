//! The single-flight store's contract, run against every store: the memory
//! one and Redis (a `redis-server` of the test's own). Real time, short
//! TTLs: a Redis key expires by Redis's clock, which no test can move.

#[path = "support/every_store.rs"]
mod every_store;
#[path = "../../../tests/support/redis_server.rs"]
#[allow(dead_code)]
mod redis_server;

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use megamind_core::{
    scenario::Handler,
    store::{
        Begin, FlightStore, Key, Lease, MemoryStore, RedisStore, StoreError, Waited,
        memory::{Limits, unregistered_evictions},
    },
};
use redis_server::RedisServer;
use tokio::time::Instant;

/// How long a `/run` value is kept in these tests.
const TTL: Duration = Duration::from_millis(300);
/// How long a `/commit` value is kept in these tests.
const COMMIT_TTL: Duration = Duration::from_millis(600);
/// A lease that outlives every test.
const LONG: Duration = Duration::from_secs(30);
/// A lease that runs out within a test.
const SHORT: Duration = Duration::from_millis(150);

fn memory() -> Arc<dyn FlightStore> {
    Arc::new(MemoryStore::new(
        Limits { ttl: TTL, commit_ttl: COMMIT_TTL, ..Limits::default() },
        unregistered_evictions(),
    ))
}

fn redis(server: &RedisServer) -> Arc<dyn FlightStore> {
    redis_under(server, "contract")
}

/// A store over a link of its own, as another replica's would be.
fn redis_under(server: &RedisServer, prefix: &str) -> Arc<dyn FlightStore> {
    Arc::new(RedisStore::new(every_store::redis_options(server, prefix, TTL, COMMIT_TTL)).unwrap())
}

against_every_store!(
    "store contract":
    the_first_caller_leads_repeats_wait_then_hit,
    of_concurrent_claims_exactly_one_leads,
    a_wait_ends_by_its_deadline,
    an_abandoned_lease_ends_its_waits_and_the_next_caller_leads,
    a_lease_that_runs_out_is_taken_over,
    a_completion_after_the_lease_ran_out_stores_nothing,
    values_expire_after_their_ttl,
    a_caller_that_may_not_lead_leaves_nothing_behind,
    keys_differ_by_scenario_handler_and_id,
    identical_answers_under_many_keys_replay_whole,
);

fn key(id: &str) -> Key {
    Key::new("demo", Handler::Commit, id)
}

fn in_a_while() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

async fn begin(store: &dyn FlightStore, key: Key, lease: Duration) -> Begin {
    store.begin(key, lease, in_a_while(), &mut || true).await.expect("the store serves")
}

/// Leads `key` and completes it with `value`.
async fn put(store: &dyn FlightStore, key: Key, value: Bytes) {
    let Begin::Lead(lease) = begin(store, key, LONG).await else { panic!("leads") };
    store.complete(lease, value).await.unwrap();
}

async fn the_first_caller_leads_repeats_wait_then_hit(store: Arc<dyn FlightStore>) {
    let Begin::Lead(lease) = begin(&*store, key("a"), LONG).await else { panic!("the first caller leads") };
    let Begin::Wait(waiter) = begin(&*store, key("a"), LONG).await else { panic!("a repeat waits") };
    assert_eq!(store.usage().in_flight, 1);
    let waiting = {
        let store = store.clone();
        tokio::spawn(async move { store.wait(&waiter, in_a_while()).await.unwrap() })
    };
    store.complete(lease, Bytes::from_static(b"answer")).await.unwrap();
    assert_eq!(waiting.await.unwrap(), Waited::Done(Bytes::from_static(b"answer")));
    for _ in 0..3 {
        assert!(matches!(begin(&*store, key("a"), LONG).await, Begin::Hit(value) if &value[..] == b"answer"));
    }
    assert_eq!(store.usage().in_flight, 0);
}

async fn of_concurrent_claims_exactly_one_leads(store: Arc<dyn FlightStore>) {
    let claims = (0..32).map(|_| {
        let store = store.clone();
        tokio::spawn(async move { begin(&*store, key("same"), LONG).await })
    });
    let mut leads = Vec::new();
    let mut waits = 0;
    for claim in claims {
        match claim.await.unwrap() {
            Begin::Lead(lease) => leads.push(lease),
            Begin::Wait(_) => waits += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((leads.len(), waits), (1, 31));
}

async fn a_wait_ends_by_its_deadline(store: Arc<dyn FlightStore>) {
    let Begin::Lead(_lease) = begin(&*store, key("slow"), LONG).await else { panic!("leads") };
    let Begin::Wait(waiter) = begin(&*store, key("slow"), LONG).await else { panic!("waits") };
    let deadline = Instant::now() + Duration::from_millis(80);
    assert_eq!(store.wait(&waiter, deadline).await.unwrap(), Waited::TimedOut);
    let late = Instant::now().saturating_duration_since(deadline);
    assert!(late < Duration::from_millis(40), "the wait ended {late:?} after its deadline");
}

async fn an_abandoned_lease_ends_its_waits_and_the_next_caller_leads(store: Arc<dyn FlightStore>) {
    let Begin::Lead(lease) = begin(&*store, key("b"), LONG).await else { panic!("leads") };
    let Begin::Wait(waiter) = begin(&*store, key("b"), LONG).await else { panic!("waits") };
    store.abandon(lease).await.unwrap();
    assert_eq!(store.wait(&waiter, in_a_while()).await.unwrap(), Waited::Abandoned);
    assert!(matches!(begin(&*store, key("b"), LONG).await, Begin::Lead(_)), "a retry leads at once");
}

async fn a_lease_that_runs_out_is_taken_over(store: Arc<dyn FlightStore>) {
    let started = Instant::now();
    let Begin::Lead(_lost) = begin(&*store, key("c"), SHORT).await else { panic!("leads") };
    let Begin::Wait(waiter) = begin(&*store, key("c"), LONG).await else { panic!("waits") };
    // The wait ends when the lease does, long before its own deadline.
    assert_eq!(store.wait(&waiter, in_a_while()).await.unwrap(), Waited::Abandoned);
    assert!(started.elapsed() >= SHORT, "not before the lease ran out");
    assert!(matches!(begin(&*store, key("c"), LONG).await, Begin::Lead(_)), "the next caller leads");
}

/// A lease of `id` that ran out, seen by a waiter, and the lease that took
/// it over: `(lost, taken_over)`.
async fn a_lease_lost_and_taken_over(store: &dyn FlightStore, id: &str) -> (Lease, Lease) {
    let Begin::Lead(lost) = begin(store, key(id), SHORT).await else { panic!("leads") };
    let Begin::Wait(waiter) = begin(store, key(id), LONG).await else { panic!("waits") };
    assert_eq!(store.wait(&waiter, in_a_while()).await.unwrap(), Waited::Abandoned, "the lease ran out");
    let Begin::Lead(taken_over) = begin(store, key(id), LONG).await else { panic!("taken over") };
    (lost, taken_over)
}

async fn a_completion_after_the_lease_ran_out_stores_nothing(store: Arc<dyn FlightStore>) {
    let (lost, taken_over) = a_lease_lost_and_taken_over(&*store, "d").await;
    store.complete(lost, Bytes::from_static(b"stale")).await.unwrap();
    assert!(matches!(begin(&*store, key("d"), LONG).await, Begin::Wait(_)), "the new lease still holds");
    store.complete(taken_over, Bytes::from_static(b"fresh")).await.unwrap();
    assert!(matches!(begin(&*store, key("d"), LONG).await, Begin::Hit(value) if &value[..] == b"fresh"));
}

async fn values_expire_after_their_ttl(store: Arc<dyn FlightStore>) {
    let run = Key::new("demo", Handler::Run, "e");
    for key in [key("e"), run.clone()] {
        put(&*store, key, Bytes::from_static(b"kept")).await;
    }
    let stored = Instant::now();
    assert!(matches!(begin(&*store, run.clone(), LONG).await, Begin::Hit(_)));
    // Time itself is under test here: the value must outlive no TTL.
    tokio::time::sleep_until(stored + TTL + Duration::from_millis(50)).await;
    assert!(matches!(begin(&*store, run, LONG).await, Begin::Lead(_)), "expired: the next caller leads");
    assert!(matches!(begin(&*store, key("e"), LONG).await, Begin::Hit(_)), "a /commit answer has a TTL of its own");
    tokio::time::sleep_until(stored + COMMIT_TTL + Duration::from_millis(50)).await;
    assert!(matches!(begin(&*store, key("e"), LONG).await, Begin::Lead(_)), "and expires by it");
}

async fn a_caller_that_may_not_lead_leaves_nothing_behind(store: Arc<dyn FlightStore>) {
    let refused = store.begin(key("f"), LONG, in_a_while(), &mut || false).await.unwrap();
    assert!(matches!(refused, Begin::Refused));
    assert!(matches!(begin(&*store, key("f"), LONG).await, Begin::Lead(_)), "no claim was left");
    let Begin::Lead(lease) = begin(&*store, key("g"), LONG).await else { panic!("leads") };
    let waiting = store.begin(key("g"), LONG, in_a_while(), &mut || false).await.unwrap();
    assert!(matches!(waiting, Begin::Wait(_)), "a repeat that may not lead still waits");
    store.complete(lease, Bytes::from_static(b"v")).await.unwrap();
    let hit = store.begin(key("g"), LONG, in_a_while(), &mut || false).await.unwrap();
    assert!(matches!(hit, Begin::Hit(_)), "and replays");
}

async fn keys_differ_by_scenario_handler_and_id(store: Arc<dyn FlightStore>) {
    let keys = [
        Key::new("demo", Handler::Run, "r/1"),
        Key::new("demo", Handler::Commit, "r/1"),
        Key::new("other", Handler::Run, "r/1"),
        Key::new("demo", Handler::Run, "r/1}:c"),
        Key::new("demo", Handler::Run, "{r/1}"),
    ];
    for key in &keys {
        let Begin::Lead(lease) = begin(&*store, key.clone(), LONG).await else { panic!("{key} leads on its own") };
        store.complete(lease, Bytes::from(key.to_string())).await.unwrap();
    }
    for key in &keys {
        let Begin::Hit(value) = begin(&*store, key.clone(), LONG).await else { panic!("{key} hits") };
        assert_eq!(value, Bytes::from(key.to_string()));
    }
}

/// An answer (big enough to be kept once) stored under many keys, another
/// beside it: each key replays its own, whole.
async fn identical_answers_under_many_keys_replay_whole(store: Arc<dyn FlightStore>) {
    let (same, other) = (big_answer(1), big_answer(2));
    for n in 0..5 {
        put(&*store, key(&format!("same-{n}")), same.clone()).await;
    }
    put(&*store, key("other"), other.clone()).await;
    for n in 0..5 {
        assert!(matches!(begin(&*store, key(&format!("same-{n}")), LONG).await, Begin::Hit(value) if value == same));
    }
    assert!(matches!(begin(&*store, key("other"), LONG).await, Begin::Hit(value) if value == other));
}

/// An answer the size of a card, all bytes `byte`.
fn big_answer(byte: u8) -> Bytes {
    Bytes::from(vec![byte; 2900])
}

/// What each key holds, and the key.
type Held = Vec<(String, Vec<u8>)>;

/// The entries and bodies of `prefix`, and what each holds.
fn held_under(server: &RedisServer, prefix: &str) -> (Vec<Vec<u8>>, Held) {
    let mut keys: Vec<String> = server.query(redis::cmd("KEYS").arg(format!("{prefix}:*")));
    keys.sort();
    let (mut entries, mut bodies) = (Vec::new(), Vec::new());
    for key in keys {
        let held: Vec<u8> = server.query(redis::cmd("GET").arg(&key));
        if key.starts_with(&format!("{prefix}:body:")) { bodies.push((key, held)) } else { entries.push(held) }
    }
    (entries, bodies)
}

/// An answer stored again is kept once: a body of its own, the entries
/// referring to it by id; a replica that never saw it reads the body and
/// replays the answer whole, from a hit and from a wait alike.
#[tokio::test]
async fn an_answer_stored_again_is_kept_once_and_replays_on_another_replica() {
    let Some(server) = RedisServer::start("an answer kept once") else { return };
    let (writer, reader) = (redis_under(&server, "once"), redis_under(&server, "once"));
    let answer = big_answer(7);
    for n in 0..3 {
        put(&*writer, key(&format!("k{n}")), answer.clone()).await;
    }
    let (entries, bodies) = held_under(&server, "once");
    assert_eq!(entries.len(), 3, "an entry per key");
    assert_eq!(bodies.len(), 1, "one body");
    assert_eq!(bodies[0].1, answer, "the body holds the answer");
    assert_eq!(entries[0], [&b"v"[..], &answer[..]].concat(), "the first store writes the answer whole");
    for entry in &entries[1..] {
        assert_eq!(entry[0], b'r', "then a reference");
        assert!(entry.len() < 64, "of some tens of bytes: {}", entry.len());
        assert!(bodies[0].0.ends_with(&format!("{{{}}}", String::from_utf8_lossy(&entry[1..]))), "to the body");
    }
    let body_ttl: i64 = server.query(redis::cmd("PTTL").arg(&bodies[0].0));
    assert!(body_ttl > (COMMIT_TTL + Duration::from_secs(19)).as_millis() as i64, "the body outlives its entries");
    for n in 0..3 {
        assert!(matches!(begin(&*reader, key(&format!("k{n}")), LONG).await, Begin::Hit(value) if value == answer));
    }
    let Begin::Lead(lease) = begin(&*writer, key("w"), LONG).await else { panic!("leads") };
    let Begin::Wait(waiter) = begin(&*reader, key("w"), LONG).await else { panic!("waits") };
    writer.complete(lease, answer.clone()).await.unwrap();
    assert_eq!(reader.wait(&waiter, in_a_while()).await.unwrap(), Waited::Done(answer));
}

/// A body Redis lost (a flush) leaves the entries referring to it
/// unreadable: a repeat is refused, never answered with other bytes, and a
/// `/commit` under it is not led again.
#[tokio::test]
async fn an_entry_whose_body_is_gone_is_refused() {
    let Some(server) = RedisServer::start("a body gone") else { return };
    let (writer, reader) = (redis_under(&server, "gone"), redis_under(&server, "gone"));
    put(&*writer, key("g0"), big_answer(3)).await;
    put(&*writer, key("g1"), big_answer(3)).await;
    let (_, bodies) = held_under(&server, "gone");
    let _: () = server.query(redis::cmd("DEL").arg(&bodies[0].0));
    let repeat = reader.begin(key("g1"), LONG, in_a_while(), &mut || true).await;
    assert!(matches!(repeat, Err(StoreError::Lost(_))), "refused: {repeat:?}");
    assert!(matches!(begin(&*reader, key("g0"), LONG).await, Begin::Hit(value) if value == big_answer(3)));
}

/// A Redis that restarted empty gets the body written again before a new
/// entry refers to it: the link's failed command is the sign.
#[tokio::test]
async fn after_redis_restarts_empty_bodies_are_written_again() {
    let Some(mut server) = RedisServer::start("bodies after a restart") else { return };
    let writer = redis_under(&server, "again");
    put(&*writer, key("a0"), big_answer(4)).await;
    put(&*writer, key("a1"), big_answer(4)).await;
    server.restart();
    // The first command on each connection finds it closed, and is sent
    // again over a new one: the calls go through, and the restart is seen.
    for n in 0..10 {
        match writer.begin(key(&format!("probe-{n}")), LONG, in_a_while(), &mut || true).await {
            Ok(Begin::Lead(lease)) => writer.abandon(lease).await.unwrap(),
            other => panic!("a fresh key is led: {other:?}"),
        }
    }
    put(&*writer, key("a2"), big_answer(4)).await;
    put(&*writer, key("a3"), big_answer(4)).await;
    let reader = redis_under(&server, "again");
    for id in ["a2", "a3"] {
        assert!(matches!(begin(&*reader, key(id), LONG).await, Begin::Hit(value) if value == big_answer(4)), "{id}");
    }
}

/// Redis full under `noeviction`: a new `/commit` is refused (nothing is
/// evicted to make room), a `/run` is the caller's to serve elsewhere, and
/// answers already stored still replay.
#[tokio::test]
async fn a_full_redis_refuses_new_commits_and_still_replays() {
    let Some(server) = RedisServer::start("a full Redis") else { return };
    let store = redis_under(&server, "full");
    put(&*store, key("kept"), Bytes::from_static(b"kept")).await;
    let used: String = server.query(redis::cmd("INFO").arg("memory"));
    let used = used.lines().find_map(|line| line.strip_prefix("used_memory:")).unwrap().trim().parse::<u64>().unwrap();
    let _: () = server.query(redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(used / 2));
    assert!(matches!(begin(&*store, key("new"), LONG).await, Begin::Full));
    let run = store.begin(Key::new("demo", Handler::Run, "new"), LONG, in_a_while(), &mut || true).await;
    assert!(run.is_err(), "a /run is not claimed in a full Redis: {run:?}");
    assert!(matches!(begin(&*store, key("kept"), LONG).await, Begin::Hit(value) if &value[..] == b"kept"));
}

/// Keys carry the prefix and a hash tag over scenario, handler and id; the
/// key holds the claim, then the value.
#[tokio::test]
async fn redis_keys_carry_the_prefix_and_a_hash_tag() {
    let Some(server) = RedisServer::start("Redis keys") else { return };
    let store = redis_under(&server, "team-a");
    let Begin::Lead(lease) = begin(&*store, Key::new("demo", Handler::Commit, "r-1"), LONG).await else {
        panic!("leads")
    };
    let keys: Vec<String> = server.query(redis::cmd("KEYS").arg("*"));
    assert_eq!(keys, ["team-a:{demo/commit/r-1}"], "one key per entry");
    let claim: Vec<u8> = server.query(redis::cmd("GET").arg(&keys[0]));
    assert_eq!(claim[0], b'c', "a claim first");
    let lease_ttl: i64 = server.query(redis::cmd("PTTL").arg(&keys[0]));
    assert!(lease_ttl > TTL.as_millis() as i64, "the claim lasts the lease: {lease_ttl} ms");
    store.complete(lease, Bytes::from_static(b"answer")).await.unwrap();
    let value: Vec<u8> = server.query(redis::cmd("GET").arg(&keys[0]));
    assert_eq!(value, b"vanswer", "then the value");
    let ttl: i64 = server.query(redis::cmd("PTTL").arg(&keys[0]));
    assert!(ttl > TTL.as_millis() as i64 && ttl <= COMMIT_TTL.as_millis() as i64, "a /commit TTL: {ttl} ms");
    let keys_after: Vec<String> = server.query(redis::cmd("KEYS").arg("*"));
    assert_eq!(keys_after, keys, "the value took the claim's place, nothing beside it");
}

/// A completion whose lease ran out and was claimed again writes nothing
/// where the new lease can see it, and leaves no other key behind.
#[tokio::test]
async fn a_lost_lease_s_value_is_not_kept_anywhere_in_redis() {
    let Some(server) = RedisServer::start("a lost lease's value") else { return };
    let store = redis_under(&server, "lost");
    let (lost, taken_over) = a_lease_lost_and_taken_over(&*store, "l").await;
    store.complete(lost, Bytes::from_static(b"stale")).await.unwrap();
    let keys: Vec<String> = server.query(redis::cmd("KEYS").arg("*"));
    assert_eq!(keys, ["lost:{demo/commit/l}"], "the entry's key alone");
    let held: Vec<u8> = server.query(redis::cmd("GET").arg(&keys[0]));
    assert_eq!(held[0], b'c', "the new claim holds");
    store.complete(taken_over, Bytes::from_static(b"fresh")).await.unwrap();
    assert!(matches!(begin(&*store, key("l"), LONG).await, Begin::Hit(value) if &value[..] == b"fresh"));
}

/// A Redis that lost its scripts (restarted, or `SCRIPT FLUSH`) is given
/// the end script again, and the completion goes through.
#[tokio::test]
async fn a_redis_that_lost_its_scripts_still_stores_answers() {
    let Some(server) = RedisServer::start("a Redis without scripts") else { return };
    let store = redis_under(&server, "flushed");
    put(&*store, key("f1"), Bytes::from_static(b"one")).await;
    let _: () = server.query(redis::cmd("SCRIPT").arg("FLUSH"));
    put(&*store, key("f2"), Bytes::from_static(b"two")).await;
    assert!(matches!(begin(&*store, key("f2"), LONG).await, Begin::Hit(value) if &value[..] == b"two"));
    let keys: Vec<String> = server.query(redis::cmd("KEYS").arg("*"));
    assert_eq!(keys.len(), 2, "two entries and nothing else: {keys:?}");
}
