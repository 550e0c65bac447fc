//! The skills catalog: `SKILL.md` files in the Agent Skills format, one per
//! folder of a skills directory — YAML front matter between `---` lines,
//! then a Markdown body (the part the model sees, docs/skills.md#the-system-message).
//!
//! Entry point: [`Catalog::load`]. Invariant: loading never panics and never
//! stops at a bad skill: each one is reported as a [`SkillProblem`] (path,
//! line when known, reason) and skipped. Reads are bounded: a `SKILL.md` of
//! at most [`MAX_SKILL_BYTES`], at most [`MAX_SKILLS`] skills, one folder
//! level (no recursion, so a symlink loop cannot trap it), regular files
//! only (a `SKILL.md` linked to `/dev/zero` is refused).
//!
//! Front matter (the Agent Skills fields):
//! - `name`: 1-64 characters of `a-z0-9-`, no leading, trailing or doubled
//!   hyphen, equal to the folder's name; `description`: 1-1024 characters.
//! - Optional `license`, `compatibility`, `metadata` (string → string) and
//!   `allowed-tools`: a space- or comma-separated string as the format
//!   writes it (`Bash(git:*) Bash(jq:*)`; spaces inside parentheses stay),
//!   or a YAML list.
//! - Unknown top-level keys are ignored with a warning (returned with
//!   `skipped: false`, and logged).
//!
//! Our keys live under `metadata`, whose values the format keeps strings:
//! `triggers` (phrases that start the skill) and `parameters` (what it
//! expects, `name` or `name: description`). A value holding a newline is
//! one item per line (write it as a `|` block); otherwise items are
//! separated by commas. Items are trimmed and empty ones dropped; past
//! [`MAX_ITEMS`] of either, the rest are ignored with a warning.
//!
//! A skills folder is written by people, and its files are read as input:
//! besides the bounds above, a skill reports at most [`MAX_KEY_WARNINGS`]
//! unknown keys one by one (the rest as a count), and its triggers are
//! normalized once, when it is loaded, not on every utterance.

use std::{
    collections::BTreeMap,
    fmt,
    path::{Path, PathBuf},
};

use megamind_core::files::read_bounded;
use serde::Deserialize;

mod front;
mod words;

use crate::skills::catalog::words::{edit_distance, normalize};

/// The largest `SKILL.md` read; a bigger one is skipped.
pub const MAX_SKILL_BYTES: u64 = 256 * 1024;
/// The most skills a catalog holds; the rest are left out, with one warning.
pub const MAX_SKILLS: usize = 256;
/// The most folder entries looked at, skills or not.
const MAX_ENTRIES: usize = 4096;
/// Skills left out past [`MAX_SKILLS`] named in their one problem.
const MAX_NAMED_LEFT_OUT: usize = 8;
/// The longest name `closest` compares (edit distance is quadratic).
const MAX_QUERY_CHARS: usize = 128;
/// The most triggers, and the most parameters, a skill keeps: every
/// utterance is compared with every trigger, and every parameter is
/// written into the model's instructions.
pub const MAX_ITEMS: usize = 64;
/// Unknown keys reported one by one per skill (each is a log line).
pub const MAX_KEY_WARNINGS: usize = 8;

/// One skill, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    /// Its name, equal to its folder's name.
    pub name: String,
    /// What it does and when to use it.
    pub description: String,
    /// `license`, when given.
    pub license: Option<String>,
    /// `compatibility`, when given.
    pub compatibility: Option<String>,
    /// `metadata`, including our `triggers` and `parameters` as written.
    pub metadata: BTreeMap<String, String>,
    /// `allowed-tools` split into entries (`Bash(git:*)`); `None` when absent.
    pub allowed_tools: Option<Vec<String>>,
    /// `metadata.triggers` split into phrases.
    pub triggers: Vec<String>,
    /// The triggers as utterances are compared with them: normalized,
    /// between spaces; empty ones left out.
    matched: Vec<String>,
    /// `metadata.parameters` split into parameters.
    pub parameters: Vec<Parameter>,
    /// The Markdown body, without front matter, trimmed.
    pub body: String,
    /// The `SKILL.md` it came from.
    pub path: PathBuf,
}

/// A parameter a skill expects (`metadata.parameters`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parameter {
    /// Its name, the part before `:`.
    pub name: String,
    /// What it is, the part after `:`; empty when not given.
    pub description: String,
}

/// A skill that could not be loaded, or a warning about one that was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillProblem {
    /// The `SKILL.md` (or folder) concerned.
    pub path: PathBuf,
    /// The 1-based line in `SKILL.md`, when known.
    pub line: Option<u64>,
    /// What is wrong.
    pub reason: String,
    /// True when the skill was skipped; false for a warning.
    pub skipped: bool,
}

impl fmt::Display for SkillProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        let what = if self.skipped { "skipped" } else { "warning" };
        write!(f, ": {what}: {}", self.reason)
    }
}

/// The skills of one folder, by name.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    skills: BTreeMap<String, Skill>,
}

impl Catalog {
    /// Loads every subfolder of `dir` holding a `SKILL.md`, in name order.
    /// Each problem is also logged (`warn`).
    pub fn load(dir: &Path) -> (Catalog, Vec<SkillProblem>) {
        let mut catalog = Catalog::default();
        let mut problems = Vec::new();
        let problem = |path: &Path, line, reason: String, skipped| SkillProblem {
            path: path.to_path_buf(),
            line,
            reason,
            skipped,
        };
        let mut entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(error) => {
                problems.push(problem(dir, None, format!("cannot read the skills folder: {error}"), true));
                log(&problems);
                return (catalog, problems);
            }
        };
        let mut folders: Vec<PathBuf> =
            entries.by_ref().take(MAX_ENTRIES).filter_map(|e| e.ok()).map(|e| e.path()).collect();
        if entries.next().is_some() {
            // Which ones is the filesystem's choice: say so, and that the order is no longer by name.
            let reason = format!(
                "more than {MAX_ENTRIES} entries: only the first {MAX_ENTRIES} the filesystem lists are looked at"
            );
            problems.push(problem(dir, None, reason, false));
        }
        folders.sort();
        // Skills past the bound, reported together: one line, not one
        // each, naming the first few.
        let (mut left_out, mut named) = (0usize, Vec::new());
        for folder in folders {
            let file = folder.join("SKILL.md");
            // `metadata` follows links: a linked folder is read, one level only.
            if !folder.metadata().is_ok_and(|m| m.is_dir()) || std::fs::symlink_metadata(&file).is_err() {
                continue;
            }
            if catalog.skills.len() >= MAX_SKILLS {
                left_out += 1;
                if named.len() < MAX_NAMED_LEFT_OUT {
                    named.push(folder.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default());
                }
                continue;
            }
            let Some(folder_name) = folder.file_name().and_then(|n| n.to_str()) else {
                problems.push(problem(&file, None, "the folder's name is not UTF-8".into(), true));
                continue;
            };
            let text = match read_bounded(&file, MAX_SKILL_BYTES) {
                Ok(text) => text,
                Err(reason) => {
                    problems.push(problem(&file, None, reason, true));
                    continue;
                }
            };
            match parse(folder_name, &file, &text) {
                Ok((skill, warnings)) => {
                    problems.extend(warnings);
                    catalog.skills.insert(skill.name.clone(), skill);
                }
                Err(skipped) => problems.push(skipped),
            }
        }
        if left_out > 0 {
            let more = if left_out > named.len() { ", …" } else { "" };
            let reason = format!("more than {MAX_SKILLS} skills: {left_out} left out ({}{more})", named.join(", "));
            // Not invalid, only past the bound: a warning, not counted as skipped skills.
            problems.push(problem(dir, None, reason, false));
        }
        log(&problems);
        (catalog, problems)
    }

    /// Keeps, from `previous` (the catalog of `dir` loaded before), each
    /// skill whose `SKILL.md` this load skipped as invalid: a file saved
    /// half-way, or edited wrong, leaves its last good version in service
    /// rather than end the sessions running it. A skill whose folder or
    /// file is gone is gone. Returns the names kept.
    pub fn keep_last_good(&mut self, dir: &Path, previous: &Catalog, problems: &[SkillProblem]) -> Vec<String> {
        let mut kept = Vec::new();
        for problem in problems.iter().filter(|problem| problem.skipped) {
            if self.skills.len() >= MAX_SKILLS {
                break;
            }
            let Some(skill) = previous.skills().find(|skill| problem.path == dir.join(&skill.name).join("SKILL.md"))
            else {
                continue;
            };
            if !self.skills.contains_key(&skill.name) {
                self.skills.insert(skill.name.clone(), skill.clone());
                kept.push(skill.name.clone());
            }
        }
        kept
    }

    /// The skill called `name`.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.get(name)
    }

    /// Every skill, in name order.
    pub fn skills(&self) -> impl Iterator<Item = &Skill> {
        self.skills.values()
    }

    /// How many skills there are.
    pub fn len(&self) -> usize {
        self.skills.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    /// Up to `n` skill names closest to `name` by edit distance (closest
    /// first, then by name), for "unknown skill, did you mean …". A name
    /// holding the query counts as distance 1; names further than half the
    /// query's length (at least 3) are left out.
    pub fn closest(&self, name: &str, n: usize) -> Vec<&str> {
        let query: Vec<char> = name.trim().to_lowercase().chars().take(MAX_QUERY_CHARS).collect();
        let query_text: String = query.iter().collect();
        let limit = (query.len() / 2).max(3);
        let mut scored: Vec<(usize, &str)> = self
            .skills
            .keys()
            .map(|candidate| {
                // A name holding the query (`disk` → `disk-usage`) is close.
                let holds = !query.is_empty() && candidate.contains(query_text.as_str());
                let distance = if holds { 1 } else { edit_distance(&query, candidate) };
                (distance, candidate.as_str())
            })
            .filter(|(distance, _)| *distance <= limit)
            .collect();
        scored.sort();
        scored.into_iter().take(n).map(|(_, name)| name).collect()
    }

    /// The skill one of whose triggers `utterance` holds as whole words
    /// (case, punctuation and `ё`/`е` ignored); the longest trigger wins,
    /// then the first skill by name.
    pub fn find_trigger(&self, utterance: &str) -> Option<&Skill> {
        let said = format!(" {} ", normalize(utterance));
        let mut best: Option<(usize, &Skill)> = None;
        for skill in self.skills.values() {
            for trigger in &skill.matched {
                if !said.contains(trigger.as_str()) {
                    continue;
                }
                if best.is_none_or(|(len, _)| trigger.len() > len) {
                    best = Some((trigger.len(), skill));
                }
            }
        }
        best.map(|(_, skill)| skill)
    }
}

fn log(problems: &[SkillProblem]) {
    for problem in problems {
        tracing::warn!(%problem, "skills");
    }
}

/// A line-numbered message: the 1-based line when known, and the reason.
type Located = (Option<u64>, String);

#[derive(Deserialize)]
struct FrontMatter {
    name: String,
    description: String,
    license: Option<String>,
    compatibility: Option<String>,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
    #[serde(rename = "allowed-tools")]
    allowed_tools: Option<Tools>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Tools {
    Line(String),
    List(Vec<String>),
}

const KNOWN_KEYS: [&str; 6] = ["name", "description", "license", "compatibility", "metadata", "allowed-tools"];

/// Parses the `SKILL.md` at `path`, of text `text`, in the folder named
/// `folder`: the skill and its warnings (unknown keys), or why it is
/// skipped.
pub fn parse(folder: &str, path: &Path, text: &str) -> Result<(Skill, Vec<SkillProblem>), SkillProblem> {
    let problem = |(line, reason): Located, skipped| SkillProblem { path: path.to_path_buf(), line, reason, skipped };
    let (skill, warnings) = parse_located(folder, path, text).map_err(|located| problem(located, true))?;
    Ok((skill, warnings.into_iter().map(|located| problem(located, false)).collect()))
}

fn parse_located(folder: &str, path: &Path, text: &str) -> Result<(Skill, Vec<Located>), Located> {
    let (yaml, body) = crate::skills::catalog::front::split(text)
        .ok_or((Some(1), "no front matter: write it between two `---` lines".to_string()))?;
    // The YAML starts on the file's second line.
    let located = |error: serde_saphyr::Error| {
        let line = error.location().map(|at| at.line() + 1);
        let message = error.to_string();
        (line, format!("invalid front matter: {}", message.lines().next().unwrap_or("invalid YAML")))
    };
    let keys: BTreeMap<String, serde::de::IgnoredAny> = serde_saphyr::from_str(yaml).map_err(located)?;
    let at = |key: &str| crate::skills::catalog::front::line_of_key(yaml, key);
    // Each key's line is a scan of the front matter: a few keys named,
    // never tens of thousands (a quarter of a megabyte of `kN: 1` lines).
    let unknown: Vec<&String> = keys.keys().filter(|key| !KNOWN_KEYS.contains(&key.as_str())).collect();
    let mut warnings: Vec<Located> = unknown
        .iter()
        .take(MAX_KEY_WARNINGS)
        .map(|key| (at(key), format!("unknown key `{}` ignored", megamind_core::text::clip(key, 64))))
        .collect();
    if let Some(more) = unknown.len().checked_sub(MAX_KEY_WARNINGS).filter(|more| *more > 0) {
        warnings.push((None, format!("{more} more unknown keys ignored")));
    }
    let front: FrontMatter = serde_saphyr::from_str(yaml).map_err(located)?;
    check_name(&front.name, folder).map_err(|reason| (at("name"), reason))?;
    let chars = front.description.trim().chars().count();
    if !(1..=1024).contains(&chars) {
        return Err((at("description"), format!("`description` must be 1 to 1024 characters, not {chars}")));
    }
    let allowed_tools = front.allowed_tools.map(|tools| match tools {
        Tools::Line(line) => split_tools(&line),
        Tools::List(list) => list.into_iter().map(|t| t.trim().to_string()).filter(|t| !t.is_empty()).collect(),
    });
    let mut items = |key: &str| {
        let mut items = front.metadata.get(key).map(|v| split_items(v)).unwrap_or_default();
        if items.len() > MAX_ITEMS {
            let reason = format!("`metadata.{key}`: {} items, only the first {MAX_ITEMS} are used", items.len());
            warnings.push((at("metadata"), reason));
            items.truncate(MAX_ITEMS);
        }
        items
    };
    let triggers = items("triggers");
    let parameters = items("parameters");
    let parameters = parameters
        .into_iter()
        .map(|item| match item.split_once(':') {
            Some((name, description)) => Parameter { name: name.trim().into(), description: description.trim().into() },
            None => Parameter { name: item, description: String::new() },
        })
        .collect();
    let skill = Skill {
        name: front.name,
        description: front.description.trim().to_string(),
        license: front.license,
        compatibility: front.compatibility,
        metadata: front.metadata,
        allowed_tools,
        matched: matched(&triggers),
        triggers,
        parameters,
        body: body.trim().to_string(),
        path: path.to_path_buf(),
    };
    Ok((skill, warnings))
}

/// `triggers` normalized and between spaces, as [`Catalog::find_trigger`]
/// looks for them in an utterance.
fn matched(triggers: &[String]) -> Vec<String> {
    triggers.iter().map(|trigger| normalize(trigger)).filter(|t| !t.is_empty()).map(|t| format!(" {t} ")).collect()
}

/// The Agent Skills rules for `name`, and its folder's name.
fn check_name(name: &str, folder: &str) -> Result<(), String> {
    let valid = (1..=64).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--");
    if !valid {
        return Err(format!("`name` {name:?} must be 1 to 64 characters of a-z, 0-9 and single inner hyphens"));
    }
    if name != folder {
        return Err(format!("`name` {name:?} differs from its folder {folder:?}"));
    }
    Ok(())
}

/// A `metadata` list: one item per line when the value has a newline,
/// else comma-separated.
fn split_items(value: &str) -> Vec<String> {
    let separator = if value.contains('\n') { '\n' } else { ',' };
    value.split(separator).map(str::trim).filter(|item| !item.is_empty()).map(String::from).collect()
}

/// `allowed-tools` as one string: entries separated by spaces or commas
/// outside parentheses (`Bash(git commit:*)` is one entry).
fn split_tools(line: &str) -> Vec<String> {
    let mut tools = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    for c in line.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            c if depth == 0 && (c.is_whitespace() || c == ',') => {
                if !current.is_empty() {
                    tools.push(std::mem::take(&mut current));
                }
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    if !current.is_empty() {
        tools.push(current);
    }
    tools
}

#[cfg(test)]
mod tests;
