//! A configuration file's text and the overrides set over it (what
//! `serve` is told by environment variables, flags and `--set`), loaded as
//! `serve` loads them (`Sources::load_text`, the file read in memory) over
//! the defaults of the core and of the assistant scenario. Never a panic,
//! and a secret's value (an API key, the store's URL, tvmtool's token)
//! never shows in a problem, whatever is wrong with it or around it.
//!
//! The input is the file, then a NUL, then one override per line,
//! `key=value`; a key `0`..`9` names the n-th secret key, so that the
//! fuzzer reaches them without spelling them.

#![no_main]

use std::{path::PathBuf, sync::LazyLock};

use libfuzzer_sys::fuzz_target;
use megamind_core::{
    config::sources::{Override, Sources},
    scenario::module,
};
use megamind_scenario_fuzz::config::{ALIASES, DEFAULTS, MODULES};

/// The keys whose values are secrets, as `serve` marks them: the core's
/// two (its flags live in the binary) and the scenarios' secret flags.
static SECRETS: LazyLock<Vec<String>> = LazyLock::new(|| {
    let core = ["store.url", "auth.tvmtool_token"].map(String::from);
    let scenarios = MODULES.iter().flat_map(|module| {
        let name = module.name();
        module.flags().into_iter().filter(|flag| flag.secret).map(move |flag| format!("{name}.{}", flag.key))
    });
    let secrets: Vec<String> = core.into_iter().chain(scenarios).collect();
    assert!(secrets.len() > 2, "the assistant marks no key secret: {secrets:?}");
    secrets
});

/// Whether `key` is a secret's or holds one (a table a secret's table
/// would be), as the loader judges it.
fn is_secret(key: &str) -> bool {
    SECRETS.iter().any(|secret| secret == key || secret.strip_prefix(key).is_some_and(|rest| rest.starts_with('.')))
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (file, lines) = text.split_once('\0').unwrap_or((text, ""));
    let overrides: Vec<Override> = lines
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(key, value)| {
            let key = match key.parse::<usize>() {
                Ok(n) if n < 10 => SECRETS[n % SECRETS.len()].clone(),
                _ => key.trim().to_owned(),
            };
            Override { key, value: value.to_owned(), origin: "--set".into() }
        })
        .collect();
    let sources = Sources {
        file: Some(PathBuf::from("fuzz.toml")),
        overrides: overrides.clone(),
        aliases: ALIASES.clone(),
        secret: SECRETS.clone(),
    };
    let Err(error) = sources.load_text(file, &DEFAULTS, &|config| module::problems(&MODULES, config)) else { return };
    let report = error.0.join("\n");
    assert!(!error.0.is_empty() && error.0.iter().all(|line| !line.trim().is_empty()), "{report:?}");
    // A value may show where it is written elsewhere too: in the file, as
    // a key, or as another key's value that is no secret.
    let shown_elsewhere = |value: &str| {
        file.contains(value)
            || overrides.iter().any(|o| o.key.contains(value) || (!is_secret(&o.key) && o.value.contains(value)))
    };
    for secret in overrides.iter().filter(|o| is_secret(&o.key)) {
        let value = secret.value.trim();
        // Short values are words any message may hold.
        if value.chars().count() < 8 || shown_elsewhere(value) {
            continue;
        }
        let quoted = format!("{value:?}");
        let quoted = &quoted[1..quoted.len() - 1];
        assert!(
            !report.contains(value) && !report.contains(quoted),
            "the secret {}'s value {value:?} shows in the report:\n{report}",
            secret.key
        );
    }
});
