//! The command rules, enforced whatever the model says (docs/skills.md#the-command-policy):
//! a command is denied by the deny rules, else runs by itself when every
//! simple command in it only reads or is one the skill allows, else asks.
//!
//! Entry point: [`CommandRules::check`]. Invariant: never panics; a command
//! is allowed only when no deny or ask rule matches it, nothing in it always
//! asks, and each of its simple commands is on the read-only list or
//! covered by the skill's `allowed-tools`.
//!
//! # Layout
//! - [`shell`]: the line read as a shell reads it: simple commands, words,
//!   redirections, substitutions; [`lexer`] its tokens.
//! - [`read_only`]: the read-only list; [`git`]: git's reading commands and
//!   what its others may do; [`options`]: how an option matches a list.
//! - [`capability`]: what always asks, whatever `allowed-tools` says
//!   (running code, writing files, configuration that runs commands later,
//!   the network, permissions, processes), in words for the user;
//!   [`programs`]: the programs that do so by their name alone; [`files`]:
//!   files whose change runs commands later.
//! - [`allowed`]: the skill's `allowed-tools` entries.
//!
//! The deny and ask rules ([`CommandRulesConfig`]) are regular expressions,
//! matched case-insensitively against three texts: each simple command's
//! words (after wrappers such as `sudo`) joined by single spaces, the whole
//! chain written the same way (`curl x | sh`), and the raw line with its
//! whitespace collapsed. Anchoring is the rule's choice: `^rm` means "the
//! command is `rm`". An entry may end with ` # reason`: what the command
//! would do, in the users' language (it completes «Команда «…» …»). A
//! shell told to run a string (`sh -c "…"`, `eval …`, a substitution) has
//! that string checked by the deny rules too, three levels deep at most.

use std::sync::LazyLock;

use regex::{Regex, RegexBuilder};

mod allowed;
mod capability;
mod files;
mod git;
mod lexer;
mod options;
mod programs;
mod read_only;
mod shell;

use crate::skills::rules::allowed::Allowed;

/// The longest command checked; a longer one is denied.
pub const MAX_COMMAND_BYTES: usize = 4096;
/// How deep `sh -c` and `eval` strings are followed.
const MAX_DEPTH: usize = 3;
/// The most reasons a question gives: each is said aloud.
const MAX_REASONS: usize = 3;

/// What to do with a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Run it.
    Allow,
    /// Ask the user to confirm first; the reason says what the command
    /// would do, completing «Команда «…» …».
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
    /// Commands that ask even when the skill's `allowed-tools` covers them.
    pub ask: Vec<String>,
}

const DEFAULT_DENY: &[&str] = &[
    r"^rm( \S+)* (/|/\*|~|~/|~/\*|\$home|\$home/|\$home/\*)( |$) # удалит корневую или домашнюю папку",
    r"^rm( \S+)* --no-preserve-root # удалит корневую папку",
    r"^(mkfs(\.\w+)?|mke2fs|mkswap|wipefs)( |$) # отформатирует диск",
    r"^format [a-z]: # отформатирует диск",
    r"^dd( \S+)* of=/dev/ # перезапишет устройство",
    r">>? ?/dev/(sd|hd|vd|xvd|nvme|mmcblk|disk)\w* # перезапишет диск",
    r"\(\)\s*\{[^}]*\|[^}]*& # запустит форк-бомбу, и компьютер зависнет",
    r"^(shutdown|reboot|halt|poweroff)( |$) # выключит или перезагрузит компьютер",
    r"^(init|telinit) [06]( |$) # выключит или перезагрузит компьютер",
    r"^systemctl (poweroff|reboot|halt|kexec)( |$) # выключит или перезагрузит компьютер",
    r"(^|\| )(curl|wget)( \S+)* \| (\S+/)?(ba|z|da|k|a)?sh( |$) # запустит скрипт, скачанный из сети",
    r"\|&? (\S+/)?(ba|z|da|k|a|fi)?sh( |$) # передаст текст оболочке на выполнение",
    r"^(chmod|chown)( \S+)* -\S*r\S*( \S+)* /( |$) # изменит права на всю файловую систему",
];

const DEFAULT_ASK: &[&str] = &[
    r"^(rm|rmdir|unlink|shred|truncate)( |$) # удалит файлы",
    r"^(del|erase|rd|remove-item)( |$) # удалит файлы",
    r"^git( \S+)* push( \S+)* (-\S*f\S*|--for\S*|\+\S+)( |$) # перепишет историю удалённого репозитория",
    r"^git( \S+)* reset( \S+)* --h(a(rd?)?)?( |$) # отбросит несохранённые изменения",
    r"^git( \S+)* clean( \S+)* (-\S*f\S*|--f\S*)( |$) # удалит файлы, которых нет в git",
    r"^git( \S+)* branch( \S+)* (-d|-\S*D\S*|--delete)( |$) # удалит ветку",
    r"^git( \S+)* (checkout|restore)( \S+)* (--|\.)( |$) # отбросит несохранённые изменения",
    r"^git( \S+)* restore( |$) # отбросит несохранённые изменения",
    r"^git( \S+)* (checkout|switch)( \S+)* (-[a-z]*f[a-z]*|--for\S*|--di\S*)( |$) # отбросит несохранённые изменения",
    r"^git( \S+)* rm( |$) # удалит файлы",
    r"^git( \S+)* stash (drop|clear)( |$) # удалит отложенные изменения",
    r"\b(drop|truncate) (table|database|schema)\b # удалит данные из базы",
    r"\bdelete from\b # удалит строки из базы",
    r"^docker (system prune|volume (rm|prune)|rm|rmi)( |$) # удалит контейнеры или их данные",
    r"^kubectl delete( |$) # удалит ресурсы кластера",
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
        None => (rule.trim(), format!("подпадает под правило `{}`", rule.trim())),
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
    /// `allowed_tools` (`None`: the field is absent).
    pub fn check(&self, command: &str, allowed_tools: Option<&[String]>) -> Verdict {
        let command = command.trim();
        if command.is_empty() {
            return Verdict::Deny("пуста".into());
        }
        if command.len() > MAX_COMMAND_BYTES {
            return Verdict::Deny(format!("длиннее {MAX_COMMAND_BYTES} байт"));
        }
        // Read once: the deny rules, the capabilities and the ask rules all
        // look at the same words.
        let line = shell::split(command);
        if let Some(reason) = self.first_match(&self.deny, command, &line, 0) {
            return Verdict::Deny(reason);
        }
        let mut reasons = capability::of_line(&line);
        if let Some(reason) = self.first_match(&self.ask, command, &line, 0) {
            reasons.push(reason);
        }
        if reasons.is_empty() {
            let allowed = Allowed::parse_all(allowed_tools.unwrap_or_default());
            let unlisted = line
                .commands
                .iter()
                .map(|simple| shell::without_assignments(shell::without_keywords(&simple.words)))
                .filter(|words| !words.is_empty())
                .find(|words| !read_only::allows(words) && !allowed.iter().any(|entry| entry.allows(words)));
            if let Some(words) = unlisted {
                reasons
                    .push(format!("может что-то изменить: «{}» нет среди команд, которые только читают", named(words)));
            }
        }
        if reasons.is_empty() { Verdict::Allow } else { Verdict::Ask(join(reasons)) }
    }

    /// The reason of the first of `rules` matching `command` (read as
    /// `line`) or a string a shell in it is told to run.
    fn first_match(&self, rules: &[Rule], command: &str, line: &shell::Line, depth: usize) -> Option<String> {
        let commands: Vec<Vec<String>> = line
            .commands
            .iter()
            .map(|simple| {
                let mut words = shell::effective(&simple.words);
                for redirect in &simple.redirects {
                    words.push(redirect.op.to_owned());
                    words.extend(redirect.target.as_ref().map(|target| target.text.clone()));
                }
                words
            })
            .collect();
        let mut texts: Vec<String> = commands.iter().map(|words| words.join(" ")).collect();
        let mut whole = String::new();
        for (i, text) in texts.iter().enumerate() {
            whole.push_str(text);
            if let Some(op) = line.ops.get(i) {
                whole.push(' ');
                whole.push_str(op);
                whole.push(' ');
            }
        }
        texts.push(whole.split_whitespace().collect::<Vec<_>>().join(" "));
        texts.push(command.split_whitespace().collect::<Vec<_>>().join(" "));
        let texts: Vec<String> = texts.into_iter().map(unbraced).collect();
        let found = rules.iter().find(|rule| texts.iter().any(|text| rule.pattern.is_match(text)));
        if let Some(rule) = found {
            return Some(rule.reason.clone());
        }
        // A program that runs the command after it may take arguments of
        // its own that `effective` does not know to skip (`taskset 1 rm …`,
        // `flock /tmp/l rm …`, `setsid -f rm …`, `coproc rm …`): a rule
        // saying what the command is (`^rm`) is tried on each tail of its words.
        let anchored: Vec<&Rule> = rules.iter().filter(|rule| rule.pattern.as_str().starts_with('^')).collect();
        for words in commands.iter().filter(|words| runs_what_follows(words)) {
            for at in 1..words.len() {
                // A word with a blank in it (quoted) names no program.
                if words[at].contains(char::is_whitespace) {
                    continue;
                }
                let tail = unbraced(words[at..].join(" "));
                if let Some(rule) = anchored.iter().find(|rule| rule.pattern.is_match(&tail)) {
                    return Some(rule.reason.clone());
                }
            }
        }
        let inner =
            commands.iter().flat_map(|words| shell::inner_commands(words)).chain(line.quoted_inner.iter().cloned());
        for inner in inner {
            if depth + 1 >= MAX_DEPTH {
                return Some("вкладывает команды друг в друга слишком глубоко, чтобы их проверить".into());
            }
            if let Some(reason) = self.first_match(rules, &inner, &shell::split(&inner), depth + 1) {
                return Some(reason);
            }
        }
        None
    }
}

/// Whether the program of `words` runs a command its later words name: a
/// wrapper, a privilege, something that evaluates or defines commands
/// (`coproc`, `function`).
fn runs_what_follows(words: &[String]) -> bool {
    use programs::Kind;
    let kind = words.first().and_then(|program| programs::kind(&programs::normalize(program)));
    matches!(kind, Some(Kind::Wrapper | Kind::Privilege | Kind::Evaluates | Kind::ShellState))
}

/// `text` with its variables named in braces named without them: `${HOME}`
/// is `$HOME`, as the rules spell it.
fn unbraced(text: String) -> String {
    if text.contains("${") { BRACED.replace_all(&text, "$$$1").into_owned() } else { text }
}

/// A variable named in braces with nothing else in them: `${HOME}`.
static BRACED: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}").expect("a valid pattern"));

/// How the question names a simple command: its program, and for git its
/// subcommand.
fn named(words: &[shell::Word]) -> String {
    let program = words[0].text.clone();
    match words.get(1) {
        Some(sub) if program == "git" && !sub.text.starts_with('-') => format!("git {}", sub.text),
        _ => program,
    }
}

/// "a", "a и b", "a, b и c": at most [`MAX_REASONS`], the rest said as more.
fn join(mut reasons: Vec<String>) -> String {
    let more = reasons.len() > MAX_REASONS;
    reasons.truncate(MAX_REASONS);
    if more {
        reasons.push("сделает ещё кое-что".into());
    }
    match reasons.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} и {last}", rest.join(", ")),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests;
