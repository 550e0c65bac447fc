use super::*;
use crate::skills::rules;

/// A `skill_command_result` callback's payload.
fn result_payload(skill: &str, step: f64, session: &str, output: &str) -> Struct {
    payload(&[
        ("skill", Kind::StringValue(skill.into())),
        ("step", Kind::NumberValue(step)),
        ("session", Kind::StringValue(session.into())),
        ("output", Kind::StringValue(output.into())),
        ("skipped", Kind::BoolValue(false)),
    ])
}

fn payload(fields: &[(&str, Kind)]) -> Struct {
    Struct { fields: fields.iter().map(|(k, v)| (k.to_string(), Value { kind: Some(v.clone()) })).collect() }
}

#[test]
fn the_next_call_id_is_derived_from_the_first_and_never_grows() {
    assert_eq!(next_call_id("req-7", 2), "req-7#skill-step-2");
    assert_eq!(next_call_id("req-7#skill-step-2", 3), "req-7#skill-step-3");
    assert_eq!(next_call_id(&next_call_id(&next_call_id("r", 2), 3), 4), "r#skill-step-4");
}

#[test]
fn a_result_answers_only_the_command_its_session_waits_for() {
    let mut session = session::start("git-quick-commit", "req-1");
    session.step = 3;
    session::set_wait(&mut session, ESkillWait::SkillWaitCommand);
    let fields = |step: f64, name: &str, id: &str| result_payload(name, step, id, "ok");
    let good = fields(3.0, "git-quick-commit", "req-1");
    assert!(CommandResult::read(Some(&good)).is_for(&session));
    assert_eq!(CommandResult::read(Some(&good)).output, "ok");
    for wrong in [
        fields(2.0, "git-quick-commit", "req-1"),
        fields(3.0, "other", "req-1"),
        fields(3.0, "git-quick-commit", "req-2"),
    ] {
        assert!(!CommandResult::read(Some(&wrong)).is_for(&session), "{wrong:?}");
    }
    assert!(!CommandResult::read(None).is_for(&session));
    let mut asking = session.clone();
    session::set_wait(&mut asking, ESkillWait::SkillWaitUser);
    assert!(!CommandResult::read(Some(&good)).is_for(&asking), "a result while waiting for the user");
    let text_step = payload(&[("step", Kind::StringValue("3".into()))]);
    assert_eq!(CommandResult::read(Some(&text_step)).step, None, "only a number is a step");
}

#[test]
fn the_directive_names_the_session_and_the_step() {
    let mut session = session::start("disk-usage", "req-9");
    session.step = 1;
    let TDirective { directive: Some(t_directive::Directive::RunCommandDirective(run)) } =
        command_directive("df -h", &session)
    else {
        panic!("a RunCommandDirective")
    };
    assert_eq!((run.name.as_str(), run.command.as_str()), ("run_command", "df -h"));
    let callback = run.callback.unwrap();
    assert_eq!(callback.name, COMMAND_RESULT);
    let mut result = CommandResult::read(callback.payload.as_ref());
    assert_eq!((result.skill.as_str(), result.step, result.session.as_str()), ("disk-usage", Some(1.0), "req-9"));
    session::set_wait(&mut session, ESkillWait::SkillWaitCommand);
    result.output = "x".into();
    assert!(result.is_for(&session), "what the directive carries comes back as a match");
}

#[test]
fn the_shipped_skills_commands_pass_the_policy() {
    let (catalog, problems) = Catalog::load(std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../skills")));
    assert!(problems.is_empty(), "{problems:?}");
    let rules = CommandRules::new(&rules::CommandRulesConfig::default()).unwrap();
    let allowed = |name: &str, command: &str| rules.check(command, catalog.get(name).unwrap().allowed_tools.as_deref());
    assert_eq!(allowed("git-quick-commit", "git status --porcelain"), Verdict::Allow);
    assert_eq!(allowed("git-quick-commit", "git add . && git commit -m \"fix: x\""), Verdict::Allow);
    assert_eq!(allowed("disk-usage", "du -sh ./* | sort -rh | head -n 5"), Verdict::Allow);
    assert_eq!(allowed("project-notes", "tail -n 3 NOTES.md"), Verdict::Allow);
    assert_eq!(allowed("project-notes", "date +%F"), Verdict::Allow);
    // Writing a file asks, whatever the skill allows.
    assert_eq!(
        allowed("project-notes", "printf '%s %s %s\\n' '2026-11-24' 'work' 'buy milk' | tee -a NOTES.md"),
        Verdict::Ask("запишет в файл NOTES.md".into())
    );
    assert_eq!(allowed("git-quick-commit", "ls"), Verdict::Allow, "reading runs in any skill");
    assert!(matches!(allowed("git-quick-commit", "git config alias.x '!sh'"), Verdict::Ask(_)));
    assert!(matches!(allowed("disk-usage", "tar czf x ."), Verdict::Ask(_)), "outside its allowed tools");
}

/// The fuzz target's seeds: a session waiting for a command with its result,
/// one waiting for the user with words, a hostile oversized session, a start
/// by frame. Each is played here; `MEGAMIND_WRITE_FUZZ_SEEDS=1` also writes
/// them to `fuzz/seeds/skill_turn/`.
#[test]
fn the_fuzz_seeds_play() {
    use megamind_core::proto::n_alice::n_scenarios::{TInput, TSemanticFrame, TSemanticFrameSlot, TTextInput, t_input};
    use prost::Message;

    use crate::proto::megamind_scenario::v1::TAssistantTurn;
    let framed = |state: &TAssistantState, input: &TInput, answer: &str| {
        let (state, input) = (state.encode_to_vec(), input.encode_to_vec());
        let mut data = Vec::new();
        data.extend_from_slice(&u16::try_from(state.len()).unwrap().to_le_bytes());
        data.extend_from_slice(&state);
        data.extend_from_slice(&u16::try_from(input.len()).unwrap().to_le_bytes());
        data.extend_from_slice(&input);
        data.extend_from_slice(answer.as_bytes());
        data
    };
    let words = |w: &str| TInput {
        event: Some(t_input::Event::Text(TTextInput { utterance: w.into(), ..Default::default() })),
        ..Default::default()
    };
    let mut waiting = session::start("git-quick-commit", "req-1");
    session::record(
        &mut waiting,
        "Execute skill: git-quick-commit\n\n[Step 1 of 100]".into(),
        "[CMD] git status".into(),
        1 << 20,
    );
    session::set_wait(&mut waiting, ESkillWait::SkillWaitCommand);
    waiting.command = "git status".into();
    let command_state = TAssistantState { skill: Some(waiting.clone()), ..Default::default() };
    let result = TInput {
        event: Some(t_input::Event::Callback(TCallbackDirective {
            name: COMMAND_RESULT.into(),
            payload: Some(payload(&[
                ("skill", Kind::StringValue("git-quick-commit".into())),
                ("step", Kind::NumberValue(1.0)),
                ("session", Kind::StringValue("req-1".into())),
                ("output", Kind::StringValue("\u{1b}[31m M a.txt\u{1b}[0m\nC:\\> dir\n".into())),
            ])),
            ..Default::default()
        })),
        ..Default::default()
    };
    let mut asking = waiting.clone();
    session::set_wait(&mut asking, ESkillWait::SkillWaitUser);
    asking.optional = true;
    let ask_state = TAssistantState { skill: Some(asking), ..Default::default() };
    let mut huge = waiting.clone();
    huge.exchanges = (0..200).map(|i| TAssistantTurn { user: format!("{i}"), assistant: "ж".repeat(100) }).collect();
    session::set_wait(&mut huge, ESkillWait::SkillWaitUser);
    let huge_state = TAssistantState { skill: Some(huge), ..Default::default() };
    let frame = TInput {
        semantic_frames: vec![TSemanticFrame {
            name: "run_skill".into(),
            slots: vec![
                TSemanticFrameSlot { name: "skill".into(), value: "disk-usage".into(), ..Default::default() },
                TSemanticFrameSlot { name: "path".into(), value: "/".into(), ..Default::default() },
            ],
        }],
        ..Default::default()
    };
    let seeds = [
        ("command_result", framed(&command_state, &result, "[ASK] Сообщение коммита?")),
        ("optional_skip", framed(&ask_state, &words("пропусти"), "[MESSAGE] Пишу.")),
        ("huge_session", framed(&huge_state, &words("ответ"), "[CMD] rm -rf /")),
        ("frame_start", framed(&TAssistantState::default(), &frame, "Sure! du -sh /\nexplanation")),
        ("cancel", framed(&command_state, &words("стоп"), "")),
    ];
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/skill_turn");
    for (name, data) in &seeds {
        let (state, rest) = data.split_at(2 + usize::from(u16::from_le_bytes([data[0], data[1]])));
        let (input, answer) = rest.split_at(2 + usize::from(u16::from_le_bytes([rest[0], rest[1]])));
        fuzz_turn(&state[2..], &input[2..], std::str::from_utf8(answer).unwrap());
        if std::env::var_os("MEGAMIND_WRITE_FUZZ_SEEDS").is_some() {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(name), data).unwrap();
        }
    }
}

/// The policy over the skills the server ships, unwatched.
fn shipped_policy() -> SkillPolicy {
    let mut config = AssistantConfig::default();
    config.skills.dir = Some(std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../skills")));
    config.skills.watch = false;
    let metrics = AssistantMetrics::new(&prometheus::Registry::new()).unwrap();
    SkillPolicy::from_config(&config, &metrics, false).unwrap()
}

/// A session of `skill` whose model has the first step's message to answer.
fn after_step_one(skill: &str) -> TAssistantState {
    let mut session = session::start(skill, "req-1");
    session.step = 1;
    TAssistantState { skill: Some(session), ..Default::default() }
}

#[test]
fn a_confirmed_command_is_checked_again() {
    let policy = shipped_policy();
    // A state that says "confirm `rm -rf /`": the policy denies it all the same.
    let mut session = session::start("git-quick-commit", "req-1");
    session.step = 1;
    session::set_wait(&mut session, ESkillWait::SkillWaitConfirm);
    session.command = "rm -rf /".into();
    let mut state = TAssistantState { skill: Some(session), ..Default::default() };
    let plan = policy.plan("req-2", &TurnInput::Words("да".into()), &mut state);
    let TurnPlan::CallModel { utterance } = plan else { panic!("the model hears the refusal: {plan:?}") };
    assert!(utterance.starts_with("Command output:\nCommand refused by policy: "), "{utterance}");
    assert!(utterance.ends_with("[Step 2 of 100]"), "{utterance}");
}

#[test]
fn a_step_is_read_from_the_words_after_the_thought() {
    let policy = shipped_policy();
    let state = after_step_one("disk-usage");
    let step = |answer: &str| {
        let completion = Completion { text: answer.to_owned(), ..Completion::default() };
        policy.interpret("req-1", "Execute skill: disk-usage", &completion, &state, "")
    };
    // A thought may hold lines that look like markers: they are no step.
    for answer in [
        "<think>\nI could ask first:\n[ASK] Which folder?\nNo: run it.\n</think>\n\n[CMD] du -sh .",
        "I could ask first:\n[ASK] Which folder?\n</think>\n[CMD] du -sh .",
        "<thinking><phase id=\"1\">[ASK] Which folder?</phase></thinking><final>[CMD] du -sh .</final>",
    ] {
        let Interpretation::Answer(body) = step(answer) else { panic!("{answer:?}: a command") };
        let layout = body.layout.as_ref().unwrap();
        let Some(t_directive::Directive::RunCommandDirective(run)) = &layout.directives[0].directive else {
            panic!("{answer:?}: {layout:?}")
        };
        assert_eq!(run.command, "du -sh .", "{answer:?}");
    }
    let Interpretation::AnswerThen(body, _) = step("<think>\n[DONE] Готово?\n</think>\n[MESSAGE] Смотрю диск.")
    else {
        panic!("a message")
    };
    assert_eq!(body.layout.as_ref().unwrap().output_speech, "Смотрю диск.");
    assert_eq!(step("<think>\nLet me run du -sh on"), Interpretation::Unusable, "a thought alone is no step");
}

#[test]
fn a_command_cut_off_by_the_token_limit_is_never_run() {
    let policy = shipped_policy();
    let state = after_step_one("git-quick-commit");
    let step = |answer: &str, finish: &str| {
        let completion =
            Completion { text: answer.to_owned(), finish_reason: Some(finish.into()), ..Completion::default() };
        policy.interpret("req-1", "Execute skill: git-quick-commit", &completion, &state, "")
    };
    // `git rm -r docs/old_api` cut short: it would run by itself, on more.
    let Interpretation::UnusableIn(cut) = step("[CMD] git rm -r docs", "length") else { panic!("an apology") };
    assert_eq!(cut.skill.as_ref().map(|s| (s.step, s.refusals)), state.skill.as_ref().map(|s| (s.step, 1)));
    assert!(matches!(step("[CMD] git rm -r docs", "stop"), Interpretation::Answer(_)), "whole, it is a step");
    // Words cut short say nothing that runs: they are spoken as they are.
    let Interpretation::Answer(body) = step("[ASK] Какое сообщение коммита ты хо", "length")
    else {
        panic!("a question")
    };
    assert!(body.layout.as_ref().unwrap().directives.is_empty());
}

fn state_of_body(body: &TScenarioResponseBody) -> TAssistantState {
    let caps = crate::dialog::state::Caps { turns: 100, bytes: 1 << 20, utterance: 16 << 10 };
    crate::dialog::state::decode(body.state.as_ref(), caps)
}

/// A model that keeps running out of tokens in its commands stops the
/// skill at the third in a row, rather than have every word answered with
/// the apology; a step in between that is not cut starts the count again.
#[test]
fn commands_cut_three_times_in_a_row_stop_the_skill() {
    let policy = shipped_policy();
    let step = |answer: &str, finish: &str, state: &TAssistantState| {
        let completion =
            Completion { text: answer.to_owned(), finish_reason: Some(finish.into()), ..Completion::default() };
        policy.interpret("req-1", "Execute skill: git-quick-commit", &completion, state, "")
    };
    let cut = |state: &TAssistantState| match step("[CMD] git rm -r docs", "length", state) {
        Interpretation::UnusableIn(state) => *state,
        other => panic!("an apology: {other:?}"),
    };
    let twice = cut(&cut(&after_step_one("git-quick-commit")));
    let Interpretation::Answer(stopped) = step("[CMD] git rm -r docs", "length", &twice) else { panic!("an answer") };
    assert!(state_of_body(&stopped).skill.is_none(), "the skill stopped");
    let speech = &stopped.layout.as_ref().unwrap().output_speech;
    assert!(speech.contains("git-quick-commit") && speech.contains("не договорила"), "{speech}");
    assert!(stopped.layout.as_ref().unwrap().directives.is_empty(), "nothing run");

    let Interpretation::Answer(asked) = step("[ASK] Какое сообщение коммита?", "stop", &twice)
    else {
        panic!()
    };
    let asked = state_of_body(&asked);
    assert_eq!(asked.skill.as_ref().map(|s| s.refusals), Some(0), "a step between starts the count again");
}

#[test]
fn silence_skips_only_an_optional_question_and_asks_a_required_one_again() {
    let policy = shipped_policy();
    let asking = |question: &str, optional: bool| {
        let mut session = session::start("git-quick-commit", "req-1");
        session::record(&mut session, "Execute skill: git-quick-commit".into(), question.into(), 1 << 20);
        session::set_wait(&mut session, ESkillWait::SkillWaitUser);
        session.optional = optional;
        TAssistantState { skill: Some(session), ..Default::default() }
    };
    let mut state = asking("[ASK] Введи сообщение коммита:", false);
    let before = state.clone();
    let TurnPlan::Answer { body, kind } = policy.plan("req-2", &TurnInput::Silence, &mut state) else {
        panic!("the question again, not a call")
    };
    assert_eq!(
        (body.layout.as_ref().unwrap().output_speech.as_str(), kind),
        ("Введи сообщение коммита:", "skill_waiting")
    );
    assert!(body.layout.as_ref().unwrap().should_listen);
    assert_eq!(state, before, "still waiting for the answer");

    let mut state = asking("[ASK:optional] Тег?", true);
    let TurnPlan::CallModel { utterance } = policy.plan("req-2", &TurnInput::Silence, &mut state) else {
        panic!("an optional question is skipped")
    };
    assert!(utterance.starts_with("User response: \n"), "{utterance:?}");
}

#[test]
fn a_step_s_words_are_spoken_by_the_voice_rules_and_shown_whole() {
    let policy = shipped_policy();
    let state = after_step_one("disk-usage");
    let listing: String = (0..60).map(|i| format!("Папка **номер {i}** занимает `{i}M`. ")).collect();
    let max = AssistantConfig::default().dialog.max_speech_chars;
    for answer in [format!("[MESSAGE] {listing}"), format!("[ASK] {listing}"), format!("[DONE] {listing}")] {
        let completion = Completion { text: answer.clone(), ..Completion::default() };
        let (Interpretation::Answer(body) | Interpretation::AnswerThen(body, _)) =
            policy.interpret("req-1", "Execute skill: disk-usage", &completion, &state, "")
        else {
            panic!("{answer:.20}: an answer")
        };
        let layout = body.layout.as_ref().unwrap();
        assert!(layout.output_speech.chars().count() <= max, "{answer:.20}: {}", layout.output_speech);
        assert!(layout.output_speech.starts_with("Папка номер 0 занимает 0M."), "{}", layout.output_speech);
        let card = layout.cards.iter().find_map(|card| match &card.card {
            Some(megamind_core::proto::n_alice::n_scenarios::t_card::Card::Text(text)) => Some(text.as_str()),
            _ => None,
        });
        assert_eq!(card, Some(listing.trim()), "{answer:.20}: the card holds it whole");
    }
}

#[test]
fn messages_between_refused_commands_do_not_reset_their_count() {
    let policy = shipped_policy();
    let mut state = after_step_one("disk-usage");
    for (n, answer) in
        ["[CMD] rm -rf ~", "[MESSAGE] Попробую иначе.", "[CMD] rm -rf ~", "[MESSAGE] Ещё раз."].into_iter().enumerate()
    {
        let completion = Completion { text: answer.to_owned(), ..Completion::default() };
        let Interpretation::AnswerThen(_, next) = policy.interpret("req-1", "step", &completion, &state, "") else {
            panic!("{answer}: goes on by itself")
        };
        state = next.state.expect("a state");
        assert_eq!(state.skill.as_ref().map(|s| s.refusals), Some(u32::from(n >= 2) + 1), "after {answer}");
    }
    let completion = Completion { text: "[CMD] rm -rf ~".into(), ..Completion::default() };
    let Interpretation::Answer(body) = policy.interpret("req-1", "step", &completion, &state, "") else {
        panic!("the third refusal stops the skill")
    };
    assert!(body.layout.unwrap().output_speech.contains("остановлен"));
}

#[test]
fn a_system_context_file_over_its_bound_is_refused_with_a_clear_error() {
    let file = std::env::temp_dir().join(format!("skills-context-{}.md", std::process::id()));
    let mut config = AssistantConfig::default();
    config.skills.dir = Some(std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../skills")));
    config.skills.watch = false;
    config.skills.system_context_file = Some(file.clone());
    let metrics = AssistantMetrics::new(&prometheus::Registry::new()).unwrap();
    // A hundred kibibytes: it would go into every step's prompt.
    std::fs::write(&file, "x".repeat(100 * 1024)).unwrap();
    let refused = SkillPolicy::from_config(&config, &metrics, false);
    // At the bound exactly, it is read whole.
    std::fs::write(&file, "x".repeat(MAX_CONTEXT_BYTES)).unwrap();
    let read = SkillPolicy::from_config(&config, &metrics, false);
    let _ = std::fs::remove_file(&file);
    let Err(AssistantError::Setup(message)) = refused else { panic!("refused: {:?}", refused.map(|_| ())) };
    assert_eq!(
        message,
        format!(
            "skills.system_context_file {}: larger than {MAX_CONTEXT_BYTES} bytes (it goes into every step's prompt)",
            file.display()
        )
    );
    let policy = read.unwrap_or_else(|e| panic!("a context at the bound is read: {e}"));
    assert_eq!(policy.context.map(|text| text.len()), Some(MAX_CONTEXT_BYTES));
}

/// A callback's call runs in the state it brought back, unplanned: a
/// session of millions of empty exchanges (two bytes each on the wire, no
/// text to count) is bounded to one exchange a step before it becomes the
/// model's messages, as a planned one is.
#[test]
fn a_state_brought_back_with_countless_empty_exchanges_is_bounded_before_the_call() {
    let policy = shipped_policy();
    let mut session = session::start("disk-usage", "req-1");
    session.exchanges = vec![crate::proto::megamind_scenario::v1::TAssistantTurn::default(); 200_000];
    let state = TAssistantState { skill: Some(session), ..Default::default() };
    let messages = policy.messages(&state, "дальше");
    let most = 2 + 2 * (1 + crate::skills::MAX_STEPS as usize);
    assert!(messages.len() <= most, "{} messages, {most} at most", messages.len());
}

/// A command's result past `max_output_bytes`, sent back through the
/// callback, reaches the model cut to the cap with the cut noted.
#[test]
fn a_command_result_past_the_output_cap_reaches_the_model_cut() {
    let policy = shipped_policy();
    let mut session = session::start("disk-usage", "req-1");
    session.step = 2;
    session::set_wait(&mut session, ESkillWait::SkillWaitCommand);
    let mut state = TAssistantState { skill: Some(session), ..Default::default() };
    let output: String = (0..200_000).map(|n| format!("line {n}\n")).collect();
    let result = result_payload("disk-usage", 2.0, "req-1", &output);
    let input = TurnInput::Callback { name: COMMAND_RESULT.into(), payload: Some(result) };
    let TurnPlan::CallModel { utterance } = policy.plan("req-2", &input, &mut state) else {
        panic!("the model hears it")
    };
    assert!(output.len() > 1 << 20, "a result of {} bytes", output.len());
    assert!(utterance.len() <= policy.max_output_bytes + 256, "{} bytes reach the model", utterance.len());
    assert!(utterance.contains(crate::skills::output::CUT_NOTE), "the cut is noted");
    assert!(utterance.contains("line 0\n"), "the output's start is kept");
}

/// While a skill waits for the user's answer, a list phrase or a start
/// phrase naming no skill is that answer; a start phrase naming a skill the
/// catalog has still starts it.
#[test]
fn words_answering_a_question_are_the_answer_unless_they_start_a_known_skill() {
    let policy = shipped_policy();
    let asking = || {
        let mut session = session::start("git-quick-commit", "req-1");
        session::record(&mut session, "Execute skill: git-quick-commit".into(), "[ASK] Имя файла?".into(), 1 << 20);
        session::set_wait(&mut session, ESkillWait::SkillWaitUser);
        TAssistantState { skill: Some(session), ..Default::default() }
    };
    for answer in ["skills", "какие навыки", "запусти навык нет-такого"] {
        let mut state = asking();
        let plan = policy.plan("req-2", &TurnInput::Words(answer.into()), &mut state);
        let TurnPlan::CallModel { utterance } = plan else { panic!("{answer}: the model hears the answer: {plan:?}") };
        assert!(utterance.starts_with("User response: ") && utterance.contains(answer), "{answer}: {utterance}");
        assert_eq!(state.skill.as_ref().map(|s| s.skill.as_str()), Some("git-quick-commit"), "{answer}");
    }
    let mut state = asking();
    let plan = policy.plan("req-2", &TurnInput::Words("запусти навык disk usage".into()), &mut state);
    assert!(
        !matches!(plan, TurnPlan::CallModel { ref utterance } if utterance.starts_with("User response: ")),
        "{plan:?}"
    );
    assert_eq!(state.skill.as_ref().map(|s| s.skill.as_str()), Some("disk-usage"), "the other skill started");
    // Not answering a question, the list phrase lists.
    let mut idle = TAssistantState::default();
    let plan = policy.plan("req-3", &TurnInput::Words("какие навыки".into()), &mut idle);
    assert!(matches!(plan, TurnPlan::Answer { kind: "skill_list", .. }), "{plan:?}");
}
