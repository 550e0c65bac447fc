//! The skills dialog policy (docs/skills.md): multi-step `SKILL.md` skills run by
//! the model one step per turn, beside the chat, which answers everything
//! else ([`ChatPolicy`]).
//!
//! A skill starts from `запусти навык <name>` / `run skill <name>`, one of
//! its triggers, or a `run_skill` semantic frame. Each step is one model
//! call under the shell's timing rules; the model's step markers map onto
//! Megamind's turns:
//! - `[CMD]` → a `RunCommandDirective` whose `Callback`
//!   (`skill_command_result`) the client sends back with the command's
//!   `output`, `exit_code` and `skipped`; the command policy is applied
//!   first (a denied command is reported to the model as its output; one
//!   that may do more than read waits for the user's "да", unless the
//!   skill's `allowed-tools` lets it run: [`confirm`] words the question);
//! - `[ASK]` / `[ASK:optional]` → the question, the microphone open; the
//!   next words are the answer (a skip phrase or silence for an optional one);
//! - `[MESSAGE]` → spoken, and the next step's call starts at once, fetched
//!   by the answer's callback (docs/callbacks.md);
//! - `[DONE]` → spoken; the session ends. Cancel phrases end it any time.
//!
//! The session lives in the state (`TSkillSession`, [`session`]); the
//! system prompt is rebuilt from the catalog ([`live`]) every call.
//! Inputs that do not fit the session (a result while waiting for the user,
//! a stale step, another session's callback) are answered and never move it.

mod confirm;
mod live;
mod phrases;
mod session;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use megamind_core::{
    files::read_bounded,
    proto::n_alice::n_scenarios::{
        TCallbackDirective, TDirective, TRunCommandDirective, TScenarioResponseBody, t_directive,
    },
    text::clip,
};
use prost_types::{Struct, Value, value::Kind};

use crate::{
    backend::{ChatMessage, Completion, Role, Sampling},
    config::AssistantConfig,
    dialog::{
        callback,
        policy::{ChatPolicy, DialogPolicy, Interpretation, TurnPlan},
        reply,
        reply::NO_WORDS,
        turn::TurnInput,
    },
    error::AssistantError,
    metrics::AssistantMetrics,
    proto::megamind_scenario::v1::{ESkillWait, TAssistantContinueArguments, TAssistantState, TSkillSession},
    skills::{
        MAX_STEPS,
        catalog::{Catalog, Skill},
        dialog::{live::LiveCatalog, session::next_step},
        markers::{self, Step},
        output, prompt,
        rules::{CommandRules, Verdict},
    },
};

/// The `Name` of the callback inside a `RunCommandDirective`.
pub(crate) const COMMAND_RESULT: &str = "skill_command_result";
/// Spoken when declining a command result no session waits for.
pub(crate) const STALE_RESULT: &str = "Этот результат команды уже не ждут.";
/// Said again on silence, to a question whose words the history no longer holds.
const STILL_ASKING: &str = "Жду вашего ответа.";
/// The longest system context: it goes into every step's prompt.
const MAX_CONTEXT_BYTES: usize = 64 * 1024;
/// Names offered for an unknown skill.
const CLOSEST: usize = 3;
/// Commands refused in a row before the skill stops: each refusal goes back
/// to the model by itself, so a model that keeps proposing refused commands
/// would otherwise run on to the step cap without the user.
const MAX_REFUSALS: u32 = 3;

/// Chat, and skills when asked for.
#[derive(Debug)]
pub(crate) struct SkillPolicy {
    chat: ChatPolicy,
    catalog: Arc<LiveCatalog>,
    rules: CommandRules,
    context: Option<String>,
    offline: bool,
    max_session_bytes: usize,
    max_output_bytes: usize,
    sampling: Sampling,
    metrics: AssistantMetrics,
}

impl SkillPolicy {
    /// The policy of `config`: the chat's, the skills folder loaded (and
    /// watched, when `watch`), the command policy and the system context.
    pub(crate) fn from_config(
        config: &AssistantConfig,
        metrics: &AssistantMetrics,
        offline: bool,
    ) -> Result<SkillPolicy, AssistantError> {
        let chat = ChatPolicy::from_config(config, metrics)?;
        let skills = &config.skills;
        let rules =
            CommandRules::new(&skills.policy).map_err(|e| AssistantError::Setup(format!("skills.policy: {e}")))?;
        let context = match &skills.system_context_file {
            None => None,
            Some(path) => {
                let text = read_bounded(path, MAX_CONTEXT_BYTES as u64).map_err(|why| {
                    AssistantError::Setup(format!(
                        "skills.system_context_file {}: {why} (it goes into every step's prompt)",
                        path.display()
                    ))
                })?;
                Some(text)
            }
        };
        let catalog = LiveCatalog::load(skills.folder(), metrics);
        if skills.watch {
            catalog.watch();
        }
        catalog.reload_on_sighup();
        Ok(SkillPolicy {
            chat,
            catalog,
            rules,
            context,
            offline,
            max_session_bytes: skills.max_session_bytes,
            max_output_bytes: skills.max_output_bytes,
            sampling: Sampling {
                temperature: skills.temperature,
                max_tokens: skills.max_tokens,
                extra_body: Arc::new(skills.extra_body.clone()),
            },
            metrics: metrics.clone(),
        })
    }

    /// The catalog now.
    pub(crate) fn catalog(&self) -> Arc<Catalog> {
        self.catalog.get()
    }

    /// Starts `name` with `parameters`: the first step's call, or why not.
    fn start(
        &self,
        request_id: &str,
        name: &str,
        parameters: &[(String, String)],
        state: &mut TAssistantState,
    ) -> TurnPlan {
        let catalog = self.catalog();
        let Some(skill) = catalog.get(name) else {
            return self.say(unknown_skill(&catalog, name), false, state, "skill_unknown");
        };
        if self.offline {
            let text = format!(
                "Навыки выполняет языковая модель, а она не подключена: запустите сервер с --llm-base-url. {}",
                listing(&catalog)
            );
            return self.say(text, false, state, "skill_offline");
        }
        let utterance = prompt::initial_message(&skill.name, None, parameters);
        state.pending = None;
        call(state.skill.insert(crate::skills::dialog::session::start(&skill.name, request_id)), utterance)
    }

    /// The words of the user in a running session.
    fn words_in_session(&self, words: &str, state: &mut TAssistantState) -> TurnPlan {
        let Some(session) = state.skill.as_mut() else { return self.say(NO_WORDS.into(), false, state, "irrelevant") };
        let step = next_step(session);
        match crate::skills::dialog::session::wait(session) {
            ESkillWait::SkillWaitUser => {
                let answer =
                    if session.optional && crate::skills::dialog::phrases::is_skip(words) { "" } else { words };
                call(session, prompt::user_response(answer, step))
            }
            ESkillWait::SkillWaitConfirm => match crate::skills::dialog::phrases::confirmation(words) {
                Some(true) => {
                    let command = std::mem::take(&mut session.command);
                    // Checked again: the command came back in the state.
                    let catalog = self.catalog();
                    let tools = catalog.get(&session.skill).and_then(|skill| skill.allowed_tools.as_deref());
                    if let Verdict::Deny(reason) = self.rules.check(&command, tools) {
                        self.metrics.skill_commands.with_label_values(&["deny"]).inc();
                        return call(session, prompt::command_refused(&reason, step));
                    }
                    self.metrics.skill_commands.with_label_values(&["confirmed"]).inc();
                    self.run_command(command, state, "skill_confirmed")
                }
                Some(false) => call(session, prompt::command_skipped(step)),
                None => {
                    let question = self.question(&session.skill, &session.command);
                    let body = reply::said(
                        &question.card,
                        &question.speech,
                        Vec::new(),
                        true,
                        state,
                        "assistant.skill_confirm",
                    );
                    TurnPlan::Answer { body: Box::new(body), kind: "skill_confirm" }
                }
            },
            ESkillWait::SkillWaitCommand => {
                let text = crate::skills::dialog::confirm::waiting(&session.command);
                self.say(text, false, state, "skill_waiting")
            }
            // The model is on the step (a held call), or its call failed:
            // any words ask for the step again, joining the held call.
            ESkillWait::SkillWaitIdle if !session.next.is_empty() => {
                let utterance = session.next.clone();
                call(session, utterance)
            }
            ESkillWait::SkillWaitIdle => {
                let text = format!("Навык «{}» ещё думает. Скажите «отмена», чтобы его остановить.", session.skill);
                self.say(text, false, state, "skill_waiting")
            }
        }
    }

    /// Silence in a running session: the skip of an optional question; a
    /// question the user must answer is asked again, as a confirmation is,
    /// rather than answered with nothing for the model to make up.
    fn silence_in_session(&self, state: &mut TAssistantState) -> TurnPlan {
        let Some(session) = state.skill.as_ref() else { return self.words_in_session("", state) };
        if crate::skills::dialog::session::wait(session) != ESkillWait::SkillWaitUser || session.optional {
            return self.words_in_session("", state);
        }
        let asked = session.exchanges.last().and_then(|exchange| exchange.assistant.strip_prefix("[ASK] "));
        let question = asked.unwrap_or(STILL_ASKING).to_owned();
        let body = self.model_said(&question, true, state, "assistant.skill_ask");
        TurnPlan::Answer { body: Box::new(body), kind: "skill_waiting" }
    }

    /// A command's result sent back by the client.
    fn command_result(&self, payload: Option<&Struct>, state: &mut TAssistantState) -> TurnPlan {
        let result = CommandResult::read(payload);
        let Some(session) = state.skill.as_mut().filter(|session| result.is_for(session)) else {
            return TurnPlan::Decline { reason: STALE_RESULT.into() };
        };
        let step = next_step(session);
        let utterance = if result.skipped {
            prompt::command_skipped(step)
        } else {
            prompt::command_output(&output::clean(&result.output, self.max_output_bytes), step)
        };
        call(session, utterance)
    }

    /// The `RunCommandDirective` of `command`, the session waiting for its result.
    fn run_command(&self, command: String, state: &mut TAssistantState, kind: &'static str) -> TurnPlan {
        let body = self.command_body(command, state, kind);
        TurnPlan::Answer { body: Box::new(body), kind }
    }

    fn command_body(&self, command: String, state: &mut TAssistantState, intent: &str) -> TScenarioResponseBody {
        let Some(session) = state.skill.as_mut() else {
            return reply::spoken(NO_WORDS, false, state, "assistant.skill");
        };
        let directive = command_directive(&command, session);
        let speech = crate::skills::dialog::confirm::running(&command);
        session.command = command.clone();
        crate::skills::dialog::session::set_wait(session, ESkillWait::SkillWaitCommand);
        reply::said(&command, &speech, vec![directive], false, state, &format!("assistant.{intent}"))
    }

    /// The question before `command` of `skill` runs, asked again: the
    /// policy says again what it would do.
    fn question(&self, skill: &str, command: &str) -> crate::skills::dialog::confirm::Question {
        let catalog = self.catalog();
        let tools = catalog.get(skill).and_then(|skill| skill.allowed_tools.as_deref());
        let reason = match self.rules.check(command, tools) {
            Verdict::Ask(reason) => reason,
            Verdict::Allow | Verdict::Deny(_) => "ждёт вашего подтверждения".to_owned(),
        };
        crate::skills::dialog::confirm::question(command, &reason)
    }

    /// The model's words (a question, a message, a closing one, or a
    /// refusal quoting its command): the card holds them whole, the voice
    /// says them by the voice rules, as a chat answer's.
    fn model_said(&self, text: &str, listen: bool, state: &TAssistantState, intent: &str) -> TScenarioResponseBody {
        reply::said(text, &self.chat.voice(text, state), Vec::new(), listen, state, intent)
    }

    /// An answer of our own, without the model.
    fn say(&self, text: String, listen: bool, state: &TAssistantState, kind: &'static str) -> TurnPlan {
        let body = reply::spoken(&text, listen, state, &format!("assistant.{kind}"));
        TurnPlan::Answer { body: Box::new(body), kind }
    }

    /// The model's answer at a step of `session` (the state before it).
    fn step(&self, call_id: &str, utterance: &str, completion: &Completion, state: &TAssistantState) -> Interpretation {
        let Some(mut session) = state.skill.clone() else { return Interpretation::Unusable };
        crate::skills::dialog::session::bound(&mut session, self.max_session_bytes);
        // A thinking model's thought is no step: only its words are read.
        let words = self.chat.read(&completion.text, true).answer;
        if words.trim().is_empty() {
            return Interpretation::Unusable;
        }
        let catalog = self.catalog();
        let mut state = state.clone();
        let Some(skill) = catalog.get(&session.skill) else {
            state.skill = None;
            let text = format!("Навыка «{}» больше нет; он остановлен.", session.skill);
            return Interpretation::Answer(Box::new(reply::spoken(&text, false, &state, "assistant.skill_gone")));
        };
        let step = markers::parse(&words);
        // A step cut off by the token limit may be a command cut short
        // (`git rm -r docs` of `git rm -r docs/old`): none is taken from it,
        // as from a cut chat answer. The step is asked again on the next
        // words; cut in a row, it counts as a refused command, so that a
        // model that keeps running out of tokens stops the skill rather
        // than answer every word with an apology.
        if completion.finish_reason.as_deref() == Some("length") && matches!(step, Step::Command(_)) {
            self.metrics.skill_steps.with_label_values(&["cut"]).inc();
            session.refusals = session.refusals.saturating_add(1);
            if session.refusals >= MAX_REFUSALS {
                state.skill = None;
                let text = format!(
                    "Навык «{}» остановлен: модель {} раза подряд не договорила команду, ей не хватает токенов.",
                    skill.name, session.refusals
                );
                return Interpretation::Answer(Box::new(reply::spoken(&text, false, &state, "assistant.skill_cut")));
            }
            state.skill = Some(session);
            return Interpretation::UnusableIn(Box::new(state));
        }
        crate::skills::dialog::session::record(
            &mut session,
            utterance.to_owned(),
            step.content(),
            self.max_session_bytes,
        );
        // Refusals count in a row: a step that involves the user or runs a
        // command ends the run; a message, which goes on without either,
        // does not, or a model alternating the two would run to the cap.
        let refusals = std::mem::take(&mut session.refusals);
        self.metrics.skill_steps.with_label_values(&[marker_label(&step)]).inc();
        if session.step >= MAX_STEPS && !matches!(step, Step::Done(_)) {
            self.metrics.skill_steps.with_label_values(&["cap"]).inc();
            state.skill = None;
            let text = format!("Навык «{}» остановлен: он дошёл до предела в {MAX_STEPS} шагов.", skill.name);
            return Interpretation::Answer(Box::new(reply::spoken(&text, false, &state, "assistant.skill_cap")));
        }
        let next = next_step(&session);
        state.skill = Some(session);
        match step {
            Step::Command(command) => self.command_step(call_id, command, skill, refusals, state),
            Step::Ask { question, optional } => {
                if let Some(session) = state.skill.as_mut() {
                    crate::skills::dialog::session::set_wait(session, ESkillWait::SkillWaitUser);
                    session.optional = optional;
                }
                Interpretation::Answer(Box::new(self.model_said(&question, true, &state, "assistant.skill_ask")))
            }
            Step::Message(message) => {
                if let Some(session) = state.skill.as_mut() {
                    session.refusals = refusals;
                }
                let utterance = prompt::continue_after_message(next);
                self.go_on(call_id, &message, utterance, state, "assistant.skill_message")
            }
            Step::Done(message) => {
                state.skill = None;
                Interpretation::Answer(Box::new(self.model_said(&message, false, &state, "assistant.skill_done")))
            }
        }
    }

    /// `[CMD]`: the policy first, whatever the model said; `refusals`
    /// commands were refused in a row before it.
    fn command_step(
        &self,
        call_id: &str,
        command: String,
        skill: &Skill,
        refusals: u32,
        mut state: TAssistantState,
    ) -> Interpretation {
        match self.rules.check(&command, skill.allowed_tools.as_deref()) {
            Verdict::Allow => {
                self.metrics.skill_commands.with_label_values(&["allow"]).inc();
                Interpretation::Answer(Box::new(self.command_body(command, &mut state, "skill_command")))
            }
            Verdict::Ask(reason) => {
                self.metrics.skill_commands.with_label_values(&["ask"]).inc();
                let question = crate::skills::dialog::confirm::question(&command, &reason);
                if let Some(session) = state.skill.as_mut() {
                    session.command = command;
                    crate::skills::dialog::session::set_wait(session, ESkillWait::SkillWaitConfirm);
                }
                let body =
                    reply::said(&question.card, &question.speech, Vec::new(), true, &state, "assistant.skill_confirm");
                Interpretation::Answer(Box::new(body))
            }
            Verdict::Deny(reason) => {
                self.metrics.skill_commands.with_label_values(&["deny"]).inc();
                let text = crate::skills::dialog::confirm::refusal(&command, &reason);
                let refusals = refusals.saturating_add(1);
                if refusals >= MAX_REFUSALS {
                    let name = state.skill.take().map(|s| s.skill).unwrap_or_default();
                    let text = format!("{text} Навык «{name}» остановлен: это уже {refusals}-я такая команда подряд.");
                    let body = self.model_said(&text, false, &state, "assistant.skill_refused");
                    return Interpretation::Answer(Box::new(body));
                }
                if let Some(session) = state.skill.as_mut() {
                    session.refusals = refusals;
                }
                let step = state.skill.as_ref().map_or(1, next_step);
                let utterance = prompt::command_refused(&reason, step);
                self.go_on(call_id, &text, utterance, state, "assistant.skill_refused")
            }
        }
    }

    /// Says `text` and goes on with the next step (`utterance`) by itself:
    /// its call starts now, and the answer's callback fetches it.
    fn go_on(
        &self,
        call_id: &str,
        text: &str,
        utterance: String,
        mut state: TAssistantState,
        intent: &str,
    ) -> Interpretation {
        let step = state.skill.as_ref().map_or(0, next_step);
        let next_id = next_call_id(call_id, step);
        if let Some(session) = state.skill.as_mut() {
            session.next = utterance.clone();
        }
        let args = TAssistantContinueArguments {
            call_id: next_id.clone(),
            utterance: utterance.clone(),
            state: Some(state.clone()),
            ..Default::default()
        };
        let directive = callback::continue_with(&mut state, &next_id, &utterance);
        let body = reply::said(text, &self.chat.voice(text, &state), vec![directive], false, &state, intent);
        Interpretation::AnswerThen(Box::new(body), Box::new(args))
    }
}

impl DialogPolicy for SkillPolicy {
    fn plan(&self, request_id: &str, input: &TurnInput, state: &mut TAssistantState) -> TurnPlan {
        if let Some(session) = state.skill.as_mut() {
            crate::skills::dialog::session::bound(session, self.max_session_bytes);
        }
        match input {
            TurnInput::RunSkill { skill, parameters } => self.start(request_id, skill, parameters, state),
            TurnInput::Callback { name, payload } if name == COMMAND_RESULT => {
                self.command_result(payload.as_ref(), state)
            }
            TurnInput::Words(words) if state.skill.is_some() && crate::skills::dialog::phrases::is_cancel(words) => {
                let name = state.skill.take().map(|s| s.skill).unwrap_or_default();
                state.pending = None;
                self.say(format!("Навык «{name}» остановлен."), false, state, "skill_cancelled")
            }
            TurnInput::Words(words) => {
                // Words that answer a skill's question are its answer ("skills"
                // is a file's name as well as a question), unless they start
                // another skill the catalog has.
                let answering = state
                    .skill
                    .as_ref()
                    .is_some_and(|s| crate::skills::dialog::session::wait(s) == ESkillWait::SkillWaitUser);
                if let Some(name) = crate::skills::dialog::phrases::start_request(words)
                    && (!answering || self.catalog().get(&name).is_some())
                {
                    return self.start(request_id, &name, &[], state);
                }
                if !answering && crate::skills::dialog::phrases::is_list(words) {
                    let catalog = self.catalog();
                    return self.say(listing(&catalog), false, state, "skill_list");
                }
                if state.skill.is_some() {
                    return self.words_in_session(words, state);
                }
                let catalog = self.catalog();
                match catalog.find_trigger(words) {
                    Some(skill) => self.start(request_id, &skill.name.clone(), &[], state),
                    None => self.chat.plan(request_id, input, state),
                }
            }
            TurnInput::Silence if state.skill.is_some() => self.silence_in_session(state),
            _ => self.chat.plan(request_id, input, state),
        }
    }

    fn messages(&self, state: &TAssistantState, utterance: &str) -> Vec<ChatMessage> {
        let Some(session) = &state.skill else { return self.chat.messages(state, utterance) };
        // A callback's call runs in the state it brought back, unplanned.
        let mut bounded;
        let session = if !crate::skills::dialog::session::is_bounded(session, self.max_session_bytes) {
            bounded = session.clone();
            crate::skills::dialog::session::bound(&mut bounded, self.max_session_bytes);
            &bounded
        } else {
            session
        };
        let catalog = self.catalog();
        let body = catalog.get(&session.skill).map_or("", |skill| skill.body.as_str());
        let system = prompt::system_message(self.context.as_deref(), &session.skill, body);
        let mut messages = Vec::with_capacity(2 + 2 * session.exchanges.len());
        messages.push(ChatMessage::new(Role::System, system));
        for exchange in &session.exchanges {
            messages.push(ChatMessage::new(Role::User, exchange.user.clone()));
            messages.push(ChatMessage::new(Role::Assistant, exchange.assistant.clone()));
        }
        messages.push(ChatMessage::new(Role::User, utterance));
        messages
    }

    fn sampling(&self, state: &TAssistantState) -> Option<Sampling> {
        state.skill.as_ref().map(|_| self.sampling.clone())
    }

    fn ready_speech(&self, partial: &str, state: &TAssistantState) -> String {
        // A step is a marker and a line: nothing to speak before it ends.
        if state.skill.is_some() { String::new() } else { self.chat.ready_speech(partial, state) }
    }

    fn interpret(
        &self,
        call_id: &str,
        utterance: &str,
        completion: &Completion,
        state: &TAssistantState,
        spoken: &str,
    ) -> Interpretation {
        if state.skill.is_some() {
            self.step(call_id, utterance, completion, state)
        } else {
            self.chat.interpret(call_id, utterance, completion, state, spoken)
        }
    }
}

/// One turn of a skill dialog from any encoded state (`TAssistantState`),
/// input (`TInput`) and model answer, over the skills of
/// `tests/fixtures/skills`: for the fuzz target `skill_turn`, built with
/// the `fuzzing` feature. Panics when an
/// invariant breaks: a model call's history over the session's byte cap.
#[cfg(any(test, feature = "fuzzing"))]
pub fn fuzz_turn(state: &[u8], input: &[u8], answer: &str) {
    use prost::Message;
    static POLICY: std::sync::OnceLock<SkillPolicy> = std::sync::OnceLock::new();
    let policy = POLICY.get_or_init(|| {
        let mut config = AssistantConfig::default();
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/skills");
        config.skills.dir = Some(std::path::PathBuf::from(dir));
        config.skills.watch = false;
        config.skills.max_session_bytes = 2048;
        let metrics = AssistantMetrics::new(&prometheus::Registry::new()).expect("metrics register");
        SkillPolicy::from_config(&config, &metrics, false).expect("the policy of the defaults")
    });
    let mut state = TAssistantState::decode(state).unwrap_or_default();
    let Some(input) = megamind_core::proto::n_alice::n_scenarios::TInput::decode(input).ok() else { return };
    let Some(input) = TurnInput::from_input(&input) else { return };
    let TurnPlan::CallModel { utterance } = policy.plan("fuzz", &input, &mut state) else { return };
    let messages = policy.messages(&state, &utterance);
    if state.skill.is_some() {
        let history: usize = messages[1..messages.len() - 1].iter().map(|m| m.content.len()).sum();
        assert!(history <= policy.max_session_bytes, "history of {history} bytes");
    }
    let completion = Completion { text: answer.to_owned(), ..Completion::default() };
    if let Interpretation::AnswerThen(_, next) = policy.interpret("fuzz", &utterance, &completion, &state, "") {
        let next_state = next.state.unwrap_or_default();
        assert!(next_state.skill.is_some(), "a skill goes on only in a session");
        policy.messages(&next_state, &next.utterance);
    }
}

/// What a `skill_command_result` callback brings back.
#[derive(Debug, Default)]
struct CommandResult {
    skill: String,
    step: Option<f64>,
    session: String,
    output: String,
    skipped: bool,
}

impl CommandResult {
    fn read(payload: Option<&Struct>) -> CommandResult {
        let Some(payload) = payload else { return CommandResult::default() };
        let text = |key: &str| match payload.fields.get(key).and_then(|v| v.kind.as_ref()) {
            Some(Kind::StringValue(text)) => text.clone(),
            _ => String::new(),
        };
        let step = match payload.fields.get("step").and_then(|v| v.kind.as_ref()) {
            Some(Kind::NumberValue(step)) => Some(*step),
            _ => None,
        };
        let skipped =
            matches!(payload.fields.get("skipped").and_then(|v| v.kind.as_ref()), Some(Kind::BoolValue(true)));
        CommandResult { skill: text("skill"), step, session: text("session"), output: text("output"), skipped }
    }

    /// Whether this result answers the command `session` waits for.
    fn is_for(&self, session: &TSkillSession) -> bool {
        crate::skills::dialog::session::wait(session) == ESkillWait::SkillWaitCommand
            && self.skill == session.skill
            && self.session == session.session_id
            && self.step == Some(f64::from(session.step))
    }
}

/// The directive that runs `command` for `session`, its callback naming the
/// session and the step.
fn command_directive(command: &str, session: &TSkillSession) -> TDirective {
    let text = |s: &str| Value { kind: Some(Kind::StringValue(s.to_owned())) };
    let payload = Struct {
        fields: [
            ("skill".to_owned(), text(&session.skill)),
            ("step".to_owned(), Value { kind: Some(Kind::NumberValue(f64::from(session.step))) }),
            ("session".to_owned(), text(&session.session_id)),
        ]
        .into_iter()
        .collect(),
    };
    let callback = TCallbackDirective { name: COMMAND_RESULT.into(), payload: Some(payload), ..Default::default() };
    let run =
        TRunCommandDirective { name: "run_command".into(), command: command.to_owned(), callback: Some(callback) };
    TDirective { directive: Some(t_directive::Directive::RunCommandDirective(run)) }
}

/// The call id of the step after `call_id`'s: derived, so every retry and
/// every replica names the same call.
fn next_call_id(call_id: &str, step: u32) -> String {
    let root = call_id.split_once("#skill-step-").map_or(call_id, |(root, _)| root);
    format!("{root}#skill-step-{step}")
}

/// The model call answering `utterance`, the next message of `session`.
fn call(session: &mut TSkillSession, utterance: String) -> TurnPlan {
    session.command.clear();
    crate::skills::dialog::session::set_wait(session, ESkillWait::SkillWaitIdle);
    session.next = utterance.clone();
    TurnPlan::CallModel { utterance }
}

fn marker_label(step: &Step) -> &'static str {
    match step {
        Step::Command(_) => "cmd",
        Step::Ask { .. } => "ask",
        Step::Message(_) => "message",
        Step::Done(_) => "done",
    }
}

/// "Навыки: a, b." (or that there are none).
fn listing(catalog: &Catalog) -> String {
    if catalog.is_empty() {
        return "Навыков пока нет.".into();
    }
    let names: Vec<&str> = catalog.skills().map(|skill| skill.name.as_str()).collect();
    format!("Навыки: {}.", names.join(", "))
}

fn unknown_skill(catalog: &Catalog, name: &str) -> String {
    let name = clip(name, 64);
    let closest = catalog.closest(name, CLOSEST);
    if closest.is_empty() {
        format!("Навыка «{name}» нет. {}", listing(catalog))
    } else {
        format!("Навыка «{name}» нет. Может быть, {}?", closest.join(" или "))
    }
}
