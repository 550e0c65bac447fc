//! What the user brought to a turn: words, typed or spoken, or a callback a
//! client sent back (`Input.Callback`: the `Name` and `Payload` of a
//! `CallbackDirective` of an earlier answer). Read from `TInput`, bounded,
//! and handed to the dialog policy, which decides what it means.

use megamind_core::{
    proto::n_alice::n_scenarios::{TInput, t_input},
    text::clip,
};
use prost_types::Struct;

/// The user's words are cut to this many bytes before they reach the model.
const MAX_UTTERANCE_BYTES: usize = 4096;
/// A callback's name is cut to this many bytes: ours are a word or two.
const MAX_CALLBACK_NAME_BYTES: usize = 256;
/// The semantic frame that starts a skill: its slot `skill` names it, its
/// other slots are the skill's parameters.
pub(crate) const SKILL_FRAME: &str = "run_skill";
/// Slots of a skill frame read at most, and bytes of a slot's name and value.
const MAX_SLOTS: usize = 16;
const MAX_SLOT_BYTES: usize = 256;

/// The input of one turn.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TurnInput {
    /// `Input.Text.Utterance` (else `RawUtterance`) or `Input.Voice.Utterance`:
    /// trimmed, never empty, at most [`MAX_UTTERANCE_BYTES`].
    Words(String),
    /// Text or voice with no words: an empty answer.
    Silence,
    /// A `run_skill` semantic frame (whatever the words were).
    RunSkill {
        /// The slot `skill`, trimmed.
        skill: String,
        /// The other slots, by name, in order; at most [`MAX_SLOTS`].
        parameters: Vec<(String, String)>,
    },
    /// `Input.Callback`.
    Callback {
        /// Its `Name`, trimmed, at most [`MAX_CALLBACK_NAME_BYTES`].
        name: String,
        /// Its `Payload`, as the client sent it back.
        payload: Option<Struct>,
    },
}

impl TurnInput {
    /// What `input` brings; `None` when nothing (no event, blank words).
    pub(crate) fn from_input(input: &TInput) -> Option<TurnInput> {
        if let Some(frame) = input.semantic_frames.iter().find(|frame| frame.name == SKILL_FRAME) {
            let bounded = |text: &str| clip(text.trim(), MAX_SLOT_BYTES).to_owned();
            let slots = frame.slots.iter().take(MAX_SLOTS);
            let skill = slots.clone().find(|slot| slot.name == "skill").map(|slot| bounded(&slot.value));
            if let Some(skill) = skill.filter(|skill| !skill.is_empty()) {
                let parameters = slots
                    .filter(|slot| slot.name != "skill" && !slot.name.trim().is_empty())
                    .map(|slot| (bounded(&slot.name), bounded(&slot.value)))
                    .collect();
                return Some(TurnInput::RunSkill { skill, parameters });
            }
        }
        let words = match &input.event {
            Some(t_input::Event::Callback(callback)) => {
                let name = clip(callback.name.trim(), MAX_CALLBACK_NAME_BYTES).to_owned();
                return Some(TurnInput::Callback { name, payload: callback.payload.clone() });
            }
            Some(t_input::Event::Text(text)) if !text.utterance.trim().is_empty() => &text.utterance,
            Some(t_input::Event::Text(text)) => &text.raw_utterance,
            Some(t_input::Event::Voice(voice)) => &voice.utterance,
            None => return None,
        };
        let words = clip(words.trim(), MAX_UTTERANCE_BYTES);
        Some(if words.is_empty() { TurnInput::Silence } else { TurnInput::Words(words.to_owned()) })
    }
}

/// A question reduced to its words, to tell a repeated question from a new one.
pub(crate) fn normalize(utterance: &str) -> String {
    let lower = utterance.to_lowercase().replace('ё', "е");
    let words: Vec<&str> = lower.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).collect();
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use megamind_core::proto::n_alice::n_scenarios::{TCallbackDirective, TTextInput, TVoiceInput};
    use prost_types::{Value, value::Kind};

    use super::*;

    fn input(event: t_input::Event) -> TInput {
        TInput { event: Some(event), ..Default::default() }
    }

    #[test]
    fn words_come_from_text_then_raw_text_then_voice() {
        let text = |utterance: &str, raw: &str| {
            input(t_input::Event::Text(TTextInput { utterance: utterance.into(), raw_utterance: raw.into() }))
        };
        let words = |w: &str| Some(TurnInput::Words(w.into()));
        assert_eq!(TurnInput::from_input(&text(" привет ", "сырое")), words("привет"));
        assert_eq!(TurnInput::from_input(&text("  ", "сырое")), words("сырое"));
        assert_eq!(TurnInput::from_input(&text("", " ")), Some(TurnInput::Silence), "blank words are silence");
        let voice = input(t_input::Event::Voice(TVoiceInput { utterance: "алло".into(), ..Default::default() }));
        assert_eq!(TurnInput::from_input(&voice), words("алло"));
        assert_eq!(TurnInput::from_input(&TInput::default()), None);
        let long = text(&"я".repeat(3000), "");
        let Some(TurnInput::Words(cut)) = TurnInput::from_input(&long) else { panic!() };
        assert_eq!(cut.len(), MAX_UTTERANCE_BYTES, "cut on a character boundary");
    }

    #[test]
    fn a_callback_keeps_its_name_and_payload() {
        let payload = Struct {
            fields: [("exit_code".to_owned(), Value { kind: Some(Kind::NumberValue(0.0)) })].into_iter().collect(),
        };
        let callback = TCallbackDirective {
            name: " skill_command_result ".into(),
            payload: Some(payload.clone()),
            ..Default::default()
        };
        assert_eq!(
            TurnInput::from_input(&input(t_input::Event::Callback(callback))),
            Some(TurnInput::Callback { name: "skill_command_result".into(), payload: Some(payload) })
        );
        let bare = input(t_input::Event::Callback(TCallbackDirective::default()));
        assert_eq!(
            TurnInput::from_input(&bare),
            Some(TurnInput::Callback { name: String::new(), payload: None }),
            "even an empty callback is the policy's to judge"
        );
    }

    #[test]
    fn a_run_skill_frame_names_the_skill_and_its_parameters() {
        use megamind_core::proto::n_alice::n_scenarios::{TSemanticFrame, TSemanticFrameSlot};
        let slot = |name: &str, value: &str| TSemanticFrameSlot {
            name: name.into(),
            value: value.into(),
            ..Default::default()
        };
        let frame = TSemanticFrame {
            name: SKILL_FRAME.into(),
            slots: vec![slot("branch", "main"), slot("skill", " git-quick-commit "), slot("", "nameless")],
        };
        let mut with_frame = text_input("запусти");
        with_frame.semantic_frames = vec![TSemanticFrame { name: "other".into(), slots: vec![] }, frame];
        assert_eq!(
            TurnInput::from_input(&with_frame),
            Some(TurnInput::RunSkill {
                skill: "git-quick-commit".into(),
                parameters: vec![("branch".into(), "main".into())]
            })
        );
        let mut no_skill = text_input("привет");
        no_skill.semantic_frames = vec![TSemanticFrame { name: SKILL_FRAME.into(), slots: vec![slot("x", "y")] }];
        assert_eq!(TurnInput::from_input(&no_skill), Some(TurnInput::Words("привет".into())), "no skill slot: words");
    }

    #[test]
    fn a_run_skill_frame_of_a_hundred_huge_slots_keeps_the_first_slots_each_cut() {
        use megamind_core::proto::n_alice::n_scenarios::{TSemanticFrame, TSemanticFrameSlot};
        let slot = |name: String, value: String| TSemanticFrameSlot { name, value, ..Default::default() };
        // 10 KiB names and values, with an odd byte first so that a cut at
        // the bound would fall inside a two-byte `я`.
        let huge = |i: usize| format!("{i}{}", "я".repeat(5 * 1024));
        let mut slots = vec![slot("skill".into(), format!("x{}", "я".repeat(5 * 1024)))];
        slots.extend((0..99).map(|i| slot(huge(i), huge(i))));
        let mut input = text_input("запусти");
        input.semantic_frames = vec![TSemanticFrame { name: SKILL_FRAME.into(), slots: slots.clone() }];
        let read = TurnInput::from_input(&input);
        let Some(TurnInput::RunSkill { skill, parameters }) = read else { panic!("a skill frame: {read:?}") };
        let near_bound = |text: &str| (MAX_SLOT_BYTES - 3..=MAX_SLOT_BYTES).contains(&text.len());
        assert!(near_bound(&skill), "the skill slot is cut at the bound too: {} bytes", skill.len());
        // The `skill` slot is one of the MAX_SLOTS read.
        assert_eq!(parameters.len(), MAX_SLOTS - 1, "only the first {MAX_SLOTS} slots are read");
        for (i, (name, value)) in parameters.iter().enumerate() {
            let whole = huge(i);
            assert!(near_bound(name) && whole.starts_with(name.as_str()), "slot {i}: name of {} bytes", name.len());
            assert!(near_bound(value) && whole.starts_with(value.as_str()), "slot {i}: value of {} bytes", value.len());
        }
        // Past the slots read, even the `skill` slot is not looked at.
        slots.rotate_left(1);
        input.semantic_frames = vec![TSemanticFrame { name: SKILL_FRAME.into(), slots }];
        assert_eq!(
            TurnInput::from_input(&input),
            Some(TurnInput::Words("запусти".into())),
            "a `skill` slot past the first {MAX_SLOTS} is not read"
        );
    }

    #[test]
    fn a_callback_name_of_a_hundred_kibibytes_is_cut_at_its_bound() {
        // An odd byte first: the bound falls inside a two-byte `я`.
        let name = format!("x{}", "я".repeat(50 * 1024));
        let callback = TCallbackDirective { name: name.clone(), ..Default::default() };
        let Some(TurnInput::Callback { name: cut, .. }) =
            TurnInput::from_input(&input(t_input::Event::Callback(callback)))
        else {
            panic!("a callback")
        };
        assert!(
            (MAX_CALLBACK_NAME_BYTES - 3..=MAX_CALLBACK_NAME_BYTES).contains(&cut.len()),
            "cut to the bound: {} bytes",
            cut.len()
        );
        assert!(name.starts_with(&cut), "the cut name is a prefix on a character boundary");
    }

    fn text_input(words: &str) -> TInput {
        input(t_input::Event::Text(TTextInput { utterance: words.into(), ..Default::default() }))
    }

    #[test]
    fn normalize_ignores_case_punctuation_and_spacing() {
        assert_eq!(normalize("  Открой, Safari!  "), "открой safari");
        assert_eq!(normalize("Который ЧАС?"), normalize("который час"));
        assert_eq!(normalize("ещё"), "еще");
        assert_ne!(normalize("открой Safari"), normalize("закрой Safari"));
    }
}
