//! The whole answers of the latest few ended calls, as `/llm/answers`
//! renders them. A long answer is fetched part by part, and each part's
//! request would render the whole answer again: for a call of tens of
//! thousands of events, some hundreds of milliseconds of CPU each. An
//! ended call's answer no longer changes, so it is rendered once; a running
//! call's changes with every event and its timings, and is rendered anew.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex, PoisonError},
};

use crate::calls::record::CallRecord;

/// Renderings kept: enough for a few clients fetching parts at once, few
/// enough that their bytes (a record's worth of events each, rendered) stay
/// small.
const KEPT: usize = 4;

/// The latest renderings of ended calls' answers.
#[derive(Debug, Default)]
pub(crate) struct KeptAnswers {
    /// Call id, its events when it ended, its answer; oldest first.
    kept: Mutex<VecDeque<(String, usize, Arc<str>)>>,
}

impl KeptAnswers {
    /// Call `id`'s answer: kept when `record` has ended and was rendered
    /// since, else `render`'s (kept when the call has ended).
    pub(crate) fn get_or_render(&self, id: &str, record: &CallRecord, render: impl FnOnce() -> String) -> Arc<str> {
        let Some(events) = record.ended_with() else { return render().into() };
        let found = self.lock().iter().find(|(kid, kevents, _)| kid == id && *kevents == events).map(|k| k.2.clone());
        if let Some(whole) = found {
            return whole;
        }
        // Rendered outside the lock: two first requests may both render.
        let whole: Arc<str> = render().into();
        let mut kept = self.lock();
        if kept.len() == KEPT {
            kept.pop_front();
        }
        kept.push_back((id.to_owned(), events, whole.clone()));
        whole
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(String, usize, Arc<str>)>> {
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
        let record = CallRecord::new(1 << 20);
        record.event(ModelEvent::TextDelta("Жили-были".into()));
        let first = kept.get_or_render("r1", &record, render);
        let second = kept.get_or_render("r1", &record, render);
        assert_ne!(first, second, "a running call's answer is rendered anew");
        record.finish();
        let ended = kept.get_or_render("r1", &record, render);
        assert!(Arc::ptr_eq(&ended, &kept.get_or_render("r1", &record, render)), "rendered once");
        assert_eq!(renders.get(), 3);
        for other in 2..=KEPT + 1 {
            kept.get_or_render(&format!("r{other}"), &record, render);
        }
        assert!(!Arc::ptr_eq(&ended, &kept.get_or_render("r1", &record, render)), "the oldest is let go");
    }
}
