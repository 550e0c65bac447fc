//! What the memory store's entries take in memory, counted by the allocator
//! (jemalloc's statistics), against what the store counts them at in its
//! bounds: entries must never take more than their cost says, or a cache
//! bounded at `max_bytes` holds more than that.

#![cfg(not(target_env = "msvc"))]

use std::time::Duration;

use bytes::Bytes;
use megamind_core::{
    scenario::Handler,
    store::{
        Begin, FlightStore, Key, MemoryStore,
        memory::{Limits, unregistered_evictions},
    },
};
use tikv_jemalloc_ctl::{epoch, stats};

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Entries kept at most: the default bound.
const ENTRIES: usize = 100_000;
/// From here on, entries must fit their cost; below it the tables' first
/// allocations, a few KiB, are more than the entries themselves.
const FROM: usize = 10_000;

fn allocated() -> usize {
    epoch::advance().expect("jemalloc's statistics refresh");
    stats::allocated::read().expect("jemalloc's allocated bytes")
}

/// The tables (map, eviction queue, shelf) grow by doubling, so what an
/// entry takes depends on how full they are: it is checked every 1,000
/// entries, from just after each table doubled to just before it doubles
/// again.
#[test]
fn entries_take_no_more_memory_than_they_are_counted_at() {
    let limits = Limits { max_entries: ENTRIES, max_bytes: usize::MAX, ..Limits::default() };
    let store = MemoryStore::new(limits, unregistered_evictions());
    let (mut counted, mut most, mut least) = (0, 0.0_f64, f64::MAX);
    let before = allocated();
    for i in 0..ENTRIES {
        let key = Key::new("demo", Handler::Run, &format!("request-{i:08}"));
        // Values all distinct, as the answers of a scenario that echoes its
        // request: none shares another's copy.
        let value = Bytes::from(format!("answer-{i:09}").into_bytes());
        counted += key.cost(&value);
        let Begin::Lead(lease) = store.begin_now(key, Duration::from_secs(60), &mut || true) else {
            panic!("a fresh key leads");
        };
        store.complete_now(lease, value).expect("a lease of this store");
        let kept = i + 1;
        if kept >= FROM && kept % 1_000 == 0 {
            let took = allocated() - before;
            let share = took as f64 / counted as f64;
            (most, least) = (most.max(share), least.min(share));
            assert!(
                took <= counted,
                "{kept} entries take {} bytes each, more than the {} they are counted at",
                took / kept,
                counted / kept
            );
        }
    }
    assert_eq!(store.usage().entries, ENTRIES, "every entry is kept");
    eprintln!("entries take {:.0}–{:.0} % of what they are counted at", least * 100.0, most * 100.0);
    // And not far less, so that the bound is not spent on nothing. (Short
    // of the most, which depends on how the map's shards, one per few
    // cores, grow together.)
    assert!(most >= 0.7, "entries take at most {:.0} % of what they are counted at", most * 100.0);
}
