use super::{key::INLINE_ID, *};

fn key(id: &str) -> Key {
    Key::new(0, Handler::Run, id)
}

fn commit(id: &str) -> Key {
    Key::new(0, Handler::Commit, id)
}

/// Bounds of `/run` and `/continue` answers; the commit reserve as by default.
fn limits(max_entries: usize, max_bytes: usize, ttl_ms: u64) -> Limits {
    Limits { max_entries, max_bytes, ttl: Duration::from_millis(ttl_ms), ..Limits::default() }
}

/// Bounds of `/commit` and `/apply` answers; the others as by default.
fn reserve(commit_max_entries: usize, commit_max_bytes: usize, ttl_ms: u64) -> Limits {
    Limits { commit_max_entries, commit_max_bytes, ttl: Duration::from_millis(ttl_ms), ..Limits::default() }
}

fn lead(cache: &IdempotencyCache, id: &str) -> Lease {
    lead_key(cache, key(id))
}

fn lead_key(cache: &IdempotencyCache, key: Key) -> Lease {
    match cache.begin(key) {
        Lookup::Lead(lease) => lease,
        other => panic!("expected to lead, got {other:?}"),
    }
}

fn hit(cache: &IdempotencyCache, key: Key) -> Bytes {
    match cache.begin(key) {
        Lookup::Hit(body) => body,
        other => panic!("expected a hit, got {other:?}"),
    }
}

#[test]
fn first_call_leads_and_repeats_replay_its_bytes() {
    let cache = IdempotencyCache::new(Limits::default());
    lead(&cache, "a").complete(Bytes::from_static(b"answer"));
    for _ in 0..3 {
        match cache.begin(key("a")) {
            Lookup::Hit(body) => assert_eq!(&body[..], b"answer"),
            other => panic!("expected a hit, got {other:?}"),
        }
    }
    assert_eq!(cache.counters().hits.get(), 3);
    assert_eq!(cache.counters().misses.get(), 1);
    assert_eq!(cache.entries(), 1);
}

#[test]
fn keys_differ_by_scenario_and_handler() {
    let cache = IdempotencyCache::new(Limits::default());
    lead_key(&cache, commit("a")).complete(Bytes::from_static(b"commit"));
    assert!(matches!(cache.begin(Key::new(0, Handler::Apply, "a")), Lookup::Lead(_)));
    assert!(matches!(cache.begin(Key::new(1, Handler::Commit, "a")), Lookup::Lead(_)));
}

#[tokio::test]
async fn concurrent_repeats_wait_for_the_first() {
    let cache = IdempotencyCache::new(Limits::default());
    let lease = lead(&cache, "a");
    let waiters: Vec<_> = (0..10)
        .map(|_| match cache.begin(key("a")) {
            Lookup::Wait(waiter) => tokio::spawn(waiter.wait()),
            other => panic!("expected to wait, got {other:?}"),
        })
        .collect();
    assert_eq!(cache.in_flight(), 1);
    lease.complete(Bytes::from_static(b"one"));
    for waiter in waiters {
        assert_eq!(waiter.await.unwrap().as_deref(), Some(&b"one"[..]));
    }
    assert_eq!(cache.counters().waits.get(), 10);
}

#[tokio::test]
async fn an_abandoned_lease_is_not_cached_and_wakes_waiters_empty() {
    let cache = IdempotencyCache::new(Limits::default());
    let lease = lead(&cache, "a");
    let Lookup::Wait(waiter) = cache.begin(key("a")) else { panic!("expected to wait") };
    drop(lease);
    assert_eq!(waiter.wait().await, None);
    assert_eq!(cache.entries(), 0);
    assert!(matches!(cache.begin(key("a")), Lookup::Lead(_)), "a retry runs again");
}

#[test]
fn entry_bound_evicts_oldest_completed_only() {
    let cache = IdempotencyCache::new(limits(2, usize::MAX, 60_000));
    let running = lead(&cache, "in-flight");
    for id in ["a", "b", "c"] {
        lead(&cache, id).complete(Bytes::from_static(b"x"));
    }
    assert_eq!(cache.entries(), 2);
    assert!(matches!(cache.begin(key("a")), Lookup::Lead(_)), "oldest evicted");
    assert!(matches!(cache.begin(key("c")), Lookup::Hit(_)));
    assert!(matches!(cache.begin(key("in-flight")), Lookup::Wait(_)), "in-flight never evicted");
    assert_eq!(cache.counters().evicted(Handler::Run).get(), 1);
    drop(running);
}

#[test]
fn byte_bound_evicts_and_accounts() {
    let body = Bytes::from(vec![0u8; 1000]);
    let one = key("a").cost(&body);
    let cache = IdempotencyCache::new(limits(usize::MAX, one * 2, 60_000));
    for id in ["a", "b", "c"] {
        lead(&cache, id).complete(body.clone());
    }
    assert_eq!(cache.entries(), 2);
    assert_eq!(cache.bytes(), one * 2);
    assert!(matches!(cache.begin(key("a")), Lookup::Lead(_)));
}

#[test]
fn expired_answers_are_led_again_and_accounted() {
    let cache = IdempotencyCache::new(limits(10, usize::MAX, 0));
    lead(&cache, "a").complete(Bytes::from_static(b"x"));
    // A zero TTL expires at once: the completion's own trim drops it.
    assert_eq!(cache.entries(), 0);
    assert_eq!(cache.bytes(), 0);
    let lease = lead(&cache, "a");
    lease.complete(Bytes::from_static(b"y"));
    assert_eq!(cache.counters().evicted(Handler::Run).get(), 0, "expiry is not eviction");
}

#[tokio::test(start_paused = true)]
async fn an_expired_entry_replaced_by_a_new_lead_survives_its_old_fifo_slot() {
    let cache = IdempotencyCache::new(limits(10, usize::MAX, 50));
    lead(&cache, "a").complete(Bytes::from_static(b"old"));
    tokio::time::advance(Duration::from_millis(60)).await;
    // The stale FIFO slot of "a" is still there; the new lead must not be removed by it.
    let lease = lead(&cache, "a");
    cache.purge_expired();
    assert!(matches!(cache.begin(key("a")), Lookup::Wait(_)));
    lease.complete(Bytes::from_static(b"new"));
    assert!(matches!(cache.begin(key("a")), Lookup::Hit(b) if &b[..] == b"new"));
    assert_eq!(cache.entries(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_re_lead_after_expiry_counts_the_old_answer_out_once() {
    let (old, fresh) = (Bytes::from(vec![0u8; 2000]), Bytes::from_static(b"fresh"));
    let cache = IdempotencyCache::new(limits(10, 10_000, 50));
    lead(&cache, "a").complete(old.clone());
    tokio::time::advance(Duration::from_millis(40)).await;
    lead(&cache, "b").complete(fresh.clone());
    tokio::time::advance(Duration::from_millis(20)).await;
    // "a" expired, its FIFO record not yet popped: the new lead counts it out,
    // and the purge that pops the record must not count it out again.
    let again = lead(&cache, "a");
    cache.purge_expired();
    assert_eq!(&hit(&cache, key("b"))[..], b"fresh", "a fresh answer is not evicted");
    assert_eq!(cache.bytes(), key("b").cost(&fresh), "no byte counted out twice");
    assert_eq!(cache.counters().evicted(Handler::Run).get(), 0);
    again.complete(Bytes::from_static(b"new"));
    assert_eq!(
        (cache.entries(), cache.bytes()),
        (2, key("b").cost(&fresh) + key("a").cost(&Bytes::from_static(b"new")))
    );
}

#[test]
fn commit_answers_survive_a_flood_of_run_answers() {
    let cache = IdempotencyCache::new(Limits { max_entries: 10, max_bytes: 20_000, ..reserve(5, 4096, 60_000) });
    lead_key(&cache, commit("x")).complete(Bytes::from_static(b"pushed"));
    lead_key(&cache, Key::new(0, Handler::Apply, "x")).complete(Bytes::from_static(b"applied"));
    let run = Bytes::from(vec![0u8; 3000]);
    for n in 0..1000 {
        lead(&cache, &format!("run-{n}")).complete(run.clone());
        lead_key(&cache, Key::new(0, Handler::Continue, &format!("continue-{n}"))).complete(run.clone());
    }
    assert_eq!(&hit(&cache, commit("x"))[..], b"pushed");
    assert_eq!(&hit(&cache, Key::new(0, Handler::Apply, "x"))[..], b"applied");
    assert_eq!(cache.commit_entries(), 2);
    assert!(cache.entries() - cache.commit_entries() <= 10, "the run bounds hold");
    assert!(cache.bytes() - cache.commit_bytes() <= 20_000, "the run bounds hold");
    let counters = cache.counters();
    assert_eq!(counters.evicted(Handler::Run).get() + counters.evicted(Handler::Continue).get(), 2000 - 6);
    assert!(counters.evicted(Handler::Continue).get() > 0, "counted per handler");
    assert_eq!(counters.evicted(Handler::Commit).get() + counters.evicted(Handler::Apply).get(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_full_commit_reserve_refuses_new_commits_without_evicting() {
    let cache = IdempotencyCache::new(reserve(3, usize::MAX, 1000));
    lead_key(&cache, commit("a")).complete(Bytes::from_static(b"a"));
    lead_key(&cache, commit("b")).complete(Bytes::from_static(b"b"));
    // An entry in flight holds its room too: its answer must fit when it comes.
    let running = lead_key(&cache, Key::new(0, Handler::Apply, "c"));
    assert!(matches!(cache.begin(commit("d")), Lookup::Full));
    assert!(matches!(cache.begin(commit("d")), Lookup::Full), "a refusal leaves no entry");
    assert_eq!(&hit(&cache, commit("a"))[..], b"a", "nothing evicted");
    assert_eq!(&hit(&cache, commit("b"))[..], b"b");
    assert!(matches!(cache.begin(key("d")), Lookup::Lead(_)), "/run has bounds of its own");
    assert_eq!(cache.counters().refused(Handler::Commit).get(), 2);
    assert_eq!(cache.counters().evicted(Handler::Commit).get(), 0);

    drop(running);
    let d = lead_key(&cache, commit("d"));
    assert!(matches!(cache.begin(commit("e")), Lookup::Full));
    d.complete(Bytes::from_static(b"d"));
    tokio::time::advance(Duration::from_millis(1001)).await;
    assert!(matches!(cache.begin(commit("e")), Lookup::Lead(_)), "expired answers free their room");
}

#[tokio::test(start_paused = true)]
async fn a_refused_commit_drops_the_expired_answer_it_would_replace() {
    let cache = IdempotencyCache::new(reserve(1, usize::MAX, 1000));
    lead_key(&cache, commit("a")).complete(Bytes::from_static(b"a"));
    tokio::time::advance(Duration::from_millis(1001)).await;
    let _running = lead_key(&cache, commit("b"));
    assert!(matches!(cache.begin(commit("a")), Lookup::Full));
    assert_eq!((cache.entries(), cache.in_flight()), (0, 1), "only the call in flight is left");
}

#[test]
fn a_commit_reserve_full_of_bytes_refuses_too() {
    let body = Bytes::from(vec![0u8; 500]);
    let cache = IdempotencyCache::new(reserve(100, commit("a").cost(&body), 60_000));
    lead_key(&cache, commit("a")).complete(body);
    assert!(matches!(cache.begin(commit("b")), Lookup::Full));
    assert_eq!(cache.commit_bytes(), cache.bytes());
    assert!(matches!(cache.begin(commit("a")), Lookup::Hit(_)));
}

#[tokio::test]
async fn a_refused_lead_leaves_no_entry_and_replays_are_never_asked() {
    let cache = IdempotencyCache::new(Limits::default());
    assert!(matches!(cache.begin_if(key("a"), || false), Lookup::Refused));
    assert_eq!(cache.in_flight(), 0, "no entry for a refused call");
    assert_eq!(cache.counters().misses.get(), 0);
    let lease = match cache.begin_if(key("a"), || true) {
        Lookup::Lead(lease) => lease,
        other => panic!("expected to lead, got {other:?}"),
    };
    let asked = |_| -> bool { panic!("a repeat is not asked") };
    assert!(matches!(cache.begin_if(key("a"), || asked(())), Lookup::Wait(_)));
    lease.complete(Bytes::from_static(b"one"));
    assert!(matches!(cache.begin_if(key("a"), || asked(())), Lookup::Hit(_)));
    // A refused commit gives its reserve room back.
    let cache = IdempotencyCache::new(reserve(1, usize::MAX, 60_000));
    assert!(matches!(cache.begin_if(commit("a"), || false), Lookup::Refused));
    assert!(matches!(cache.begin(commit("b")), Lookup::Lead(_)));
}

#[test]
fn request_ids_of_any_length_key_apart() {
    let long = "x".repeat(INLINE_ID + 1);
    let short = "x".repeat(INLINE_ID);
    for id in ["", "a", "ключ-запроса", short.as_str(), long.as_str()] {
        assert_eq!(RequestId::new(id).as_str(), id);
    }
    let cache = IdempotencyCache::new(Limits::default());
    lead(&cache, &long).complete(Bytes::from_static(b"long"));
    lead(&cache, &short).complete(Bytes::from_static(b"short"));
    match cache.begin(key(&long)) {
        Lookup::Hit(body) => assert_eq!(&body[..], b"long"),
        other => panic!("expected a hit, got {other:?}"),
    }
    assert!(matches!(cache.begin(key(&"x".repeat(INLINE_ID + 2))), Lookup::Lead(_)));
}
