use super::*;
use crate::skills::{
    catalog,
    markers::{Step, parse},
    output::{DEFAULT_MAX_BYTES, clean},
};

const BODY: &str = "## What I do\n\nЯ выполняю следующие шаги:\n1. Запускаю `git status --porcelain`";

#[test]
fn the_base_prompt_is_the_formats() {
    let prompt = SKILL_SYSTEM_PROMPT_WITH_ASK;
    assert!(prompt.starts_with("You are a terminal AI assistant executing a multi-step skill.\n\nRESPONSE FORMAT"));
    assert!(prompt.contains("   Examples: \"Введи сообщение коммита:\", \"Продолжить? (yes/no):\"\n"));
    assert!(prompt.ends_with("- [DONE]: summarize what was accomplished"));
    assert_eq!(prompt.lines().count(), 32);
    assert_eq!(prompt.chars().count(), 1388);
    assert_eq!(prompt.len(), 1490);
}

#[test]
fn the_system_message_joins_its_parts_as_the_format_shows() {
    let message = system_message(None, "git-quick-commit", &format!("\n{BODY}\n\n"));
    assert_eq!(message, format!("{SKILL_SYSTEM_PROMPT_WITH_ASK}\n\n--- Active Skill: git-quick-commit ---\n{BODY}"));
    let with_context = system_message(Some("Server: Ubuntu 24.04\n"), "git-quick-commit", BODY);
    assert_eq!(
        with_context,
        format!(
            "{SKILL_SYSTEM_PROMPT_WITH_ASK}\n\n--- System Context ---\nServer: Ubuntu 24.04\n\n--- Active Skill: git-quick-commit ---\n{BODY}"
        )
    );
    assert_eq!(system_message(Some("  \n"), "x", "b"), system_message(None, "x", "b"));
}

#[test]
fn the_initial_message_with_and_without_parameters() {
    assert_eq!(initial_message("git-quick-commit", None, &[]), "Execute skill: git-quick-commit\n\n[Step 1 of 100]");
    let parameters = [("param1".to_string(), "value1".to_string()), ("param2".to_string(), "value2".to_string())];
    assert_eq!(
        initial_message("s", None, &parameters),
        "Execute skill: s\n\nParameters:\n- param1: value1\n- param2: value2\n\n[Step 1 of 100]"
    );
    assert_eq!(
        initial_message("s", Some("закоммить всё"), &parameters[..1]),
        "закоммить всё\n\nParameters:\n- param1: value1\n\n[Step 1 of 100]"
    );
}

#[test]
fn the_step_messages_of_section_4() {
    assert_eq!(command_skipped(3), "User skipped the command.\n\n[Step 3 of 100]");
    assert_eq!(user_response("", 4), "User response: \n\n[Step 4 of 100]");
    assert_eq!(continue_after_message(5), "[Continue after informational message]\n\n[Step 5 of 100]");
    assert_eq!(command_output("", 6), "Command output:\n(no output)\n\n[Step 6 of 100]");
    assert_eq!(
        command_refused("deletes the root folder", 7),
        "Command output:\nCommand refused by policy: deletes the root folder\n\n[Step 7 of 100]"
    );
}

/// The `git-quick-commit` reference dialog (docs/skills.md#a-whole-session): the
/// message each step adds and the model's answers as the history keeps them.
#[test]
fn the_reference_dialog_byte_for_byte() {
    // The system message, from the `git-quick-commit` skill as the catalog loads it.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/skills");
    let (catalog, _) = catalog::Catalog::load(&dir);
    let skill = catalog.get("git-quick-commit").expect("the git-quick-commit skill");
    let system = system_message(None, &skill.name, &skill.body);
    let (base, skill_part) = system.split_once("\n\n--- Active Skill: ").expect("the skill part");
    assert!(base.starts_with("You are a terminal AI assistant") && base == SKILL_SYSTEM_PROMPT_WITH_ASK);
    assert!(skill_part.starts_with("git-quick-commit ---\n## What I do\n"));
    // Step 1.
    assert_eq!(initial_message("git-quick-commit", None, &[]), "Execute skill: git-quick-commit\n\n[Step 1 of 100]");
    let answer = parse("[CMD] git status --porcelain");
    assert_eq!(answer, Step::Command("git status --porcelain".into()));
    assert_eq!(answer.content(), "[CMD] git status --porcelain");
    // Step 2: the terminal's raw output, cleaned.
    let raw = "\x1b[?2004hme@box:~/repo$ git status --porcelain\r\n\x1b[31m M\x1b[m server/skills.js\r\n\x1b[31m??\x1b[m new-file.txt\r\n\r\n";
    let output = clean(raw, DEFAULT_MAX_BYTES);
    assert_eq!(command_output(&output, 2), "Command output:\n M server/skills.js\n?? new-file.txt\n\n[Step 2 of 100]");
    // The same message for one changed file.
    assert_eq!(command_output(" M server/skills.js", 2), "Command output:\n M server/skills.js\n\n[Step 2 of 100]");
    let answer = parse("[ASK] Введи сообщение коммита:");
    assert_eq!(answer.content(), "[ASK] Введи сообщение коммита:");
    // Step 3.
    assert_eq!(user_response("fix: update skills API", 3), "User response: fix: update skills API\n\n[Step 3 of 100]");
    let answer = parse("[CMD] git add . && git commit -m \"fix: update skills API\"");
    assert_eq!(answer.content(), "[CMD] git add . && git commit -m \"fix: update skills API\"");
    // Step 4.
    let output = clean("[main abc1234] fix: update skills API\n 1 file changed, 5 insertions(+)\n", DEFAULT_MAX_BYTES);
    assert_eq!(
        command_output(&output, 4),
        "Command output:\n[main abc1234] fix: update skills API\n 1 file changed, 5 insertions(+)\n\n[Step 4 of 100]"
    );
    let answer = parse("[DONE] Коммит успешно создан: abc1234. Изменён 1 файл.");
    assert_eq!(answer, Step::Done("Коммит успешно создан: abc1234. Изменён 1 файл.".into()));
}
