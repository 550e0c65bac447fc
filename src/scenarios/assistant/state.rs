//! The dialog state in the protocol's `State` (an `Any` of
//! `TAssistantState`): the session id and the last turns, capped by count and
//! bytes, so the server keeps nothing between turns.
//!
//! The state comes back from Megamind as we gave it, but it is still input:
//! a foreign or undecodable `Any` reads as an empty state, and the caps are
//! applied again on reading.

use prost::Message;
use prost_types::Any;

use super::clip;
use crate::proto::megamind_scenario::v1::{TAssistantState, TAssistantTurn};

/// The type URL of the state.
pub(crate) fn type_url() -> String {
    Any::from_msg(&TAssistantState::default()).map(|a| a.type_url).unwrap_or_default()
}

/// Limits of the history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Caps {
    /// Turns kept at most.
    pub(crate) turns: usize,
    /// Bytes of user and assistant text kept at most.
    pub(crate) bytes: usize,
}

/// The state in `any`, capped; empty when absent or not ours.
pub(crate) fn decode(any: Option<&Any>, caps: Caps) -> TAssistantState {
    let Some(any) = any else { return TAssistantState::default() };
    if any.type_url != type_url() {
        tracing::debug!(type_url = %any.type_url, "assistant: foreign state ignored");
        return TAssistantState::default();
    }
    match TAssistantState::decode(any.value.as_slice()) {
        Ok(mut state) => {
            cap(&mut state.turns, caps);
            state
        }
        Err(error) => {
            tracing::debug!(%error, "assistant: undecodable state ignored");
            TAssistantState::default()
        }
    }
}

/// `state` as the `Any` of `ResponseBody.State`.
pub(crate) fn encode(state: &TAssistantState) -> Any {
    Any { type_url: type_url(), value: state.encode_to_vec() }
}

/// Appends a turn and drops the oldest ones past the caps.
pub(crate) fn push_turn(turns: &mut Vec<TAssistantTurn>, turn: TAssistantTurn, caps: Caps) {
    turns.push(turn);
    cap(turns, caps);
}

fn cap(turns: &mut Vec<TAssistantTurn>, caps: Caps) {
    let excess = turns.len().saturating_sub(caps.turns.max(1));
    turns.drain(..excess);
    let size = |t: &TAssistantTurn| t.user.len() + t.assistant.len();
    let mut total: usize = turns.iter().map(size).sum();
    let mut first = 0;
    while total > caps.bytes && first + 1 < turns.len() {
        total -= size(&turns[first]);
        first += 1;
    }
    turns.drain(..first);
    // The newest turn alone may still be too large: keep its beginnings.
    if let Some(last) = turns.last_mut().filter(|_| total > caps.bytes) {
        let user = clip(&last.user, caps.bytes / 2).len();
        last.user.truncate(user);
        let assistant = clip(&last.assistant, caps.bytes - user).len();
        last.assistant.truncate(assistant);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(user: &str, assistant: &str) -> TAssistantTurn {
        TAssistantTurn { user: user.into(), assistant: assistant.into() }
    }

    fn bytes(turns: &[TAssistantTurn]) -> usize {
        turns.iter().map(|t| t.user.len() + t.assistant.len()).sum()
    }

    #[test]
    fn keeps_the_last_n_turns() {
        let caps = Caps { turns: 3, bytes: 1 << 20 };
        let mut turns = Vec::new();
        for i in 0..5 {
            push_turn(&mut turns, turn(&format!("u{i}"), &format!("a{i}")), caps);
        }
        let users: Vec<&str> = turns.iter().map(|t| t.user.as_str()).collect();
        assert_eq!(users, ["u2", "u3", "u4"]);
    }

    #[test]
    fn drops_the_oldest_turns_past_the_byte_cap() {
        let caps = Caps { turns: 100, bytes: 300 };
        let mut turns = Vec::new();
        for i in 0..10 {
            push_turn(&mut turns, turn(&format!("{i}").repeat(50), &"ответ".repeat(5)), caps);
            assert!(bytes(&turns) <= 300, "after {i}: {}", bytes(&turns));
        }
        assert_eq!(turns.len(), 3, "three 100-byte turns fit");
        assert!(turns.last().unwrap().user.starts_with('9'));
    }

    #[test]
    fn a_single_huge_turn_is_cut_at_character_boundaries() {
        let caps = Caps { turns: 10, bytes: 301 };
        let mut turns = vec![turn("old", "old")];
        push_turn(&mut turns, turn(&"я".repeat(1000), &"ж".repeat(1000)), caps);
        assert_eq!(turns.len(), 1);
        assert!(bytes(&turns) <= 301, "{}", bytes(&turns));
        assert!(turns[0].user.chars().all(|c| c == 'я') && turns[0].assistant.chars().all(|c| c == 'ж'));
        assert!(!turns[0].user.is_empty() && !turns[0].assistant.is_empty());
    }

    #[test]
    fn round_trips_and_ignores_foreign_or_broken_state() {
        let caps = Caps { turns: 2, bytes: 1024 };
        let state = TAssistantState {
            session_id: "session_1.000001".into(),
            turns: vec![turn("a", "b"), turn("c", "d"), turn("e", "f")],
            pending: None,
        };
        let back = decode(Some(&encode(&state)), caps);
        assert_eq!(back.session_id, "session_1.000001");
        assert_eq!(back.turns, [turn("c", "d"), turn("e", "f")], "caps applied on reading");
        assert!(type_url().ends_with("megamind_scenario.v1.TAssistantState"), "{}", type_url());

        let foreign = Any { type_url: "type.googleapis.com/google.protobuf.StringValue".into(), value: vec![] };
        assert_eq!(decode(Some(&foreign), caps), TAssistantState::default());
        let broken = Any { type_url: type_url(), value: vec![0xff, 0xff, 0xff] };
        assert_eq!(decode(Some(&broken), caps), TAssistantState::default());
        assert_eq!(decode(None, caps), TAssistantState::default());
    }
}
