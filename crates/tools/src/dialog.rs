//! The `dialog` command: plays Megamind against a running server — from the
//! terminal, from YAML scripts with expectations (golden dialogs), or from a
//! server's debug log (replay) — with the crate's protocol client, which
//! plays `/run` → `/continue` / `/commit` / `/apply`, carries `State` and
//! follows `CallbackDirective`s.
//!
//! Exit codes: 0 all is as expected, 1 an expectation failed or a replayed
//! answer differs, 2 the command could not do its work (a script that does
//! not load, a server that is down or answers garbage).
//!
//! [`script`] loads and checks scripts, [`expect`] reads answers by field
//! path and matches them, [`junit`] writes the report CI reads,
//! [`interactive`] is the terminal session (and `--record`), [`replay`]
//! replays logged traffic.

pub mod expect;
pub mod interactive;
pub mod junit;
pub mod replay;
pub mod script;

use std::{
    io::{IsTerminal, Write},
    path::{Path, PathBuf},
    time::Duration,
};

use megamind_core::{
    codec::{self, Format, structs::struct_from_json},
    proto::n_alice::n_scenarios::{TCallbackDirective, TInput, TScenarioRunRequest, t_input},
};
use prost_reflect::ReflectMessage;

use self::{
    expect::{Answer, Failure},
    script::{Loaded, TurnSpec},
};
use crate::client::{Client, ClientError, Ticket, Turn};

/// `dialog`'s command line.
#[derive(Debug, Clone, clap::Args)]
pub struct DialogArgs {
    /// The server to talk to.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub server: String,
    /// The scenario to talk to (a script's dialog may name its own).
    #[arg(long, default_value = "assistant")]
    pub scenario: String,
    /// Run these dialog scripts (YAML) instead of reading the terminal.
    #[arg(long, num_args = 1.., value_name = "FILE")]
    pub script: Vec<PathBuf>,
    /// Write a JUnit XML report of the scripts run (with --script).
    #[arg(long, value_name = "FILE", requires = "script")]
    pub junit: Option<PathBuf>,
    /// Write what was played as a script whose expectations are what came back.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Replay the requests of a server's debug log (`--log-level debug`) and report the answers that differ.
    #[arg(long, value_name = "LOG", conflicts_with_all = ["script", "junit", "record"])]
    pub replay: Option<PathBuf>,
    /// A field replay ignores besides the volatile ones (`Version`, `ServerTimeMs`, ...). Repeatable (with --replay).
    #[arg(long = "ignore", value_name = "FIELD", requires = "replay")]
    pub ignore: Vec<String>,
    /// Send each logged call with a RequestId of the replay's own (the same for a /run and its /continue), so that
    /// a server that saw the logged ones within its cache's TTL runs the calls rather than answer from its cache
    /// (with --replay).
    #[arg(long, requires = "replay")]
    pub fresh_ids: bool,
    /// A TVM service ticket sent with every call (`X-Ya-Service-Ticket`), for a server that checks who calls; the
    /// variable keeps it out of the process list.
    #[arg(long, value_name = "TICKET", env = "MEGAMIND_SERVICE_TICKET", hide_env_values = true)]
    pub service_ticket: Option<Ticket>,
    /// Each handler's budget: a slower answer is flagged.
    #[arg(long, default_value_t = 300, allow_negative_numbers = true)]
    pub budget_ms: u64,
    /// Print whole answers in text format, not only speech, cards, directives and state size.
    #[arg(short, long)]
    pub verbose: bool,
}

impl DialogArgs {
    /// The command line's defaults, talking to `server`: where a program
    /// (or a test) driving `dialog` starts.
    pub fn to(server: impl Into<String>) -> DialogArgs {
        DialogArgs {
            server: server.into(),
            scenario: "assistant".into(),
            script: Vec::new(),
            junit: None,
            record: None,
            replay: None,
            ignore: Vec::new(),
            fresh_ids: false,
            service_ticket: None,
            budget_ms: 300,
            verbose: false,
        }
    }
}

/// What ended a run that could not do its work (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unplayable(pub String);

/// Runs the command; returns its exit code.
pub fn main(args: &DialogArgs) -> u8 {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            crate::stdout::errln(&format!("dialog: cannot start: {error}"));
            return 2;
        }
    };
    let outcome = runtime.block_on(async {
        if let Some(log) = &args.replay {
            return replay::run(args, log).await;
        }
        if !args.script.is_empty() {
            return run_scripts(args).await;
        }
        // A session recorded is played to its end with nobody reading
        // (`dialog --record s.yaml | head -1`): the recording is still due.
        if args.record.is_some() {
            crate::stdout::keep_going_when_closed();
        }
        let stdin = std::io::stdin();
        // The hint and prompts are for a person typing; lines piped in
        // come from a program, which has no use for them.
        let mut prompt: Box<dyn Write> =
            if stdin.is_terminal() { Box::new(std::io::stderr()) } else { Box::new(std::io::sink()) };
        let input = std::io::BufReader::new(stdin);
        interactive::run(args, input, &mut crate::stdout::Stdout, &mut prompt).await
    });
    match outcome {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(Unplayable(message)) => {
            crate::stdout::errln(&format!("dialog: {message}"));
            2
        }
    }
}

/// How long a dialog waits for one answer. A server answers within its own
/// deadline, or answers `timeout`; one that says nothing at all is stuck,
/// and ends the run (exit 2) rather than hang a CI job until someone kills it.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The client of one dialog with `scenario` at `args.server`.
pub fn client(args: &DialogArgs, scenario: &str) -> Result<Client, Unplayable> {
    let client = Client::http(&args.server)
        .map_err(|e| Unplayable(format!("{}: {e}", crate::client::shown_address(&args.server))))?;
    let client = client.with_scenario(scenario).with_timeout(CALL_TIMEOUT);
    Ok(match &args.service_ticket {
        Some(ticket) => client.with_service_ticket(ticket.expose()),
        None => client,
    })
}

/// One turn of `spec` on `client`: its answer, or the protocol `Error` it got.
pub async fn play(client: &mut Client, spec: &TurnSpec) -> Result<Result<Turn, (String, String)>, Unplayable> {
    let played = if let Some(words) = &spec.say {
        client.say(words).await
    } else if let Some(words) = &spec.voice {
        client.say_voice(words).await
    } else if let Some(callback) = &spec.callback {
        let payload = Some(struct_from_json(callback.payload.clone()));
        let callback = TCallbackDirective { name: callback.name.clone(), payload, ..Default::default() };
        client.send(TInput { event: Some(t_input::Event::Callback(callback)), ..Default::default() }).await
    } else if let Some(result) = &spec.command_result {
        client.command_result(&result.output, result.exit_code, result.skipped).await
    } else {
        let text = spec.request.as_deref().unwrap_or_default();
        let request: TScenarioRunRequest = codec::decode(text.as_bytes(), Format::Text)
            .map_err(|e| Unplayable(format!("request: not a TScenarioRunRequest in text format: {e}")))?;
        client.send(request.input.unwrap_or_default()).await
    };
    match played {
        Ok(turn) => Ok(Ok(turn)),
        Err(ClientError::Protocol { kind, message, .. }) => Ok(Err((kind, message))),
        Err(ClientError::NoCommand) => Ok(Err(("no_command".into(), ClientError::NoCommand.to_string()))),
        Err(error) => Err(Unplayable(error.to_string())),
    }
}

/// What a played turn came to, for the checks.
pub fn answer_of(played: &Result<Turn, (String, String)>) -> (Answer<'_>, Vec<Duration>) {
    match played {
        Ok(turn) => (
            Answer { body: Some(turn.body()), irrelevant: turn.is_irrelevant(), error: None },
            turn.hops.iter().map(|hop| hop.took).collect(),
        ),
        Err(error) => (Answer { error: Some(error.clone()), ..Answer::default() }, Vec::new()),
    }
}

/// The result of one dialog of a script.
#[derive(Debug)]
pub struct DialogResult {
    /// Its name.
    pub name: String,
    /// How long it took.
    pub took: Duration,
    /// Its failures, each with the turn it happened in.
    pub failures: Vec<(String, Failure)>,
    /// Why the run stopped in this dialog (exit 2), with the turn: the
    /// server down or answering garbage.
    pub error: Option<(String, String)>,
}

impl DialogResult {
    /// Whether it failed an expectation or could not be played.
    pub fn failed(&self) -> bool {
        !self.failures.is_empty() || self.error.is_some()
    }
}

/// Runs every script; `true` when every expectation held.
async fn run_scripts(args: &DialogArgs) -> Result<bool, Unplayable> {
    // A report written over a script (the two names swapped) would lose it.
    if let Some(report) = &args.junit
        && let Some(script) = args.script.iter().find(|script| same_file(script, report))
    {
        return Err(Unplayable(format!(
            "--junit {} is the script {}: name another file for the report",
            report.display(),
            script.display()
        )));
    }
    // A report of an earlier run must not stand for this one, should it
    // stop before writing its own (a script that does not load).
    if let Some(path) = &args.junit
        && std::fs::symlink_metadata(path).is_ok_and(|meta| meta.is_file())
    {
        std::fs::remove_file(path).map_err(|e| Unplayable(format!("cannot replace {}: {e}", path.display())))?;
    }
    // Whoever reads the output may stop (`| grep -q`): the report, the
    // recording and the exit code are still due.
    crate::stdout::keep_going_when_closed();
    // Every script loads before any runs: a mistake costs nothing.
    let scripts = args
        .script
        .iter()
        .map(|path| script::load(path).map_err(|e| Unplayable(e.to_string())))
        .collect::<Result<Vec<Loaded>, _>>()?;
    let mut reports = Vec::new();
    let mut recorded = script::Script::default();
    // A server gone or answering garbage stops the run (exit 2), but what
    // was played until then still reaches the report and the recording:
    // a CI job shows which dialog it stopped in.
    let mut stopped = None;
    for loaded in &scripts {
        crate::outln!("{}", loaded.file);
        let mut results = Vec::new();
        for (dialog, expectations) in &loaded.dialogs {
            let scenario = dialog.scenario.as_deref().unwrap_or(&args.scenario);
            // The client's own RequestIds are unique to the run: a second run
            // is not answered from the server's idempotency cache.
            let mut client = client(args, scenario)?;
            let started = std::time::Instant::now();
            let mut result =
                DialogResult { name: dialog.name.clone(), took: Duration::ZERO, failures: Vec::new(), error: None };
            let mut turns = Vec::new();
            for (i, (spec, expectation)) in dialog.turns.iter().zip(expectations).enumerate() {
                let turn = format!("turn {} ({})", i + 1, interactive::describe(spec));
                let played = match play(&mut client, spec).await {
                    Ok(played) => played,
                    Err(Unplayable(why)) => {
                        result.error = Some((turn, why.clone()));
                        stopped = Some(Unplayable(why));
                        break;
                    }
                };
                let (answer, took) = answer_of(&played);
                result.failures.extend(expectation.check(&answer, &took).into_iter().map(|f| (turn.clone(), f)));
                turns.push(interactive::recorded_turn(spec, &answer));
            }
            // A dialog stopped at its first turn has nothing to record (a
            // script's dialog holds a turn at least).
            if !turns.is_empty() {
                recorded.dialogs.push(script::Dialog { turns, ..dialog.clone() });
            }
            result.took = started.elapsed();
            print_result(&result);
            results.push(result);
            if stopped.is_some() {
                break;
            }
        }
        reports.push((loaded.file.clone(), results));
        if stopped.is_some() {
            break;
        }
    }
    let total: usize = reports.iter().map(|(_, results)| results.len()).sum();
    let failed = reports.iter().flat_map(|(_, results)| results).filter(|r| r.failed()).count();
    crate::outln!("{total} dialogs: {} passed, {failed} failed", total - failed);
    if let Some(path) = &args.junit {
        crate::whole::write(path, junit::report(&reports).as_bytes())
            .map_err(|e| Unplayable(format!("cannot write {}: {e}", path.display())))?;
    }
    if let Some(path) = &args.record {
        if recorded.dialogs.is_empty() {
            crate::outln!("nothing was played: {} not written", path.display());
        } else {
            interactive::write_script(path, &recorded)?;
        }
    }
    match stopped {
        Some(why) => Err(why),
        None => Ok(failed == 0),
    }
}

/// Whether `a` and `b` name one file that exists.
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn print_result(result: &DialogResult) {
    let ms = result.took.as_millis();
    if !result.failed() {
        crate::outln!("  ✓ {} ({ms} ms)", result.name);
        return;
    }
    crate::outln!("  ✗ {} ({ms} ms)", result.name);
    if let Some((turn, why)) = &result.error {
        crate::outln!("      {turn}: could not be played: {why}");
    }
    for (turn, failure) in &result.failures {
        crate::outln!("      {turn}: {}", failure.path);
        crate::outln!("        - expected {}", failure.expected);
        crate::outln!("        + got      {:?}", failure.got);
    }
}

/// `body` in text format, for `-v` and replay.
pub fn text_of(message: &impl ReflectMessage) -> String {
    codec::text::print(&message.transcode_to_dynamic()).unwrap_or_else(|e| format!("<{e}>"))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::DialogArgs;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        args: DialogArgs,
    }

    #[test]
    fn a_programs_defaults_are_the_command_lines() {
        let parsed = Command::parse_from(["dialog", "--server", "http://h:1"]).args;
        assert_eq!(format!("{parsed:?}"), format!("{:?}", DialogArgs::to("http://h:1")));
    }

    #[test]
    fn a_replay_refuses_what_it_would_not_do() {
        // Scripts, their report and their recording: once skipped without a word.
        for other in [["--script", "a.yaml"], ["--junit", "out.xml"], ["--record", "out.yaml"]] {
            let args = ["dialog", "--replay", "debug.log", other[0], other[1]];
            let error = Command::try_parse_from(args).err().map(|e| e.kind());
            assert_eq!(error, Some(clap::error::ErrorKind::ArgumentConflict), "{args:?}");
        }
        assert!(Command::try_parse_from(["dialog", "--replay", "debug.log", "--ignore", "Version"]).is_ok());
    }
}
