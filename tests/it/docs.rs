//! The examples of README.md and docs/ work as written: their TOML loads,
//! the files they name exist, and their commands give the answers shown.
//! The repository's texts stand on their own: none points at a document it
//! does not ship, and every relative link and `docs/` page named resolves.

use std::path::{Path, PathBuf};

use megamind_core::{config::Config, rules::metrics::ServerMetrics, scenario::module};
use megamind_scenario::scenarios;

use crate::helpers::{run_binary, served_config, spawn_builtin};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub(crate) fn read(relative: &str) -> String {
    std::fs::read_to_string(root().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// The fenced blocks of `markdown` whose info string is `lang`.
pub(crate) fn blocks<'a>(markdown: &'a str, lang: &str) -> Vec<&'a str> {
    let fence = format!("```{lang}\n");
    markdown.split(&fence).skip(1).map(|rest| rest.split("```").next().expect("a closed block")).collect()
}

#[test]
fn every_toml_example_loads_and_sets_up_the_scenarios() {
    // Relative paths in the examples are read from the repository's root, as
    // the docs say; the tests run there.
    assert_eq!(std::env::current_dir().expect("cwd").canonicalize().unwrap(), root().canonicalize().unwrap());
    let mut checked = 0;
    for doc in
        ["README.md", "docs/auth.md", "docs/configuration.md", "docs/assistant.md", "docs/grpc.md", "docs/skills.md"]
    {
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
fn the_readme_leads_to_writing_a_scenario_and_links_the_rest() {
    // A newcomer runs the server, tries it, then writes a scenario: that is
    // the first screen. The reference (configuration, benchmarks, operating
    // it) is a line and a link each, in docs/ and deploy/.
    let readme = read("README.md");
    let sections: Vec<&str> = readme.lines().filter_map(|line| line.strip_prefix("## ")).collect();
    let first =
        ["Try it", "Writing a scenario", "Dialogs: debugging and regression scripts", "Trying it with a real model"];
    assert_eq!(sections.get(..first.len()), Some(&first[..]), "{sections:?}");
    let scenario = readme.lines().position(|line| line == "## Writing a scenario").expect("the section");
    assert!(scenario < 80, "writing a scenario starts on line {}, past the first screen", scenario + 1);
    for page in [
        "docs/configuration.md",
        "docs/configuration.md#limits",
        "docs/configuration.md#the-stream-lane",
        "docs/grpc.md",
        "docs/benchmarks.md",
        "docs/benchmarks.md#hostile-clients",
        "fuzz/README.md",
        "docs/architecture.md",
        "deploy/README.md",
        "docs/production.md",
        "docs/replicas.md",
    ] {
        assert!(readme.contains(&format!("]({page})")), "README links {page}");
    }
}

#[test]
fn the_readme_s_scenario_code_is_the_example_s_as_it_is() {
    // The example and its test compile with the crate: README's copies of
    // them cannot drift from code that builds.
    let module = read("examples/echo_scenario/echo.rs");
    let test = read("tests/it/example_scenario.rs");
    let readme = read("README.md");
    let (mut modules, mut tests) = (0, 0);
    for block in blocks(&readme, "rust") {
        if block.starts_with("#[tokio::test]") {
            assert!(test.contains(block), "README's test is not in tests/it/example_scenario.rs:\n{block}");
            tests += 1;
        } else {
            assert!(module.contains(block), "README's block is not in examples/echo_scenario/echo.rs:\n{block}");
            modules += 1;
        }
    }
    assert!(modules >= 1 && tests == 1, "README shows the example's module and its test");
    assert!(readme.contains("tests/it/example_scenario.rs"), "README names the test's file");
}

#[test]
fn the_real_model_configuration_reads_every_key_in_its_section() {
    let config = Config::from_toml(&read("scripts/real-model.toml")).expect("scripts/real-model.toml");
    config.validate().expect("valid");
    let table = module::table_of(&megamind_assistant::AssistantModule::default(), config.scenarios.get("assistant"));
    let assistant = megamind_assistant::module::config_of(table).expect("the [assistant] table");
    assistant.validate().expect("valid");
    assert_eq!((assistant.backend.kind(), assistant.backend.max_tokens), ("openai", 96));
    assert_eq!(assistant.calls.call_timeout_ms, 20_000);
    assert!(assistant.backend.extra_body.contains_key("response_format"), "{:?}", assistant.backend.extra_body);
    assert!(assistant.skills.extra_body.contains_key("grammar"));
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

/// The repository's root: the nearest folder above the package holding
/// `README.md` and `docs/` (the package itself, or a workspace's root).
pub(crate) fn repository() -> PathBuf {
    let package = root();
    package
        .ancestors()
        .find(|dir| dir.join("README.md").is_file() && dir.join("docs").is_dir())
        .unwrap_or(&package)
        .to_path_buf()
}

/// Folders no text is read from: build output, git, and the fuzz corpora
/// (inputs, not documents; `fuzz/seeds` names the committed corpus).
const SKIPPED: &[&str] = &["fuzz/seeds", "fuzz/corpus", "fuzz/artifacts", "fuzz/target", "fuzz/coverage"];
/// What a reader reads: documents, code comments, schemas, configs, scripts.
const TEXTS: &[&str] = &["md", "rs", "proto", "toml", "yaml", "yml", "sh", "py", "txt"];

/// Every text file of the repository, by path relative to its root.
pub(crate) fn texts() -> Vec<(String, PathBuf)> {
    fn walk(top: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("dir entry").path();
            let relative = path.strip_prefix(top).expect("under the root").to_string_lossy().replace('\\', "/");
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if path.is_dir() {
                if name != ".git" && name != "target" && !SKIPPED.contains(&relative.as_str()) {
                    walk(top, &path, out);
                }
            } else if path.extension().is_some_and(|ext| TEXTS.contains(&&*ext.to_string_lossy())) {
                out.push((relative, path));
            }
        }
    }
    let top = repository();
    let mut out = Vec::new();
    walk(&top, &top, &mut out);
    out.sort();
    out
}

/// What of `line` a reader reads: in Rust its comment (a `//` line, or what
/// follows ` // ` after code), since test names and literals are code;
/// elsewhere the whole line.
fn prose<'a>(relative: &str, line: &'a str) -> &'a str {
    if !relative.ends_with(".rs") {
        return line;
    }
    let trimmed = line.trim_start();
    if trimmed.starts_with("//") { trimmed } else { line.find(" // ").map_or("", |at| &line[at..]) }
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// How `text` points at a text the repository does not ship, if it does:
/// the project's brief by name, a source document by number or as "the
/// seed", a section sign that is not an RFC's. Matched on words, so
/// `fuzz/seeds`, `seeds.sh`, "seeded" and `RandomSeed` are fine.
fn foreign_reference(text: &str) -> Option<&'static str> {
    // Split, so that this file's own needles do not match it.
    const BRIEF: &str = concat!("SP", "EC");
    const SEED: &str = concat!("se", "ed");
    const SHARED: [&str; 2] = [concat!("../sha", "red"), concat!("shared/", "seeds")];
    let word_at = |at: usize| {
        !text[..at].chars().next_back().is_some_and(is_word)
            && !text[at + BRIEF.len()..].chars().next().is_some_and(is_word)
    };
    if text.match_indices(BRIEF).any(|(at, _)| word_at(at)) {
        return Some("names the project's brief");
    }
    if SHARED.iter().any(|needle| text.contains(needle)) {
        return Some("points outside the repository");
    }
    let lower = text.to_lowercase();
    for (at, _) in lower.match_indices(SEED) {
        if lower[..at].chars().next_back().is_some_and(|c| is_word(c) || c == '/') {
            continue;
        }
        let after = &lower[at + SEED.len()..];
        if after.starts_with("'s") || after.starts_with("\u{2019}s") {
            return Some("names a source document (its possessive)");
        }
        let number = after.strip_prefix('s').unwrap_or(after);
        let number = number.strip_prefix([' ', '-']).unwrap_or(number);
        if number.starts_with(|c: char| c.is_ascii_digit() || c == '\u{a7}') {
            return Some("names a source document by number");
        }
        let whole = !after.starts_with(is_word);
        if whole && lower[..at].ends_with("the ") {
            return Some("names a source document");
        }
    }
    for (at, _) in text.match_indices('\u{a7}') {
        let before = text[..at].trim_end();
        let digits = before.trim_end_matches(|c: char| c.is_ascii_digit());
        if digits.len() == before.len() || !digits.trim_end().ends_with("RFC") {
            return Some("cites a section of a text the repository does not ship");
        }
    }
    None
}

#[test]
fn the_needles_find_references_and_spare_other_words() {
    let s = concat!("se", "ed");
    let brief = concat!("SP", "EC");
    for hit in [
        format!("the {s}'s prompts"),
        format!("({s} 002)"),
        format!("{s}-000 JSON"),
        format!("{}s 000-003", s),
        format!("{s} \u{a7}5"),
        format!("The {s} is silent"),
        format!("({brief} \u{a7}2.1)"),
        format!("{brief}.md"),
        "(\u{a7}4.2)".to_owned(),
    ] {
        assert!(foreign_reference(&hit).is_some(), "{hit}");
    }
    for fine in [
        format!("fuzz/{s}s/skill_turn"),
        format!("./{s}s.sh"),
        format!("near the {s}s"),
        format!("({s}ed, so runs are alike)"),
        format!("Random{}", "Seed"),
        format!("tests/it/{s}_fetch_all.py"),
        format!("## {}s", "Seed"),
        "allowed (RFC 9112 \u{a7}2.2)".to_owned(),
        "spec.template.spec".to_owned(),
    ] {
        assert_eq!(foreign_reference(&fine), None, "{fine}");
    }
}

#[test]
fn no_text_points_at_a_document_the_repository_does_not_ship() {
    // "See the brief" means nothing to a reader: what a contract says is
    // written in docs/, and the code links there.
    let mut found = Vec::new();
    let files = texts();
    for (relative, path) in &files {
        let Ok(text) = std::fs::read_to_string(path) else { continue };
        for (n, line) in text.lines().enumerate() {
            if let Some(why) = foreign_reference(prose(relative, line)) {
                found.push(format!("{relative}:{}: {why}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(files.iter().any(|(relative, _)| relative == "docs/jsonseq.md"), "the walk reads docs/");
    assert!(found.is_empty(), "{} references:\n{}", found.len(), found.join("\n"));
}

/// GitHub's anchors of `markdown`'s headings (fenced code aside): lower
/// case, letters, digits, `-` and `_` kept, spaces as `-`, the rest
/// dropped; a repeated one gets `-1`, `-2`, ...
fn anchors(markdown: &str) -> std::collections::HashSet<String> {
    let mut seen = std::collections::HashMap::<String, usize>::new();
    let mut out = std::collections::HashSet::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(title) = line.strip_prefix('#').map(|rest| rest.trim_start_matches('#')) else { continue };
        if fenced || !title.starts_with(' ') {
            continue;
        }
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if is_word(c) || c == '-' => Some(c),
                _ => None,
            })
            .collect();
        let count = seen.entry(slug.clone()).or_default();
        out.insert(if *count == 0 { slug.clone() } else { format!("{slug}-{count}") });
        *count += 1;
    }
    out
}

/// Whether `target` (a path, perhaps with `#anchor`) names a file under
/// `base`, and, for a Markdown file, one of its headings.
fn resolves(base: &Path, target: &str) -> Result<(), String> {
    let (file, anchor) = target.split_once('#').map_or((target, None), |(file, anchor)| (file, Some(anchor)));
    let path = base.join(file);
    if !path.exists() {
        return Err(format!("no file {}", path.display()));
    }
    match anchor {
        Some(anchor) if path.extension().is_some_and(|ext| ext == "md") => {
            let text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
            if anchors(&text).contains(anchor) { Ok(()) } else { Err(format!("no heading #{anchor}")) }
        }
        _ => Ok(()),
    }
}

#[test]
fn every_relative_link_and_docs_mention_resolves() {
    let top = repository();
    let mention = regex::Regex::new(r"\bdocs/[A-Za-z0-9_-]+\.md(#[A-Za-z0-9_-]+)?").expect("a valid pattern");
    let mut broken = Vec::new();
    let mut links = 0;
    for (relative, path) in texts() {
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        let dir = path.parent().expect("a file's folder");
        let markdown = relative.ends_with(".md");
        let mut fenced = false;
        for (n, line) in text.lines().enumerate() {
            let at = format!("{relative}:{}", n + 1);
            // A docs/ page named in a comment or a document (with its anchor) is named from the root.
            for found in mention.find_iter(prose(&relative, line)) {
                if let Err(why) = resolves(&top, found.as_str()) {
                    broken.push(format!("{at}: {}: {why}", found.as_str()));
                }
            }
            if !markdown {
                continue;
            }
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
            }
            if fenced {
                continue;
            }
            // `[text](target)`: a relative target names a file from the document's folder.
            for (start, _) in line.match_indices("](") {
                let rest = &line[start + 2..];
                let Some(end) = rest.find(')') else { continue };
                let target = rest[..end].split_whitespace().next().unwrap_or("");
                if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                links += 1;
                let checked = match target.strip_prefix('#') {
                    Some(anchor) if anchors(&text).contains(anchor) => Ok(()),
                    Some(anchor) => Err(format!("no heading #{anchor}")),
                    None => resolves(dir, target),
                };
                if let Err(why) = checked {
                    broken.push(format!("{at}: ({target}): {why}"));
                }
            }
        }
    }
    assert!(links >= 10, "the README's and docs' links were read: {links}");
    assert!(broken.is_empty(), "{} broken:\n{}", broken.len(), broken.join("\n"));
}

/// `megamind-scenario ARGS < input`, as the docs run it; its stdout.
fn run_as_documented(args: &[&str], input: &[u8]) -> Vec<u8> {
    let output = run_binary(args, input);
    assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
    output.stdout
}

#[tokio::test]
async fn the_assistant_quick_start_answers_as_shown() {
    let doc = read("docs/assistant.md");
    let script = blocks(&doc, "sh").into_iter().find(|b| b.contains("cat > run.txt")).expect("the quick start turn");
    let request = script.split("<<'EOF'\n").nth(1).and_then(|rest| rest.split("\nEOF").next()).expect("a heredoc");
    let shown = blocks(&doc, "").into_iter().find(|b| b.contains("OpenAppDirective")).expect("the answer shown");

    let app = spawn_builtin(served_config()).await;
    let body = run_as_documented(
        &["convert", "-t", "TScenarioRunRequest", "--from", "text", "--to", "binary"],
        request.as_bytes(),
    );
    let (status, answer) = app.post_binary("/assistant/run", body).await;
    assert_eq!(status, 200);
    let answer =
        run_as_documented(&["convert", "-t", "TScenarioRunResponse", "--from", "binary", "--to", "text"], &answer);
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

/// Hosts of package registries. A tool reaches a registry the way its
/// machine is configured (an index, a mirror, a proxy, a folder of files),
/// so no file of ours names one; split, so that this file does not.
const REGISTRY_HOSTS: &[&str] = &[
    concat!("pypi", ".org"),
    concat!("pythonhosted", ".org"),
    concat!("crates", ".io"),
    concat!("npmjs", ".org"),
    concat!("npmjs", ".com"),
    concat!("proxy.golang", ".org"),
    concat!("rubygems", ".org"),
    concat!("maven", ".org"),
    concat!("maven.apache", ".org"),
    concat!("nuget", ".org"),
];

/// Whether `line` names a registry's host other than where cargo itself
/// writes it: the `source = "registry+…"` lines of a `Cargo.lock`, which
/// name the index's identity, not a host to fetch from.
fn names_a_registry_host(file: &str, line: &str) -> bool {
    let lower = line.to_lowercase();
    let cargo_source = (file == "Cargo.lock" || file.ends_with("/Cargo.lock"))
        && lower.trim().starts_with("source = \"registry+")
        && lower.trim().ends_with(concat!("/rust-lang/crates", ".io-index\""));
    !cargo_source && REGISTRY_HOSTS.iter().any(|host| lower.contains(host))
}

#[test]
fn the_registry_rule_finds_hosts_and_spares_cargos_own_lines() {
    let source = concat!("source = \"registry+https://github.com/rust-lang/crates", ".io-index\"");
    assert!(!names_a_registry_host("Cargo.lock", source));
    assert!(!names_a_registry_host("fuzz/Cargo.lock", source));
    assert!(names_a_registry_host("docs/x.md", source), "only a lock file's source line");
    let api = concat!("curl https://PyPI", ".org/pypi/x/json");
    assert!(names_a_registry_host("scripts/x.sh", api));
    assert!(names_a_registry_host("README.md", concat!("files.pythonhosted", ".org")));
    assert!(!names_a_registry_host("README.md", "a venv made from PyPI with pip"));
}

#[test]
fn no_file_names_a_package_registrys_host() {
    fn walk(top: &Path, dir: &Path, found: &mut Vec<String>, read: &mut usize) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("dir entry").path();
            let relative = path.strip_prefix(top).expect("under the root").to_string_lossy().replace('\\', "/");
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if path.is_dir() {
                if name != ".git" && name != "target" && !relative.starts_with("fuzz/corpus") {
                    walk(top, &path, found, read);
                }
                continue;
            }
            // Binary files (protobuf fixtures) hold no host a reader or a tool reads.
            let Ok(text) = std::fs::read_to_string(&path) else { continue };
            *read += 1;
            for (n, line) in text.lines().enumerate() {
                if names_a_registry_host(&relative, line) {
                    found.push(format!("{relative}:{}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    let top = repository();
    let (mut found, mut read) = (Vec::new(), 0);
    walk(&top, &top, &mut found, &mut read);
    assert!(read > 100, "the walk reads the repository: {read} files");
    assert!(found.is_empty(), "get packages through the package manager as configured:\n{}", found.join("\n"));
}
