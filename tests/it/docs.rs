//! The examples of README.md and docs/ work as written: their TOML loads,
//! the files they name exist, and their commands give the answers shown.

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use megamind_core::{config::Config, rules::metrics::ServerMetrics, scenario::module};
use megamind_scenario::scenarios;

use crate::helpers::spawn_builtin;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(root().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// The fenced blocks of `markdown` whose info string is `lang`.
fn blocks<'a>(markdown: &'a str, lang: &str) -> Vec<&'a str> {
    let fence = format!("```{lang}\n");
    markdown.split(&fence).skip(1).map(|rest| rest.split("```").next().expect("a closed block")).collect()
}

#[test]
fn every_toml_example_loads_and_sets_up_the_scenarios() {
    // Relative paths in the examples are read from the repository's root, as
    // the docs say; the tests run there.
    assert_eq!(std::env::current_dir().expect("cwd").canonicalize().unwrap(), root().canonicalize().unwrap());
    let mut checked = 0;
    for doc in ["README.md", "docs/assistant.md", "docs/grpc.md", "docs/skills.md"] {
        for block in blocks(&read(doc), "toml") {
            let config = Config::from_toml(block).unwrap_or_else(|e| panic!("{doc}: {e}\n{block}"));
            config.validate().unwrap_or_else(|e| panic!("{doc}: {e}\n{block}"));
            module::build_all(&scenarios::modules(), &config.scenarios, ServerMetrics::new().registry())
                .unwrap_or_else(|e| panic!("{doc}: {e}\n{block}"));
            checked += 1;
        }
    }
    assert!(checked >= 2, "the README's and the assistant's TOML examples were found");
}

#[test]
fn the_skills_script_example_loads() {
    let doc = read("docs/skills.md");
    let scripts: Vec<&str> = blocks(&doc, "yaml").into_iter().filter(|b| b.starts_with("dialogs:")).collect();
    assert_eq!(scripts.len(), 1, "the command_result example");
    let loaded = megamind_tools::dialog::script::parse("docs/skills.md", scripts[0]).unwrap();
    assert!(loaded.dialogs[0].0.turns.iter().any(|turn| turn.command_result.is_some()));
}

#[test]
fn the_shipped_system_prompt_is_the_built_in_one() {
    let shipped = read("docs/system-prompt.txt");
    assert_eq!(shipped.trim(), megamind_assistant::dialog::prompt::DEFAULT_SYSTEM_PROMPT.trim());
    let table = blocks(&read("docs/assistant.md"), "toml").concat();
    assert!(table.contains(r#"system_prompt_file = "docs/system-prompt.txt""#), "{table}");
}

#[test]
fn no_document_names_a_source_text_by_number() {
    // "seed 000" means nothing to a reader: the docs say what the format is.
    let mut files = vec![root().join("README.md")];
    for dir in ["docs", "deploy", "src"] {
        collect(&root().join(dir), &mut files);
    }
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else { continue };
        for (n, line) in text.lines().enumerate() {
            let lower = line.to_lowercase();
            assert!(
                !["seed 000", "seed 001", "seed-000", "seed-001"].iter().any(|word| lower.contains(word)),
                "{}:{}: {line}",
                file.display(),
                n + 1
            );
        }
    }
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            collect(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// `megamind-scenario ARGS < input`, as the docs run it; its stdout.
fn binary(args: &[&str], input: &[u8]) -> Vec<u8> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_megamind-scenario"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    child.stdin.take().expect("stdin").write_all(input).expect("write stdin");
    let output = child.wait_with_output().expect("the binary finishes");
    assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
    output.stdout
}

#[tokio::test]
async fn the_assistant_quick_start_answers_as_shown() {
    let doc = read("docs/assistant.md");
    let script = blocks(&doc, "sh").into_iter().find(|b| b.contains("cat > run.txt")).expect("the quick start turn");
    let request = script.split("<<'EOF'\n").nth(1).and_then(|rest| rest.split("\nEOF").next()).expect("a heredoc");
    let shown = blocks(&doc, "").into_iter().find(|b| b.contains("OpenAppDirective")).expect("the answer shown");

    let app = spawn_builtin(Config::default()).await;
    let body =
        binary(&["convert", "-t", "TScenarioRunRequest", "--from", "text", "--to", "binary"], request.as_bytes());
    let (status, answer) = app.post_binary("/assistant/run", body).await;
    assert_eq!(status, 200);
    let answer = binary(&["convert", "-t", "TScenarioRunResponse", "--from", "binary", "--to", "text"], &answer);
    let answer = String::from_utf8(answer).expect("text format is UTF-8");
    for line in [
        r#"Intent: "assistant""#,
        r#"Text: "Открываю Safari.""#,
        r#"OutputSpeech: "Открываю Safari.""#,
        r#"AppName: "Safari""#,
        "[type.googleapis.com/megamind_scenario.v1.TAssistantState] {",
    ] {
        assert!(shown.contains(line), "the docs show {line}");
        assert!(answer.contains(line), "the answer has {line}:\n{answer}");
    }
}
