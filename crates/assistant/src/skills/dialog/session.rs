//! A skill session's bookkeeping over `TSkillSession` (docs/skills.md#the-state-machine):
//! starting one, recording an exchange with the step it took, and the byte
//! cap that keeps the state small. Pure: no catalog, no clock, no I/O.

use crate::{
    proto::megamind_scenario::v1::{ESkillWait, TAssistantTurn, TSkillSession},
    skills::rules,
};

/// A new session of `skill`, started by the request `started_by`, about to
/// send its first message.
pub(crate) fn start(skill: &str, started_by: &str) -> TSkillSession {
    TSkillSession { skill: skill.to_owned(), session_id: started_by.to_owned(), ..Default::default() }
}

/// The number of the next user message: `[Step N of 100]`.
pub(crate) fn next_step(session: &TSkillSession) -> u32 {
    session.step.saturating_add(1)
}

/// Records that the model answered `user` (the message of step
/// [`next_step`]) with `assistant` (the step as the history keeps it), then
/// applies the byte cap.
pub(crate) fn record(session: &mut TSkillSession, user: String, assistant: String, max_bytes: usize) {
    session.step = next_step(session);
    session.exchanges.push(TAssistantTurn { user, assistant });
    cap(session, max_bytes);
    session.wait = ESkillWait::SkillWaitIdle as i32;
    session.command.clear();
    session.next.clear();
    session.optional = false;
}

/// What the session waits for; an unknown number (a hostile state) reads as idle.
pub(crate) fn wait(session: &TSkillSession) -> ESkillWait {
    ESkillWait::try_from(session.wait).unwrap_or(ESkillWait::SkillWaitIdle)
}

/// Sets what the session waits for.
pub(crate) fn set_wait(session: &mut TSkillSession, wait: ESkillWait) {
    session.wait = wait as i32;
}

/// Longest skill name and starting request id kept: names are at most 64
/// characters, request ids short.
const MAX_NAME_BYTES: usize = 256;

/// A session read from a request's state, bounded: it comes back from
/// Megamind, but it is still input. Exchanges within `max_bytes` (as
/// [`cap`]), the waiting command and the next message cut.
pub(crate) fn bound(session: &mut TSkillSession, max_bytes: usize) {
    let clip = |text: &mut String, bytes: usize| {
        let keep = megamind_core::text::clip(text, bytes).len();
        text.truncate(keep);
    };
    cap(session, max_bytes);
    clip(&mut session.skill, MAX_NAME_BYTES);
    clip(&mut session.session_id, MAX_NAME_BYTES);
    clip(&mut session.command, rules::MAX_COMMAND_BYTES);
    clip(&mut session.next, max_bytes);
}

/// Whether [`bound`] would leave the session as it is (within `max_bytes`
/// of text and [`MAX_EXCHANGES`]): a state read back unplanned (a
/// callback's) is bounded only when it is not.
pub(crate) fn is_bounded(session: &TSkillSession, max_bytes: usize) -> bool {
    session.exchanges.len() <= MAX_EXCHANGES && bytes(session) <= max_bytes
}

/// Bytes of the session's text: what [`bound`] bounds.
pub(crate) fn bytes(session: &TSkillSession) -> usize {
    let exchanges: usize = session.exchanges.iter().map(size).sum();
    exchanges + session.skill.len() + session.session_id.len() + session.command.len() + session.next.len()
}

fn size(turn: &TAssistantTurn) -> usize {
    turn.user.len() + turn.assistant.len()
}

/// Exchanges kept at most: the first and one per step after it. Empty ones
/// cost no bytes, yet each is two messages to the model.
const MAX_EXCHANGES: usize = 1 + crate::skills::MAX_STEPS as usize;

/// Keeps the exchanges within `max_bytes` and [`MAX_EXCHANGES`]: the first
/// (the skill's request and parameters) stays, the oldest after it go; a
/// newest exchange still too large alone is cut at character boundaries.
pub(crate) fn cap(session: &mut TSkillSession, max_bytes: usize) {
    let mut total: usize = session.exchanges.iter().map(size).sum();
    let len = session.exchanges.len();
    let mut drop = 0;
    // Index 0 is kept, and so is the newest.
    while (total > max_bytes || len - drop > MAX_EXCHANGES) && 1 + drop + 1 < len {
        total -= size(&session.exchanges[1 + drop]);
        drop += 1;
    }
    if drop > 0 {
        session.exchanges.drain(1..1 + drop);
        session.dropped = session.dropped.saturating_add(u32::try_from(drop).unwrap_or(u32::MAX));
    }
    if total <= max_bytes {
        return;
    }
    // Still over: the exchanges left (the first and the newest) get half each.
    let share = max_bytes / session.exchanges.len().max(1);
    for turn in &mut session.exchanges {
        let user = megamind_core::text::clip(&turn.user, share / 2).len();
        turn.user.truncate(user);
        let assistant = megamind_core::text::clip(&turn.assistant, share - user).len();
        turn.assistant.truncate(assistant);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(session: &TSkillSession) -> usize {
        session.exchanges.iter().map(size).sum()
    }

    #[test]
    fn exchanges_beyond_one_per_step_go_however_small() {
        let mut session = start("deploy", "req-1");
        session.exchanges = vec![TAssistantTurn { user: "first".into(), ..Default::default() }];
        session.exchanges.extend((0..5_000).map(|_| TAssistantTurn::default()));
        session.exchanges.push(TAssistantTurn { user: "newest".into(), ..Default::default() });
        bound(&mut session, 1 << 20);
        assert_eq!(session.exchanges.len(), MAX_EXCHANGES);
        assert_eq!(
            (session.exchanges[0].user.as_str(), session.exchanges[MAX_EXCHANGES - 1].user.as_str()),
            ("first", "newest")
        );
        assert_eq!(session.dropped as usize, 5_002 - MAX_EXCHANGES, "counted as dropped");
    }

    #[test]
    fn steps_count_the_messages_answered() {
        let mut session = start("git-quick-commit", "req-1");
        assert_eq!((session.step, next_step(&session)), (0, 1));
        record(&mut session, "Execute skill: x\n\n[Step 1 of 100]".into(), "[CMD] ls".into(), 1 << 20);
        assert_eq!((session.step, next_step(&session)), (1, 2));
        assert_eq!(session.exchanges.len(), 1);
        assert_eq!(wait(&session), ESkillWait::SkillWaitIdle);
        session.wait = 77;
        assert_eq!(wait(&session), ESkillWait::SkillWaitIdle, "a hostile number reads as idle");
    }

    #[test]
    fn the_cap_keeps_the_first_exchange_and_drops_the_oldest_after_it() {
        let mut session = start("s", "r");
        for i in 0..20 {
            record(&mut session, format!("user {i} {}", "x".repeat(100)), format!("answer {i}"), 1024);
            assert!(bytes(&session) <= 1024, "after {i}: {}", bytes(&session));
        }
        assert!(session.exchanges[0].user.starts_with("user 0 "), "the first stays");
        assert!(session.exchanges.last().unwrap().user.starts_with("user 19 "), "the newest stays");
        let kept: Vec<usize> =
            session.exchanges.iter().map(|t| t.user.split(' ').nth(1).unwrap().parse().unwrap()).collect();
        assert!(kept.windows(2).all(|w| w[0] < w[1]), "in order: {kept:?}");
        assert_eq!(session.dropped as usize + session.exchanges.len(), 20);
        assert_eq!(session.step, 20, "steps count every message, dropped or not");
    }

    #[test]
    fn a_hostile_session_is_bounded() {
        let mut session = TSkillSession {
            skill: "s".repeat(10_000),
            session_id: "r".repeat(10_000),
            command: "c".repeat(100_000),
            next: "n".repeat(100_000),
            exchanges: (0..1000).map(|i| TAssistantTurn { user: format!("{i}"), assistant: "x".repeat(500) }).collect(),
            ..Default::default()
        };
        bound(&mut session, 4096);
        assert!(bytes(&session) <= 4096 * 2 + 2 * MAX_NAME_BYTES + rules::MAX_COMMAND_BYTES);
        assert_eq!(session.exchanges[0].user, "0", "the first exchange stays");
    }

    #[test]
    fn a_huge_exchange_is_cut_at_character_boundaries() {
        let mut session = start("s", "r");
        record(&mut session, "первый".into(), "[CMD] ls".into(), 1024);
        record(&mut session, "я".repeat(5000), "ж".repeat(5000), 1024);
        assert!(bytes(&session) <= 1024, "{}", bytes(&session));
        assert_eq!(session.exchanges.len(), 2);
        assert!(session.exchanges[1].user.chars().all(|c| c == 'я') && !session.exchanges[1].user.is_empty());
        assert!(session.exchanges[1].assistant.chars().all(|c| c == 'ж'));
    }
}
