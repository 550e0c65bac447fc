//! The model's answer at one skill step, parsed as the skills format says
//! (docs/skills.md#markers): `[CMD]`, `[ASK]`, `[ASK:optional]`, `[MESSAGE]`
//! or `[DONE]`, and an answer in no format counts as `[CMD]` of its first
//! line.
//!
//! Entry point: [`parse`]. Invariant: never panics; every text in a
//! [`Step`] is at most [`MAX_CONTENT_BYTES`] and no longer than the answer.
//!
//! Decisions the format leaves to us:
//! - Markers match case-insensitively (`[cmd]`, `[Ask:Optional]`) and only
//!   at the start of a line, after leading whitespace; the space after the
//!   marker is optional (`[CMD]git status`).
//! - The marker is taken from the first non-blank line; when that line has
//!   none, from the first line that does (a model's preamble such as
//!   "Sure!" is dropped). Only when no line has a marker is the answer
//!   `[CMD]` of its first line.
//! - `[CMD]` keeps one line: the rest of the marker's line, or, when that
//!   is blank, the next non-blank line that is not a code fence. Lines after
//!   it are explanations the prompt forbids and are dropped. A command
//!   wrapped whole in single backticks is unwrapped.
//! - `[ASK]`, `[ASK:optional]`, `[MESSAGE]` and `[DONE]` keep every line
//!   after the marker, trimmed at both ends (a question may span lines).
//! - An empty answer is `Command("")`; the command policy refuses it.

use megamind_core::text::clip;

/// The longest text a step carries; the model's `max_tokens` (512) keeps
/// real answers far below it.
pub const MAX_CONTENT_BYTES: usize = 8 * 1024;

/// What the model asks for at one step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// `[CMD]`: run this shell command and send back its output.
    Command(String),
    /// `[ASK]` (required) or `[ASK:optional]`: ask the user and wait.
    Ask {
        /// The question to speak.
        question: String,
        /// True for `[ASK:optional]`: the user may skip with an empty answer.
        optional: bool,
    },
    /// `[MESSAGE]`: show this and continue without waiting.
    Message(String),
    /// `[DONE]`: the skill is complete; the final message.
    Done(String),
}

impl Step {
    /// The answer as the history keeps it (its canonical form,
    /// docs/skills.md#markers): the marker, a space, the text —
    /// `[CMD] <first line>` for an answer in no format.
    pub fn content(&self) -> String {
        match self {
            Step::Command(command) => format!("[CMD] {command}"),
            Step::Ask { question, optional: false } => format!("[ASK] {question}"),
            Step::Ask { question, optional: true } => format!("[ASK:optional] {question}"),
            Step::Message(message) => format!("[MESSAGE] {message}"),
            Step::Done(message) => format!("[DONE] {message}"),
        }
    }
}

#[derive(Clone, Copy)]
enum Marker {
    Cmd,
    Ask,
    AskOptional,
    Message,
    Done,
}

// Longest first: `[ASK:optional]` must not be read as `[ASK]` + text.
const MARKERS: [(&str, Marker); 5] = [
    ("[ASK:optional]", Marker::AskOptional),
    ("[MESSAGE]", Marker::Message),
    ("[DONE]", Marker::Done),
    ("[CMD]", Marker::Cmd),
    ("[ASK]", Marker::Ask),
];

/// The marker a line starts with (after leading whitespace) and the rest.
fn marker_of(line: &str) -> Option<(Marker, &str)> {
    let line = line.trim_start();
    MARKERS.iter().find_map(|(tag, marker)| {
        let head = line.get(..tag.len())?;
        head.eq_ignore_ascii_case(tag).then(|| (*marker, line.get(tag.len()..).unwrap_or("")))
    })
}

/// Parses the model's `answer` into the step it asks for.
pub fn parse(answer: &str) -> Step {
    let lines: Vec<&str> = answer.lines().collect();
    let first = lines.iter().position(|line| !line.trim().is_empty());
    let Some(first) = first else {
        return Step::Command(String::new());
    };
    let found =
        lines.iter().enumerate().skip(first).find_map(|(i, line)| marker_of(line).map(|(m, rest)| (i, m, rest)));
    let Some((at, marker, rest)) = found else {
        // No format: the first line is the command.
        let line = lines.get(first).copied().unwrap_or("");
        return Step::Command(bounded(unwrap_backticks(line.trim())));
    };
    let after = lines.get(at + 1..).unwrap_or(&[]);
    match marker {
        Marker::Cmd => Step::Command(bounded(command_text(rest, after))),
        Marker::Ask => Step::Ask { question: block(rest, after), optional: false },
        Marker::AskOptional => Step::Ask { question: block(rest, after), optional: true },
        Marker::Message => Step::Message(block(rest, after)),
        Marker::Done => Step::Done(block(rest, after)),
    }
}

/// The command of a `[CMD]`: the rest of its line, else the next non-blank
/// line that is not a code fence.
fn command_text<'a>(rest: &'a str, after: &[&'a str]) -> &'a str {
    let rest = rest.trim();
    if !rest.is_empty() {
        return unwrap_backticks(rest);
    }
    let next = after.iter().map(|line| line.trim()).find(|line| !line.is_empty() && !line.starts_with("```"));
    unwrap_backticks(next.unwrap_or(""))
}

/// `` `git status` `` → `git status`; anything else unchanged.
fn unwrap_backticks(command: &str) -> &str {
    match command.strip_prefix('`').and_then(|c| c.strip_suffix('`')) {
        Some(inner) if !inner.contains('`') && !inner.trim().is_empty() => inner.trim(),
        _ => command,
    }
}

/// The text of a block marker: the rest of its line and every line after.
fn block(rest: &str, after: &[&str]) -> String {
    let mut text = String::from(rest);
    for line in after {
        if text.len() > MAX_CONTENT_BYTES {
            break;
        }
        text.push('\n');
        text.push_str(line);
    }
    bounded(text.trim())
}

fn bounded(text: &str) -> String {
    clip(text, MAX_CONTENT_BYTES).to_string()
}

#[cfg(test)]
mod tests;
