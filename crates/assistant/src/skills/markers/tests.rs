use super::*;

fn ask(question: &str, optional: bool) -> Step {
    Step::Ask { question: question.into(), optional }
}

#[test]
fn the_five_marker_formats() {
    let cases = [
        ("[CMD] git status --porcelain", Step::Command("git status --porcelain".into())),
        ("[ASK] Введи сообщение коммита:", ask("Введи сообщение коммита:", false)),
        (
            "[ASK:optional] Хочешь добавить тег? (оставь пустым для пропуска):",
            ask("Хочешь добавить тег? (оставь пустым для пропуска):", true),
        ),
        ("[MESSAGE] Обрабатываю папку 1 из 3...", Step::Message("Обрабатываю папку 1 из 3...".into())),
        ("[DONE] Коммит успешно создан: abc1234", Step::Done("Коммит успешно создан: abc1234".into())),
    ];
    for (answer, expected) in cases {
        let step = parse(answer);
        assert_eq!(step, expected, "{answer:?}");
        // The history keeps the answer in its canonical form (docs/skills.md#markers).
        assert_eq!(step.content(), answer);
    }
}

#[test]
fn an_answer_in_no_format_is_the_command_of_its_first_line() {
    let step = parse("git log --oneline -5\nThis shows the last commits.");
    assert_eq!(step, Step::Command("git log --oneline -5".into()));
    assert_eq!(step.content(), "[CMD] git log --oneline -5");
}

#[test]
fn whitespace_case_and_lines() {
    let cases = [
        ("  [CMD]   git status  \n", Step::Command("git status".into())),
        ("[CMD]git status", Step::Command("git status".into())),
        ("[cmd] ls", Step::Command("ls".into())),
        ("[Ask:Optional] tag?", ask("tag?", true)),
        ("[CMD]\n```bash\ngit diff\n```", Step::Command("git diff".into())),
        ("[CMD] `git diff --stat`", Step::Command("git diff --stat".into())),
        ("[CMD] git add .\nThis stages everything.", Step::Command("git add .".into())),
        ("[ASK] Which branch?\n1. main\n2. dev\n", ask("Which branch?\n1. main\n2. dev", false)),
        ("[DONE]\nAll done.\n\nBye.", Step::Done("All done.\n\nBye.".into())),
        ("[MESSAGE]", Step::Message(String::new())),
        ("\n\n[MESSAGE] step 2\r\n", Step::Message("step 2".into())),
        ("Sure!\n[CMD] git status", Step::Command("git status".into())),
        ("[ASKED] what", Step::Command("[ASKED] what".into())),
        ("[ASK]: colon kept", ask(": colon kept", false)),
        ("", Step::Command(String::new())),
        ("   \n \n", Step::Command(String::new())),
        ("`ls -la`", Step::Command("ls -la".into())),
        ("[CMD]", Step::Command(String::new())),
    ];
    for (answer, expected) in cases {
        assert_eq!(parse(answer), expected, "{answer:?}");
    }
}

#[test]
fn content_is_bounded_at_a_char_boundary() {
    let long = format!("[DONE] {}", "я".repeat(MAX_CONTENT_BYTES));
    let Step::Done(text) = parse(&long) else { panic!("not done") };
    assert!(text.len() <= MAX_CONTENT_BYTES);
    let long_lines = format!("[ASK] q\n{}", "ab\n".repeat(MAX_CONTENT_BYTES));
    let Step::Ask { question, .. } = parse(&long_lines) else { panic!("not ask") };
    assert!(question.len() <= MAX_CONTENT_BYTES);
    let Step::Command(command) = parse(&"é".repeat(MAX_CONTENT_BYTES)) else { panic!("not cmd") };
    assert!(command.len() <= MAX_CONTENT_BYTES);
}
