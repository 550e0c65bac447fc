use super::*;

fn key(id: &str) -> Key {
    Key::new(0, Handler::Commit, id)
}

fn limits(max_entries: usize, max_bytes: usize, ttl_ms: u64) -> Limits {
    Limits { max_entries, max_bytes, ttl: Duration::from_millis(ttl_ms) }
}

fn lead(cache: &IdempotencyCache, id: &str) -> Lease {
    match cache.begin(key(id)) {
        Lookup::Lead(lease) => lease,
        other => panic!("expected to lead, got {other:?}"),
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
    lead(&cache, "a").complete(Bytes::from_static(b"commit"));
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
    assert_eq!(cache.counters().evictions.get(), 1);
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
    assert_eq!(cache.counters().evictions.get(), 0, "expiry is not eviction");
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
