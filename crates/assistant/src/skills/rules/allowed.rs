//! A skill's `allowed-tools`: the commands its author lets run without
//! asking, beyond the read-only list. An entry widens only commands free
//! of what always asks (`capability`); other tools than `Bash` allow no
//! command.

use crate::skills::rules::shell::Word;

/// One `Bash(…)` entry of `allowed-tools`.
#[derive(Debug)]
pub(super) enum Allowed {
    /// `Bash`, `Bash(*)`: any command.
    Any,
    /// `Bash(git:*)`, `Bash(git commit *)`: commands whose words start so.
    Prefix(Vec<String>),
    /// `Bash(npm test)`: exactly those words.
    Exact(Vec<String>),
}

impl Allowed {
    /// The `Bash` entries of `tools`.
    pub(super) fn parse_all(tools: &[String]) -> Vec<Allowed> {
        tools.iter().filter_map(|tool| Allowed::parse(tool)).collect()
    }

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

    /// Whether this entry covers the simple command `words`. Words are
    /// compared as the shell passes them (quotes removed), so `'git'` is
    /// `git` but `/usr/bin/git` is not.
    pub(super) fn allows(&self, words: &[Word]) -> bool {
        let same = |expected: &[String]| {
            words.len() >= expected.len() && expected.iter().zip(words).all(|(e, w)| *e == w.text && w.is_plain())
        };
        match self {
            Allowed::Any => true,
            Allowed::Prefix(prefix) => !prefix.is_empty() && same(prefix),
            Allowed::Exact(exact) => words.len() == exact.len() && same(exact),
        }
    }
}
