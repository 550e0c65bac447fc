//! The kept snapshots: per resource, its versions by ETag and which one is
//! the latest. Bounded by count and bytes, the oldest evicted first, and
//! per resource by [`MAX_PER_RESOURCE`]; every entry expires `ttl` after it
//! was last kept, and expired ones are purged on each access (so no
//! background task is needed).
//!
//! An answer too large to keep leaves a record without content: its ETag and
//! resource, so that a later part can still be checked against it.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::Duration,
};

use tokio::time::Instant;

/// Versions of one resource kept at most. A running answer changes with
/// every event, so each part 1 asked of it may keep a new version: past this
/// many, the resource's own oldest gives way, never another resource's
/// snapshot (one client asking part 1 again and again would otherwise
/// evict every other client's).
const MAX_PER_RESOURCE: usize = 8;

/// What is kept of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Found {
    /// Its bytes.
    Content(Arc<str>),
    /// Its name only: it was too large to keep.
    Record,
    /// Nothing: never kept, expired or evicted.
    Nothing,
}

#[derive(Debug)]
struct Entry {
    content: Option<Arc<str>>,
    expires: Instant,
    /// Its place in [`Snapshots::order`].
    seq: u64,
    /// What it counts against the byte bound.
    bytes: usize,
}

#[derive(Debug, Default)]
struct Resource {
    /// The ETag of the snapshot its last unnamed part 1 kept; always one of `kept`.
    latest: Option<String>,
    kept: HashMap<String, Entry>,
}

/// Every snapshot kept, with its bounds.
#[derive(Debug)]
pub(super) struct Snapshots {
    ttl: Duration,
    max_count: usize,
    max_bytes: usize,
    resources: HashMap<String, Resource>,
    /// Every entry by the order it was kept in, oldest first. All entries
    /// live for the same TTL, so this is also the order they expire in.
    order: BTreeMap<u64, (String, String)>,
    next_seq: u64,
    bytes: usize,
}

impl Snapshots {
    /// No snapshots yet.
    pub(super) fn new(ttl: Duration, max_count: usize, max_bytes: usize) -> Snapshots {
        // `Instant + Duration` panics past the clock's range: a century is
        // forever enough.
        let ttl = ttl.min(Duration::from_secs(100 * 365 * 24 * 3600));
        Snapshots {
            ttl,
            max_count,
            max_bytes,
            resources: HashMap::new(),
            order: BTreeMap::new(),
            next_seq: 0,
            bytes: 0,
        }
    }

    /// The snapshot `etag` of `resource`.
    pub(super) fn get(&mut self, resource: &str, etag: &str, now: Instant) -> Found {
        self.purge(now);
        match self.resources.get(resource).and_then(|r| r.kept.get(etag)) {
            Some(Entry { content: Some(content), .. }) => Found::Content(content.clone()),
            Some(Entry { content: None, .. }) => Found::Record,
            None => Found::Nothing,
        }
    }

    /// The latest snapshot of `resource`: its ETag and its bytes if kept.
    pub(super) fn latest(&mut self, resource: &str, now: Instant) -> Option<(String, Option<Arc<str>>)> {
        self.purge(now);
        let resource = self.resources.get(resource)?;
        let etag = resource.latest.as_ref()?;
        let entry = resource.kept.get(etag)?;
        Some((etag.clone(), entry.content.clone()))
    }

    /// Keeps `content` as the snapshot `etag` of `resource`, its latest, for
    /// the TTL from `now` (again, if it is kept already). Content that
    /// cannot fit in the byte bound is recorded without its bytes. Shared,
    /// not copied: the caller may keep the same bytes (an ended call's
    /// rendered answer).
    pub(super) fn keep(&mut self, resource: &str, etag: &str, content: &Arc<str>, now: Instant) {
        self.store(resource, etag, content, now, true);
    }

    /// As [`Snapshots::keep`], but not as the resource's latest: a version
    /// made again for a part that named it, which says nothing of what an
    /// unnamed part 1 was cut from.
    pub(super) fn keep_named(&mut self, resource: &str, etag: &str, content: &Arc<str>, now: Instant) {
        self.store(resource, etag, content, now, false);
    }

    fn store(&mut self, resource: &str, etag: &str, content: &Arc<str>, now: Instant, latest: bool) {
        self.purge(now);
        let seq = self.next_seq;
        self.next_seq += 1;
        let expires = now + self.ttl;
        let crowded = self.resources.get(resource).filter(|r| !r.kept.contains_key(etag));
        if let Some(oldest) = crowded
            .filter(|r| r.kept.len() >= MAX_PER_RESOURCE)
            .and_then(|r| r.kept.values().map(|entry| entry.seq).min())
        {
            self.evict(oldest);
        }
        let kept = self.resources.entry(resource.to_owned()).or_default();
        if latest {
            // Cleared again should the bounds below drop it.
            kept.latest = Some(etag.to_owned());
        }
        if let Some(entry) = kept.kept.get_mut(etag) {
            // Kept already: it lives on from now, as the newest.
            self.order.remove(&entry.seq);
            entry.seq = seq;
            entry.expires = expires;
        } else {
            let overhead = resource.len() + etag.len();
            let fits = content.len().saturating_add(overhead) <= self.max_bytes;
            let content = fits.then(|| content.clone());
            let bytes = overhead + content.as_ref().map_or(0, |c| c.len());
            kept.kept.insert(etag.to_owned(), Entry { content, expires, seq, bytes });
            self.bytes += bytes;
        }
        self.order.insert(seq, (resource.to_owned(), etag.to_owned()));
        while self.order.len() > self.max_count || self.bytes > self.max_bytes {
            if !self.evict_oldest() {
                break;
            }
        }
    }

    /// How many snapshots are kept and the bytes they count.
    #[cfg(test)]
    pub(super) fn usage(&self) -> (usize, usize) {
        (self.order.len(), self.bytes)
    }

    /// Drops every entry expired at `now`.
    fn purge(&mut self, now: Instant) {
        while let Some((_, (resource, etag))) = self.order.first_key_value() {
            let expired = self.resources.get(resource).and_then(|r| r.kept.get(etag)).is_none_or(|e| e.expires <= now);
            if !expired || !self.evict_oldest() {
                break;
            }
        }
    }

    /// Drops the oldest entry; false if there is none.
    fn evict_oldest(&mut self) -> bool {
        match self.order.first_key_value() {
            Some((&seq, _)) => self.evict(seq),
            None => false,
        }
    }

    /// Drops the entry kept as `seq`; false if there is none.
    fn evict(&mut self, seq: u64) -> bool {
        let Some((resource, etag)) = self.order.remove(&seq) else { return false };
        if let Some(kept) = self.resources.get_mut(&resource) {
            if let Some(entry) = kept.kept.remove(&etag) {
                self.bytes -= entry.bytes;
            }
            if kept.latest.as_deref() == Some(etag.as_str()) {
                kept.latest = None;
            }
            if kept.kept.is_empty() {
                self.resources.remove(&resource);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshots(max_count: usize, max_bytes: usize) -> Snapshots {
        Snapshots::new(Duration::from_secs(60), max_count, max_bytes)
    }

    #[test]
    fn a_ttl_of_any_length_is_taken() {
        let mut s = Snapshots::new(Duration::MAX, 1, 1 << 20);
        s.keep("/a", "1", &"one".into(), Instant::now());
        assert_eq!(s.get("/a", "1", Instant::now()), Found::Content("one".into()));
    }

    #[test]
    fn the_oldest_goes_first_when_the_count_is_full() {
        let now = Instant::now();
        let mut s = snapshots(2, 1 << 20);
        s.keep("/a", "1", &"one".into(), now);
        s.keep("/b", "2", &"two".into(), now);
        s.keep("/a", "1", &"one".into(), now); // kept again: now the newest
        s.keep("/c", "3", &"three".into(), now);
        assert_eq!(s.get("/b", "2", now), Found::Nothing);
        assert_eq!(s.get("/a", "1", now), Found::Content("one".into()));
        assert_eq!(s.usage().0, 2);
    }

    #[test]
    fn one_resource_asked_again_and_again_gives_way_to_itself_not_to_others() {
        let now = Instant::now();
        let mut s = snapshots(1024, 1 << 20);
        s.keep("/b", "b1", &"bee".into(), now);
        for version in 0..2000 {
            s.keep("/a", &format!("a{version}"), &"aye".into(), now);
        }
        assert_eq!(s.get("/b", "b1", now), Found::Content("bee".into()));
        assert_eq!(s.usage().0, 1 + MAX_PER_RESOURCE);
        assert_eq!(s.latest("/a", now).map(|(etag, _)| etag), Some("a1999".to_owned()));
        assert_eq!(s.get("/a", "a1992", now), Found::Content("aye".into()));
        assert_eq!(s.get("/a", "a1991", now), Found::Nothing);
        // A version kept again is no new one: nothing gives way.
        s.keep("/a", "a1992", &"aye".into(), now);
        assert_eq!(s.usage().0, 1 + MAX_PER_RESOURCE);
        assert_eq!(s.get("/a", "a1993", now), Found::Content("aye".into()));
    }

    #[test]
    fn bytes_are_bounded_and_a_too_large_answer_is_recorded_without_content() {
        let now = Instant::now();
        let mut s = snapshots(10, 20);
        s.keep("/a", "1", &"x".repeat(15).into(), now); // 2 + 1 + 15 = 18 bytes
        s.keep("/b", "2", &"yy".into(), now); // 5 more: /a goes
        assert_eq!(s.get("/a", "1", now), Found::Nothing);
        assert_eq!(s.usage(), (1, 5));
        s.keep("/c", "3", &"z".repeat(100).into(), now);
        assert_eq!(s.get("/c", "3", now), Found::Record);
        assert_eq!(s.latest("/c", now), Some(("3".to_owned(), None)));
        assert_eq!(s.usage(), (2, 8));
    }

    #[test]
    fn entries_expire_and_the_latest_goes_with_its_entry() {
        let now = Instant::now();
        let mut s = snapshots(10, 1 << 20);
        s.keep("/a", "1", &"one".into(), now);
        s.keep("/a", "2", &"two".into(), now + Duration::from_secs(30));
        assert_eq!(s.latest("/a", now + Duration::from_secs(59)).map(|l| l.0), Some("2".to_owned()));
        assert_eq!(s.get("/a", "1", now + Duration::from_secs(60)), Found::Nothing);
        assert_eq!(s.get("/a", "2", now + Duration::from_secs(60)), Found::Content("two".into()));
        assert_eq!(s.latest("/a", now + Duration::from_secs(90)), None);
        assert_eq!(s.usage(), (0, 0));
    }
}
