//! The callback contract (docs/callbacks.md): an answer not ready by a handler's
//! deadline is held with a short filler (or its first sentences) and a
//! `CallbackDirective`; the client sends the directive back as
//! `Input.Callback` of a new `/run`, which joins the same model call.
//!
//! The directive's `Payload` names the call (`{"call_id": ...}`); the state's
//! pending call must name the same one, so that a callback replayed into
//! another dialog, or one the dialog has moved past, joins nothing. What the
//! hold said so far (hops, sentences spoken, the last filler) rides in the
//! state, which Megamind keeps, so any instance can take the next hop.

use std::time::Duration;

use megamind_core::proto::n_alice::n_scenarios::{TCallbackDirective, TDirective, t_directive};
use prost_types::{Struct, Value, value::Kind};

use crate::proto::megamind_scenario::v1::{TAssistantPending, TAssistantState};

/// The callback's `Name`: the one `Input.Callback` the shell takes itself.
pub(crate) const NAME: &str = "assistant_answer";
/// The payload's key naming the call.
const CALL_ID: &str = "call_id";

/// The directive that fetches the rest of call `call_id`.
pub(crate) fn directive(call_id: &str) -> TDirective {
    let id = Value { kind: Some(Kind::StringValue(call_id.to_owned())) };
    let payload = Struct { fields: [(CALL_ID.to_owned(), id)].into_iter().collect() };
    let callback = TCallbackDirective { name: NAME.into(), payload: Some(payload), ..Default::default() };
    TDirective { directive: Some(t_directive::Directive::CallbackDirective(callback)) }
}

/// Makes `state` wait for the call `call_id` answering `utterance`, a call
/// the scenario starts by itself (a skill's next step): the directive
/// returned fetches its answer like any held answer's.
pub(crate) fn continue_with(state: &mut TAssistantState, call_id: &str, utterance: &str) -> TDirective {
    state.pending =
        Some(TAssistantPending { call_id: call_id.to_owned(), utterance: utterance.to_owned(), ..Default::default() });
    directive(call_id)
}

/// The call a callback's payload names, if it names one.
pub(crate) fn call_id(payload: Option<&Struct>) -> Option<&str> {
    match payload?.fields.get(CALL_ID)?.kind.as_ref()? {
        Kind::StringValue(id) if !id.is_empty() => Some(id),
        _ => None,
    }
}

/// The filler after the one at `last` (its position plus 1; 0 when none was
/// spoken yet) among `count`: the next in turn, so never the same twice in a
/// row when there are two or more, and the same for every retry of a request.
pub(crate) fn next_filler(last: u32, count: usize) -> usize {
    usize::try_from(last).unwrap_or(0) % count.max(1)
}

/// The hops one call may take: one per quarter second of its timeout, more
/// than a client that sends the callback back at once can use up before the
/// call times out (each hop waits in `/run` and `/continue`), so the bound
/// only stops a client that loops.
pub(crate) fn max_hops(call_timeout: Duration) -> u32 {
    u32::try_from(call_timeout.as_millis() / 250).unwrap_or(u32::MAX).saturating_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directive_names_the_call_and_its_payload_gives_it_back() {
        let TDirective { directive: Some(t_directive::Directive::CallbackDirective(callback)) } = directive("req-7")
        else {
            panic!("a callback directive")
        };
        assert_eq!(callback.name, NAME);
        assert_eq!(call_id(callback.payload.as_ref()), Some("req-7"));
        assert_eq!(call_id(None), None);
        assert_eq!(call_id(Some(&Struct::default())), None);
        let number = Struct {
            fields: [(CALL_ID.to_owned(), Value { kind: Some(Kind::NumberValue(7.0)) })].into_iter().collect(),
        };
        assert_eq!(call_id(Some(&number)), None, "only a string names a call");
    }

    #[test]
    fn fillers_take_turns() {
        let spoken: Vec<usize> = (0..6)
            .scan(0u32, |last, _| {
                let next = next_filler(*last, 3);
                *last = next as u32 + 1;
                Some(next)
            })
            .collect();
        assert_eq!(spoken, [0, 1, 2, 0, 1, 2]);
        assert_eq!(next_filler(7, 1), 0, "one phrase is all there is");
        assert_eq!(next_filler(u32::MAX, 4), (u32::MAX % 4) as usize, "a hostile state is still in range");
    }
}
