//! [`Origins`]: where each key of the configuration was set — a line of the
//! file, a flag, an environment variable, `--set` — so that every problem is
//! reported with its source: `app.toml:4: budget.comit_ms: unknown key; did
//! you mean `commit_ms`?`, `--budget-ms: budget.run_ms = 0: must be ...`.

use std::{collections::BTreeMap, path::Path};

use super::problem::Problem;

/// An override whose value was refused: (its origin, the line saying why).
pub type Refused = (String, String);

/// Where the keys of one configuration were set.
#[derive(Debug, Clone, Default)]
pub struct Origins {
    /// The file, as the user named it.
    file: String,
    /// The line of the file each dotted key is written on (a table: its header).
    lines: BTreeMap<String, usize>,
    /// The override that set each dotted key last: `--budget-ms`,
    /// `MEGAMIND_BODY_LIMIT`, `--set budget.run_ms`.
    set_by: BTreeMap<String, String>,
}

impl Origins {
    /// The keys of the TOML `text` read from `path`, each at its line.
    pub fn of_file(path: &Path, text: &str) -> Origins {
        let mut lines = BTreeMap::new();
        if let Ok(document) = toml::de::DeTable::parse(text) {
            collect(text, document.get_ref(), "", &mut lines);
        }
        Origins { file: path.display().to_string(), lines, set_by: BTreeMap::new() }
    }

    /// Keys that moved (as whole dotted paths, where it was → where it is):
    /// a key the file wrote where it was is found where it is now.
    pub fn moved(&mut self, aliases: &[(&str, &str)]) {
        for (old, new) in aliases {
            let under = format!("{old}.");
            let found: Vec<(String, usize)> = self
                .lines
                .iter()
                .filter(|(key, _)| key.as_str() == *old || key.starts_with(&under))
                .map(|(key, line)| (format!("{new}{}", &key[old.len()..]), *line))
                .collect();
            self.lines.extend(found);
        }
    }

    /// `key` was set by the override `origin` (a later one wins).
    pub fn set(&mut self, key: &str, origin: &str) {
        let origin = if origin == "--set" { format!("--set {key}") } else { origin.to_owned() };
        self.set_by.insert(key.to_owned(), origin);
    }

    /// Where `key` (or the nearest table holding it, or a key in it) was
    /// set: the override that set it last, else the file and the line; none
    /// for a default.
    pub fn source_of(&self, key: &str) -> Option<String> {
        self.place_of(key).map(|place| self.name(&place))
    }

    /// As [`Origins::source_of`], the place itself.
    fn place_of(&self, key: &str) -> Option<Place> {
        let mut at = key;
        loop {
            if let Some(origin) = self.set_by.get(at) {
                return Some(Place::Override(origin.clone()));
            }
            if let Some(line) = self.lines.get(at) {
                return Some(Place::Line(*line));
            }
            match at.rsplit_once('.') {
                Some((table, _)) => at = table,
                None => break,
            }
        }
        let under = format!("{key}.");
        let inside = |dotted: &&String| !key.is_empty() && dotted.starts_with(&under);
        let set =
            self.set_by.iter().find(|(dotted, _)| inside(dotted)).map(|(_, origin)| Place::Override(origin.clone()));
        set.or_else(|| self.lines.iter().find(|(dotted, _)| inside(dotted)).map(|(_, line)| Place::Line(*line)))
    }

    /// How a report names `place`.
    fn name(&self, place: &Place) -> String {
        match place {
            Place::Line(line) => format!("{}:{line}", self.file),
            Place::Override(origin) => origin.clone(),
            Place::Default => String::new(),
        }
    }

    /// Each problem as one line with its source in front, and the lines of
    /// the overrides whose values were `refused` (each with its origin), in
    /// the order of [`Place`]: the file's top to bottom, then the overrides,
    /// then those of no source. One override that sets several keys
    /// (`--budget-ms`) says a problem once.
    pub fn render(&self, refused: Vec<Refused>, problems: Vec<Problem>) -> Vec<String> {
        let mut seen = Vec::new();
        let mut lines: Vec<(Place, String)> =
            refused.into_iter().map(|(origin, line)| (Place::Override(origin), line)).collect();
        for Problem { key, message } in problems {
            let line = match self.place_of(&key) {
                Some(place) => {
                    let source = self.name(&place);
                    let said = (source.clone(), message.replacen(&key, "", 1));
                    if seen.contains(&said) {
                        continue;
                    }
                    seen.push(said);
                    (place, format!("{source}: {message}"))
                }
                None => (Place::Default, message),
            };
            lines.push(line);
        }
        // Stable: problems of one place keep the order they were found in.
        lines.sort_by(|(a, _), (b, _)| a.cmp(b));
        lines.into_iter().map(|(_, line)| line).collect()
    }
}

/// Where a problem was set, in the order a report lists them: a line of the
/// file, an override (by name), no source (a default).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Place {
    Line(usize),
    Override(String),
    Default,
}

/// Records the line of every key of `table` (under `prefix`), and of the
/// keys of its tables in turn.
fn collect(text: &str, table: &toml::de::DeTable<'_>, prefix: &str, lines: &mut BTreeMap<String, usize>) {
    for (key, value) in table {
        let dotted = if prefix.is_empty() { key.get_ref().to_string() } else { format!("{prefix}.{}", key.get_ref()) };
        let start = key.span().start.min(text.len());
        let line = 1 + text.as_bytes()[..start].iter().filter(|byte| **byte == b'\n').count();
        lines.entry(dotted.clone()).or_insert(line);
        if let Some(inner) = value.get_ref().as_table() {
            collect(text, inner, &dotted, lines);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_found_at_its_line_a_moved_one_too_and_an_override_wins() {
        let text = "addr = \"x\"\n\n[budget]\nrun_ms = 1\n[assistant]\nmodel = \"m\"\nbackend.kind = \"k\"\n";
        let mut origins = Origins::of_file(Path::new("app.toml"), text);
        origins.moved(&[("assistant.model", "assistant.backend.model")]);
        assert_eq!(origins.source_of("addr").as_deref(), Some("app.toml:1"));
        assert_eq!(origins.source_of("budget").as_deref(), Some("app.toml:3"));
        assert_eq!(origins.source_of("budget.run_ms").as_deref(), Some("app.toml:4"));
        assert_eq!(origins.source_of("budget.apply_ms").as_deref(), Some("app.toml:3"), "its table's header");
        assert_eq!(origins.source_of("assistant.backend.model").as_deref(), Some("app.toml:6"));
        assert_eq!(origins.source_of("assistant.backend.kind").as_deref(), Some("app.toml:7"));
        assert_eq!(origins.source_of("body_limit"), None, "a default");
        origins.set("nosuch.key", "--set");
        assert_eq!(origins.source_of("nosuch").as_deref(), Some("--set nosuch.key"), "a table by its key");
        origins.set("budget.run_ms", "--budget-ms");
        origins.set("addr", "--set");
        assert_eq!(origins.source_of("budget.run_ms").as_deref(), Some("--budget-ms"));
        assert_eq!(origins.source_of("addr").as_deref(), Some("--set addr"));
    }

    #[test]
    fn one_override_of_several_keys_says_a_problem_once() {
        let mut origins = Origins::default();
        for key in ["budget.run_ms", "budget.commit_ms"] {
            origins.set(key, "--budget-ms");
        }
        origins.set("cache.ttl_secs", "--set");
        let problems = vec![
            Problem::new("budget.run_ms", "budget.run_ms = 0: must be 1..=60000 ms"),
            Problem::new("budget.commit_ms", "budget.commit_ms = 0: must be 1..=60000 ms"),
            Problem::new("cache.ttl_secs", "cache.ttl_secs must be above 0"),
            Problem::new("max_in_flight", "max_in_flight must be above 0"),
        ];
        assert_eq!(
            origins.render(Vec::new(), problems),
            [
                "--budget-ms: budget.run_ms = 0: must be 1..=60000 ms",
                "--set cache.ttl_secs: cache.ttl_secs must be above 0",
                "max_in_flight must be above 0",
            ]
        );
    }

    #[test]
    fn a_file_s_problems_read_top_to_bottom_then_the_overrides_then_the_rest() {
        let text = "[assitant]\n[budget]\nrun_ms = 0\ncomit_ms = 1\n";
        let mut origins = Origins::of_file(Path::new("app.toml"), text);
        origins.set("cache.ttl_secs", "MEGAMIND_CACHE_TTL_SECS");
        let problems = vec![
            Problem::new("cache.ttl_secs", "cache.ttl_secs must be above 0"),
            Problem::new("budget.comit_ms", "budget.comit_ms: unknown key"),
            Problem::new("max_in_flight", "max_in_flight must be above 0"),
            Problem::new("budget.run_ms", "budget.run_ms = 0: must be 1..=60000 ms"),
            Problem::new("assitant", "[assitant]: no scenario of that name"),
        ];
        let refused = vec![("--budget-ms".to_owned(), "--budget-ms budget.run_ms=\"x\": not a number".to_owned())];
        assert_eq!(
            origins.render(refused, problems),
            [
                "app.toml:1: [assitant]: no scenario of that name",
                "app.toml:3: budget.run_ms = 0: must be 1..=60000 ms",
                "app.toml:4: budget.comit_ms: unknown key",
                "--budget-ms budget.run_ms=\"x\": not a number",
                "MEGAMIND_CACHE_TTL_SECS: cache.ttl_secs must be above 0",
                "max_in_flight must be above 0",
            ]
        );
    }
}
