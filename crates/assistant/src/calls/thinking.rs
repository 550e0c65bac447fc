//! The thinking budget (`[assistant.calls] max_thinking_ms`): a model that
//! is still thinking, without a word of its answer, that long after its
//! call started is stopped, so that the user hears the apology rather than
//! waiting out the whole call. Thinking is reasoning sent apart or a thought
//! the answer's text opens (read by the stream's mapper, as it streams); a
//! model that is only slow, or has begun its answer, is never stopped here.

use tokio::time::{Instant, sleep_until};

use crate::{
    backend::ModelEvent,
    calls::record::Follower,
    jsonseq::{Format, Mapper},
};

/// Resolves once the call `follower` reads has thought past `budget`
/// without a word of its answer (the text read as `format`); never when
/// its answer began first or it ended.
pub(crate) async fn overrun(mut follower: Follower, format: Format, budget: Instant) {
    let mut mapper = Mapper::new(format);
    let (mut out, mut thought, mut past) = (Vec::new(), false, false);
    loop {
        tokio::select! {
            event = follower.next() => match event {
                Some(ModelEvent::TextDelta(piece)) => mapper.text(&piece, &mut out),
                Some(ModelEvent::ReasoningDelta(_)) => thought = true,
                Some(_) => {}
                None => return std::future::pending().await,
            },
            () = sleep_until(budget), if !past => past = true,
        }
        for event in out.drain(..) {
            match event.name {
                "final_delta" if event.text().is_some_and(|text| !text.is_empty()) => {
                    return std::future::pending().await;
                }
                "phase_delta" => thought = true,
                _ => {}
            }
        }
        if past && thought {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use futures_util::FutureExt;

    use super::*;
    use crate::calls::record::CallRecord;

    #[tokio::test(start_paused = true)]
    async fn a_thought_past_the_budget_is_stopped_and_an_answer_never() {
        let budget = Duration::from_millis(500);
        for (events, stopped) in [
            (vec![ModelEvent::ReasoningDelta("Хм".into())], true),
            (vec![ModelEvent::TextDelta("<think>\nThe user".into())], true),
            (vec![ModelEvent::TextDelta("<think>Хм</think>Привет".into())], false),
            (vec![ModelEvent::ReasoningDelta("Хм".into()), ModelEvent::TextDelta("Привет".into())], false),
            (vec![], false),
        ] {
            let record = Arc::new(CallRecord::new(1 << 20));
            let mut watch = Box::pin(overrun(record.follow(), Format::Auto, Instant::now() + budget));
            for event in events.clone() {
                record.push(event);
            }
            assert!((&mut watch).now_or_never().is_none(), "{events:?}: within the budget");
            tokio::time::advance(budget).await;
            assert_eq!((&mut watch).now_or_never().is_some(), stopped, "{events:?}");
        }
    }
}
