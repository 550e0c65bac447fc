//! Answers kept once in Redis: an answer this replica stores again and
//! again (a decline, a canned card: most of a scenario's calls get one of a
//! few) is written once, as a body under a key of its own, and each entry
//! holding it refers to the body by id instead of carrying its bytes.
//!
//! A reference costs Redis far less than the answer itself: the script
//! that ends a lease takes its value as an argument, and Redis copies and
//! hashes every byte of what enters a script. It also keeps an entry some
//! tens of bytes instead of kilobytes.
//!
//! - An answer becomes a body the second time this replica stores it (by
//!   hash, in a table of the hashes seen last), at most [`MAX_KEPT`] at a
//!   time (the least recently stored goes first) and one new one per
//!   [`KEEP_EVERY`]: an answer stored once costs a hash and nothing else,
//!   and many answers taking turns cost a body write now and then, not one
//!   per answer. A body's answer is compared whole before an entry refers
//!   to it.
//! - A body is written (`SET … PX`) before any entry refers to it, and is
//!   kept [`BODY_EXTRA`] longer than any entry: an entry refers to a body
//!   only for [`FRESH_FOR`] after the write that made it, and rewrites it
//!   after [`REFRESH`], so no entry outlives its body.
//! - The id is this replica's own (its id and the link's counter, which
//!   numbers claims too): replicas and stores never share a body, so none
//!   can ever read another's answer under a colliding hash.
//! - A reader resolves an id from the bodies it knows (its own, and those
//!   it read before), or reads the body once (`GET`).
//! - A write counts only while the link has seen no failure since: a Redis
//!   that restarted empty (its connections lost) gets its bodies written
//!   again before any entry refers to them. A body Redis lost all the same
//!   (a flush) makes the entries referring to it unreadable, never wrong:
//!   a `/commit` retried then is refused, not run again.

use std::{
    hash::BuildHasher,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use dashmap::DashMap;
use tokio::time::Instant;

/// Answers shorter than this are written whole: a reference saves little.
const MIN_BODY: usize = 512;
/// Answers longer than this are written whole: one is rarely repeated, and
/// keeping it would hold much memory.
const MAX_BODY: usize = 16 << 10;
/// Hashes of the answers stored last, one per slot.
const SEEN: usize = 4096;
/// Answers kept once at a time.
const MAX_KEPT: usize = 64;
/// How often an answer may at most become a body.
const KEEP_EVERY: Duration = Duration::from_millis(100);
/// Bodies known by id (this replica's and those read); past it the
/// table starts over.
const MAX_KNOWN: usize = 256;
/// How long after a body's write it is written again.
const REFRESH: Duration = Duration::from_secs(10);
/// How long after a body's write entries may refer to it.
const FRESH_FOR: Duration = Duration::from_secs(19);
/// How much longer than the longest-kept entry a body is kept: past
/// [`FRESH_FOR`], with room for a command sent late.
pub(super) const BODY_EXTRA: Duration = Duration::from_secs(20);
/// How long a body's write may stay unanswered before another caller
/// writes it instead.
const WRITE_STALLS: Duration = Duration::from_secs(1);

/// How an answer is to be kept.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Keep {
    /// Whole, in its entry.
    Whole,
    /// By reference to the body `id`, which Redis holds.
    Refer(Bytes),
    /// Write the body `id` first (then [`Bodies::written`] or
    /// [`Bodies::unwritten`]), and refer to it once Redis took it.
    Write(Bytes),
}

/// This store's bodies: the answers kept once, and the bodies known by id.
#[derive(Debug)]
pub(super) struct Bodies {
    seen: Box<[AtomicU64]>,
    kept: Mutex<Kept>,
    // foldhash, seeded per process: answers cannot be chosen to collide
    // (and a collision only costs a whole write: bytes are compared).
    hasher: foldhash::fast::RandomState,
    known: DashMap<Bytes, Bytes, foldhash::fast::RandomState>,
    owner: String,
    next: Arc<AtomicU64>,
}

#[derive(Debug, Default)]
struct Kept {
    answers: Vec<Answer>,
    /// When an answer last became a body.
    last: Option<Instant>,
}

/// An answer kept once.
#[derive(Debug)]
struct Answer {
    hash: u64,
    value: Bytes,
    /// When it was last stored.
    used: Instant,
    id: Bytes,
    /// When the last write that Redis took was sent, and the link's
    /// failure count then.
    written: Option<(Instant, u64)>,
    /// When a write in flight was sent.
    writing: Option<Instant>,
}

impl Answer {
    /// How this answer, stored at `now` after `failures` failures of the
    /// link, is to be kept.
    fn keep(&mut self, now: Instant, failures: u64) -> Keep {
        self.used = now;
        let written = self.written.filter(|&(_, then)| then == failures).map(|(written, _)| written);
        let fresh = written.is_some_and(|written| now < written + FRESH_FOR);
        let due = written.is_none_or(|written| now >= written + REFRESH);
        let stalled = self.writing.is_none_or(|writing| now >= writing + WRITE_STALLS);
        match (fresh, due && stalled) {
            (_, true) => {
                self.writing = Some(now);
                Keep::Write(self.id.clone())
            }
            (true, false) => Keep::Refer(self.id.clone()),
            (false, false) => Keep::Whole,
        }
    }
}

impl Bodies {
    /// The bodies of a store of the replica `owner`, numbered by `next`.
    pub(super) fn new(owner: &str, next: Arc<AtomicU64>) -> Bodies {
        Bodies {
            seen: (0..SEEN).map(|_| AtomicU64::new(0)).collect(),
            kept: Mutex::default(),
            hasher: foldhash::fast::RandomState::default(),
            known: DashMap::default(),
            owner: owner.to_owned(),
            next,
        }
    }

    /// How `value`, being stored at `now` after the link's `failures`
    /// failures, is to be kept.
    pub(super) fn keep(&self, value: &Bytes, now: Instant, failures: u64) -> Keep {
        if !(MIN_BODY..=MAX_BODY).contains(&value.len()) {
            return Keep::Whole;
        }
        let hash = self.hasher.hash_one(&value[..]);
        let mut kept = self.kept();
        if let Some(answer) = kept.answers.iter_mut().find(|answer| answer.hash == hash) {
            // Other bytes under the same hash are written whole.
            return if answer.value == *value { answer.keep(now, failures) } else { Keep::Whole };
        }
        let seen = &self.seen[usize::try_from(hash % SEEN as u64).unwrap_or(0)];
        if seen.swap(hash, Ordering::Relaxed) != hash || kept.last.is_some_and(|last| now < last + KEEP_EVERY) {
            return Keep::Whole;
        }
        kept.last = Some(now);
        if kept.answers.len() >= MAX_KEPT
            && let Some(oldest) =
                kept.answers.iter().enumerate().min_by_key(|(_, answer)| answer.used).map(|(at, _)| at)
        {
            kept.answers.swap_remove(oldest);
        }
        let id = Bytes::from(format!("{}:{}", self.owner, self.next.fetch_add(1, Ordering::Relaxed)));
        let mut answer = Answer { hash, value: value.clone(), used: now, id, written: None, writing: None };
        let keep = answer.keep(now, failures);
        kept.answers.push(answer);
        keep
    }

    /// Redis took the body `id`, sent at `sent` after the link's `failures`
    /// failures.
    pub(super) fn written(&self, id: &Bytes, sent: Instant, failures: u64) {
        let mut kept = self.kept();
        let Some(answer) = kept.answers.iter_mut().find(|answer| answer.id == *id) else { return };
        if answer.written.is_none_or(|(written, then)| then != failures || written < sent) {
            answer.written = Some((sent, failures));
        }
        answer.writing = None;
        let value = answer.value.clone();
        drop(kept);
        self.learn(id.clone(), value);
    }

    /// The write of the body `id` failed.
    pub(super) fn unwritten(&self, id: &Bytes) {
        if let Some(answer) = self.kept().answers.iter_mut().find(|answer| answer.id == *id) {
            answer.writing = None;
        }
    }

    /// The body `id`, if this store knows it.
    pub(super) fn known(&self, id: &[u8]) -> Option<Bytes> {
        self.known.get(id).map(|body| body.clone())
    }

    /// Keeps the body `id`, read from Redis or written.
    pub(super) fn learn(&self, id: Bytes, body: Bytes) {
        if self.known.len() >= MAX_KNOWN && !self.known.contains_key(&id) {
            self.known.clear();
        }
        self.known.insert(id, body);
    }

    fn kept(&self) -> MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(byte: u8) -> Bytes {
        Bytes::from(vec![byte; 1000])
    }

    /// Stores `value` twice at `at`: the body to write.
    fn made_body(bodies: &Bodies, value: &Bytes, at: Instant) -> Bytes {
        assert_eq!(bodies.keep(value, at, 0), Keep::Whole, "seen once");
        let Keep::Write(id) = bodies.keep(value, at, 0) else { panic!("the second store writes the body") };
        id
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_is_referred_to_from_its_second_store_on_once_its_body_is_written() {
        let bodies = Bodies::new("r1", Arc::default());
        let now = Instant::now();
        let id = made_body(&bodies, &answer(1), now);
        assert_eq!(bodies.keep(&answer(1), now, 0), Keep::Whole, "not referred to before Redis took it");
        bodies.written(&id, now, 0);
        assert_eq!(bodies.keep(&answer(1), now, 0), Keep::Refer(id.clone()));
        assert_eq!(bodies.known(&id), Some(answer(1)));
        assert!(id.starts_with(b"r1:"), "the replica's own id");
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_is_written_again_after_its_refresh_and_never_referred_to_past_its_freshness() {
        let bodies = Bodies::new("r1", Arc::default());
        let start = Instant::now();
        let id = made_body(&bodies, &answer(1), start);
        bodies.written(&id, start, 0);
        let refresh = start + REFRESH;
        assert_eq!(bodies.keep(&answer(1), refresh, 0), Keep::Write(id.clone()), "one caller writes it again");
        assert_eq!(bodies.keep(&answer(1), refresh, 0), Keep::Refer(id.clone()), "the others still refer");
        let past = start + FRESH_FOR;
        assert_eq!(bodies.keep(&answer(1), past, 0), Keep::Write(id.clone()), "a stalled write is taken over");
        assert_eq!(bodies.keep(&answer(1), past, 0), Keep::Whole, "past its freshness, being written: whole");
        bodies.written(&id, past, 0);
        assert_eq!(bodies.keep(&answer(1), past, 0), Keep::Refer(id));
        assert!(FRESH_FOR + Duration::from_secs(1) <= BODY_EXTRA, "a body outlives every entry referring to it");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_write_or_a_link_failure_since_makes_the_next_store_write_again() {
        let bodies = Bodies::new("r1", Arc::default());
        let now = Instant::now();
        let id = made_body(&bodies, &answer(1), now);
        bodies.unwritten(&id);
        assert_eq!(bodies.keep(&answer(1), now, 0), Keep::Write(id.clone()));
        bodies.written(&id, now, 0);
        assert_eq!(bodies.keep(&answer(1), now, 0), Keep::Refer(id.clone()));
        assert_eq!(bodies.keep(&answer(1), now, 1), Keep::Write(id.clone()), "the link failed since the write");
        assert_eq!(bodies.keep(&answer(1), now, 1), Keep::Whole, "one write at a time");
        assert_eq!(bodies.keep(&answer(1), now + WRITE_STALLS, 1), Keep::Write(id), "a stalled write is taken over");
    }

    #[tokio::test(start_paused = true)]
    async fn short_and_long_answers_are_kept_whole() {
        let bodies = Bodies::new("r1", Arc::default());
        let now = Instant::now();
        for value in [Bytes::from(vec![1; MIN_BODY - 1]), Bytes::from(vec![1; MAX_BODY + 1])] {
            bodies.keep(&value, now, 0);
            assert_eq!(bodies.keep(&value, now, 0), Keep::Whole);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn answers_become_bodies_one_per_interval_and_the_least_recently_stored_goes_first() {
        let bodies = Bodies::new("r1", Arc::default());
        let mut now = Instant::now();
        made_body(&bodies, &answer(0), now);
        assert_eq!(bodies.keep(&answer(1), now, 0), Keep::Whole);
        assert_eq!(bodies.keep(&answer(1), now, 0), Keep::Whole, "one new body per interval");
        now += KEEP_EVERY;
        let Keep::Write(first) = bodies.keep(&answer(1), now, 0) else { panic!("its turn came") };
        for byte in 2..=MAX_KEPT as u8 {
            now += KEEP_EVERY;
            made_body(&bodies, &answer(byte), now);
            bodies.keep(&answer(1), now, 0);
        }
        assert_eq!(bodies.kept().answers.len(), MAX_KEPT, "answer 0 made room");
        let kept = bodies.kept();
        assert!(kept.answers.iter().any(|kept| kept.value == answer(1) && kept.id == first), "stored all along, kept");
        assert!(kept.answers.iter().all(|kept| kept.value != answer(0)));
    }

    #[tokio::test(start_paused = true)]
    async fn other_bytes_under_a_kept_hash_are_kept_whole() {
        let bodies = Bodies::new("r1", Arc::default());
        let now = Instant::now();
        let id = made_body(&bodies, &answer(1), now);
        bodies.written(&id, now, 0);
        // Another answer stands under the hash of `answer(1)`, as a collision would.
        bodies.kept().answers[0].value = answer(2);
        assert_eq!(bodies.keep(&answer(1), now, 0), Keep::Whole);
    }

    #[test]
    fn the_known_bodies_stay_bounded() {
        let bodies = Bodies::new("r1", Arc::default());
        for n in 0..MAX_KNOWN * 3 {
            bodies.learn(Bytes::from(n.to_string()), answer(1));
            assert!(bodies.known.len() <= MAX_KNOWN);
        }
    }
}
