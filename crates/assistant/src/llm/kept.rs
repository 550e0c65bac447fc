//! The whole answers of the latest few ended calls, as `/llm/answers`
//! renders them. A long answer is fetched part by part, and each part's
//! request would render the whole answer again: for a call of tens of
//! thousands of events, some hundreds of milliseconds of CPU each. An
//! ended call's answer no longer changes, so it is rendered once. A running
//! call's changes with every event: it is not kept here, but as a version
//! of the snapshots its parts come from (`crate::parts`), and one handed
//! here anyway is rendered and not kept.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex, PoisonError, Weak},
};

use crate::calls::record::CallRecord;

/// Renderings kept: enough for a few clients fetching parts at once, few
/// enough that their bytes (a record's worth of events each, rendered) stay
/// small.
const KEPT: usize = 4;

/// The latest renderings of ended calls' answers.
#[derive(Debug, Default)]
pub(crate) struct KeptAnswers {
    /// Each call's record (weak: its place only, so that a later record
    /// cannot take its address and be taken for it) and its answer; oldest first.
    kept: Mutex<VecDeque<(Weak<CallRecord>, Arc<str>)>>,
}

impl KeptAnswers {
    /// The answer of the call `record` holds: kept when it has ended and
    /// was rendered since, else `render`'s (kept when the call has ended).
    pub(crate) fn get_or_render(&self, record: &Arc<CallRecord>, render: impl FnOnce() -> String) -> Arc<str> {
        if !record.has_ended() {
            return render().into();
        }
        let this = Arc::as_ptr(record);
        let found = self.lock().iter().find(|(kept, _)| kept.as_ptr() == this).map(|(_, whole)| whole.clone());
        if let Some(whole) = found {
            return whole;
        }
        // Rendered outside the lock: two first requests may both render.
        let whole: Arc<str> = render().into();
        let mut kept = self.lock();
        if kept.len() == KEPT {
            kept.pop_front();
        }
        kept.push_back((Arc::downgrade(record), whole.clone()));
        whole
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(Weak<CallRecord>, Arc<str>)>> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::backend::{EventSink, ModelEvent};

    #[test]
    fn an_ended_answer_is_rendered_once_and_a_running_one_every_time() {
        let kept = KeptAnswers::default();
        let renders = Cell::new(0);
        let render = || {
            renders.set(renders.get() + 1);
            format!("rendering {}", renders.get())
        };
        let ended_record = || {
            let record = Arc::new(CallRecord::new(1 << 20));
            record.finish();
            record
        };
        let record = Arc::new(CallRecord::new(1 << 20));
        record.event(ModelEvent::TextDelta("Жили-были".into()));
        let first = kept.get_or_render(&record, render);
        let second = kept.get_or_render(&record, render);
        assert_ne!(first, second, "a running call's answer is rendered anew");
        record.finish();
        let ended = kept.get_or_render(&record, render);
        assert!(Arc::ptr_eq(&ended, &kept.get_or_render(&record, render)), "rendered once");
        assert_eq!(renders.get(), 3);
        let another = ended_record();
        assert!(!Arc::ptr_eq(&ended, &kept.get_or_render(&another, render)), "another call, its own answer");
        let others: Vec<_> = (0..KEPT).map(|_| ended_record()).collect();
        for other in &others {
            kept.get_or_render(other, render);
        }
        assert!(!Arc::ptr_eq(&ended, &kept.get_or_render(&record, render)), "the oldest is let go");
    }
}
