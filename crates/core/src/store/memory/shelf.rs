//! The shelf: values kept once however many entries hold them.
//!
//! Most calls of a scenario get one of a few answers (a decline, a canned
//! card), byte for byte the same under different `RequestId`s. The shelf
//! keeps one copy of each: an entry whose value is already there holds the
//! shelved copy, and its value's bytes count once in the pool's bound
//! (charged to whichever holder came first, and given back when the last
//! one goes), so the same memory keeps more answers for retries. Values are
//! found by a hash of their bytes and compared whole: a value whose hash is
//! taken by other bytes is kept apart, as a value too long to be worth
//! hashing is.

use std::hash::BuildHasher;

use bytes::Bytes;
use dashmap::{DashMap, mapref::entry::Entry};

/// Values longer than this are kept apart: one is rarely repeated, and
/// hashing it would cost more than its copy saves.
const MAX_SHELVED: usize = 64 << 10;

#[derive(Debug)]
pub(super) struct Shelved {
    bytes: Bytes,
    /// Entries holding it, counted in and out with the pool's totals.
    holders: usize,
}

/// Values kept once, by a hash of their bytes.
#[derive(Debug, Default)]
pub(super) struct Shelf {
    // foldhash, seeded per process: answers cannot be chosen to collide.
    values: DashMap<u64, Shelved, foldhash::fast::RandomState>,
    hasher: foldhash::fast::RandomState,
}

/// Where a kept value lives, and what keeping it added to the pool's bytes
/// besides its entry.
#[derive(Debug)]
pub(super) struct Kept {
    /// The bytes to keep: the shelf's copy when the value was shelved.
    pub(super) value: Bytes,
    /// The value's hash on the shelf, or `None` when it is kept apart.
    pub(super) shelved: Option<u64>,
    /// The value's bytes when this holder is the first: they count once.
    pub(super) first_bytes: usize,
}

impl Shelf {
    /// Takes `value` for one more entry.
    pub(super) fn keep(&self, value: Bytes) -> Kept {
        if value.is_empty() || value.len() > MAX_SHELVED {
            return Kept { value, shelved: None, first_bytes: 0 };
        }
        let hash = self.hasher.hash_one(&value[..]);
        match self.values.entry(hash) {
            Entry::Occupied(mut shelved) if shelved.get().bytes == value => {
                let shelved = shelved.get_mut();
                shelved.holders += 1;
                Kept { value: shelved.bytes.clone(), shelved: Some(hash), first_bytes: 0 }
            }
            Entry::Occupied(_) => Kept { value, shelved: None, first_bytes: 0 },
            Entry::Vacant(vacant) => {
                let first_bytes = value.len();
                vacant.insert(Shelved { bytes: value.clone(), holders: 1 });
                Kept { value, shelved: Some(hash), first_bytes }
            }
        }
    }

    /// Lets one holder of the value hashed `hash` go; the value's bytes,
    /// to count out, when it was the last.
    pub(super) fn release(&self, hash: u64) -> usize {
        let Entry::Occupied(mut shelved) = self.values.entry(hash) else { return 0 };
        shelved.get_mut().holders -= 1;
        if shelved.get().holders > 0 {
            return 0;
        }
        shelved.remove().bytes.len()
    }

    /// Distinct values on the shelf.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.values.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_bytes_are_kept_once_and_leave_with_their_last_holder() {
        let shelf = Shelf::default();
        let first = shelf.keep(Bytes::from(vec![7u8; 100]));
        let second = shelf.keep(Bytes::from(vec![7u8; 100]));
        assert_eq!((first.first_bytes, second.first_bytes), (100, 0));
        assert_eq!(first.value.as_ptr(), second.value.as_ptr(), "one copy");
        let other = shelf.keep(Bytes::from(vec![8u8; 100]));
        assert_eq!(other.first_bytes, 100);
        assert_eq!(shelf.len(), 2);
        assert_eq!(shelf.release(first.shelved.unwrap()), 0, "one holder left");
        assert_eq!(shelf.release(second.shelved.unwrap()), 100, "the last holder gives the bytes back");
        assert_eq!(shelf.release(other.shelved.unwrap()), 100);
        assert_eq!(shelf.len(), 0);
    }

    #[test]
    fn empty_and_long_values_are_kept_apart() {
        let shelf = Shelf::default();
        for value in [Bytes::new(), Bytes::from(vec![1u8; MAX_SHELVED + 1])] {
            let kept = shelf.keep(value.clone());
            assert_eq!((kept.shelved, kept.first_bytes, kept.value), (None, 0, value));
        }
        assert_eq!(shelf.len(), 0);
    }

    #[test]
    fn other_bytes_under_a_taken_hash_are_kept_apart() {
        let shelf = Shelf::default();
        let kept = shelf.keep(Bytes::from_static(b"one"));
        let hash = kept.shelved.unwrap();
        // Another value stands on the hash of "one", as a collision would.
        shelf.values.get_mut(&hash).unwrap().bytes = Bytes::from_static(b"two");
        let apart = shelf.keep(Bytes::from_static(b"one"));
        assert_eq!((apart.shelved, apart.first_bytes, &apart.value[..]), (None, 0, &b"one"[..]));
    }
}
