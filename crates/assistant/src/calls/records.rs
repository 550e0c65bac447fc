//! The records of model calls this replica holds now, by call id: held
//! weakly, so that a record lives while its runner or a reader holds it and
//! no longer (the store's journal keeps the events), and the ids of calls
//! it knew lately, so that an expired call is told from one that never was.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    sync::{Arc, Weak},
};

use tokio::sync::watch;

use super::{Run, journal::Standing, record::CallRecord};

/// The records this replica holds now, and the calls it knew lately.
#[derive(Debug, Default)]
pub(super) struct Records {
    live: HashMap<Box<str>, Weak<CallRecord>>,
    /// The calls this replica runs now, for its own handlers to join, and
    /// where each stands in the shared store.
    runs: HashMap<Box<str>, (watch::Receiver<Run>, watch::Receiver<Standing>)>,
    /// When `live` is next swept of records gone.
    sweep_at: usize,
    /// Ids of calls this replica ran or followed, oldest first, so that a
    /// reader is told "expired" rather than "never was"; bounded by count.
    known: VecDeque<Box<str>>,
    known_set: HashSet<Box<str>>,
}

/// Ids of calls remembered at most.
const MAX_KNOWN: usize = 4096;

impl Records {
    pub(super) fn get(&self, id: &str) -> Option<Arc<CallRecord>> {
        self.live.get(id)?.upgrade()
    }

    /// Holds `record` as call `id`'s (weakly), in place of any older one.
    pub(super) fn hold(&mut self, id: &str, record: &Arc<CallRecord>) {
        if self.live.len() >= self.sweep_at {
            self.live.retain(|_, record| record.strong_count() > 0);
            self.sweep_at = (2 * self.live.len()).max(64);
        }
        self.live.insert(id.into(), Arc::downgrade(record));
        if self.known_set.insert(id.into()) {
            if self.known.len() == MAX_KNOWN
                && let Some(oldest) = self.known.pop_front()
            {
                self.known_set.remove(&oldest);
            }
            self.known.push_back(id.into());
        }
    }

    /// The run of call `id` on this replica, if it runs it now.
    pub(super) fn run(&self, id: &str) -> Option<watch::Receiver<Run>> {
        self.runs.get(id).map(|(run, _)| run.clone())
    }

    /// Whether this replica runs call `id` and the shared store is not
    /// known to hold it now.
    pub(super) fn is_unheld(&self, id: &str) -> bool {
        self.runs.get(id).is_some_and(|(_, standing)| standing.borrow().unheld)
    }

    /// Holds `run` as this replica's run of call `id`, standing in the
    /// shared store as `standing` says, until [`Records::end_run`].
    pub(super) fn hold_run(&mut self, id: &str, run: &watch::Receiver<Run>, standing: &watch::Receiver<Standing>) {
        self.runs.insert(id.into(), (run.clone(), standing.clone()));
    }

    /// Lets `run` go as call `id`'s, unless another one stands there now.
    pub(super) fn end_run(&mut self, id: &str, run: &watch::Receiver<Run>) {
        if self.runs.get(id).is_some_and(|(held, _)| held.same_channel(run)) {
            self.runs.remove(id);
        }
    }

    /// Lets `record` go as call `id`'s, unless another one stands there now.
    pub(super) fn forget(&mut self, id: &str, record: &Arc<CallRecord>) {
        if self.live.get(id).is_some_and(|held| std::ptr::eq(held.as_ptr(), Arc::as_ptr(record))) {
            self.live.remove(id);
        }
    }

    pub(super) fn knows(&self, id: &str) -> bool {
        self.known_set.contains(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_its_bound_the_oldest_known_id_is_forgotten_and_the_newest_kept() {
        let mut records = Records::default();
        // Ten thousand calls, each record dropped at once: only the ids
        // remembered by count tell "expired" from "never was".
        let held: usize = 10_000;
        for i in 0..held {
            records.hold(&format!("call-{i}"), &Arc::new(CallRecord::new(1024)));
        }
        assert_eq!(records.known.len(), MAX_KNOWN, "the list of known ids stays at its bound");
        assert_eq!(records.known_set.len(), MAX_KNOWN, "and so does the set");
        assert!(!records.knows("call-0"), "the oldest id is forgotten");
        assert!(records.knows(&format!("call-{}", held - 1)), "the newest id is kept");
        let first_kept = held.saturating_sub(MAX_KNOWN);
        assert!(records.knows(&format!("call-{first_kept}")), "the last {MAX_KNOWN} ids are kept");
        assert!(!records.knows(&format!("call-{}", first_kept - 1)), "and no older one");
        assert!(records.live.len() <= 2 * 64, "records gone are swept: {} held", records.live.len());
        // An id held again is not counted twice, nor does it push another out.
        records.hold(&format!("call-{first_kept}"), &Arc::new(CallRecord::new(1024)));
        assert!(records.knows(&format!("call-{first_kept}")) && records.known.len() == MAX_KNOWN);
    }
}
