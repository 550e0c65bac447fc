//! Checks a log filter before logging starts. tracing's `EnvFilter` reads a
//! bare word such as `verbose` as "everything of the target `verbose`", which
//! silently turns every other line off; here a bare word must be a level.

/// The levels a bare directive may name.
const LEVELS: &[&str] = &["trace", "debug", "info", "warn", "error", "off"];

/// `Ok` for tracing's filter syntax (`info`, `warn,hyper=debug`,
/// `megamind_scenario::access=info`, `[span]=debug`), an explanation otherwise.
pub(super) fn check(filter: &str) -> Result<(), String> {
    if filter.trim().is_empty() {
        return Err(format!("empty; use a level ({})", LEVELS.join(", ")));
    }
    for directive in filter.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let names_a_target = directive.contains('=') || directive.contains("::") || directive.contains('[');
        if !names_a_target && !LEVELS.contains(&directive.to_ascii_lowercase().as_str()) {
            return Err(format!(
                "{directive:?} is not a level ({}) nor a directive (target=level, e.g. hyper=debug)",
                LEVELS.join(", ")
            ));
        }
    }
    tracing_subscriber::EnvFilter::builder().parse(filter).map(drop).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_and_directives_pass_and_bare_words_do_not() {
        for good in
            ["info", "Debug", "off", "warn,megamind_scenario=debug", "megamind_scenario::access", "[call]=debug"]
        {
            check(good).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        for bad in ["verbose", "info,loud", "", "hyper=loud", "info,["] {
            assert!(check(bad).is_err(), "{bad:?} accepted");
        }
        assert!(check("verbose").unwrap_err().contains("debug"), "the levels are listed");
    }
}
