//! What the assistant carries between handlers and turns: the dialog state
//! in the protocol's `State` (an `Any` of `TAssistantState`: the session id,
//! the last turns, capped by count and bytes, and the call a fallback left
//! pending), so the server keeps nothing between turns; and the arguments
//! `/run` hands to `/continue` (`TAssistantContinueArguments`).
//!
//! The state comes back from Megamind as we gave it, but it is still input:
//! a foreign or undecodable `Any` reads as an empty state, and the caps are
//! applied again on reading.
//!
//! The session id is derived from the request, never from personal data:
//! `session_<seconds>.<micros>` of `BaseRequest.ServerTimeMs` (the shape of the
//! app-action format's examples), the sub-millisecond digits taken from a hash of the `RequestId` so
//! that two dialogs started in the same millisecond differ. A request
//! without `ServerTimeMs` gets `session_<16 hex digits>` of the whole hash:
//! a time of 0 would leave a thousand ids for every such dialog. It is made on the
//! first turn of a dialog session (no state, `IsNewSession`, or
//! `IsSessionReset`) and carried in the state afterwards, so it is stable over
//! the session and the same for every retry of a request.

use megamind_core::{
    dispatch::MAX_REQUEST_ID, proto::n_alice::n_scenarios::TScenarioBaseRequest, scenario::ScenarioError, text::clip,
};
use prost::Message;
use prost_types::Any;

use crate::{
    backend::MAX_ANSWER_BYTES,
    proto::megamind_scenario::v1::{TAssistantContinueArguments, TAssistantState, TAssistantTurn},
};

/// The type URL of the state.
pub(crate) fn type_url() -> String {
    Any::from_msg(&TAssistantState::default()).map(|a| a.type_url).unwrap_or_default()
}

/// Limits of the history, and of the words a call is asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Caps {
    /// Turns kept at most.
    pub(crate) turns: usize,
    /// Bytes of user and assistant text kept at most.
    pub(crate) bytes: usize,
    /// Longest `Utterance` a pending call or `ContinueArguments` may carry:
    /// the longest this server hands over (a user's words, a skill's first
    /// message with its parameters, a command's output, a session's next
    /// message).
    pub(crate) utterance: usize,
}

impl Caps {
    /// The caps `config` sets.
    pub(crate) fn of(config: &crate::config::AssistantConfig) -> Caps {
        let skills = &config.skills;
        Caps {
            turns: config.dialog.history_turns,
            bytes: config.dialog.history_max_bytes,
            utterance: (16 << 10).max(skills.max_output_bytes).max(skills.max_session_bytes) + 1024,
        }
    }
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
            if state.session_id.len() > MAX_SESSION_ID {
                tracing::debug!(bytes = state.session_id.len(), "assistant: a session id past the bound ignored");
                state.session_id.clear();
            }
            let pending = state.pending.as_ref();
            if let Some(why) = pending.and_then(|p| out_of_bounds(&p.call_id, &p.utterance, &p.spoken, caps)) {
                tracing::debug!(why, "assistant: a pending call past the bounds ignored");
                state.pending = None;
            }
            state
        }
        Err(error) => {
            tracing::debug!(%error, "assistant: undecodable state ignored");
            TAssistantState::default()
        }
    }
}

/// The state a `/run` starts from: the one it carries, or a new session's
/// when there is none or Megamind begins one; with a session id either way.
pub(crate) fn of_request(base: &TScenarioBaseRequest, request_id: &str, caps: Caps) -> TAssistantState {
    let mut state = if base.is_session_reset || base.is_new_session {
        TAssistantState::default()
    } else {
        decode(base.state.as_ref(), caps)
    };
    if state.session_id.is_empty() {
        state.session_id = new_session_id(base.server_time_ms, request_id);
    }
    state
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

/// A new session id for a request (see the module docs).
pub(crate) fn new_session_id(server_time_ms: u64, request_id: &str) -> String {
    // FNV-1a: stable across builds, unlike std's hasher.
    let hash =
        request_id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    if server_time_ms == 0 {
        return format!("session_{hash:016x}");
    }
    let micros = (server_time_ms % 1000) * 1000 + hash % 1000;
    format!("session_{}.{micros:06}", server_time_ms / 1000)
}

/// Longest call id: a `RequestId`, and what a skill's next step adds to it.
pub(crate) const MAX_CALL_ID: usize = 2 * MAX_REQUEST_ID;

/// Longest session id: the ones made here ([`new_session_id`]) have 24 to
/// 30 bytes. The model is told it, in its prompt, on every call.
const MAX_SESSION_ID: usize = 64;

/// Why a call named by a state's pending call or by `ContinueArguments`
/// is past what this server ever hands over, if it is: a `CallId` longer
/// than [`MAX_CALL_ID`], an `Utterance` longer than `caps` allow, or
/// `Spoken` longer than an answer.
fn out_of_bounds(call_id: &str, utterance: &str, spoken: &str, caps: Caps) -> Option<String> {
    let fields = [
        ("CallId", call_id.len(), MAX_CALL_ID),
        ("Utterance", utterance.len(), caps.utterance),
        ("Spoken", spoken.len(), MAX_ANSWER_BYTES),
    ];
    let (field, length, limit) = fields.into_iter().find(|(_, length, limit)| length > limit)?;
    Some(format!("{field} is {length} bytes long, over the limit of {limit}"))
}

/// The `ContinueArguments` `/run` handed over, checked. They come back as
/// `/run` made them, but are input all the same: arguments past its bounds
/// are refused, and the state's history is capped by `caps` as a request's
/// `State` is.
pub(crate) fn continue_arguments(any: Option<&Any>, caps: Caps) -> Result<TAssistantContinueArguments, ScenarioError> {
    let expected = Any::from_msg(&TAssistantContinueArguments::default()).map(|a| a.type_url).unwrap_or_default();
    let any = any.ok_or_else(|| ScenarioError::BadRequest(format!("expected Arguments of {expected}, got none")))?;
    if any.type_url != expected {
        return Err(ScenarioError::BadRequest(format!("expected Arguments of {expected}, got {}", any.type_url)));
    }
    let mut args = TAssistantContinueArguments::decode(any.value.as_slice())
        .map_err(|e| ScenarioError::BadRequest(format!("undecodable Arguments: {e}")))?;
    if args.call_id.is_empty() || args.utterance.trim().is_empty() {
        return Err(ScenarioError::BadRequest("Arguments lack CallId or Utterance".into()));
    }
    if let Some(why) = out_of_bounds(&args.call_id, &args.utterance, &args.spoken, caps) {
        return Err(ScenarioError::BadRequest(format!("Arguments' {why}")));
    }
    if let Some(state) = &mut args.state {
        let session = state.session_id.len();
        if session > MAX_SESSION_ID {
            let why = format!("Arguments' State.SessionId is {session} bytes long, over the limit of {MAX_SESSION_ID}");
            return Err(ScenarioError::BadRequest(why));
        }
        cap(&mut state.turns, caps);
    }
    Ok(args)
}

/// `bytes` read as a request's `State` and as a `/continue`'s `Arguments`,
/// as the handlers read them: for the fuzz target `assistant_state`, built
/// with the `fuzzing` feature. Panics when what is let through is past its
/// bounds: history over its caps, a pending call or arguments over theirs.
#[cfg(any(test, feature = "fuzzing"))]
pub fn fuzz_read(bytes: &[u8]) {
    let caps = Caps { turns: 4, bytes: 512, utterance: 256 };
    let capped = |turns: &[TAssistantTurn]| {
        let total: usize = turns.iter().map(|t| t.user.len() + t.assistant.len()).sum();
        assert!(turns.len() <= caps.turns && total <= caps.bytes, "{} turns of {total} bytes", turns.len());
    };
    let state = decode(Some(&Any { type_url: type_url(), value: bytes.to_vec() }), caps);
    capped(&state.turns);
    assert!(state.session_id.len() <= MAX_SESSION_ID);
    if let Some(pending) = &state.pending {
        assert_eq!(out_of_bounds(&pending.call_id, &pending.utterance, &pending.spoken, caps), None);
    }
    let type_url = Any::from_msg(&TAssistantContinueArguments::default()).map(|a| a.type_url).unwrap_or_default();
    if let Ok(args) = continue_arguments(Some(&Any { type_url, value: bytes.to_vec() }), caps) {
        assert!(!args.call_id.is_empty() && !args.utterance.trim().is_empty());
        assert_eq!(out_of_bounds(&args.call_id, &args.utterance, &args.spoken, caps), None);
        if let Some(state) = &args.state {
            capped(&state.turns);
            assert!(state.session_id.len() <= MAX_SESSION_ID);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the fuzz target checks holds for a state and for arguments
    /// past every cap: read back within them, or refused.
    #[test]
    fn hostile_state_and_arguments_are_read_within_their_caps() {
        let turn = |n: usize| TAssistantTurn { user: "в".repeat(n), assistant: "о".repeat(n) };
        let state = TAssistantState {
            session_id: "s".repeat(1_000),
            turns: (0..20).map(|n| turn(n * 40)).collect(),
            ..Default::default()
        };
        fuzz_read(&state.encode_to_vec());
        let args = TAssistantContinueArguments {
            call_id: "c".into(),
            utterance: "привет".into(),
            state: Some(TAssistantState { turns: vec![turn(10_000)], ..Default::default() }),
            ..Default::default()
        };
        fuzz_read(&args.encode_to_vec());
        fuzz_read(b"\xff\xff garbage");
    }
    use crate::proto::megamind_scenario::v1::TAssistantPending;

    fn turn(user: &str, assistant: &str) -> TAssistantTurn {
        TAssistantTurn { user: user.into(), assistant: assistant.into() }
    }

    fn bytes(turns: &[TAssistantTurn]) -> usize {
        turns.iter().map(|t| t.user.len() + t.assistant.len()).sum()
    }

    #[test]
    fn keeps_the_last_n_turns() {
        let caps = caps(3, 1 << 20);
        let mut turns = Vec::new();
        for i in 0..5 {
            push_turn(&mut turns, turn(&format!("u{i}"), &format!("a{i}")), caps);
        }
        let users: Vec<&str> = turns.iter().map(|t| t.user.as_str()).collect();
        assert_eq!(users, ["u2", "u3", "u4"]);
    }

    #[test]
    fn drops_the_oldest_turns_past_the_byte_cap() {
        let caps = caps(100, 300);
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
        let caps = caps(10, 301);
        let mut turns = vec![turn("old", "old")];
        push_turn(&mut turns, turn(&"я".repeat(1000), &"ж".repeat(1000)), caps);
        assert_eq!(turns.len(), 1);
        assert!(bytes(&turns) <= 301, "{}", bytes(&turns));
        assert!(turns[0].user.chars().all(|c| c == 'я') && turns[0].assistant.chars().all(|c| c == 'ж'));
        assert!(!turns[0].user.is_empty() && !turns[0].assistant.is_empty());
    }

    #[test]
    fn round_trips_and_ignores_foreign_or_broken_state() {
        let caps = caps(2, 1024);
        let state = TAssistantState {
            session_id: "session_1.000001".into(),
            turns: vec![turn("a", "b"), turn("c", "d"), turn("e", "f")],
            ..Default::default()
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

    /// Caps of `turns` and `bytes` of history, words as long as the defaults allow.
    fn caps(turns: usize, bytes: usize) -> Caps {
        Caps { turns, bytes, utterance: 16 << 10 }
    }

    fn arguments(args: &TAssistantContinueArguments) -> Any {
        Any::from_msg(args).unwrap()
    }

    #[test]
    fn continue_arguments_past_what_run_hands_over_are_refused_and_their_history_capped() {
        let caps = caps(2, 1024);
        let history = (0..30).map(|i| turn(&format!("u{i}"), &format!("a{i}"))).collect();
        let state = TAssistantState { turns: history, ..Default::default() };
        let skill_step = format!("{}#skill-step-12", "r".repeat(MAX_REQUEST_ID));
        let args = TAssistantContinueArguments {
            call_id: skill_step.clone(),
            utterance: "открой Safari".into(),
            state: Some(state),
            ..Default::default()
        };
        let read = continue_arguments(Some(&arguments(&args)), caps).unwrap();
        assert_eq!(read.call_id, skill_step, "a skill's step of a RequestId as long as may be");
        assert_eq!(read.state.unwrap().turns, [turn("u28", "a28"), turn("u29", "a29")], "capped as a State is");

        let long_id = TAssistantContinueArguments { call_id: "r".repeat(MAX_CALL_ID + 1), ..args.clone() };
        let long_spoken = TAssistantContinueArguments { spoken: "я".repeat(MAX_ANSWER_BYTES / 2 + 1), ..args };
        for (args, field) in [(long_id, "CallId"), (long_spoken, "Spoken")] {
            let refused = continue_arguments(Some(&arguments(&args)), caps).unwrap_err();
            assert!(
                matches!(&refused, ScenarioError::BadRequest(why) if why.contains(field) && why.contains("over the limit")),
                "{refused:?}"
            );
        }
    }

    #[test]
    fn a_pending_call_past_the_bounds_reads_as_none_and_the_rest_of_the_state_stays() {
        let caps = caps(2, 1024);
        let pending =
            |call_id: String| TAssistantPending { call_id, utterance: "вопрос".into(), ..Default::default() };
        let state = |call_id| TAssistantState {
            session_id: "s".into(),
            turns: vec![turn("a", "b")],
            pending: Some(pending(call_id)),
            ..Default::default()
        };
        let kept = decode(Some(&encode(&state("req-1".into()))), caps);
        assert_eq!(kept.pending.map(|p| p.call_id).as_deref(), Some("req-1"));
        let dropped = decode(Some(&encode(&state("r".repeat(MAX_CALL_ID + 1)))), caps);
        assert_eq!((dropped.pending, dropped.session_id.as_str(), dropped.turns.len()), (None, "s", 1));
    }

    #[test]
    fn words_longer_than_this_server_hands_over_are_refused_or_their_pending_call_dropped() {
        let config = crate::config::AssistantConfig::default();
        let caps = Caps::of(&config);
        let longest_output = crate::skills::prompt::command_output(&"x".repeat(config.skills.max_output_bytes), 100);
        let longest_next = "я".repeat(config.skills.max_session_bytes / 2);
        for words in [longest_output, longest_next, "слово ".repeat(2000)] {
            let args = TAssistantContinueArguments { call_id: "r".into(), utterance: words, ..Default::default() };
            assert!(continue_arguments(Some(&arguments(&args)), caps).is_ok(), "{} bytes", args.utterance.len());
        }
        let long = "x".repeat(caps.utterance + 1);
        let args = TAssistantContinueArguments { call_id: "r".into(), utterance: long.clone(), ..Default::default() };
        let refused = continue_arguments(Some(&arguments(&args)), caps).unwrap_err();
        assert!(matches!(&refused, ScenarioError::BadRequest(why) if why.contains("Utterance")), "{refused:?}");
        let pending = TAssistantPending { call_id: "r".into(), utterance: long, ..Default::default() };
        let state = TAssistantState { pending: Some(pending), ..Default::default() };
        assert_eq!(decode(Some(&encode(&state)), caps).pending, None);
    }

    #[test]
    fn a_session_id_past_the_bound_is_made_anew_or_refused() {
        let caps = caps(2, 1024);
        let long = TAssistantState { session_id: "s".repeat(MAX_SESSION_ID + 1), ..Default::default() };
        let base = TScenarioBaseRequest { state: Some(encode(&long)), server_time_ms: 1_000, ..Default::default() };
        let made = of_request(&base, "req-1", caps).session_id;
        assert_eq!(made, new_session_id(1_000, "req-1"), "a new one, as for a state without one");
        let fits = TAssistantState { session_id: "s".repeat(MAX_SESSION_ID), ..long.clone() };
        let base = TScenarioBaseRequest { state: Some(encode(&fits)), ..base };
        assert_eq!(of_request(&base, "req-1", caps).session_id, fits.session_id);

        let args = TAssistantContinueArguments {
            call_id: "req-1".into(),
            utterance: "да".into(),
            state: Some(long),
            ..Default::default()
        };
        let refused = continue_arguments(Some(&arguments(&args)), caps).unwrap_err();
        assert!(matches!(&refused, ScenarioError::BadRequest(why) if why.contains("SessionId")), "{refused:?}");
    }

    #[test]
    fn session_ids_have_the_format_s_shape_and_are_deterministic() {
        let id = new_session_id(1_764_210_832_530, "req-1");
        assert!(id.starts_with("session_1764210832.530"), "{id}");
        assert_eq!(id.len(), "session_1764210832.530743".len(), "{id}");
        assert_eq!(id, new_session_id(1_764_210_832_530, "req-1"));
        let other: std::collections::HashSet<String> =
            (0..20).map(|i| new_session_id(1_764_210_832_530, &format!("req-{i}"))).collect();
        assert!(other.len() > 1, "the RequestId changes the id");
    }

    #[test]
    fn without_server_time_the_id_comes_from_the_whole_request_id() {
        let id = new_session_id(0, "ffc5d3b6-4b7c-4ecb-8e6a-0c6f8e4f2a11");
        assert!(!id.starts_with("session_0."), "no time of 0 in the id: {id}");
        assert_eq!(id.len(), "session_".len() + 16, "{id}");
        assert!(id["session_".len()..].bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        assert_eq!(id, new_session_id(0, "ffc5d3b6-4b7c-4ecb-8e6a-0c6f8e4f2a11"), "the same for every retry");
        let ids: std::collections::HashSet<String> = (0..2000).map(|i| new_session_id(0, &format!("r-{i}"))).collect();
        assert_eq!(ids.len(), 2000, "every request id its own session");
    }
}
