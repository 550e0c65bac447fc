//! Checks of the whole configuration, the core's keys and every scenario's
//! table alike, that no one table makes of its own: durations within a day,
//! and no placeholder `--print-config` writes in place of a secret.

use megamind_core::config::{HIDDEN, Problem};

use super::flags::Bound;

/// The longest duration any key may hold: a day. Durations are added to
/// clocks and deadlines; one near the integer's limit would overflow there
/// (a cache TTL of `i64::MAX` seconds made every answer a panic), and none
/// of a server's timeouts, TTLs or delays needs more.
const MAX_DURATION_SECS: u64 = 86_400;

/// Calls `visit` with the dotted key and the value of every leaf of
/// `table` (what is neither a table nor a list), those in lists included
/// (under the list's key).
fn for_each_leaf(table: &mut toml::Table, visit: &mut dyn FnMut(&str, &mut toml::Value)) {
    fn walk(value: &mut toml::Value, key: &str, visit: &mut dyn FnMut(&str, &mut toml::Value)) {
        match value {
            toml::Value::Table(table) => {
                table.iter_mut().for_each(|(name, value)| walk(value, &format!("{key}.{name}"), visit))
            }
            toml::Value::Array(values) => values.iter_mut().for_each(|value| walk(value, key, visit)),
            leaf => visit(key, leaf),
        }
    }
    table.iter_mut().for_each(|(name, value)| walk(value, name, visit));
}

/// Calls `visit` with the dotted key and the text of every string in
/// `table`, those in lists included (under the list's key).
pub(super) fn for_each_string(table: &mut toml::Table, visit: &mut dyn FnMut(&str, &mut String)) {
    for_each_leaf(table, &mut |key, value| {
        if let toml::Value::String(text) = value {
            visit(key, text);
        }
    });
}

/// Durations (keys ending in `_ms` or `_secs`) longer than a day.
pub(super) fn long_durations(table: &mut toml::Table) -> Vec<Problem> {
    let mut problems = Vec::new();
    for_each_leaf(table, &mut |key, value| {
        let name = key.rsplit('.').next().unwrap_or(key);
        let (most, unit) = if name.ends_with("_ms") {
            (MAX_DURATION_SECS * 1_000, "ms")
        } else if name.ends_with("_secs") {
            (MAX_DURATION_SECS, "s")
        } else {
            return;
        };
        // A negative one is refused as a value already.
        let Some(amount) = value.as_integer().and_then(|amount| u64::try_from(amount).ok()) else { return };
        if amount > most {
            let message = format!("{key} = {amount}: must be at most a day ({most} {unit})");
            problems.push(Problem::new(key.to_owned(), message));
        }
    });
    problems
}

/// Values that hold the placeholder `--print-config` writes in place of a
/// secret: a secret's `<hidden>`, or any URL's `:<hidden>@` password. A
/// configuration saved from its output and loaded again would otherwise
/// send the placeholder as a key or a password.
pub(super) fn placeholder_secrets(table: &mut toml::Table, flags: &[Bound]) -> Vec<Problem> {
    let in_url = format!(":{HIDDEN}@");
    let mut problems = Vec::new();
    for_each_string(table, &mut |key, value| {
        let what = if value == HIDDEN && flags.iter().any(|bound| bound.flag.secret && bound.key == key) {
            format!("{key} = {HIDDEN:?}")
        } else if value.contains(&in_url) {
            format!("{key}: the password {HIDDEN:?}")
        } else {
            return;
        };
        // Written in a file, most likely: where else the real value can go.
        let hint = flags.iter().find(|bound| bound.key == key).map(|bound| {
            let variable = bound.flag.env.as_deref().map(|env| format!(" or {env}")).unwrap_or_default();
            format!(" (in the file, or with --{}{variable})", bound.flag.long)
        });
        let message = format!(
            "{what} is the placeholder --print-config writes in place of a secret, not a value; give the real one{}",
            hint.unwrap_or_default()
        );
        problems.push(Problem::new(key.to_owned(), message));
    });
    problems
}
