use super::*;

const SEED: &str = r#"
dialogs:
  - name: open an app
    scenario: assistant
    turns:
      - say: "открой Safari"
        expect:
          speech: {contains: "Safari"}
          directives[0].OpenAppDirective.AppName: "Safari"
          max_ms: 300
      - callback: {name: skill_command_result, payload: {output: "", exit_code: 0}}
        expect: {should_listen: true}
"#;

#[test]
fn the_spec_example_loads() {
    let loaded = parse("seed.yaml", SEED).unwrap();
    let (dialog, expectations) = &loaded.dialogs[0];
    assert_eq!((dialog.name.as_str(), dialog.scenario.as_deref()), ("open an app", Some("assistant")));
    assert_eq!(dialog.turns.len(), 2);
    assert_eq!(dialog.turns[1].callback.as_ref().unwrap().payload["exit_code"], 0);
    assert_eq!(expectations[0].max_ms, Some(300));
    assert_eq!(expectations[0].checks.len(), 2);
}

#[test]
fn a_command_result_turn_loads_and_is_one_input() {
    let text = "dialogs:\n  - name: skill\n    turns:\n      - say: запусти навык git-quick-commit\n      - command_result: {output: \" M a.txt\", exit_code: 0}\n      - command_result: {skipped: true}\n";
    let loaded = parse("skill.yaml", text).unwrap();
    let turns = &loaded.dialogs[0].0.turns;
    let result = turns[1].command_result.as_ref().unwrap();
    assert_eq!((result.output.as_str(), result.exit_code, result.skipped), (" M a.txt", 0, false));
    assert!(turns[2].command_result.as_ref().unwrap().skipped);
    let both = "dialogs:\n  - name: x\n    turns:\n      - say: a\n        command_result: {}\n";
    let error = parse("both.yaml", both).unwrap_err().to_string();
    assert!(error.contains("exactly one of say, voice, callback, command_result, request"), "{error}");
}

#[test]
fn mistakes_say_file_line_and_column() {
    let broken = "dialogs:\n  - name: x\n    turns:\n      - say: [unclosed\n";
    let error = parse("bad.yaml", broken).unwrap_err().to_string();
    assert!(error.starts_with("bad.yaml:4:"), "{error}");
    let wrong_type = "dialogs:\n  - name: x\n    turns:\n      - say: [1, 2]\n";
    let error = parse("bad.yaml", wrong_type).unwrap_err().to_string();
    assert!(error.starts_with("bad.yaml:4:14: expected string"), "the position once: {error}");
    let unknown = "dialogs:\n  - name: x\n    turns:\n      - sya: hi\n";
    let error = parse("typo.yaml", unknown).unwrap_err().to_string();
    assert!(error.starts_with("typo.yaml:4:") && error.contains("sya"), "{error}");
    assert!(error.ends_with("; did you mean `say`?"), "{error}");
}

#[test]
fn every_turn_s_mistake_is_told_at_once_at_its_line_with_the_key_it_meant() {
    let script = "dialogs:\n  - name: x\n    turns:\n      - {say: a, voice: b}\n      - say: c\n        \
                      expect:\n          speach: {contains: y}\n          Layout.OutputSpeach: x\n          \
                      max_msec: 300\n          card: fine\n";
    let error = parse("f.yaml", script).unwrap_err().to_string();
    let lines: Vec<&str> = error.lines().collect();
    assert_eq!(lines[0], "f.yaml: 4 problems:", "{error}");
    assert!(lines[1].starts_with("  - f.yaml:4: dialog \"x\", turn 1: write exactly one"), "{error}");
    assert!(
        lines[2].starts_with("  - f.yaml:7: dialog \"x\", turn 2: speach: unknown key; did you mean `speech`?"),
        "{error}"
    );
    let meant = "  - f.yaml:8: dialog \"x\", turn 2: Layout.OutputSpeach: TLayout has no field \"OutputSpeach\"; \
                     did you mean `OutputSpeech`?";
    assert!(lines[3].starts_with(meant), "{error}");
    assert!(lines[4].starts_with("  - f.yaml:9: dialog \"x\", turn 2: max_msec: unknown key; did you mean `max_ms`?"));
    assert_eq!(lines.len(), 5, "{error}");
}

#[test]
fn a_file_past_the_bound_is_refused_after_reading_one_byte_more() {
    // /dev/zero never ends: reading it whole would never return.
    let error = load(Path::new("/dev/zero")).unwrap_err().to_string();
    assert_eq!(error, format!("/dev/zero: larger than {MAX_SCRIPT_BYTES} bytes"));

    let dir = std::env::temp_dir().join(format!("script-bound-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (at, past) = (dir.join("at.yaml"), dir.join("past.yaml"));
    let turn = "dialogs:\n  - name: x\n    turns:\n      - say: a\n";
    // Padded with a comment to exactly the bound: it loads.
    let padding = MAX_SCRIPT_BYTES - turn.len() - 2;
    std::fs::write(&at, format!("{turn}#{}\n", "x".repeat(padding))).unwrap();
    std::fs::write(&past, format!("{turn}#{}\n", "x".repeat(padding + 1))).unwrap();
    assert!(load(&at).is_ok());
    assert!(load(&past).unwrap_err().to_string().ends_with(&format!("larger than {MAX_SCRIPT_BYTES} bytes")));
    std::fs::remove_dir_all(&dir).unwrap();
}

// The bounds as docs/dialog.md states them, written out rather than
// read from the constants: a constant raised by mistake fails here.
const DOCUMENTED_DIALOGS: usize = 1000;
const DOCUMENTED_TURNS: usize = 1000;

/// A script of `dialogs` dialogs of one turn each; flow style keeps it small.
fn script_of(dialogs: usize) -> String {
    let dialogs: String = (0..dialogs).map(|d| format!("  - {{name: d{d}, turns: [{{say: a}}]}}\n")).collect();
    format!("dialogs:\n{dialogs}")
}

#[test]
fn one_dialog_past_the_bound_is_refused_and_exactly_the_bound_loads() {
    let at = parse("f.yaml", &script_of(DOCUMENTED_DIALOGS)).expect("exactly the documented dialogs load");
    assert_eq!(at.dialogs.len(), DOCUMENTED_DIALOGS, "every dialog at the bound is kept");
    let past = parse("f.yaml", &script_of(DOCUMENTED_DIALOGS + 1)).map(|loaded| loaded.dialogs.len());
    let error = past.expect_err("one dialog past the bound must be refused").to_string();
    assert_eq!(error, "f.yaml: write 1 to 1000 dialogs under `dialogs:`", "the documented error");
}

#[test]
fn one_turn_past_the_bound_is_refused_in_any_dialog_and_exactly_the_bound_loads() {
    // The long dialog comes second: the bound holds for every dialog,
    // not only the first.
    let script = |turns: usize| {
        let turns = vec!["{say: a}"; turns].join(", ");
        format!("dialogs:\n  - {{name: short, turns: [{{say: a}}]}}\n  - {{name: long, turns: [{turns}]}}\n")
    };
    let at = parse("f.yaml", &script(DOCUMENTED_TURNS)).expect("exactly the documented turns load");
    assert_eq!(at.dialogs[1].0.turns.len(), DOCUMENTED_TURNS, "every turn at the bound is kept");
    let past = parse("f.yaml", &script(DOCUMENTED_TURNS + 1)).map(|loaded| loaded.dialogs[1].0.turns.len());
    let error = past.expect_err("one turn past the bound must be refused").to_string();
    assert_eq!(error, "f.yaml: dialog \"long\": write 1 to 1000 turns", "the documented error");
}

#[test]
fn bad_turns_and_paths_are_refused_before_anything_runs() {
    let two = "dialogs:\n  - name: x\n    turns:\n      - {say: a, voice: b}\n";
    assert!(parse("f", two).unwrap_err().to_string().contains("exactly one"));
    let path = "dialogs:\n  - name: x\n    turns:\n      - say: a\n        expect: {Layout.NoSuchField: 1}\n";
    let error = parse("f", path).unwrap_err().to_string();
    assert!(error.contains("turn 1") && error.contains("NoSuchField"), "{error}");
    assert!(parse("f", "dialogs: []\n").is_err());
    let request = "dialogs:\n  - name: x\n    turns:\n      - request: 'Input { Nope: 1 }'\n";
    assert!(parse("f", request).unwrap_err().to_string().contains("request: not a TScenarioRunRequest"));
    // Fields besides Input: once dropped without a word.
    let other = "dialogs:\n  - name: x\n    turns:\n      - request: 'BaseRequest { RequestId: \"r\" }'\n";
    assert!(parse("f", other).unwrap_err().to_string().contains("only its Input is sent"), "{other}");
    let input = "dialogs:\n  - name: x\n    turns:\n      - request: 'Input { SemanticFrames { Name: \"f\" } }'\n";
    assert!(parse("f", input).is_ok());
}

#[test]
fn a_regex_written_again_is_compiled_once_and_different_ones_are_bounded() {
    use crate::dialog::expect::MAX_REGEXES;
    let script = |patterns: &mut dyn Iterator<Item = String>| {
        let turns: String = patterns
            .map(|pattern| format!("      - say: a\n        expect: {{speech: {{regex: '{pattern}'}}}}\n"))
            .collect();
        format!("dialogs:\n  - name: x\n    turns:\n{turns}")
    };
    // The same heavy regex in every turn: one compiled, shared.
    let same = parse("f", &script(&mut (0..500).map(|_| r"\w{20}".to_owned()))).expect("loads");
    assert_eq!(same.dialogs[0].1.len(), 500);
    let distinct = |n: usize| script(&mut (0..n).map(|i| format!(r"\w{{20}}{i}")));
    assert!(parse("f", &distinct(MAX_REGEXES)).is_ok());
    let error = parse("f", &distinct(MAX_REGEXES + 1)).unwrap_err().to_string();
    assert!(error.contains(&format!("a script holds at most {MAX_REGEXES} different regexes")), "{error}");
}
