//! Every command whose reader goes away early (`dialog --replay LOG | head -1`)
//! ends quietly with exit 0, but for `dialog --script` (and a recorded
//! session), which plays on: the real binary, its standard output a pipe
//! closed before it writes a line. A closed standard error changes no exit
//! code.

use std::{
    io::Write,
    process::{Output, Stdio},
    time::{Duration, Instant},
};

use crate::{
    dialog_cmd::{golden, serve, temp},
    helpers::binary,
};

/// Runs the binary with `args` and `stdin`, its standard output closed.
fn with_stdout_closed(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = binary()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    // The only reading end goes: the command's first line meets a broken pipe.
    drop(child.stdout.take());
    // A command that ends before reading its input closes it: that is no failure here.
    let _ = child.stdin.take().expect("piped stdin").write_all(stdin);
    child.wait_with_output().expect("the binary ends")
}

fn assert_quiet(args: &[&str], stdin: &[u8]) {
    let out = with_stdout_closed(args, stdin);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    assert_eq!(out.status.code(), Some(0), "{args:?} ends quietly: {stderr}");
    assert!(!stderr.contains("Broken pipe") && !stderr.contains("cannot write"), "{args:?} complains: {stderr}");
}

#[test]
fn every_command_ends_quietly_when_its_reader_goes_away() {
    let request = std::fs::read(crate::helpers::fixture_path("poi_run_request")).unwrap();
    assert_quiet(&["convert", "--type", "TScenarioRunRequest", "--from", "text", "--to", "json"], &request);
    assert_quiet(&["serve", "--print-config"], b"");
    assert_quiet(&["--help"], b"");
    let transcript = temp("closed-stdout.sse");
    std::fs::write(&transcript, "event: status\ndata: {}\n\n").unwrap();
    assert_quiet(&["validate-jsonseq", transcript.to_str().unwrap()], b"");

    let log = temp("closed-stdout.log");
    let server = serve("debug", &log);
    let script = format!("{}/tests/dialogs/demo.yaml", env!("CARGO_MANIFEST_DIR"));
    assert_quiet(&["dialog", "--server", &server.url, "--script", &script], b"");
    assert_quiet(&["dialog", "--server", &server.url, "--scenario", "demo"], "кафе пушкин\n".as_bytes());
    // The server writes its log in batches: wait for a call's summary line.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&log).unwrap().contains("scenario=demo handler=run") {
        assert!(Instant::now() < deadline, "no call reached the log");
        std::thread::sleep(Duration::from_millis(20));
    }
    let copy = temp("closed-stdout-copy.log");
    std::fs::copy(&log, &copy).unwrap();
    assert_quiet(&["dialog", "--server", &server.url, "--replay", copy.to_str().unwrap()], b"");
}

/// A reader of the output that goes away early (`| grep -q`) stops the
/// printing, not the run: every dialog is played, the report written, and
/// the exit code is the run's.
#[test]
fn a_script_run_whose_reader_goes_away_still_writes_its_report_and_exit_code() {
    let server = serve("info", &temp("closed-out.log"));
    let junit = temp("closed-out.xml");
    let failing = temp("closed-out-failing.yaml");
    std::fs::write(
        &failing,
        "dialogs:\n  - name: wrong\n    turns:\n      - say: хочу в кафе\n        expect: {speech: nope}\n",
    )
    .unwrap();
    let mut args = vec!["dialog", "--server", &server.url, "--junit", junit.to_str().unwrap(), "--script"];
    let files = golden();
    args.extend(files.iter().map(String::as_str));
    args.push(failing.to_str().unwrap());
    let out = with_stdout_closed(&args, b"");
    assert_eq!(out.status.code(), Some(1), "a dialog failed: {}", String::from_utf8_lossy(&out.stderr));
    let xml = std::fs::read_to_string(&junit).expect("the report written");
    assert_eq!(xml.matches("<testcase ").count(), 8, "{xml}");
    assert!(xml.contains(r#"failures="1""#), "{xml}");
}

/// A recorded terminal session played with nobody reading its output
/// (`dialog --record s.yaml | head -1`) still writes its recording.
#[test]
fn a_recorded_session_whose_reader_goes_away_still_writes_its_recording() {
    let server = serve("info", &temp("closed-record.log"));
    let record = temp("closed-record.yaml");
    let _ = std::fs::remove_file(&record);
    let args = ["dialog", "--server", &server.url, "--scenario", "demo", "--record", record.to_str().unwrap()];
    let out = with_stdout_closed(&args, "кафе пушкин\nмузыка\n".as_bytes());
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let recorded = std::fs::read_to_string(&record).expect("the recording written");
    assert!(recorded.contains("кафе пушкин") && recorded.contains("музыка"), "{recorded}");
}

/// A command that fails with its standard error closed (its reader gone)
/// still exits with its own code, not a panic's 101.
#[test]
fn a_failure_told_to_a_closed_stderr_keeps_its_exit_code() {
    let with_stderr_closed = |args: &[&str]| {
        let mut child = binary().args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        drop(child.stderr.take());
        child.wait_with_output().unwrap()
    };
    let missing = temp("no-such-transcript.sse");
    let out = with_stderr_closed(&["validate-jsonseq", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "validate-jsonseq");
    let out = with_stderr_closed(&["dialog", "--server", "http://127.0.0.1:9", "--script", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "dialog");
    let out = with_stderr_closed(&["serve", "--config", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "serve");
}

/// A transcript's event name holding escapes is printed escaped.
#[test]
fn validate_jsonseq_shows_a_transcript_s_control_characters_escaped() {
    let transcript = temp("escapes.sse");
    std::fs::write(&transcript, "event: \u{1b}]0;pwned\u{7}\ndata: {}\n\n").unwrap();
    let out = binary().args(["validate-jsonseq", transcript.to_str().unwrap()]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(!stdout.contains('\u{1b}') && stdout.contains("\\u{1b}]0;pwned"), "{stdout}");
}
