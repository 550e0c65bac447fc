//! `[assistant.dialog]`: what the model is told, what the state keeps of the
//! dialog, and the phrases spoken while waiting or when the model fails.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The `[assistant.dialog]` table.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct DialogConfig {
    /// A file with the system prompt (else the built-in one).
    // TOML has no null: an absent key is the built-in prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt_file: Option<PathBuf>,
    /// Dialog turns kept in the state.
    pub history_turns: usize,
    /// Bytes of dialog turns kept in the state.
    pub history_max_bytes: usize,
    /// Phrases spoken while the model is still thinking, with the callback
    /// that fetches the answer, one after the other, never the same twice in
    /// a row; as a flag, a TOML array: '["Секунду.", "Ещё мгновение."]'.
    pub filler_texts: Vec<String>,
    /// Longest spoken answer in characters, cut at a sentence boundary (the
    /// card has it all).
    pub max_speech_chars: usize,
    /// Spoken when the model failed.
    pub apology_text: String,
}

impl Default for DialogConfig {
    fn default() -> DialogConfig {
        DialogConfig {
            system_prompt_file: None,
            history_turns: 6,
            history_max_bytes: 8 * 1024,
            filler_texts: ["Секунду.", "Ещё мгновение.", "Сейчас скажу.", "Почти готово."].map(String::from).to_vec(),
            max_speech_chars: 400,
            apology_text: "Извините, сейчас не получается ответить. Попробуйте ещё раз чуть позже.".into(),
        }
    }
}

impl DialogConfig {
    /// Checks every value, reporting each problem with its key under `dialog.`.
    pub(crate) fn validate(&self, check: &mut dyn FnMut(bool, String)) {
        check(self.history_turns > 0, "dialog.history_turns must be above 0".into());
        check(self.history_max_bytes >= 256, "dialog.history_max_bytes must be at least 256".into());
        check(
            !self.filler_texts.is_empty() && self.filler_texts.iter().all(|t| !t.trim().is_empty()),
            "dialog.filler_texts must hold at least one phrase, none of them empty".into(),
        );
        check(
            self.max_speech_chars >= 40,
            format!("dialog.max_speech_chars = {}: must be at least 40", self.max_speech_chars),
        );
        check(!self.apology_text.trim().is_empty(), "dialog.apology_text must not be empty".into());
        // Read at start; a file that is not there is reported with the rest.
        if let Some(file) = &self.system_prompt_file {
            check(file.is_file(), format!("dialog.system_prompt_file = {}: not a file", file.display()));
        }
    }
}
