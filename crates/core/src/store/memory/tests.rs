use super::*;
use crate::scenario::Handler;

/// Long enough that no lease runs out unless a test moves the clock on.
const LEASE: Duration = Duration::from_secs(30);

fn store(limits: Limits) -> MemoryStore {
    MemoryStore::new(limits, unregistered_evictions())
}

fn key(id: &str) -> Key {
    Key::new("demo", Handler::Run, id)
}

fn commit(id: &str) -> Key {
    Key::new("demo", Handler::Commit, id)
}

/// Bounds of `/run` and `/continue` values; the reserve as by default.
fn limits(max_entries: usize, max_bytes: usize, ttl_ms: u64) -> Limits {
    Limits { max_entries, max_bytes, ttl: Duration::from_millis(ttl_ms), ..Limits::default() }
}

/// Bounds of `/commit` and `/apply` values; the others as by default.
fn reserve(commit_max_entries: usize, commit_max_bytes: usize, ttl_ms: u64) -> Limits {
    Limits { commit_max_entries, commit_max_bytes, commit_ttl: Duration::from_millis(ttl_ms), ..Limits::default() }
}

fn value(text: &'static str) -> Bytes {
    Bytes::from_static(text.as_bytes())
}

async fn begin(store: &dyn FlightStore, key: Key) -> Begin {
    store.begin(key, LEASE, Instant::now() + LEASE, &mut || true).await.unwrap()
}

async fn lead(store: &dyn FlightStore, key: Key) -> Lease {
    match begin(store, key).await {
        Begin::Lead(lease) => lease,
        other => panic!("expected to lead, got {other:?}"),
    }
}

async fn hit(store: &dyn FlightStore, key: Key) -> Bytes {
    match begin(store, key).await {
        Begin::Hit(value) => value,
        other => panic!("expected a hit, got {other:?}"),
    }
}

async fn waiter(store: &dyn FlightStore, key: Key) -> Waiter {
    match begin(store, key).await {
        Begin::Wait(waiter) => waiter,
        other => panic!("expected to wait, got {other:?}"),
    }
}

/// Leads `key` and completes it with `value`.
async fn put(store: &dyn FlightStore, key: Key, value: Bytes) {
    let lease = lead(store, key).await;
    store.complete(lease, value).await.unwrap();
}

/// `len` bytes that differ from any other `stamp`'s: a value no other
/// entry shares.
fn distinct(stamp: usize, len: usize) -> Bytes {
    let mut bytes = vec![0u8; len];
    bytes[..8].copy_from_slice(&(stamp as u64).to_le_bytes());
    Bytes::from(bytes)
}

fn in_a_minute() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

#[tokio::test]
async fn first_call_leads_and_repeats_replay_its_bytes() {
    let store = store(Limits::default());
    put(&store, key("a"), value("answer")).await;
    for _ in 0..3 {
        assert_eq!(&hit(&store, key("a")).await[..], b"answer");
    }
    assert_eq!(store.usage().entries, 1);
}

#[tokio::test]
async fn keys_differ_by_scenario_name_and_handler() {
    let store = store(Limits::default());
    put(&store, Key::new("demo", Handler::Commit, "r-1"), value("demo")).await;
    put(&store, Key::new("assistant", Handler::Commit, "r-1"), value("assistant")).await;
    assert_eq!(store.usage().entries, 2, "two scenarios, one RequestId: two entries");
    assert_eq!(&hit(&store, Key::new("demo", Handler::Commit, "r-1")).await[..], b"demo");
    assert_eq!(&hit(&store, Key::new("assistant", Handler::Commit, "r-1")).await[..], b"assistant");
    assert!(matches!(begin(&store, Key::new("demo", Handler::Apply, "r-1")).await, Begin::Lead(_)));
}

#[tokio::test]
async fn concurrent_repeats_wait_for_the_first_through_a_shared_handle() {
    let store: Arc<dyn FlightStore> = Arc::new(store(Limits::default()));
    let lease = lead(&*store, key("a")).await;
    let mut waiters = Vec::new();
    for _ in 0..10 {
        let (store, waiter) = (store.clone(), waiter(&*store, key("a")).await);
        waiters.push(tokio::spawn(async move { store.wait(&waiter, in_a_minute()).await.unwrap() }));
    }
    assert_eq!(store.usage().in_flight, 1);
    store.complete(lease, value("one")).await.unwrap();
    for waiter in waiters {
        assert_eq!(waiter.await.unwrap(), Waited::Done(value("one")));
    }
    assert_eq!(store.usage(), Usage { entries: 1, bytes: key("a").cost(b"one"), ..Usage::default() });
}

#[tokio::test]
async fn an_abandoned_lease_keeps_nothing_and_wakes_waiters_abandoned() {
    let store = store(Limits::default());
    let lease = lead(&store, key("a")).await;
    let waiter = waiter(&store, key("a")).await;
    store.abandon(lease).await.unwrap();
    assert_eq!(store.wait(&waiter, in_a_minute()).await.unwrap(), Waited::Abandoned);
    assert_eq!(store.usage(), Usage::default());
    assert!(matches!(begin(&store, key("a")).await, Begin::Lead(_)), "a retry leads again");
}

#[tokio::test(start_paused = true)]
async fn a_wait_times_out_by_its_deadline_and_may_wait_again() {
    let store = store(Limits::default());
    let lease = lead(&store, key("a")).await;
    let waiter = waiter(&store, key("a")).await;
    let deadline = Instant::now() + Duration::from_millis(100);
    assert_eq!(store.wait(&waiter, deadline).await.unwrap(), Waited::TimedOut);
    assert_eq!(Instant::now(), deadline, "waited until the deadline, not longer");
    store.complete(lease, value("late")).await.unwrap();
    assert_eq!(store.wait(&waiter, in_a_minute()).await.unwrap(), Waited::Done(value("late")));
}

#[tokio::test(start_paused = true)]
async fn a_lease_that_ran_out_is_taken_over_and_its_late_end_ignored() {
    let store = store(Limits::default());
    let old = store.begin(key("a"), Duration::from_millis(100), Instant::now() + LEASE, &mut || true).await.unwrap();
    let Begin::Lead(old) = old else { panic!("a first call leads") };
    let old_waiter = waiter(&store, key("a")).await;
    tokio::time::advance(Duration::from_millis(100)).await;
    let new = lead(&store, key("a")).await;
    assert_eq!(store.wait(&old_waiter, in_a_minute()).await.unwrap(), Waited::Abandoned, "woken by the takeover");
    let new_waiter = waiter(&store, key("a")).await;
    store.complete(old.clone(), value("old")).await.unwrap();
    store.abandon(old).await.unwrap();
    assert!(matches!(begin(&store, key("a")).await, Begin::Wait(_)), "the new lead is undisturbed");
    store.complete(new, value("new")).await.unwrap();
    assert_eq!(store.wait(&new_waiter, in_a_minute()).await.unwrap(), Waited::Done(value("new")));
    assert_eq!(&hit(&store, key("a")).await[..], b"new");
    assert_eq!(store.usage(), Usage { entries: 1, bytes: key("a").cost(b"new"), ..Usage::default() });
}

#[tokio::test(start_paused = true)]
async fn a_completion_past_the_lease_stores_nothing_and_waiters_learn_it_by_the_lease() {
    let store = store(reserve(1, usize::MAX, 60_000));
    let Begin::Lead(lease) =
        store.begin(commit("a"), Duration::from_millis(100), Instant::now() + LEASE, &mut || true).await.unwrap()
    else {
        panic!("a first call leads")
    };
    let waiter = waiter(&store, commit("a")).await;
    let started = Instant::now();
    assert_eq!(store.wait(&waiter, in_a_minute()).await.unwrap(), Waited::Abandoned);
    assert_eq!(Instant::now() - started, Duration::from_millis(100), "woken when the lease ran out");
    store.complete(lease, value("late")).await.unwrap();
    assert_eq!(store.usage(), Usage::default(), "nothing stored, the reserve's room given back");
    assert!(matches!(begin(&store, commit("a")).await, Begin::Lead(_)));
}

#[tokio::test(start_paused = true)]
async fn a_lease_lost_in_a_full_reserve_is_swept_by_the_purge_after_a_refusal() {
    let store = store(reserve(1, usize::MAX, 60_000));
    let lost =
        store.begin(commit("lost"), Duration::from_millis(100), Instant::now() + LEASE, &mut || true).await.unwrap();
    assert!(matches!(lost, Begin::Lead(_)));
    drop(lost);
    tokio::time::advance(Duration::from_millis(100)).await;
    assert!(matches!(begin(&store, commit("b")).await, Begin::Full), "the lost lease holds the room");
    store.purge_expired().await.unwrap();
    assert_eq!(store.usage(), Usage::default());
    assert!(matches!(begin(&store, commit("b")).await, Begin::Lead(_)));
}

#[tokio::test]
async fn a_refused_lead_leaves_nothing_and_replays_are_never_asked() {
    let store = store(Limits::default());
    assert!(matches!(
        store.begin(key("a"), LEASE, Instant::now() + LEASE, &mut || false).await.unwrap(),
        Begin::Refused
    ));
    assert_eq!(store.usage(), Usage::default(), "no entry for a refused call");
    let lease = lead(&store, key("a")).await;
    let mut asked = || -> bool { panic!("a repeat is not asked") };
    assert!(matches!(store.begin(key("a"), LEASE, Instant::now() + LEASE, &mut asked).await.unwrap(), Begin::Wait(_)));
    store.complete(lease, value("one")).await.unwrap();
    assert!(matches!(store.begin(key("a"), LEASE, Instant::now() + LEASE, &mut asked).await.unwrap(), Begin::Hit(_)));
    // A refused commit gives its reserve room back.
    let store = self::store(reserve(1, usize::MAX, 60_000));
    assert!(matches!(
        store.begin(commit("a"), LEASE, Instant::now() + LEASE, &mut || false).await.unwrap(),
        Begin::Refused
    ));
    assert!(matches!(begin(&store, commit("b")).await, Begin::Lead(_)));
}

#[tokio::test]
async fn entry_bound_evicts_oldest_completed_only() {
    let store = store(limits(2, usize::MAX, 60_000));
    let _running = lead(&store, key("in-flight")).await;
    for id in ["a", "b", "c"] {
        put(&store, key(id), value("x")).await;
    }
    assert_eq!(store.usage().entries, 2);
    assert!(matches!(begin(&store, key("a")).await, Begin::Lead(_)), "oldest evicted");
    assert!(matches!(begin(&store, key("c")).await, Begin::Hit(_)));
    assert!(matches!(begin(&store, key("in-flight")).await, Begin::Wait(_)), "in-flight never evicted");
    assert_eq!(store.evictions[Handler::Run as usize].get(), 1);
}

#[tokio::test]
async fn byte_bound_evicts_and_accounts() {
    let one = key("a").cost(&distinct(0, 1000));
    let store = store(limits(usize::MAX, one * 2, 60_000));
    for (n, id) in ["a", "b", "c"].into_iter().enumerate() {
        put(&store, key(id), distinct(n, 1000)).await;
    }
    assert_eq!((store.usage().entries, store.usage().bytes), (2, one * 2));
    assert!(matches!(begin(&store, key("a")).await, Begin::Lead(_)));
}

#[tokio::test]
async fn identical_values_count_once_and_their_bytes_go_with_the_last_holder() {
    let answer = Bytes::from(vec![7u8; 1000]);
    // Room for one answer and three more entries holding it, not for two answers.
    let (first, more) = (key("a").cost(&answer), key("b").cost(&[]));
    let store = store(limits(usize::MAX, first + 3 * more, 60_000));
    for id in ["a", "b", "c", "d"] {
        put(&store, key(id), answer.clone()).await;
    }
    assert_eq!((store.usage().entries, store.usage().bytes), (4, first + 3 * more), "kept once");
    assert_eq!(store.evicting.shelved(), 1);
    let (a, d) = (hit(&store, key("a")).await, hit(&store, key("d")).await);
    assert_eq!((&a[..], a.as_ptr()), (&answer[..], d.as_ptr()), "each replays the one copy");
    assert_eq!(store.evictions[Handler::Run as usize].get(), 0);
}

#[tokio::test]
async fn an_evicted_holder_leaves_the_shared_bytes_to_the_others() {
    let answer = Bytes::from(vec![7u8; 1000]);
    let (first, more) = (key("a").cost(&answer), key("b").cost(&[]));
    let store = store(limits(3, usize::MAX, 60_000));
    for id in ["a", "b", "c", "d"] {
        put(&store, key(id), answer.clone()).await;
    }
    assert!(matches!(begin(&store, key("a")).await, Begin::Lead(_)), "the oldest holder evicted");
    assert_eq!(store.usage().bytes, first + 2 * more, "the others keep the bytes");
    assert_eq!(&hit(&store, key("d")).await[..], &answer[..]);
    for (n, id) in ["e", "f", "g"].into_iter().enumerate() {
        put(&store, key(id), distinct(n, 1000)).await;
    }
    assert_eq!(store.usage().bytes, 3 * first, "the last holder took them along");
    assert_eq!(store.evicting.shelved(), 3);
}

#[tokio::test(start_paused = true)]
async fn shared_bytes_leave_once_every_holder_has_expired() {
    let store = store(limits(100, usize::MAX, 50));
    let answer = Bytes::from(vec![1u8; 500]);
    for n in 0..10 {
        put(&store, key(&format!("run-{n}")), answer.clone()).await;
        put(&store, key(&format!("other-{n}")), distinct(n, 300)).await;
    }
    assert_eq!(store.usage().entries, 20);
    // Half re-led once expired (counted out by their new lead), half purged.
    tokio::time::advance(Duration::from_millis(60)).await;
    for n in 0..5 {
        let lease = lead(&store, key(&format!("run-{n}"))).await;
        store.abandon(lease).await.unwrap();
    }
    store.purge_expired().await.unwrap();
    assert_eq!(store.usage(), Usage::default(), "no byte left counted");
    assert_eq!(store.evicting.shelved(), 0, "nothing left on the shelf");
}

#[tokio::test(start_paused = true)]
async fn shared_and_distinct_values_churned_under_bounds_leave_nothing_counted() {
    let max_bytes = 20_000;
    let store = store(limits(40, max_bytes, 1000));
    let canned: Vec<Bytes> = (0..3).map(|n| distinct(1000 + n, 700 + 300 * n)).collect();
    // A fixed pseudo-random walk: puts of canned and distinct values, repeats
    // of old ids (hits, or leads once evicted or expired), and time passing.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for step in 0..3000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let id = format!("id-{}", state % 200);
        let lease = match begin(&store, key(&id)).await {
            Begin::Lead(lease) => lease,
            _ => continue,
        };
        match state % 5 {
            0 => store.abandon(lease).await.unwrap(),
            1 => store.complete(lease, distinct(step, 100 + (state % 2000) as usize)).await.unwrap(),
            n => store.complete(lease, canned[n as usize - 2].clone()).await.unwrap(),
        }
        assert!(store.usage().bytes <= max_bytes, "the bound holds at step {step}: {:?}", store.usage());
        if state.is_multiple_of(7) {
            tokio::time::advance(Duration::from_millis(37)).await;
        }
    }
    tokio::time::advance(Duration::from_millis(1001)).await;
    store.purge_expired().await.unwrap();
    assert_eq!(store.usage(), Usage::default(), "every byte counted in was counted out");
    assert_eq!(store.evicting.shelved(), 0);
}

#[tokio::test]
async fn expired_values_are_led_again_and_accounted() {
    let store = store(limits(10, usize::MAX, 0));
    put(&store, key("a"), value("x")).await;
    // A zero TTL expires at once: the completion's own trim drops it.
    assert_eq!(store.usage(), Usage::default());
    put(&store, key("a"), value("y")).await;
    assert_eq!(store.evictions[Handler::Run as usize].get(), 0, "expiry is not eviction");
}

#[tokio::test(start_paused = true)]
async fn an_expired_entry_replaced_by_a_new_lead_survives_its_old_fifo_slot() {
    let store = store(limits(10, usize::MAX, 50));
    put(&store, key("a"), value("old")).await;
    tokio::time::advance(Duration::from_millis(60)).await;
    // The stale FIFO slot of "a" is still there; the new lead must not be removed by it.
    let lease = lead(&store, key("a")).await;
    store.purge_expired().await.unwrap();
    assert!(matches!(begin(&store, key("a")).await, Begin::Wait(_)));
    store.complete(lease, value("new")).await.unwrap();
    assert_eq!(&hit(&store, key("a")).await[..], b"new");
    assert_eq!(store.usage().entries, 1);
}

#[tokio::test(start_paused = true)]
async fn a_re_lead_after_expiry_counts_the_old_value_out_once() {
    let (old, fresh) = (Bytes::from(vec![0u8; 2000]), value("fresh"));
    let store = store(limits(10, 10_000, 50));
    put(&store, key("a"), old).await;
    tokio::time::advance(Duration::from_millis(40)).await;
    put(&store, key("b"), fresh.clone()).await;
    tokio::time::advance(Duration::from_millis(20)).await;
    // "a" expired, its FIFO record not yet popped: the new lead counts it out,
    // and the purge that pops the record must not count it out again.
    let again = lead(&store, key("a")).await;
    store.purge_expired().await.unwrap();
    assert_eq!(&hit(&store, key("b")).await[..], b"fresh", "a fresh value is not evicted");
    assert_eq!(store.usage().bytes, key("b").cost(&fresh), "no byte counted out twice");
    assert_eq!(store.evictions[Handler::Run as usize].get(), 0);
    store.complete(again, value("new")).await.unwrap();
    let usage = store.usage();
    assert_eq!((usage.entries, usage.bytes), (2, key("b").cost(&fresh) + key("a").cost(b"new")));
}

#[tokio::test]
async fn commit_values_survive_a_flood_of_run_values() {
    let store = store(Limits { max_entries: 10, max_bytes: 20_000, ..reserve(5, 4096, 60_000) });
    let apply = |id| Key::new("demo", Handler::Apply, id);
    put(&store, commit("x"), value("pushed")).await;
    put(&store, apply("x"), value("applied")).await;
    for n in 0..1000 {
        put(&store, key(&format!("run-{n}")), distinct(2 * n, 3000)).await;
        put(&store, Key::new("demo", Handler::Continue, &format!("continue-{n}")), distinct(2 * n + 1, 3000)).await;
    }
    assert_eq!(&hit(&store, commit("x")).await[..], b"pushed");
    assert_eq!(&hit(&store, apply("x")).await[..], b"applied");
    let usage = store.usage();
    assert_eq!(usage.reserved_entries, 2);
    assert!(usage.entries - usage.reserved_entries <= 10, "the run bounds hold");
    assert!(usage.bytes - usage.reserved_bytes <= 20_000, "the run bounds hold");
    let evicted = |handler: Handler| store.evictions[handler as usize].get();
    let kept = usage.entries - usage.reserved_entries;
    assert!(kept > 0 && kept == 20_000 / key("run-999").cost(&distinct(0, 3000)), "as many as fit: {kept}");
    assert_eq!(evicted(Handler::Run) + evicted(Handler::Continue), 2000 - kept as u64);
    assert!(evicted(Handler::Continue) > 0, "counted per handler");
    assert_eq!(evicted(Handler::Commit) + evicted(Handler::Apply), 0);
}

#[tokio::test(start_paused = true)]
async fn a_full_commit_reserve_refuses_new_commits_without_evicting() {
    let store = store(reserve(3, usize::MAX, 1000));
    put(&store, commit("a"), value("a")).await;
    put(&store, commit("b"), value("b")).await;
    // An entry in flight holds its room too: its value must fit when it comes.
    let running = lead(&store, Key::new("demo", Handler::Apply, "c")).await;
    assert!(matches!(begin(&store, commit("d")).await, Begin::Full));
    assert!(matches!(begin(&store, commit("d")).await, Begin::Full), "a refusal leaves no entry");
    assert_eq!(&hit(&store, commit("a")).await[..], b"a", "nothing evicted");
    assert_eq!(&hit(&store, commit("b")).await[..], b"b");
    assert!(matches!(begin(&store, key("d")).await, Begin::Lead(_)), "/run has bounds of its own");
    assert_eq!(store.evictions[Handler::Commit as usize].get(), 0);

    store.abandon(running).await.unwrap();
    let d = lead(&store, commit("d")).await;
    assert!(matches!(begin(&store, commit("e")).await, Begin::Full));
    store.complete(d, value("d")).await.unwrap();
    tokio::time::advance(Duration::from_millis(1001)).await;
    assert!(matches!(begin(&store, commit("e")).await, Begin::Lead(_)), "expired values free their room");
}

#[tokio::test(start_paused = true)]
async fn a_refused_commit_drops_the_expired_value_it_would_replace() {
    let store = store(reserve(1, usize::MAX, 1000));
    put(&store, commit("a"), value("a")).await;
    tokio::time::advance(Duration::from_millis(1001)).await;
    let _running = lead(&store, commit("b")).await;
    assert!(matches!(begin(&store, commit("a")).await, Begin::Full));
    let usage = store.usage();
    assert_eq!((usage.entries, usage.in_flight), (0, 1), "only the call in flight is left");
}

#[tokio::test]
async fn a_commit_reserve_full_of_bytes_refuses_too() {
    let body = Bytes::from(vec![0u8; 500]);
    let store = store(reserve(100, commit("a").cost(&body), 60_000));
    put(&store, commit("a"), body).await;
    assert!(matches!(begin(&store, commit("b")).await, Begin::Full));
    assert_eq!(store.usage().reserved_bytes, store.usage().bytes);
    assert!(matches!(begin(&store, commit("a")).await, Begin::Hit(_)));
}

#[tokio::test]
async fn request_ids_of_any_length_key_apart() {
    // Ids up to 46 bytes are kept inline, longer ones on the heap.
    let (short, long) = ("x".repeat(46), "x".repeat(47));
    let store = store(Limits::default());
    put(&store, key(&long), value("long")).await;
    put(&store, key(&short), value("short")).await;
    assert_eq!(&hit(&store, key(&long)).await[..], b"long");
    assert_eq!(&hit(&store, key(&short)).await[..], b"short");
    assert!(matches!(begin(&store, key(&"x".repeat(48))).await, Begin::Lead(_)));
}

#[tokio::test]
async fn a_token_of_another_kind_is_refused() {
    let store = store(Limits::default());
    let foreign = Lease { key: key("a"), token: Arc::new(()) };
    assert!(matches!(store.complete(foreign.clone(), value("x")).await, Err(StoreError::Foreign)));
    assert!(matches!(store.abandon(foreign.clone()).await, Err(StoreError::Foreign)));
    assert!(matches!(store.wait(&foreign.waiter(), in_a_minute()).await, Err(StoreError::Foreign)));
}

#[test]
fn an_entry_is_counted_at_no_less_than_its_parts_take() {
    use std::mem::size_of;
    // Its slot (with its key) in an `Arc`, the map's hash and pointer, the
    // eviction queue's record and a shelf entry, before the tables' room to grow: a quick
    // floor that holds on every platform; `tests/entry_cost.rs` counts what
    // entries really take, tables included, where jemalloc builds.
    let parts = 2 * size_of::<usize>()
        + size_of::<Slot>()
        + size_of::<table::Bucket>()
        + size_of::<pool::Completed>()
        + size_of::<(u64, shelf::Shelved)>();
    let counted = key("").cost(&[]);
    assert!(parts + 64 <= counted, "an entry's parts take {parts} bytes, its cost counts {counted}");
}
