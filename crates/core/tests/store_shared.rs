//! The shared store when Redis is slow, down, or back: answers stay in
//! time, `/run` falls back to this replica's memory, `/commit` is refused
//! unless told otherwise, and sharing resumes by itself.

#[path = "../../../tests/support/redis_server.rs"]
#[allow(dead_code)]
mod redis_server;

use std::time::Duration;

use bytes::Bytes;
use megamind_core::{
    config::StoreConfig,
    scenario::Handler,
    store::{
        Begin, CacheStore, CommitFallback, FlightStore, Key, MemoryStore, RedisOptions, RedisStore, SharedStore,
        StoreError, StoreHealth, StoreUrl, Stores, Waited,
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

/// A Redis store of these tests (prefix `shared`), commands bounded by `timeout`.
fn redis_store(url: &str, timeout: Duration) -> RedisStore {
    RedisStore::new(RedisOptions {
        url: StoreUrl::parse(url).unwrap(),
        prefix: "shared".into(),
        ttl: Duration::from_secs(60),
        commit_ttl: Duration::from_secs(60),
        timeout,
        connections: 2,
    })
    .unwrap()
}

fn shared(url: &str, commit_fallback: CommitFallback) -> (SharedStore, Registry) {
    let registry = Registry::new();
    let local = MemoryStore::new(Limits::default(), unregistered_evictions());
    let redis = redis_store(url, TIMEOUT);
    let health = StoreHealth::new(redis.link().clone(), StoreMetrics::register(&registry), commit_fallback);
    let store = SharedStore::new(redis, local, commit_fallback, health);
    (store, registry)
}

/// Two replicas' stores over the Redis at `url`, started.
fn two_replicas(url: &str) -> [(SharedStore, Registry); 2] {
    [(), ()].map(|()| {
        let (store, registry) = shared(url, CommitFallback::Refuse);
        store.start();
        (store, registry)
    })
}

fn metrics(registry: &Registry) -> String {
    let mut text = Vec::new();
    TextEncoder::new().encode(&registry.gather(), &mut text).unwrap();
    String::from_utf8(text).unwrap()
}

/// The probes (and checks of its mark) Redis answered.
const PROBES_OK: &str = r#"megamind_store_operations_total{op="ping",outcome="ok"}"#;

/// The value of the series `series` (name and labels as the text format
/// writes them), listed at zero before anything counts in it.
fn sample(registry: &Registry, series: &str) -> f64 {
    let text = metrics(registry);
    let line = text.lines().find_map(|line| line.strip_prefix(series)).unwrap_or_else(|| panic!("{series} listed"));
    line.trim().parse().expect("a number")
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

/// Kills `server`; calls then find Redis gone, and a few failures in a
/// row take it for down.
async fn kill_and_take_for_down(server: &mut RedisServer, store: &SharedStore) {
    server.kill();
    for n in 0..10 {
        let _ = begin(store, Handler::Run, &format!("probe-{n}")).await;
    }
    assert!(store.is_down(), "taken for down");
}

/// The answer of `/commit` `id` once Redis has stored it, its claim
/// holding meanwhile (a retry then waits rather than run it again).
async fn stored_answer(store: &SharedStore, id: &str) -> Bytes {
    stored_answer_of(store, Handler::Commit, id).await
}

/// The answer of `handler` `id` once Redis has stored it, its claim
/// holding meanwhile.
async fn stored_answer_of(store: &SharedStore, handler: Handler, id: &str) -> Bytes {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        match begin(store, handler, id).await.0 {
            Ok(Begin::Hit(value)) => return value,
            other if Instant::now() < until => {
                assert!(matches!(other, Ok(Begin::Wait(_))), "the claim holds meanwhile: {other:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => panic!("the answer was not stored once Redis took writes again: {other:?}"),
        }
    }
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
async fn a_commit_answer_redis_refused_is_stored_once_it_can_be() {
    an_answer_redis_refused_is_stored_once_it_can_be(Handler::Commit).await;
}

/// A `/run` answer left unstored would hold its claim until the lease runs
/// out, every retry meanwhile waiting for it and answered `timeout`.
#[tokio::test]
async fn a_run_answer_redis_refused_is_stored_once_it_can_be() {
    an_answer_redis_refused_is_stored_once_it_can_be(Handler::Run).await;
}

async fn an_answer_redis_refused_is_stored_once_it_can_be(handler: Handler) {
    let Some(server) = RedisServer::start("an answer stored late") else { return };
    let (store, _registry) = shared(&server.url(), CommitFallback::Refuse);
    let (lead, _) = begin(&store, handler, "late").await;
    let Ok(Begin::Lead(lease)) = lead else { panic!("a first /commit leads: {lead:?}") };
    // Out of memory under noeviction, Redis refuses every write.
    let _: () = server.query(redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg("1"));
    store.complete(lease, Bytes::from_static(b"pushed")).await.unwrap();
    let refused = || {
        let stats: String = server.query(redis::cmd("INFO").arg("commandstats"));
        // The script's own `SET` of the answer, refused.
        stats.lines().any(|line| line.starts_with("cmdstat_set:") && !line.contains("rejected_calls=0"))
    };
    assert!(eventually(Duration::from_secs(5), refused).await, "the answer's first write was refused");
    let _: () = server.query(redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg("0"));
    // Its claim would otherwise hold the entry until the lease runs out, and
    // a retry after that would run the side effect again.
    assert_eq!(&stored_answer_of(&store, handler, "late").await[..], b"pushed");
}

/// Redis full for longer than the lease: the claim stands in for the
/// answer it refused, rather than run out and let a retry run the side
/// effect again.
#[tokio::test]
async fn a_commit_answer_redis_refuses_past_its_lease_holds_its_claim() {
    let Some(server) = RedisServer::start("a commit answer refused past its lease") else { return };
    let (store, _registry) = shared(&server.url(), CommitFallback::Refuse);
    let lease_ttl = Duration::from_millis(400);
    let key = Key::new("demo", Handler::Commit, "full");
    let deadline = Instant::now() + Duration::from_millis(290);
    let lead = store.begin(key, lease_ttl, deadline, &mut || true).await;
    let Ok(Begin::Lead(lease)) = lead else { panic!("a first /commit leads: {lead:?}") };
    let _: () = server.query(redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg("1"));
    store.complete(lease, Bytes::from_static(b"pushed")).await.unwrap();
    // Time itself is under test: the lease would have run out by now.
    tokio::time::sleep(lease_ttl + Duration::from_millis(300)).await;
    let (retry, _) = begin(&store, Handler::Commit, "full").await;
    assert!(matches!(retry, Ok(Begin::Wait(_))), "the claim holds past its lease: {retry:?}");
    let _: () = server.query(redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg("0"));
    assert_eq!(&stored_answer(&store, "full").await[..], b"pushed");
}

#[tokio::test]
async fn a_redis_that_answers_nothing_costs_a_call_at_most_the_store_timeout() {
    let Some(server) = RedisServer::start("a Redis frozen") else { return };
    let (store, registry) = shared(&server.url(), CommitFallback::Refuse);
    assert!(matches!(begin(&store, Handler::Run, "warm").await.0, Ok(Begin::Lead(_))));
    server.freeze();
    let frozen = Instant::now();
    for round in 0..4 {
        let (run, took) = begin(&store, Handler::Run, &format!("r{round}")).await;
        assert!(matches!(run, Ok(Begin::Lead(_))), "{run:?}");
        assert!(took < TIMEOUT + SLACK, "round {round}: {took:?}");
        let (commit, took) = begin(&store, Handler::Apply, &format!("a{round}")).await;
        assert!(matches!(commit, Err(StoreError::Unavailable(_) | StoreError::Timeout(_))), "{commit:?}");
        assert!(took < TIMEOUT + SLACK, "round {round}: {took:?}");
    }
    // Late answers for a moment are no outage: a replica short of CPU sees them too.
    assert!(!store.is_down(), "taken for down after {:?} of timeouts", frozen.elapsed());
    let mut round = 0;
    while !store.is_down() && frozen.elapsed() < Duration::from_secs(5) {
        round += 1;
        let _ = begin(&store, Handler::Run, &format!("late-{round}")).await;
    }
    let took = frozen.elapsed();
    assert!(store.is_down(), "still asked after {took:?} of timeouts");
    assert!(took >= Duration::from_secs(1), "taken for down after {took:?}");
    server.thaw();
    assert!(sample(&registry, r#"megamind_store_operations_total{op="begin",outcome="timeout"}"#) >= 4.0);
}

/// A claim whose caller hung up before Redis's reply came (the call's
/// future dropped with the claim on its way) is given back: it once stayed
/// in Redis with nobody to end it, and every retry of the key waited on it
/// until its lease ran out.
#[tokio::test]
async fn a_claim_whose_caller_hung_up_is_given_back() {
    let Some(server) = RedisServer::start("a claim sent, its caller gone") else { return };
    // A second's timeout of its own: the hang-up comes first.
    let store = redis_store(&server.url(), Duration::from_secs(1));
    let begin = |id: &'static str| async {
        let deadline = Instant::now() + Duration::from_secs(5);
        store.begin(Key::new("demo", Handler::Commit, id), LEASE, deadline, &mut || true).await
    };
    // The pool's two connections, both open.
    for id in ["warm-1", "warm-2"] {
        assert!(matches!(begin(id).await, Ok(Begin::Lead(_))));
    }
    server.freeze();
    let hung_up = tokio::time::timeout(Duration::from_millis(50), begin("gone")).await;
    assert!(hung_up.is_err(), "the claim's reply cannot come from a frozen Redis: {hung_up:?}");
    server.thaw();
    // Redis carries out the claim, then the giving back sent after it.
    let mut retry = begin("gone").await;
    let until = Instant::now() + Duration::from_secs(5);
    while matches!(retry, Ok(Begin::Wait(_))) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
        retry = begin("gone").await;
    }
    assert!(matches!(retry, Ok(Begin::Lead(_))), "a retry leads: {retry:?}");
}

/// A repeat waiting on a Redis that answers none of its polls is a store
/// that does not answer, not one that does: waits alone take a stuck
/// Redis for down (before, each counted as a success and kept it up), and
/// the waiter hears that its wait timed out.
#[tokio::test]
async fn waits_that_redis_never_answers_count_against_it() {
    let Some(server) = RedisServer::start("waits on a Redis frozen") else { return };
    // Not started: no probe of its own counts against the store.
    let (leader, _leader_registry) = shared(&server.url(), CommitFallback::Refuse);
    let (store, registry) = shared(&server.url(), CommitFallback::Refuse);
    let (Ok(Begin::Lead(_lease)), _) = begin(&leader, Handler::Commit, "held").await else { panic!("leads") };
    let (Ok(Begin::Wait(waiter)), _) = begin(&store, Handler::Commit, "held").await else { panic!("waits") };
    // The pool's other connection, open too: one made on a frozen Redis fails otherwise.
    assert!(matches!(begin(&store, Handler::Run, "warm").await.0, Ok(Begin::Lead(_))));
    server.freeze();
    let frozen = Instant::now();
    while !store.is_down() && frozen.elapsed() < Duration::from_secs(5) {
        let waited = store.wait(&waiter, Instant::now() + Duration::from_millis(100)).await;
        assert!(matches!(waited, Ok(Waited::TimedOut)), "{waited:?}");
    }
    let took = frozen.elapsed();
    server.thaw();
    assert!(store.is_down(), "still taken for up after {took:?} of unanswered waits");
    assert!(sample(&registry, r#"megamind_store_operations_total{op="wait",outcome="timeout"}"#) >= 3.0);
}

/// An entry whose answer Redis lost (its body flushed) is a `/commit` that
/// ran: refused, never run again on this replica's memory, even with the
/// local fallback; a `/run` runs there. Redis still serves: it is not taken
/// for down.
#[tokio::test]
async fn an_answer_redis_lost_is_refused_for_a_commit_and_leaves_the_store_up() {
    let Some(server) = RedisServer::start("an answer lost") else { return };
    let writer = redis_store(&server.url(), Duration::from_secs(1));
    let card = Bytes::from(vec![7u8; 2900]);
    for (handler, id) in [(Handler::Commit, "c0"), (Handler::Commit, "c1"), (Handler::Run, "r1")] {
        let begun = writer.begin(Key::new("demo", handler, id), LEASE, Instant::now() + LEASE, &mut || true).await;
        let Ok(Begin::Lead(lease)) = begun else { panic!("leads {id}") };
        writer.complete(lease, card.clone()).await.unwrap();
    }
    let bodies: Vec<String> = server.query(redis::cmd("KEYS").arg("shared:body:*"));
    let _: () = server.query(redis::cmd("DEL").arg(&bodies[..]));
    let (store, _registry) = shared(&server.url(), CommitFallback::Local);
    for _ in 0..5 {
        let (commit, _) = begin(&store, Handler::Commit, "c1").await;
        assert!(matches!(commit, Err(StoreError::Lost(_))), "refused, not run again: {commit:?}");
    }
    assert!(!store.is_down(), "Redis answered every time");
    assert!(matches!(begin(&store, Handler::Run, "r1").await.0, Ok(Begin::Lead(_))), "a /run runs here");
    assert!(matches!(begin(&store, Handler::Commit, "c0").await.0, Ok(Begin::Hit(value)) if value == card));
}

/// A `/commit` whose entry Redis holds but whose answer cannot be read now
/// (its body's read fails: here a key of another type; or the entry is
/// none this server writes) ran: refused, never run again on this
/// replica's memory under the local fallback.
#[tokio::test]
async fn an_answer_held_but_unreadable_is_refused_for_a_commit() {
    let Some(server) = RedisServer::start("an answer unreadable") else { return };
    let writer = redis_store(&server.url(), Duration::from_secs(1));
    let card = Bytes::from(vec![7u8; 2900]);
    // The same answer twice: kept once, as a body both entries refer to.
    for id in ["c1", "c2"] {
        let key = Key::new("demo", Handler::Commit, id);
        let Ok(Begin::Lead(lease)) = writer.begin(key, LEASE, Instant::now() + LEASE, &mut || true).await else {
            panic!("leads {id}")
        };
        writer.complete(lease, card.clone()).await.unwrap();
    }
    let bodies: Vec<String> = server.query(redis::cmd("KEYS").arg("shared:body:*"));
    assert_eq!(bodies.len(), 1, "one body");
    let _: () = server.query(redis::cmd("DEL").arg(&bodies[..]));
    let _: () = server.query(redis::cmd("LPUSH").arg(&bodies[0]).arg("not an answer"));
    let keys: Vec<String> = server.query(redis::cmd("KEYS").arg("shared:*"));
    let entry = keys.iter().find(|key| !key.contains(":body:") && key.contains("c2")).expect("the entry");
    let other = entry.replace("c2", "c3");
    let _: () = server.query(redis::cmd("SET").arg(&other).arg("?written by another program"));
    let (store, _registry) = shared(&server.url(), CommitFallback::Local);
    for id in ["c2", "c3"] {
        let (commit, _) = begin(&store, Handler::Commit, id).await;
        assert!(matches!(commit, Err(StoreError::Unreadable(_))), "{id}: refused, not run again: {commit:?}");
    }
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

/// A `/commit` run on this replica's memory while Redis was away is this
/// replica's to answer once Redis is back too: Redis never heard of it, and
/// a retry here must replay it, or wait for it while it runs, not run it
/// again.
#[tokio::test]
async fn a_commit_run_here_while_redis_was_away_is_answered_here_once_it_is_back() {
    let Some(mut server) = RedisServer::start("a local commit after Redis is back") else { return };
    let (store, _registry) = shared(&server.url(), CommitFallback::Local);
    store.start();
    kill_and_take_for_down(&mut server, &store).await;
    let (Ok(Begin::Lead(done)), _) = begin(&store, Handler::Commit, "done").await else { panic!("leads here") };
    store.complete(done, Bytes::from_static(b"paid here")).await.unwrap();
    let (Ok(Begin::Lead(running)), _) = begin(&store, Handler::Commit, "running").await else { panic!("leads here") };

    server.restart();
    assert!(eventually(Duration::from_secs(10), || !store.is_down()).await, "back");
    let (retry, _) = begin(&store, Handler::Commit, "done").await;
    assert!(matches!(retry, Ok(Begin::Hit(ref value)) if &value[..] == b"paid here"), "replayed: {retry:?}");
    let (retry, _) = begin(&store, Handler::Commit, "running").await;
    assert!(matches!(retry, Ok(Begin::Wait(_))), "waits for the call still running here: {retry:?}");
    store.complete(running, Bytes::from_static(b"paid too")).await.unwrap();
    let (retry, _) = begin(&store, Handler::Commit, "running").await;
    assert!(matches!(retry, Ok(Begin::Hit(ref value)) if &value[..] == b"paid too"), "{retry:?}");
    let (fresh, _) = begin(&store, Handler::Commit, "fresh").await;
    let Ok(Begin::Lead(fresh)) = fresh else { panic!("a new call leads: {fresh:?}") };
    assert!(megamind_core::store::redis::is_claim(&fresh.token), "in Redis");
}

/// With the local fallback, a `/commit` led in Redis is kept in this
/// replica's memory too: a retry here that Redis then fails replays its
/// answer, or waits for it while it runs, rather than run it again in
/// memory. One that ends without an answer leaves the key free.
#[tokio::test]
async fn a_commit_led_in_redis_is_answered_here_when_redis_then_fails() {
    let Some(mut server) = RedisServer::start("a commit led in Redis, then Redis gone") else { return };
    let (store, _registry) = shared(&server.url(), CommitFallback::Local);
    store.start();
    let (Ok(Begin::Lead(done)), _) = begin(&store, Handler::Commit, "done").await else { panic!("leads") };
    assert!(megamind_core::store::redis::is_claim(&done.token), "in Redis");
    store.complete(done, Bytes::from_static(b"paid")).await.unwrap();
    let (Ok(Begin::Lead(running)), _) = begin(&store, Handler::Commit, "running").await else { panic!("leads") };
    let (Ok(Begin::Lead(given_up)), _) = begin(&store, Handler::Commit, "given up").await else { panic!("leads") };
    store.abandon(given_up).await.unwrap();
    let once = || store.usage().in_flight == 1;
    assert!(eventually(Duration::from_secs(5), once).await, "the call running counts once: {:?}", store.usage());

    kill_and_take_for_down(&mut server, &store).await;
    let (retry, _) = begin(&store, Handler::Commit, "done").await;
    assert!(matches!(retry, Ok(Begin::Hit(ref value)) if &value[..] == b"paid"), "replayed: {retry:?}");
    let (retry, _) = begin(&store, Handler::Commit, "running").await;
    let Ok(Begin::Wait(waiter)) = retry else { panic!("waits for the call still running: {retry:?}") };
    store.complete(running, Bytes::from_static(b"paid too")).await.unwrap();
    let waited = store.wait(&waiter, Instant::now() + Duration::from_secs(1)).await;
    assert!(matches!(waited, Ok(Waited::Done(ref value)) if &value[..] == b"paid too"), "{waited:?}");
    let (retry, _) = begin(&store, Handler::Commit, "given up").await;
    assert!(matches!(retry, Ok(Begin::Lead(_))), "an abandoned call runs again: {retry:?}");
}

/// A probe that finds this replica's mark gone notes a loss, as the checks
/// while Redis serves do: after an outage in which Redis only answered
/// late, the probe is what first writes to it again, and a Redis flushed
/// meanwhile would otherwise be taken back as if it held all it held. The
/// first probe, before any mark was written, notes none.
#[tokio::test]
async fn a_probe_that_finds_the_mark_gone_notes_a_loss() {
    use megamind_core::store::Journal;
    let Some(server) = RedisServer::start("a probe after a loss") else { return };
    let redis = redis_store(&server.url(), Duration::from_secs(1));
    let link = redis.link().clone();
    let store = SharedStore::new(
        redis,
        MemoryStore::new(Limits::default(), unregistered_evictions()),
        CommitFallback::Refuse,
        StoreHealth::new(link.clone(), StoreMetrics::register(&Registry::new()), CommitFallback::Refuse),
    );
    link.probe(Duration::from_secs(1)).await.unwrap();
    assert_eq!(link.troubled_since(), None, "nothing lost before the first mark");
    link.probe(Duration::from_secs(1)).await.unwrap();
    assert_eq!(link.troubled_since(), None, "the mark was held");

    let marks: Vec<String> = server.query(redis::cmd("KEYS").arg("shared:probe:*"));
    assert_eq!(marks.len(), 1, "{marks:?}");
    let _: () = server.query(redis::cmd("DEL").arg(&marks[..]));
    let (lost, probed) = tokio::join!(tokio::time::timeout(Duration::from_secs(2), store.loss_found()), async {
        tokio::task::yield_now().await;
        link.probe(Duration::from_secs(1)).await
    });
    probed.unwrap();
    assert!(lost.is_ok(), "the loss was noted");
    assert!(link.troubled_since().is_some(), "a trouble noted");
}

/// A read that waits for the next entry in a block Redis then never ends
/// (Redis frozen) ends at its deadline with no news, not a store's
/// timeout past it.
#[tokio::test]
async fn a_blocked_read_ends_by_its_deadline() {
    use megamind_core::store::{Appending, Journal};
    let Some(server) = RedisServer::start("a blocked read on a frozen Redis") else { return };
    // A long timeout, which the read must not wait out past its deadline.
    let store = redis_store(&server.url(), Duration::from_secs(1));
    let key = Key::new("demo", Handler::Run, "blocked");
    let deadline = Instant::now() + Duration::from_secs(1);
    let Ok(Begin::Lead(lease)) = store.begin(key.clone(), LEASE, deadline, &mut || true).await else { panic!("leads") };
    let entries = [Bytes::from_static(b"one")];
    let appending = Appending { entries: &entries, from: 0, end: false, max_len: 100, ttl: LEASE, lease: None };
    assert!(store.append(&lease, appending).await.unwrap());
    let deadline = Instant::now() + Duration::from_millis(800);
    let (read, ()) = tokio::join!(store.read(&key, 1, deadline), async {
        // Frozen once the read blocks in Redis.
        let blocked = || {
            let clients: String = server.query(redis::cmd("CLIENT").arg("LIST"));
            clients.contains("cmd=xread")
        };
        assert!(eventually(Duration::from_millis(700), blocked).await, "the read blocks");
        server.freeze();
    });
    let late = Instant::now().saturating_duration_since(deadline);
    server.thaw();
    assert!(late <= SLACK, "a read {late:?} past its deadline: {read:?}");
    let read = read.expect("no news is no error");
    assert!(read.is_some_and(|read| read.entries.is_empty()), "no news");
}

/// A claim a journal's appends renew (a model call's, of a few seconds,
/// renewed every second) runs on past its first lease: its answer, which
/// Redis could not take at first, is tried again for as long as the claim
/// holds, not only until the end of its first lease.
#[tokio::test]
async fn an_answer_is_tried_again_while_its_renewed_claim_holds() {
    use megamind_core::store::{Appending, Journal};
    let Some(mut server) = RedisServer::start("a renewed claim") else { return };
    let (store, _registry) = shared(&server.url(), CommitFallback::Refuse);
    store.start();
    let lease_for = Duration::from_secs(3);
    let key = Key::new("assistant", Handler::Run, "renewed");
    let started = Instant::now();
    let Ok(Begin::Lead(lease)) = store.begin(key, lease_for, Instant::now() + lease_for, &mut || true).await else {
        panic!("leads")
    };
    // Renewed to 5.5 s from the start.
    let entries = [Bytes::from_static(b"one")];
    for (from, at) in [(0, 500), (1, 1000), (2, 1500), (3, 2000), (4, 2500)] {
        tokio::time::sleep_until(started + Duration::from_millis(at)).await;
        let appending =
            Appending { entries: &entries, from, end: false, max_len: 100, ttl: LEASE, lease: Some(lease_for) };
        assert!(store.append(&lease, appending).await.unwrap(), "renewed");
    }
    // Killed: no answer is taken, late or not; back (empty) past the
    // first lease's end, within the renewed one's.
    server.kill();
    store.complete(lease, Bytes::from_static(b"answer")).await.unwrap();
    tokio::time::sleep_until(started + Duration::from_millis(3200)).await;
    server.restart();
    let held = || -> Option<Vec<u8>> { server.query(redis::cmd("GET").arg("shared:{assistant/run/renewed}")) };
    let stored = eventually(Duration::from_secs(5), || held().is_some_and(|held| held.first() == Some(&b'v'))).await;
    assert!(stored, "the answer was given up: {:?}", held());
}

/// A `/commit` answer that Redis could not take for longer than its claim
/// lasted (frozen: a fork, a slow disk, a failover) is stored once Redis
/// takes writes again, into the key its claim left empty: a retry after
/// the outage replays it rather than run the side effect again.
#[tokio::test]
async fn a_commit_answer_redis_could_not_take_past_its_claim_is_stored_once_it_can_be() {
    let Some(server) = RedisServer::start("an outage past the claim") else { return };
    let (store, _registry) = shared(&server.url(), CommitFallback::Refuse);
    store.start();
    let claim = Duration::from_millis(300);
    let key = Key::new("demo", Handler::Commit, "outage");
    let Ok(Begin::Lead(lease)) = store.begin(key, claim, Instant::now() + claim, &mut || true).await else {
        panic!("leads")
    };
    server.freeze();
    store.complete(lease, Bytes::from_static(b"ran")).await.unwrap();
    // The outage itself: Redis runs the claim's expiry by the clock once thawed.
    tokio::time::sleep(claim * 2).await;
    server.thaw();
    let held = || -> Option<Vec<u8>> { server.query(redis::cmd("GET").arg("shared:{demo/commit/outage}")) };
    let stored = eventually(Duration::from_secs(10), || held().is_some_and(|held| held.first() == Some(&b'v'))).await;
    assert!(stored, "the answer was never stored: {:?}", held());
    // A store taken for down in the outage refuses a /commit until it is found back.
    assert!(eventually(Duration::from_secs(5), || !store.is_down()).await, "found back");
    let (retry, _) = begin(&store, Handler::Commit, "outage").await;
    assert!(matches!(retry, Ok(Begin::Hit(ref value)) if &value[..] == b"ran"), "replayed: {retry:?}");
}

/// The answer of a call whose claim Redis no longer holds (the claim ran
/// out while the call ran, or Redis lost it) is stored all the same when
/// nobody else took the key: a retry replays it rather than run the side
/// effect again. A key that another call claimed since is left to it.
#[tokio::test]
async fn an_answer_whose_claim_is_gone_is_stored_unless_another_took_the_key() {
    let Some(server) = RedisServer::start("an answer after its claim") else { return };
    let (store, _registry) = shared(&server.url(), CommitFallback::Refuse);
    let (Ok(Begin::Lead(gone)), _) = begin(&store, Handler::Commit, "gone").await else { panic!("leads") };
    let (Ok(Begin::Lead(taken)), _) = begin(&store, Handler::Commit, "taken").await else { panic!("leads") };
    let _: () = server.query(redis::cmd("DEL").arg("shared:{demo/commit/gone}"));
    let _: () = server.query(redis::cmd("SET").arg("shared:{demo/commit/taken}").arg("canother:1"));
    store.complete(taken, Bytes::from_static(b"ran too")).await.unwrap();
    store.complete(gone, Bytes::from_static(b"ran")).await.unwrap();
    let held =
        |id: &str| -> Option<Vec<u8>> { server.query(redis::cmd("GET").arg(format!("shared:{{demo/commit/{id}}}"))) };
    // Stored in the background, after the answer of "taken" was tried.
    assert!(eventually(Duration::from_secs(5), || held("gone").is_some()).await, "the answer was never stored");
    let (retry, _) = begin(&store, Handler::Commit, "gone").await;
    assert!(matches!(retry, Ok(Begin::Hit(ref value)) if &value[..] == b"ran"), "replayed: {retry:?}");
    assert_eq!(held("taken").as_deref(), Some(&b"canother:1"[..]), "another's claim is left alone");
}

/// An answer stored whose reply was lost (its connection dropped) is sent
/// again: the second finds it there and says it was stored, rather than
/// that another call took the key and may run the side effect again.
#[tokio::test]
async fn an_answer_stored_and_sent_again_is_found_stored() {
    let Some(server) = RedisServer::start("an answer sent again") else { return };
    let store = redis_store(&server.url(), Duration::from_secs(1));
    let key = Key::new("demo", Handler::Commit, "twice");
    let deadline = Instant::now() + Duration::from_secs(1);
    let Ok(Begin::Lead(lease)) = store.begin(key, LEASE, deadline, &mut || true).await else { panic!("leads") };
    let answer = Bytes::from_static(b"paid");
    assert!(store.end(&lease, Some(answer.clone())).await.unwrap());
    assert!(store.end(&lease, Some(answer)).await.unwrap(), "found stored");
    assert!(!store.end(&lease, Some(Bytes::from_static(b"other"))).await.unwrap(), "not another answer");
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
    let (store, registry) = shared(&server.url(), CommitFallback::Refuse);
    store.start();
    // A first probe that Redis's freeze below held up would take it for
    // down at once, as at a server's start.
    let probed = || sample(&registry, PROBES_OK) >= 1.0;
    assert!(eventually(Duration::from_secs(5), probed).await, "the first probe found Redis");
    let (Ok(Begin::Lead(lease)), _) = begin(&store, Handler::Run, "j1").await else { panic!("leads in Redis") };
    assert_eq!(store.troubled_since(), None, "Redis never failed it");
    let entries = [Bytes::from_static(b"one")];
    let appending = Appending { entries: &entries, from: 0, end: false, max_len: 100, ttl: LEASE, lease: None };
    assert!(store.append(&lease, appending).await.unwrap());
    let key = Key::new("demo", Handler::Run, "j1");
    server.freeze();
    let started = Instant::now();
    let deadline = started + Duration::from_millis(100);
    let read = store.read(&key, 1, deadline).await;
    let late = Instant::now().saturating_duration_since(deadline);
    assert!(late <= TIMEOUT + SLACK, "a read {late:?} past its deadline: {read:?}");
    // Not "no such journal": its reader tries again rather than give up on the call.
    assert!(matches!(read, Err(StoreError::Timeout(_))), "a journal out of reach is an error: {read:?}");
    server.thaw();

    let troubled = store.troubled_since().expect("the read that timed out was a trouble");
    kill_and_take_for_down(&mut server, &store).await;
    assert!(store.troubled_since().is_some_and(|since| since > troubled), "and so is Redis gone");
    let elsewhere = store.read(&Key::new("demo", Handler::Run, "elsewhere"), 0, Instant::now()).await;
    assert!(
        matches!(elsewhere, Err(StoreError::Unavailable(_))),
        "a journal Redis cannot be asked for may be there: {elsewhere:?}"
    );
    let (Ok(Begin::Lead(local)), took) = begin(&store, Handler::Run, "j2").await else { panic!("leads locally") };
    assert!(took < SLACK, "at once: {took:?}");
    assert!(store.append(&local, appending).await.unwrap(), "appended in this replica's memory");
    let read = store.read(&Key::new("demo", Handler::Run, "j2"), 0, Instant::now()).await.unwrap();
    assert_eq!(read.map(|read| read.entries), Some(entries.to_vec()));

    // The key whose journal in Redis a reader followed to entry 1, begun
    // anew here: that reader must not go on into this other call's entries.
    let (Ok(Begin::Lead(again)), _) = begin(&store, Handler::Run, "j1").await else { panic!("leads locally") };
    let other = [Bytes::from_static(b"other one"), Bytes::from_static(b"other two")];
    let appending = Appending { entries: &other, from: 0, end: false, max_len: 100, ttl: LEASE, lease: None };
    assert!(store.append(&again, appending).await.unwrap());
    let read = store.read(&key, 1, Instant::now()).await;
    assert!(matches!(read, Err(StoreError::Unavailable(_))), "out of reach, not another call's entries: {read:?}");
    let fresh = store.read(&key, 0, Instant::now()).await.unwrap().map(|read| read.entries);
    assert_eq!(fresh, Some(other.to_vec()), "a reader from the start reads the call begun here");
}

/// A lease taken in this replica's memory while Redis was gone is claimed
/// in Redis once it is back, unless another replica holds its key there.
#[tokio::test]
async fn a_lease_taken_while_redis_was_gone_is_shared_once_it_is_back() {
    let Some(mut server) = RedisServer::start("leases shared once Redis is back") else { return };
    let [(store, _registry), (other, _other_registry)] = two_replicas(&server.url());
    kill_and_take_for_down(&mut server, &store).await;
    let (Ok(Begin::Lead(alone)), _) = begin(&store, Handler::Run, "alone").await else { panic!("leads locally") };
    let (Ok(Begin::Lead(twice)), _) = begin(&store, Handler::Run, "twice").await else { panic!("leads locally") };
    let soon = || Instant::now() + Duration::from_millis(200);
    assert!(matches!(store.share(&alone, LEASE, soon()).await, Ok(None)), "nothing to share with while it is down");

    server.restart();
    assert!(eventually(Duration::from_secs(10), || !store.is_down() && !other.is_down()).await, "back");
    // Another replica began "twice" in Redis meanwhile.
    let (Ok(Begin::Lead(theirs)), _) = begin(&other, Handler::Run, "twice").await else { panic!("leads in Redis") };
    let Ok(Some(Begin::Lead(claim))) = store.share(&alone, LEASE, soon()).await else { panic!("claimed in Redis") };
    assert!(megamind_core::store::redis::is_claim(&claim.token), "a claim in Redis");
    assert!(matches!(store.share(&claim, LEASE, soon()).await, Ok(Some(Begin::Wait(_)))), "a claim still held is held");
    assert!(matches!(begin(&other, Handler::Run, "alone").await.0, Ok(Begin::Wait(_))), "other replicas wait for it");
    let shared_twice = store.share(&twice, LEASE, soon()).await;
    assert!(matches!(shared_twice, Ok(Some(Begin::Wait(_)))), "held by the other replica: {shared_twice:?}");
    other.complete(theirs, Bytes::from_static(b"theirs")).await.unwrap();
    // Stored in the background: waited for while its claim holds.
    let mut stored = None;
    for _ in 0..100 {
        match store.share(&twice, LEASE, soon()).await {
            Ok(Some(Begin::Hit(value))) => {
                stored = Some(value);
                break;
            }
            Ok(Some(Begin::Wait(_))) => tokio::time::sleep(Duration::from_millis(20)).await,
            other => panic!("the other replica's claim or answer: {other:?}"),
        }
    }
    assert_eq!(stored.as_deref(), Some(&b"theirs"[..]), "then its answer");
    let memory = MemoryStore::new(Limits::default(), unregistered_evictions());
    assert!(matches!(memory.share(&alone, LEASE, soon()).await, Ok(None)), "a store in memory alone shares nothing");
}

/// A journal begun in this replica's memory while Redis was gone, then
/// shared once it was back, lives here no longer than its copy there: a
/// reader on this replica is told it is gone when readers on every other
/// replica are, rather than served a copy only this one kept.
#[tokio::test]
async fn a_shared_journal_kept_here_too_expires_with_its_copy_in_redis() {
    use megamind_core::store::{Appending, Journal};
    let Some(mut server) = RedisServer::start("a shared journal's local copy") else { return };
    let [(store, _registry), (other, _other_registry)] = two_replicas(&server.url());
    kill_and_take_for_down(&mut server, &store).await;
    let (Ok(Begin::Lead(local)), _) = begin(&store, Handler::Run, "copied").await else { panic!("leads locally") };
    let entries = [Bytes::from_static(b"one"), Bytes::from_static(b"two")];
    let kept = Duration::from_millis(400);
    let appending = Appending { entries: &entries, from: 0, end: true, max_len: 100, ttl: kept, lease: None };
    assert!(store.append(&local, appending).await.unwrap(), "appended in this replica's memory");

    server.restart();
    assert!(eventually(Duration::from_secs(10), || !store.is_down() && !other.is_down()).await, "back");
    let soon = || Instant::now() + Duration::from_millis(200);
    let Ok(Some(Begin::Lead(claim))) = store.share(&local, LEASE, soon()).await else { panic!("claimed in Redis") };
    assert!(store.append(&claim, appending).await.unwrap(), "written anew in Redis");
    let key = Key::new("demo", Handler::Run, "copied");
    let read = other.read(&key, 0, soon()).await.unwrap().map(|read| read.entries);
    assert_eq!(read, Some(entries.to_vec()), "every replica reads it from Redis");
    store.complete(local, Bytes::from_static(b"answer")).await.unwrap();
    store.complete(claim, Bytes::from_static(b"answer")).await.unwrap();

    let until = Instant::now() + Duration::from_secs(5);
    while other.read(&key, 0, soon()).await.unwrap().is_some() {
        assert!(Instant::now() < until, "Redis kept the journal past its TTL");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let here = store.read(&key, 0, soon()).await.unwrap();
    assert!(here.is_none(), "gone here as it is everywhere: {here:?}");
}

/// A write Redis carries out while it is taken for down (a claim's
/// append, still sent there) finds it back at once, before the probe: the
/// replica that ran a call then offers it again first.
#[tokio::test]
async fn a_write_redis_carries_out_finds_it_back_at_once() {
    use megamind_core::store::{Appending, Journal};
    let Some(mut server) = RedisServer::start("a write finds Redis back") else { return };
    let (store, _registry) = shared(&server.url(), CommitFallback::Refuse);
    store.start();
    let (Ok(Begin::Lead(claim)), _) = begin(&store, Handler::Run, "w1").await else { panic!("leads in Redis") };
    kill_and_take_for_down(&mut server, &store).await;
    server.restart();
    let appending = Appending { entries: &[], from: 0, end: false, max_len: 100, ttl: LEASE, lease: None };
    let mut appended = store.append(&claim, appending).await;
    // The first command after a restart may meet the old connection.
    for _ in 0..3 {
        if appended.is_ok() {
            break;
        }
        appended = store.append(&claim, appending).await;
    }
    assert!(matches!(appended, Ok(false)), "the claim went with the restart: {appended:?}");
    assert!(!store.is_down(), "back at once");
}

#[tokio::test]
async fn every_store_of_a_server_shares_its_connections_and_its_health() {
    let Some(mut server) = RedisServer::start("stores sharing one link") else { return };
    let registry = Registry::new();
    let config = StoreConfig { url: server.url(), connections: 1, ..StoreConfig::default() };
    let stores = Stores::of(&config, &registry).unwrap();
    let limits = Limits::default();
    let local = MemoryStore::new(limits, unregistered_evictions());
    let CacheStore::Shared(cache) = stores.for_cache(local, &limits, CommitFallback::Refuse) else {
        panic!("a shared cache store")
    };
    let scenario = |namespace| stores.build(namespace, limits, unregistered_evictions()).unwrap().flights;
    let (mine, theirs) = (scenario("mine"), scenario("theirs"));
    cache.start();
    mine.start();
    theirs.start();
    let deadline = || Instant::now() + Duration::from_millis(290);
    for store in [&*cache as &dyn FlightStore, &*mine, &*theirs] {
        let lead = store.begin(Key::new("demo", Handler::Run, "one"), LEASE, deadline(), &mut || true).await;
        assert!(matches!(lead, Ok(Begin::Lead(_))), "each store has keys of its own: {lead:?}");
    }
    let clients: String = server.query(redis::cmd("CLIENT").arg("LIST"));
    // The test's own connection for CLIENT LIST, and the server's one.
    assert_eq!(clients.lines().count(), 2, "three stores, one pool of one connection: {clients}");

    server.kill();
    let (killed, mut round) = (Instant::now(), 0);
    while !cache.is_down() && killed.elapsed() < Duration::from_secs(5) {
        round += 1;
        let key = Key::new("demo", Handler::Run, &format!("down-{round}"));
        let fell_back = cache.begin(key, LEASE, deadline(), &mut || true).await;
        assert!(matches!(fell_back, Ok(Begin::Lead(_))), "/run leads in memory: {fell_back:?}");
    }
    assert!(cache.is_down(), "failures take Redis for down");
    let before = metrics(&registry);
    let lead = mine.begin(Key::new("demo", Handler::Run, "while down"), LEASE, deadline(), &mut || true).await;
    assert!(matches!(lead, Ok(Begin::Lead(_))), "a scenario's store falls back at once: {lead:?}");
    let after = metrics(&registry);
    let begins = |text: &str| text.lines().filter(|l| l.contains(r#"op="begin""#)).collect::<Vec<_>>().join("\n");
    assert_eq!(begins(&before), begins(&after), "nor asks Redis, which the cache found down");
    let fallbacks = format!(r#"megamind_store_fallbacks_total{{handler="run"}} {}"#, round + 1);
    assert!(after.contains(&fallbacks), "{fallbacks}: {after}");
}

/// Followers blocked on journals take a connection each, up to a bound;
/// past it they poll, and still get what is appended in time.
#[tokio::test]
async fn blocking_journal_reads_open_a_bounded_number_of_connections() {
    use megamind_core::store::{Appending, Journal, redis::MAX_BLOCKING};
    let Some(server) = RedisServer::start("many followers of one journal") else { return };
    let (store, _registry) = shared(&server.url(), CommitFallback::Refuse);
    store.start();
    let store = std::sync::Arc::new(store);
    let (Ok(Begin::Lead(lease)), _) = begin(&store, Handler::Run, "followed").await else { panic!("leads") };
    let key = Key::new("demo", Handler::Run, "followed");
    // A second call, so that the pool's two connections are both open.
    assert!(matches!(begin(&store, Handler::Run, "warm").await.0, Ok(Begin::Lead(_))));
    // One connection of the test's own, so that it counts once.
    let mut own = redis::Client::open(server.url()).unwrap().get_connection().unwrap();
    let mut clients = || redis::cmd("CLIENT").arg("LIST").query::<String>(&mut own).unwrap().lines().count();
    let all_blocked = clients() + MAX_BLOCKING;
    let readers = MAX_BLOCKING + 16;
    let deadline = Instant::now() + Duration::from_secs(10);
    let followers: Vec<_> = (0..readers)
        .map(|_| {
            let (store, key) = (store.clone(), key.clone());
            tokio::spawn(async move {
                // Read again while there is no news, as a follower does.
                loop {
                    let read = store.read(&key, 0, deadline).await.unwrap().expect("a journal");
                    if !read.entries.is_empty() || Instant::now() >= deadline {
                        return read.entries;
                    }
                }
            })
        })
        .collect();
    assert!(eventually(Duration::from_secs(5), || clients() >= all_blocked).await, "never {all_blocked} connections");
    assert_eq!(clients(), all_blocked, "{readers} followers, {MAX_BLOCKING} of them blocked on a connection each");
    let entries = [Bytes::from_static(b"news")];
    let appending = Appending { entries: &entries, from: 0, end: false, max_len: 100, ttl: LEASE, lease: None };
    assert!(store.append(&lease, appending).await.unwrap());
    for follower in followers {
        assert_eq!(follower.await.unwrap(), entries.to_vec(), "every follower got the entry in time");
    }
}

/// A claim Redis carries out only after its command ran late (Redis stalled
/// past the store's timeout: a fork, an fsync, a pause) is given back once
/// Redis answers: the call was refused, and a retry on any replica must run
/// it rather than wait for a claim no call will end.
#[tokio::test]
async fn a_claim_redis_took_too_late_is_given_back_once_it_answers() {
    let Some(server) = RedisServer::start("a claim taken late") else { return };
    let (store, _registry) = shared(&server.url(), CommitFallback::Refuse);
    // The pool's two connections, both open: the claim is sent, not stuck connecting.
    for n in 0..2 {
        assert!(matches!(begin(&store, Handler::Run, &format!("warm-{n}")).await.0, Ok(Begin::Lead(_))));
    }
    server.freeze();
    let (commit, _) = begin(&store, Handler::Commit, "stalled").await;
    assert!(matches!(commit, Err(StoreError::Unavailable(_))), "refused while Redis stalls: {commit:?}");
    server.thaw();
    let key = "shared:{demo/commit/stalled}";
    let gone =
        eventually(Duration::from_secs(5), || server.query::<Option<Vec<u8>>>(redis::cmd("GET").arg(key)).is_none());
    assert!(gone.await, "the late claim still holds {key}");
    let (other_replica, _registry) = shared(&server.url(), CommitFallback::Refuse);
    let (retry, _) = begin(&other_replica, Handler::Commit, "stalled").await;
    assert!(matches!(retry, Ok(Begin::Lead(_))), "a retry on another replica runs the call: {retry:?}");
}

/// A Redis full under `noeviction` is up: a fresh `/run` runs on this
/// replica's memory, a fresh `/commit` is `Full`, and the store is not taken
/// for down however many calls find it full.
#[tokio::test]
async fn a_full_redis_is_not_taken_for_down() {
    let Some(server) = RedisServer::start("a full Redis") else { return };
    let (store, registry) = shared(&server.url(), CommitFallback::Refuse);
    store.start();
    assert!(matches!(begin(&store, Handler::Run, "warm").await.0, Ok(Begin::Lead(_))));
    let _: () = server.query(redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg("1"));
    for n in 0..10 {
        let (run, _) = begin(&store, Handler::Run, &format!("full-{n}")).await;
        assert!(matches!(run, Ok(Begin::Lead(_))), "a /run runs here: {run:?}");
    }
    let (commit, _) = begin(&store, Handler::Commit, "full").await;
    assert!(matches!(commit, Ok(Begin::Full)), "a /commit is told Redis is full: {commit:?}");
    assert!(!store.is_down(), "a full Redis answers: it is up");
    assert!(metrics(&registry).contains("megamind_store_up 1"));
    let _: () = server.query(redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg("0"));
}

/// A Redis that answers `PING` but refuses writes (a replica left read-only
/// after a failover) stays taken for down until it takes writes again,
/// rather than found back at every probe and lost at the next call.
/// A Redis flushed under open connections drops none of them: a journal
/// it then says it lacks is taken for one it may have lost, a trouble
/// noted once by each replica (as after a restart), so that readers wait
/// for its writer to write it anew. Before the flush, a journal it lacks
/// is only lacking.
#[tokio::test]
async fn a_journal_lacking_after_a_flush_is_a_trouble_each_replica_notes_once() {
    use megamind_core::store::Journal;
    let Some(server) = RedisServer::start("a flushed Redis") else { return };
    let [(first, _), (second, _)] = two_replicas(&server.url());
    let key = Key::new("demo", Handler::Run, "never-begun");
    let lacking = async |store: &SharedStore| {
        let read = store.read(&key, 0, Instant::now() + Duration::from_millis(200)).await;
        assert!(matches!(read, Ok(None)), "no such journal: {read:?}");
    };
    for store in [&first, &second, &first] {
        lacking(store).await;
        assert_eq!(store.troubled_since(), None, "a journal never written is no sign of a loss");
    }

    let () = server.query(&mut redis::cmd("FLUSHALL"));
    let flushed = Instant::now();
    for store in [&first, &second] {
        lacking(store).await;
        let noted = store.troubled_since().expect("the flush is noted at the first journal found lacking");
        // Noted in whole ms.
        assert!(noted + Duration::from_millis(2) >= flushed, "{:?} before the flush", flushed - noted);
        lacking(store).await;
        assert_eq!(store.troubled_since(), Some(noted), "once");
    }
}

/// A flush is noted within a second or so even with no journal read (the
/// replica checks its mark), and from then on an answer this replica keeps
/// once is written again before an entry refers to it: a retry on another
/// replica replays it rather than find its body gone.
#[tokio::test]
async fn after_a_flush_is_noted_bodies_are_written_again() {
    use megamind_core::store::Journal;
    let Some(server) = RedisServer::start("bodies after a flush") else { return };
    let [(writer, _), _] = two_replicas(&server.url());
    let card = Bytes::from(vec![7u8; 2900]);
    let store = async |id: &str| {
        let (Ok(Begin::Lead(lease)), _) = begin(&writer, Handler::Commit, id).await else { panic!("leads {id}") };
        writer.complete(lease, card.clone()).await.unwrap();
    };
    // Each time another replica, which has read no body yet.
    let replays = async |id: &str| {
        let (reader, _) = shared(&server.url(), CommitFallback::Refuse);
        stored_answer(&reader, id).await == card
    };
    // The second makes the answer a body, which the third refers to.
    for id in ["b0", "b1", "b2"] {
        store(id).await;
    }
    assert!(replays("b2").await);
    let () = server.query(&mut redis::cmd("FLUSHALL"));
    assert!(eventually(Duration::from_secs(3), || writer.troubled_since().is_some()).await, "the flush is noted");
    for id in ["b3", "b4"] {
        store(id).await;
        assert!(replays(id).await, "{id} replays elsewhere");
    }
}

/// A flush is found by the replica's own check of its mark, a quarter of
/// a second apart, with no read at all: whoever waits for a loss (a
/// stream blocked on a journal) is woken.
#[tokio::test]
async fn a_flush_found_wakes_who_waits_for_a_loss() {
    use megamind_core::store::Journal;
    let Some(server) = RedisServer::start("a loss found") else { return };
    let (store, _registry) = shared(&server.url(), CommitFallback::Refuse);
    store.start();
    let marked = || server.query::<Vec<String>>(redis::cmd("KEYS").arg("shared:probe:*")).len() == 1;
    assert!(eventually(Duration::from_secs(5), marked).await, "the mark written by the first probe");
    let waiting = store.loss_found();
    tokio::pin!(waiting);
    // Polled once, so that it waits from now on.
    assert!(tokio::time::timeout(Duration::ZERO, &mut waiting).await.is_err(), "no loss yet");
    let () = server.query(&mut redis::cmd("FLUSHALL"));
    let flushed = Instant::now();
    tokio::time::timeout(Duration::from_secs(2), waiting).await.expect("woken by the loss");
    assert!(flushed.elapsed() < Duration::from_millis(250) + SLACK * 5, "within a check: {:?}", flushed.elapsed());
    assert!(store.troubled_since().is_some());
}

#[tokio::test]
async fn a_redis_that_refuses_writes_stays_down_until_it_takes_them() {
    let Some(server) = RedisServer::start("a read-only Redis") else { return };
    let (store, registry) = shared(&server.url(), CommitFallback::Refuse);
    store.start();
    let probed = || sample(&registry, PROBES_OK) >= 1.0;
    assert!(eventually(Duration::from_secs(5), probed).await, "probed at start");
    // A replica of a master that is nowhere: it answers, and refuses writes.
    let _: () = server.query(redis::cmd("REPLICAOF").arg("127.0.0.1").arg("1"));
    let (commit, _) = begin(&store, Handler::Commit, "ro").await;
    assert!(matches!(commit, Err(StoreError::Unavailable(ref why)) if why.contains("READONLY")), "{commit:?}");
    for n in 0..2 {
        let (commit, _) = begin(&store, Handler::Commit, &format!("ro-{n}")).await;
        assert!(matches!(commit, Err(StoreError::Unavailable(_))), "{commit:?}");
    }
    assert!(store.is_down(), "refused writes take the store for down");
    // Four probes' time: none may find it back.
    let found_back = eventually(Duration::from_secs(2), || !store.is_down()).await;
    assert!(!found_back, "a store that refuses writes was found back");
    let _: () = server.query(redis::cmd("REPLICAOF").arg("NO").arg("ONE"));
    assert!(eventually(Duration::from_secs(5), || !store.is_down()).await, "found back once it takes writes");
    let text = metrics(&registry);
    assert!(text.contains("megamind_store_up 1"), "{text}");
}

/// A Redis that takes writes but refuses a command the store needs (here
/// an ACL that forbids scripts; Redis 6 refuses `SET … NX GET` alike) is
/// taken for down at the first probe, with why, and stays down rather than
/// be found back by each probe's write and lost again at the next call.
#[tokio::test]
async fn a_redis_that_refuses_the_stores_commands_stays_down_and_says_why() {
    let Some(server) = RedisServer::start("a Redis without scripts") else { return };
    let mut acl = redis::cmd("ACL");
    acl.arg("SETUSER").arg("noscripts").arg("on").arg(">pw").arg("~*").arg("+@all").arg("-@scripting");
    let _: () = server.query(&mut acl);
    let url = server.url().replacen("redis://", "redis://noscripts:pw@", 1);
    let (store, registry) = shared(&url, CommitFallback::Refuse);
    store.start();
    let registry = &registry;
    let probed =
        |n: f64| move || sample(registry, r#"megamind_store_operations_total{op="ping",outcome="error"}"#) >= n;
    assert!(eventually(Duration::from_secs(5), probed(1.0)).await, "probed at start");
    assert!(store.is_down(), "taken for down at the first probe");
    let (commit, _) = begin(&store, Handler::Commit, "c").await;
    assert!(matches!(commit, Err(StoreError::Unavailable(_))), "refused while down: {commit:?}");
    // Each probe's write is carried out: none may find it back.
    assert!(eventually(Duration::from_secs(5), probed(3.0)).await, "probed again");
    assert!(store.is_down(), "found back by a probe");
    let probe = redis_store(&url, Duration::from_secs(1)).link().probe(Duration::from_secs(1)).await;
    let why = probe.expect_err("the probe fails").to_string();
    assert!(why.contains("NOPERM") && why.contains("Redis 7.0 or later") && why.contains("EVALSHA"), "{why}");
    assert!(!why.contains("pw@"), "{why}");
    let _: () = server.query(redis::cmd("ACL").arg("SETUSER").arg("noscripts").arg("+@scripting"));
    assert!(eventually(Duration::from_secs(5), || !store.is_down()).await, "found back once scripts run");
}

/// A probe keeps to its own time, not to the calls' store timeout: a
/// Redis slower than a call may wait (a cold connection, a script sent
/// whole the first time) is not taken for down at start for that.
#[tokio::test]
async fn a_probe_keeps_to_its_own_time_not_the_calls_timeout() {
    let Some(server) = RedisServer::start("a probe slower than a call") else { return };
    // No command answers within a call's timeout.
    let probe = redis_store(&server.url(), Duration::from_nanos(1)).link().probe(Duration::from_secs(1)).await;
    assert!(probe.is_ok(), "a probe with a second to run: {probe:?}");
}

/// After Redis restarts, every connection of the pool is stale until a
/// command finds it so: that command is sent again over the connection
/// made anew, and the call never sees the restart.
#[tokio::test]
async fn calls_after_a_redis_restart_go_through_on_connections_made_anew() {
    let Some(mut server) = RedisServer::start("a Redis restarted") else { return };
    let (store, _registry) = shared(&server.url(), CommitFallback::Refuse);
    // The pool's two connections, both open.
    for n in 0..2 {
        assert!(matches!(begin(&store, Handler::Run, &format!("warm-{n}")).await.0, Ok(Begin::Lead(_))));
    }
    server.restart();
    for n in 0..4 {
        let (commit, _) = begin(&store, Handler::Commit, &format!("after-{n}")).await;
        assert!(matches!(commit, Ok(Begin::Lead(_))), "call {n} after the restart: {commit:?}");
    }
    assert!(!store.is_down());
}

/// Redis's own words reach the error (and the log line), never the URL.
#[tokio::test]
async fn redis_errors_say_what_redis_said() {
    let Some(server) = RedisServer::start("a database out of range") else { return };
    let (store, _registry) = shared(&format!("{}/99", server.url()), CommitFallback::Refuse);
    let (commit, _) = begin(&store, Handler::Commit, "c").await;
    let error = commit.expect_err("no database 99").to_string();
    assert!(error.contains("out of range"), "{error}");
}
