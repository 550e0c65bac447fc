//! The dialog policy: what a turn asks of the model and what the model's
//! answer means. The timing shell ([`crate::Assistant`]) starts model calls,
//! waits for them, hands over and falls back; a policy builds a call's
//! messages and turns its finished answer into the response and the new
//! state, and knows nothing of the clock. A policy keeps nothing between
//! turns (the dialog lives in the state): the same state and input give the
//! same messages, so a call started again on another instance is the same
//! call.
//!
//! [`ChatPolicy`] is the chat with app actions: the system prompt and the
//! history ([`super::prompt`]), the app-action answer ([`super::answer`])
//! spoken with its directive ([`super::reply`]), the turns kept in the state
//! ([`super::state`]). The answer is what [`crate::jsonseq::read`] leaves of
//! the model's text: a thinking model's thought is never said.

use std::{fmt, sync::Arc};

use megamind_core::{files::read_bounded, proto::n_alice::n_scenarios::TScenarioResponseBody};
use prometheus::IntCounterVec;
use serde_json::json;

use crate::{
    backend::{ChatMessage, Completion, Sampling},
    config::AssistantConfig,
    dialog::{
        answer, prompt, reply,
        reply::NO_WORDS,
        speech,
        state::{self, Caps},
        turn::TurnInput,
    },
    error::AssistantError,
    jsonseq,
    metrics::AssistantMetrics,
    proto::megamind_scenario::v1::{TAssistantContinueArguments, TAssistantState, TAssistantTurn},
};

/// What a policy makes of a turn's input.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TurnPlan {
    /// Ask the model. `utterance` is what the call answers: carried to
    /// `/continue` and matched against the user's repeat of the question.
    CallModel {
        /// The words of the call.
        utterance: String,
    },
    /// Do not answer: `/run` declines (`IsIrrelevant`), speaking `reason`.
    Decline {
        /// Why, spoken.
        reason: String,
    },
    /// Answer at once, without the model (a skill's own turns: a list, a
    /// confirmation, a cancel).
    Answer {
        /// The answer, its `State` the dialog's new state.
        body: Box<TScenarioResponseBody>,
        /// The `kind` label of the answers metric.
        kind: &'static str,
    },
}

/// What a finished model answer means.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Interpretation {
    /// The answer; its `State` is the dialog's new state.
    Answer(Box<TScenarioResponseBody>),
    /// The answer, and the next model call, which the shell starts at once:
    /// the answer's state waits for it and its callback fetches it (a
    /// skill that goes on by itself).
    AnswerThen(Box<TScenarioResponseBody>, Box<TAssistantContinueArguments>),
    /// Nothing usable to say: the shell apologizes, the state unchanged.
    Unusable,
    /// Nothing usable to say, which the dialog counts: the shell
    /// apologizes, with this state.
    UnusableIn(Box<TAssistantState>),
}

/// A dialog policy: the half of the scenario that is about words.
pub(crate) trait DialogPolicy: fmt::Debug + Send + Sync + 'static {
    /// What `input`, of the request `request_id`, asks for in `state`; a
    /// model call runs in `state` as the plan leaves it.
    fn plan(&self, request_id: &str, input: &TurnInput, state: &mut TAssistantState) -> TurnPlan;

    /// The messages of the model call answering `utterance` in `state`.
    fn messages(&self, state: &TAssistantState, utterance: &str) -> Vec<ChatMessage>;

    /// The sampling of a call in `state`, when not the configured one.
    fn sampling(&self, _state: &TAssistantState) -> Option<Sampling> {
        None
    }

    /// What of `partial`, the text a running call has streamed so far in
    /// `state`, may be spoken before the call ends: its first complete
    /// sentences of prose, as the voice says them (the start of what
    /// [`DialogPolicy::interpret`] would say of the whole); empty when
    /// nothing may.
    fn ready_speech(&self, partial: &str, state: &TAssistantState) -> String;

    /// What `completion`, the answer of the call `call_id` about
    /// `utterance`, means in `state` (the state before this turn), `spoken`
    /// being what [`DialogPolicy::ready_speech`] gave of it and was spoken
    /// already.
    fn interpret(
        &self,
        call_id: &str,
        utterance: &str,
        completion: &Completion,
        state: &TAssistantState,
        spoken: &str,
    ) -> Interpretation;
}

/// The chat with app actions.
#[derive(Debug)]
pub(crate) struct ChatPolicy {
    system_prompt: Arc<str>,
    caps: Caps,
    max_speech_chars: usize,
    commands: IntCounterVec,
    /// How the model's text is read: the `/llm` stream's format.
    format: jsonseq::Format,
}

/// The longest system prompt a file may hold: it goes into every model call.
const MAX_PROMPT_BYTES: u64 = 64 * 1024;

impl ChatPolicy {
    /// The policy of `config`: its system prompt file (or the built-in
    /// prompt) and history caps; commands counted in `metrics`.
    pub(crate) fn from_config(
        config: &AssistantConfig,
        metrics: &AssistantMetrics,
    ) -> Result<ChatPolicy, AssistantError> {
        let system_prompt: Arc<str> = match &config.dialog.system_prompt_file {
            None => prompt::DEFAULT_SYSTEM_PROMPT.into(),
            Some(path) => {
                let text = read_bounded(path, MAX_PROMPT_BYTES)
                    .map_err(|why| AssistantError::Setup(format!("system_prompt_file {}: {why}", path.display())))?;
                if text.trim().is_empty() {
                    return Err(AssistantError::Setup(format!("system_prompt_file {} is empty", path.display())));
                }
                text.trim().into()
            }
        };
        let caps = Caps::of(config);
        Ok(ChatPolicy {
            system_prompt,
            caps,
            max_speech_chars: config.dialog.max_speech_chars,
            commands: metrics.commands.clone(),
            format: config.llm.stream_format,
        })
    }

    /// `text` as the voice says it, by the rules of every spoken answer:
    /// Markdown marks dropped, capped at `max_speech_chars` at a sentence end.
    pub(crate) fn voice(&self, text: &str, state: &TAssistantState) -> String {
        speech::for_voice(text, &state.session_id, self.max_speech_chars)
    }

    /// The model's `text` read as the `/llm` stream reads it: its words
    /// apart from its thought; `finished` when it is whole.
    pub(crate) fn read(&self, text: &str, finished: bool) -> jsonseq::Reading {
        jsonseq::read(self.format, text, finished)
    }
}

impl DialogPolicy for ChatPolicy {
    fn plan(&self, _request_id: &str, input: &TurnInput, _state: &mut TAssistantState) -> TurnPlan {
        match input {
            TurnInput::Words(words) => TurnPlan::CallModel { utterance: words.clone() },
            // A chat gives no callbacks, so none comes back for it; a skill
            // frame is a skill policy's.
            TurnInput::Callback { .. } | TurnInput::Silence | TurnInput::RunSkill { .. } => {
                TurnPlan::Decline { reason: NO_WORDS.into() }
            }
        }
    }

    fn messages(&self, state: &TAssistantState, utterance: &str) -> Vec<ChatMessage> {
        prompt::messages(&self.system_prompt, &state.session_id, &state.turns, utterance)
    }

    fn ready_speech(&self, partial: &str, state: &TAssistantState) -> String {
        // Only the words after a thought are said: never the thought itself.
        let words = self.read(partial, false).answer;
        if !speech::is_prose(&words) {
            return String::new();
        }
        let sentences = speech::complete_sentences(&words, false);
        speech::for_voice(sentences, &state.session_id, self.max_speech_chars)
    }

    fn interpret(
        &self,
        _call_id: &str,
        utterance: &str,
        completion: &Completion,
        state: &TAssistantState,
        spoken: &str,
    ) -> Interpretation {
        let words = self.read(&completion.text, true).answer;
        let mut answer = answer::parse(&words).for_session(&state.session_id);
        if completion.finish_reason.as_deref() == Some("length") {
            answer = answer.truncated();
        }
        answer.text = speech::scrub(&answer.text, &state.session_id);
        match (&answer.command, answer.dropped) {
            (Some(command), _) => self.commands.with_label_values(&[command.name(), "accepted"]).inc(),
            (None, Some(reason)) => self.commands.with_label_values(&["any", reason.as_str()]).inc(),
            (None, None) => {}
        }
        if answer.text.is_empty() && answer.command.is_none() {
            return Interpretation::Unusable;
        }
        let mut state = state.clone();
        let turn = TAssistantTurn { user: utterance.to_owned(), assistant: remembered(&answer) };
        state::push_turn(&mut state.turns, turn, self.caps);
        let voice = speech::for_voice(&answer.text, &state.session_id, self.max_speech_chars);
        // What streamed and was spoken is said once: the rest follows.
        let speech = speech::unspoken(&voice, spoken);
        Interpretation::Answer(Box::new(reply::answer(&answer, speech, &state)))
    }
}

/// Longest answer kept in the history, in bytes: what the model is shown of
/// its earlier turns, re-sent with every call.
const REMEMBERED_BYTES: usize = 600;

/// What the history keeps of an answer: what was said (the card's text,
/// capped at a sentence end), or for a command the answer object in its
/// canonical form, so that the model sees its format again but not its
/// rambling.
fn remembered(answer: &answer::ModelAnswer) -> String {
    let Some(command) = &answer.command else {
        let text = megamind_core::text::clip(&answer.text, REMEMBERED_BYTES);
        let sentences = speech::complete_sentences(text, text.len() == answer.text.len());
        return if sentences.is_empty() { text.to_owned() } else { sentences.to_owned() };
    };
    let args = match command {
        answer::Command::OpenApp { app_name, app_path, .. } if app_name.is_empty() => json!({"app_path": app_path}),
        answer::Command::OpenApp { app_name, .. } | answer::Command::CloseApp { app_name, .. } => {
            json!({"app_name": app_name})
        }
    };
    let text = megamind_core::text::clip(&answer.text, REMEMBERED_BYTES);
    json!({"session_id": command.session_id(), "command": command.name(), "args": args, "text": text}).to_string()
}

#[cfg(test)]
mod tests {
    use megamind_core::proto::n_alice::n_scenarios::t_directive;
    use prost_types::Struct;

    use super::*;

    fn policy() -> ChatPolicy {
        let metrics = AssistantMetrics::new(&prometheus::Registry::new()).unwrap();
        ChatPolicy::from_config(&AssistantConfig::default(), &metrics).unwrap()
    }

    fn completion(text: &str) -> Completion {
        Completion { text: text.into(), attempts: 1, ..Completion::default() }
    }

    /// The system prompt goes into every model call: a file past its
    /// bound is refused at start, saying which and why, and one at the
    /// bound is read whole.
    #[test]
    fn a_system_prompt_file_past_its_bound_is_refused_at_start() {
        let file = std::env::temp_dir().join(format!("megamind-prompt-{}.txt", std::process::id()));
        let mut config = AssistantConfig::default();
        config.dialog.system_prompt_file = Some(file.clone());
        let metrics = AssistantMetrics::new(&prometheus::Registry::new()).unwrap();
        std::fs::write(&file, "x".repeat(MAX_PROMPT_BYTES as usize + 1)).unwrap();
        let refused = ChatPolicy::from_config(&config, &metrics).map(|_| ());
        std::fs::write(&file, "x".repeat(MAX_PROMPT_BYTES as usize)).unwrap();
        let read = ChatPolicy::from_config(&config, &metrics).map(|policy| policy.system_prompt.len());
        let _ = std::fs::remove_file(&file);
        let expected = format!("system_prompt_file {}: larger than {MAX_PROMPT_BYTES} bytes", file.display());
        assert!(matches!(refused, Err(AssistantError::Setup(ref message)) if *message == expected), "{refused:?}");
        assert_eq!(read.ok(), Some(MAX_PROMPT_BYTES as usize));
    }

    #[test]
    fn a_streamed_object_after_prose_is_never_spoken_and_its_prose_never_twice() {
        let policy = policy();
        let state = TAssistantState { session_id: "s".into(), ..Default::default() };
        let partial = "Открываю Safari.\n{\n  \"command\": \"open_app\",\n  \"args\": {\"app_name\": \"Safari\"},\n  \"text\": \"Открываю Safari.\"\n";
        let ready = policy.ready_speech(partial, &state);
        assert_eq!(ready, "Открываю Safari.");
        let whole = format!("{partial}}}");
        let Interpretation::Answer(body) = policy.interpret("c", "открой Safari", &completion(&whole), &state, &ready)
        else {
            panic!("an answer")
        };
        assert_eq!(body.layout.as_ref().unwrap().output_speech, "", "said already");
        // A line dropped from the final answer between what was said and the rest.
        let said = "Привет!\nОткрываю Safari.";
        let text = "Привет!\nОткрываю Safari. Сессия s.\nЧем ещё помочь?";
        let Interpretation::Answer(body) = policy.interpret("c", "привет", &completion(text), &state, said)
        else {
            panic!("an answer")
        };
        assert_eq!(body.layout.as_ref().unwrap().output_speech, "Чем ещё помочь?");
    }

    #[test]
    fn words_call_the_model_and_callbacks_are_declined() {
        let mut state = TAssistantState::default();
        let words = TurnInput::Words("привет".into());
        assert_eq!(policy().plan("r", &words, &mut state), TurnPlan::CallModel { utterance: "привет".into() });
        for callback in [
            TurnInput::Callback { name: "skill_command_result".into(), payload: Some(Struct::default()) },
            TurnInput::Callback { name: String::new(), payload: None },
            TurnInput::Silence,
        ] {
            assert_eq!(policy().plan("r", &callback, &mut state), TurnPlan::Decline { reason: NO_WORDS.into() });
        }
    }

    #[test]
    fn the_answer_is_spoken_with_its_directive_and_remembered() {
        let raw = r#"{"session_id":"s","command":"open_app","args":{"app_name":"Safari"},"text":"Открываю Safari."}"#;
        let state = TAssistantState { session_id: "s".into(), ..Default::default() };
        let Interpretation::Answer(body) = policy().interpret("c", "открой Safari", &completion(raw), &state, "")
        else {
            panic!("an answer")
        };
        let layout = body.layout.as_ref().unwrap();
        assert_eq!(layout.output_speech, "Открываю Safari.");
        assert!(matches!(layout.directives[0].directive, Some(t_directive::Directive::OpenAppDirective(_))));
        let new_state = state::decode(body.state.as_ref(), Caps { turns: 10, bytes: 1 << 20, utterance: 16 << 10 });
        assert_eq!(new_state.session_id, "s");
        assert_eq!(new_state.turns, [TAssistantTurn { user: "открой Safari".into(), assistant: raw.into() }]);
        assert_eq!(policy().interpret("c", "?", &completion("{\"text\": \""), &state, ""), Interpretation::Unusable);
    }

    #[test]
    fn the_messages_carry_the_session_and_the_history() {
        let state = TAssistantState {
            session_id: "session_1.000002".into(),
            turns: vec![TAssistantTurn { user: "раз".into(), assistant: "Ок.".into() }],
            ..Default::default()
        };
        let messages = policy().messages(&state, "два");
        let contents: Vec<&str> = messages.iter().skip(1).map(|m| m.content.as_str()).collect();
        assert_eq!(contents, ["раз", "Ок.", "два"]);
        let static_part =
            &prompt::DEFAULT_SYSTEM_PROMPT[..prompt::DEFAULT_SYSTEM_PROMPT.find(prompt::SESSION_ID).unwrap()];
        assert!(messages[0].content.starts_with(static_part));
        assert!(messages[0].content.contains(r#""session_id": "session_1.000002""#));
    }
}
