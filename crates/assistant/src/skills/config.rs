//! `[assistant.skills]`: where the skills are, how a session is bounded,
//! the sampling of a step's model call and the command rules.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    backend::config::check_sampling,
    skills::{output, rules},
};

/// `[assistant.skills]`: where the skills are and how a session is bounded.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SkillsConfig {
    /// The folder of skills, one subfolder with a `SKILL.md` each. Absent:
    /// `skills/` in the working directory when there is one, else none. A
    /// folder given here must exist.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// A file whose text goes into every skill's system message after
    /// `--- System Context ---` (what the model should know of the machine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_context_file: Option<PathBuf>,
    /// Bytes of exchanges a session keeps in the state; past it the oldest
    /// after the first go.
    pub max_session_bytes: usize,
    /// Bytes of a command's cleaned output sent to the model.
    pub max_output_bytes: usize,
    /// Reload the catalog when the folder changes (it is also reloaded on SIGHUP).
    pub watch: bool,
    /// `temperature` of a skill step's model call (0.3, as the skills format
    /// sets it: docs/skills.md#prompts).
    pub temperature: f64,
    /// `max_tokens` of a skill step's model call (512, as the skills format
    /// sets it).
    pub max_tokens: u32,
    /// More request body fields of a skill step's call, over
    /// `[assistant] extra_body` (whose `response_format`, `json_schema` and
    /// `grammar` a step leaves out): e.g. a `grammar` that keeps a small
    /// local model to the step markers.
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// The command rules: regexes with an optional ` # reason`, `deny`
    /// (never run) and `ask` (asks even when `allowed-tools` covers it); a
    /// list left out keeps its default.
    #[schemars(skip)]
    pub policy: rules::CommandRulesConfig,
}

impl Default for SkillsConfig {
    fn default() -> SkillsConfig {
        SkillsConfig {
            dir: None,
            system_context_file: None,
            max_session_bytes: 32 * 1024,
            max_output_bytes: output::DEFAULT_MAX_BYTES,
            watch: true,
            temperature: 0.3,
            max_tokens: 512,
            extra_body: serde_json::Map::new(),
            policy: rules::CommandRulesConfig::default(),
        }
    }
}

impl SkillsConfig {
    /// The folder to load: the configured one, else `skills/` when present.
    pub fn folder(&self) -> Option<PathBuf> {
        match &self.dir {
            Some(dir) => Some(dir.clone()),
            None => Some(PathBuf::from("skills")).filter(|dir| dir.is_dir()),
        }
    }
}

/// The most a step's message adds to a command's output: its opening
/// line and `[Step N of 100]`.
const MESSAGE_LINES_BYTES: usize = 1024;

impl SkillsConfig {
    /// Checks every value, reporting each problem with its key under `skills.`.
    pub(crate) fn validate(&self, check: &mut dyn FnMut(bool, String)) {
        if let Some(dir) = &self.dir {
            check(dir.is_dir(), format!("skills.dir = {}: not a folder", dir.display()));
        }
        if let Some(file) = &self.system_context_file {
            check(file.is_file(), format!("skills.system_context_file = {}: not a file", file.display()));
        }
        check(
            self.max_session_bytes >= 1024,
            format!("skills.max_session_bytes = {}: must be at least 1024", self.max_session_bytes),
        );
        check(
            self.max_output_bytes >= 256,
            format!("skills.max_output_bytes = {}: must be at least 256", self.max_output_bytes),
        );
        // A step's message holds a command's output and its own lines: cut
        // to a session smaller than that, a step asked again would lose its
        // `[Step N of 100]`.
        let message = self.max_output_bytes.saturating_add(MESSAGE_LINES_BYTES);
        check(
            self.max_session_bytes >= message,
            format!(
                "skills.max_session_bytes = {}: must be at least max_output_bytes + {MESSAGE_LINES_BYTES} ({message}), \
                 to hold a step's message with a command's output",
                self.max_session_bytes
            ),
        );
        check_sampling("skills", self.temperature, self.max_tokens, &self.extra_body, check);
        if let Err(error) = rules::CommandRules::new(&self.policy) {
            check(false, format!("skills.policy: {error}"));
        }
    }
}
