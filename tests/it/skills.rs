//! Skills end to end over HTTP: the `git-quick-commit` reference dialog
//! (docs/skills.md#a-whole-session) against the mock model (every message
//! byte for byte), the step markers on Megamind's turns, the command
//! policy, cancel, the step cap, stale callbacks, the catalog's errors and
//! its reload.

use std::{path::PathBuf, time::Duration};

use megamind_assistant::{config::AssistantConfig, proto::megamind_scenario::v1::TSkillSession};
use megamind_core::proto::n_alice::n_scenarios::{
    TCallbackDirective, TInput, TRunCommandDirective, TSemanticFrame, TSemanticFrameSlot, TTextInput, t_directive,
    t_input,
};
use megamind_tools::client::{Client, Turn};
use prost_types::{Struct, Value, value::Kind};

use crate::{
    assistant_harness::{ask, client, metrics_text, spawn, spawn_module, state_of},
    helpers::Transport,
    mock_llm::{MockLlm, Reply},
};

/// The repository's skills folder.
fn skills_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("skills")
}

fn with_skills(dir: PathBuf) -> impl FnOnce(&mut AssistantConfig) {
    move |config: &mut AssistantConfig| config.skills.dir = Some(dir)
}

/// The body of `skills/<name>/SKILL.md` without its front matter, trimmed.
fn skill_body(name: &str) -> String {
    let text = std::fs::read_to_string(skills_dir().join(name).join("SKILL.md")).unwrap();
    let after = text.splitn(3, "---\n").nth(2).unwrap();
    after.trim().to_owned()
}

/// The messages of the mock's `n`th request (from 0) as (role, content).
fn messages(mock: &MockLlm, n: usize) -> Vec<(String, String)> {
    let received = mock.received();
    let body = &received[n].body;
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["role"].as_str().unwrap().to_owned(), m["content"].as_str().unwrap().to_owned()))
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(r, c)| (r.to_string(), c.to_string())).collect()
}

fn run_command(turn: &Turn) -> TRunCommandDirective {
    turn.directives()
        .iter()
        .find_map(|d| match &d.directive {
            Some(t_directive::Directive::RunCommandDirective(run)) => Some(run.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("a RunCommandDirective in {:?}", turn.body()))
}

fn session(turn: &Turn) -> Option<TSkillSession> {
    state_of(turn.body()).skill
}

/// The callback of `run`, its payload completed as a client completes it.
async fn send_result(client: &mut Client, run: &TRunCommandDirective, output: &str, skipped: bool) -> Turn {
    let mut callback: TCallbackDirective = run.callback.clone().expect("a callback");
    let payload = callback.payload.get_or_insert_with(Struct::default);
    let value = |kind| Value { kind: Some(kind) };
    payload.fields.insert("output".into(), value(Kind::StringValue(output.into())));
    payload.fields.insert("exit_code".into(), value(Kind::NumberValue(0.0)));
    payload.fields.insert("skipped".into(), value(Kind::BoolValue(skipped)));
    callback_turn(client, callback).await
}

async fn callback_turn(client: &mut Client, callback: TCallbackDirective) -> Turn {
    let input = TInput { event: Some(t_input::Event::Callback(callback)), ..Default::default() };
    client.send(input).await.expect("the callback is answered")
}

#[tokio::test]
async fn the_reference_git_quick_commit_dialog_runs_end_to_end() {
    let mock = MockLlm::start(Reply::status(500)).await;
    for answer in [
        "[CMD] git status --porcelain",
        "[ASK] Введи сообщение коммита:",
        "[CMD] git add . && git commit -m \"fix: update skills API\"",
        "[DONE] Коммит успешно создан: abc1234. Изменён 1 файл.",
    ] {
        mock.push(Reply::content(answer));
    }
    // The chat's sampling and answer format are its own: a skill's step
    // samples as the skills format says, in free text.
    let server = spawn(&mock, |config| {
        config.skills.dir = Some(skills_dir());
        config.backend.temperature = 0.9;
        config.backend.max_tokens = 96;
        config.backend.extra_body.insert("response_format".into(), serde_json::json!({"type": "json_object"}));
        config.backend.extra_body.insert("top_p".into(), serde_json::json!(0.5));
        config.skills.extra_body.insert("grammar".into(), serde_json::json!("root ::= \"[\" [^\\n]+"));
    })
    .await;
    let mut client = client(&server.app, Transport::Http);

    let system = format!(
        "{}\n\n--- Active Skill: git-quick-commit ---\n{}",
        megamind_assistant::skills::prompt::SKILL_SYSTEM_PROMPT_WITH_ASK,
        skill_body("git-quick-commit")
    );
    let step1 = "Execute skill: git-quick-commit\n\n[Step 1 of 100]";
    let status = "Command output:\n M server/skills.js\n?? new-file.txt\n\n[Step 2 of 100]";
    let response = "User response: fix: update skills API\n\n[Step 3 of 100]";
    let committed =
        "Command output:\n[main abc1234] fix: update skills API\n 1 file changed, 5 insertions(+)\n\n[Step 4 of 100]";

    // Step 1: the command, as a directive whose callback names the step.
    let turn = ask(&mut client, "Запусти навык git-quick-commit").await;
    assert_eq!(messages(&mock, 0), pairs(&[("system", &system), ("user", step1)]));
    let request = &mock.received()[0].body;
    assert_eq!((request["temperature"].as_f64(), request["max_tokens"].as_u64()), (Some(0.3), Some(512)));
    assert!(request.get("response_format").is_none(), "{request}");
    assert_eq!(request["grammar"], "root ::= \"[\" [^\\n]+", "the skills' own extra_body");
    assert_eq!(request["top_p"], 0.5, "the rest of the chat's extra_body stays");
    let run = run_command(&turn);
    assert_eq!((run.name.as_str(), run.command.as_str()), ("run_command", "git status --porcelain"));
    assert_eq!(run.callback.as_ref().unwrap().name, "skill_command_result");
    assert!(turn.speech().contains("git status --porcelain"), "{}", turn.speech());
    assert!(!turn.body().layout.as_ref().unwrap().should_listen);

    // Step 2: the output comes back; the model asks.
    let turn =
        send_result(&mut client, &run, "\u{1b}[32m M server/skills.js\u{1b}[0m\n?? new-file.txt\n\n", false).await;
    assert_eq!(
        messages(&mock, 1),
        pairs(&[("system", &system), ("user", step1), ("assistant", "[CMD] git status --porcelain"), ("user", status)])
    );
    assert_eq!(turn.speech(), "Введи сообщение коммита:");
    assert!(turn.body().layout.as_ref().unwrap().should_listen, "the microphone stays open for the answer");

    // Step 3: the user's answer; the commit command.
    let turn = ask(&mut client, "fix: update skills API").await;
    assert_eq!(
        messages(&mock, 2),
        pairs(&[
            ("system", &system),
            ("user", step1),
            ("assistant", "[CMD] git status --porcelain"),
            ("user", status),
            ("assistant", "[ASK] Введи сообщение коммита:"),
            ("user", response),
        ])
    );
    let run = run_command(&turn);
    assert_eq!(run.command, "git add . && git commit -m \"fix: update skills API\"");

    // Step 4: done; the session ends.
    let turn = send_result(
        &mut client,
        &run,
        "[main abc1234] fix: update skills API\n 1 file changed, 5 insertions(+)",
        false,
    )
    .await;
    let sent = messages(&mock, 3);
    assert_eq!(sent.len(), 8);
    assert_eq!(sent[6], ("assistant".into(), "[CMD] git add . && git commit -m \"fix: update skills API\"".into()));
    assert_eq!(sent[7], ("user".into(), committed.into()));
    assert_eq!(turn.speech(), "Коммит успешно создан: abc1234. Изменён 1 файл.");
    assert_eq!(session(&turn), None, "[DONE] ends the session");
    assert_eq!(mock.calls(), 4, "one model call per step");
    let metrics = metrics_text(&server.metrics);
    assert!(metrics.contains("megamind_assistant_skill_steps_total{marker=\"cmd\"} 2"), "{metrics}");
    assert!(metrics.contains("megamind_assistant_skill_steps_total{marker=\"done\"} 1"), "{metrics}");

    // The same result sent again is stale: declined, nothing called.
    let turn = send_result(&mut client, &run, "again", false).await;
    assert!(turn.is_irrelevant(), "{:?}", turn.body());
    assert_eq!(mock.calls(), 4);
}

#[tokio::test]
async fn an_answer_in_no_format_runs_its_first_line() {
    let mock = MockLlm::start(Reply::content("git log --oneline -3\nThis shows the last commits.")).await;
    let server = spawn(&mock, with_skills(skills_dir())).await;
    let mut client = client(&server.app, Transport::Http);
    let turn = ask(&mut client, "run skill git-quick-commit").await;
    assert_eq!(run_command(&turn).command, "git log --oneline -3");
    let kept = session(&turn).unwrap();
    assert_eq!(kept.exchanges[0].assistant, "[CMD] git log --oneline -3", "kept as the skills format keeps it");
}

#[tokio::test]
async fn an_optional_question_is_skipped_by_a_skip_phrase_or_silence() {
    let mock = MockLlm::start(Reply::content("[ASK:optional] Тег заметки?")).await;
    let server = spawn(&mock, with_skills(skills_dir())).await;
    let mut client = client(&server.app, Transport::Http);
    let turn = ask(&mut client, "запусти навык project-notes").await;
    assert_eq!(turn.speech(), "Тег заметки?");
    ask(&mut client, "пропусти").await;
    assert_eq!(messages(&mock, 1).last().unwrap().1, "User response: \n\n[Step 2 of 100]");
    // Silence (empty words) skips too.
    let silence = TInput {
        event: Some(t_input::Event::Text(TTextInput { utterance: String::new(), raw_utterance: String::new() })),
        ..Default::default()
    };
    client.send(silence).await.unwrap();
    assert_eq!(messages(&mock, 2).last().unwrap().1, "User response: \n\n[Step 3 of 100]");
    // Words are an answer.
    ask(&mut client, "работа").await;
    assert_eq!(messages(&mock, 3).last().unwrap().1, "User response: работа\n\n[Step 4 of 100]");
}

#[tokio::test]
async fn a_message_goes_on_by_itself() {
    let mock = MockLlm::start(Reply::status(500)).await;
    mock.push(Reply::content("[MESSAGE] Записываю заметку."));
    mock.push(Reply::content("[DONE] Заметка записана."));
    let server = spawn(&mock, with_skills(skills_dir())).await;
    let mut client = client(&server.app, Transport::Http);
    // One user turn: the message, then its callback fetches the next step.
    let turn = ask(&mut client, "запусти навык project-notes").await;
    assert_eq!(turn.speeches(), ["Записываю заметку.", "Заметка записана."], "{:?}", turn.speeches());
    assert_eq!(
        messages(&mock, 1)[3],
        ("user".into(), "[Continue after informational message]\n\n[Step 2 of 100]".into())
    );
    assert_eq!(messages(&mock, 1)[2], ("assistant".into(), "[MESSAGE] Записываю заметку.".into()));
    assert_eq!(session(&turn), None);
    assert_eq!(mock.calls(), 2, "the next step's call ran once, however it was joined");
}

#[tokio::test]
async fn cancel_ends_a_skill_in_any_state() {
    let mock = MockLlm::start(Reply::content("[ASK] Сообщение коммита?")).await;
    let server = spawn(&mock, with_skills(skills_dir())).await;
    let mut client = client(&server.app, Transport::Http);
    let turn = ask(&mut client, "быстрый коммит").await;
    assert_eq!(session(&turn).map(|s| s.skill).as_deref(), Some("git-quick-commit"), "started by its trigger");
    let turn = ask(&mut client, "Отмена!").await;
    assert_eq!(turn.speech(), "Навык «git-quick-commit» остановлен.");
    assert_eq!(session(&turn), None);
    assert_eq!(mock.calls(), 1, "cancel calls no model");

    // While a command runs, too.
    mock.set_default(Reply::content("[CMD] git status"));
    let turn = ask(&mut client, "quick commit").await;
    run_command(&turn);
    let turn = ask(&mut client, "stop").await;
    assert_eq!(session(&turn), None);
}

#[tokio::test]
async fn the_hundredth_step_ends_the_skill() {
    let mock = MockLlm::start(Reply::content("[ASK] Ещё?")).await;
    let server = spawn(&mock, with_skills(skills_dir())).await;
    let mut client = client(&server.app, Transport::Http);
    let mut turn = ask(&mut client, "запусти навык project-notes").await;
    for _ in 1..100 {
        assert_eq!(turn.speech(), "Ещё?");
        turn = ask(&mut client, "да").await;
    }
    assert_eq!(mock.calls(), 100);
    assert_eq!(messages(&mock, 99).last().unwrap().1, "User response: да\n\n[Step 100 of 100]");
    assert!(turn.speech().contains("100 шагов"), "{}", turn.speech());
    assert_eq!(session(&turn), None);
}

#[tokio::test]
async fn the_command_policy_holds_whatever_the_model_says() {
    let mock = MockLlm::start(Reply::status(500)).await;
    let server = spawn(&mock, with_skills(skills_dir())).await;
    let mut client = client(&server.app, Transport::Http);

    // Denied: never sent; the model hears why, and goes on.
    mock.push(Reply::content("[CMD] rm -rf /"));
    mock.push(Reply::content("[DONE] Не получилось."));
    let turn = ask(&mut client, "запусти навык git-quick-commit").await;
    assert!(
        turn.directives().iter().all(|d| !matches!(d.directive, Some(t_directive::Directive::RunCommandDirective(_))))
    );
    assert!(turn.speeches()[0].contains("не выполню"), "{:?}", turn.speeches());
    let refused = &messages(&mock, 1)[3].1;
    assert!(refused.starts_with("Command output:\nCommand refused by policy: "), "{refused}");
    assert!(refused.ends_with("\n\n[Step 2 of 100]"), "{refused}");

    // A model that keeps proposing refused commands stops the skill at the third in a row.
    mock.push(Reply::content("[CMD] rm -rf /"));
    mock.push(Reply::content("[CMD] mkfs /dev/sda"));
    mock.push(Reply::content("[CMD] shutdown now"));
    let calls = mock.calls();
    let turn = ask(&mut client, "запусти навык git-quick-commit").await;
    assert_eq!(mock.calls(), calls + 3);
    assert!(turn.speech().contains("остановлен"), "{:?}", turn.speeches());
    assert_eq!(session(&turn), None, "nothing more is asked");

    // Reading runs in any skill, outside its allowed tools (git only) too.
    mock.push(Reply::content("[CMD] ls -la"));
    let turn = ask(&mut client, "запусти навык git-quick-commit").await;
    assert_eq!(run_command(&turn).command, "ls -la");

    // Destructive, though git is allowed: asked first; "да" sends it, "нет" skips it.
    mock.push(Reply::content("[CMD] git reset --hard"));
    let turn = ask(&mut client, "запусти навык git-quick-commit").await;
    assert!(turn.speech().contains("отбросит несохранённые изменения. Выполнить?"), "{}", turn.speech());
    assert!(turn.body().layout.as_ref().unwrap().should_listen);
    let turn = ask(&mut client, "что это значит").await;
    assert!(turn.speech().contains("«да» или «нет»"), "asked again: {}", turn.speech());
    let turn = ask(&mut client, "да").await;
    assert_eq!(run_command(&turn).command, "git reset --hard");

    mock.push(Reply::content("[CMD] git push --force"));
    mock.push(Reply::content("[DONE] Пропущено."));
    ask(&mut client, "запусти навык git-quick-commit").await;
    let calls = mock.calls();
    let turn = ask(&mut client, "нет").await;
    assert_eq!(mock.calls(), calls + 1);
    assert_eq!(messages(&mock, calls).last().unwrap().1, "User skipped the command.\n\n[Step 2 of 100]");
    assert_eq!(turn.speech(), "Пропущено.");
    let metrics = metrics_text(&server.metrics);
    assert!(metrics.contains("megamind_assistant_skill_commands_total{verdict=\"deny\"} 4"), "{metrics}");
    assert!(metrics.contains("megamind_assistant_skill_commands_total{verdict=\"ask\"} 2"), "{metrics}");
}

#[tokio::test]
async fn a_skipped_command_and_a_stale_or_foreign_result_are_told_apart() {
    let mock = MockLlm::start(Reply::content("[CMD] git status")).await;
    let server = spawn(&mock, with_skills(skills_dir())).await;
    let mut client = client(&server.app, Transport::Http);
    let first = run_command(&ask(&mut client, "запусти навык git-quick-commit").await);

    // A result naming another session (or step) moves nothing.
    let mut foreign = first.clone();
    let payload = foreign.callback.as_mut().unwrap().payload.as_mut().unwrap();
    payload.fields.insert("session".into(), Value { kind: Some(Kind::StringValue("someone-else".into())) });
    let turn = send_result(&mut client, &foreign, "x", false).await;
    assert!(turn.is_irrelevant());
    assert_eq!(mock.calls(), 1);
    let mut stale = first.clone();
    let payload = stale.callback.as_mut().unwrap().payload.as_mut().unwrap();
    payload.fields.insert("step".into(), Value { kind: Some(Kind::NumberValue(7.0)) });
    assert!(send_result(&mut client, &stale, "x", false).await.is_irrelevant());

    // Words while the command runs: the session waits on.
    let turn = ask(&mut client, "ну что там").await;
    assert!(turn.speech().contains("Жду результата"), "{}", turn.speech());
    assert_eq!(mock.calls(), 1);

    // The client skipped it.
    send_result(&mut client, &first, "", true).await;
    assert_eq!(messages(&mock, 1).last().unwrap().1, "User skipped the command.\n\n[Step 2 of 100]");
}

#[tokio::test]
async fn a_frame_starts_a_skill_with_its_parameters_and_unknown_names_get_suggestions() {
    let mock = MockLlm::start(Reply::content("[CMD] df -h")).await;
    let server = spawn(&mock, with_skills(skills_dir())).await;
    let mut client = client(&server.app, Transport::Http);
    let slot =
        |name: &str, value: &str| TSemanticFrameSlot { name: name.into(), value: value.into(), ..Default::default() };
    let frame = TSemanticFrame {
        name: "run_skill".into(),
        slots: vec![slot("skill", "disk-usage"), slot("path", "/var"), slot("top", "5")],
    };
    let input = TInput { semantic_frames: vec![frame], ..Default::default() };
    let turn = client.send(input).await.unwrap();
    assert_eq!(run_command(&turn).command, "df -h");
    assert_eq!(
        messages(&mock, 0)[1].1,
        "Execute skill: disk-usage\n\nParameters:\n- path: /var\n- top: 5\n\n[Step 1 of 100]"
    );

    let turn = ask(&mut client, "запусти навык disk usag").await;
    assert!(turn.speech().contains("disk-usage"), "{}", turn.speech());
    assert!(turn.speech().starts_with("Навыка «disk-usag» нет"), "{}", turn.speech());
    let turn = ask(&mut client, "какие навыки есть").await;
    assert_eq!(turn.speech(), "Навыки: disk-usage, git-quick-commit, project-notes.");
    assert_eq!(mock.calls(), 1);
}

#[tokio::test]
async fn without_a_model_skills_are_listed_but_not_run() {
    let metrics = prometheus::Registry::new();
    let mut config = AssistantConfig::default();
    config.skills.dir = Some(skills_dir());
    let assistant = megamind_assistant::Assistant::from_config(&config, &metrics).unwrap();
    let registry = crate::helpers::registry_of("assistant", std::sync::Arc::new(assistant));
    let app = crate::helpers::spawn_app(megamind_core::config::Config::default(), registry).await;
    let mut client = client(&app, Transport::Http);
    let turn = ask(&mut client, "запусти навык git-quick-commit").await;
    assert!(turn.speech().contains("--llm-base-url"), "{}", turn.speech());
    assert!(turn.speech().contains("git-quick-commit, project-notes"), "{}", turn.speech());
}

fn write_skill(dir: &std::path::Path, folder: &str, text: &str) {
    std::fs::create_dir_all(dir.join(folder)).unwrap();
    std::fs::write(dir.join(folder).join("SKILL.md"), text).unwrap();
}

/// Polls `/metrics` text until `wanted` shows up, for up to 10 s.
async fn until_metrics(metrics: &prometheus::Registry, wanted: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = metrics_text(metrics);
        if text.contains(wanted) || tokio::time::Instant::now() > deadline {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn malformed_skills_are_skipped_counted_and_the_folder_is_watched() {
    let dir = tempdir("skills-watch");
    write_skill(&dir, "good", "---\nname: good\ndescription: A good skill.\n---\nDo good.\n");
    write_skill(&dir, "bad", "---\nname: bad\n---\nno description\n");
    write_skill(&dir, "worse", "no front matter at all");
    let mock = MockLlm::start(Reply::content("[DONE] Готово.")).await;
    let server = spawn(&mock, with_skills(dir.clone())).await;
    let text = metrics_text(&server.metrics);
    assert!(text.contains("megamind_assistant_skills_loaded 1"), "{text}");
    assert!(text.contains("megamind_assistant_skills_invalid 2"), "{text}");

    let mut client = client(&server.app, Transport::Http);
    assert_eq!(ask(&mut client, "какие навыки").await.speech(), "Навыки: good.");
    write_skill(&dir, "bad", "---\nname: bad\ndescription: Fixed now.\n---\nBody.\n");
    let text = until_metrics(&server.metrics, "megamind_assistant_skills_loaded 2").await;
    assert!(text.contains("megamind_assistant_skills_loaded 2"), "reloaded on change: {text}");
    assert_eq!(ask(&mut client, "какие навыки").await.speech(), "Навыки: bad, good.");
    let turn = ask(&mut client, "run skill bad").await;
    assert_eq!(turn.speech(), "Готово.");
    // A new folder with its file written by the next command, as from a
    // shell: the file may come before the new folder's watch is in place,
    // and each one is found all the same.
    for n in 0..8 {
        let script =
            format!("mkdir new{n} && printf -- '---\\nname: other{n}\\n---\\nno description\\n' > new{n}/SKILL.md");
        let made = std::process::Command::new("sh").arg("-c").arg(&script).current_dir(&dir).status().unwrap();
        assert!(made.success(), "{script}");
        let wanted = format!("megamind_assistant_skills_invalid {}", 2 + n);
        let text = until_metrics(&server.metrics, &wanted).await;
        assert!(text.contains(&wanted), "new{n} read: {text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{name}-{}-{:?}", std::process::id(), std::thread::current().id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn the_catalog_is_served_at_llm_skills_whole_or_in_parts() {
    let mock = MockLlm::start(Reply::content("[DONE] ok")).await;
    let app = &spawn_module(&mock, |config| config.skills.dir = Some(skills_dir())).await;
    let wrapper: serde_json::Value = app.http.get(app.url("/llm/skills")).send().await.unwrap().json().await.unwrap();
    assert_eq!(wrapper["is_consequential"], false);
    let skills = wrapper["content"]["skills"].as_array().unwrap();
    let names: Vec<&str> = skills.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["disk-usage", "git-quick-commit", "project-notes"]);
    assert_eq!(skills[1]["allowed_tools"], serde_json::json!(["Bash(git:*)"]));
    assert!(skills[1]["triggers"].as_array().unwrap().iter().any(|t| t == "быстрый коммит"));
    assert!(skills[0]["parameters"].as_array().unwrap().iter().any(|p| p["name"] == "path"));
    assert!(skills.iter().all(|s| s.get("body").is_none()), "the instructions stay with the model");

    let small = spawn_module(&mock, |config| {
        config.skills.dir = Some(skills_dir());
        config.llm.chunk_bytes = 128;
    })
    .await;
    let whole = megamind_assistant::parts::fetch_all(&small.http, &small.url("/llm/skills")).await.unwrap();
    assert_eq!(whole, wrapper["content"], "in parts, the same catalog");
}
