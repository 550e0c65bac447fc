//! The journal's contract, run against every store: the memory one and
//! Redis (a `redis-server` of the test's own). Real time: a Redis key
//! expires by Redis's clock, which no test can move.

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
        Appending, Begin, Entries, FlightStore, Journal, Key, Lease, MemoryStore, RedisOptions, RedisStore,
        memory::{Limits, unregistered_evictions},
    },
};
use redis_server::RedisServer;
use tokio::time::Instant;

/// How long a value (and its journal) is kept in these tests.
const TTL: Duration = Duration::from_millis(300);
/// A lease that outlives every test.
const LONG: Duration = Duration::from_secs(30);
/// A lease that runs out within a test.
const SHORT: Duration = Duration::from_millis(150);

/// A store with its journals.
trait Store: FlightStore + Journal {
    /// Whether a journal outlives its lease: Redis keeps one for its own
    /// TTL (saying nobody holds it), memory's goes with the lease.
    fn keeps_orphans(&self) -> bool;
}

impl Store for MemoryStore {
    fn keeps_orphans(&self) -> bool {
        false
    }
}

impl Store for RedisStore {
    fn keeps_orphans(&self) -> bool {
        true
    }
}

fn memory() -> Arc<dyn Store> {
    Arc::new(MemoryStore::new(Limits { ttl: TTL, commit_ttl: TTL, ..Limits::default() }, unregistered_evictions()))
}

fn redis(server: &RedisServer) -> Arc<dyn Store> {
    Arc::new(RedisStore::new(every_store::redis_options(server, "journal", TTL, TTL)).unwrap())
}

against_every_store!(
    "journal contract":
    entries_read_from_any_offset_in_order,
    a_read_waits_for_the_next_entry_until_its_deadline,
    only_the_lease_holder_appends_and_a_successor_goes_on,
    no_journal_is_none_and_a_fresh_lease_is_an_empty_one,
    the_length_cap_keeps_the_last_entries,
    an_append_sent_again_appends_nothing_twice,
    a_journal_goes_with_its_entry,
    an_append_renews_the_lease_and_a_silent_holder_loses_it,
);

fn key(id: &str) -> Key {
    Key::new("demo", Handler::Run, id)
}

fn in_a_while() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

async fn lead(store: &dyn Store, id: &str, lease: Duration) -> Lease {
    match store.begin(key(id), lease, in_a_while(), &mut || true).await.expect("the store serves") {
        Begin::Lead(lease) => lease,
        other => panic!("{id} leads: {other:?}"),
    }
}

fn bytes(entries: &[&'static str]) -> Vec<Bytes> {
    entries.iter().map(|entry| Bytes::from_static(entry.as_bytes())).collect()
}

/// Appends `entries`, `from` entries after the lease's first.
async fn append(store: &dyn Store, lease: &Lease, from: u64, entries: &[&'static str], end: bool) -> bool {
    let entries = bytes(entries);
    let appending = Appending { entries: &entries, from, end, max_len: 1000, ttl: TTL, lease: None };
    store.append(lease, appending).await.expect("the store serves")
}

async fn read(store: &dyn Store, id: &str, after: u64) -> Option<Entries> {
    store.read(&key(id), after, in_a_while()).await.expect("the store serves")
}

fn read_as(first: u64, entries: &[&'static str], ended: bool) -> Option<Entries> {
    Some(Entries { first, entries: bytes(entries), ended, abandoned: false })
}

async fn entries_read_from_any_offset_in_order(store: Arc<dyn Store>) {
    let lease = lead(&*store, "a", LONG).await;
    assert!(append(&*store, &lease, 0, &["one", "two"], false).await);
    assert_eq!(read(&*store, "a", 0).await, read_as(1, &["one", "two"], false));
    assert!(append(&*store, &lease, 2, &["three"], true).await);
    assert_eq!(read(&*store, "a", 0).await, read_as(1, &["one", "two", "three"], true));
    assert_eq!(read(&*store, "a", 2).await, read_as(3, &["three"], true));
    assert_eq!(read(&*store, "a", 3).await, read_as(4, &[], true), "after the last: the end, at once");
    assert!(!append(&*store, &lease, 3, &["four"], false).await, "nothing after the end");
    store.complete(lease, Bytes::from_static(b"value")).await.unwrap();
    assert_eq!(read(&*store, "a", 1).await, read_as(2, &["two", "three"], true), "kept with the value");
}

async fn a_read_waits_for_the_next_entry_until_its_deadline(store: Arc<dyn Store>) {
    let lease = lead(&*store, "b", LONG).await;
    assert!(append(&*store, &lease, 0, &["one"], false).await);
    let deadline = Instant::now() + Duration::from_millis(80);
    let nothing = store.read(&key("b"), 1, deadline).await.unwrap();
    assert_eq!(nothing, read_as(2, &[], false), "nothing new by the deadline");
    let late = Instant::now().saturating_duration_since(deadline);
    assert!(late < Duration::from_millis(40), "the read ended {late:?} after its deadline");
    assert!(Instant::now() >= deadline - Duration::from_millis(2), "and not before it");

    let reader = {
        let store = store.clone();
        tokio::spawn(async move { store.read(&key("b"), 1, in_a_while()).await.unwrap() })
    };
    // The reader may start waiting before or after this append: it reads it either way.
    let appended = Instant::now();
    assert!(append(&*store, &lease, 1, &["two"], false).await);
    assert_eq!(reader.await.unwrap(), read_as(2, &["two"], false));
    assert!(appended.elapsed() < Duration::from_secs(1), "woken by the append, not the deadline");
}

async fn only_the_lease_holder_appends_and_a_successor_goes_on(store: Arc<dyn Store>) {
    let lost = lead(&*store, "c", SHORT).await;
    assert!(append(&*store, &lost, 0, &["first"], false).await);
    tokio::time::sleep(SHORT + Duration::from_millis(20)).await;
    // Redis keeps the journal for its own TTL and says nobody holds it; memory's went with the lease.
    let orphaned = read(&*store, "c", 0).await;
    if store.keeps_orphans() {
        assert!(
            orphaned.as_ref().is_some_and(|read| read.abandoned && read.entries == bytes(&["first"])),
            "{orphaned:?}"
        );
    } else {
        assert_eq!(orphaned, None);
    }
    assert!(!append(&*store, &lost, 1, &["late"], false).await, "a lease that ran out appends nothing");
    let successor = lead(&*store, "c", LONG).await;
    assert!(!append(&*store, &lost, 1, &["late"], false).await, "nor after the key was taken over");
    assert!(append(&*store, &successor, 0, &["again"], true).await);
    let read = read(&*store, "c", 0).await.expect("a journal");
    assert_eq!(read.entries.last(), Some(&Bytes::from_static(b"again")));
    assert!(!read.entries.contains(&Bytes::from_static(b"late")));
    // Redis keeps the predecessor's entries and numbers on; memory's journal goes with its entry.
    assert!(read.entries == bytes(&["first", "again"]) || read.entries == bytes(&["again"]), "{read:?}");
    assert_eq!(read.last(0), read.entries.len() as u64, "numbered on from 1");
}

async fn no_journal_is_none_and_a_fresh_lease_is_an_empty_one(store: Arc<dyn Store>) {
    assert_eq!(read(&*store, "never", 0).await, None);
    let lease = lead(&*store, "d", LONG).await;
    let soon = Instant::now() + Duration::from_millis(20);
    assert_eq!(store.read(&key("d"), 0, soon).await.unwrap(), read_as(1, &[], false), "led, not yet written");
    store.abandon(lease).await.unwrap();
    assert_eq!(read(&*store, "d", 0).await, None, "abandoned before a word");
}

async fn the_length_cap_keeps_the_last_entries(store: Arc<dyn Store>) {
    let lease = lead(&*store, "e", LONG).await;
    let entries: Vec<Bytes> = (1..=50).map(|n| Bytes::from(n.to_string())).collect();
    for (n, chunk) in entries.chunks(7).enumerate() {
        let from = 7 * n as u64;
        let appending = Appending { entries: chunk, from, end: false, max_len: 10, ttl: TTL, lease: None };
        assert!(store.append(&lease, appending).await.unwrap());
    }
    let read = read(&*store, "e", 0).await.expect("a journal");
    assert_eq!(read.first, 41, "the first ones went");
    assert_eq!(read.entries, entries[40..]);
    assert_eq!(store.read(&key("e"), 45, in_a_while()).await.unwrap().map(|r| r.first), Some(46));
}

/// An append that seemed to fail (a timeout) may have been carried out:
/// its holder sends its entries again with the next ones.
async fn an_append_sent_again_appends_nothing_twice(store: Arc<dyn Store>) {
    let lease = lead(&*store, "h", LONG).await;
    assert!(append(&*store, &lease, 0, &["one", "two"], false).await);
    assert!(append(&*store, &lease, 0, &["one", "two", "three"], false).await, "sent again with a new one");
    assert!(append(&*store, &lease, 0, &["one"], false).await, "a late copy of an older append");
    assert_eq!(read(&*store, "h", 0).await, read_as(1, &["one", "two", "three"], false));
    assert!(!append(&*store, &lease, 5, &["six"], false).await, "entries four and five are not there");
    assert!(append(&*store, &lease, 3, &["four"], true).await);
    assert!(append(&*store, &lease, 3, &["four"], true).await, "the end sent again answers as it did");
    assert!(!append(&*store, &lease, 4, &["five"], false).await, "nothing after the end");
    assert_eq!(read(&*store, "h", 0).await, read_as(1, &["one", "two", "three", "four"], true));
}

async fn a_journal_goes_with_its_entry(store: Arc<dyn Store>) {
    let lease = lead(&*store, "f", LONG).await;
    assert!(append(&*store, &lease, 0, &["kept"], true).await);
    store.complete(lease, Bytes::from_static(b"value")).await.unwrap();
    let stored = Instant::now();
    assert!(read(&*store, "f", 0).await.is_some());
    // Time itself is under test here: the journal must outlive no TTL.
    tokio::time::sleep_until(stored + TTL + Duration::from_millis(50)).await;
    assert_eq!(read(&*store, "f", 0).await, None, "expired with the value");
}

/// The stream sits beside its entry under the same hash tag, and carries
/// the TTL given.
#[tokio::test]
async fn redis_journals_sit_beside_their_entry() {
    let Some(server) = RedisServer::start("Redis journal keys") else { return };
    let store = redis(&server);
    let lease = lead(&*store, "r-1", LONG).await;
    assert!(append(&*store, &lease, 0, &["one"], false).await);
    let mut keys: Vec<String> = server.query(redis::cmd("KEYS").arg("*"));
    keys.sort();
    assert_eq!(
        keys,
        ["journal:{demo/run/r-1}", "journal:{demo/run/r-1}:journal", "journal:{demo/run/r-1}:journal:count"]
    );
    let ttl: i64 = server.query(redis::cmd("PTTL").arg(&keys[1]));
    assert!(ttl > 0 && ttl <= TTL.as_millis() as i64, "the journal's TTL: {ttl} ms");
    let kind: String = server.query(redis::cmd("TYPE").arg(&keys[1]));
    assert_eq!(kind, "stream");
}

/// An append that times out on a stalled Redis is carried out once Redis
/// wakes, whatever its sender thought: sent again with the next entries, it
/// leaves each entry in the journal once.
#[tokio::test]
async fn redis_an_append_carried_out_late_is_not_appended_again() {
    let Some(server) = RedisServer::start("Redis journal appends after a stall") else { return };
    let options = every_store::redis_options(&server, "journal", TTL, TTL);
    let store = RedisStore::new(RedisOptions { timeout: Duration::from_millis(50), ..options }).unwrap();
    let lease = lead(&store, "s-1", LONG).await;
    assert!(append(&store, &lease, 0, &["one"], false).await);
    server.freeze();
    let entries = bytes(&["two"]);
    let appending = Appending { entries: &entries, from: 1, end: false, max_len: 1000, ttl: TTL, lease: None };
    let stalled = store.append(&lease, appending).await;
    assert!(stalled.is_err(), "a stalled Redis answers nothing in time: {stalled:?}");
    server.thaw();
    let entries = bytes(&["two", "three"]);
    let again = Appending { entries: &entries, from: 1, end: true, max_len: 1000, ttl: TTL, lease: None };
    let mut sent = store.append(&lease, again).await;
    // The first command after a stall may meet a connection being made anew.
    for _ in 0..20 {
        if sent.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        sent = store.append(&lease, again).await;
    }
    assert_eq!(sent.ok(), Some(true), "appended once Redis is back");
    assert_eq!(read(&store, "s-1", 0).await, read_as(1, &["one", "two", "three"], true), "each entry once");
}

async fn an_append_renews_the_lease_and_a_silent_holder_loses_it(store: Arc<dyn Store>) {
    let started = Instant::now();
    let lease = lead(&*store, "g", SHORT).await;
    let renew = |lease: &Lease| {
        let store = store.clone();
        let lease = lease.clone();
        async move {
            let appending =
                Appending { entries: &[], from: 0, end: false, max_len: 10, ttl: TTL, lease: Some(2 * SHORT) };
            store.append(&lease, appending).await.unwrap()
        }
    };
    // Renewed twice within each TTL, the lease outlives its first one by far.
    while started.elapsed() < 3 * SHORT {
        assert!(renew(&lease).await, "renewed while held");
        tokio::time::sleep(SHORT / 2).await;
    }
    let repeat = store.begin(key("g"), LONG, in_a_while(), &mut || true).await.unwrap();
    assert!(matches!(repeat, Begin::Wait(_)), "still held: {repeat:?}");
    let Begin::Wait(waiter) = repeat else { unreachable!() };
    // Silent now: the lease runs out a TTL after the last renewal, and its waiters learn it.
    let waited = store.wait(&waiter, in_a_while()).await.unwrap();
    assert_eq!(waited, megamind_core::store::Waited::Abandoned);
    assert!(started.elapsed() < 3 * SHORT + 4 * SHORT, "ended by the last renewal's TTL: {:?}", started.elapsed());
    assert!(matches!(store.begin(key("g"), LONG, in_a_while(), &mut || true).await.unwrap(), Begin::Lead(_)));
}
