//! What the real binary says about a wrong configuration, flag, type name or
//! script: every problem in one run, each once, with where it was written and
//! the name it was likely meant to be; nothing logged before it.

use std::process::Output;

use crate::helpers::run_binary;

/// The binary run with `args`, failing; its standard error and output.
fn refused(args: &[&str]) -> (String, String) {
    let Output { status, stdout, stderr } = run_binary(args, b"");
    let (stdout, stderr) =
        (String::from_utf8_lossy(&stdout).into_owned(), String::from_utf8_lossy(&stderr).into_owned());
    assert!(!status.success(), "{args:?} was accepted: {stdout}{stderr}");
    (stderr, stdout)
}

/// A folder of its own for one test's files.
fn folder(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("megamind-config-errors-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `serve` refusing the configuration file `text` (named `name`): the
/// file's path, then the binary's standard error and output.
fn refused_config(name: &str, text: &str) -> (String, String, String) {
    let dir = folder(name);
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(&file, text).unwrap();
    let path = file.to_str().unwrap().to_owned();
    let (stderr, stdout) = refused(&["serve", "--addr", "127.0.0.1:0", "--config", &path]);
    std::fs::remove_dir_all(&dir).unwrap();
    (path, stderr, stdout)
}

#[test]
fn four_typos_in_a_file_are_four_lines_of_one_run() {
    let text = "defualt_scenario = \"demo\"\n[budget]\ncomit_ms = 500\n[cache]\nmax_bytes = \"64MB\"\n[assitant]\n";
    let (path, stderr, stdout) = refused_config("typos", text);
    for line in [
        format!("{path}:1: defualt_scenario: unknown key; did you mean `default_scenario`?"),
        format!("{path}:3: budget.comit_ms: unknown key; did you mean `commit_ms`?"),
        format!("{path}:5: cache.max_bytes: invalid type: string \"64MB\""),
        format!("{path}:6: [assitant]: no scenario of that name; did you mean `assistant`?"),
    ] {
        assert!(stderr.contains(&line), "missing {line:?} in:\n{stderr}");
    }
    let lines: Vec<&str> = stderr.lines().skip(1).collect();
    let read: Vec<&str> = lines.iter().map(|line| line.split(": ").next().unwrap_or_default()).collect();
    let at = |n: usize| format!("  - {path}:{n}");
    assert_eq!(read, [at(1), at(3), at(5), at(6)], "the file's problems top to bottom:\n{stderr}");
    assert_eq!(stderr.lines().count(), 5, "a heading and four problems:\n{stderr}");
    assert!(stdout.is_empty(), "nothing logged: {stdout}");
}

#[test]
fn a_secret_of_the_wrong_type_is_refused_without_being_quoted() {
    let text = "[auth]\ntvmtool_token = 4444\n[store]\nurl = 5555\n[assistant.backend]\napi_key = 123456789\n\
                [assistant.llm]\nsigning_key = 98765.4321\n[cache]\nmax_bytes = \"64MB\"\n";
    let (path, stderr, _) = refused_config("secrets", text);
    for line in [
        format!("{path}:2: auth.tvmtool_token: invalid type: integer, expected a string"),
        format!("{path}:4: store.url: invalid type: integer, expected a string"),
        format!("{path}:6: assistant.backend.api_key: invalid type: integer, expected a string"),
        format!("{path}:8: assistant.llm.signing_key: invalid type: floating point, expected a string"),
        format!("{path}:10: cache.max_bytes: invalid type: string \"64MB\""),
    ] {
        assert!(stderr.contains(&line), "missing {line:?} in:\n{stderr}");
    }
    for secret in ["4444", "5555", "123456789", "98765"] {
        assert!(!stderr.contains(secret), "{secret} quoted in:\n{stderr}");
    }
}

#[test]
fn a_configuration_file_past_its_bound_is_refused_not_read_whole() {
    let comment = format!("# {}\n", "x".repeat(1000));
    // Refused whole, not for its last line, which is read only if all of it is.
    let (path, large, _) = refused_config("large", &(comment.repeat(1100) + "defualt_scenario = \"demo\"\n"));
    let dir = self::folder("folder");
    let (folder, _) = refused(&["serve", "--config", dir.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(large.contains(&format!("{path}: larger than 1048576 bytes")), "{large}");
    assert!(!large.contains("defualt_scenario"), "{large}");
    assert!(folder.contains("not a regular file"), "{folder}");
}

#[test]
fn a_budget_that_is_not_a_number_is_said_once() {
    let (stderr, _) = refused(&["serve", "--budget-ms", "abc"]);
    assert_eq!(stderr.matches("\"abc\" is not a whole number").count(), 1, "{stderr}");
    assert_eq!(stderr.lines().count(), 2, "{stderr}");
}

#[test]
fn a_negative_budget_is_read_as_a_value_and_refused_with_why() {
    let (stderr, _) = refused(&["serve", "--budget-ms", "-5"]);
    assert!(!stderr.contains("unexpected argument"), "{stderr}");
    assert!(
        stderr.contains("--budget-ms: budget.run_ms: invalid value: integer `-5`, expected a whole number, 0 or more")
    );
    assert_eq!(stderr.lines().count(), 2, "said once for the four handlers' budgets: {stderr}");
    let (stderr, _) = refused(&["dialog", "--budget-ms", "-5", "--script", "none.yaml"]);
    assert!(stderr.contains("invalid value '-5' for '--budget-ms"), "{stderr}");
}

#[test]
fn convert_names_the_type_a_misspelt_one_meant_and_the_known_ones() {
    let (stderr, _) = refused(&["convert", "--type", "TScenarioRunRequst", "--from", "text", "--to", "json"]);
    assert!(stderr.contains("unknown message type \"TScenarioRunRequst\"; did you mean `TScenarioRunRequest`?"));
    assert!(stderr.contains("TScenarioApplyRequest") && stderr.contains("TScenarioContinueResponse"), "{stderr}");
}

#[test]
fn a_configuration_refused_is_never_preceded_by_a_log_line() {
    let (stderr, stdout) = refused(&["serve", "--addr", "127.0.0.1:0", "--set", "foo.bar=1"]);
    assert!(stderr.contains("--set foo.bar: [foo]: no scenario of that name"), "{stderr}");
    assert!(stdout.is_empty(), "logged before the error: {stdout}");
    let (stderr, stdout) = refused(&["serve", "--addr", "127.0.0.1:0", "--default-scenario", "dmeo"]);
    assert!(stderr.contains("default_scenario \"dmeo\" is not registered; did you mean `demo`?"), "{stderr}");
    assert!(stdout.is_empty(), "logged before the error: {stdout}");
}

#[test]
fn a_script_s_mistakes_are_told_together_at_their_lines_with_the_names_they_meant() {
    let dir = folder("script");
    let file = dir.join("typos.yaml");
    let path = file.to_str().unwrap();
    let script = "dialogs:\n  - name: x\n    turns:\n      - {say: a, voice: b}\n      - say: c\n        \
                  expect:\n          Layout.OutputSpeach: x\n          speach: {contains: y}\n          \
                  max_msec: 300\n";
    std::fs::write(&file, script).unwrap();
    let (stderr, _) = refused(&["dialog", "--server", "http://127.0.0.1:9", "--script", path]);
    std::fs::write(&file, "dialogs:\n  - name: x\n    turns:\n      - sya: a\n").unwrap();
    let (typo, _) = refused(&["dialog", "--server", "http://127.0.0.1:9", "--script", path]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(stderr.contains("4 problems"), "{stderr}");
    for said in [
        format!("{path}:4: dialog \"x\", turn 1: write exactly one"),
        format!("{path}:7: dialog \"x\", turn 2: Layout.OutputSpeach: TLayout has no field"),
        format!("{path}:8: dialog \"x\", turn 2: speach: unknown key; did you mean `speech`?"),
        format!("{path}:9: dialog \"x\", turn 2: max_msec: unknown key; did you mean `max_ms`?"),
    ] {
        assert!(stderr.contains(&said), "missing {said:?} in:\n{stderr}");
    }
    assert!(stderr.contains("did you mean `OutputSpeech`?"), "{stderr}");
    assert!(typo.contains("unknown field `sya`") && typo.contains("did you mean `say`?"), "{typo}");
}

#[test]
fn a_variable_that_is_not_utf8_is_refused_by_name_not_taken_for_unset() {
    use std::{ffi::OsStr, os::unix::ffi::OsStrExt};
    let mut command = crate::helpers::binary();
    command
        .args(["serve", "--addr", "127.0.0.1:0", "--set", "foo.bar=1"])
        .env("MEGAMIND_STORE_URL", OsStr::from_bytes(b"redis://r\xffdis:6379"))
        .env("MEGAMIND_CONFIG", OsStr::from_bytes(b"/etc/m\xe9gamind.toml"));
    let Output { status, stdout, stderr } = crate::helpers::run_command(&mut command, b"");
    let stderr = String::from_utf8_lossy(&stderr);
    assert!(!status.success() && stdout.is_empty(), "{stderr}");
    assert!(stderr.contains("MEGAMIND_STORE_URL: its value is not UTF-8"), "{stderr}");
    assert!(stderr.contains("MEGAMIND_CONFIG: its value is not UTF-8"), "{stderr}");
    // The other problems of the run are told with them.
    assert!(stderr.contains("--set foo.bar: [foo]: no scenario of that name"), "{stderr}");
    assert!(!stderr.contains("r\u{fffd}dis"), "the value, perhaps a secret, is not shown: {stderr}");
}
