//! The memory store's map: a pointer to each entry's slot, found by its
//! key's hash, in shards that each have a lock of their own.
//!
//! The key lives in the slot, not in the map: a bucket is the key's hash
//! and a pointer, so that the table of a full store is small enough to stay
//! in the CPU's caches, an entry evicted is found by its hash and pointer
//! without its key being read or hashed again, and the table grows or
//! sweeps its tombstones without reading a slot.

use std::{
    hash::BuildHasher,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use hashbrown::HashTable;

use super::{Key, Slot};

/// An entry: its key's hash and its slot.
pub(super) type Bucket = (u64, Arc<Slot>);

/// One shard's table, locked.
pub(super) type Shard<'a> = MutexGuard<'a, HashTable<Bucket>>;

#[derive(Debug)]
pub(super) struct Table {
    shards: Box<[Padded]>,
    // foldhash: fast, and seeded per process, so request ids cannot be chosen to collide.
    hasher: foldhash::fast::RandomState,
}

/// A shard's lock on a cache line of its own: two cores working on two
/// shards do not take a line from each other.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded(Mutex<HashTable<Bucket>>);

impl Table {
    pub(super) fn new() -> Table {
        // As many as a few per core, so that cores seldom wait for each other.
        let shards = (std::thread::available_parallelism().map_or(1, usize::from) * 4).next_power_of_two();
        Table { shards: (0..shards).map(|_| Padded::default()).collect(), hasher: Default::default() }
    }

    pub(super) fn hash(&self, key: &Key) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The shard that holds the key of `hash`, locked. Held for a few
    /// pointer moves, never across an await.
    pub(super) fn shard(&self, hash: u64) -> Shard<'_> {
        // hashbrown places an entry by the hash's low bits and tags it with
        // its top seven: the shard is chosen by bits of neither.
        self.shards[(hash >> 32) as usize & (self.shards.len() - 1)].lock()
    }

    /// The slot of `key`, if there is one.
    pub(super) fn get(&self, key: &Key) -> Option<Arc<Slot>> {
        let hash = self.hash(key);
        self.shard(hash).find(hash, holds(hash, key)).map(|(_, slot)| slot.clone())
    }

    /// Removes `slot` if the map still holds it (its key may have been led
    /// again since, by another slot, which stays).
    pub(super) fn remove(&self, slot: &Arc<Slot>) -> bool {
        // The removed slot is let go once the shard is unlocked.
        let removed = self
            .shard(slot.hash)
            .find_entry(slot.hash, |(_, held)| Arc::ptr_eq(held, slot))
            .map(|held| held.remove().0)
            .ok();
        removed.is_some()
    }

    /// Keeps the slots for which `keep` says so.
    pub(super) fn retain(&self, mut keep: impl FnMut(&Arc<Slot>) -> bool) {
        for shard in &self.shards {
            shard.lock().retain(|(_, slot)| keep(slot));
        }
    }

    /// Entries in the map: in flight or holding a value.
    pub(super) fn len(&self) -> usize {
        self.shards.iter().map(|shard| shard.lock().len()).sum()
    }
}

/// Whether a bucket holds the slot of `key`, whose hash is `hash`.
pub(super) fn holds<'a>(hash: u64, key: &'a Key) -> impl Fn(&Bucket) -> bool + 'a {
    move |(held, slot)| *held == hash && slot.key == *key
}

impl Padded {
    fn lock(&self) -> Shard<'_> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use super::*;
    use crate::scenario::Handler;

    fn slot(table: &Table, id: &str) -> Arc<Slot> {
        let key = Key::new("demo", Handler::Run, id);
        let hash = table.hash(&key);
        Arc::new(Slot::new(key, hash, Instant::now()))
    }

    fn insert(table: &Table, slot: &Arc<Slot>) {
        table.shard(slot.hash).insert_unique(slot.hash, (slot.hash, slot.clone()), |(hash, _)| *hash);
    }

    #[test]
    fn a_slot_is_removed_by_itself_not_by_another_of_its_key() {
        let table = Table::new();
        let (first, second) = (slot(&table, "r-1"), slot(&table, "r-1"));
        insert(&table, &second);
        assert!(!table.remove(&first), "an older slot of the key leaves the newer one alone");
        let held = table.get(&first.key).expect("the newer slot is still there");
        assert!(Arc::ptr_eq(&held, &second));
        assert!(table.remove(&second));
        assert!(table.get(&second.key).is_none() && table.len() == 0);
    }

    #[test]
    fn every_shard_is_counted_and_swept() {
        let table = Table::new();
        // Enough that no shard is left empty by chance, however many there are.
        let count = 64 * table.shards.len();
        let slots: Vec<_> = (0..count).map(|n| slot(&table, &format!("r-{n}"))).collect();
        slots.iter().for_each(|slot| insert(&table, slot));
        assert_eq!(table.len(), count);
        let shards = table.shards.iter().filter(|shard| !shard.lock().is_empty()).count();
        assert_eq!(shards, table.shards.len(), "keys spread over every shard");
        let kept = |slot: &Arc<Slot>| slot.key.request_id.as_str().ends_with('0');
        table.retain(kept);
        assert_eq!(table.len(), slots.iter().filter(|slot| kept(slot)).count());
        assert!(slots.iter().all(|slot| table.get(&slot.key).is_some() == kept(slot)));
    }
}
