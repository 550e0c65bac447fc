//! `megamind-scenario dialog` against the real binary: the golden dialogs
//! pass, a wrong expectation fails with a readable diff, JUnit XML is
//! written, bad scripts and a server that is down are told apart (exit 2),
//! a recorded session replays as a script, a debug log replays with the
//! differing answer reported, and a skill is played turn by turn (its
//! commands run, typed or skipped) with the catalog reloaded on SIGHUP.

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use crate::helpers::binary;

const BIN: &str = env!("CARGO_BIN_EXE_megamind-scenario");

/// The real server on an ephemeral port, its log going to `log`.
pub(crate) struct Server {
    child: Child,
    pub(crate) url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn serve(log_level: &str, log: &Path) -> Server {
    serve_with(log_level, log, &[])
}

/// [`serve`] with more flags.
fn serve_with(log_level: &str, log: &Path, flags: &[&str]) -> Server {
    let file = std::fs::File::create(log).unwrap();
    let child = binary()
        .args(["serve", "--addr", "127.0.0.1:0", "--log-level", log_level])
        .args(flags)
        .stdout(file)
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the server starts");
    // Owned at once, so that it is stopped however the wait below ends.
    let mut server = Server { child, url: String::new() };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(addr) = text.lines().find_map(|l| l.split("serving addr=").nth(1)) {
            server.url = format!("http://{}", addr.split_whitespace().next().unwrap());
            return server;
        }
        assert!(Instant::now() < deadline, "no serving line in {}", log.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn dialog(args: &[&str], stdin: &str) -> Output {
    let args: Vec<&str> = std::iter::once("dialog").chain(args.iter().copied()).collect();
    crate::helpers::run_binary(&args, stdin.as_bytes())
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub(crate) fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dialog-cmd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

pub(crate) fn golden() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/dialogs");
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path().display().to_string())
        .filter(|p| p.ends_with(".yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 2, "{files:?}");
    files
}

#[test]
fn the_golden_dialogs_pass_and_write_junit() {
    let server = serve("info", &temp("golden.log"));
    let junit = temp("golden.xml");
    let mut args = vec!["--server", &server.url, "--junit", junit.to_str().unwrap(), "--script"];
    let files = golden();
    args.extend(files.iter().map(String::as_str));
    let out = dialog(&args, "");
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("✓ POI: a cafe on /run, its phone through a callback"), "{stdout}");
    assert!(stdout.contains("7 dialogs: 7 passed, 0 failed"), "{stdout}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.starts_with("<?xml") && xml.contains(r#"<testsuites name="dialogs" tests="7" failures="0" errors="0">"#),
        "{xml}"
    );
    assert_eq!(xml.matches("<testcase ").count(), 7);
    assert_eq!(xml.matches("</testsuite>").count(), files.len());
}

#[test]
fn the_script_docs_dialog_md_shows_passes_as_written() {
    let docs = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/dialog.md")).unwrap();
    let scripts = docs.split_once("## Scripts").expect("a Scripts section").1;
    let yaml = scripts.split("```yaml\n").nth(1).and_then(|rest| rest.split("```").next()).expect("a YAML block");
    let script = temp("docs.yaml");
    std::fs::write(&script, yaml).unwrap();
    let server = serve("info", &temp("docs.log"));
    let out = dialog(&["--server", &server.url, "--script", script.to_str().unwrap()], "");
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("1 dialogs: 1 passed, 0 failed"), "{stdout}");
}

#[test]
fn a_wrong_expectation_fails_with_a_readable_diff() {
    let server = serve("info", &temp("wrong.log"));
    let script = temp("wrong.yaml");
    std::fs::write(
        &script,
        "dialogs:\n  - name: wrong on purpose\n    scenario: assistant\n    turns:\n      - say: открой Safari\n        \
         expect:\n          speech: Закрываю Safari.\n          directives[0].OpenAppDirective.AppName: Safari\n",
    )
    .unwrap();
    let out = dialog(&["--server", &server.url, "--script", script.to_str().unwrap()], "");
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("✗ wrong on purpose"), "{stdout}");
    assert!(stdout.contains("turn 1 (say \"открой Safari\"): speech"), "{stdout}");
    assert!(stdout.contains("- expected \"Закрываю Safari.\""), "{stdout}");
    assert!(stdout.contains("+ got      \"Открываю Safari.\""), "{stdout}");
    assert!(!stdout.contains("AppName"), "only what failed is shown: {stdout}");
}

#[test]
fn bad_scripts_and_a_server_that_is_down_exit_2_saying_why() {
    let broken = temp("broken.yaml");
    std::fs::write(&broken, "dialogs:\n  - name: x\n    turns:\n      - say: [unclosed\n").unwrap();
    // A report of an earlier run, which must not stand for this one.
    let stale = temp("stale.xml");
    std::fs::write(&stale, "<testsuites tests=\"7\" failures=\"0\"/>").unwrap();
    let out = dialog(&["--script", broken.to_str().unwrap(), "--junit", stale.to_str().unwrap()], "");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("{}:4:", broken.display())), "file:line:column: {stderr}");
    assert!(!stale.exists(), "the earlier report was left in place");
    // A report with nothing to report on is a usage error, not a flag ignored.
    let out = dialog(&["--junit", stale.to_str().unwrap()], "");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--script"), "{}", text(&out.stderr));

    // A path the schema lacks is refused before anything is sent: the
    // server named here is down, and that is never reached.
    let unknown = temp("unknown.yaml");
    std::fs::write(
        &unknown,
        "dialogs:\n  - name: x\n    turns:\n      - say: hi\n        expect: {Layout.Speech: hi}\n",
    )
    .unwrap();
    let down = "http://127.0.0.1:9";
    let out = dialog(&["--server", down, "--script", unknown.to_str().unwrap()], "");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("TLayout has no field \"Speech\"") && !stderr.contains("reached"), "{stderr}");

    let fine = temp("fine.yaml");
    std::fs::write(&fine, "dialogs:\n  - name: x\n    turns:\n      - say: hi\n").unwrap();
    let out = dialog(&["--server", down, "--script", fine.to_str().unwrap()], "");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot be reached"), "{stderr}");

    // The report's name is a script's (the two swapped): refused, the script kept.
    let script = std::fs::read_to_string(&fine).unwrap();
    let out = dialog(&["--server", down, "--script", fine.to_str().unwrap(), "--junit", fine.to_str().unwrap()], "");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("is the script") && !stderr.contains("cannot be reached"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&fine).unwrap(), script);

    // Stopped at its first turn, a run has nothing to record: an earlier
    // recording (which loads as a script) is kept.
    let record = temp("kept-recording.yaml");
    std::fs::write(&record, &script).unwrap();
    let out = dialog(&["--server", down, "--script", fine.to_str().unwrap(), "--record", record.to_str().unwrap()], "");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("nothing was played"), "{}", text(&out.stdout));
    assert_eq!(std::fs::read_to_string(&record).unwrap(), script);
}

#[test]
fn a_recorded_session_replays_as_a_script() {
    let server = serve("info", &temp("record.log"));
    let recording = temp("recorded.yaml");
    let out = dialog(
        &["--server", &server.url, "--record", recording.to_str().unwrap()],
        "открой Safari\nзакрой калькулятор\n/quit\nне дойдёт\n",
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("> открой Safari") && stdout.contains("speech: \"Открываю Safari.\""), "{stdout}");
    assert!(stdout.contains("/run") && stdout.contains("directives: [OpenAppDirective]"), "{stdout}");
    assert!(!stdout.contains("не дойдёт"), "nothing after /quit: {stdout}");
    let yaml = std::fs::read_to_string(&recording).unwrap();
    assert!(yaml.contains("Закрываю калькулятор."), "{yaml}");
    let out = dialog(&["--server", &server.url, "--script", recording.to_str().unwrap()], "");
    assert_eq!(out.status.code(), Some(0), "{}\n{yaml}", text(&out.stdout));
}

#[test]
fn piped_lines_get_no_prompts_and_help_and_quit_are_the_sessions_own() {
    let server = serve("info", &temp("session.log"));
    let recording = temp("session.yaml");
    let out = dialog(
        &["--server", &server.url, "--record", recording.to_str().unwrap()],
        "/help\n/hepl\nпривет\n/quit\nне дойдёт\n",
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    // Lines piped in come from a program: no hint, no prompts.
    assert!(!stderr.contains(megamind_tools::dialog::interactive::HINT), "{stderr}");
    assert!(!stderr.contains("> "), "{stderr}");
    assert!(stdout.contains("/quit ") && stdout.contains("/say WORDS"), "/help lists the commands: {stdout}");
    assert!(stdout.contains("/hepl: not a command"), "{stdout}");
    assert!(stdout.contains("> привет") && !stdout.contains("> /help"), "{stdout}");
    assert!(!stdout.contains("не дойдёт"), "nothing after /quit: {stdout}");
    // What reached the server: the one utterance, neither /help nor the typo.
    let yaml = std::fs::read_to_string(&recording).unwrap();
    assert_eq!(yaml.matches("say:").count(), 1, "{yaml}");
    assert!(yaml.contains("привет") && !yaml.contains("help"), "{yaml}");
}

#[test]
fn at_a_terminal_the_session_prints_its_hint_and_a_prompt_before_each_line() {
    let test = "at_a_terminal_the_session_prints_its_hint_and_a_prompt_before_each_line";
    // `script` (util-linux) runs the session on a terminal of its own and
    // copies what it prints (both streams) to its standard output.
    if !Command::new("script").arg("--version").output().is_ok_and(|o| o.status.success()) {
        let reason = "util-linux's script is not installed (Debian: bsdutils)";
        assert!(std::env::var("MEGAMIND_REQUIRE_INTEROP").as_deref() != Ok("1"), "{test}: {reason}");
        eprintln!("SKIPPED {test}: {reason}");
        return;
    }
    let server = serve("info", &temp("terminal.log"));
    let session = format!("{BIN} dialog --server {}", server.url);
    let out = crate::helpers::run_command(
        Command::new("script").args(["--quiet", "--return", "--command", &session, "/dev/null"]),
        "привет\n/quit\n".as_bytes(),
    );
    let shown = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{shown}{}", text(&out.stderr));
    assert!(shown.contains(megamind_tools::dialog::interactive::HINT), "the hint: {shown}");
    assert!(shown.contains("speech: \"Привет!"), "the turn: {shown}");
    // One prompt before `привет`, one before `/quit`.
    assert_eq!(shown.matches("> ").count() - shown.matches("> привет").count(), 2, "{shown}");
}

#[test]
fn a_debug_log_replays_and_a_changed_answer_is_reported() {
    let log = temp("debug.log");
    let server = serve("debug", &log);
    let script = golden().into_iter().find(|f| f.ends_with("assistant.yaml")).unwrap();
    let out = dialog(&["--server", &server.url, "--script", &script], "");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    // The server writes its log in batches: wait for the three calls' summary
    // lines, then replay a copy (the replay's own calls go to the log too).
    let logged = with_summaries(&log, 3);
    let copy = temp("debug-copy.log");
    std::fs::write(&copy, &logged).unwrap();

    // A new build is replayed against from the start of its cache: the
    // server that wrote the log would answer its RequestIds from its own.
    let fresh_log = temp("fresh.log");
    let fresh = serve("debug", &fresh_log);
    let out = dialog(&["--server", &fresh.url, "--replay", copy.to_str().unwrap(), "--ignore", "State"], "");
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("= /assistant/run"), "{stdout}");
    assert!(stdout.contains("3 calls replayed: 3 the same, 0 differ"), "{stdout}");

    // `--fresh-ids` against the server that wrote the log: answered by the
    // scenario, not from the idempotency cache, which still holds the
    // logged calls' answers under their RequestIds.
    let args = ["--server", &server.url, "--replay", copy.to_str().unwrap(), "--ignore", "State", "--fresh-ids"];
    let out = dialog(&args, "");
    let stdout = text(&out.stdout);
    assert!(stdout.contains("3 calls replayed"), "{stdout}{}", text(&out.stderr));
    let replayed = with_summaries(&log, 6);
    assert!(replayed.contains("-replay-") && !replayed.contains("outcome=replay"), "{replayed}");

    let changed = temp("changed.log");
    std::fs::write(&changed, logged.replace("Закрываю калькулятор.", "Закрываю Калькулятор.")).unwrap();
    let out = dialog(&["--server", &fresh.url, "--replay", changed.to_str().unwrap(), "--ignore", "State"], "");
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("≠ /assistant/run"), "{stdout}");
    assert!(stdout.contains("- ") && stdout.contains("Калькулятор") && stdout.contains("+ "), "{stdout}");
    assert!(stdout.contains("1 differ"), "{stdout}");
}

/// The log at `log` once it holds `count` summary lines of the assistant's
/// `/run` (the server writes its log in batches).
fn with_summaries(log: &Path, count: usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let logged = std::fs::read_to_string(log).unwrap();
        if logged.matches("scenario=assistant handler=run").count() >= count {
            return logged;
        }
        assert!(Instant::now() < deadline, "the calls never reached the log: {logged}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A server at the URL returned that answers its first request with
/// `answer` (its status line, head and body), then closes.
fn answers_once(answer: Vec<u8>) -> (String, std::thread::JoinHandle<()>) {
    use std::io::Read;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut request = [0u8; 4096];
        let _ = stream.read(&mut request);
        let _ = stream.write_all(&answer);
    });
    (url, server)
}

/// An answer of status 200 with `body`.
fn ok_with(body: &[u8]) -> Vec<u8> {
    let head =
        format!("HTTP/1.1 200 OK\r\ncontent-type: application/protobuf\r\ncontent-length: {}\r\n\r\n", body.len());
    [head.as_bytes(), body].concat()
}

#[test]
fn a_server_that_answers_garbage_exits_2_naming_what_was_wrong() {
    // Bytes that are no protocol message.
    let (url, server) = answers_once(ok_with(b"\xff\xff\xff\xff"));
    let out = dialog(&["--server", &url], "привет\n");
    server.join().unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("does not decode"), "{stderr}");

    // A message of 70,000 empty directives: 140 KB that would take some
    // 8 MB decoded (and 64 MiB of them gigabytes), refused uncounted.
    let layout = [&[0x1a_u8, 0x00][..]].repeat(70_000).concat();
    let varint = |mut n: usize| {
        let mut bytes = Vec::new();
        while n >= 0x80 {
            bytes.push((n as u8) | 0x80);
            n >>= 7;
        }
        bytes.push(n as u8);
        bytes
    };
    let body = [&[0x0a][..], &varint(layout.len()), &layout].concat();
    let answer = [&[0x1a][..], &varint(body.len()), &body].concat();
    let (url, server) = answers_once(ok_with(&answer));
    let out = dialog(&["--server", &url], "привет\n");
    server.join().unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("does not decode") && stderr.contains("holds more than the limit of 65536 values"),
        "{stderr}"
    );
}

#[test]
fn a_redirect_is_not_followed_and_the_ticket_goes_nowhere_else() {
    let elsewhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let location = format!("http://{}/run", elsewhere.local_addr().unwrap());
    let redirect = format!("HTTP/1.1 307 Temporary Redirect\r\nlocation: {location}\r\ncontent-length: 0\r\n\r\n");
    let (url, server) = answers_once(redirect.into_bytes());
    let mut command = crate::helpers::binary();
    command.args(["dialog", "--server", &url]).env("MEGAMIND_SERVICE_TICKET", "3:serv:ticket");
    let out = crate::helpers::run_command(&mut command, "привет\n".as_bytes());
    server.join().unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("307"), "{stderr}");
    // Had it followed, its connection would wait to be accepted.
    elsewhere.set_nonblocking(true).unwrap();
    let accepted = elsewhere.accept();
    assert!(
        accepted.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
        "the redirect was followed: {accepted:?}"
    );
}

/// Copies the repository's `skills/` into a folder of the test's own.
fn skills_copy(name: &str) -> PathBuf {
    let dir = temp(name);
    let _ = std::fs::remove_dir_all(&dir);
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("skills");
    for skill in std::fs::read_dir(source).unwrap() {
        let skill = skill.unwrap().path();
        let target = dir.join(skill.file_name().unwrap());
        std::fs::create_dir_all(&target).unwrap();
        std::fs::copy(skill.join("SKILL.md"), target.join("SKILL.md")).unwrap();
    }
    dir
}

/// A server with a copy of `skills/` (in a folder named `name`) whose model
/// answers `answers` in turn, then 500.
async fn skill_server(name: &str, answers: &[&str]) -> (crate::mock_llm::MockLlm, Server, PathBuf) {
    use crate::mock_llm::{MockLlm, Reply};
    let mock = MockLlm::start(Reply::status(500)).await;
    for answer in answers {
        mock.push(Reply::content(answer));
    }
    let skills = skills_copy(name);
    let (url, dir) = (mock.base_url(), skills.to_str().unwrap().to_owned());
    let flags = ["--llm-base-url", &url, "--llm-warmup", "off", "--skills-dir", &dir];
    let server = serve_with("info", &temp(&format!("{name}.log")), &flags);
    (mock, server, skills)
}

/// `dialog` against `server`, with `lines` typed.
async fn session(server: &Server, lines: &'static str) -> Output {
    let address = server.url.clone();
    tokio::task::spawn_blocking(move || dialog(&["--server", &address], lines)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skill_is_played_turn_by_turn_and_sighup_reloads_the_catalog() {
    let answers = ["[CMD] git --version", "[ASK] Сообщение коммита?", "[CMD] git status --porcelain", "[DONE] Готово."];
    let (mock, server, skills) = skill_server("skills-played", &answers).await;
    let out =
        session(&server, "запусти навык git-quick-commit\n/run\nfix: test\n/say какие навыки\n/skip\n/quit\n").await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("run_command (waiting for its result): git --version"), "{stdout}");
    assert!(stdout.contains("  | git version "), "the command ran here: {stdout}");
    assert!(stdout.contains("Сообщение коммита?") && stdout.contains("Готово."), "{stdout}");
    assert!(stdout.contains("> /say какие навыки") && stdout.contains("Навыки: disk-usage"), "{stdout}");
    let sent: Vec<String> = mock
        .received()
        .iter()
        .map(|r| r.body["messages"].as_array().unwrap().last().unwrap()["content"].as_str().unwrap().to_owned())
        .collect();
    assert!(sent[1].starts_with("Command output:\ngit version "), "{sent:?}");
    assert_eq!(sent[2], "User response: fix: test\n\n[Step 3 of 100]");
    assert_eq!(sent[3], "User skipped the command.\n\n[Step 4 of 100]");

    // A new skill, and SIGHUP: the catalog has it.
    let added = skills.join("say-hello");
    std::fs::create_dir_all(&added).unwrap();
    std::fs::write(added.join("SKILL.md"), "---\nname: say-hello\ndescription: Says hello.\n---\nSay hello.\n")
        .unwrap();
    let status = Command::new("kill").args(["-HUP", &server.child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let client = megamind_core::http_client::client_builder().no_proxy().build().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let catalog = client.get(format!("{}/llm/skills", server.url)).send().await.unwrap().text().await.unwrap();
        if catalog.contains("say-hello") {
            break;
        }
        assert!(Instant::now() < deadline, "not reloaded: {catalog}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let metrics = client.get(format!("{}/metrics", server.url)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("megamind_assistant_skills_loaded 4"), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_typed_as_the_result_of_a_command_no_longer_awaited_is_said_instead() {
    let (mock, server, _skills) = skill_server("skills-stopped", &["[CMD] git --version"]).await;
    let out = session(&server, "запусти навык git-quick-commit\n/say стоп\nкакие навыки\n/quit\n").await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("остановлен"), "the skill stopped: {stdout}");
    let (_, after) = stdout.split_once("> какие навыки").expect("the line played");
    assert!(after.contains("(the command's result is no longer awaited: said instead)"), "{stdout}");
    assert!(after.contains("Навыки: disk-usage"), "the line was said: {stdout}");
    assert_eq!(mock.received().len(), 1, "no model call but the skill's first step");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_run_here_never_sees_the_ticket_or_the_servers_variables() {
    let command =
        "[CMD] echo \"ticket=$MEGAMIND_SERVICE_TICKET key=$MEGAMIND_LLM_API_KEY token=$QLOUD_TVM_TOKEN home=$HOME\"";
    let (mock, server, _skills) = skill_server("skills-env", &[command]).await;
    let address = server.url.clone();
    let out = tokio::task::spawn_blocking(move || {
        let mut dialog = crate::helpers::binary();
        dialog
            .args(["dialog", "--server", &address])
            .env("MEGAMIND_SERVICE_TICKET", "3:serv:t0k3n-never-shown")
            .env("MEGAMIND_LLM_API_KEY", "sk-never-shown")
            .env("QLOUD_TVM_TOKEN", "qloud-never-shown");
        crate::helpers::run_command(&mut dialog, "запусти навык git-quick-commit\n/run\n/quit\n".as_bytes())
    })
    .await
    .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("  | ticket= key= token= home=/"), "ran without them, the rest kept: {stdout}");
    let sent = format!("{:?}", mock.received().iter().map(|r| r.body.to_string()).collect::<Vec<_>>());
    assert!(sent.contains("ticket= key= token= home=/"), "{sent}");
    assert!(!sent.contains("never-shown") && !stdout.contains("never-shown"), "{sent}\n{stdout}");
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_while_a_command_runs_stops_it_and_ends_the_session_with_its_recording() {
    use std::process::Stdio;
    let pid_file = temp("interrupted.pid");
    let _ = std::fs::remove_file(&pid_file);
    let command = format!("[CMD] sleep 1000 & echo $! > {}; wait", pid_file.display());
    let (_mock, server, _skills) = skill_server("skills-interrupted", &[&command]).await;
    let record = temp("interrupted.yaml");
    let mut dialog = crate::helpers::binary()
        .args(["dialog", "--server", &server.url, "--record", record.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Typed, and the terminal left open: the session waits on.
    let mut stdin = dialog.stdin.take().unwrap();
    stdin.write_all("запусти навык git-quick-commit\nда\n/run\n".as_bytes()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let pid = loop {
        if let Some(pid) = std::fs::read_to_string(&pid_file).ok().and_then(|text| text.trim().parse::<u32>().ok()) {
            break pid;
        }
        assert!(Instant::now() < deadline, "the command never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let status = Command::new("kill").args(["-INT", &dialog.id().to_string()]).status().unwrap();
    assert!(status.success());
    let out = tokio::task::spawn_blocking(move || dialog.wait_with_output()).await.unwrap().unwrap();
    drop(stdin);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit_once(')').map_or("", |(_, rest)| rest.trim_start());
    assert!(state.is_empty() || state.starts_with(['Z', 'X']), "the command runs on: {stat}");
    let recorded = std::fs::read_to_string(&record).unwrap();
    assert!(recorded.contains("запусти навык git-quick-commit") && recorded.contains("да"), "{recorded}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_with_control_characters_is_shown_escaped_and_not_run() {
    // On a terminal, `\r` and "erase the line" leave `git status` in view of
    // a command that pipes the network into a shell.
    let hidden = "[CMD] echo pwned #\r\x1b[2Kgit status";
    let (mock, server, _skills) = skill_server("skills-hidden", &[hidden, "[DONE] Готово."]).await;
    let out = session(&server, "запусти навык git-quick-commit\n/run\n/skip\n/quit\n").await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains(r"run_command (waiting for its result): echo pwned #\r\u{1b}[2Kgit status"),
        "the command as it is, escaped: {stdout}"
    );
    assert!(!stdout.contains(['\r', '\x1b']), "no control character reaches the terminal: {stdout:?}");
    assert!(stdout.contains("not run: the command holds control characters"), "{stdout}");
    assert!(!stdout.contains("  | pwned") && !stdout.contains("exit code"), "it did not run: {stdout}");
    let sent: Vec<String> = mock
        .received()
        .iter()
        .map(|r| r.body["messages"].as_array().unwrap().last().unwrap()["content"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(sent.len(), 2, "/run sent nothing, /skip its result: {sent:?}");
    assert!(sent[1].starts_with("User skipped the command."), "{sent:?}");
}

#[test]
fn a_server_address_s_password_is_in_no_message() {
    let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let unreachable = format!("http://user:pw-S3CRET@{gone}");
    for server in [unreachable.as_str(), "ftp://user:pw-S3CRET@127.0.0.1:9", "http://user:pw-S3CRET@bad host:1/"] {
        let out = dialog(&["--server", server], "привет\n");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{server}: {stderr}");
        assert!(!stderr.contains("S3CRET") && !text(&out.stdout).contains("S3CRET"), "{stderr}");
    }
    let out = dialog(&["--server", "ftp://user:pw-S3CRET@127.0.0.1:9"], "привет\n");
    assert!(text(&out.stderr).contains("ftp://user:<hidden>@127.0.0.1:9"), "{}", text(&out.stderr));
}

// The clock is paused: the 30 s the dialog waits pass at once.
#[tokio::test(start_paused = true)]
async fn a_server_that_never_answers_ends_the_dialog_at_its_timeout() {
    use megamind_tools::dialog::{self, DialogArgs, script::TurnSpec};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = format!("http://{}", listener.local_addr().unwrap());
    // Accepts, reads, and never answers.
    let silent = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let _ = tokio::io::copy(&mut stream, &mut tokio::io::sink()).await;
    });
    let args = DialogArgs::to(server);
    let mut client = dialog::client(&args, &args.scenario).unwrap();
    let spec = TurnSpec { say: Some("привет".into()), ..TurnSpec::default() };
    let started = tokio::time::Instant::now();
    // A client without a timeout would wait for ever: the test's own bound
    // ends it (at once too).
    let played = tokio::time::timeout(2 * dialog::CALL_TIMEOUT, dialog::play(&mut client, &spec)).await;
    // The Unplayable that `dialog` exits 2 with.
    let error = played.expect("the dialog's own timeout ends the call").unwrap_err();
    assert_eq!(error.0, format!("/run: no answer within {:?}", dialog::CALL_TIMEOUT));
    assert!(started.elapsed() >= dialog::CALL_TIMEOUT);
    silent.abort();
}

/// Serves HTTP/1.1 on `listener`: the first request answered with a
/// `/run` answer saying `ok`, every later one with bytes that are no
/// protocol message.
fn good_then_garbage(listener: std::net::TcpListener) {
    use megamind_core::proto::n_alice::n_scenarios::{
        TLayout, TScenarioResponseBody, TScenarioRunResponse, t_scenario_run_response::Response,
    };
    use prost::Message;
    use std::io::{BufRead, BufReader, Read};
    let layout = TLayout { output_speech: "ok".into(), ..Default::default() };
    let body = TScenarioResponseBody { layout: Some(layout), ..Default::default() };
    let good =
        TScenarioRunResponse { response: Some(Response::ResponseBody(body)), ..Default::default() }.encode_to_vec();
    let mut served = 0;
    for stream in listener.incoming() {
        let Ok(stream) = stream else { return };
        let mut reader = BufReader::new(stream);
        loop {
            let mut length = 0;
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap();
                }
                line.clear();
            }
            if line != "\r\n" || reader.read_exact(&mut vec![0; length]).is_err() {
                break;
            }
            let answer: &[u8] = if served == 0 { &good } else { b"\xff\xff\xff\xff" };
            served += 1;
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/protobuf\r\ncontent-length: {}\r\n\r\n",
                answer.len()
            );
            let stream = reader.get_mut();
            if stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(answer)).is_err() {
                break;
            }
        }
    }
}

#[test]
fn a_run_stopped_by_the_server_still_writes_its_report_and_recording() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || good_then_garbage(listener));
    let script = temp("stopped.yaml");
    let (junit, recording) = (temp("stopped.xml"), temp("stopped-recorded.yaml"));
    std::fs::write(
        &script,
        "dialogs:\n  - name: first\n    turns:\n      - say: раз\n        expect: {speech: ok}\n\
         \x20 - name: second\n    turns:\n      - say: два\n\
         \x20 - name: third\n    turns:\n      - say: три\n",
    )
    .unwrap();
    let args = [
        "--server",
        &url,
        "--junit",
        junit.to_str().unwrap(),
        "--record",
        recording.to_str().unwrap(),
        "--script",
        script.to_str().unwrap(),
    ];
    let out = dialog(&args, "");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert!(stderr.contains("does not decode"), "{stderr}");
    assert!(stdout.contains("✓ first") && stdout.contains("✗ second"), "{stdout}");
    assert!(stdout.contains("turn 1 (say \"два\"): could not be played:"), "{stdout}");
    assert!(stdout.contains("2 dialogs: 1 passed, 1 failed") && !stdout.contains("third"), "{stdout}");
    let xml = std::fs::read_to_string(&junit).expect("the report is written");
    assert!(xml.contains(r#"tests="2" failures="0" errors="1""#), "{xml}");
    assert_eq!(xml.matches("<error message=\"turn 1 (say &quot;два&quot;): could not be played:").count(), 1, "{xml}");
    let yaml = std::fs::read_to_string(&recording).expect("the recording is written");
    // The dialog stopped at its first turn has no turn to record: a script
    // holding it would not load.
    assert!(yaml.contains("раз") && !yaml.contains("second") && !yaml.contains("три"), "{yaml}");
    megamind_tools::dialog::script::load(&recording).expect("the recording loads as a script");
}
