use std::{
    path::{Path, PathBuf},
    sync::atomic::{AtomicUsize, Ordering},
};

use super::*;

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/skills")
}

/// A fresh folder under the system's temporary folder.
fn scratch(name: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "skills-{name}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

fn write_skill(dir: &Path, folder: &str, text: &str) {
    std::fs::create_dir_all(dir.join(folder)).expect("skill folder");
    std::fs::write(dir.join(folder).join("SKILL.md"), text).expect("SKILL.md");
}

#[test]
fn the_testdata_skills_load_and_the_bad_one_is_reported() {
    let (catalog, problems) = Catalog::load(&testdata());
    let names: Vec<&str> = catalog.skills().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["disk-usage", "git-quick-commit"]);
    assert_eq!(problems.len(), 1, "{problems:?}");
    let problem = problems.first().expect("one problem");
    assert!(problem.skipped && problem.path.ends_with("bad-name-Folder/SKILL.md"));
    assert_eq!(problem.line, Some(2));
    assert!(problem.to_string().contains(":2: skipped: `name` \"Bad--Name\""), "{problem}");

    let skill = catalog.get("git-quick-commit").expect("the git-quick-commit skill");
    assert!(
        skill.body.starts_with("## What I do\n\nЯ выполняю следующие шаги:\n1. Запускаю `git status --porcelain`\n")
    );
    assert_eq!(skill.allowed_tools.as_deref(), Some(&["Bash(git:*)".to_string()][..]));
    assert_eq!(skill.triggers, ["быстрый коммит", "quick commit"]);
    assert!(skill.parameters.is_empty());
    assert_eq!(skill.license.as_deref(), Some("Apache-2.0"));

    let disk = catalog.get("disk-usage").expect("disk-usage");
    assert_eq!(disk.triggers, ["сколько места на диске", "disk usage"]);
    let parameters: Vec<(&str, &str)> =
        disk.parameters.iter().map(|p| (p.name.as_str(), p.description.as_str())).collect();
    assert_eq!(
        parameters,
        [("path", "the folder to measure, the current one by default"), ("top", "how many folders to list")]
    );
    assert_eq!(disk.allowed_tools.as_ref().map(Vec::len), Some(4));
    assert_eq!(disk.compatibility.as_deref(), Some("Linux or macOS with du and sort"));
}

#[test]
fn lookups_by_closest_name_and_by_trigger() {
    let (catalog, _) = Catalog::load(&testdata());
    assert_eq!(catalog.closest("git-quik-comit", 3), ["git-quick-commit"]);
    assert_eq!(catalog.closest("disk", 3), ["disk-usage"]);
    assert!(catalog.closest("zzzzzzzzzzzzzzzzzzzzzzzz", 3).is_empty());
    assert!(catalog.closest(&"x".repeat(100_000), 3).is_empty());
    let name = |utterance: &str| catalog.find_trigger(utterance).map(|s| s.name.as_str());
    assert_eq!(name("Алиса, сделай быстрый коммит!"), Some("git-quick-commit"));
    assert_eq!(name("QUICK   commit please"), Some("git-quick-commit"));
    assert_eq!(name("сколько места на диске осталось"), Some("disk-usage"));
    assert_eq!(name("quick committee"), None);
    assert_eq!(name(""), None);
}

#[test]
fn malformed_skills_are_reported_and_skipped_without_stopping_the_others() {
    let dir = scratch("malformed");
    write_skill(&dir, "good", "---\nname: good\ndescription: Fine.\n---\nBody\n");
    let cases = [
        ("no-front", "# Just markdown\n", Some(1), "no front matter"),
        ("unclosed", "---\nname: unclosed\ndescription: x\n", Some(1), "no front matter"),
        ("bad-yaml", "---\nname: bad-yaml\ndescription: [unclosed\n---\n", None, "invalid front matter"),
        ("no-description", "---\nname: no-description\n---\n", None, "description"),
        ("empty-description", "---\nname: empty-description\ndescription: \"  \"\n---\n", Some(3), "1 to 1024"),
        ("other-folder", "---\nname: another\ndescription: x\n---\n", Some(2), "differs from its folder"),
        ("-lead", "---\nname: -lead\ndescription: x\n---\n", Some(2), "single inner hyphens"),
        (
            "metadata-list",
            "---\nname: metadata-list\ndescription: x\nmetadata:\n  triggers: [a, b]\n---\n",
            None,
            "invalid",
        ),
        ("not-utf8", "---\nname: not-utf8\ndescription: \u{0}\n---\n", None, ""),
    ];
    for (folder, text, _, _) in &cases {
        write_skill(&dir, folder, text);
    }
    std::fs::write(dir.join("not-utf8/SKILL.md"), b"---\nname: not-utf8\ndescription: \xff\n---\n").expect("write");
    std::fs::write(dir.join("README.md"), "not a skill").expect("write");
    std::fs::create_dir_all(dir.join("empty-folder")).expect("mkdir");
    let long = format!("---\nname: too-long\ndescription: {}\n---\n", "d".repeat(1025));
    write_skill(&dir, "too-long", &long);
    let huge = format!("---\nname: huge\ndescription: x\n---\n{}", "x".repeat(MAX_SKILL_BYTES as usize));
    write_skill(&dir, "huge", &huge);

    let (catalog, problems) = Catalog::load(&dir);
    let names: Vec<&str> = catalog.skills().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["good"]);
    assert!(problems.iter().all(|p| p.skipped));
    assert_eq!(problems.len(), cases.len() + 2, "{problems:#?}");
    for (folder, _, line, reason) in cases {
        let problem = problems.iter().find(|p| p.path.parent().is_some_and(|d| d.ends_with(folder))).expect(folder);
        assert!(problem.reason.contains(reason), "{folder}: {problem}");
        if line.is_some() {
            assert_eq!(problem.line, line, "{folder}: {problem}");
        }
    }
    let bad_yaml = problems.iter().find(|p| p.path.to_string_lossy().contains("bad-yaml")).expect("bad-yaml");
    assert!(bad_yaml.line.is_some_and(|line| line >= 2), "{bad_yaml}");
    assert!(problems.iter().any(|p| p.reason.contains("larger than")));
    assert!(problems.iter().any(|p| p.reason.contains("not, 1025") || p.reason.contains("not 1025")));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unknown_keys_are_warnings_and_allowed_tools_take_both_forms() {
    let dir = scratch("warnings");
    write_skill(
        &dir,
        "lists",
        "---\nname: lists\ndescription: x\nversion: 2\nauthor: me\nallowed-tools:\n  - Bash(git:*)\n  - Read\n---\n",
    );
    write_skill(
        &dir,
        "line",
        "---\nname: line\ndescription: x\nallowed-tools: Bash(git commit:*), Bash(git status) Read\n---\n",
    );
    let (catalog, problems) = Catalog::load(&dir);
    assert_eq!(catalog.len(), 2);
    let warnings: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert_eq!(problems.len(), 2, "{warnings:?}");
    assert!(problems.iter().all(|p| !p.skipped));
    assert!(warnings.iter().any(|w| w.ends_with("SKILL.md:5: warning: unknown key `author` ignored")), "{warnings:?}");
    assert!(warnings.iter().any(|w| w.ends_with("SKILL.md:4: warning: unknown key `version` ignored")), "{warnings:?}");
    let tools = |name: &str| catalog.get(name).and_then(|s| s.allowed_tools.clone()).unwrap_or_default();
    assert_eq!(tools("lists"), ["Bash(git:*)", "Read"]);
    assert_eq!(tools("line"), ["Bash(git commit:*)", "Bash(git status)", "Read"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_folder_is_one_problem() {
    let (catalog, problems) = Catalog::load(Path::new("/nonexistent/skills"));
    assert!(catalog.is_empty());
    assert_eq!(problems.len(), 1);
}

#[cfg(unix)]
#[test]
fn links_are_followed_one_level_and_special_files_refused() {
    let dir = scratch("links");
    write_skill(&dir, "real", "---\nname: real\ndescription: x\n---\n");
    // A folder linking to its parent: read once, never walked into.
    std::os::unix::fs::symlink(&dir, dir.join("loop")).expect("symlink");
    std::fs::create_dir_all(dir.join("zero")).expect("mkdir");
    std::os::unix::fs::symlink("/dev/zero", dir.join("zero/SKILL.md")).expect("symlink");
    let (catalog, problems) = Catalog::load(&dir);
    assert_eq!(catalog.len(), 1);
    assert!(problems.iter().any(|p| p.reason == "not a regular file"), "{problems:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_alias_bomb_in_the_front_matter_is_refused_quickly() {
    let mut yaml = String::from(
        "---\nname: laughs\ndescription: x\nmetadata:\n  a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
    );
    for i in 1..10 {
        let p = i - 1;
        yaml.push_str(&format!(
            "  a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    yaml.push_str("---\n");
    let started = std::time::Instant::now();
    let result = parse("laughs", Path::new("laughs/SKILL.md"), &yaml);
    assert!(result.is_err());
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

#[test]
fn metadata_scalars_are_read_as_strings() {
    let text = "---\nname: meta\ndescription: x\nmetadata:\n  version: 1.0\n  author: me\n---\n";
    let (skill, warnings) = parse("meta", Path::new("meta/SKILL.md"), text).expect("a valid skill");
    assert!(warnings.is_empty());
    assert_eq!(skill.metadata.get("version").map(String::as_str), Some("1.0"));
}

#[test]
fn a_front_matter_of_thousands_of_unknown_keys_names_a_few_and_counts_the_rest() {
    let mut text = String::from("---\nname: many\ndescription: x\n");
    let mut keys = 0;
    while text.len() < MAX_SKILL_BYTES as usize - 64 {
        text.push_str(&format!("k{keys}: 1\n"));
        keys += 1;
    }
    text.push_str("---\n");
    let (_, warnings) = parse("many", Path::new("many/SKILL.md"), &text).expect("a valid skill");
    assert_eq!(warnings.len(), MAX_KEY_WARNINGS + 1, "{warnings:?}");
    // Named in key order, with their lines.
    let first = warnings.first().expect("a warning");
    assert_eq!((first.line, first.reason.as_str()), (Some(4), "unknown key `k0` ignored"));
    let last = warnings.last().expect("the count");
    assert_eq!(last.reason, format!("{} more unknown keys ignored", keys - MAX_KEY_WARNINGS));
}

#[test]
fn a_skill_keeps_its_first_triggers_and_parameters_and_warns_of_the_rest() {
    let phrases = |word: &str| (0..MAX_ITEMS + 36).map(|i| format!("{word} {i}")).collect::<Vec<_>>().join(", ");
    let text = format!(
        "---\nname: wordy\ndescription: x\nmetadata:\n  triggers: {}\n  parameters: {}\n---\n",
        phrases("скажи"),
        phrases("p")
    );
    let dir = scratch("wordy");
    write_skill(&dir, "wordy", &text);
    let (catalog, problems) = Catalog::load(&dir);
    let skill = catalog.get("wordy").expect("loaded");
    assert_eq!((skill.triggers.len(), skill.parameters.len()), (MAX_ITEMS, MAX_ITEMS));
    let reasons: Vec<&str> = problems.iter().map(|p| p.reason.as_str()).collect();
    assert_eq!(
        reasons,
        [
            format!("`metadata.triggers`: {} items, only the first {MAX_ITEMS} are used", MAX_ITEMS + 36),
            format!("`metadata.parameters`: {} items, only the first {MAX_ITEMS} are used", MAX_ITEMS + 36),
        ]
    );
    assert!(problems.iter().all(|p| !p.skipped && p.line == Some(4)), "{problems:?}");
    let name = |utterance: &str| catalog.find_trigger(utterance).map(|s| s.name.as_str());
    assert_eq!(name("Скажи 63!"), Some("wordy"));
    assert_eq!(name("скажи 64"), None);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn closest_compares_only_the_first_characters_of_a_huge_query() {
    let dir = scratch("closest");
    // The longest name a skill may have: only a query about twice as long
    // can come within reach of it.
    let name = "a".repeat(64);
    write_skill(&dir, &name, &format!("---\nname: {name}\ndescription: x\n---\n"));
    let (catalog, problems) = Catalog::load(&dir);
    assert!(problems.is_empty(), "{problems:?}");
    let prefix = "a".repeat(MAX_QUERY_CHARS);
    assert_eq!(catalog.closest(&prefix, 3), [name.as_str()], "a query of {MAX_QUERY_CHARS} characters reaches it");
    // Read whole, 100 000 more characters would put every name out of reach
    // (and cost 100 000 × 64 steps per name).
    let huge = format!("{prefix}{}", "b".repeat(100_000));
    assert_eq!(catalog.closest(&huge, 3), catalog.closest(&prefix, 3), "the characters past the bound are ignored");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A valid skill of each of `names` in `dir`.
fn write_valid_skills(dir: &Path, names: impl Iterator<Item = String>) {
    for name in names {
        write_skill(dir, &name, &format!("---\nname: {name}\ndescription: x\n---\n"));
    }
}

#[test]
fn a_folder_of_more_skills_than_the_bound_loads_the_first_by_name_and_reports_the_rest() {
    let dir = scratch("many");
    write_valid_skills(&dir, (0..300).map(|i| format!("skill-{i:04}")));
    let (catalog, problems) = Catalog::load(&dir);
    assert_eq!(catalog.len(), MAX_SKILLS, "the catalog stops at its bound");
    let loaded: Vec<String> = catalog.skills().map(|s| s.name.clone()).collect();
    let first: Vec<String> = (0..MAX_SKILLS).map(|i| format!("skill-{i:04}")).collect();
    assert_eq!(loaded, first, "the first skills by name");
    // One problem for all that were left out, naming the first of them.
    assert_eq!(problems.len(), 1, "{problems:?}");
    let reason = format!(
        "more than {MAX_SKILLS} skills: 44 left out (skill-0256, skill-0257, skill-0258, skill-0259, skill-0260, skill-0261, skill-0262, skill-0263, …)"
    );
    assert!(!problems[0].skipped && problems[0].reason == reason, "{:?}", problems[0]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_folder_of_more_entries_than_the_bound_is_read_only_up_to_it() {
    let dir = scratch("entries");
    // Every entry a skill, so that the skills left out count the entries looked at.
    write_valid_skills(&dir, (0..5_000).map(|i| format!("s{i:04}")));
    let (catalog, problems) = Catalog::load(&dir);
    assert_eq!(catalog.len(), MAX_SKILLS);
    let reasons: Vec<&str> = problems.iter().map(|p| p.reason.as_str()).collect();
    let entries =
        format!("more than {MAX_ENTRIES} entries: only the first {MAX_ENTRIES} the filesystem lists are looked at");
    assert_eq!(reasons[0], entries, "{reasons:?}");
    // Only the entries looked at count: the rest are not even skills left out.
    let left_out = MAX_ENTRIES - MAX_SKILLS;
    let counted = format!("more than {MAX_SKILLS} skills: {left_out} left out (");
    assert!(reasons.len() == 2 && reasons[1].starts_with(&counted), "{reasons:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
