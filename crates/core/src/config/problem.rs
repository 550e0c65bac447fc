//! [`Problem`]: one thing wrong with the configuration, at the dotted key it
//! is about, so that its source (a line of the file, a flag, a variable) can
//! be named; and [`read`], which reads a table key by key when it is refused
//! whole, so that every wrong key is found in one pass, a misspelt one with
//! the key it was meant to be.

use serde::de::DeserializeOwned;

use crate::text::did_you_mean;

/// One thing wrong with the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The dotted key it is about in the whole configuration
    /// (`budget.run_ms`, `assistant.backend.model`); empty when none.
    pub key: String,
    /// What is wrong, the key named.
    pub message: String,
}

impl Problem {
    /// A problem with `key`.
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem { key: key.into(), message: message.into() }
    }

    /// A problem from a message that opens with its dotted key, as
    /// validation writes them (`budget.run_ms = 0: must be 1..=60000 ms`).
    pub fn from_message(message: impl Into<String>) -> Problem {
        let message = message.into();
        let key: String =
            message.chars().take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')).collect();
        Problem { key: key.trim_end_matches('.').to_owned(), message }
    }
}

/// `message` without the value a reader quotes in it (``invalid type:
/// integer `12345`, expected a string`` → `invalid type: integer, expected a
/// string`): what a problem with a secret's key says.
pub fn without_value(message: &str) -> String {
    for marker in ["invalid type: ", "invalid value: "] {
        if let Some(at) = message.find(marker) {
            let (head, rest) = message.split_at(at + marker.len());
            // What is expected is the reader's words, after the value.
            let expected = rest.rfind(", expected").map_or("", |at| &rest[at..]);
            let found = &rest[..rest.len() - expected.len()];
            let kind = found.split(['`', '"']).next().unwrap_or_default().trim_end();
            return format!("{head}{kind}{expected}");
        }
    }
    message.to_owned()
}

/// Reads `table` as a `T`. When it is refused, each of its values is read
/// alone over `defaults` (a `T` with every default, as a table), so that every
/// key at fault is named, each under `prefix` (a scenario's name, or empty for
/// the core's keys).
pub fn read<T: DeserializeOwned>(table: &toml::Table, defaults: &toml::Table, prefix: &str) -> Result<T, Vec<Problem>> {
    let whole = match T::deserialize(toml::Value::Table(table.clone())) {
        Ok(value) => return Ok(value),
        Err(error) => error.to_string(),
    };
    let mut problems = Vec::new();
    let mut everywhere = Vec::new();
    dotted_keys(defaults, "", &mut everywhere);
    let mut path = Vec::new();
    each_value(table, defaults, &mut path, &mut |path, value| {
        let mut alone = defaults.clone();
        place(&mut alone, path, value.clone());
        if let Err(error) = T::deserialize(toml::Value::Table(alone)) {
            let key = joined(prefix, &path.join("."));
            problems.push(Problem::new(key.clone(), explain(&key, &error.to_string(), &everywhere)));
        }
    });
    if problems.is_empty() {
        // Only values together are refused: say so as the reader did.
        problems.push(Problem::new(prefix, explain(prefix, &whole, &everywhere)));
    }
    Err(problems)
}

/// Calls `each` with the dotted path of every value of `table`, going into
/// a table only where `defaults` has one too (elsewhere a table is one value).
fn each_value(
    table: &toml::Table,
    defaults: &toml::Table,
    path: &mut Vec<String>,
    each: &mut dyn FnMut(&[String], &toml::Value),
) {
    for (key, value) in table {
        path.push(key.clone());
        match (value, defaults.get(key)) {
            (toml::Value::Table(inner), Some(toml::Value::Table(known))) => each_value(inner, known, path, each),
            _ => each(path, value),
        }
        path.pop();
    }
}

/// Sets `value` at `path`, whose tables all exist in `table` but the last.
fn place(table: &mut toml::Table, path: &[String], value: toml::Value) {
    let Some((last, tables)) = path.split_last() else { return };
    let mut at = table;
    for key in tables {
        match at.get_mut(key).and_then(toml::Value::as_table_mut) {
            Some(inner) => at = inner,
            None => return,
        }
    }
    at.insert(last.clone(), value);
}

/// Every dotted key of `table` (tables too), under `prefix`.
fn dotted_keys(table: &toml::Table, prefix: &str, keys: &mut Vec<String>) {
    for (key, value) in table {
        let key = joined(prefix, key);
        if let toml::Value::Table(inner) = value {
            dotted_keys(inner, &key, keys);
        }
        keys.push(key);
    }
}

fn joined(prefix: &str, key: &str) -> String {
    match (prefix.is_empty(), key.is_empty()) {
        (true, _) => key.to_owned(),
        (_, true) => prefix.to_owned(),
        _ => format!("{prefix}.{key}"),
    }
}

/// A reader's message about `key`, in the configuration's words: an unknown
/// field is an unknown key with the key it was likely meant to be (beside
/// it, else `everywhere` in the table, where a key may have moved), or those
/// known; Rust's integer types are whole numbers.
fn explain(key: &str, message: &str, everywhere: &[String]) -> String {
    // The reader names the key again on a line of its own: it is in front.
    let message = message.split_once("\nin `").map_or(message, |(message, _)| message).trim_end();
    let subject = if key.is_empty() { String::new() } else { format!("{key}: ") };
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let (field, expected) = rest.split_once('`').unwrap_or((rest, ""));
        let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
        if known.is_empty() {
            return format!("{subject}unknown key: this table has no keys");
        }
        let mut near = did_you_mean(field, known.iter().copied());
        if near.is_empty() {
            let last = |dotted: &str| dotted.rsplit('.').next().unwrap_or_default().to_owned();
            let lasts: Vec<String> = everywhere.iter().map(|dotted| last(dotted)).collect();
            if let Some(found) = crate::text::nearest(field, lasts.iter().map(String::as_str)) {
                let at = everywhere.iter().find(|dotted| last(dotted) == found);
                near = at.map(|at| format!("; did you mean `{at}`?")).unwrap_or_default();
            }
        }
        return match near {
            near if near.is_empty() => format!("{subject}unknown key (known: {})", known.join(", ")),
            near => format!("{subject}unknown key{near}"),
        };
    }
    let mut message = message.to_owned();
    for (rust, words) in [
        ("u8", "a whole number, 0 or more"),
        ("u16", "a whole number, 0 or more"),
        ("u32", "a whole number, 0 or more"),
        ("u64", "a whole number, 0 or more"),
        ("usize", "a whole number, 0 or more"),
        ("i64", "a whole number"),
        ("f64", "a number"),
    ] {
        if let Some(head) = message.strip_suffix(&format!("expected {rust}")) {
            message = format!("{head}expected {words}");
        }
    }
    format!("{subject}{message}")
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Default, Deserialize, serde::Serialize)]
    #[serde(default, deny_unknown_fields)]
    struct Inner {
        commit_ms: u64,
        run_ms: u64,
    }

    #[derive(Debug, Default, Deserialize, serde::Serialize)]
    #[serde(default, deny_unknown_fields)]
    struct Outer {
        default_scenario: String,
        budget: Inner,
        name: Option<String>,
    }

    #[test]
    fn every_wrong_key_is_named_each_with_the_key_it_was_meant_to_be() {
        let table = toml::toml! {
            defualt_scenario = "demo"
            name = "kept"
            [budget]
            comit_ms = 5
            run_ms = -5
        };
        let defaults = toml::Table::try_from(Outer::default()).unwrap();
        let problems = read::<Outer>(&table, &defaults, "").unwrap_err();
        let messages: Vec<&str> = problems.iter().map(|problem| problem.message.as_str()).collect();
        assert_eq!(
            messages,
            [
                "defualt_scenario: unknown key; did you mean `default_scenario`?",
                "budget.comit_ms: unknown key; did you mean `commit_ms`?",
                "budget.run_ms: invalid value: integer `-5`, expected a whole number, 0 or more",
            ]
        );
        assert_eq!(problems[1].key, "budget.comit_ms");
        let problems = read::<Outer>(&toml::toml! { xyz = 1 }, &defaults, "demo").unwrap_err();
        assert_eq!(problems[0].message, "demo.xyz: unknown key (known: default_scenario, budget, name)");
        let problems = read::<Outer>(&toml::toml! { rn_ms = 1 }, &defaults, "").unwrap_err();
        assert_eq!(problems[0].message, "rn_ms: unknown key; did you mean `budget.run_ms`?", "a key in a table below");
        let read = read::<Outer>(&toml::toml! { name = "x" }, &defaults, "").unwrap();
        assert_eq!(read.name.as_deref(), Some("x"), "a key with no default is read too");
    }

    #[test]
    fn a_secret_s_problem_names_the_type_of_its_value_never_the_value() {
        for (message, shown) in [
            ("k: invalid type: integer `12345`, expected a string", "k: invalid type: integer, expected a string"),
            (
                "k: invalid type: floating point `1.5`, expected a string",
                "k: invalid type: floating point, expected a string",
            ),
            ("k: invalid type: boolean `true`, expected a string", "k: invalid type: boolean, expected a string"),
            ("k: invalid value: string \"a, expected b\", expected c", "k: invalid value: string, expected c"),
            ("k: invalid type: sequence, expected a string", "k: invalid type: sequence, expected a string"),
            (
                "k: 5 bytes; a key shorter than 32 bytes is guessable",
                "k: 5 bytes; a key shorter than 32 bytes is guessable",
            ),
        ] {
            assert_eq!(without_value(message), shown);
        }
    }

    #[test]
    fn a_validation_message_is_at_the_key_it_opens_with() {
        assert_eq!(Problem::from_message("budget.run_ms = 0: must be 1..=60000 ms").key, "budget.run_ms");
        assert_eq!(Problem::from_message("store.url: the scheme is \"http\"").key, "store.url");
        assert_eq!(Problem::from_message("log_level \"x\": not a level").key, "log_level");
    }
}
