//! Checks of the whole configuration, the core's keys and every scenario's
//! table alike, that no one table makes of its own: no placeholder
//! `--print-config` writes in place of a secret. (Durations are bounded
//! where the tables are read: the core's by their own checks, a
//! scenario's by `megamind_core::config::durations`.)

use megamind_core::config::{HIDDEN, Problem, leaves::for_each_leaf};

use super::flags::Bound;

/// Calls `visit` with the dotted key and the text of every string in
/// `table`, those in lists included (under the list's key).
pub(super) fn for_each_string(table: &mut toml::Table, visit: &mut dyn FnMut(&str, &mut String)) {
    for_each_leaf("", table, &mut |key, value| {
        if let toml::Value::String(text) = value {
            visit(key, text);
        }
    });
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
