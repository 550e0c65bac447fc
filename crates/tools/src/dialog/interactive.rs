//! The terminal session: each line read is said to the scenario, each turn
//! printed compactly (every handler with its latency against the budget,
//! the speech, cards, directives and the state's size) or whole with `-v`;
//! `--record` writes the session as a script whose expectations are what
//! came back. Recording scripts is shared with `--script --record`.
//!
//! Lines starting with `/` are the session's own commands, never said to
//! the scenario: `/help` lists them, `/quit` ends the session (as does the
//! end of input, Ctrl-D), `/say WORDS` says words as they are, even ones
//! that start with `/`. At a terminal, a one-line hint at the start and a
//! `> ` prompt before each line go to standard error; standard output holds
//! the turns alone, for scripts to read.
//!
//! When an answer asks the client to run a command (`RunCommandDirective`,
//! a skill's step), the next line is its result: `/run` runs it here with
//! `sh -c` (the user's choice, each time), `/skip` skips it, `/say WORDS`
//! says words instead (`/say стоп`), anything else is taken as what it
//! printed (`\n` for a new line). A typed result the scenario declines
//! (the command is no longer awaited) is said instead.

use std::{
    io::{BufRead, Write},
    path::Path,
};

use serde_json::{Map, Value, json};

use super::{
    DialogArgs, Unplayable, answer_of,
    expect::Answer,
    play,
    script::{CommandResultSpec, Dialog, Script, TurnSpec},
    text_of,
};
use crate::client::Turn;

/// Longest line read, in bytes: an utterance, not a file.
const MAX_LINE_BYTES: usize = 16 * 1024;
/// How long `/run` lets a command run before it is killed.
const COMMAND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// Bytes of a command's output (stdout, then stderr) sent back at most.
const MAX_OUTPUT_BYTES: usize = 64 * 1024;

/// The hint shown when the session starts.
pub const HINT: &str = "Type what the user says; /help lists the session's commands, /quit ends it.";
/// What `/help` prints.
const HELP: &str = "  /help        this list
  /quit        end the session (Ctrl-D too)
  /say WORDS   say WORDS as they are, even words that start with /
  when a turn waits for a command's result (run_command):
  /run         run the command here with sh -c
  /skip        skip it
  other text   what the command printed (\\n for a new line)";

/// Plays each line of `input` until its end (or `/quit`), the hint and the
/// prompts on `prompt`; `true` unless the server answered a protocol `Error`.
pub async fn run(
    args: &DialogArgs,
    input: impl BufRead,
    out: &mut impl Write,
    prompt: &mut impl Write,
) -> Result<bool, Unplayable> {
    let mut session = Session { client: super::client(args, &args.scenario)?, args, recorded: Vec::new(), clean: true };
    // Nobody may be reading the prompts: they cannot fail the session.
    let _ = writeln!(prompt, "{HINT}");
    let mut lines = input.lines();
    loop {
        let _ = write!(prompt, "> ").and_then(|()| prompt.flush());
        let Some(line) = lines.next() else {
            let _ = writeln!(prompt);
            break;
        };
        let line = line.map_err(|e| Unplayable(format!("cannot read the terminal: {e}")))?;
        let words = line.trim();
        if words.is_empty() {
            continue;
        }
        let pending = session.client.pending_command().is_some();
        match local_command(words, pending) {
            Some(Local::Quit) => break,
            Some(Local::Help) => {
                writeln!(out, "{HELP}").map_err(|e| Unplayable(format!("cannot write: {e}")))?;
                continue;
            }
            Some(Local::Unknown) => {
                writeln!(out, "  {words}: not a command of the session; /help lists them, /say {words} says it")
                    .map_err(|e| Unplayable(format!("cannot write: {e}")))?;
                continue;
            }
            None => {}
        }
        let mut end = words.len().min(MAX_LINE_BYTES);
        while !words.is_char_boundary(end) {
            end -= 1;
        }
        let words = &words[..end];
        let pending = session.client.pending_command().map(|run| run.command.clone());
        let said = |words: &str| TurnSpec { say: Some(words.to_owned()), ..TurnSpec::default() };
        let (spec, typed_output) = match pending.filter(|_| !words.starts_with("/say ")) {
            Some(command) => {
                let result = command_result(&command, words, out).await?;
                (TurnSpec { command_result: Some(result), ..TurnSpec::default() }, !matches!(words, "/run" | "/skip"))
            }
            None => (said(words.strip_prefix("/say ").unwrap_or(words).trim()), false),
        };
        let declined = session.turn(out, words, &spec).await?;
        // A result declined is no longer awaited (the skill ended meanwhile,
        // by `/say стоп` or on its own): a line typed as it was most likely
        // meant to be said, so it is, rather than lost.
        if declined && typed_output {
            writeln!(out, "  (the command's result is no longer awaited: said instead)")
                .map_err(|e| Unplayable(format!("cannot write: {e}")))?;
            session.turn(out, words, &said(words)).await?;
        }
        if let Some(run) = session.client.pending_command() {
            writeln!(out, "  run_command (waiting for its result): {}", run.command)
                .and_then(|()| {
                    writeln!(
                        out,
                        "  type /run to run it here, /skip to skip it, /say WORDS to speak, or what it printed"
                    )
                })
                .map_err(|e| Unplayable(format!("cannot write: {e}")))?;
        }
    }
    if let Some(path) = &args.record {
        let dialog = Dialog { name: "recorded".into(), scenario: Some(args.scenario.clone()), turns: session.recorded };
        write_script(path, &Script { dialogs: vec![dialog] })?;
    }
    Ok(session.clean)
}

/// A terminal session's state across its turns.
struct Session<'a> {
    client: crate::client::Client,
    args: &'a DialogArgs,
    /// The turns played, with what came back as their expectations.
    recorded: Vec<TurnSpec>,
    /// False once the server answered a protocol `Error`.
    clean: bool,
}

impl Session<'_> {
    /// Plays `spec`, typed as `words`, prints it and records it; whether the
    /// scenario declined it (`IsIrrelevant`).
    async fn turn(&mut self, out: &mut impl Write, words: &str, spec: &TurnSpec) -> Result<bool, Unplayable> {
        let played = play(&mut self.client, spec).await?;
        let (answer, _) = answer_of(&played);
        print_turn(out, self.args, words, &played).map_err(|e| Unplayable(format!("cannot write: {e}")))?;
        self.clean &= answer.error.is_none();
        self.recorded.push(recorded_turn(spec, &answer));
        Ok(answer.irrelevant)
    }
}

fn print_turn(
    out: &mut impl Write,
    args: &DialogArgs,
    words: &str,
    played: &Result<Turn, (String, String)>,
) -> std::io::Result<()> {
    writeln!(out, "> {words}")?;
    let turn = match played {
        Ok(turn) => turn,
        Err((kind, message)) => return writeln!(out, "  Error {kind}: {message}"),
    };
    for hop in &turn.hops {
        let ms = hop.took.as_millis();
        let late = if ms > u128::from(args.budget_ms) {
            format!("  ⚠ over the {} ms budget", args.budget_ms)
        } else {
            String::new()
        };
        writeln!(out, "  /{:<9} {ms:>4} ms of {} ms{late}", hop.handler().as_str(), args.budget_ms)?;
    }
    let body = turn.body();
    if args.verbose {
        for line in text_of(body).lines() {
            writeln!(out, "  {line}")?;
        }
        return Ok(());
    }
    let layout = body.layout.clone().unwrap_or_default();
    let irrelevant = if turn.is_irrelevant() { " (declined: IsIrrelevant)" } else { "" };
    // What earlier hops of the turn said (a hold, a skill's message) before the last answer.
    let speeches = turn.speeches();
    for said in speeches.iter().take(speeches.len().saturating_sub(1)).filter(|said| !said.is_empty()) {
        writeln!(out, "  said:   {said:?}")?;
    }
    writeln!(out, "  speech: {:?}{irrelevant}", layout.output_speech)?;
    let kinds: Vec<String> = layout.directives.iter().map(|d| kind_of(&text_of(d))).collect();
    let state = body.state.as_ref().map_or(0, |state| state.value.len());
    writeln!(out, "  cards: {} · directives: [{}] · state: {state} bytes", layout.cards.len(), kinds.join(", "))
}

/// A line the session answers itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Local {
    Help,
    Quit,
    /// `/word` naming no command: a typo is not said to the scenario.
    Unknown,
}

/// What `line` asks of the session itself, if anything. While a command's
/// result is awaited, any line but `/help` and `/quit` is that result.
fn local_command(line: &str, pending: bool) -> Option<Local> {
    match line {
        "/help" => Some(Local::Help),
        "/quit" => Some(Local::Quit),
        _ if pending || line.starts_with("/say ") => None,
        _ => {
            let word = line.strip_prefix('/')?;
            (!word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')).then_some(Local::Unknown)
        }
    }
}

/// The result of `command` the user's `line` gives: `/run` runs it here,
/// `/skip` skips it, anything else is what it printed.
async fn command_result(command: &str, line: &str, out: &mut impl Write) -> Result<CommandResultSpec, Unplayable> {
    match line {
        "/skip" => Ok(CommandResultSpec { skipped: true, ..CommandResultSpec::default() }),
        "/run" => {
            let (output, exit_code) = run_here(command).await;
            for printed in output.lines() {
                writeln!(out, "  | {printed}").map_err(|e| Unplayable(format!("cannot write: {e}")))?;
            }
            writeln!(out, "  exit code {exit_code}").map_err(|e| Unplayable(format!("cannot write: {e}")))?;
            Ok(CommandResultSpec { output, exit_code, skipped: false })
        }
        typed => Ok(CommandResultSpec { output: typed.replace("\\n", "\n"), ..CommandResultSpec::default() }),
    }
}

/// Runs `command` with `sh -c` in the current folder: its output (stdout,
/// then stderr, capped) and exit code; 124 when it ran out of time, 127
/// when it could not start.
async fn run_here(command: &str) -> (String, i32) {
    let child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(COMMAND_TIMEOUT, child).await {
        Err(_) => (format!("timed out after {} s", COMMAND_TIMEOUT.as_secs()), 124),
        Ok(Err(error)) => (format!("cannot run sh: {error}"), 127),
        Ok(Ok(output)) => {
            let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&output.stderr));
            let cut = megamind_core::text::clip(&text, MAX_OUTPUT_BYTES).len();
            text.truncate(cut);
            (text, output.status.code().unwrap_or(-1))
        }
    }
}

/// The directive's kind from its text format: `OpenAppDirective { ... }`.
fn kind_of(text: &str) -> String {
    text.split_whitespace().next().unwrap_or("?").to_owned()
}

/// A short description of a turn's input, for reports.
pub fn describe(spec: &TurnSpec) -> String {
    if let Some(words) = &spec.say {
        format!("say {words:?}")
    } else if let Some(words) = &spec.voice {
        format!("voice {words:?}")
    } else if let Some(callback) = &spec.callback {
        format!("callback {:?}", callback.name)
    } else if let Some(result) = &spec.command_result {
        if result.skipped { "command skipped".into() } else { format!("command result (exit {})", result.exit_code) }
    } else {
        "request".into()
    }
}

/// `spec` with expectations that are what `answer` was: the error's type,
/// or the speech, whether the microphone stays open, a declined `/run`,
/// and the kind of each directive.
pub fn recorded_turn(spec: &TurnSpec, answer: &Answer<'_>) -> TurnSpec {
    let mut expect = Map::new();
    if let Some((kind, _)) = &answer.error {
        expect.insert("error.type".into(), json!(kind));
    } else if let Some(body) = answer.body {
        let layout = body.layout.clone().unwrap_or_default();
        expect.insert("speech".into(), json!(layout.output_speech));
        expect.insert("should_listen".into(), json!(layout.should_listen));
        if answer.irrelevant {
            expect.insert("irrelevant".into(), Value::Bool(true));
        }
        for (i, directive) in layout.directives.iter().enumerate() {
            expect.insert(format!("directives[{i}]"), json!({"contains": kind_of(&text_of(directive))}));
        }
    }
    TurnSpec { expect, ..spec.clone() }
}

/// Writes `script` as YAML to `path`.
pub fn write_script(path: &Path, script: &Script) -> Result<(), Unplayable> {
    let yaml = serde_saphyr::to_string(script).map_err(|e| Unplayable(format!("cannot write a script: {e}")))?;
    std::fs::write(path, yaml).map_err(|e| Unplayable(format!("cannot write {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_answers_its_own_commands_and_says_the_rest() {
        assert_eq!(local_command("/help", false), Some(Local::Help));
        assert_eq!(local_command("/help", true), Some(Local::Help));
        assert_eq!(local_command("/quit", true), Some(Local::Quit));
        assert_eq!(local_command("/hepl", false), Some(Local::Unknown));
        assert_eq!(local_command("/say /help", false), None);
        assert_eq!(local_command("открой Safari", false), None);
        assert_eq!(local_command("/usr/bin/env", false), None, "a path is no command");
        assert_eq!(local_command("/skip", true), None, "a pending command's answer");
        assert_eq!(local_command("/weird", true), None, "what the command printed");
    }
}
