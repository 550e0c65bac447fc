//! The skills format's prompts, byte for byte (docs/skills.md#prompts): the
//! base system prompt `SKILL_SYSTEM_PROMPT_WITH_ASK`, the system message
//! built around it, and the user message of each step (the first one, and
//! those after a command, a skipped command, an answer and a `[MESSAGE]`).
//!
//! Invariant: the texts are the format's; `tests.rs` checks the
//! `git-quick-commit` reference dialog (docs/skills.md#a-whole-session)
//! message by message.
//!
//! Decisions the format leaves to us:
//! - The parts of the system message are joined by one blank line, as the
//!   format's messages show them
//!   (`...\n\n--- Active Skill: git-quick-commit ---\n## What I do`);
//!   the context and the body are trimmed at both ends, and a blank or
//!   absent context leaves its part out.
//! - Empty command output is written `(no output)`, so the model never sees
//!   a bare `Command output:` line it could take for a lost message.
//! - A command the policy refuses is reported as its output:
//!   `Command output:\nCommand refused by policy: <reason>`.

use std::fmt::Write as _;

use crate::skills::MAX_STEPS;

/// The format's base prompt, `SKILL_SYSTEM_PROMPT_WITH_ASK`, verbatim
/// (docs/skills.md#the-system-message).
pub const SKILL_SYSTEM_PROMPT_WITH_ASK: &str = include_str!("prompt/system_prompt_with_ask.txt");

/// What [`command_output`] writes for a command that printed nothing.
pub const NO_OUTPUT: &str = "(no output)";

/// The system message of a skill (docs/skills.md#the-system-message): the
/// base prompt, then, when given, `--- System Context ---` and `context`,
/// then `--- Active Skill: <name> ---` and `body` (the `SKILL.md` body,
/// without front matter).
pub fn system_message(context: Option<&str>, name: &str, body: &str) -> String {
    let mut message = String::from(SKILL_SYSTEM_PROMPT_WITH_ASK);
    if let Some(context) = context.map(str::trim).filter(|c| !c.is_empty()) {
        message.push_str("\n\n--- System Context ---\n");
        message.push_str(context);
    }
    message.push_str("\n\n--- Active Skill: ");
    message.push_str(name);
    message.push_str(" ---\n");
    message.push_str(body.trim());
    message
}

/// The first user message (docs/skills.md#user-messages):
/// `Execute skill: <name>`, or the user's own `prompt` when given, then the
/// parameters when there are any, then `[Step 1 of 100]`.
pub fn initial_message(name: &str, prompt: Option<&str>, parameters: &[(String, String)]) -> String {
    let mut message = match prompt.map(str::trim).filter(|p| !p.is_empty()) {
        Some(prompt) => prompt.to_string(),
        None => format!("Execute skill: {name}"),
    };
    if !parameters.is_empty() {
        message.push_str("\n\nParameters:");
        for (key, value) in parameters {
            // Writing to a String cannot fail.
            let _ = write!(message, "\n- {key}: {value}");
        }
    }
    with_step(message, 1)
}

/// The message after a command ran; `output` is already cleaned
/// ([`super::output::clean`]).
pub fn command_output(output: &str, step: u32) -> String {
    let output = if output.trim().is_empty() { NO_OUTPUT } else { output };
    with_step(format!("Command output:\n{output}"), step)
}

/// The message when the policy refused the command: reported as its output.
pub fn command_refused(reason: &str, step: u32) -> String {
    with_step(format!("Command output:\nCommand refused by policy: {reason}"), step)
}

/// The message when the user skipped the command.
pub fn command_skipped(step: u32) -> String {
    with_step("User skipped the command.".to_string(), step)
}

/// The message carrying the user's answer to `[ASK]`; an empty
/// `answer` (an optional question skipped) leaves nothing after the colon
/// but its space.
pub fn user_response(answer: &str, step: u32) -> String {
    with_step(format!("User response: {answer}"), step)
}

/// The message after a `[MESSAGE]`.
pub fn continue_after_message(step: u32) -> String {
    with_step("[Continue after informational message]".to_string(), step)
}

/// `message`, a blank line, `[Step N of 100]`.
fn with_step(mut message: String, step: u32) -> String {
    let _ = write!(message, "\n\n[Step {step} of {MAX_STEPS}]");
    message
}

#[cfg(test)]
mod tests;
