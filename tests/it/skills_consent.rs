//! A skill's commands run on the user's computer only with consent, played
//! through the server with the mock model answering `[CMD] <command>`:
//! every command that may do more than read gets a question in Russian and
//! no `RunCommandDirective`, with or without `allowed-tools`; commands that
//! only read go out by themselves; "да" sends the command asked about and
//! no other.

use std::path::{Path, PathBuf};

use megamind_assistant::proto::megamind_scenario::v1::ESkillWait;
use megamind_core::proto::n_alice::n_scenarios::{
    TCallbackDirective, TInput, TRunCommandDirective, t_card, t_directive, t_input,
};
use megamind_tools::client::{Client, Turn};
use prost_types::{Struct, Value, value::Kind};

use crate::{
    assistant_harness::{ask, client, metrics_text, spawn, state_of},
    helpers::Transport,
    mock_llm::{MockLlm, Reply},
};

/// What a model steered by what it read may send.
static ATTACKS: std::sync::LazyLock<Vec<&'static str>> =
    std::sync::LazyLock::new(|| include_str!("../fixtures/skills/attack-commands.txt").lines().collect());

/// Commands that only read.
const READING: [&str; 5] = ["ls -la", "git status --porcelain", "git log --oneline -5", "du -sh .", "df -h"];

/// Skills that allow no command, git's, and every one.
const SKILLS: [&str; 3] = ["open-skill", "git-quick-commit", "any-command"];

/// A folder with [`SKILLS`]: `git-quick-commit` as the repository ships it.
fn skills_folder(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let write = |folder: &str, text: &str| {
        std::fs::create_dir_all(dir.join(folder)).unwrap();
        std::fs::write(dir.join(folder).join("SKILL.md"), text).unwrap();
    };
    write("open-skill", "---\nname: open-skill\ndescription: Allows no command.\n---\nDo as told.\n");
    write("any-command", "---\nname: any-command\ndescription: Allows every command.\nallowed-tools: Bash\n---\nDo.\n");
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("skills/git-quick-commit/SKILL.md");
    write("git-quick-commit", &std::fs::read_to_string(shipped).unwrap());
    dir
}

fn run_commands(turn: &Turn) -> Vec<TRunCommandDirective> {
    turn.directives()
        .iter()
        .filter_map(|d| match &d.directive {
            Some(t_directive::Directive::RunCommandDirective(run)) => Some(run.clone()),
            _ => None,
        })
        .collect()
}

fn card(turn: &Turn) -> String {
    match turn.body().layout.as_ref().and_then(|layout| layout.cards.first()).and_then(|c| c.card.as_ref()) {
        Some(t_card::Card::Text(text)) => text.clone(),
        other => panic!("a text card: {other:?}"),
    }
}

fn wait(turn: &Turn) -> Option<ESkillWait> {
    state_of(turn.body()).skill.map(|session| ESkillWait::try_from(session.wait).unwrap())
}

/// The words of `speech` in Latin letters that `command` does not hold:
/// the question is Russian but for the command and the names in it.
fn foreign_words(speech: &str, command: &str) -> Vec<String> {
    speech
        .split(|c: char| !c.is_ascii_alphabetic())
        .filter(|word| !word.is_empty() && !command.contains(word))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn every_attack_asks_first_with_or_without_allowed_tools() {
    let dir = skills_folder("skills-consent-attacks");
    let mock = MockLlm::start(Reply::status(500)).await;
    let server = spawn(&mock, |config| config.skills.dir = Some(dir.clone())).await;
    let mut client = client(&server.app, Transport::Http);
    for skill in SKILLS {
        for &command in ATTACKS.iter() {
            mock.push(Reply::content(&format!("[CMD] {command}")));
            let turn = ask(&mut client, &format!("запусти навык {skill}")).await;
            let context = format!("{command:?} in {skill}: {:?}", turn.speeches());
            assert!(run_commands(&turn).is_empty(), "{context}");
            let speech = turn.speech();
            assert!(
                speech.starts_with("Команда «") && speech.ends_with(". Выполнить? Скажите «да» или «нет»."),
                "{context}"
            );
            assert_eq!(foreign_words(speech, command), Vec::<String>::new(), "{context}");
            assert!(card(&turn).contains(command), "the card shows it whole: {}", card(&turn));
            assert!(turn.body().layout.as_ref().unwrap().should_listen, "{context}");
            assert_eq!(wait(&turn), Some(ESkillWait::SkillWaitConfirm), "{context}");
            let turn = ask(&mut client, "стоп").await;
            assert_eq!(wait(&turn), None);
        }
    }
    assert_eq!(mock.calls(), SKILLS.len() * ATTACKS.len(), "one step each, nothing run");
    let metrics = metrics_text(&server.metrics);
    let asked = format!("megamind_assistant_skill_commands_total{{verdict=\"ask\"}} {}", SKILLS.len() * ATTACKS.len());
    assert!(metrics.contains(&asked), "{metrics}");
    assert!(metrics.contains("megamind_assistant_skill_commands_total{verdict=\"allow\"} 0\n"), "{metrics}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn reading_runs_by_itself_in_every_skill() {
    let dir = skills_folder("skills-consent-reading");
    let mock = MockLlm::start(Reply::status(500)).await;
    let server = spawn(&mock, |config| config.skills.dir = Some(dir.clone())).await;
    let mut client = client(&server.app, Transport::Http);
    for skill in SKILLS {
        for command in READING {
            mock.push(Reply::content(&format!("[CMD] {command}")));
            let turn = ask(&mut client, &format!("запусти навык {skill}")).await;
            let runs = run_commands(&turn);
            assert_eq!(runs.len(), 1, "{command:?} in {skill}: {:?}", turn.speeches());
            assert_eq!(runs[0].command, command);
            assert_eq!(turn.speech(), format!("Выполняю: {command}"));
            ask(&mut client, "стоп").await;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn yes_sends_only_the_command_asked_about_and_a_new_one_asks_again() {
    let dir = skills_folder("skills-consent-yes");
    let mock = MockLlm::start(Reply::status(500)).await;
    let server = spawn(&mock, |config| config.skills.dir = Some(dir.clone())).await;
    let mut client = client(&server.app, Transport::Http);
    let config_alias = ATTACKS[9];
    mock.push(Reply::content(&format!("[CMD] {config_alias}")));
    mock.push(Reply::content("[CMD] git tidy"));
    mock.push(Reply::content("[DONE] Готово."));

    let turn = ask(&mut client, "запусти навык git-quick-commit").await;
    assert!(run_commands(&turn).is_empty());
    // Neither yes nor no: the same question, whole on the card again.
    let turn = ask(&mut client, "а что она делает?").await;
    assert!(turn.speech().contains("изменит настройки git"), "{}", turn.speech());
    assert!(card(&turn).contains(config_alias));
    let turn = ask(&mut client, "да").await;
    let runs = run_commands(&turn);
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].command, config_alias, "exactly the command asked about");

    // Its result brings the next step: another command, asked again.
    let turn = send_result(&mut client, &runs[0], "").await;
    assert!(run_commands(&turn).is_empty(), "{:?}", turn.speeches());
    assert!(turn.speech().starts_with("Команда «git tidy» выполнит «git tidy»"), "{}", turn.speech());
    assert_eq!(wait(&turn), Some(ESkillWait::SkillWaitConfirm));
    let turn = ask(&mut client, "нет").await;
    assert_eq!(turn.speech(), "Готово.");
    assert_eq!(mock.calls(), 3);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The callback of `run` with `output`, as a client sends it back.
async fn send_result(client: &mut Client, run: &TRunCommandDirective, output: &str) -> Turn {
    let mut callback: TCallbackDirective = run.callback.clone().expect("a callback");
    let payload = callback.payload.get_or_insert_with(Struct::default);
    payload.fields.insert("output".into(), Value { kind: Some(Kind::StringValue(output.into())) });
    payload.fields.insert("skipped".into(), Value { kind: Some(Kind::BoolValue(false)) });
    let input = TInput { event: Some(t_input::Event::Callback(callback)), ..Default::default() };
    client.send(input).await.expect("the callback is answered")
}
