//! Where the configuration comes from, in order: the defaults, a TOML file,
//! then overrides (environment variables, flags, `--set key=value`), each a
//! dotted key and a raw value. A raw value takes the type of the default it
//! replaces (`--echo-prefix 7` stays the string `"7"`); a key without a default
//! is read as a TOML value if it is one, else as a string.
//!
//! Every problem is found in one pass: the overrides' values, the core's
//! keys, their bounds and the scenarios' tables, each reported with where it
//! was set ([`Origins`]).

use std::path::PathBuf;

use super::{Config, ConfigError, Origins, Problem, origin::Refused, problem::without_value};
use crate::files::read_bounded;

/// One value set from outside the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    /// A dotted key: `addr`, `budget.run_ms`, `echo.prefix`.
    pub key: String,
    /// The value as written.
    pub value: String,
    /// Where it came from, for errors: `--body-limit`, `MEGAMIND_BODY_LIMIT`, `--set`.
    pub origin: String,
}

/// Everything `serve` is told, before it is read.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// The TOML file, if any.
    pub file: Option<PathBuf>,
    /// Overrides, later ones winning.
    pub overrides: Vec<Override>,
    /// Keys that moved, as (where it was, where it is), whole dotted paths
    /// (`echo.prefix` → `echo.reply.prefix`): the file's keys and
    /// the overrides' are read where they are now before the overrides
    /// apply, so that a flag wins over the file however each spells a key.
    pub aliases: Vec<(String, String)>,
    /// Dotted keys that hold secrets: a problem with one never quotes its
    /// value (an API key written as a number is refused as a number).
    pub secret: Vec<String>,
}

/// The longest configuration file read: far more than any configuration
/// needs, and a log file named by mistake is refused, not read whole.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// A text that is not TOML, as `source:line:column: what` (`source` names
/// it: its file). Not toml's own text, which quotes the line: the line may
/// hold a secret (an API key whose closing quote is missing), and errors
/// reach logs.
pub(crate) fn syntax_error(source: &str, text: &str, error: &toml::de::Error) -> String {
    let place = error.span().and_then(|span| text.get(..span.start)).map(|before| {
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
        format!(":{line}:{column}")
    });
    format!("{source}{}: {}", place.unwrap_or_default(), error.message().trim_end())
}

impl Sources {
    /// The whole configuration table: `defaults`, the file over them, the
    /// overrides over both (each taking the type of the default it
    /// replaces); where each key was set; and the overrides whose values are
    /// refused. A file that cannot be read or parsed is the only problem.
    pub fn table(&self, defaults: &toml::Table) -> Result<(toml::Table, Origins, Vec<Refused>), ConfigError> {
        let text = match &self.file {
            None => None,
            Some(path) => Some(
                read_bounded(path, MAX_FILE_BYTES)
                    .map_err(|why| ConfigError(vec![format!("{}: {why}", path.display())]))?,
            ),
        };
        self.table_of(text.as_deref(), defaults)
    }

    /// As [`Sources::table`], the file (named by [`Sources::file`]) read
    /// already as `text`.
    fn table_of(
        &self,
        text: Option<&str>,
        defaults: &toml::Table,
    ) -> Result<(toml::Table, Origins, Vec<Refused>), ConfigError> {
        let (file, mut origins) = match (&self.file, text) {
            (Some(path), Some(text)) => {
                let table = toml::from_str(text)
                    .map_err(|e| ConfigError(vec![syntax_error(&path.display().to_string(), text, &e)]))?;
                (table, Origins::of_file(path, text))
            }
            _ => (toml::Table::new(), Origins::default()),
        };
        let aliases: Vec<(&str, &str)> = self.aliases.iter().map(|(old, new)| (old.as_str(), new.as_str())).collect();
        // Every default applies, not only those the core's own types repeat:
        // the binary's (`default_scenario = "demo"`) and the scenarios'.
        let mut table = defaults.clone();
        merge(&mut table, with_aliases(file, &aliases));
        origins.moved(&aliases);
        let mut errors = Vec::new();
        for Override { key, value, origin } in &self.overrides {
            let key = &moved(key, &aliases);
            let result = typed(lookup(defaults, key), value).and_then(|value| set(&mut table, key, value));
            match result {
                Ok(()) => origins.set(key, origin),
                // One flag that sets several keys (`--budget-ms`) says it once.
                Err(error)
                    if origin != "--set"
                        && errors.iter().any(|((o, v, e), _)| (*o, *v, e) == (origin, value, &error)) => {}
                Err(error) => {
                    // A secret's value is never shown, whatever is wrong
                    // with it or around it (`assistant.backend = "openai"`
                    // in the file leaves its API key no table to go in).
                    let line = if self.is_secret(key) {
                        let error = error.replace(&format!("{value:?}"), "<hidden>");
                        format!("{origin} {key}=<hidden>: {error}")
                    } else {
                        format!("{origin} {key}={value:?}: {error}")
                    };
                    errors.push(((origin, value, error), line));
                }
            }
        }
        let refused = errors.into_iter().map(|((origin, _, _), line)| (origin.clone(), line)).collect();
        Ok((table, origins, refused))
    }

    /// Whether the value at `key` is a secret or holds one: a table whose
    /// place a secret's table has (`store = "redis://u:pw@h"`, where
    /// `store.url` belongs) is quoted by a problem with it.
    fn is_secret(&self, key: &str) -> bool {
        self.secret
            .iter()
            .any(|secret| secret == key || secret.strip_prefix(key).is_some_and(|rest| rest.starts_with('.')))
    }

    /// The core configuration, validated; scenario tables kept for their scenarios.
    pub fn load(&self, defaults: &toml::Table) -> Result<Config, ConfigError> {
        self.load_with(defaults, &|_| Vec::new())
    }

    /// The core configuration, validated, and checked further by
    /// `scenarios` (the scenarios' tables in [`Config::scenarios`], as the
    /// defaults, the file and the overrides set them; the scenario names the core's keys
    /// give): every problem reported together, each with where it was set.
    pub fn load_with(
        &self,
        defaults: &toml::Table,
        scenarios: &dyn Fn(&Config) -> Vec<Problem>,
    ) -> Result<Config, ConfigError> {
        let checked = self.table(defaults)?;
        self.checked(checked, scenarios)
    }

    /// As [`Sources::load_with`], the file (named by [`Sources::file`])
    /// read already as `text`: what a fuzz target loads in memory.
    #[cfg(feature = "fuzzing")]
    pub fn load_text(
        &self,
        text: &str,
        defaults: &toml::Table,
        scenarios: &dyn Fn(&Config) -> Vec<Problem>,
    ) -> Result<Config, ConfigError> {
        let checked = self.table_of(Some(text), defaults)?;
        self.checked(checked, scenarios)
    }

    /// The configuration `table` sets, its problems reported where `origins` says.
    fn checked(
        &self,
        (table, origins, refused): (toml::Table, Origins, Vec<Refused>),
        scenarios: &dyn Fn(&Config) -> Vec<Problem>,
    ) -> Result<Config, ConfigError> {
        let (config, mut problems) = Config::read(table);
        problems.extend(config.problems().into_iter().map(Problem::from_message));
        problems.extend(scenarios(&config));
        for problem in problems.iter_mut().filter(|problem| self.is_secret(&problem.key)) {
            problem.message = without_value(&problem.message);
        }
        let errors = origins.render(refused, problems);
        if errors.is_empty() { Ok(config) } else { Err(ConfigError(errors)) }
    }
}

/// `table` with each key of `aliases` written where it was moved to where
/// it is now (dotted paths: `model` → `backend.model`); a value written at
/// both places keeps the old place's, the one a user wrote by hand.
pub fn with_aliases(mut table: toml::Table, aliases: &[(&str, &str)]) -> toml::Table {
    for (old, new) in aliases {
        let Some(value) = take(&mut table, old) else { continue };
        let (path, last) = new.rsplit_once('.').map_or(("", *new), |(path, last)| (path, last));
        match section_mut(&mut table, path) {
            Some(section) => {
                section.insert(last.to_owned(), value);
            }
            // Not a table where the section belongs: left where it was, for
            // the scenario to name when it reads its table.
            None => {
                table.insert((*old).to_owned(), value);
            }
        }
    }
    table
}

/// The table at the dotted `path` (made when missing), unless a value that
/// is not a table is in the way.
fn section_mut<'a>(table: &'a mut toml::Table, path: &str) -> Option<&'a mut toml::Table> {
    let mut at = table;
    for part in path.split('.').filter(|part| !part.is_empty()) {
        at = at.entry(part).or_insert_with(|| toml::Value::Table(toml::Table::new())).as_table_mut()?;
    }
    Some(at)
}

/// `over` merged into `base`, table by table; other values replaced.
pub fn merge(base: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(base)), toml::Value::Table(over)) => merge(base, over),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// Removes the value at the dotted `key`, if there is one.
pub(super) fn remove(table: &mut toml::Table, key: &str) {
    take(table, key);
}

/// Removes the value at the dotted `key`.
fn take(table: &mut toml::Table, key: &str) -> Option<toml::Value> {
    match key.split_once('.') {
        None => table.remove(key),
        Some((first, rest)) => take(table.get_mut(first)?.as_table_mut()?, rest),
    }
}

/// Where `key` is now: itself, or under the new place of a moved key it is
/// (or is inside of).
fn moved(key: &str, aliases: &[(&str, &str)]) -> String {
    for (old, new) in aliases {
        if key == *old {
            return (*new).to_owned();
        }
        if let Some(rest) = key.strip_prefix(old).and_then(|rest| rest.strip_prefix('.')) {
            return format!("{new}.{rest}");
        }
    }
    key.to_owned()
}

/// The value at a dotted key.
pub fn lookup<'a>(table: &'a toml::Table, key: &str) -> Option<&'a toml::Value> {
    let mut parts = key.split('.');
    let mut value = table.get(parts.next()?)?;
    for part in parts {
        value = value.as_table()?.get(part)?;
    }
    Some(value)
}

/// Sets a dotted key, making the tables on its way.
fn set(table: &mut toml::Table, key: &str, value: toml::Value) -> Result<(), String> {
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|part| part.is_empty()) {
        return Err("not a key: use names joined by dots, e.g. budget.run_ms".into());
    }
    let (last, path) = parts.split_last().ok_or("an empty key")?;
    let mut table = table;
    for (depth, part) in path.iter().enumerate() {
        let entry = table.entry(part.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        table = entry.as_table_mut().ok_or_else(|| format!("{} is not a table", parts[..=depth].join(".")))?;
    }
    table.insert(last.to_string(), value);
    Ok(())
}

/// `raw` in the type of `default`.
fn typed(default: Option<&toml::Value>, raw: &str) -> Result<toml::Value, String> {
    use toml::Value;
    match default {
        Some(Value::String(_)) => Ok(Value::String(raw.to_owned())),
        Some(Value::Integer(_)) => {
            raw.trim().parse().map(Value::Integer).map_err(|_| format!("{raw:?} is not a whole number"))
        }
        Some(Value::Float(_)) => raw.trim().parse().map(Value::Float).map_err(|_| format!("{raw:?} is not a number")),
        Some(Value::Boolean(_)) => match raw.trim() {
            "true" => Ok(Value::Boolean(true)),
            "false" => Ok(Value::Boolean(false)),
            _ => Err(format!("{raw:?} is not true or false")),
        },
        // A list may be written without its brackets: `--tvm-allowed-src 1,2`.
        Some(Value::Array(_)) => {
            let bracketed = if raw.trim_start().starts_with('[') { raw.to_owned() } else { format!("[{raw}]") };
            match typed(None, &bracketed)? {
                list @ Value::Array(_) => Ok(list),
                _ => Err(format!(
                    "{raw:?} is not a list: write its items separated by commas, numbers as they are and words \
                     in double quotes (1,2 or \"a\",\"b\")"
                )),
            }
        }
        _ => Ok(toml::from_str::<toml::Table>(&format!("v = {raw}"))
            .ok()
            .and_then(|mut table| table.remove("v"))
            .unwrap_or_else(|| Value::String(raw.to_owned()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moved_keys_are_read_where_they_are_now() {
        let aliases = [("model", "backend.model"), ("skills_dir", "skills.dir")];
        let table = with_aliases(toml::toml! { model = "qwen" other = 1 [backend] stream = true }, &aliases);
        assert_eq!(table, toml::toml! { other = 1 [backend] stream = true model = "qwen" });
        let table = with_aliases(toml::toml! { skills_dir = "x" }, &aliases);
        assert_eq!(table, toml::toml! { [skills] dir = "x" });
    }

    #[test]
    fn a_list_is_read_with_or_without_its_brackets_and_anything_else_is_refused_saying_how() {
        let list = toml::Value::Array(Vec::new());
        let numbers = toml::Value::Array(vec![toml::Value::Integer(2_000_860), toml::Value::Integer(42)]);
        for raw in ["2000860,42", "[2000860, 42]", " 2000860 , 42 "] {
            assert_eq!(typed(Some(&list), raw).unwrap(), numbers, "{raw}");
        }
        let words = toml::Value::Array(vec![toml::Value::String("a".into()), toml::Value::String("b".into())]);
        assert_eq!(typed(Some(&list), r#""a","b""#).unwrap(), words);
        for raw in ["abc", "1,x", "[1,", "a b"] {
            let error = typed(Some(&list), raw).unwrap_err();
            assert!(error.contains("is not a list") && error.contains("separated by commas"), "{raw}: {error}");
        }
    }

    #[test]
    fn tables_merge_key_by_key() {
        let mut base = toml::toml! { a = 1 [t] x = 1 y = 2 };
        merge(&mut base, toml::toml! { b = 2 [t] y = 3 });
        assert_eq!(base, toml::toml! { a = 1 b = 2 [t] x = 1 y = 3 });
    }

    fn set_by(key: &str, value: &str) -> Override {
        Override { key: key.into(), value: value.into(), origin: "--set".into() }
    }

    #[test]
    fn overrides_take_the_type_of_their_default() {
        let mut defaults = Config::defaults_table();
        defaults.insert("assistant".into(), toml::toml! { model = "default" stream = true temperature = 0.3 }.into());
        let overrides = vec![
            set_by("budget.run_ms", "250"),
            set_by("addr", "0.0.0.0:9000"),
            set_by("assistant.model", "7"),
            set_by("assistant.stream", "false"),
            set_by("assistant.temperature", "1"),
            set_by("assistant.extra_body.stop", "[\"\\n\"]"),
        ];
        let sources = Sources { overrides, ..Sources::default() };
        let config = sources.load(&defaults).unwrap();
        assert_eq!((config.budget.run_ms, config.addr.port()), (250, 9000));
        let assistant = &config.scenarios["assistant"];
        assert_eq!(assistant["model"].as_str(), Some("7"), "a string stays a string");
        assert_eq!(assistant["stream"].as_bool(), Some(false));
        assert_eq!(assistant["temperature"].as_float(), Some(1.0));
        assert_eq!(assistant["extra_body"]["stop"].as_array().map(Vec::len), Some(1), "no default: read as TOML");
    }

    #[test]
    fn every_default_applies_until_the_file_or_an_override_sets_its_key() {
        let mut defaults = Config::defaults_table();
        defaults.insert("default_scenario".into(), "demo".into());
        defaults.insert("demo".into(), toml::toml! { greeting = "hi" name = "demo" }.into());
        let config = Sources::default().load(&defaults).unwrap();
        assert_eq!(config.default_scenario, "demo", "a default the core's own type does not hold");
        assert_eq!(config.scenarios["demo"], toml::toml! { greeting = "hi" name = "demo" });

        let file = std::env::temp_dir().join(format!("megamind-defaults-{}.toml", std::process::id()));
        std::fs::write(&file, "default_scenario = \"other\"\n[demo]\ngreeting = \"hello\"\n").unwrap();
        let overrides = vec![set_by("demo.name", "mine")];
        let config = Sources { file: Some(file.clone()), overrides, ..Sources::default() }.load(&defaults);
        std::fs::remove_file(&file).unwrap();
        let config = config.unwrap();
        assert_eq!(config.default_scenario, "other", "the file wins");
        assert_eq!(config.scenarios["demo"], toml::toml! { greeting = "hello" name = "mine" }, "key by key");
    }

    #[test]
    fn every_bad_override_is_reported_with_its_origin() {
        let overrides = vec![
            Override { key: "budget.run_ms".into(), value: "fast".into(), origin: "--run-budget-ms".into() },
            set_by("log_level", "debug"),
            set_by("log_level.x", "1"),
            set_by("a..b", "1"),
        ];
        let error = Sources { overrides, ..Sources::default() }.load(&Config::defaults_table()).unwrap_err();
        assert_eq!(error.0.len(), 3, "{error}");
        assert!(error.0[0].starts_with("--run-budget-ms budget.run_ms=\"fast\": \"fast\" is not a whole number"));
        assert!(error.0[1].contains("log_level is not a table"), "{error}");
    }

    #[test]
    fn an_unknown_key_is_refused_by_name() {
        let sources = Sources { overrides: vec![set_by("budget.rn_ms", "5")], ..Sources::default() };
        let error = sources.load(&Config::defaults_table()).unwrap_err().to_string();
        assert!(error.contains("rn_ms"), "{error}");
    }
}
