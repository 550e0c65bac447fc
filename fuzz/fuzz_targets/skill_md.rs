//! A `SKILL.md`, whatever its text: a skill loads within its bounds, or is
//! refused saying why, never a panic; its warnings stay few however many
//! unknown keys or items it holds.

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use megamind_assistant::skills::catalog::{self, MAX_ITEMS, MAX_KEY_WARNINGS};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let path = Path::new("fuzz/SKILL.md");
    match catalog::parse("fuzz", path, text) {
        Ok((skill, warnings)) => {
            assert_eq!(skill.name, "fuzz");
            assert!(skill.triggers.len() <= MAX_ITEMS && skill.parameters.len() <= MAX_ITEMS);
            assert!(skill.triggers.iter().all(|trigger| !trigger.trim().is_empty() && trigger.trim() == trigger));
            // The unknown keys named and their count, and one warning per list cut.
            assert!(warnings.len() <= MAX_KEY_WARNINGS + 3, "{} warnings", warnings.len());
            assert!(warnings.iter().all(|warning| !warning.skipped && warning.path == path));
        }
        Err(problem) => assert!(problem.skipped && problem.path == path && !problem.reason.is_empty()),
    }
});
