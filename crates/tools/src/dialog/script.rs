//! Dialog scripts (docs/dialog.md): YAML files of dialogs, each a scenario and
//! turns of `say`, `voice`, `callback` or `request`, with expectations on the
//! answer. Loading checks everything before anything is sent: the YAML
//! (file, line and column of a mistake), one input per turn, the field paths
//! against the protocol's schema, the matchers; and bounds the work a file
//! can ask for.

use std::{cell::LazyCell, collections::HashMap, path::Path};

use megamind_core::{
    codec::{self, Format},
    proto::n_alice::n_scenarios::TScenarioRunRequest,
};
use serde::{Deserialize, Serialize, de::IgnoredAny};
use serde_json::{Map, Value};
use serde_saphyr::Spanned;

use super::expect::{Expectation, Regexes};
use crate::bounded::read_file_at_most;

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
    /// A `TScenarioRunRequest` in text format of which only `Input` is
    /// sent, as the turn's input (e.g. `Input { SemanticFrames { Name:
    /// "run_skill" } }`); the client makes the rest, and another field is
    /// refused when the script loads rather than dropped.
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
    let read = read_file_at_most(path, MAX_SCRIPT_BYTES as u64);
    let Some(bytes) = read.map_err(|e| ScriptError(format!("{file}: cannot read: {e}")))? else {
        return Err(ScriptError(format!("{file}: larger than {MAX_SCRIPT_BYTES} bytes")));
    };
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
            if let Some(text) = &turn.request {
                match codec::decode::<TScenarioRunRequest>(text.as_bytes(), Format::Text) {
                    Err(e) => {
                        problems.push(format!("{}: request: not a TScenarioRunRequest in text format: {e}", at()))
                    }
                    Ok(request)
                        if request != TScenarioRunRequest { input: request.input.clone(), ..Default::default() } =>
                    {
                        problems.push(format!(
                            "{}: request: only its Input is sent (the client makes BaseRequest and the rest); \
                             write Input {{ ... }} alone",
                            at()
                        ));
                    }
                    Ok(_) => {}
                }
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
mod tests;
