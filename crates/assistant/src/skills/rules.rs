//! The command rules, enforced whatever the model says: deny > ask > allow
//! (docs/skills.md).
//!
//! Entry point: [`CommandRules::check`]. Invariant: never panics; a command is
//! allowed only when no deny rule, no `allowed-tools` restriction and no ask
//! rule applies to any part of it.
//!
//! How a command is read (`policy/shell.rs`): split into simple commands at
//! `&&`, `||`, `|`, `;`, `&`, newlines, parentheses and backticks outside
//! quotes, each split into words with `shell-words`, each stripped of
//! wrappers (`sudo`, `env`, `VAR=1`, `nohup`, `xargs`, `/bin/` …). A shell
//! told to run a string (`sh -c "…"`, `eval …`) has that string checked
//! too, three levels deep at most.
//!
//! Rules ([`CommandRulesConfig`]) are regular expressions, matched
//! case-insensitively against three texts: each simple command's words
//! (after wrappers) joined by single spaces, the whole chain written the
//! same way (`curl x | sh`), and the raw line with its whitespace
//! collapsed. Anchoring is the rule's choice: `^rm` means "the command is
//! `rm`". An entry may end with ` # reason`: the reason the user and the
//! model are given.
//!
//! Decisions:
//! - Case-insensitive: `RM -RF /` is denied (a case-insensitive file system
//!   may run it, and SQL ignores case).
//! - `echo "rm -rf /"` is allowed: the words are an argument of `echo`,
//!   which only prints them. Piping anything into a shell is denied, so
//!   `echo "rm -rf /" | sh` is denied.
//! - The raw line is matched too, quotes and all, so a rule may fire on
//!   quoted text: `psql -c 'DROP TABLE t'` asks (as meant), and so does
//!   `echo 'DROP TABLE t'` (harmless, but asking costs one confirmation).
//! - A substitution inside double quotes (`"$(…)"`, `` "`…`" ``) or an
//!   unclosed quote cannot be checked: asked, or denied under `allowed-tools`.
//! - `allowed-tools` absent: no restriction. Present: every simple command
//!   must match one `Bash(…)` entry — `Bash(git:*)` or `Bash(git *)`: its
//!   words start with `git`; `Bash(git commit:*)`: with `git commit`;
//!   `Bash(npm test)`: exactly those words; `Bash` or `Bash(*)`: anything.
//!   Other tools (`Read`, …) allow no command. Wrappers count here
//!   (`sudo git` is not `git`), and so do output redirections to a file
//!   (`git log > ~/.bashrc` is denied; `/dev/null` and `>&2` are fine).

use regex::{Regex, RegexBuilder};

mod shell;

/// The longest command checked; a longer one is denied.
pub const MAX_COMMAND_BYTES: usize = 4096;
/// How deep `sh -c` and `eval` strings are followed.
const MAX_DEPTH: usize = 3;

/// What to do with a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Run it.
    Allow,
    /// Ask the user to confirm first; the reason says why.
    Ask(String),
    /// Never run it; the reason goes to the user and the model.
    Deny(String),
}

/// The configurable rule lists: regexes, each optionally ending with
/// ` # reason`. A list left out of a configuration file keeps its default.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct CommandRulesConfig {
    /// Commands never run.
    pub deny: Vec<String>,
    /// Commands run only after the user confirms.
    pub ask: Vec<String>,
}

const DEFAULT_DENY: &[&str] = &[
    r"^rm( \S+)* (/|/\*|~|~/|~/\*|\$home|\$home/|\$home/\*)( |$) # deletes the root or home folder",
    r"^rm( \S+)* --no-preserve-root # deletes the root folder",
    r"^(mkfs(\.\w+)?|mke2fs|mkswap|wipefs)( |$) # formats a disk",
    r"^format [a-z]: # formats a disk",
    r"^dd( \S+)* of=/dev/ # writes over a device",
    r">>? ?/dev/(sd|hd|vd|xvd|nvme|mmcblk|disk)\w* # writes over a disk device",
    r"\(\)\s*\{[^}]*\|[^}]*& # a fork bomb",
    r"^(shutdown|reboot|halt|poweroff)( |$) # shuts the machine down",
    r"^(init|telinit) [06]( |$) # shuts the machine down",
    r"^systemctl (poweroff|reboot|halt|kexec)( |$) # shuts the machine down",
    r"(^|\| )(curl|wget)( \S+)* \| (\S+/)?(ba|z|da|k|a)?sh( |$) # runs a downloaded script",
    r"\|&? (\S+/)?(ba|z|da|k|a|fi)?sh( |$) # pipes text into a shell",
    r"^(chmod|chown)( \S+)* -\S*r\S*( \S+)* /( |$) # changes the whole file system",
];

const DEFAULT_ASK: &[&str] = &[
    r"^(rm|rmdir|unlink|shred|truncate)( |$) # deletes files",
    r"^(del|erase|rd|remove-item)( |$) # deletes files",
    r"^find( \S+)* -delete( |$) # deletes files",
    r"^find( \S+)* -exec(dir)? (\S+/)?(rm|shred|unlink)( |$) # deletes files",
    r"^git( \S+)* push( \S+)* (-\S*f\S*|--force\S*|\+\S+)( |$) # rewrites the remote's history",
    r"^git( \S+)* reset( \S+)* --hard( |$) # discards local changes",
    r"^git( \S+)* clean( \S+)* (-\S*f\S*|--force)( |$) # deletes untracked files",
    r"^git( \S+)* branch( \S+)* (-d|-\S*D\S*|--delete)( |$) # deletes a branch",
    r"^git( \S+)* (checkout|restore)( \S+)* (--|\.)( |$) # discards local changes",
    r"^git( \S+)* stash (drop|clear)( |$) # deletes stashed changes",
    r"^git( \S+)* (-c|--config-env|--exec-path|--upload-pack|--receive-pack)( |=|$) # sets git options that may run other commands",
    r"\b(drop|truncate) (table|database|schema)\b # deletes database data",
    r"\bdelete from\b # deletes database rows",
    r"^docker (system prune|volume (rm|prune)|rm|rmi)( |$) # deletes containers or data",
    r"^kubectl delete( |$) # deletes cluster resources",
    r"^(kill|killall|pkill)( |$) # stops processes",
    r"^(dd|mv)( |$) # may overwrite data",
];

impl Default for CommandRulesConfig {
    fn default() -> Self {
        let owned = |list: &[&str]| list.iter().map(|s| s.to_string()).collect();
        CommandRulesConfig { deny: owned(DEFAULT_DENY), ask: owned(DEFAULT_ASK) }
    }
}

/// A rule that is not a valid regular expression.
#[derive(Debug, thiserror::Error)]
#[error("invalid policy rule {rule:?}: {reason}")]
pub struct CommandRulesError {
    /// The rule as written.
    pub rule: String,
    /// What the regex parser said.
    pub reason: String,
}

#[derive(Debug, Clone)]
struct Rule {
    pattern: Regex,
    reason: String,
}

/// The compiled policy.
#[derive(Debug, Clone)]
pub struct CommandRules {
    deny: Vec<Rule>,
    ask: Vec<Rule>,
}

impl Default for CommandRules {
    fn default() -> Self {
        // The default rules are tested to compile; a failure leaves them out.
        let compile = |list: &[&str]| list.iter().filter_map(|rule| compile(rule).ok()).collect();
        CommandRules { deny: compile(DEFAULT_DENY), ask: compile(DEFAULT_ASK) }
    }
}

fn compile(rule: &str) -> Result<Rule, CommandRulesError> {
    let (pattern, reason) = match rule.rsplit_once(" # ") {
        Some((pattern, reason)) => (pattern.trim(), reason.trim().to_string()),
        None => (rule.trim(), format!("matches the rule `{}`", rule.trim())),
    };
    let pattern = RegexBuilder::new(pattern)
        .case_insensitive(true)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| CommandRulesError { rule: rule.to_string(), reason: e.to_string() })?;
    Ok(Rule { pattern, reason })
}

impl CommandRules {
    /// Compiles `config`'s rules.
    pub fn new(config: &CommandRulesConfig) -> Result<CommandRules, CommandRulesError> {
        let compile_all = |list: &[String]| list.iter().map(|rule| compile(rule)).collect::<Result<Vec<_>, _>>();
        Ok(CommandRules { deny: compile_all(&config.deny)?, ask: compile_all(&config.ask)? })
    }

    /// The verdict on `command` for a skill whose `allowed-tools` are
    /// `allowed_tools` (`None`: unrestricted).
    pub fn check(&self, command: &str, allowed_tools: Option<&[String]>) -> Verdict {
        let command = command.trim();
        if command.is_empty() {
            return Verdict::Deny("the command is empty".into());
        }
        if command.len() > MAX_COMMAND_BYTES {
            return Verdict::Deny(format!("the command is longer than {MAX_COMMAND_BYTES} bytes"));
        }
        if let Some(reason) = self.first_match(&self.deny, command, 0) {
            return Verdict::Deny(reason);
        }
        let chain = crate::skills::rules::shell::split(command);
        if let Some(tools) = allowed_tools {
            if let Some(reason) = outside_allowed(&chain, tools) {
                return Verdict::Deny(reason);
            }
        }
        if let Some(reason) = self.first_match(&self.ask, command, 0) {
            return Verdict::Ask(reason);
        }
        if chain.opaque {
            return Verdict::Ask("it holds a substitution or quote the policy cannot check".into());
        }
        Verdict::Allow
    }

    /// The reason of the first of `rules` matching `command` or a string a
    /// shell in it is told to run.
    fn first_match(&self, rules: &[Rule], command: &str, depth: usize) -> Option<String> {
        let chain = crate::skills::rules::shell::split(command);
        let commands: Vec<Vec<String>> =
            chain.commands.iter().map(|words| crate::skills::rules::shell::effective(words)).collect();
        let mut texts: Vec<String> = commands.iter().map(|words| words.join(" ")).collect();
        let mut whole = String::new();
        for (i, text) in texts.iter().enumerate() {
            whole.push_str(text);
            if let Some(op) = chain.ops.get(i) {
                whole.push(' ');
                whole.push_str(op);
                whole.push(' ');
            }
        }
        texts.push(whole.split_whitespace().collect::<Vec<_>>().join(" "));
        texts.push(command.split_whitespace().collect::<Vec<_>>().join(" "));
        let found = rules.iter().find(|rule| texts.iter().any(|text| rule.pattern.is_match(text)));
        if let Some(rule) = found {
            return Some(rule.reason.clone());
        }
        for inner in commands.iter().filter_map(|words| crate::skills::rules::shell::inner_command(words)) {
            if depth + 1 >= MAX_DEPTH {
                return Some("it nests shells too deeply to check".into());
            }
            if let Some(reason) = self.first_match(rules, &inner, depth + 1) {
                return Some(reason);
            }
        }
        None
    }
}

/// Why `chain` falls outside `tools`, when it does.
fn outside_allowed(chain: &crate::skills::rules::shell::Chain, tools: &[String]) -> Option<String> {
    let patterns: Vec<Allowed> = tools.iter().filter_map(|tool| Allowed::parse(tool)).collect();
    if patterns.iter().any(|p| matches!(p, Allowed::Any)) {
        return None;
    }
    let listed = || tools.join(" ");
    if chain.opaque {
        return Some(format!("it holds a substitution the skill's allowed tools ({}) cannot cover", listed()));
    }
    for words in &chain.commands {
        let words = crate::skills::rules::shell::without_keywords(words);
        let Some(first) = words.first() else { continue };
        if !patterns.iter().any(|p| p.allows(words)) {
            return Some(format!("`{first}` is outside the skill's allowed tools ({})", listed()));
        }
        if let Some(target) = redirect_target(words) {
            return Some(format!("it writes to `{target}`, outside the skill's allowed tools"));
        }
    }
    None
}

/// One `Bash(…)` entry of `allowed-tools`.
enum Allowed {
    Any,
    Prefix(Vec<String>),
    Exact(Vec<String>),
}

impl Allowed {
    fn parse(tool: &str) -> Option<Allowed> {
        let tool = tool.trim();
        if tool == "Bash" {
            return Some(Allowed::Any);
        }
        let inner = tool.strip_prefix("Bash(")?.strip_suffix(')')?.trim();
        if inner == "*" || inner.is_empty() {
            return Some(Allowed::Any);
        }
        let words = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        match inner.strip_suffix(":*").or_else(|| inner.strip_suffix(" *")) {
            Some(prefix) => Some(Allowed::Prefix(words(prefix))),
            None => Some(Allowed::Exact(words(inner))),
        }
    }

    fn allows(&self, words: &[String]) -> bool {
        match self {
            Allowed::Any => true,
            Allowed::Prefix(prefix) => !prefix.is_empty() && words.starts_with(prefix),
            Allowed::Exact(exact) => words == exact.as_slice(),
        }
    }
}

/// The file an output redirection in `words` writes, other than
/// `/dev/null` and another descriptor.
fn redirect_target(words: &[String]) -> Option<String> {
    let mut iter = words.iter();
    while let Some(word) = iter.next() {
        let rest = word.trim_start_matches(|c: char| c.is_ascii_digit() || c == '&');
        let Some(target) = rest.strip_prefix('>') else { continue };
        let target = target.trim_start_matches(['>', '|']);
        let target = if target.is_empty() { iter.next().map(String::as_str).unwrap_or("") } else { target };
        if target != "/dev/null" && !target.starts_with('&') {
            return Some(target.to_string());
        }
    }
    None
}

#[cfg(test)]
mod tests;
