//! A configuration file's text (what `serve --config` reads), loaded as
//! `Sources` loads a file, in memory: parsed as TOML, its keys' lines
//! found (`Origins::of_file`), moved keys read where they are now, merged
//! over the defaults of the core and of the assistant scenario, then read
//! (`Config::read`), checked (`Config::problems`, the assistant's own
//! checks) and reported line by line (`Origins::render`). Never a panic;
//! every problem says something, and every line of the report is one of
//! them, with its place in front; a text loaded without a problem prints
//! (`toml::to_string`, as `--print-config` does) as TOML that reads back as
//! the same configuration, without a problem.

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use megamind_core::{
    config::{
        Config, Origins, Problem,
        sources::{merge, with_aliases},
    },
    scenario::module,
};
use megamind_scenario_fuzz::config::{ALIASES, DEFAULTS, MODULES};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // Not TOML: the file is the only problem (`Sources::table`), told by toml.
    let file: toml::Table = match toml::from_str(text) {
        Ok(file) => file,
        Err(error) => {
            assert!(!error.message().trim().is_empty(), "a file refused without a word: {text:?}");
            return;
        }
    };
    let aliases: Vec<(&str, &str)> = ALIASES.iter().map(|(old, new)| (old.as_str(), new.as_str())).collect();
    let mut origins = Origins::of_file(Path::new("fuzz.toml"), text);
    let mut table = DEFAULTS.clone();
    merge(&mut table, with_aliases(file, &aliases));
    origins.moved(&aliases);
    let (config, mut problems) = Config::read(table);
    problems.extend(config.problems().into_iter().map(Problem::from_message));
    problems.extend(module::problems(&MODULES, &config));
    for problem in &problems {
        assert!(!problem.message.trim().is_empty(), "a problem that says nothing: {problem:?}");
    }
    let report = origins.render(Vec::new(), problems.clone());
    assert!(report.len() <= problems.len(), "{} lines for {} problems", report.len(), problems.len());
    for line in &report {
        assert!(
            problems.iter().any(|problem| line.ends_with(&problem.message)),
            "{line:?} reports no problem found: {problems:?}"
        );
    }
    if !problems.is_empty() {
        return;
    }

    let printed = toml::to_string(&config).unwrap_or_else(|e| panic!("{config:?} does not print as TOML: {e}"));
    let read: toml::Table = toml::from_str(&printed).unwrap_or_else(|e| panic!("{printed:?} printed is not TOML: {e}"));
    let (mut again, problems) = Config::read(read);
    assert!(problems.is_empty(), "{printed:?} printed reads back with problems: {problems:?}");
    assert!(again.problems().is_empty(), "{printed:?} printed reads back out of bounds: {:?}", again.problems());
    // The scenarios' tables are theirs to print, not the core's.
    assert!(again.scenarios.is_empty(), "{printed:?} printed with a scenario's table");
    again.scenarios = config.scenarios.clone();
    assert_eq!(again, config, "{printed:?} printed reads back as another configuration");
});
