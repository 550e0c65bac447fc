//! Dialog scripts (docs/dialog.md): YAML files of dialogs, each a scenario and
//! turns of `say`, `voice`, `callback` or `request`, with expectations on the
//! answer. Loading checks everything before anything is sent: the YAML
//! (file, line and column of a mistake), one input per turn, the field paths
//! against the protocol's schema, the matchers; and bounds the work a file
//! can ask for.

use std::{cell::LazyCell, collections::HashMap, io::Read, path::Path};

use megamind_core::{
    codec::{self, Format},
    proto::n_alice::n_scenarios::TScenarioRunRequest,
};
use serde::{Deserialize, Serialize, de::IgnoredAny};
use serde_json::{Map, Value};
use serde_saphyr::Spanned;

use super::expect::{Expectation, Regexes};

/// Largest script file read, in bytes.
pub const MAX_SCRIPT_BYTES: usize = 1 << 20;
/// Dialogs in one file at most.
pub const MAX_DIALOGS: usize = 1000;
/// Turns in one dialog at most.
pub const MAX_TURNS: usize = 1000;

/// A script file as written.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// The dialogs, played one after the other, each a session of its own.
    pub dialogs: Vec<Dialog>,
}

/// One dialog.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Dialog {
    /// Its name in reports.
    pub name: String,
    /// The scenario it talks to; the command's `--scenario` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario: Option<String>,
    /// The turns, in order; `State` is carried from one to the next.
    pub turns: Vec<TurnSpec>,
}

/// One turn: exactly one input, and what its answer must be.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TurnSpec {
    /// Typed words (`Input.Text`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub say: Option<String>,
    /// Spoken words (`Input.Voice`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voice: Option<String>,
    /// A callback the client sends back (`Input.Callback`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback: Option<CallbackSpec>,
    /// The result of the command the last answer asked to run
    /// (`RunCommandDirective`): its callback sent back, completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_result: Option<CommandResultSpec>,
    /// `TScenarioRunRequest` fields in text format, merged into the request
    /// (e.g. `Input { SemanticFrames { Name: "run_skill" } }`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// Field path → matcher, and `max_ms`.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub expect: Map<String, Value>,
}

/// `callback: {name, payload}`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CallbackSpec {
    /// Its `Name`.
    pub name: String,
    /// Its `Payload`, a JSON-like object.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub payload: Map<String, Value>,
}

/// `command_result: {output, exit_code, skipped}`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CommandResultSpec {
    /// What the command printed.
    #[serde(default)]
    pub output: String,
    /// Its exit code.
    #[serde(default)]
    pub exit_code: i32,
    /// True when the user skipped it.
    #[serde(default)]
    pub skipped: bool,
}

/// A script loaded and checked.
#[derive(Debug)]
pub struct Loaded {
    /// The file it came from, for reports.
    pub file: String,
    /// The dialogs with their expectations compiled.
    pub dialogs: Vec<(Dialog, Vec<Expectation>)>,
}

/// Why a script cannot run; says where.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ScriptError(pub String);

/// Reads, parses and checks the script at `path`.
pub fn load(path: &Path) -> Result<Loaded, ScriptError> {
    let file = path.display().to_string();
    let mut bytes = Vec::new();
    // One byte past the bound tells a file too long, however long it is
    // (a device such as /dev/zero never ends).
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_SCRIPT_BYTES as u64 + 1).read_to_end(&mut bytes))
        .map_err(|e| ScriptError(format!("{file}: cannot read: {e}")))?;
    if bytes.len() > MAX_SCRIPT_BYTES {
        return Err(ScriptError(format!("{file}: larger than {MAX_SCRIPT_BYTES} bytes")));
    }
    let text = String::from_utf8(bytes).map_err(|e| ScriptError(format!("{file}: not UTF-8: {e}")))?;
    parse(&file, &text)
}

/// A YAML error's message without the `error: line N column M: ` the
/// crate opens it with, which `file:line:column` says already.
fn without_position(message: &str) -> &str {
    let message = message.strip_prefix("error: ").unwrap_or(message);
    match message.strip_prefix("line ").and_then(|rest| rest.split_once(": ")) {
        Some((position, rest)) if position.contains(" column ") => rest,
        _ => message,
    }
}

/// Parses and checks the script `text` of `file`.
pub fn parse(file: &str, text: &str) -> Result<Loaded, ScriptError> {
    let script: Script = serde_saphyr::from_str(text).map_err(|error| {
        let at = error.location().map_or(String::new(), |at| format!(":{}:{}", at.line(), at.column()));
        // The crate's message may carry its own position and a snippet:
        // the first line says what is wrong.
        let message = error.to_string();
        let mut first = message.lines().next().unwrap_or("invalid YAML");
        if !at.is_empty() {
            first = without_position(first);
        }
        ScriptError(format!("{file}{at}: {first}{}", near_field(first)))
    })?;
    if script.dialogs.is_empty() || script.dialogs.len() > MAX_DIALOGS {
        return Err(ScriptError(format!("{file}: write 1 to {MAX_DIALOGS} dialogs under `dialogs:`")));
    }
    let mut dialogs = Vec::with_capacity(script.dialogs.len());
    // Read again only when a problem needs its line.
    let lines = LazyCell::new(|| Lines::of(text));
    // Every turn is checked: all of a file's mistakes are told at once.
    let mut problems = Vec::new();
    let mut regexes = Regexes::default();
    for (d, dialog) in script.dialogs.into_iter().enumerate() {
        let name = &dialog.name;
        if dialog.turns.is_empty() || dialog.turns.len() > MAX_TURNS {
            return Err(ScriptError(format!("{file}: dialog {name:?}: write 1 to {MAX_TURNS} turns")));
        }
        let mut expectations = Vec::with_capacity(dialog.turns.len());
        for (i, turn) in dialog.turns.iter().enumerate() {
            let in_turn = |line: Option<u64>| {
                let line = line.map_or(String::new(), |line| format!(":{line}"));
                format!("{file}{line}: dialog {name:?}, turn {}", i + 1)
            };
            let at = || in_turn(lines.turn(d, i));
            let inputs = [
                turn.say.is_some(),
                turn.voice.is_some(),
                turn.callback.is_some(),
                turn.command_result.is_some(),
                turn.request.is_some(),
            ];
            if inputs.iter().filter(|set| **set).count() != 1 {
                problems.push(format!("{}: write exactly one of say, voice, callback, command_result, request", at()));
            }
            if let Some(text) = &turn.request
                && let Err(e) = codec::decode::<TScenarioRunRequest>(text.as_bytes(), Format::Text)
            {
                problems.push(format!("{}: request: not a TScenarioRunRequest in text format: {e}", at()));
            }
            match Expectation::compile_in(&turn.expect, &mut regexes) {
                Ok(expectation) => expectations.push(expectation),
                Err(keys) => {
                    // Top to bottom as written, not in the map's order.
                    let mut keys: Vec<_> = keys.into_iter().map(|(key, e)| (lines.key(d, i, &key), e)).collect();
                    keys.sort_by_key(|(line, _)| *line);
                    problems.extend(
                        keys.into_iter().map(|(line, e)| format!("{}: {e}", in_turn(line.or(lines.turn(d, i))))),
                    );
                }
            }
        }
        dialogs.push((dialog, expectations));
    }
    match problems.len() {
        0 => Ok(Loaded { file: file.to_owned(), dialogs }),
        1 => Err(ScriptError(problems.remove(0))),
        n => Err(ScriptError(format!("{file}: {n} problems:\n  - {}", problems.join("\n  - ")))),
    }
}

/// Where the turns of a script and their `expect:` keys are written: a
/// second reading of the text, so that [`TurnSpec`] stays the plain map a
/// script is written and recorded as. A text this cannot read has no lines.
#[derive(Debug, Default, Deserialize)]
struct Lines {
    #[serde(default)]
    dialogs: Vec<DialogLines>,
}

#[derive(Debug, Default, Deserialize)]
struct DialogLines {
    #[serde(default)]
    turns: Vec<Spanned<TurnLines>>,
}

#[derive(Debug, Default, Deserialize)]
struct TurnLines {
    #[serde(default)]
    expect: HashMap<Spanned<String>, IgnoredAny>,
}

impl Lines {
    fn of(text: &str) -> Lines {
        serde_saphyr::from_str(text).unwrap_or_default()
    }

    fn spanned(&self, dialog: usize, turn: usize) -> Option<&Spanned<TurnLines>> {
        self.dialogs.get(dialog)?.turns.get(turn)
    }

    /// The line turn `turn` of dialog `dialog` opens on.
    fn turn(&self, dialog: usize, turn: usize) -> Option<u64> {
        Some(self.spanned(dialog, turn)?.referenced.line()).filter(|line| *line > 0)
    }

    /// The line of `key` in that turn's `expect:`.
    fn key(&self, dialog: usize, turn: usize, key: &str) -> Option<u64> {
        let expect = &self.spanned(dialog, turn)?.value.expect;
        let line = expect.keys().find(|spanned| spanned.value == key)?.referenced.line();
        Some(line).filter(|line| *line > 0)
    }
}

/// `; did you mean `say`?` after the YAML reader's "unknown field `sya`,
/// expected one of say, voice, ..." when a field it lists is near.
fn near_field(message: &str) -> String {
    let Some(rest) = message.split_once("unknown field `").map(|(_, rest)| rest) else { return String::new() };
    let Some((field, expected)) = rest.split_once('`') else { return String::new() };
    let expected = expected.split_once("expected ").map_or("", |(_, list)| list);
    let expected = expected.strip_prefix("one of ").unwrap_or(expected);
    let known =
        expected.split([',', ' ']).map(|name| name.trim_matches('`')).filter(|name| !name.is_empty() && *name != "or");
    megamind_core::text::did_you_mean(field, known)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: &str = r#"
dialogs:
  - name: open an app
    scenario: assistant
    turns:
      - say: "открой Safari"
        expect:
          speech: {contains: "Safari"}
          directives[0].OpenAppDirective.AppName: "Safari"
          max_ms: 300
      - callback: {name: skill_command_result, payload: {output: "", exit_code: 0}}
        expect: {should_listen: true}
"#;

    #[test]
    fn the_spec_example_loads() {
        let loaded = parse("seed.yaml", SEED).unwrap();
        let (dialog, expectations) = &loaded.dialogs[0];
        assert_eq!((dialog.name.as_str(), dialog.scenario.as_deref()), ("open an app", Some("assistant")));
        assert_eq!(dialog.turns.len(), 2);
        assert_eq!(dialog.turns[1].callback.as_ref().unwrap().payload["exit_code"], 0);
        assert_eq!(expectations[0].max_ms, Some(300));
        assert_eq!(expectations[0].checks.len(), 2);
    }

    #[test]
    fn a_command_result_turn_loads_and_is_one_input() {
        let text = "dialogs:\n  - name: skill\n    turns:\n      - say: запусти навык git-quick-commit\n      - command_result: {output: \" M a.txt\", exit_code: 0}\n      - command_result: {skipped: true}\n";
        let loaded = parse("skill.yaml", text).unwrap();
        let turns = &loaded.dialogs[0].0.turns;
        let result = turns[1].command_result.as_ref().unwrap();
        assert_eq!((result.output.as_str(), result.exit_code, result.skipped), (" M a.txt", 0, false));
        assert!(turns[2].command_result.as_ref().unwrap().skipped);
        let both = "dialogs:\n  - name: x\n    turns:\n      - say: a\n        command_result: {}\n";
        let error = parse("both.yaml", both).unwrap_err().to_string();
        assert!(error.contains("exactly one of say, voice, callback, command_result, request"), "{error}");
    }

    #[test]
    fn mistakes_say_file_line_and_column() {
        let broken = "dialogs:\n  - name: x\n    turns:\n      - say: [unclosed\n";
        let error = parse("bad.yaml", broken).unwrap_err().to_string();
        assert!(error.starts_with("bad.yaml:4:"), "{error}");
        let wrong_type = "dialogs:\n  - name: x\n    turns:\n      - say: [1, 2]\n";
        let error = parse("bad.yaml", wrong_type).unwrap_err().to_string();
        assert!(error.starts_with("bad.yaml:4:14: expected string"), "the position once: {error}");
        let unknown = "dialogs:\n  - name: x\n    turns:\n      - sya: hi\n";
        let error = parse("typo.yaml", unknown).unwrap_err().to_string();
        assert!(error.starts_with("typo.yaml:4:") && error.contains("sya"), "{error}");
        assert!(error.ends_with("; did you mean `say`?"), "{error}");
    }

    #[test]
    fn every_turn_s_mistake_is_told_at_once_at_its_line_with_the_key_it_meant() {
        let script = "dialogs:\n  - name: x\n    turns:\n      - {say: a, voice: b}\n      - say: c\n        \
                      expect:\n          speach: {contains: y}\n          Layout.OutputSpeach: x\n          \
                      max_msec: 300\n          card: fine\n";
        let error = parse("f.yaml", script).unwrap_err().to_string();
        let lines: Vec<&str> = error.lines().collect();
        assert_eq!(lines[0], "f.yaml: 4 problems:", "{error}");
        assert!(lines[1].starts_with("  - f.yaml:4: dialog \"x\", turn 1: write exactly one"), "{error}");
        assert!(
            lines[2].starts_with("  - f.yaml:7: dialog \"x\", turn 2: speach: unknown key; did you mean `speech`?"),
            "{error}"
        );
        let meant = "  - f.yaml:8: dialog \"x\", turn 2: Layout.OutputSpeach: TLayout has no field \"OutputSpeach\"; \
                     did you mean `OutputSpeech`?";
        assert!(lines[3].starts_with(meant), "{error}");
        assert!(
            lines[4].starts_with("  - f.yaml:9: dialog \"x\", turn 2: max_msec: unknown key; did you mean `max_ms`?")
        );
        assert_eq!(lines.len(), 5, "{error}");
    }

    #[test]
    fn a_file_past_the_bound_is_refused_after_reading_one_byte_more() {
        // /dev/zero never ends: reading it whole would never return.
        let error = load(Path::new("/dev/zero")).unwrap_err().to_string();
        assert_eq!(error, format!("/dev/zero: larger than {MAX_SCRIPT_BYTES} bytes"));

        let dir = std::env::temp_dir().join(format!("script-bound-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (at, past) = (dir.join("at.yaml"), dir.join("past.yaml"));
        let turn = "dialogs:\n  - name: x\n    turns:\n      - say: a\n";
        // Padded with a comment to exactly the bound: it loads.
        let padding = MAX_SCRIPT_BYTES - turn.len() - 2;
        std::fs::write(&at, format!("{turn}#{}\n", "x".repeat(padding))).unwrap();
        std::fs::write(&past, format!("{turn}#{}\n", "x".repeat(padding + 1))).unwrap();
        assert!(load(&at).is_ok());
        assert!(load(&past).unwrap_err().to_string().ends_with(&format!("larger than {MAX_SCRIPT_BYTES} bytes")));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_turns_and_paths_are_refused_before_anything_runs() {
        let two = "dialogs:\n  - name: x\n    turns:\n      - {say: a, voice: b}\n";
        assert!(parse("f", two).unwrap_err().to_string().contains("exactly one"));
        let path = "dialogs:\n  - name: x\n    turns:\n      - say: a\n        expect: {Layout.NoSuchField: 1}\n";
        let error = parse("f", path).unwrap_err().to_string();
        assert!(error.contains("turn 1") && error.contains("NoSuchField"), "{error}");
        assert!(parse("f", "dialogs: []\n").is_err());
        let request = "dialogs:\n  - name: x\n    turns:\n      - request: 'Input { Nope: 1 }'\n";
        assert!(parse("f", request).unwrap_err().to_string().contains("request: not a TScenarioRunRequest"));
    }

    #[test]
    fn a_regex_written_again_is_compiled_once_and_different_ones_are_bounded() {
        use crate::dialog::expect::MAX_REGEXES;
        let script = |patterns: &mut dyn Iterator<Item = String>| {
            let turns: String = patterns
                .map(|pattern| format!("      - say: a\n        expect: {{speech: {{regex: '{pattern}'}}}}\n"))
                .collect();
            format!("dialogs:\n  - name: x\n    turns:\n{turns}")
        };
        // The same heavy regex in every turn: one compiled, shared.
        let same = parse("f", &script(&mut (0..500).map(|_| r"\w{20}".to_owned()))).expect("loads");
        assert_eq!(same.dialogs[0].1.len(), 500);
        let distinct = |n: usize| script(&mut (0..n).map(|i| format!(r"\w{{20}}{i}")));
        assert!(parse("f", &distinct(MAX_REGEXES)).is_ok());
        let error = parse("f", &distinct(MAX_REGEXES + 1)).unwrap_err().to_string();
        assert!(error.contains(&format!("a script holds at most {MAX_REGEXES} different regexes")), "{error}");
    }
}
