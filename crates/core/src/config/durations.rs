//! The bound every duration of a scenario's table has, whatever else the
//! scenario checks: a key ending in `_ms` or `_secs` holds at most 30 days
//! ([`MAX_TTL_SECS`], the longest the core's own keys allow). Durations are
//! added to clocks and deadlines, and one near the integer's limit would
//! overflow there (a cache TTL of `i64::MAX` seconds once made every answer
//! a panic); a scenario's own, tighter bounds are its to check.

use super::{MAX_TTL_SECS, Problem, leaves::for_each_leaf};

/// The durations of the table of scenario `name` past the bound, each a
/// problem at its dotted key (lists' items under the list's key).
pub fn too_long(name: &str, table: &toml::Table) -> Vec<Problem> {
    let mut problems = Vec::new();
    // A copy, for the one walk the checks share changes values in place:
    // read once at start, a table costs little to copy.
    let mut table = table.clone();
    for_each_leaf(name, &mut table, &mut |key, value| {
        let leaf = key.rsplit('.').next().unwrap_or(key);
        let (most, unit) = if leaf.ends_with("_ms") {
            (MAX_TTL_SECS * 1_000, "ms")
        } else if leaf.ends_with("_secs") {
            (MAX_TTL_SECS, "s")
        } else {
            return;
        };
        // A negative one is refused as a value already.
        let Some(amount) = value.as_integer().and_then(|amount| u64::try_from(amount).ok()) else { return };
        if amount > most {
            problems.push(Problem::new(key, format!("{key} = {amount}: must be at most 30 days ({most} {unit})")));
        }
    });
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_past_thirty_days_is_refused_at_any_depth_and_one_at_it_is_not() {
        let table: toml::Table = toml::from_str(
            "ttl_secs = 2592000\nwait_ms = 2592000001\nname_secs = \"soon\"\n\
             [inner]\nheartbeat_secs = 9223372036854775807\nlimits_ms = [1, 2592000001]\ncount = 9999999999\n",
        )
        .unwrap();
        let problems = too_long("echo", &table);
        let keys: Vec<&str> = problems.iter().map(|problem| problem.key.as_str()).collect();
        assert_eq!(keys, ["echo.wait_ms", "echo.inner.heartbeat_secs", "echo.inner.limits_ms"]);
        assert_eq!(problems[0].message, "echo.wait_ms = 2592000001: must be at most 30 days (2592000000 ms)");
    }
}
